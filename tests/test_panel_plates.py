"""GET /public/v1/{cred}/plates: PB2002 boundaries from an ingested PB2002_steps.dat (a small file
in that format, written here): without a load the answer says none is loaded (degraded, not an
empty "no boundaries"); after one it names the dataset version, groups steps by boundary with
their types and lines; bad lines are counted; the rows cap cuts the boundaries list."""
from __future__ import annotations

import pytest

from coordinator.datasets import ingest
from coordinator.datasets.kinds import KINDS
from coordinator.panels.plates import parse_step, split_at_antimeridian
from tests.support import make_settings, start_coordinator, stop_coordinator

STEPS = """\
   1  AF-AN   -0.438 -54.852   -0.039 -54.677  32.1  53  13.2  48    1.2   13.1  -1584   2  OTF
   2 :AF-AN   -0.039 -54.677    0.443 -54.451  40.0  51  13.2  47    0.9   13.1  -1639   5 :OTF
   3 :AF-AN    0.443 -54.451    0.965 -54.832  54.0 142  13.2  47   13.1   -1.1  -1687   4  OSR
   4  AU\\PA  178.612 -37.540  178.709 -37.098  49.7   9  49.4 263  -35.8   34.0  -2612  90  SUB
   5 :AU\\PA  178.709 -37.098  178.894 -36.646  52.5  18  49.6 264  -39.7   29.8  -2419  90 :SUB
   6  IN-EU   70.100  29.800   70.200  30.400  67.4   8  33.1  19  -32.7    5.2   1210  -1  CCB*
   7  XX-YY   garbage
"""


@pytest.fixture
async def c(db_url, upstream):
    c = await start_coordinator(make_settings(db_url, upstream))
    yield c
    await stop_coordinator(c)


async def test_without_a_load_it_says_none_is_loaded(c):
    r = await c.get("/public/v1/anon/plates")
    body = r.json()
    assert r.status == 200 and body["health"]["degraded"] is True
    assert body["health"]["sources"][0]["error"] == "no pb2002 dataset has been loaded: sis ingest pb2002 FILE"
    assert body["boundaries"] == [] and body["count"] is None and body["dataset"] is None
    assert any("unknown (not absent)" in cv for cv in body["caveats"])
    assert r.headers["Cache-Control"].startswith("no-store")


async def test_an_ingested_file_is_served_naming_its_version(c, tmp_path):
    f = tmp_path / "PB2002_steps.dat"
    f.write_text(STEPS)
    v = await ingest.run(c.services.db, "pb2002", f)
    assert v.records == 6 and v.bad_records == 1 and v.bad_samples[0].startswith("line 7: ")
    assert [v.west, v.south, v.east, v.north] == [-0.438, -54.852, 178.894, 30.4]
    r = await c.get("/public/v1/anon/plates")
    body = r.json()
    assert r.status == 200 and list(body)[0] == "caveats" and body["health"]["degraded"] is False
    source = body["health"]["sources"][0]
    assert source["dataset"] == {"dataset": "pb2002", "version": v.id, "loadedAt": source["dataset"]["loadedAt"],
                                 "license": "ODC-By-1.0", "sha256": v.sha256}
    assert body["dataset"]["version"] == v.id and body["count"] == 3
    af, au, ind = body["boundaries"]
    assert af["id"] == "AF-AN" and af["plates"] == ["AF", "AN"] and af["lengthKm"] == 126.1
    assert af["types"] == [{"class": "OTF", "name": "oceanic transform fault", "lengthKm": 72.1, "steps": 2},
                           {"class": "OSR", "name": "oceanic spreading ridge", "lengthKm": 54.0, "steps": 1}]
    assert af["geometry"] == {"type": "MultiLineString", "coordinates": [
        [[-0.438, -54.852], [-0.039, -54.677], [0.443, -54.451], [0.965, -54.832]]]}
    assert au["id"] == "AU\\PA" and au["plates"] == ["AU", "PA"] and au["types"][0]["class"] == "SUB"
    assert ind["types"][0]["name"] == "continental convergent boundary"
    assert all(b["license"] == "ODC-By-1.0" for b in body["boundaries"])
    assert body["byType"]["OTF"] == {"name": "oceanic transform fault", "lengthKm": 72.1, "boundaries": 1}


async def test_the_rows_cap_cuts_the_boundaries(db_url, upstream, tmp_path):
    letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    codes = [a + b for a in letters for b in letters]
    lines = [f"{i:4d}  {codes[i % 676]}-{codes[(i // 676) + 1]}   {i % 170}.100 -10.000   {i % 170}.200 -10.100"
             f"  10.0  90  10.0  90    1.0    1.0  -3000  10  OSR" for i in range(2003)]
    f = tmp_path / "PB2002_steps.dat"
    f.write_text("\n".join(lines) + "\n")
    c = await start_coordinator(make_settings(db_url, upstream))
    try:
        v = await ingest.run(c.services.db, "pb2002", f)
        assert v.records == 2003 and v.bad_records == 0
        body = (await c.get("/public/v1/anon/plates")).json()
        assert body["count"] == 2003 and len(body["boundaries"]) == 2000
        assert any("cut to the first 2000 of 2003 rows" in cv for cv in body["caveats"])
    finally:
        await stop_coordinator(c)


def test_the_kind_is_found_by_discovery():
    assert "pb2002" in KINDS.names() and KINDS.get("pb2002").takes("PB2002_steps.dat")


TAIL = "32.1  53  13.2  48  1.2  13.1 -1584 2"


@pytest.mark.parametrize("line, why", [
    (f"   1  AF-AN  -0.4 -54.8  -0.03 -54.6  {TAIL} XYZ", "step class"),
    (f"   1  AFAN  -0.4 -54.8  -0.03 -54.6  {TAIL} OTF", "boundary id"),
    (f"   1  AF-AN  -0.4 -94.8  -0.03 -54.6  {TAIL} OTF", "off the Earth"),
    ("   1  AF-AN  -0.4", "fields")])
def test_bad_lines_say_why(line, why):
    with pytest.raises(ValueError, match=why):
        parse_step(line)


CROSSING = """\
   1  PA-KE  179.900 -20.000  180.100 -20.200  30.7 137  70.0 270  -10.0   69.0  -6000  90  SUB
   2 :PA-KE  180.100 -20.200  180.300 -20.400  30.7 137  70.0 270  -10.0   69.0  -6000  90 :SUB
"""


async def test_a_boundary_crossing_the_antimeridian_is_cut_there_not_drawn_round_the_globe(c, tmp_path):
    f = tmp_path / "PB2002_steps.dat"
    f.write_text(CROSSING)
    v = await ingest.run(c.services.db, "pb2002", f)
    assert v.records == 2 and v.bad_records == 0
    body = (await c.get("/public/v1/anon/plates")).json()
    (b,) = body["boundaries"]
    assert b["geometry"] == {"type": "MultiLineString", "coordinates": [
        [[179.9, -20.0], [180.0, -20.1]],
        [[-180.0, -20.1], [-179.9, -20.2], [-179.7, -20.4]]]}
    assert b["lengthKm"] == 61.4


def _segments(parts):
    return [(a, b) for part in parts for a, b in zip(part, part[1:])]


@pytest.mark.parametrize("line, parts", [
    # east across 180, and west across it
    ([[179.9, -20.0], [-179.9, -20.2]], [[[179.9, -20.0], [180.0, -20.1]], [[-180.0, -20.1], [-179.9, -20.2]]]),
    ([[-179.5, 10.0], [179.5, 12.0]], [[[-179.5, 10.0], [-180.0, 11.0]], [[180.0, 11.0], [179.5, 12.0]]]),
    # a step ending on the meridian, and the next one leaving it from the other side
    ([[179.0, 0.0], [180.0, 1.0], [-179.0, 2.0]], [[[179.0, 0.0], [180.0, 1.0]], [[-180.0, 1.0], [-179.0, 2.0]]]),
    ([[179.0, 0.0], [-180.0, 1.0], [-179.0, 2.0]], [[[179.0, 0.0], [180.0, 1.0]], [[-180.0, 1.0], [-179.0, 2.0]]]),
    # a line that stays on one side is left whole
    ([[170.0, 0.0], [179.9, 1.0], [175.0, 2.0]], [[[170.0, 0.0], [179.9, 1.0], [175.0, 2.0]]]),
    # crossing twice gives three parts
    ([[179.0, 0.0], [-179.0, 0.0], [179.0, 2.0]],
     [[[179.0, 0.0], [180.0, 0.0]], [[-180.0, 0.0], [-179.0, 0.0], [-180.0, 1.0]], [[180.0, 1.0], [179.0, 2.0]]]),
])
def test_lines_are_split_at_the_antimeridian(line, parts):
    got = split_at_antimeridian(line)
    assert got == parts
    assert all(abs(a[0] - b[0]) <= 180 for a, b in _segments(got))


def test_longitudes_past_180_come_back_without_float_noise():
    step = parse_step(f"   1  PA-KE  359.999 -20.0  180.100 -20.2  {TAIL} SUB")
    assert (step.lon1, step.lon2) == (-0.001, -179.9)
