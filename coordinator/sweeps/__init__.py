"""The coordinator's side of the sweep loop: requests over ground, H3 coverage, jobs of
photo references, leases to volunteer nodes, validation, replication and trust.

Validated results wait in ``in_review`` for the review workflow (a later part),
which calls ``coverage.mark_cells_covered`` when it approves them.
"""
