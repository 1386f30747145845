"""Site intelligence: the evidence of the ground around a point (places, roads, mapped
structures, population, active hazards), the scoring model over it, and the scan of a
small area's grid cells (SPEC.md: Site score, Site scan)."""
