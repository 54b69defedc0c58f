"""Tests for benchmarks/discrete_reference.py: the discrete sum end to end, and a privacy audit."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from scipy import stats
from support import benchmark_module
from threshold_audit import threshold_epsilon_lower_bound

from fa_hetdp.errors import InputDataError, PrivacyParameterError

_reference = benchmark_module("discrete_reference")
DiscreteSum, discrete_sum = _reference.DiscreteSum, _reference.discrete_sum

ALPHA = 0.01  # significance level of the statistical tests below (fixed seeds, no redraws)


@pytest.mark.parametrize("kind", ["ddg", "skellam"])
def test_release_is_unbiased_with_the_calibrated_error(kind: str) -> None:
    n, d = 50, 400
    ds = discrete_sum(kind, epsilon=1.0, delta=1e-5, n=n, bounds=np.ones(d), modulus_bits=16)
    rng = np.random.default_rng(8)
    x = rng.random((n, d))
    err = ds.release(x, rng=rng) - x.sum(axis=0)
    # Mean zero (t-test at ALPHA) and the per-coordinate error no larger than calibrated:
    # the calibration's rounding term is the worst case 1/4 per client, so it is an upper bound.
    assert stats.ttest_1samp(err, 0.0).pvalue > ALPHA
    chi2_low = stats.chi2.ppf(ALPHA, d - 1) / (d - 1)
    assert np.var(err, ddof=1) / ds.calibration.expected_mse > chi2_low
    assert np.var(err, ddof=1) < ds.calibration.expected_mse * stats.chi2.ppf(1 - ALPHA, d - 1) / (
        d - 1
    )


def test_modular_sum_decodes_exactly_without_noise() -> None:
    ds = discrete_sum("ddg", epsilon=1.0, delta=1e-5, n=4, bounds=np.ones(3), modulus_bits=12)
    rng = np.random.default_rng(1)
    rounded = ds.round_values(rng.random((4, 3)), rng=rng)
    # Shares reduced mod m and summed in Z_m decode to the integer sum (no noise here).
    total = ds.aggregate(np.mod(rounded, ds.modulus))
    np.testing.assert_array_equal(ds.decode(total, 4), rounded.sum(axis=0) * ds.calibration.gamma)
    # Values wrap: a share is in [0, m).
    shares = ds.client_share(rng.random((4, 3)), rng=rng)
    assert shares.min() >= 0 and shares.max() < ds.modulus


def test_bad_inputs() -> None:
    ds = discrete_sum("skellam", epsilon=1.0, delta=1e-5, n=4, bounds=np.ones(3), modulus_bits=16)
    with pytest.raises(InputDataError, match=r"\[0, b_j\]"):
        ds.release(np.full((4, 3), 1.5), rng=np.random.default_rng(0))
    with pytest.raises(PrivacyParameterError, match="modulus_bits <= 62"):
        DiscreteSum(replace(ds.calibration, modulus_bits=64), ds.bounds)
    with pytest.raises(PrivacyParameterError, match="mechanism"):
        discrete_sum("laplace", epsilon=1.0, delta=1e-5, n=4, bounds=np.ones(3))


def _audit_epsilon(ds: DiscreteSum, trials: int, seed: int) -> float:
    """Empirical lower bound on epsilon from neighbouring datasets (one client 0 -> 1).

    For every threshold k, ``P(y >= k | D') <= e^eps P(y >= k | D) + delta`` must hold;
    Clopper-Pearson bounds at level ALPHA (Bonferroni over the thresholds) turn the counts
    into a lower bound on epsilon that is valid with probability >= 1 - ALPHA.
    """
    rng = np.random.default_rng(seed)
    n = 3
    base = np.zeros((trials, n, 1))
    neighbour = base.copy()
    neighbour[:, 0, 0] = 1.0
    outs = []
    for data in (base, neighbour):
        shares = ds.client_share(data, rng=rng)  # (trials, n, 1)
        total = np.mod(shares.sum(axis=1), ds.modulus)
        outs.append(ds.decode(total, n)[:, 0] / ds.calibration.gamma)
    y0, y1 = outs
    thresholds = np.unique(np.quantile(y1, np.linspace(0.5, 0.999, 40)))
    return threshold_epsilon_lower_bound(
        y0, y1, thresholds, delta=ds.calibration.delta, alpha=ALPHA
    )


@pytest.mark.statistical
@pytest.mark.parametrize("kind", ["ddg", "skellam"])
def test_privacy_audit_small_case(kind: str) -> None:
    ds = discrete_sum(kind, epsilon=1.0, delta=1e-5, n=3, bounds=np.ones(1), modulus_bits=16)
    assert _audit_epsilon(ds, 100_000, seed=21) <= 1.0
    # The audit has power: a fifth of the noise scale is caught.
    cal = ds.calibration
    weak = replace(cal, noise=cal.noise / 5 if kind == "ddg" else cal.noise / 25)
    assert _audit_epsilon(DiscreteSum(weak, ds.bounds), 100_000, seed=21) > 1.0
