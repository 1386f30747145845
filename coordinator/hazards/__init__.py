"""Hazard events: the merged live feed and its polled history."""
