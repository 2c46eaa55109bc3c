"""sdp-sweep: selective differential privacy for language models, swept under a fixed ε target."""

__version__ = "0.1.0"
