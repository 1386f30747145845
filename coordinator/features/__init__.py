"""Map data: OpenStreetMap extracts and Overture places, loaded with ``sis ingest`` and
served as places, infrastructure, environment features, road geometry, place trends and
brand counts, with a live Overpass fallback where no loaded extract covers a request."""
