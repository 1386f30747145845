"""The seen layer: approved street facts and per-photo measurements, served by
``seen_layer``, ``street_measure`` and ``seen_areas`` (``tools/seen.py``).

Rows are written only when a reviewer approves a job (``publish``); nothing a
node submitted is served before that. Spatial lookups use the indexed H3 cell
column (resolution 10, as coverage) plus an exact distance filter, so the same
queries run on SQLite and PostgreSQL (``spatial``).
"""
