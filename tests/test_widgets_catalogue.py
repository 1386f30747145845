"""The widget catalogue as data: the contract's category counts, real adapters behind every
record, provenance for every list, and the generator rebuilding it from listing answers in
the upstreams' real formats."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from coordinator.catalogue import all_tools
from coordinator.cli import main
from coordinator.sources.registry import load_adapters
from coordinator.widgets import build
from coordinator.widgets.catalogue import CATALOGUE_PATH, CATEGORY_COUNTS, CatalogueError, load, parse

LISTINGS = Path(build.__file__).parent / "data" / "listings-sample"
SMALL = {**CATEGORY_COUNTS, "Macro": 6, "Global": 3, "Crypto": 2, "Climate": 2, "Social": 2}


def test_the_category_counts_are_the_contracts():
    cat = load()
    assert cat.counts() == CATEGORY_COUNTS
    assert len(cat.widgets) == sum(CATEGORY_COUNTS.values()) == 1679


def test_every_widget_names_a_registered_adapter_a_license_and_a_described_list():
    doc = json.loads(CATALOGUE_PATH.read_text())
    parse(doc, sources=load_adapters())          # raises on a source that is not registered
    cat = load()
    for w in cat.widgets.values():
        assert w.license and w.cadence and w.units and w.upstream_ids, w.id
        assert cat.lists[w.listed_by]["how"], w.id
        if w.confirmed:
            assert cat.lists[w.listed_by]["confirms"] is True, w.id


def test_no_widget_id_is_a_declared_tools_name():
    names = {t.name for t in all_tools()}
    assert not names & set(load().widgets)


def test_the_upstream_ids_are_the_upstreams_own():
    cat = load().widgets
    assert cat["wb-ny.gdp.mktp.cd"].upstream_ids == {"indicator": "NY.GDP.MKTP.CD", "source": "2"}
    assert cat["wb-ny.gdp.mktp.cd"].confirmed and cat["wb-ny.gdp.mktp.cd"].license == "CC-BY-4.0"
    assert cat["cg-bitcoin"].upstream_ids == {"coin": "bitcoin"} and cat["cg-bitcoin"].category == "Crypto"
    assert cat["fred-unrate"].upstream_ids == {"seriesId": "UNRATE"} and not cat["fred-unrate"].confirmed
    assert cat["swpc-noaa-planetary-k-index"].confirmed


@pytest.mark.parametrize("change, message", [
    (lambda d: d["widgets"].pop(), "category counts differ"),
    (lambda d: d["widgets"].append(dict(d["widgets"][0])), "appears twice"),
    (lambda d: d["widgets"][0].update(category="Sport"), "not one of the contract's"),
    (lambda d: d["widgets"][0].update(listedBy="nowhere"), "not described"),
    (lambda d: d["widgets"][-1]["params"][0].update(type="number"), "elsewhere"),
    (lambda d: d["widgets"][0]["params"][0].update(default="toolong"), "default of 'country'"),
    (lambda d: d["widgets"][0].update(id="Has Spaces"), "does not match"),
])
def test_a_catalogue_that_breaks_a_rule_is_refused(change, message):
    doc = json.loads(CATALOGUE_PATH.read_text())
    change(doc)
    with pytest.raises(CatalogueError, match=message):
        parse(doc, sources=load_adapters())


def test_an_unregistered_source_is_refused():
    doc = json.loads(CATALOGUE_PATH.read_text())
    doc["widgets"][0]["source"] = "nowhere"
    with pytest.raises(CatalogueError, match="not a registered adapter"):
        parse(doc, sources=load_adapters())


def test_the_generator_builds_from_listings_in_the_upstreams_formats():
    doc = build.build(build.read_listings(LISTINGS), provenance=build.provenance_from_readme(LISTINGS),
                      counts=SMALL, built_at="2026-11-25T00:00:00Z")
    by_id = {w["id"]: w for w in doc["widgets"]}
    counts = {c: sum(1 for w in doc["widgets"] if w["category"] == c) for c in SMALL}
    assert counts == SMALL
    # Crypto: the first coins by market_cap_rank, whatever the listing's order
    assert [w["id"] for w in doc["widgets"] if w["category"] == "Crypto"] == ["cg-bitcoin", "cg-ethereum"]
    # FRED: confirmed where a FRED seriess answer names the id, with FRED's title, units and frequency
    assert by_id["fred-unrate"]["confirmed"] and by_id["fred-unrate"]["units"] == "Percent"
    assert by_id["fred-unrate"]["cadence"] == "monthly"
    assert by_id["fred-gdpc1"]["confirmed"] is False       # only the seed names it
    assert by_id["fred-djia"]["confirmed"] is False and by_id["fred-sp500"]["confirmed"] is True
    # World Bank: macro topics in Macro, the climate and social topics in theirs; units from the name
    assert all(w["source"] == "worldbank" for w in doc["widgets"] if w["category"] in ("Climate", "Social"))
    lists = doc["lists"]
    assert lists["worldbank:worldbank-indicators.json"]["how"].startswith("World Bank API v2 indicator listing")
    assert lists["fred-seed:fred-seed.csv"]["confirms"] is False
    wb = next(w for w in doc["widgets"] if w["source"] == "worldbank")
    assert [p["name"] for p in wb["params"]] == ["country", "from_year", "to_year"]


def test_the_generator_refuses_a_file_it_cannot_read(tmp_path):
    (tmp_path / "x.json").write_text('{"not": "a listing"}')
    with pytest.raises(ValueError, match="not a listing"):
        build.read_listings(tmp_path)


def test_sis_widgets_build_catalogue_writes_a_catalogue(tmp_path, capsys):
    out = tmp_path / "catalogue.json"
    assert main(["widgets", "build-catalogue", str(LISTINGS), "--out", str(out), "--counts", json.dumps(SMALL)]) == 0
    assert "widgets" in capsys.readouterr().out
    doc = json.loads(out.read_text())
    parse(doc, sources=load_adapters(), counts=SMALL)
    # with the contract's counts the small listings cannot fill Macro: said, nothing written
    assert main(["widgets", "build-catalogue", str(LISTINGS), "--out", str(tmp_path / "no.json")]) == 2
    assert "sis widgets build-catalogue:" in capsys.readouterr().err and not (tmp_path / "no.json").exists()
    # a listing or --counts that is not JSON is named
    assert main(["widgets", "build-catalogue", str(LISTINGS), "--out", str(out), "--counts", "notjson"]) == 2
    assert "--counts is not JSON" in capsys.readouterr().err
    broken = tmp_path / "listings"
    broken.mkdir()
    (broken / "fred-series.json").write_text('{"seriess": []}\n{}')
    assert main(["widgets", "build-catalogue", str(broken), "--out", str(out)]) == 2
    assert "fred-series.json: not JSON" in capsys.readouterr().err


def test_sis_widgets_counts_prints_the_contracts_beside_the_catalogues(capsys):
    assert main(["widgets", "counts"]) == 0
    assert "Macro          961 (contract 961)" in capsys.readouterr().out



def test_a_world_bank_unit_is_not_the_qualifier_after_it():
    """'(national estimate)' and '(modeled ILO estimate)' were served as 42 widgets' units."""
    from coordinator.widgets.build import _units_from_name
    assert _units_from_name("Employment to population ratio, ages 15-24, female (%) (national estimate)") == "%"
    assert _units_from_name("Employment in agriculture (% of total employment) (modeled ILO estimate)") == \
        "% of total employment"
    assert _units_from_name("Trade in services (% of GDP)") == "% of GDP"
    shipped = [w for w in json.loads(CATALOGUE_PATH.read_text())["widgets"] if w["source"] == "worldbank"]
    assert not [w["id"] for w in shipped if w["units"].lower() in ("national estimate", "modeled ilo estimate")]
