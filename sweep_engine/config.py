"""Engine settings: one table, each with its default and a help line.

Settings come from code (``EngineConfig(...)``), or from the environment with
the ``SIS_ENGINE_`` prefix (``SIS_ENGINE_BACKBONE=resnet18``) through
``EngineConfig.from_env()``.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from pathlib import Path

# The weights the engine ships with (trained on generated scenes; docs/weights.md), for the default architectures.
DEFAULT_WEIGHTS_MANIFEST = str(Path(__file__).resolve().parent / "default_weights" / "weights.json")


def _s(default, help_: str):
    return field(default=default, metadata={"help": help_})


@dataclass(frozen=True)
class EngineConfig:
    backbone: str = _s("mobilenetv3_small_100",
                       "timm architecture of the dense network's encoder (built with pretrained=False)")
    detector: str = _s("sis-centres",
                       "detection architecture: sis-centres (centre heatmap on the backbone; the shipped weights), "
                       "torchvision's fasterrcnn_* / ssdlite320_mobilenet_v3_large on the engine's classes, or "
                       "coco/<torchvision builder> (a published COCO detector, 91 classes; docs/engine.md)")
    depth_model: str = _s("sis-dense", "depth slot: sis-dense (the dense network's depth head; the shipped weights) "
                          "or depth-anything-v2-metric-vits (-vitb, -vitl): Depth Anything V2 metric, manifest "
                          "entry 'depth'")
    depth_input_side: int = _s(518, "shorter side, pixels, that a Depth Anything V2 depth slot reads photos at "
                               "(aspect kept, multiples of 14; 518 is its native size)")
    segmenter: str = _s("sis-dense", "segmentation slot: sis-dense (the dense network's class head; the shipped "
                        "weights) or segformer-cityscapes (a transformers SegFormer folder, manifest entry "
                        "'segmenter')")
    weights_manifest: str | None = _s(DEFAULT_WEIGHTS_MANIFEST, "path of the weights manifest (JSON) naming the "
                                      "dense and detector weight files with their sha256; default: the shipped "
                                      "weights (docs/weights.md); empty: none, the engine refuses to run")
    input_height: int = _s(192, "height in pixels of the frame the geometry reads (and the sis-* networks' "
                            "input); other slots read the photo at their own size, their outputs resized to it")
    input_width: int = _s(256, "width in pixels of that frame")
    decoder_channels: int = _s(64, "channels of the dense network's decoder")
    dense_focal: float = _s(0.8, "the focal length, as a multiple of the frame's larger side, that the dense "
                            "network's depth was trained for (python -m sweep_engine.train --canonical-focal; "
                            "the shipped weights: 0.8): its metres are rescaled to a photo's measured focal "
                            "length, as Depth Anything's are, and its focal head's reading checks that focal "
                            "length; 0: a network whose depth is metric for each photo's own camera")
    max_depth_m: float = _s(80.0, "largest depth the depth head can output, metres (Depth Anything V2 metric: "
                            "80 for its outdoor models, 20 for the indoor ones)")
    device: str = _s("auto", "torch device: auto (CUDA when present, else CPU), cpu, cuda, cuda:N")
    batch_size: int = _s(8, "photos per forward pass")
    bf16: bool = _s(True, "bf16 autocast on CUDA (ignored on the CPU, which runs float32)")
    min_score: float = _s(0.3, "detections below this score are ignored (0.3: chosen for the shipped detector on "
                                "validation scenes)")
    geometry_workers: int = _s(0, "processes measuring photos' geometry beside the networks (calibration, road "
                               "width, objects: on a GPU most of a photo's time); 0: in the job's own thread")
    fetch_concurrency: int = _s(8, "photos fetched at once from the provider")
    fetch_timeout_s: float = _s(20.0, "timeout for one photo's fetch, seconds")
    max_photo_bytes: int = _s(25_000_000, "largest photo accepted, bytes (a larger one is skipped)")
    camera_height_m: float | None = _s(None, "camera height above the ground when known, metres (else a "
                                              "1.65 m prior, recorded as assumed, that calibration may move)")

    @classmethod
    def from_env(cls, environ=None, **overrides) -> EngineConfig:
        environ = os.environ if environ is None else environ
        values = {}
        for f in fields(cls):
            raw = environ.get(f"SIS_ENGINE_{f.name.upper()}")
            if raw is None:
                continue
            kind = type(f.default) if f.default is not None else str
            if f.name == "camera_height_m":
                kind = float
            values[f.name] = raw.lower() in ("1", "true", "yes") if kind is bool else kind(raw)
        values.update(overrides)
        return cls(**values)


SETTINGS = {f.name: (f.default, f.metadata["help"]) for f in fields(EngineConfig)}
