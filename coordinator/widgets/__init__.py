"""Widgets: the contract's 1679 data widgets as one tool over a catalogue (data), not 1679
declarations. The catalogue (``data/catalogue.json``) holds one record per widget: its
upstream and the upstream's own ids, its parameters with types and bounds, units, license,
cadence, and whether its ids were confirmed against an upstream listing. It is rebuilt by
``sis widgets build-catalogue`` from the upstreams' own listing answers."""
