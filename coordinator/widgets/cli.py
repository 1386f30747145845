"""``sis widgets``: the catalogue rebuilt from listing answers, and what it holds.

``build-catalogue DIR`` reads the listing answers in DIR (``build.read_listings``), with how
each was obtained from DIR/README.md (``- FILE: how``), and writes the catalogue;
``--fetch`` first asks the upstreams themselves for fresh listings (World Bank indicators,
CoinGecko markets; FRED's most popular series tagged usa need ``SIS_SOURCES__FRED__API_KEY``).
``counts`` prints the catalogue's widgets per category beside the contract's."""
from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

from .build import build, provenance_from_readme, read_listings, write
from .catalogue import CATALOGUE_PATH, CATEGORY_COUNTS, CatalogueError, load

# What --fetch asks for: (file name, URL under the upstream's base, needs the FRED key)
FETCHED = (
    ("worldbank-indicators.json", "https://api.worldbank.org/v2/source/2/indicator?per_page=5000&format=json", False),
    ("coingecko-markets.json", "https://api.coingecko.com/api/v3/coins/markets?vs_currency=usd&order=market_cap_desc"
                               "&per_page=50&page=1", False),
    ("fred-tags-usa-popular.json", "https://api.stlouisfed.org/fred/tags/series?tag_names=usa&order_by=popularity"
                                   "&sort_order=desc&limit=1000&file_type=json&api_key={key}", True),
)


def add_parser(sub, settings_of) -> None:  # noqa: ANN001
    w = sub.add_parser("widgets", help="the widget catalogue: rebuild it from upstream listings, count it")
    wsub = w.add_subparsers(dest="widgets_command", required=True, metavar="ACTION")
    b = wsub.add_parser("build-catalogue", help="write the catalogue from the listing answers in DIR")
    b.add_argument("dir", metavar="DIR", help="folder of listing answers in the upstreams' formats (+ README.md)")
    b.add_argument("--out", default=str(CATALOGUE_PATH), help="where to write it (default: the shipped catalogue)")
    b.add_argument("--fetch", action="store_true", help="first fetch fresh listings from the upstreams into DIR")
    b.add_argument("--counts", help="JSON object of category counts, to try a generator change on small listings "
                                    "(a catalogue with other counts than the contract's is refused at start-up)")
    b.set_defaults(run=lambda a: build_catalogue(a, settings_of))
    c = wsub.add_parser("counts", help="widgets per category, beside the contract's")
    c.set_defaults(run=lambda a: counts())


def build_catalogue(args: argparse.Namespace, settings_of) -> int:  # noqa: ANN001
    folder = Path(args.dir)
    if args.fetch:
        asyncio.run(fetch_listings(folder, settings_of(args)))
    if not folder.is_dir():
        print(f"sis widgets build-catalogue: {folder} is not a folder", file=sys.stderr)
        return 2
    try:
        try:
            counts_ = json.loads(args.counts) if args.counts else CATEGORY_COUNTS
        except ValueError as exc:
            raise ValueError(f"--counts is not JSON ({exc})") from None
        doc = build(read_listings(folder), provenance=provenance_from_readme(folder), counts=counts_)
    except (ValueError, CatalogueError) as exc:
        print(f"sis widgets build-catalogue: {exc}", file=sys.stderr)
        return 2
    write(doc, Path(args.out))
    confirmed = sum(1 for w in doc["widgets"] if w["confirmed"])
    print(f"{len(doc['widgets'])} widgets ({confirmed} confirmed) written to {args.out}")
    return 0


async def fetch_listings(folder: Path, settings) -> None:  # noqa: ANN001
    """Fresh listings from the upstreams, each file with a README.md line saying where from."""
    from coordinator.sources.base import fetch
    from coordinator.sources.registry import config_for, load_adapters

    folder.mkdir(parents=True, exist_ok=True)
    key = config_for(load_adapters()["fred"], settings).api_key
    lines = []
    for name, url, keyed in FETCHED:
        if keyed and not key:
            print(f"skipped {name}: set SIS_SOURCES__FRED__API_KEY to fetch it", file=sys.stderr)
            continue
        code, body = await fetch(url.format(key=key), 60)
        if code != 200:
            print(f"skipped {name}: HTTP {code}", file=sys.stderr)
            continue
        (folder / name).write_bytes(body)
        lines.append(f"- {name}: fetched from {url.split('&api_key')[0]}")
    with (folder / "README.md").open("a", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


def counts() -> int:
    got = load().counts()
    for category, n in CATEGORY_COUNTS.items():
        print(f"{category:12} {got.get(category, 0):5} (contract {n})")
    return 0
