"""The coordinator: the public API, the sweep queue, the node protocol and reviews."""
__version__ = "0.1.0"
