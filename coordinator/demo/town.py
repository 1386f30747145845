"""The demo's synthetic town as files, for ``sis ingest`` to load into any database:

    python -m coordinator.demo.town OUT_DIR [--lat LAT --lon LON]

writes what ``sis serve --demo`` loads by itself (an OpenStreetMap extract, two Overture
places snapshots, a population grid; ``features.synthetic`` and ``sites.demo`` make them)
and prints the ``sis ingest`` line of each. Their source says ``demo: ``, so answers read
from them carry the demo caveat: nothing here is real ground.
"""
from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from coordinator.features import synthetic
from coordinator.features.demo import SOURCE as TOWN_SOURCE
from coordinator.sites.demo import SOURCE as POPULATION_SOURCE, write_grid

from .photos import DEMO_CENTRE

# What the command writes, the kind `sis ingest` loads each as, and the source it names.
TOWN_FILES = (("osm", "synthetic-town.osm.pbf", TOWN_SOURCE), ("places", "synthetic-places-1.geojsonl", TOWN_SOURCE),
              ("places", "synthetic-places-2.geojsonl", TOWN_SOURCE),
              ("population", "synthetic-population.asc", POPULATION_SOURCE))


def write_town(out: Path, centre: tuple[float, float]) -> list[tuple[str, Path, str]]:
    """The demo's files around ``centre`` in ``out``: the town's extract, two places
    snapshots (the second a later one: some places gone, some new, for the trends) and
    the population grid. Returns (kind, path, source) in the order to ingest them."""
    out.mkdir(parents=True, exist_ok=True)
    files = [(kind, out / name, source) for kind, name, source in TOWN_FILES]
    synthetic.write_extract(files[0][1], centre)
    synthetic.write_geojsonseq(files[1][1], synthetic.places(centre, 400))
    synthetic.write_geojsonseq(files[2][1], synthetic.places(centre, 440, drop_every=10))
    write_grid(files[3][1], centre)
    return files


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m coordinator.demo.town",
                                 description="Write the synthetic town (not real ground) that sis serve --demo "
                                             "loads, as files for sis ingest: an OpenStreetMap extract (.osm.pbf), "
                                             "two Overture places snapshots (GeoJSON sequences) and a population "
                                             "grid (Esri ASCII).")
    ap.add_argument("out", metavar="OUT_DIR", type=Path, help="folder to write them in (made if missing)")
    ap.add_argument("--lat", type=float, default=DEMO_CENTRE[0],
                    help=f"latitude of the town's centre (default {DEMO_CENTRE[0]}, the demo's)")
    ap.add_argument("--lon", type=float, default=DEMO_CENTRE[1],
                    help=f"longitude of the town's centre (default {DEMO_CENTRE[1]}, the demo's)")
    args = ap.parse_args(argv)
    if not (-89 <= args.lat <= 89 and -179 <= args.lon <= 179):
        ap.error("--lat must be within -89..89 and --lon within -179..179 (the town is some 0.06 degrees wide)")
    if args.out.exists() and not args.out.is_dir():
        print(f"{ap.prog}: {args.out} is not a folder", file=sys.stderr)
        return 2
    for kind, path, source in write_town(args.out, (args.lat, args.lon)):      # what to run next, one line each
        print(f"sis ingest {kind} {shlex.quote(str(path))} --source {shlex.quote(source)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
