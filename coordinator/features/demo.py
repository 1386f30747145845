"""Demo mode's map data: the synthetic town (``synthetic.py``) around the demo centre,
loaded once into the demo's own database so ``/earth/environment``, ``/earth/road-geometry``,
``/earth/places`` and the trends answer something to look at offline. Each load is an
ordinary dataset version whose source says it is synthetic, and every name in it says so."""
from __future__ import annotations

import logging
import tempfile
from pathlib import Path

from coordinator.core.db import Database
from coordinator.datasets import ingest, versions
from . import store, synthetic

log = logging.getLogger("sis.features")
SOURCE = f"{versions.DEMO_PREFIX}synthetic town (not real ground)"


async def load_demo_map(db: Database, centre: tuple[float, float]) -> None:
    """Load the town's extract and two places snapshots unless this database has map data."""
    if await versions.newest_ready(db, store.OSM_KIND) or await versions.newest_ready(db, store.PLACES_KIND):
        return
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        synthetic.write_extract(d / "demo-town.osm.pbf", centre)
        synthetic.write_geojsonseq(d / "demo-places-1.geojsonl", synthetic.places(centre, 400))
        synthetic.write_geojsonseq(d / "demo-places-2.geojsonl", synthetic.places(centre, 440, drop_every=10))
        for kind, name in ((store.OSM_KIND, "demo-town.osm.pbf"), (store.PLACES_KIND, "demo-places-1.geojsonl"),
                           (store.PLACES_KIND, "demo-places-2.geojsonl")):
            v = await ingest.run(db, kind, d / name, source=SOURCE)
            log.info("demo mode: loaded %s (%s records) as %s version %d", name, v.records, kind, v.id)
