"""Panels: one module each, nothing to wire.

A panel is a tool over one or a few upstream sources. Its module declares the
source adapter (a ``Source`` subclass with ``@register``) and the tool (appended to
the module's ``TOOLS`` with ``@tool``); its recorded upstream answers live in
``samples/<source name>/`` beside it, as the paths the upstream serves. Every module
of this package is found by ``coordinator.catalogue`` (the tools) and by
``coordinator.sources.registry`` (the adapters); the demo upstream and the tests'
fake serve the samples. docs/adding-a-panel.md walks through one.
"""
