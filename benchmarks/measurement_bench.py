"""Benchmark: one full private measurement (all statistics, both placements).

Run ``python benchmarks/measurement_bench.py`` (``--quick`` for fewer timing runs).

A "full private measurement" is the in-process two-stage protocol (``mu', D'', mu_bar', Q'',
I2'', I2'''``, sigmas and privacy spent) run once with distributed and once with central noise
(``fa_hetdp.protocol.private_statistics``) on synthetic data in ``[0, 1]``. Target: <= 150 ms
at n = 1000, d = 3072 on the 2-core development machine. Also reported: the batch path
(``private_statistics_batch``, repeats = 1 and the marginal cost per extra repeat), one client's
stage-1 + stage-2 contribution, and the scaling over n and d.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import numpy as np
from rich.console import Console
from rich.table import Table

from fa_hetdp.config.protocol import ProtocolConfig
from fa_hetdp.protocol.client import local_values, stage1_contribution, stage2_contribution
from fa_hetdp.protocol.plan import plan_protocol
from fa_hetdp.protocol.simulate import private_statistics, private_statistics_batch

EPSILON = 1.0
DELTA = 1e-5


def timings(fn: Callable[[], object], runs: int) -> tuple[float, float, float]:
    """(median wall ms, min wall ms, median CPU ms of this process) over ``runs`` calls.

    The CPU time (all threads of this process) is much less sensitive than the wall time to
    other processes competing for the two cores; the minimum wall time is the least disturbed
    run.
    """
    fn()  # warm-up
    wall, cpu = [], []
    for _ in range(runs):
        w0, c0 = time.perf_counter(), time.process_time()
        fn()
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - w0)
    return 1e3 * statistics.median(wall), 1e3 * min(wall), 1e3 * statistics.median(cpu)


def median_ms(fn: Callable[[], object], runs: int) -> float:
    return timings(fn, runs)[0]


def full_measurement(x: np.ndarray, rng: np.random.Generator) -> None:
    for placement in ("distributed", "central"):
        private_statistics(x, epsilon=EPSILON, delta=DELTA, placement=placement, rng=rng)


def batch_measurement(x: np.ndarray, rng: np.random.Generator, repeats: int) -> None:
    for placement in ("distributed", "central"):
        cfg = ProtocolConfig(EPSILON, DELTA, placement=placement)
        private_statistics_batch(x, cfg, repeats=repeats, rng=rng)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer timing runs")
    args = parser.parse_args()
    runs = 5 if args.quick else 15
    console = Console()
    rng = np.random.default_rng(0)
    console.print(f"load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")

    n, d = 1000, 3072
    x = rng.random((n, d))
    head = Table(title=f"One full private measurement, n={n}, d={d} ({runs} runs)")
    head.add_column("what")
    head.add_column("median ms", justify="right")
    head.add_column("min ms", justify="right")
    head.add_column("median CPU ms", justify="right")
    head.add_column("target", justify="right")
    med, low, cpu = timings(lambda: full_measurement(x, rng), runs)
    head.add_row(
        "private_statistics, distributed + central",
        f"{med:.1f}",
        f"{low:.1f}",
        f"{cpu:.1f}",
        "<= 150",
    )
    b1 = timings(lambda: batch_measurement(x, rng, 1), runs)
    head.add_row(
        "private_statistics_batch(repeats=1), both placements",
        f"{b1[0]:.1f}",
        f"{b1[1]:.1f}",
        f"{b1[2]:.1f}",
        "",
    )
    b101 = timings(lambda: batch_measurement(x, rng, 101), max(3, runs // 3))
    head.add_row(
        "  marginal cost per extra repeat (both placements)",
        f"{(b101[0] - b1[0]) / 100:.3f}",
        f"{(b101[1] - b1[1]) / 100:.3f}",
        f"{(b101[2] - b1[2]) / 100:.3f}",
        "",
    )
    plan = plan_protocol(ProtocolConfig(EPSILON, DELTA), n=n, d=d)
    lv = local_values(x[0], variance_floor=0.01)
    m = np.full(d, 0.5)

    def one_client() -> None:
        stage1_contribution(lv, plan, rng=rng)
        stage2_contribution(lv, plan, m, m, rng=rng)

    c = timings(one_client, runs * 10)
    head.add_row(
        "one client's stage-1 + stage-2 contribution",
        f"{c[0]:.3f}",
        f"{c[1]:.3f}",
        f"{c[2]:.3f}",
        "",
    )
    console.print(head)

    scale = Table(
        title="Scaling: one full measurement, both placements (median wall ms / median CPU ms)"
    )
    scale.add_column("n \\ d", justify="right")
    dims = (64, 784, 3072)
    for dim in dims:
        scale.add_column(f"d={dim}", justify="right")
    for n_clients in (100, 1000, 10000):
        row = [f"n={n_clients}"]
        for dim in dims:
            data = rng.random((n_clients, dim))
            reps = runs if n_clients * dim <= 4_000_000 else max(3, runs // 3)
            med, _, cpu = timings(lambda data=data: full_measurement(data, rng), reps)
            row.append(f"{med:.1f} / {cpu:.1f}")
            del data
        scale.add_row(*row)
    console.print(scale)
    load = os.getloadavg()
    console.print(
        f"load average during the run: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} "
        f"on {os.cpu_count()} CPUs (other processes inflate the medians)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
