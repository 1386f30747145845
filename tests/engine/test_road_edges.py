"""The road edges' check against the photo's own lines (``road_edges``), on crafted plain road scenes from
the independent renderer: an exact mask agrees with the lines, a mask that takes a grass verge for road
is rejected, so is one that stops on the centre line with the road going on past it, and the vanishing
point is found from the image alone."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from sweep_engine import road_edges
from sweep_engine.camera import Camera
from sweep_engine.geometry import measure_photo
from sweep_engine.heldout import PlainRoad, plain_road, render_plain
from sweep_engine.labels import SEG
from sweep_engine.measure import road_width

GRASS = ((("grass", 6.0),), (("grass", 6.0),))


def scene(**kw) -> PlainRoad:
    base = dict(seed=7, width=256, height=192, focal_px=200.0, camera_height_m=1.6, pitch_deg=-2.0, yaw_deg=4.0,
                camera_x_m=-1.2, road_width_m=7.0, verges=GRASS, backdrops=("open", "open"), edge_lines=False,
                centre_line="none", shadows=0.0, blur_px=0.4, noise=2.0, jpeg_quality=90)
    base.update(kw)
    return PlainRoad(**base)


def camera(sc: PlainRoad) -> Camera:
    return Camera.simple(sc.width, sc.height, sc.focal_px, heading_deg=sc.yaw_deg % 360.0, pitch_deg=sc.pitch_deg,
                         height_m=sc.camera_height_m, focal_basis="measured", height_basis="measured",
                         pitch_basis="measured")


def depth_of(frame) -> np.ndarray:
    return np.where(np.isfinite(frame.depth), frame.depth, 80.0).astype(np.float32)


MARKED = dict(edge_lines=True, centre_line="dashed",
              verges=((("kerb", 0.2), ("sidewalk", 2.5)), (("kerb", 0.2), ("sidewalk", 2.5))))


@pytest.mark.parametrize("yaw", [-6.0, 0.0, 4.0, 9.0])
def test_the_vanishing_point_comes_from_the_image_alone(yaw):
    """Found within 15 px at 256 px (it reads 6-12 px left of the truth here: the bias is not understood
    yet; the check's tolerance absorbs it, docs/engine.md)."""
    sc = scene(yaw_deg=yaw, **MARKED)
    fr = render_plain(sc)
    cam = camera(sc)
    true_u = float(cam.project(np.array([[0.0, 1e6, 0.0]]))[0][0])   # the road runs north: far along it
    assert road_edges.vanishing_u(cam, road_edges.to_grey(fr.rgb)) == pytest.approx(true_u, abs=15.0)


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("marked", [False, True])
def test_an_exact_road_mask_lies_on_the_photos_lines(seed, marked):
    sc = scene(seed=seed, **(MARKED if marked else {}))
    fr = render_plain(sc)
    est = road_width(camera(sc), depth_of(fr), fr.seg, plane=True)
    chk = road_edges.check(camera(sc), road_edges.to_grey(fr.rgb), est.left, est.right)
    assert chk.agrees is not None and not chk.rejects, chk.evidence()
    left, right = chk.mask_edges_m
    # read across the vanishing point's direction (a few pixels off, above), from each edge's own rows: the
    # check's tolerance, not the width's
    assert right - left == pytest.approx(7.0, rel=road_edges.EDGE_TOLERANCE_REL)
    assert est.width_m == pytest.approx(7.0, rel=0.01)


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("verge", ["sidewalk", "gravel"])
def test_a_mask_that_takes_the_verge_for_road_is_rejected(seed, verge):
    """The network's failure on unseen scenes: a verge labelled road 1.5 m beyond each edge. The mask is
    that of the same view of a road 3 m wider; the photo shows no line where it ends. (A grass or dirt
    verge's coarse blotches still make lines everywhere at 256 px: there the check cannot tell,
    docs/engine.md.)"""
    sc = scene(seed=seed, verges=(((verge, 6.0),), ((verge, 6.0),)))
    fr = render_plain(sc)
    bloated = render_plain(dataclasses.replace(sc, road_width_m=10.0)).seg
    est = road_width(camera(sc), depth_of(fr), bloated, plane=True)
    assert est is not None and est.width_m == pytest.approx(10.0, rel=0.02)   # the mask alone is believed
    chk = road_edges.check(camera(sc), road_edges.to_grey(fr.rgb), est.left, est.right)
    assert chk.rejects and chk.agrees is False and "no line" in chk.reason

    pm, ev = measure_photo("p", "t", camera(sc), depth_of(fr), bloated, [], image=fr.rgb)
    assert pm.road is None and ev["roadEdges"]["rejected"] is True
    pm, ev = measure_photo("p", "t", camera(sc), depth_of(fr), fr.seg, [], image=fr.rgb)
    assert pm.road is not None and pm.road.width_m == pytest.approx(7.0, rel=0.02)
    assert ev["roadEdges"]["agrees"] is True



def one_lane(seg: np.ndarray) -> np.ndarray:
    """The network's other failure: the far lane labelled sidewalk, the mask ending on the centre line."""
    out = seg.copy()
    road = SEG["road"]
    for y in range(seg.shape[0]):
        xs = np.flatnonzero(seg[y] == road)
        if len(xs):
            out[y, (xs[0] + xs[-1]) // 2 + 1:xs[-1] + 1] = SEG["sidewalk"]
    return out


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_mask_that_ends_on_the_centre_line_is_rejected_where_the_road_goes_on(seed):
    """The centre line is a line along the road, so the line check passes the mask (half the width, both
    edges on lines); the ground beyond its right edge looks like the road inside it, and the width is
    withheld. The exact mask of the same photo is kept."""
    sc = scene(seed=seed, **MARKED)
    fr = render_plain(sc)
    half = one_lane(fr.seg)
    est = road_width(camera(sc), depth_of(fr), half, plane=True)
    assert est is not None and est.width_m < 0.6 * 7.0          # about half the road
    lines_only = road_edges.check(camera(sc), road_edges.to_grey(fr.rgb), est.left, est.right)
    assert not lines_only.rejects, lines_only.evidence()

    pm, ev = measure_photo("p", "t", camera(sc), depth_of(fr), half, [], image=fr.rgb)
    assert pm.road is None and ev["roadEdges"]["rejected"] is True, ev["roadEdges"]
    left, right = ev["roadEdges"]["contrastBeyond"]
    assert right < road_edges.CONTINUES_CONTRAST < left
    assert "goes on past the mask's right edge" in ev["roadEdges"]["reason"]
    pm, ev = measure_photo("p", "t", camera(sc), depth_of(fr), fr.seg, [], image=fr.rgb)
    assert pm.road is not None and pm.road.width_m == pytest.approx(7.0, rel=0.02)
    assert min(ev["roadEdges"]["contrastBeyond"]) > road_edges.CONTINUES_CONTRAST

def test_without_an_image_the_mask_is_taken_as_it_is():
    sc = scene()
    fr = render_plain(sc)
    bloated = render_plain(dataclasses.replace(sc, road_width_m=10.0)).seg
    pm, ev = measure_photo("p", "t", camera(sc), depth_of(fr), bloated, [])
    assert pm.road is not None and "roadEdges" not in ev


def test_the_independent_renderers_truth_matches_the_engines_geometry():
    """Its scenes' exact depth and classes give the engine's road width within 1 % (the renderer and the
    engine's camera conventions agree), on its own random scenes."""
    measured = 0
    for i in range(10):
        sc = dataclasses.replace(plain_road(50 + i), width=256, height=192)
        sc = dataclasses.replace(sc, focal_px=plain_road(50 + i).focal_px / 2)
        fr = render_plain(sc)
        est = road_width(camera(sc), depth_of(fr), fr.seg, plane=True)
        if est is None:
            continue
        measured += 1
        assert est.width_m == pytest.approx(sc.road_width_m, rel=0.01), i
    assert measured >= 8
