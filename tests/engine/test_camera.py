"""The pinhole camera: projection, ground plane, georeferencing and intrinsics from metadata."""
from __future__ import annotations

import math

import numpy as np
import pytest

from sweep_engine import camera as C
from sweep_engine.schema import PhotoRef


def test_project_inverts_points_for_any_pose():
    cam = C.Camera.simple(640, 480, 500.0, heading_deg=37.0, pitch_deg=-3.0, height_m=2.1)
    rng = np.random.default_rng(1)
    u, v, d = rng.uniform(0, 640, 50), rng.uniform(0, 480, 50), rng.uniform(2, 80, 50)
    pu, pv, pz = cam.project(cam.points(u, v, d))
    np.testing.assert_allclose(pu, u, atol=1e-9)
    np.testing.assert_allclose(pv, v, atol=1e-9)
    np.testing.assert_allclose(pz, d, atol=1e-9)


def test_ground_depth_is_f_h_over_rows_below_horizon_at_zero_pitch():
    cam = C.Camera.simple(640, 480, 500.0, height_m=1.65)
    v = np.array([300.0, 400.0, 470.0])
    np.testing.assert_allclose(cam.ground_depth(320.0, v), 500.0 * 1.65 / (v - 240.0))
    assert math.isnan(float(cam.ground_depth(320.0, 200.0)))  # above the horizon


def test_pitch_error_of_0_7_degrees_at_30_m_is_about_23_percent():
    """The figure the issue quotes: why pitch must be calibrated, not assumed."""
    true = C.Camera.simple(1920, 1080, 1400.0, height_m=1.65)
    v = float(true.project(np.array([[0.0, 30.0, 0.0]]))[1][0])
    errors = [abs(float(true.with_(pitch_deg=p).ground_depth(960.0, v)) / 30.0 - 1) for p in (0.7, -0.7)]
    assert 0.15 < min(errors) < max(errors) < 0.30
    assert sum(errors) / 2 == pytest.approx(0.23, abs=0.01)


def test_heading_points_the_optical_axis_and_bearings_follow_it():
    cam = C.Camera.simple(100, 100, 50.0, heading_deg=90.0)
    e, n, up = cam.points(50.0, 50.0, 10.0)
    assert (e, n) == pytest.approx((10.0, 0.0))
    assert float(C.bearing_deg(e, n)) == pytest.approx(90.0)


def test_lonlat_offsets_round_trip_and_scale_with_latitude():
    lon, lat = C.offset_lonlat(13.4, 52.5, 100.0, -50.0)
    e, n = C.lonlat_offset(13.4, 52.5, lon, lat)
    assert (float(e), float(n)) == pytest.approx((100.0, -50.0), abs=1e-6)
    assert float(lat) - 52.5 == pytest.approx(-50.0 / 111_319.5, rel=1e-3)


def test_focal_from_exif_and_sensor_table_is_measured():
    f, basis, how = C.focal_px_from_metadata(4000, 3000, focal_mm=3.0, make="GoPro", model="HERO7 Black")
    assert f == pytest.approx(3.0 * 4000 / 6.17) and basis == "measured" and "sensor" in how


def test_focal_from_35mm_equivalent_is_measured():
    f, basis, _ = C.focal_px_from_metadata(4000, 3000, focal_35mm=28.0)
    assert f == pytest.approx(28.0 * 4000 / 36.0) and basis == "measured"


def test_missing_focal_falls_back_to_the_prior_and_says_assumed():
    f, basis, how = C.focal_px_from_metadata(4000, 3000, focal_mm=3.0, make="Nobody", model="X")
    assert f == pytest.approx(0.85 * 4000) and basis == "assumed" and "prior" in how


def test_camera_for_photo_scales_intrinsics_to_the_decoded_size():
    p = PhotoRef(id="p", lon=1.0, lat=2.0, captured_at="2025-01-01T00:00:00Z", width=4000, height=3000,
                 url="http://x/p", license="CC0-1.0", provider="t", heading=45.0, pitch=None,
                 focal_mm=24.0, sensor_width_mm=36.0)
    cam = C.camera_for_photo(p, 400, 300)
    assert cam.fx == pytest.approx(266.6667, rel=1e-4) and (cam.cx, cam.cy) == (200.0, 150.0)
    assert cam.focal_basis == "measured" and cam.pitch_basis == "assumed" and cam.height_basis == "assumed"
    assert cam.heading_deg == 45.0 and (cam.lon, cam.lat) == (1.0, 2.0)
