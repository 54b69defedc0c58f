"""Benchmark: the in-process path and the planner at scale (issue 9, item f).

Run ``python benchmarks/scale_bench.py`` (``--quick``: the rows at a tenth of n).

Rows: n = 100 000 clients at d = 64 and n = 10 000 at d = 3072, synthetic data (the scenario
path: ``[data.synthetic]`` with one record per client, ``partition_scenario``). For each row:

- ``partition``: generating the synthetic records (``uint8``, n d bytes) and the clients'
  float64 vectors (n d 8 bytes: **the data**, the one copy every later step reads);
- ``private_statistics``: one private measurement (both stages, distributed noise, the
  recommended settings of :func:`fa_hetdp.private_statistics`);
- ``batch x R``: ``private_statistics_batch`` with R repeats (one pass over the data, then
  O(d) per repeat);
- ``plan_accuracy`` and ``min_clients``: the data-free planner and its inverse (smallest n
  for 10 % error of D'').

Time: wall clock of one call (``time.perf_counter``), best of ``--runs`` (default 3) with
tracing off. Memory: peak of the Python allocator's traced memory during one more call
(``tracemalloc``; numpy reports its buffers to it), **above** what was allocated before the call
(the data included), in MiB and as a multiple of the data's size (``x data``): 1.0 means the
step needed one extra copy of the data at its peak. The process's maximum resident set size
(``resource.getrusage``) is printed at the end.
"""

from __future__ import annotations

import argparse
import gc
import resource
import sys
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import numpy as np

from fa_hetdp.accuracy.inverses import min_clients
from fa_hetdp.accuracy.planner import plan_accuracy
from fa_hetdp.config.partition import clear_partition_cache, partition_scenario
from fa_hetdp.config.protocol import ProtocolConfig
from fa_hetdp.config.scenario import scenario_from_dict
from fa_hetdp.protocol.simulate import private_statistics, private_statistics_batch

EPSILON = 1.0
DELTA = 1e-5
SEED = 20261126
ROWS = ((100_000, 64), (10_000, 3072))
MIB = 2.0**20


def _scenario(n: int, d: int) -> Any:
    return scenario_from_dict(
        {
            "scenario": {"name": f"scale-{n}x{d}"},
            "data": {
                "dataset": "synthetic",
                "num_clients": n,
                "synthetic": {"size": n, "dim": d, "num_labels": 10},
            },
            "privacy": {"epsilon": EPSILON, "delta": DELTA},
            "experiment": {"seed": 0},
        }
    )


def _timed(call: Callable[[], Any], runs: int) -> float:
    best = float("inf")
    for _ in range(runs):
        gc.collect()
        start = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - start)
    return best


def _peak(call: Callable[[], Any]) -> float:
    """Peak traced bytes during ``call`` above those allocated before it."""
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    tracemalloc.reset_peak()
    call()
    peak = tracemalloc.get_traced_memory()[1] - before
    tracemalloc.stop()
    return float(peak)


def measure(n: int, d: int, *, repeats: int, runs: int) -> list[tuple[str, float, float]]:
    """Return ``(step, seconds, peak bytes)`` for one (n, d) row."""
    scenario = _scenario(n, d)

    def partition() -> Any:
        clear_partition_cache()
        return partition_scenario(scenario)

    rows: list[tuple[str, float, float]] = []
    rows.append(("partition", _timed(partition, 1), _peak(partition)))
    x = partition().vectors  # the data: (n, d) float64, kept for the steps below
    config = ProtocolConfig(epsilon=EPSILON, delta=DELTA)

    def one() -> Any:
        return private_statistics(x, epsilon=EPSILON, delta=DELTA, rng=np.random.default_rng(SEED))

    def batch() -> Any:
        return private_statistics_batch(x, config, repeats=repeats, rng=np.random.default_rng(SEED))

    def plan() -> Any:
        return plan_accuracy(n, d, epsilon=EPSILON, delta=DELTA)

    def inverse() -> Any:
        return min_clients(d, epsilon=EPSILON, delta=DELTA, target=0.1, statistic_key="dispersion")

    for name, call in (
        ("private_statistics", one),
        (f"batch x {repeats}", batch),
        ("plan_accuracy", plan),
        ("min_clients", inverse),
    ):
        rows.append((name, _timed(call, runs), _peak(call)))
    return rows


def main(argv: list[str] | None = None) -> int:
    """Print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="n / 10 on every row")
    parser.add_argument("--runs", type=int, default=3, help="timed runs per step (best of)")
    parser.add_argument("--repeats", type=int, default=100, help="repeats of the batch step")
    args = parser.parse_args(argv)
    print(f"epsilon = {EPSILON}, delta = {DELTA}; time = best of {args.runs}; memory = tracemalloc")
    print("peak above what was allocated before the step; 'x data' = peak / (n d 8 bytes)\n")
    print("| n | d | data (MiB) | step | time (s) | peak (MiB) | x data |")
    print("|---|---|---|---|---|---|---|")
    for n, d in ROWS:
        n = n // 10 if args.quick else n
        data_bytes = n * d * 8
        for step, seconds, peak in measure(n, d, repeats=args.repeats, runs=args.runs):
            print(
                f"| {n:,} | {d} | {data_bytes / MIB:.0f} | {step} | {seconds:.3f} | "
                f"{peak / MIB:.1f} | {peak / data_bytes:.2f} |"
            )
        clear_partition_cache()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux
    print(f"\nmaximum resident set size of the process: {rss:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
