"""A bathymetry grid file cut short on the host (a full disk, a copy or restore interrupted)
is "not usable" and its depths unknown, never read as the zeros netCDF gives for missing
bytes: a classic netCDF file cut to 5,000 bytes was answered 200 ``measured: true`` "0 m
above sea level" with ``degraded: false`` for a cell 1,500 m deep.

The load records both files' sizes in the manifest and every open compares them; an open
grid compares them again at each answer (two stats); a grid loaded before the sizes were
recorded is checked against its classic netCDF header (an HDF5-based netCDF-4 file cut
short is refused by the library itself)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from coordinator.datasets import ingest, versions
from coordinator.grids import synthetic
from coordinator.grids.reader import Grid, GridDamaged, classic_size, hdf5_size
from tests.support import make_settings, start_coordinator, stop_coordinator

BOX = (10.0, -5.0, 14.0, -1.0)
POINT = "/public/v1/anon/bathymetry?lat=-3.5&lon=11"


def elevation(lon, lat):
    return np.where(lon < 12, -1500, -4000)


def tid(lon, lat):
    return np.where(lon < 12, 11, 40)


async def start(sqlite_url, tmp_path):
    return await start_coordinator(make_settings(sqlite_url, None, data_dir=str(tmp_path / "data")))


async def load(c, pair):
    return await ingest.run(c.services.db, "bathymetry", pair[0], companions={"tid": pair[1]},
                            data_dir=c.services.settings.data_dir)


def cut(path, n: int = 5000) -> None:
    with open(path, "r+b") as f:
        f.truncate(n)


async def assert_not_usable(c, *words: str) -> None:
    body = (await c.get(POINT)).json()
    assert body["health"]["degraded"] is True
    assert body["depthM"] == {"value": None, "confidence": "unknown"} and body["measured"] is None
    error = body["health"]["sources"][0]["error"]
    assert "not usable" in error and "cut short" in error, error
    for w in words:
        assert w in error, error
    assert any("unknown (not zero)" in cv for cv in body["caveats"])
    assert body["health"]["sources"][0]["ok"] is False
    assert not any("retry later" in cv for cv in body["caveats"])     # as for a missing folder: no retry mends it
    prof = (await c.get("/public/v1/anon/bathymetry/profile?path=11,-3;12,-3")).json()
    assert prof["unknownSamples"] == prof["count"]


@pytest.mark.parametrize("fmt", ["NETCDF3_CLASSIC", "NETCDF4"])
async def test_a_grid_file_cut_short_is_not_usable_after_a_restart(sqlite_url, tmp_path, fmt):
    pair = synthetic.write_pair(tmp_path / "grid", BOX, 1 / 60, elevation, tid, fmt=fmt)
    c = await start(sqlite_url, tmp_path)
    try:
        v = await load(c, pair)
        folder = versions.folder_of(c.services.settings.data_dir, v)
        manifest = json.loads((folder / "manifest.json").read_text())
        assert manifest["elevationBytes"] == (folder / "elevation.nc").stat().st_size == pair[0].stat().st_size
        assert manifest["tidBytes"] == (folder / "tid.nc").stat().st_size == pair[1].stat().st_size
        body = (await c.get(POINT)).json()
        assert body["health"]["degraded"] is False and body["depthM"]["value"] == 1500.0
    finally:
        await stop_coordinator(c)
    cut(folder / "elevation.nc")
    c = await start(sqlite_url, tmp_path)
    try:
        await assert_not_usable(c, "elevation.nc is 5000 bytes where its load wrote", str(folder.resolve()))
    finally:
        await stop_coordinator(c)


async def test_a_grid_file_cut_short_while_served_is_seen_at_the_next_answer(sqlite_url, tmp_path):
    pair = synthetic.write_pair(tmp_path / "grid", BOX, 1 / 60, elevation, tid)
    c = await start(sqlite_url, tmp_path)
    try:
        v = await load(c, pair)
        folder = versions.folder_of(c.services.settings.data_dir, v)
        assert (await c.get(POINT)).json()["depthM"]["value"] == 1500.0
        cut(folder / "tid.nc")
        await assert_not_usable(c, "tid.nc is 5000 bytes")
        (folder / "tid.nc").write_bytes(pair[1].read_bytes())          # put back: served again
        body = (await c.get(POINT)).json()
        assert body["health"]["degraded"] is False and body["depthM"]["value"] == 1500.0
    finally:
        await stop_coordinator(c)


@pytest.mark.parametrize("fmt", ["NETCDF3_CLASSIC", "NETCDF4"])
async def test_a_grid_loaded_before_sizes_were_recorded_is_checked_against_its_header(sqlite_url, tmp_path, fmt):
    pair = synthetic.write_pair(tmp_path / "grid", BOX, 1 / 60, elevation, tid, fmt=fmt)
    c = await start(sqlite_url, tmp_path)
    try:
        v = await load(c, pair)
        folder = versions.folder_of(c.services.settings.data_dir, v)
        m = folder / "manifest.json"
        old = {k: val for k, val in json.loads(m.read_text()).items() if k not in ("elevationBytes", "tidBytes")}
        m.write_text(json.dumps(old))
        body = (await c.get(POINT)).json()
        assert body["health"]["degraded"] is False and body["depthM"]["value"] == 1500.0
        cut(folder / "elevation.nc")
        await assert_not_usable(c, "elevation.nc is 5000 bytes where its header describes")
    finally:
        await stop_coordinator(c)


@pytest.mark.parametrize("fmt", ["NETCDF3_CLASSIC", "NETCDF3_64BIT_OFFSET", "NETCDF3_64BIT_DATA"])
def test_the_classic_header_gives_the_files_exact_size_and_the_reader_refuses_less(tmp_path, fmt):
    e, t = synthetic.write_pair(tmp_path, BOX, 1 / 60, elevation, tid, fmt=fmt, fill=-32767)
    for f in (e, t):
        assert classic_size(f) == f.stat().st_size
    Grid(e, t).close()
    for n in (5000, e.stat().st_size - 1):
        short = tmp_path / f"short{n}.nc"
        short.write_bytes(e.read_bytes()[:n])
        with pytest.raises(GridDamaged, match=f"short{n}.nc is {n} bytes where its header describes"):
            Grid(short, t)


@pytest.mark.parametrize("fmt", ["NETCDF4", "NETCDF4_CLASSIC"])
def test_the_hdf5_superblock_gives_the_files_exact_size_and_a_failed_open_says_how_short(tmp_path, fmt):
    e, t = synthetic.write_pair(tmp_path, BOX, 1 / 60, elevation, tid, fmt=fmt)
    for f in (e, t):
        assert hdf5_size(f) == f.stat().st_size
    Grid(e, t).close()
    short = tmp_path / "short.nc"
    short.write_bytes(e.read_bytes()[:-10])
    with pytest.raises(GridDamaged, match=f"short.nc is {e.stat().st_size - 10} bytes where its header describes "
                                          f"{e.stat().st_size}"):
        Grid(short, t)


def test_netcdf_reads_a_classic_file_cut_short_as_zeros_which_is_why_the_sizes_are_checked(tmp_path):
    """What the checks are for: the library itself says nothing and answers 0 m."""
    import netCDF4

    e, _ = synthetic.write_pair(tmp_path, BOX, 1 / 60, elevation, tid)
    cut(e)
    with netCDF4.Dataset(str(e)) as ds:
        assert int(np.asarray(ds.variables["elevation"][-1, -1])) == 0
