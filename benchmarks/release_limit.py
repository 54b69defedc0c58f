"""How well the silo summaries' releases can know the exact Q, at best, on each real data set.

One command: ``python benchmarks/release_limit.py``. In the silo-summaries design every silo
releases its noisy means ``theta~_i = theta_i + e_i``, ``e_i ~ N(0, st_i^2)`` with ``st_i`` public
(the plan's, :func:`fa_hetdp.protocol.silo_summaries.plan_silo_summaries`). The exact Cochran's
``Q = theta' A theta`` (``A = W - w w'/sum w``, ``W = diag(w)``, ``w_i = m_i/s_i^2``) is a
quadratic form in the silos' means, and ``T = theta~' A theta~ - tr(A S)`` (``S = diag(st^2)``)
is an unbiased estimate of it. With ``S`` known, the noisy means are a complete sufficient
statistic of the true ones (a Gaussian location family), so by Lehmann-Scheffe ``T`` is the
*minimum-variance* unbiased estimate of ``Q``: no unbiased estimator built on these releases
does better, however it is computed, even one that is told the exact weights ``w`` (the server
is not: it has only noisy variances, which make matters worse). Its standard deviation is

    sd(T) = sqrt(2 tr(A S A S) + 4 theta' A S A theta)

(the variance of a Gaussian quadratic form). Where ``sd(T)`` is comparable to ``Q`` itself,
the silo summaries cannot track ``Q`` -- nor ``I^2 = (Q - (n - 1))/Q`` and DerSimonian and
Laird's ``tau2``, which are functions of it -- without a bias of the same order: a limit of the
design's releases, not of its estimator. The table gives ``sd(T)/Q`` per column, ``I^2`` at
``Q`` and at ``Q +- sd(T)``, and the median silo's noise variance over its mean's sampling
variance ``st_i^2/(s_i^2/m_i)``. ``tests/test_release_limit.py`` checks the formula and the
unbiasedness by simulation.
"""

from __future__ import annotations

import argparse
import datetime
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import meta_real_bench
import real_silos

import fa_hetdp
from fa_hetdp.protocol.silo_summaries import plan_silo_summaries

EPSILON, DELTA = 1.0, 1e-5


def unbiased_q(theta: np.ndarray, s2: np.ndarray, m: np.ndarray, st: np.ndarray) -> dict:
    """The exact ``Q`` of one column and the sd of its best unbiased estimate from noisy means.

    ``theta``, ``s2``: the silos' means and sample variances ``(n,)``; ``m`` counts; ``st`` the
    means' noise sd. Returns ``q``, ``sd`` (of ``T``), the matrix ``a`` and the noise variance
    ``noise`` (``tr(A S)``, what ``T`` subtracts).
    """
    w = m / s2
    a = np.diag(w) - np.outer(w, w) / w.sum()
    noise = st * st
    a_s = a * noise[None, :]  # A S
    q = float(theta @ a @ theta)
    var = 2.0 * float(np.sum(a_s * a_s.T)) + 4.0 * float(theta @ a_s @ a @ theta)
    return {"q": q, "sd": var**0.5, "a": a, "noise": float(np.sum(np.diag(a) * noise))}


def i2_of(q: float, n: int) -> float:
    """Higgins and Thompson's ``I^2 = max(0, (Q - (n - 1))/Q)``."""
    return max(0.0, (q - (n - 1)) / q) if q > 0 else 0.0


def limits(data: real_silos.RealSilos) -> list[dict[str, Any]]:
    """One row per defined column of ``data`` (the benchmark's coordinates)."""
    ids = np.asarray(data.client_ids)
    n = int(ids.max()) + 1
    m = np.bincount(ids, minlength=n).astype(np.float64)
    x = np.asarray(data.records, dtype=np.float64)
    theta = np.stack([x[ids == i].mean(axis=0) for i in range(n)])
    s2 = np.stack([x[ids == i].var(axis=0, ddof=1) for i in range(n)])
    st = plan_silo_summaries(EPSILON, DELTA, m.astype(np.int64), data.d).sigmas[0]
    exact = fa_hetdp.meta_analysis(data.records, data.client_ids)
    ok = meta_real_bench.defined_mask(data, exact)
    rows = []
    for j in np.flatnonzero(ok):
        got = unbiased_q(theta[:, j], s2[:, j], m, st)
        np.testing.assert_allclose(got["q"], float(exact.q[j]), rtol=1e-9)
        q, sd = got["q"], got["sd"]
        rows.append(
            {
                "name": data.name,
                "column": data.columns[j],
                "n": n,
                "q": q,
                "sd": sd,
                "i2": i2_of(q, n),
                "i2_low": i2_of(q - sd, n),
                "i2_high": i2_of(q + sd, n),
                "noise_ratio": float(np.median(st * st / (s2[:, j] / m))),
            }
        )
    return rows


def table(rows: Sequence[dict[str, Any]]) -> list[str]:
    """One row per data set and column."""
    lines = [
        "| data set | column | silos | exact Q | sd of the best unbiased estimate of Q from the "
        "silo summaries | sd / Q | I² at Q [at Q − sd, Q + sd] | median silo: noise var / "
        "sampling var of its mean |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['name']} | {r['column']} | {r['n']} | {r['q']:.4g} | {r['sd']:.4g} | "
            f"{r['sd'] / r['q']:.3g} | {r['i2']:.3f} [{r['i2_low']:.3f}, {r['i2_high']:.3f}] | "
            f"{r['noise_ratio']:.3g} |"
        )
    return lines


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Every real data set (``--sets``: a comma-separated subset): print the table."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sets", default=",".join(real_silos.names()))
    args = parser.parse_args(argv)
    start = time.perf_counter()
    rows = [row for name in args.sets.split(",") for row in limits(real_silos.load(name))]
    print(
        f"{datetime.date.today().isoformat()}: python benchmarks/release_limit.py "
        f"(epsilon {EPSILON:g}, delta {DELTA:g}, record unit; "
        f"{time.perf_counter() - start:.0f} s)"
    )
    print("\n".join(table(rows)))
    return rows


if __name__ == "__main__":
    main(sys.argv[1:])
