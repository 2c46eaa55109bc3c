"""Benchmarks: each module prints a side-by-side table of ratios (`make bench` runs them all)."""
