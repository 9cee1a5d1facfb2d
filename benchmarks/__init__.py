"""Benchmarks of attnlab against straightforward baselines (``make bench``; see bench.py)."""
