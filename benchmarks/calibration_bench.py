"""Benchmark: AGM calibration (fa_hetdp.dp.calibration) vs dp-accounting's get_sigma_gaussian.

Run as ``python benchmarks/calibration_bench.py [--repeats N]``. For each (epsilon, delta) of a
log-spaced grid it prints the median wall time per call of both implementations (measured in
this run, on this machine) and their relative difference in sigma. Target: median <= 1 ms.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np
from rich.console import Console
from rich.table import Table

from fa_hetdp.dp.calibration import achieved_delta, calibrate_sigma

try:
    from dp_accounting.gaussian_mechanism import get_sigma_gaussian
except ImportError:  # pragma: no cover - optional dependency (pip install dp-accounting)
    get_sigma_gaussian = None


def median_seconds(func: Callable[[], float], repeats: int) -> float:
    """Median wall time of ``repeats`` single calls (one warm-up call first)."""
    func()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        func()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=200, help="calls per grid point")
    args = parser.parse_args()

    epsilons = [1e-3, 1e-2, 0.1, 0.25, 1.0, 4.0, 20.0, 100.0]
    deltas = [1e-15, 1e-12, 1e-10, 1e-5, 0.1, 0.5]
    table = Table(title=f"AGM calibration, median per call over {args.repeats} calls")
    for col in ("epsilon", "delta", "sigma (ours)", "ours \\[ms]", "dp-acc \\[ms]", "rel diff"):
        table.add_column(col, justify="right")
    table.add_column("ours: delta/target", justify="right")
    ours_all: list[float] = []
    theirs_all: list[float] = []
    max_diff = 0.0
    for eps in epsilons:
        for delta in deltas:
            sigma = calibrate_sigma(eps, delta)
            t_ours = median_seconds(lambda e=eps, d=delta: calibrate_sigma(e, d), args.repeats)
            ours_all.append(t_ours)
            ratio = achieved_delta(sigma, eps) / delta
            if get_sigma_gaussian is not None:
                theirs = float(get_sigma_gaussian(eps, delta))
                t_theirs = median_seconds(
                    lambda e=eps, d=delta: float(get_sigma_gaussian(e, d)), args.repeats
                )
                theirs_all.append(t_theirs)
                diff = sigma / theirs - 1.0
                max_diff = max(max_diff, abs(diff))
                cells = (f"{t_theirs * 1e3:.4f}", f"{diff:+.2e}")
            else:
                cells = ("n/a", "n/a")
            table.add_row(
                f"{eps:g}",
                f"{delta:g}",
                f"{sigma:.10g}",
                f"{t_ours * 1e3:.4f}",
                *cells,
                f"{ratio:.12f}",
            )
    console = Console()
    console.print(table)
    console.print(
        f"median over grid: ours {np.median(ours_all) * 1e3:.4f} ms, max "
        f"{max(ours_all) * 1e3:.4f} ms"
        + (
            f"; dp-accounting {np.median(theirs_all) * 1e3:.4f} ms; max |rel diff| {max_diff:.2e}"
            if theirs_all
            else "; dp-accounting not installed"
        )
    )


if __name__ == "__main__":
    main()
