"""GET /public/v1/{cred}/bathymetry, /bathymetry/profile and /bathymetry/stats on a real
coordinator, from a synthetic GEBCO-layout grid pair loaded by ``sis ingest bathymetry GRID
--tid TID`` (files kept in the data directory): nothing loaded is unknown and degraded,
never zero; a point's class is named measured or estimated; the stats' ring is capped by
the plan's bboxDeg; bad paths and rings are 400 in the one error shape."""
from __future__ import annotations

import asyncio
import os
from pathlib import Path

import numpy as np
import pytest

from coordinator.cli import main
from coordinator.datasets import drop, ingest, versions
from coordinator.grids import synthetic
from tests.support import make_settings, start_coordinator, stop_coordinator
from tests.test_access_support import key
from tests.test_error_shape import assert_error_shape

BOX = (10.0, -5.0, 14.0, -1.0)


def elevation(lon, lat):
    return np.where(lat > -2, 120, np.where(lon < 12, -1500, -4000))


def tid(lon, lat):
    return np.where(lat > -2, 0, np.where(lon < 12, 11, 40))


@pytest.fixture
def pair(tmp_path):
    return synthetic.write_pair(tmp_path / "grid", BOX, 1 / 60, elevation, tid, name="gebco_2025_test")


@pytest.fixture
async def c(db_url, upstream, tmp_path):
    c = await start_coordinator(make_settings(db_url, upstream, data_dir=str(tmp_path / "data")))
    yield c
    await stop_coordinator(c)


async def load(c, pair):
    return await ingest.run(c.services.db, "bathymetry", pair[0], companions={"tid": pair[1]},
                            data_dir=c.services.settings.data_dir)


async def test_with_no_grid_loaded_depths_are_unknown_never_zero(c):
    for path in ("/bathymetry?lat=-3&lon=11", "/bathymetry/profile?path=11,-3;12,-3",
                 "/bathymetry/stats?ring=11,-3;11.1,-3;11.1,-2.9"):
        r = await c.get(f"/public/v1/anon{path}")
        body = r.json()
        assert r.status == 200 and body["health"]["degraded"] is True, path
        assert "sis ingest bathymetry GRID.nc --tid TID.nc" in body["health"]["sources"][0]["error"]
        assert any("unknown (not zero)" in cv for cv in body["caveats"])
        assert r.headers["Cache-Control"].startswith("no-store")
    point = (await c.get("/public/v1/anon/bathymetry?lat=-3&lon=11")).json()
    assert point["depthM"] == {"value": None, "confidence": "unknown"} and point["measured"] is None
    prof = (await c.get("/public/v1/anon/bathymetry/profile?path=11,-3;12,-3")).json()
    assert prof["unknownSamples"] == prof["count"] and all(s["depthM"] is None for s in prof["samples"])
    st = (await c.get("/public/v1/anon/bathymetry/stats?ring=11,-3;11.1,-3;11.1,-2.9")).json()
    assert st["volumeKm3"]["confidence"] == "unknown" and st["deepest"] is None


async def test_a_loaded_grid_answers_points_with_their_class_named(c, pair):
    v = await load(c, pair)
    assert v.records == 240 * 240 and [v.west, v.south, v.east, v.north] == pytest.approx(list(BOX))
    folder = versions.folder_of(c.services.settings.data_dir, v)
    r = await c.get("/public/v1/anon/bathymetry?lat=-3.5&lon=11")
    body = r.json()
    assert r.status == 200 and list(body)[0] == "caveats" and body["health"]["degraded"] is False
    assert body["health"]["sources"][0]["dataset"]["version"] == v.id
    assert body["depthM"] == {"value": 1500.0, "confidence": "high"} and body["basis"] == "measured"
    assert body["measured"] is True and body["tid"] == {"code": 11, "name": "multibeam echo-sounder",
                                                        "basis": "measured"}
    assert body["license"] == "public-domain"
    assert body["citation"] == "GEBCO Compilation Group (2025) GEBCO 2025 Grid (doi:10.5285/37c52e96-24ea-67ce-e063-7086abc05f29)"
    assert body["grid"]["tidFile"] == "gebco_2025_test_tid.nc" and len(body["grid"]["tidSha256"]) == 64
    est = (await c.get("/public/v1/anon/bathymetry?lat=-3.5&lon=13")).json()
    assert est["depthM"] == {"value": 4000.0, "confidence": "low"} and est["basis"] == "estimated"
    assert est["measured"] is False and est["tid"]["name"] == "predicted from satellite-derived gravity"
    land = (await c.get("/public/v1/anon/bathymetry?lat=-1.5&lon=13")).json()
    assert land["elevationM"]["value"] == 120 and land["depthM"]["value"] is None and land["basis"] == "land"
    out = (await c.get("/public/v1/anon/bathymetry?lat=20&lon=13")).json()
    assert out["depthM"] == {"value": None, "confidence": "unknown"}
    assert any("outside the loaded grid" in cv for cv in out["caveats"])
    assert sorted(p.name for p in folder.iterdir()) == ["elevation.nc", "manifest.json", "tid.nc"]


def files_open_under(folder) -> list[str]:
    """The files of ``folder`` this process holds open (``/proc/self/fd``; a deleted one too)."""
    out = []
    for fd in Path("/proc/self/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith(str(folder)):
            out.append(target)
    return out


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc to see open files")
async def test_a_grid_replaced_or_dropped_is_closed_at_the_next_answer(c, pair):
    db, data = c.services.db, c.services.settings.data_dir
    point = "/public/v1/anon/bathymetry?lat=-3.5&lon=11"
    old = await load(c, pair)
    assert (await c.get(point)).json()["health"]["sources"][0]["dataset"]["version"] == old.id
    old_folder = versions.folder_of(data, old)
    assert len(files_open_under(old_folder)) == 2            # elevation and TID
    new = await load(c, pair)
    new_folder = versions.folder_of(data, new)
    assert (await c.get(point)).json()["health"]["sources"][0]["dataset"]["version"] == new.id
    assert files_open_under(old_folder) == [] and len(files_open_under(new_folder)) == 2

    # Dropped while open: its files are deleted at once, and closed (their space given back)
    # by the next answer, which reads the version left.
    await drop.drop(db, (await drop.check(db, [new.id]))[0], data)
    assert not new_folder.exists() and len(files_open_under(new_folder)) == 2
    body = (await c.get(point)).json()
    assert body["health"]["sources"][0]["dataset"]["version"] == old.id and body["depthM"]["value"] == 1500.0
    assert files_open_under(new_folder) == []


async def test_a_ready_grid_whose_files_this_server_cannot_find_says_where_it_looked(c, pair):
    """An ingest run from another folder (a relative SIS_DATA_DIR) put its files where the server never
    looks: the answer said "cannot be read … No such file" of a relative path, and to retry later."""
    import shutil
    v = await load(c, pair)
    folder = versions.folder_of(c.services.settings.data_dir, v)
    shutil.rmtree(folder)
    body = (await c.get("/public/v1/anon/bathymetry?lat=-3.5&lon=11")).json()
    error = body["health"]["sources"][0]["error"]
    assert error == (f"the files of bathymetry version {v.id} are not in {folder.resolve()} (SIS_DATA_DIR): every "
                     "coordinator must see the folder `sis ingest` wrote them to")
    assert "retry later" not in " ".join(body["caveats"])


async def test_a_profile_states_its_spacing_and_each_samples_measured_flag(c, pair):
    await load(c, pair)
    body = (await c.get("/public/v1/anon/bathymetry/profile?path=11.5,-3.5;12.5,-3.5&spacingM=5000")).json()
    assert body["spacingM"] == 5000 and body["count"] == len(body["samples"]) == 24
    first, last = body["samples"][0], body["samples"][-1]
    assert first["depthM"] == 1500 and first["measured"] is True and first["tid"] == 11
    assert last["depthM"] == 4000 and last["measured"] is False and last["tid"] == 40
    assert last["distanceM"] == body["lengthM"]
    assert body["classes"]["11"]["basis"] == "measured" and body["classes"]["40"]["basis"] == "estimated"
    assert "bilinear" in body["interpolation"]
    auto = (await c.get("/public/v1/anon/bathymetry/profile?path=10.1,-4.9;13.9,-1.1")).json()
    assert auto["count"] == 500
    half_out = (await c.get("/public/v1/anon/bathymetry/profile?path=13.5,-3;14.5,-3")).json()
    assert 0 < half_out["unknownSamples"] < half_out["count"]
    assert any("outside the loaded grid" in cv for cv in half_out["caveats"])


async def test_stats_under_a_ring_and_the_plan_caps_its_area(c, pair):
    await load(c, pair)
    r = await c.get("/public/v1/anon/bathymetry/stats?ring=11.9,-3.1;12.1,-3.1;12.1,-2.9;11.9,-2.9")
    body = r.json()
    assert r.status == 200 and body["coveredShare"] == pytest.approx(1)
    assert body["measuredShare"] == {"value": pytest.approx(0.5, abs=1e-4), "confidence": "high"}
    assert body["meanDepthM"]["value"] == pytest.approx(2750, abs=1)
    assert body["deepest"]["depthM"] == 4000 and body["license"] == "public-domain"
    wide = await c.get("/public/v1/anon/bathymetry/stats?ring=11,-4;12,-4;12,-3;11,-3")
    assert wide.status == 400
    assert_error_shape(wide.json(), "bad_parameter")
    assert wide.json()["error"]["details"]["cap"] == "bboxDeg" and wide.json()["error"]["details"]["limit"] == 0.25
    secret, _ = await key(c, "Pro")
    pro = await c.get(f"/public/v1/{secret}/bathymetry/stats?ring=11,-4;12,-4;12,-3;11,-3")
    assert pro.status == 200 and pro.json()["measuredShare"]["value"] == pytest.approx(1)


def holed_elevation(lon, lat):
    """North of -2 land, west of 12 (south of -2) the grid's fill value, east of it sea."""
    return np.where(lat > -2, 120, np.where(lon < 12, FILL, -4000))


FILL = -32768


@pytest.fixture
def holed(tmp_path):
    return synthetic.write_pair(tmp_path / "holed", BOX, 1 / 60, holed_elevation, tid, fill=FILL,
                                name="gebco_2025_holed")


async def test_stats_under_fill_cells_say_no_data_not_no_sea_floor(c, holed):
    await load(c, holed)
    body = (await c.get("/public/v1/anon/bathymetry/stats?ring=11,-3;11.1,-3;11.1,-2.9")).json()
    assert body["health"]["degraded"] is False and body["coveredShare"] == 0
    assert body["deepest"] is None and body["bands"] == [] and body["byClass"] == []
    for name in ("meanDepthM", "volumeKm3", "waterAreaKm2", "measuredShare", "estimatedShare"):
        assert body[name] == {"value": None, "confidence": "unknown"}, name
    assert not any("below sea level" in cv or "land" in cv.replace("or land is unknown", "")
                   for cv in body["caveats"]), body["caveats"]
    assert any("No cell under the ring has a value in the grid" in cv and "fill value" in cv
               and "unknown" in cv for cv in body["caveats"]), body["caveats"]


async def test_stats_over_land_say_land_with_no_water(c, holed):
    await load(c, holed)
    body = (await c.get("/public/v1/anon/bathymetry/stats?ring=13,-1.9;13.1,-1.9;13.1,-1.8")).json()
    assert body["coveredShare"] == pytest.approx(1) and body["deepest"] is None
    assert body["volumeKm3"] == {"value": 0.0, "confidence": "high"}
    assert body["waterAreaKm2"] == {"value": 0.0, "confidence": "high"}
    assert body["meanDepthM"]["confidence"] == "unknown"
    assert any("No cell under the ring lies below sea level: the ground read is land" in cv
               for cv in body["caveats"])
    assert not any("fill value" in cv for cv in body["caveats"])


async def test_stats_half_on_fill_half_land_name_both(c, holed):
    await load(c, holed)
    body = (await c.get("/public/v1/anon/bathymetry/stats?ring=11.8,-1.95;11.95,-1.95;11.95,-2.05;11.8,-2.05")).json()
    assert body["coveredShare"] == pytest.approx(0.5, abs=0.01)
    assert any(cv.startswith("Only ") and "fill value" in cv for cv in body["caveats"])
    assert any(cv.startswith("No cell with a value under the ring lies below sea level") for cv in body["caveats"])
    assert body["volumeKm3"] == {"value": 0.0, "confidence": "low"}


async def test_points_and_profiles_on_fill_cells_are_unknown_not_land(c, holed):
    await load(c, holed)
    fill = (await c.get("/public/v1/anon/bathymetry?lat=-3&lon=11")).json()
    assert fill["elevationM"] == fill["depthM"] == {"value": None, "confidence": "unknown"}
    assert fill["basis"] == "unknown" and fill["measured"] is None
    assert any("fill value" in cv and "not land" in cv for cv in fill["caveats"])
    land = (await c.get("/public/v1/anon/bathymetry?lat=-1.5&lon=11")).json()
    assert land["basis"] == "land" and land["elevationM"] == {"value": 120.0, "confidence": "high"}
    prof = (await c.get("/public/v1/anon/bathymetry/profile?path=11,-3;11.1,-3&spacingM=5000")).json()
    assert prof["unknownSamples"] == prof["count"] == 4
    assert all(s["elevationM"] is None and s["depthM"] is None for s in prof["samples"])
    assert any(cv == "4 of 4 samples are unknown (null, not zero, and not land): 4 on cells with the grid's "
               "fill value." for cv in prof["caveats"]), prof["caveats"]
    assert not any("at or above sea level" in cv for cv in prof["caveats"])
    ashore = (await c.get("/public/v1/anon/bathymetry/profile?path=11,-1.5;11.1,-1.5&spacingM=5000")).json()
    assert ashore["unknownSamples"] == 0 and all(s["elevationM"] == 120 for s in ashore["samples"])
    assert any(cv.startswith("4 of 4 samples lie at or above sea level (land)") for cv in ashore["caveats"])


@pytest.mark.parametrize("path", [
    "/bathymetry/profile?path=11,-3",
    "/bathymetry/profile?path=11,-3;x,y",
    "/bathymetry/profile?path=11,-3;11,-3",
    "/bathymetry/profile?path=0,0;30,0",
    "/bathymetry/profile?path=11,-3;12,-3&spacingM=100",
    "/bathymetry/profile?path=11,-3;12,-3&spacingM=10",
    "/bathymetry/profile?path=" + ";".join(f"{i / 100},0" for i in range(101)),
    "/bathymetry/stats?ring=11,-3;11.1,-3",
    "/bathymetry/stats?ring=11,-3;11.1,-2.9;11.1,-3;11,-2.95",
    "/bathymetry/stats?ring=11,-3;11.1,-3;91,-2.9",
    "/bathymetry/stats?ring=",
    "/bathymetry?lat=-3&lon=200"])
async def test_bad_paths_and_rings_are_400_in_the_one_shape(coordinator, path):
    r = await coordinator.get(f"/public/v1/anon{path}")
    assert r.status == 400, r.body
    assert_error_shape(r.json(), "bad_parameter")


async def test_a_load_without_its_tid_grid_or_with_a_mismatched_one_fails_cleanly(c, pair, tmp_path):
    with pytest.raises(ingest.IngestError, match="needs --tid"):
        await ingest.run(c.services.db, "bathymetry", pair[0], data_dir=c.services.settings.data_dir)
    _, other = synthetic.write_pair(tmp_path / "other", (10, -5, 14, -2), 1 / 60, elevation, tid)
    with pytest.raises(ingest.IngestError, match="different latitudes") as err:
        await ingest.run(c.services.db, "bathymetry", pair[0], companions={"tid": other},
                         data_dir=c.services.settings.data_dir)
    assert err.value.version.state == "failed"
    assert not versions.folder_of(c.services.settings.data_dir, err.value.version).exists()
    empty = tmp_path / "my-tid.nc"
    empty.write_bytes(b"")
    with pytest.raises(ingest.IngestError, match="my-tid.nc is not a netCDF file"):    # the file given, not the copy
        await ingest.run(c.services.db, "bathymetry", pair[0], companions={"tid": empty},
                         data_dir=c.services.settings.data_dir)
    body = (await c.get("/public/v1/anon/bathymetry?lat=-3.5&lon=11")).json()
    assert body["health"]["degraded"] is True and body["depthM"]["value"] is None


def test_sis_ingest_takes_the_tid_grid_as_an_option(pair, tmp_path, capsys, monkeypatch):
    url = f"sqlite:///{tmp_path}/sis.db"
    monkeypatch.setenv("SIS_DATA_DIR", str(tmp_path / "data"))
    assert main(["migrate", "--database", url]) == 0
    capsys.readouterr()
    rc = main(["ingest", "bathymetry", str(pair[0]), "--tid", str(pair[1]), "--database", url])
    out = capsys.readouterr()
    assert rc == 0 and out.out.startswith("version 1 of bathymetry ready: 57600 records, 0 bad"), out
    assert [p.parent.name[:2] for p in (tmp_path / "data" / "bathymetry").glob("*/tid.nc")] == ["1-"]
    folder = next((tmp_path / "data" / "bathymetry").glob("1-*"))
    assert f"its files: {folder.resolve()}\n" in out.out        # where, absolute: SIS_DATA_DIR is absolute here
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SIS_DATA_DIR", "data2")                     # relative: said so
    assert main(["ingest", "bathymetry", str(pair[0]), "--tid", str(pair[1]), "--database", url]) == 0
    out = capsys.readouterr().out
    assert f"its files: {(tmp_path / 'data2' / 'bathymetry').resolve()}/2-" in out
    assert "(SIS_DATA_DIR data2 is relative to the folder this ran in: every coordinator must see this one)" in out
    rc = main(["ingest", "bathymetry", str(pair[0]), "--database", url])
    assert rc == 2 and "needs --tid" in capsys.readouterr().err
    rc = main(["ingest", "pb2002", str(pair[0]), "--tid", str(pair[1]), "--database", url])
    assert rc == 2 and "takes no --tid" in capsys.readouterr().err
