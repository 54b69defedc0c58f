"""Benchmarks of the experiment engine (issue 5, "Benchmarks"); prints a table.

1. The whole digits reproduction: 6 skews x 20 eps x {AGM, CGM} x {distributed, central} x 100
   repeats (+ the gdp composition cells of the 1:...:1 run), computation and writing timed
   apart. Target: <= 2 minutes on the 2-core development machine.
2. One private measurement at paper scale (n = 1000, d = 3072; all statistics), per placement:
   median wall time of `fa_hetdp.protocol.private_statistics`. Target: <= 150 ms.
3. The 10 000-client synthetic scenario (scenarios/synthetic-10k.toml, d = 3072) through the
   engine, with the peak traced Python/numpy memory (tracemalloc) and the process's peak RSS.

Usage: python benchmarks/reproduce_bench.py [--skip-digits] [--skip-10k] [--repeats N]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import tempfile
import time
import tracemalloc
import warnings

import numpy as np


def _rss_mib() -> float:
    # ru_maxrss is in KiB on Linux.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def bench_digits(repeats: int) -> list[tuple[str, str, str]]:
    from fa_hetdp.experiments.reproduce import run_reproduction, write_reproduction

    start = time.perf_counter()
    results = run_reproduction("digits", repeats=repeats, progress=False)
    compute = time.perf_counter() - start
    cells = sum(len([c for c in r.cells if c.skipped is None]) for r in results.values())
    measurements = cells * repeats
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        written = write_reproduction(results, tmp, dataset="digits", quick=False)
        write = time.perf_counter() - start
    base = next(iter(results.values()))
    return [
        (
            f"digits reproduction: compute ({cells} cells x {repeats} repeats = "
            f"{measurements} measurements, n={base.n}, d={base.d})",
            f"{compute:.1f} s",
            "<= 120 s",
        ),
        (
            f"digits reproduction: tables + 2 figures + JSON ({len(written)} files)",
            f"{write:.1f} s",
            "",
        ),
        ("digits reproduction: total", f"{compute + write:.1f} s", "<= 120 s"),
    ]


def bench_paper_scale(runs: int = 15) -> list[tuple[str, str, str]]:
    from fa_hetdp.config.protocol import ProtocolConfig
    from fa_hetdp.protocol.simulate import private_statistics, private_statistics_batch

    rng = np.random.default_rng(0)
    x = rng.uniform(0.0, 1.0, size=(1000, 3072))
    rows = []
    for placement in ("distributed", "central"):
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            private_statistics(x, epsilon=1.0, delta=1e-5, placement=placement, rng=rng)
            times.append(time.perf_counter() - start)
        rows.append(
            (
                f"one private measurement n=1000 d=3072, {placement} (median of {runs})",
                f"{1000 * statistics.median(times):.1f} ms",
                "<= 150 ms",
            )
        )
    config = ProtocolConfig(epsilon=1.0, delta=1e-5)
    start = time.perf_counter()
    private_statistics_batch(x, config, repeats=100, rng=rng)
    batch = time.perf_counter() - start
    rows.append(
        ("batch of 100 measurements n=1000 d=3072 (engine path)", f"{1000 * batch:.0f} ms", "")
    )
    return rows


def bench_10k() -> list[tuple[str, str, str]]:
    from fa_hetdp.config.scenario import load_scenario
    from fa_hetdp.experiments.engine import run_scenario

    scenario = load_scenario("synthetic-10k")
    rss_before = _rss_mib()
    tracemalloc.start()
    start = time.perf_counter()
    result = run_scenario(scenario, progress=False)
    elapsed = time.perf_counter() - start
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    cells = len(result.cells)
    return [
        (
            f"synthetic-10k through the engine (n={result.n}, d={result.d}, {cells} cells x "
            f"{result.grid.repeats} repeats)",
            f"{elapsed:.1f} s",
            "",
        ),
        ("synthetic-10k: peak traced memory (tracemalloc)", f"{peak / 2**20:.0f} MiB", ""),
        (
            "synthetic-10k: peak RSS of the process (before the run)",
            f"{_rss_mib():.0f} MiB ({rss_before:.0f} MiB)",
            "",
        ),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--skip-digits", action="store_true")
    parser.add_argument("--skip-10k", action="store_true")
    parser.add_argument("--repeats", type=int, default=100)
    args = parser.parse_args()
    warnings.simplefilter("ignore")  # CGM baselines warn; the engine records them as labels
    rows: list[tuple[str, str, str]] = []
    if not args.skip_digits:
        rows.extend(bench_digits(args.repeats))
    rows.extend(bench_paper_scale())
    if not args.skip_10k:
        rows.extend(bench_10k())
    width = max(len(r[0]) for r in rows)
    print(f"{'benchmark':<{width}}  {'measured':>22}  target")
    print("-" * (width + 34))
    for name, value, target in rows:
        print(f"{name:<{width}}  {value:>22}  {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
