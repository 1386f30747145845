"""The sis-centres detector's targets and decoding agree: perfect heads give back the boxes they were made from."""
from __future__ import annotations

import torch

from sweep_engine.config import EngineConfig
from sweep_engine.models import CentreDetector, build_detector, detector_architecture


def perfect_heads(det: CentreDetector, targets, h: int, w: int):
    """Heat logits and edge distances a perfect network would output for ``targets``."""
    s = det.stride
    heats, ltrbs = [], []
    for t in targets:
        heat, boxes, weight = det._targets(t, h, w)
        cy = (torch.arange(h, dtype=torch.float32) + 0.5)[:, None] * s
        cx = (torch.arange(w, dtype=torch.float32) + 0.5)[None, :] * s
        ltrb = torch.stack([cx - boxes[..., 0], cy - boxes[..., 1], boxes[..., 2] - cx, boxes[..., 3] - cy])
        heats.append(torch.logit(heat.clamp(1e-6, 1 - 1e-6)))
        ltrbs.append(ltrb.clamp(min=0.25))
    return torch.stack(heats), torch.stack(ltrbs)


def test_decoding_perfect_heads_returns_the_target_boxes_and_labels():
    torch.manual_seed(0)
    det = build_detector(EngineConfig(detector="sis-centres")).eval()
    assert isinstance(det, CentreDetector) and det.stride == 4
    assert detector_architecture(EngineConfig(detector="sis-centres")) == "sis-centres/mobilenetv3_small_100/c64/k9"
    boxes = torch.tensor([[20.0, 100.0, 80.0, 150.0], [150.0, 40.0, 158.0, 170.0], [200.0, 120.0, 250.0, 160.0]])
    labels = torch.tensor([1, 5, 2])
    targets = [{"boxes": boxes, "labels": labels}]
    heat, ltrb = perfect_heads(det, targets, 48, 64)
    (out,) = det.decode(heat, ltrb, (192, 256))
    keep = out["scores"] > 0.9
    got = sorted(zip(out["labels"][keep].tolist(), out["boxes"][keep].tolist()))
    want = sorted(zip(labels.tolist(), boxes.tolist()))
    assert [g[0] for g in got] == [w[0] for w in want]
    for (_, gb), (_, wb) in zip(got, want):
        assert max(abs(a - b) for a, b in zip(gb, wb)) < 1.0, (gb, wb)


def test_the_losses_are_small_for_perfect_heads_and_large_for_a_blank_network():
    det = build_detector(EngineConfig(detector="sis-centres"))
    targets = [{"boxes": torch.tensor([[30.0, 60.0, 90.0, 120.0]]), "labels": torch.tensor([1])}]
    heat, ltrb = perfect_heads(det, targets, 48, 64)
    good = det.losses(heat, ltrb, targets)
    blank = det.losses(torch.full_like(heat, -4.6), torch.full_like(ltrb, 4.0), targets)
    # CenterNet's focal loss is not zero at a perfect heatmap (cells near a centre are half-penalised), but far
    # below a blank one's.
    assert good["box_log_l1"] < 1e-4 and blank["box_log_l1"] > 1.0
    assert good["centre_focal"] < 0.15 * blank["centre_focal"] and blank["centre_focal"] > 4.0
