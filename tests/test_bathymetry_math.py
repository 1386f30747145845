"""Bathymetry arithmetic against synthetic GEBCO-layout grids (written here with netCDF4)
whose answers are known in closed form: volumes on the sphere within 0.1 %, a ring across
the antimeridian, a profile's bilinear interpolation, the measured share from a crafted TID
grid, missing cells counted as unknown, and the ring and path checks."""
from __future__ import annotations

import math

import numpy as np
import pytest

from coordinator.core.errors import BadParameter
from coordinator.grids import bathymetry, synthetic
from coordinator.grids.reader import Grid, GridFormatError
from coordinator.grids.shapes import geometry_area_m2, ring_polygon, span_deg
from coordinator.grids.sphere import EARTH_RADIUS_M

R2 = EARTH_RADIUS_M ** 2
BOX = (10.0, -5.0, 14.0, -1.0)


def grid(tmp_path, elevation, tid, box=BOX, cell=1 / 60, **kw) -> Grid:
    e, t = synthetic.write_pair(tmp_path, box, cell, elevation, tid, **kw)
    return Grid(e, t)


def constant(v):
    return lambda lon, lat: np.full(lon.shape, v)


def stats(g: Grid, ring) -> dict:
    poly = ring_polygon(ring)
    return bathymetry.stats(bathymetry.coverage(g, poly))


def rect(w, s, e, n):
    return [(w, s), (e, s), (e, n), (w, n), (w, s)]


def band(s, n):
    return math.sin(math.radians(n)) - math.sin(math.radians(s))


@pytest.mark.parametrize("fmt", ["NETCDF3_CLASSIC", "NETCDF4"])
def test_volume_under_a_rectangle_off_the_cell_edges_matches_the_sphere(tmp_path, fmt):
    g = grid(tmp_path, constant(-4000), constant(11), fmt=fmt)
    st = stats(g, rect(10.3037, -4.2919, 11.1111, -3.0071))
    exact = 4000 * R2 * math.radians(11.1111 - 10.3037) * band(-4.2919, -3.0071)
    assert st["volumeM3"] == pytest.approx(exact, rel=1e-3)
    assert st["waterM2"] == pytest.approx(exact / 4000, rel=1e-6)
    assert st["knownM2"] == pytest.approx(st["ringM2"], rel=1e-6)     # a cut cell's share is taken flat
    assert st["deepest"]["depthM"] == 4000


def test_volume_of_a_depth_that_grows_with_latitude(tmp_path):
    # depth = a + b * (lat + 5) metres; the volume is R^2 dlon * integral of (A + B phi) cos(phi)
    a, b = 1000.0, 400.0
    g = grid(tmp_path, lambda lon, lat: np.round(-(a + b * (lat + 5))), constant(11), cell=1 / 120)
    s, n, w, e = -4.6, -1.4, 10.2, 13.9
    big_a, big_b = a + 5 * b, b * 180 / math.pi      # depth = big_a + big_b * phi (radians)

    def primitive(p):
        return big_a * math.sin(p) + big_b * (math.cos(p) + p * math.sin(p))

    exact = R2 * math.radians(e - w) * (primitive(math.radians(n)) - primitive(math.radians(s)))
    st = stats(g, rect(w, s, e, n))
    assert st["volumeM3"] == pytest.approx(exact, rel=1e-3)
    assert st["deepest"]["depthM"] == pytest.approx(a + b * (n + 5), abs=b / 120 + 1)


def test_volume_under_a_triangle_with_a_sloping_edge(tmp_path):
    g = grid(tmp_path, constant(-2500), constant(40))
    l0, p0, l1, p1 = 10.5, -4.5, 13.2, -1.7
    st = stats(g, [(l0, p0), (l1, p0), (l0, p1)])
    f0, f1 = math.radians(p0), math.radians(p1)

    def primitive(p):      # integral of (phi1 - phi) cos(phi)
        return f1 * math.sin(p) - (math.cos(p) + p * math.sin(p))

    area = R2 * math.radians(l1 - l0) / (f1 - f0) * (primitive(f1) - primitive(f0))
    assert st["ringM2"] == pytest.approx(area, rel=1e-9)            # Green's theorem, closed form
    assert st["waterM2"] == pytest.approx(area, rel=1e-4)            # cells and their shares
    assert st["volumeM3"] == pytest.approx(2500 * area, rel=1e-3)
    assert st["measuredM2"] == 0 and st["estimatedM2"] == pytest.approx(st["waterM2"])


def test_a_ring_across_the_antimeridian_is_the_small_ring_it_means(tmp_path):
    # A band all round the Earth: 3000 m east of Greenwich, 5000 m west of it.
    g = grid(tmp_path, lambda lon, lat: np.where(lon > 0, -3000, -5000), constant(11),
             box=(-180, -12, 180, -8), cell=1 / 20)
    assert g.wraps
    exact = R2 * math.radians(0.5) * band(-10.4, -9.6) * (3000 + 5000)
    for ring in ([(179.5, -10.4), (-179.5, -10.4), (-179.5, -9.6), (179.5, -9.6)],
                 [(-179.5, -10.4), (-179.5, -9.6), (179.5, -9.6), (179.5, -10.4)]):
        poly = ring_polygon(ring)
        assert span_deg(poly) == pytest.approx(1.0)
        st = bathymetry.stats(bathymetry.coverage(g, poly))
        assert st["volumeM3"] == pytest.approx(exact, rel=1e-3)
        assert st["deepest"]["depthM"] == 5000 and -180 <= st["deepest"]["lon"] < -179.5


def test_measured_share_comes_from_the_tid_classes(tmp_path):
    # West of 12 E multibeam (11), east of it gravity-predicted (40); north of -2 land (0, +50 m).
    g = grid(tmp_path, lambda lon, lat: np.where(lat > -2, 50, -3000),
             lambda lon, lat: np.where(lat > -2, 0, np.where(lon < 12, 11, 40)))
    half = stats(g, rect(11.5, -4, 12.5, -3))
    assert half["measuredM2"] / half["waterM2"] == pytest.approx(0.5, abs=1e-6)
    quarter = stats(g, rect(11.75, -4, 12.75, -3))
    assert quarter["measuredM2"] / quarter["waterM2"] == pytest.approx(0.25, abs=1e-6)
    land = stats(g, rect(11.5, -2.5, 12.5, -1.5))
    assert land["waterM2"] / land["knownM2"] == pytest.approx(band(-2.5, -2) / band(-2.5, -1.5), rel=1e-6)
    codes = {c["code"]: c for c in land["byClass"]}
    assert set(codes) == {0, 11, 40} and codes[0]["name"] == "land" and codes[11]["basis"] == "measured"
    assert codes[40]["basis"] == "estimated" and sum(c["share"] for c in land["byClass"]) == pytest.approx(1)


def test_depth_bands_split_the_sea_floor_by_area(tmp_path):
    g = grid(tmp_path, lambda lon, lat: np.where(lon < 12, -150, -4500), constant(11))
    st = stats(g, rect(11, -4, 13, -3))
    by = {b["fromM"]: b for b in st["bands"]}
    assert by[0]["share"] == pytest.approx(0.5) and by[4000]["share"] == pytest.approx(0.5)
    assert by[200]["areaKm2"] == 0 and by[6000]["toM"] is None


def test_missing_cells_are_unknown_not_zero(tmp_path):
    g = grid(tmp_path, lambda lon, lat: np.where(lon < 12, -32768, -1000), constant(11), fill=-32768)
    st = stats(g, rect(11, -4, 13, -3))
    assert st["knownM2"] == pytest.approx(st["ringM2"] / 2, rel=1e-3)
    assert st["missingM2"] == pytest.approx(st["ringM2"] / 2, rel=1e-3)
    assert st["volumeM3"] == pytest.approx(1000 * st["knownM2"], rel=1e-9)
    assert bathymetry.point(g, 11.5, -3.5)["elevation"] is None


def test_a_ring_partly_outside_the_grid_counts_only_its_inside(tmp_path):
    g = grid(tmp_path, constant(-1000), constant(11))
    st = stats(g, rect(13.5, -3, 14.5, -2))
    assert st["insideM2"] == pytest.approx(st["ringM2"] / 2, rel=1e-3)
    assert st["knownM2"] == pytest.approx(st["insideM2"], rel=1e-6)
    assert bathymetry.coverage(g, ring_polygon(rect(20, -3, 21, -2))) is None


def test_a_profile_interpolates_bilinearly_between_cell_centres(tmp_path):
    # Elevation at cell centres is -(1000 + 10 col + 3 row): a plane, which bilinear reproduces exactly.
    cell = 0.1
    g = grid(tmp_path, lambda lon, lat: np.round(-(1000 + 10 * (lon - 10.05) / cell + 3 * (lat + 4.95) / cell)),
             lambda lon, lat: np.where(lon < 12, 11, 40), cell=cell)
    lons = np.array([10.05, 10.10, 10.125, 11.37, 11.95, 12.0, 12.05])
    lats = np.array([-4.95, -4.95, -4.90, -3.333, -3.0, -3.0, -3.0])
    value, measured, tid, inside = bathymetry.profile(g, lons, lats)
    expected = -(1000 + 10 * (lons - 10.05) / cell + 3 * (lats + 4.95) / cell)
    assert inside.all() and value == pytest.approx(expected, abs=1e-6)
    assert measured.tolist() == [True, True, True, True, True, False, False]    # 12.0 leans on an estimated cell
    assert tid.tolist()[-1] == 40 and tid.tolist()[4] == 11
    out, _, _, ins = bathymetry.profile(g, np.array([9.0]), np.array([-3.0]))
    assert not ins[0] and math.isnan(out[0])


def test_a_profile_samples_its_great_circle_at_the_spacing_and_its_end(tmp_path):
    d, lons, lats = bathymetry.sample_path([(10.0, 0.0), (11.0, 0.0)], 10_000)
    length = math.radians(1) * EARTH_RADIUS_M
    assert d[0] == 0 and d[-1] == pytest.approx(length) and np.diff(d)[:-1] == pytest.approx(10_000)
    assert lats == pytest.approx(0, abs=1e-9) and lons[5] == pytest.approx(10 + 50_000 / length)
    d, lons, lats = bathymetry.sample_path([(0.0, 60.0), (90.0, 60.0)], 100_000)
    assert lats.max() > 60.5              # a great circle bows poleward of the parallel


def test_a_descending_grid_with_signed_tid_reads_the_same(tmp_path):
    a = grid(tmp_path / "a", lambda lon, lat: np.round(-100 * (lat + 6)), constant(11))
    b = grid(tmp_path / "b", lambda lon, lat: np.round(-100 * (lat + 6)), constant(11), descending=True,
             tid_dtype="u1", fmt="NETCDF4")
    ring = rect(10.2, -4.7, 11.9, -1.3)
    assert stats(a, ring)["volumeM3"] == pytest.approx(stats(b, ring)["volumeM3"], rel=1e-12)
    assert bathymetry.point(b, 11.0, -4.99)["elevation"] == bathymetry.point(a, 11.0, -4.99)["elevation"]


@pytest.mark.parametrize("ring, why", [
    ([(0, 0), (1, 1)], "three distinct"),
    ([(0, 0), (2, 2), (2, 0), (0, 1)], "crosses itself"),
    ([(0, 0), (1, 0), (2, 0)], "no area"),
    ([(-179, 80), (-60, 80), (60, 80), (179, 80)], "winds round the pole")])
def test_bad_rings_are_refused_saying_why(ring, why):
    with pytest.raises(BadParameter, match=why):
        ring_polygon(ring)


def test_a_file_that_is_not_a_gebco_grid_is_refused(tmp_path):
    e, t = synthetic.write_pair(tmp_path, BOX, 1 / 60, constant(-10), constant(11))
    _, other = synthetic.write_pair(tmp_path / "o", (10, -5, 14, -2), 1 / 60, constant(-10), constant(11))
    with pytest.raises(GridFormatError, match="different latitudes"):
        Grid(e, other)
    junk = tmp_path / "junk.nc"
    junk.write_bytes(b"GIF89a not a grid")
    with pytest.raises(GridFormatError, match="not a netCDF file"):
        Grid(junk, t)
    with pytest.raises(GridFormatError, match="no type identifier"):
        Grid(e, e)


def test_areas_are_exact_for_a_polar_cap_band():
    poly = ring_polygon(rect(0, 80, 1, 89))
    assert geometry_area_m2(poly) == pytest.approx(R2 * math.radians(1) * band(80, 89), rel=1e-12)
