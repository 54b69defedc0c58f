"""Benchmark: draws per second of the exact integer-noise samplers (issue 12).

Run ``python benchmarks/sampler_bench.py`` (``--draws N``, default 1 000 000; ``--quick`` =
200 000). For each ``sigma`` in lattice units (10 ... 10^7: the discrete mechanisms' shares
have ``sigma >= 16`` and reach ``10^5``-``10^7`` on the protocol's weighted releases) it
times :func:`~fa_hetdp.dp.discrete.sample_discrete_gaussian` (exact, Canonne-Kamath-Steinke
Alg. 1-3) and :func:`~fa_hetdp.dp.discrete.sample_skellam` on one seeded generator, best of
three, and prints draws per second, the draws' standard deviation over ``sigma`` (a sanity
check, about 1) and the machine's load average.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable

import numpy as np

from fa_hetdp.dp.discrete import sample_discrete_gaussian, sample_skellam

SIGMAS = (10.0, 1.0e3, 1.0e4, 4.0e4, 1.0e5, 1.0e6, 1.0e7)


def best_rate(draw: Callable[[], np.ndarray], draws: int, repeats: int = 3) -> tuple[float, float]:
    """Best draws per second over ``repeats`` calls, and the last draws' std."""
    best = float("inf")
    out = np.zeros(1)
    for _ in range(repeats):
        start = time.perf_counter()
        out = draw()
        best = min(best, time.perf_counter() - start)
    return draws / best, float(np.std(out))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=1_000_000)
    parser.add_argument("--quick", action="store_true", help="200 000 draws")
    args = parser.parse_args()
    draws = 200_000 if args.quick else args.draws
    rng = np.random.default_rng(2026)
    print(f"{draws} draws per call, best of 3; load average {os.getloadavg()[0]:.2f}")
    print("| sigma (lattice units) | discrete Gaussian draws/s | std/sigma | Skellam draws/s |")
    print("|---|---|---|---|")
    for sigma in SIGMAS:
        v = sigma * sigma
        dg, dg_std = best_rate(lambda v=v: sample_discrete_gaussian(v, draws, rng=rng), draws)
        sk, _ = best_rate(lambda v=v: sample_skellam(v, draws, rng=rng), draws)
        print(f"| {sigma:.0e} | {dg:,.0f} | {dg_std / sigma:.4f} | {sk:,.0f} |")


if __name__ == "__main__":
    main()
