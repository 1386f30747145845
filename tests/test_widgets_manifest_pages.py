"""GET /earth/widgets.json: the full set by default, byte for byte the shape it had (the contract's
"Full widget set with parameters"), and pages on request (limit, offset, fields=compact) that say
where they lie; every answer matches the manifest's declared output schema. An unknown widget
id's 404 names the closest ids, and the id's schema is a pattern every catalogue id matches."""
from __future__ import annotations

import re

from jsonschema import Draft202012Validator

from coordinator.widgets.tools import COMPACT, MANIFEST_SCHEMA, catalogue

WHOLE_KEYS = ["caveats", "count", "categories", "lists", "builtAt", "widgets"]


def valid(body: dict) -> dict:
    errors = [f"{list(e.path)}: {e.message}" for e in Draft202012Validator(MANIFEST_SCHEMA).iter_errors(body)]
    assert not errors, errors[:3]
    return body


async def get(c, path: str, status: int = 200) -> dict:
    r = await c.get(path)
    assert r.status == status, r.body[:300]
    return r.json()


async def test_the_rest_default_is_still_the_full_set_in_its_own_shape(coordinator):
    body = valid(await get(coordinator, "/earth/widgets.json"))
    assert list(body) == WHOLE_KEYS                       # no page fields: the answer the contract names
    assert body["count"] == len(body["widgets"]) == len(catalogue().widgets) == 1679
    assert all("params" in w for w in body["widgets"])
    macro = valid(await get(coordinator, "/earth/widgets.json?category=Macro"))
    assert list(macro) == WHOLE_KEYS and macro["count"] == 961
    gdp = valid(await get(coordinator, "/earth/widgets.json?q=gdp"))
    assert list(gdp) == WHOLE_KEYS and 0 < gdp["count"] < 200


async def test_a_page_says_where_it_lies_and_is_the_slice_of_the_full_set(coordinator):
    whole = (await get(coordinator, "/earth/widgets.json"))["widgets"]
    page = valid(await get(coordinator, "/earth/widgets.json?limit=10&offset=5"))
    assert page["widgets"] == whole[5:15]                 # full rows unless fields=compact
    assert (page["count"], page["total"], page["offset"], page["limit"], page["nextOffset"]) == (10, 1679, 5, 10, 15)
    assert page["fields"] == "full" and "offset=15" in page["caveats"][0]
    last = valid(await get(coordinator, "/earth/widgets.json?limit=50&offset=1650"))
    assert last["count"] == 29 and last["nextOffset"] is None and last["widgets"] == whole[1650:]
    past = valid(await get(coordinator, "/earth/widgets.json?offset=2000&limit=5"))
    assert past["count"] == 0 and past["widgets"] == [] and past["nextOffset"] is None and past["total"] == 1679


async def test_compact_rows_hold_id_title_category_and_source(coordinator):
    whole = (await get(coordinator, "/earth/widgets.json?category=Crypto"))["widgets"]
    compact = valid(await get(coordinator, "/earth/widgets.json?category=Crypto&fields=compact"))
    assert compact["total"] == compact["count"] == 17 and compact["nextOffset"] is None and compact["limit"] is None
    assert compact["widgets"] == [{k: w[k] for k in COMPACT} for w in whole]
    assert list(COMPACT) == ["id", "title", "category", "source"]
    assert any("fields=full" in cv for cv in compact["caveats"])


async def test_walking_the_pages_by_next_offset_meets_every_widget_once(coordinator):
    seen, offset, pages = [], 0, 0
    while offset is not None:
        page = valid(await get(coordinator, f"/earth/widgets.json?fields=compact&limit=400&offset={offset}"))
        seen += [w["id"] for w in page["widgets"]]
        offset, pages = page["nextOffset"], pages + 1
    assert pages == 5 and seen == list(catalogue().widgets)


async def test_filters_and_pages_combine(coordinator):
    filtered = (await get(coordinator, "/earth/widgets.json?category=Macro&q=gdp"))["widgets"]
    page = valid(await get(coordinator, "/earth/widgets.json?category=Macro&q=gdp&limit=3&offset=1"))
    assert page["total"] == len(filtered) and page["widgets"] == filtered[1:4]


async def test_page_parameters_out_of_bounds_are_refused_naming_them(coordinator):
    for query, name in (("limit=0", "limit"), ("limit=2001", "limit"), ("offset=-1", "offset"),
                        ("fields=some", "fields"), ("limit=ten", "limit")):
        body = await get(coordinator, f"/earth/widgets.json?{query}", 400)
        assert body["error"]["code"] == "bad_parameter" and body["error"]["details"]["parameter"] == name


async def test_an_unknown_widget_id_names_the_closest_ids(coordinator):
    r = await coordinator.get("/earth/w/fred-unrat")
    err = r.json()["error"]
    assert r.status == 404 and err["code"] == "not_found" and set(err) == {"code", "message", "details"}
    assert err["details"]["didYouMean"][0] == "fred-unrate" and len(err["details"]["didYouMean"]) <= 5
    assert "did you mean fred-unrate" in err["message"]
    upper = (await coordinator.get("/earth/w/WB-NY.GDP.MKTP.CD")).json()["error"]
    assert upper["details"]["didYouMean"][0] == "wb-ny.gdp.mktp.cd"        # case ignored
    far = (await coordinator.get("/earth/w/nothing-like-it-at-all")).json()["error"]
    assert far["details"]["didYouMean"] == [] and "widget_manifest" in far["message"]


async def test_the_id_schema_is_a_pattern_every_catalogue_id_matches(coordinator):
    doc = (await get(coordinator, "/openapi.json"))
    op = doc["paths"]["/earth/w/{id}"]["get"]
    schema = next(p["schema"] for p in op["parameters"] if p["name"] == "id")
    assert "enum" not in schema and schema["pattern"].startswith("^")
    pattern = re.compile(schema["pattern"])
    assert all(pattern.search(i) for i in catalogue().widgets)
    assert not pattern.search("twin_earth") and not pattern.search("no-such-prefix")


def test_suggestions_are_asked_of_a_shortlist_not_of_every_id(monkeypatch):
    """An unknown id is refused before the rate limit counts it: difflib over all 1679 ids took
    4-8 ms a refusal. The shortlist gives the same first suggestion and reads a few ids."""
    import difflib

    from coordinator.widgets import tools as wt
    cat = wt.catalogue()
    asked: list[int] = []
    real = difflib.get_close_matches
    def counting(word, possibilities, *a, **kw):  # noqa: ANN001, ANN002, ANN003
        asked.append(len(possibilities))
        return real(word, possibilities, *a, **kw)
    monkeypatch.setattr(wt.difflib, "get_close_matches", counting)
    for typo, first in (("wb-ny.gdp.mktp.cdd", "wb-ny.gdp.mktp.cd"), ("fred-unratee", "fred-unrate"),
                        ("cg-bitcoim", "cg-bitcoin")):
        assert wt.did_you_mean(cat, typo)[0] == first
    assert max(asked) <= wt.SHORTLIST
