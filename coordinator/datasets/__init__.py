"""Ingested datasets (DESIGN.md §13): data loaded from files rather than queried live.

``kinds`` holds the declarations (a capability declares what it ingests once, with
``dataset_kind``), ``versions`` the record of every load (``dataset_versions``), and
``ingest`` runs one load: it records the version, hands the file to the kind's loader,
and marks the version ready or failed. ``sis ingest`` and ``sis datasets list`` are the
command-line faces (``datasets.cli``). How to add a kind: docs/datasets.md.
"""
