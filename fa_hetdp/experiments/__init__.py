"""The in-process experiment engine.

Grids of repeated private measurements, the paper's reproduction, and the
distributed-vs-central noise benchmark.
"""
