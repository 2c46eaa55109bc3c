"""Data: the CustomerSim generator, corpus loaders and canaries."""

from sdp_core.data.records import Record, Span, Splits

__all__ = ["Record", "Span", "Splits"]
