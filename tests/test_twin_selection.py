"""The layer registry declares the whole vocabulary, and the selection rules live in one
function (coordinator/twin/selection.py): each rule here, without a server."""
from __future__ import annotations

import pytest

from coordinator.core.errors import BadParameter, Gone
from coordinator.twin.assemble import allot
from coordinator.twin.layers import DATA, DEFAULTS, EONET_CATEGORIES, EVENT, LAYERS, OVERLAY, WITHDRAWN
from coordinator.twin.selection import parse, select

VOCABULARY_DATA = ("quakes disasters air radio iss cameras companies exchanges airports countries cities seaports "
                   "rivers launches weather cyclones news").split()
VOCABULARY_OVERLAYS = [f"overlay:{o}" for o in "satellite roads places towers traffic radar photos satellites".split()]


def test_every_id_of_the_vocabulary_is_declared():
    assert {lid for lid, layer in LAYERS.items() if layer.kind == DATA} == {*VOCABULARY_DATA, "flights"}
    assert {lid for lid, layer in LAYERS.items() if layer.kind == OVERLAY} == set(VOCABULARY_OVERLAYS)
    assert {lid for lid, layer in LAYERS.items() if layer.kind == EVENT} == {f"ev:{c}" for c in EONET_CATEGORIES}
    assert len(EONET_CATEGORIES) == 13
    assert DEFAULTS == ("quakes", "disasters", "cyclones") and WITHDRAWN == ("flights",)
    assert "data-licensing restriction" in LAYERS["flights"].withdrawn


def test_no_selection_is_the_defaults_and_both_lists_are_there():
    s = select(None)
    assert s.served == ["quakes", "disasters", "cyclones"] and s.rejected == [] and s.not_served == []


def test_an_unknown_id_is_rejected_not_an_error():
    s = select(["quakes", "volcanos", "ev:hurricanes"])
    assert s.served == ["quakes"] and s.rejected == ["volcanos", "ev:hurricanes"] and s.not_served == []


def test_a_withdrawn_id_is_known_so_not_served_never_rejected():
    s = select(["flights", "quakes"])
    assert s.rejected == [] and s.served == ["quakes"]
    assert s.not_served == [{"id": "flights", "reason": "withdrawn: " + LAYERS["flights"].withdrawn}]


def test_a_known_layer_without_a_source_is_not_served_with_its_reason():
    s = select(["radio", "overlay:towers", "overlay:satellites"])
    assert s.served == [] and s.rejected == []
    assert [n["id"] for n in s.not_served] == ["radio", "overlay:towers", "overlay:satellites"]
    assert all(n["reason"] for n in s.not_served)
    assert "map-data" in s.not_served[1]["reason"]


def test_only_withdrawn_layers_is_gone_with_both_lists():
    with pytest.raises(Gone) as e:
        select(["flights"])
    assert e.value.status == 410
    assert e.value.details == {"rejected": [], "notServed": [{"id": "flights",
                                                              "reason": "withdrawn: " + LAYERS["flights"].withdrawn}]}


def test_withdrawn_with_an_unknown_id_is_not_gone():
    s = select(["flights", "zeppelins"])
    assert s.served == [] and s.rejected == ["zeppelins"] and s.not_served[0]["id"] == "flights"


def test_star_asks_for_every_known_layer():
    s = select(["*"])
    assert set(s.served) | {n["id"] for n in s.not_served} == set(LAYERS) and s.rejected == []
    assert "flights" not in s.served


def test_layers_are_limited_to_the_credentials_layers():
    s = select(["quakes", "iss", "nonsense"], allowed=("quakes",))
    assert s.served == ["quakes"] and s.rejected == ["nonsense"]
    assert s.not_served == [{"id": "iss", "reason": "not among this credential's layers"}]


def test_the_parameter_text():
    assert parse(None) is None
    assert parse(" quakes , ev:wildfires,quakes,, ") == ["quakes", "ev:wildfires"]
    with pytest.raises(BadParameter, match="names no layer"):
        parse(" , ")
    with pytest.raises(BadParameter, match="at most 64"):
        parse(",".join(f"x{i}" for i in range(65)))


def test_points_are_shared_out_evenly_within_both_caps():
    assert allot({"a": 10, "b": 5}, 800, 3000) == {"a": 10, "b": 5}
    assert allot({"a": 2000, "b": 5}, 800, 3000) == {"a": 800, "b": 5}
    share = allot({"a": 900, "b": 900, "c": 900, "d": 900, "iss": 1}, 800, 3000)
    assert share["iss"] == 1 and sum(share.values()) == 3000 and max(share.values()) - min(
        v for k, v in share.items() if k != "iss") <= 1
