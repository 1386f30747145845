"""The street segmentation slot: a Cityscapes SegFormer folder loaded by ``transformers`` from a pinned local
folder, its 19 classes mapped onto the engine's, and a job end to end on the CPU.

The weights are UNTRAINED (a seeded random SegFormer-B0 for Cityscapes, saved as ``save_pretrained`` writes
it): these tests prove the loading, the refusals and the class mapping, not what the classes are worth.
"""
from __future__ import annotations

import asyncio
import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from sweep_engine import schema
from sweep_engine.config import EngineConfig
from sweep_engine.labels import CITYSCAPES_CLASSES, CITYSCAPES_TO_SEG, SEG, SEG_CLASSES
from sweep_engine.models import random_weights
from sweep_engine.pipeline import Engine
from sweep_engine.synth.provider import FakeProvider, jpeg, job_for, synth_frames
from sweep_engine.weights import WeightsError, pin, sha256_dir

SEGF = dict(segmenter="segformer-cityscapes", backbone="mobilenetv3_small_100", detector="sis-centres",
            batch_size=2, fetch_timeout_s=5.0)


@pytest.fixture(scope="module")
def manifest(tmp_path_factory):
    return random_weights(EngineConfig(**SEGF), tmp_path_factory.mktemp("segf"), seed=9, segmenter_side=64)


@pytest.fixture(scope="module")
def engine(manifest):
    return Engine(EngineConfig(**SEGF, weights_manifest=str(manifest)))


def _copy(manifest, tmp_path):
    """The module's weights copied beside a new manifest (the segmenter folder to be altered), pinned as they are."""
    for f in ("dense.pt", "detector.pt"):
        shutil.copy(manifest.parent / f, tmp_path / f)
    shutil.copytree(manifest.parent / "segmenter", tmp_path / "segmenter")
    return tmp_path / "weights.json"


def _pin_all(m, tmp_path):
    pin(m, "dense", tmp_path / "dense.pt", "sis-dense/mobilenetv3_small_100/c64/k17/f0.8", license="t", provenance="t")
    pin(m, "detector", tmp_path / "detector.pt", "sis-centres/mobilenetv3_small_100/c64/k9", license="t",
        provenance="t")
    pin(m, "segmenter", tmp_path / "segmenter", "segformer-cityscapes", license="t", provenance="t")


def test_every_cityscapes_class_maps_onto_an_engine_class():
    assert len(CITYSCAPES_CLASSES) == 19 and set(CITYSCAPES_TO_SEG) == set(CITYSCAPES_CLASSES)
    assert set(CITYSCAPES_TO_SEG.values()) <= set(SEG_CLASSES)
    assert CITYSCAPES_TO_SEG["road"] == "road" and CITYSCAPES_TO_SEG["sidewalk"] == "sidewalk"
    assert CITYSCAPES_TO_SEG["sky"] == "sky" and CITYSCAPES_TO_SEG["car"] == "vehicle"


def test_the_folder_is_pinned_and_loaded_by_transformers_at_its_processor_s_size(engine, manifest):
    slot = next(s for s in engine.slots if s.name == "segmenter")
    assert slot.entry.sha256 == sha256_dir(manifest.parent / "segmenter")
    assert slot.size == (96, 64)  # 64 px short side from preprocessor_config.json, the frame's 4:3 kept
    assert [s.roles for s in engine.slots if s.name == "dense"] == [("depth",)]
    assert type(slot.module.model).__name__ == "SegformerForSemanticSegmentation"


def test_the_model_s_classes_come_out_as_the_engine_s(engine):
    seg = next(s for s in engine.slots if s.name == "segmenter").module
    classifier = seg.model.decode_head.classifier
    saved, saved_w = classifier.bias.detach().clone(), classifier.weight.detach().clone()
    try:
        with torch.no_grad():
            classifier.weight.zero_()
            classifier.bias.fill_(-10.0)
            classifier.bias[CITYSCAPES_CLASSES.index("sidewalk")] = 10.0
            out = seg(torch.rand(1, 3, 64, 96), size=(48, 64))
        assert out.shape == (1, 48, 64) and bool((out == SEG["sidewalk"]).all())
        with torch.no_grad():
            classifier.bias.fill_(-10.0)
            classifier.bias[CITYSCAPES_CLASSES.index("rider")] = 10.0
            assert bool((seg(torch.rand(1, 3, 64, 96)) == SEG["person"]).all())
    finally:  # the engine is shared by the module's tests: its weights are put back
        with torch.no_grad():
            classifier.bias.copy_(saved)
            classifier.weight.copy_(saved_w)


def test_a_changed_file_in_the_folder_is_refused_by_its_sha256(manifest, tmp_path):
    m = _copy(manifest, tmp_path)
    _pin_all(m, tmp_path)
    cfg = json.loads((tmp_path / "segmenter" / "config.json").read_text())
    cfg["semantic_loss_ignore_index"] = 254
    (tmp_path / "segmenter" / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(WeightsError, match=r"weights folder .*segmenter has sha256 .* refusing"):
        Engine(EngineConfig(**SEGF, weights_manifest=str(m)))


def test_weights_that_do_not_fill_the_model_are_refused_naming_the_keys(manifest, tmp_path):
    m = _copy(manifest, tmp_path)
    weights = tmp_path / "segmenter" / "model.safetensors"
    state = load_file(str(weights))
    dropped = next(k for k in state if k.endswith("decode_head.classifier.weight"))
    state.pop(dropped)
    state["decode_head.extra.weight"] = torch.zeros(2)
    save_file(state, str(weights), metadata={"format": "pt"})
    _pin_all(m, tmp_path)
    with pytest.raises(WeightsError, match=r"not in the SegFormer layout.*missing keys: .*classifier\.weight.*"
                                           r"unexpected keys: .*decode_head\.extra\.weight"):
        Engine(EngineConfig(**SEGF, weights_manifest=str(m)))


def test_a_model_with_other_classes_is_refused(manifest, tmp_path):
    m = _copy(manifest, tmp_path)
    cfg = json.loads((tmp_path / "segmenter" / "config.json").read_text())
    cfg["id2label"] = {**cfg["id2label"], "0": "flat-road"}  # Mapillary-style names: not mapped by guess
    (tmp_path / "segmenter" / "config.json").write_text(json.dumps(cfg))
    _pin_all(m, tmp_path)
    with pytest.raises(WeightsError, match="not Cityscapes' 19"):
        Engine(EngineConfig(**SEGF, weights_manifest=str(m)))


def test_a_job_runs_end_to_end_with_the_segformer_slot(engine):
    frames = synth_frames(seed=2, n=3)

    async def go():
        provider = FakeProvider({f"p{i}": jpeg(f) for i, f in enumerate(frames)})
        await provider.start()
        try:
            return await engine.run_job(job_for(frames, provider.base_url))
        finally:
            await provider.stop()

    again = schema.Result.from_json(asyncio.run(go()).to_json())
    assert [x.photo_id for x in again.measurements] == ["p0", "p1", "p2"] and not again.skipped
    outs, _ = engine.infer([torch.from_numpy(f.rgb.copy()).permute(2, 0, 1) for f in frames[:1]])
    allowed = {SEG[c] for c in CITYSCAPES_TO_SEG.values()}
    assert outs[0].seg.shape == (192, 256) and set(outs[0].seg.flatten().tolist()) <= allowed


def test_without_transformers_the_slot_says_it_is_not_carried(manifest, monkeypatch):
    """The node app is built without transformers: configuring the SegFormer slot there is a
    WeightsError naming what is missing, not an ImportError traceback."""
    import sys
    monkeypatch.setitem(sys.modules, "transformers", None)          # import transformers now raises ImportError
    with pytest.raises(WeightsError, match="needs the transformers package, which this build does not carry"):
        Engine(EngineConfig(**SEGF, weights_manifest=str(manifest)))
