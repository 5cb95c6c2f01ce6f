"""Benchmark scripts (each prints its figures and writes JSON next to its results)."""
