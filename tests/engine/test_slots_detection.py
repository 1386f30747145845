"""The COCO detector slot: torchvision's published 91-class heads, COCO labels mapped onto the engine's, the
detector's native input size with boxes brought back to the frame, and loading through the manifest.

The weights are UNTRAINED (seeded random init in torchvision's layout): these tests prove the plumbing.
"""
from __future__ import annotations

import tempfile

import pytest
import torch
from torch import nn

from sweep_engine import schema
from sweep_engine.config import EngineConfig
from sweep_engine.labels import COCO_TO_DET, DET_CLASSES
from sweep_engine.models import random_weights
from sweep_engine.pipeline import Engine
from sweep_engine.slots import Slot, coco, run
from sweep_engine.synth.provider import FakeProvider, jpeg, job_for, synth_frames
from sweep_engine.weights import WeightsError, pin

FAST = dict(backbone="mobilenetv3_small_100", detector="coco/fasterrcnn_mobilenet_v3_large_320_fpn", batch_size=2,
            fetch_timeout_s=5.0, min_score=0.0)


class Fixed(nn.Module):
    """Stands in for a torchvision detector: fixed COCO outputs, and its transform's sizes."""

    def __init__(self, labels):
        super().__init__()
        self.labels = labels
        self.transform = type("T", (), {"min_size": (800,), "max_size": 1333, "fixed_size": None})()

    def forward(self, images):
        n = len(self.labels)
        return [{"boxes": torch.tensor([[100.0, 200.0, 300.0, 400.0]] * n), "labels": torch.tensor(self.labels),
                 "scores": torch.linspace(0.9, 0.5, n)} for _ in images]


def test_the_published_head_has_coco_s_91_classes():
    model = coco.build("fasterrcnn_resnet50_fpn_v2")
    state = model.state_dict()
    assert state["roi_heads.box_predictor.cls_score.weight"].shape == (91, 1024)
    assert state["roi_heads.box_predictor.bbox_pred.weight"].shape == (91 * 4, 1024)
    assert model.transform.min_size == (800,) and model.transform.max_size == 1333
    with pytest.raises(ValueError, match="unknown COCO detector"):
        coco.build("yolo")


def test_coco_labels_become_the_engine_s_and_the_rest_are_dropped():
    table = coco.label_table()
    assert int(table[3]) == DET_CLASSES.index("car") + 1 and int(table[13]) == DET_CLASSES.index("sign") + 1
    assert int(table[1]) == DET_CLASSES.index("person") + 1 and int(table[8]) == DET_CLASSES.index("truck") + 1
    assert int(table[2]) == 0 and int(table[10]) == 0  # bicycle, traffic light: no engine class
    assert sorted(COCO_TO_DET.values()) == sorted(DET_CLASSES[int(i) - 1] for i in table if i > 0)
    det = coco.CocoDetector(Fixed([3, 2, 6, 13, 10]))
    (out,) = det([torch.zeros(3, 8, 8)])
    assert [DET_CLASSES[i - 1] for i in out["labels"].tolist()] == ["car", "bus", "sign"]
    assert out["scores"].tolist() == pytest.approx([0.9, 0.7, 0.6])


def test_photos_are_read_at_the_detector_s_native_size_and_boxes_come_back_to_the_frame():
    det = coco.CocoDetector(Fixed([3])).eval()
    assert det.input_size(256, 192) == (1067, 800)
    assert det.input_size(4000, 1000) == (1333, 333)  # the longer side's cap wins
    slot = Slot("detector", ("detections",), det, entry=None, size=(1067, 800))
    dense = Slot("dense", ("depth", "seg"), lambda x: (torch.ones(1, 192, 256), torch.zeros(1, 17, 192, 256), None),
                 entry=None, size=(256, 192))
    out = run([dense, slot], {(256, 192): torch.zeros(1, 3, 192, 256), (1067, 800): torch.zeros(1, 3, 800, 1067)},
              (256, 192))
    assert out.detections[0]["boxes"][0].tolist() == pytest.approx([100 * 256 / 1067, 200 * 192 / 800,
                                                                   300 * 256 / 1067, 400 * 192 / 800])


def test_a_coco_detector_loads_through_the_manifest_and_a_job_runs_end_to_end():
    frames = synth_frames(seed=2, n=3)

    async def go():
        provider = FakeProvider({f"p{i}": jpeg(f) for i, f in enumerate(frames)})
        await provider.start()
        try:
            with tempfile.TemporaryDirectory() as tmp:
                m = random_weights(EngineConfig(**FAST), tmp, seed=4)
                engine = Engine(EngineConfig(**FAST, weights_manifest=str(m)))
                slot = next(s for s in engine.slots if s.name == "detector")
                assert slot.entry.architecture == "coco/fasterrcnn_mobilenet_v3_large_320_fpn/k91"
                assert slot.size == (427, 320)
                saved = torch.load(m.parent / "detector.pt", weights_only=True)
                assert torch.equal(slot.module.model.state_dict()["roi_heads.box_predictor.cls_score.weight"],
                                   saved["roi_heads.box_predictor.cls_score.weight"])
                return await engine.run_job(job_for(frames, provider.base_url))
        finally:
            await provider.stop()

    import asyncio
    result = asyncio.run(go())
    again = schema.Result.from_json(result.to_json())
    assert [x.photo_id for x in again.measurements] == ["p0", "p1", "p2"] and not again.skipped
    for x in again.measurements:
        assert {o.label for o in x.objects} <= set(COCO_TO_DET.values())


def test_a_detector_file_with_another_head_is_refused(tmp_path):
    model = coco.build("fasterrcnn_mobilenet_v3_large_320_fpn")
    state = {k.replace("roi_heads.box_predictor.", "roi_heads.predictor."): v for k, v in model.state_dict().items()}
    torch.save(state, tmp_path / "detector.pt")
    m = random_weights(EngineConfig(**{**FAST, "detector": "sis-centres"}), tmp_path / "base", seed=1)
    (tmp_path / "dense.pt").write_bytes((m.parent / "dense.pt").read_bytes())
    manifest = tmp_path / "weights.json"
    pin(manifest, "dense", tmp_path / "dense.pt", "sis-dense/mobilenetv3_small_100/c64/k17/f0.8", license="t",
        provenance="t", trained=False)
    pin(manifest, "detector", tmp_path / "detector.pt", "coco/fasterrcnn_mobilenet_v3_large_320_fpn/k91",
        license="t", provenance="t", trained=False)
    with pytest.raises(WeightsError, match=r"4 missing key\(s\): roi_heads\.box_predictor\.bbox_pred\.bias.*"
                                           r"4 unexpected key\(s\): roi_heads\.predictor\."):
        Engine(EngineConfig(**FAST, weights_manifest=str(manifest)))


@pytest.mark.slow
def test_fasterrcnn_resnet50_fpn_v2_runs_at_its_native_800_px(tmp_path):
    """The detector docs/weights.md recommends, through the manifest, on a photo at its native size."""
    cfg = EngineConfig(**{**FAST, "detector": "coco/fasterrcnn_resnet50_fpn_v2"})
    m = random_weights(cfg, tmp_path, seed=2)
    engine = Engine(EngineConfig(**{**cfg.__dict__, "weights_manifest": str(m)}))
    assert next(s.size for s in engine.slots if s.name == "detector") == (1067, 800)
    frame = synth_frames(seed=5, n=1, width=640, height=480)[0]
    outs, _ = engine.infer([torch.from_numpy(frame.rgb.copy()).permute(2, 0, 1)])
    assert outs[0].depth.shape == (192, 256)
    for label, box, _ in outs[0].detections:
        assert label in COCO_TO_DET.values() and 0 <= box[0] <= box[2] <= 256 and 0 <= box[1] <= box[3] <= 192
