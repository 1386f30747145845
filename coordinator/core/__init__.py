"""The core every face and capability stands on: tool declarations (``registry``), the
one call path that runs them (``pipeline``: validate, access, caps, cache with single
flight, cold policy, handler), the honesty types, the errors and their one shape,
the answer cache, the route families, settings and the database. Nothing here
imports a face or a capability."""
