"""The twin: the service's one-call picture of the world (SPEC.md, Twin earth; DESIGN.md §12).

Every layer id of the contract's vocabulary is declared once (``layers``); which of them a
request gets is decided by one function (``selection.select``); each data layer is read from
an upstream adapter in that upstream's own format, or from a reference dataset loaded with
``sis ingest`` (``feeds``, ``reference``); overlays are tile templates with their attribution
and license, never rehosted imagery (``overlays``). The tools are ``twin_earth`` (direct and
legacy families, keyless), ``GET /twin`` and ``GET /traffic-tiles`` (credentialed), in
``tools``.
"""
