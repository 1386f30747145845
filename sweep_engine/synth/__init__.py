"""Synthetic street scenes with exact ground truth, for tests, benchmarks and (later) training.

``street_scene(seed)`` lays out a street; ``render(scene)`` ray-casts it into a
``Frame`` (RGB, z-depth, classes, instances, per-object truth); ``drive`` moves
the camera along the road for multi-frame sequences.  Deterministic by seed.
"""
from .render import Frame, ObjectTruth, render
from .scene import Box, Scene, Street, drive, person, pole, sign, street_scene, vehicle

__all__ = ["Box", "Frame", "ObjectTruth", "Scene", "Street", "drive", "person", "pole", "render", "sign",
           "street_scene", "vehicle"]
