"""Parameter validation happens once, in the registry."""
from __future__ import annotations

import pytest

from coordinator.core.errors import BadParameter
from coordinator.core.registry import BBOX, INTEGER, NUMBER, STRING, Param, Tool, ToolRegistry, bbox, lat, lon, radius


async def _noop(ctx, params):  # pragma: no cover - never called
    return None


def make(*params: Param) -> Tool:
    return Tool(name="t", title="T", description="d", handler=_noop, params=params, routes={"earth": "/t"})


def test_numbers_and_bounds_are_inclusive():
    t = make(lat(), lon(), radius(100, 3000))
    assert t.validate({"lat": "-90", "lon": "180", "radius": "100"}) == {"lat": -90.0, "lon": 180.0, "radius": 100.0}
    for bad in ({"lat": "90.0001", "lon": "0", "radius": "200"}, {"lat": "0", "lon": "0", "radius": "3000.5"},
                {"lat": "nan", "lon": "0", "radius": "200"}, {"lat": "inf", "lon": "0", "radius": "200"}):
        with pytest.raises(BadParameter):
            t.validate(bad)


def test_missing_required_and_defaults():
    t = make(lat(), Param("maxM", NUMBER, "m", minimum=50, maximum=400, default=150))
    with pytest.raises(BadParameter, match="'lat' is required"):
        t.validate({})
    assert t.validate({"lat": "1"}) == {"lat": 1.0, "maxM": 150}


def test_integer_and_enum_and_pattern():
    t = make(Param("n", INTEGER, "n", minimum=1, maximum=5), Param("c", STRING, "c", enum=("a", "b")),
             Param("q", STRING, "q", pattern=r"Q[0-9]+"))
    assert t.validate({"n": "3", "c": "a", "q": "Q42"}) == {"n": 3, "c": "a", "q": "Q42"}
    with pytest.raises(BadParameter, match="whole number"):
        t.validate({"n": "2.5"})
    with pytest.raises(BadParameter, match="one of a, b"):
        t.validate({"c": "z"})
    with pytest.raises(BadParameter, match="pattern"):
        t.validate({"q": "P42"})


def test_bbox_order_range_and_span():
    t = make(bbox(max_side=0.05))
    assert t.validate({"bbox": "106.8,-6.2,106.85,-6.15"})["bbox"] == (106.8, -6.2, 106.85, -6.15)
    with pytest.raises(BadParameter, match="at most 0.05 deg"):
        t.validate({"bbox": "106.8,-6.2,106.9,-6.15"})
    with pytest.raises(BadParameter, match="west < east"):
        t.validate({"bbox": "106.8,-6.15,106.85,-6.2"})
    # west > east: written backwards, or an event's own box across 180 fed back (RFC 7946 writes it so)
    with pytest.raises(BadParameter, match=r"west 179.9 > east -179.9: write it west,south,east,north; a box across "
                                           r"the antimeridian is asked for as its two sides \(179.9,-17,180,-16 and "
                                           r"-180,-17,-179.9,-16\)"):
        t.validate({"bbox": "179.9,-17,-179.9,-16"})
    with pytest.raises(BadParameter, match="four numbers"):
        t.validate({"bbox": "1,2,3"})
    with pytest.raises(BadParameter, match="within"):
        t.validate({"bbox": "-190,0,0,1"})


def test_json_values_from_mcp_are_accepted_and_checked():
    t = make(lat(), radius(100, 1500, 450))
    assert t.validate({"lat": 10, "radius": 200}) == {"lat": 10.0, "radius": 200.0}
    with pytest.raises(BadParameter):
        t.validate({"lat": True})


def test_input_schema_carries_bounds_and_defaults():
    s = make(lat(), radius(100, 1500, 450)).input_schema()
    assert s["required"] == ["lat"]
    assert s["properties"]["radius"]["minimum"] == 100 and s["properties"]["radius"]["maximum"] == 1500
    assert s["properties"]["radius"]["default"] == 450
    assert s["additionalProperties"] is False


def test_a_tool_cannot_be_declared_twice():
    with pytest.raises(ValueError):
        ToolRegistry([make(), make()])
    assert BBOX == "bbox"
