"""Benchmarks: `make bench` (compare.py, the project against its peers) and their results."""
