"""Benchmarks: each prints a table and writes JSON under ``benchmarks/results/``; run as ``python -m benchmarks.<name>``."""
