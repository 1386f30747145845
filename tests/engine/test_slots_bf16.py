"""The published-model slots under bf16 autocast, as the engine runs them on CUDA.

No GPU is lent to these tests, so CPU autocast stands in for CUDA's: it catches a slot that mixes dtypes
(a float32 parameter meeting bf16 activations, a bf16 tensor reaching numpy), not CUDA-only kernels.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from sweep_engine.config import EngineConfig
from sweep_engine.labels import SEG
from sweep_engine.models import random_weights
from sweep_engine.pipeline import Engine
from sweep_engine.slots import run
from sweep_engine.synth.provider import synth_frames

ALL = dict(depth_model="depth-anything-v2-metric-vits", depth_input_side=70, segmenter="segformer-cityscapes",
           detector="coco/fasterrcnn_mobilenet_v3_large_320_fpn", batch_size=2, min_score=0.0)


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    m = random_weights(EngineConfig(**ALL), tmp_path_factory.mktemp("all"), seed=3, segmenter_side=64)
    return Engine(EngineConfig(**ALL, weights_manifest=str(m)))


def test_all_three_published_slots_run_together_under_bf16_autocast(engine):
    assert [s.name for s in engine.slots] == ["depth", "segmenter", "detector"]  # no sis-dense network left
    frames = synth_frames(seed=1, n=2)
    batch = engine.prepare([torch.from_numpy(f.rgb.copy()).permute(2, 0, 1) for f in frames])
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
        out = run(engine.slots, batch.tensors, engine.frame)
    assert out.depth.shape == (2, 192, 256) and out.seg.shape == (2, 192, 256) and len(out.detections) == 2
    outs = engine.to_outputs(out)
    assert outs[0].depth.dtype == np.float32 and np.isfinite(outs[0].depth).all()
    assert float(outs[0].depth.max()) <= 80.0
    assert set(np.unique(outs[0].seg)) <= set(SEG.values())
    for label, box, score in outs[0].detections:
        assert 0 <= box[0] <= box[2] <= 256 and 0 <= box[1] <= box[3] <= 192
