"""Benchmarks: programs that print ratios measured side by side in one run.

`python -m bench` runs them all and writes `bench/results/`.
"""
