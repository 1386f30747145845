"""Event briefs: for one hazard event, its exposure, lifelines, condition and observation
joined over the event's area from local data and the live feeds (SPEC.md: Event brief)."""
