"""An independent plain-road renderer, for held-out evaluation only: never used in training.

Written apart from ``sweep_engine.synth`` (its own scene description, ray
casting, textures, markings, verges, sky and lighting), so that a network
trained on the generator's look is measured on a look it has not seen, with
exact truth: the road's width, the camera's focal length, height and pitch.
``bench/accuracy.py`` runs it beside the generator's own held-out set.
"""
from .render import PlainRoad, PlainFrame, plain_road, render_plain

__all__ = ["PlainRoad", "PlainFrame", "plain_road", "render_plain"]
