"""Tests for fa_hetdp.dp.discrete: the exact discrete Gaussian and the Skellam samplers."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from fa_hetdp.dp import discrete
from fa_hetdp.dp.discrete import (
    as_rational_variance,
    discrete_gaussian_pmf,
    sample_discrete_gaussian,
    sample_skellam,
    skellam_pmf,
)
from fa_hetdp.dp.rng import csprng_generator
from fa_hetdp.errors import PrivacyParameterError

ALPHA = 0.001  # significance level of every statistical test below (fixed seeds, no redraws)


def _chi_square_pvalue(draws: np.ndarray, pmf: np.ndarray, support: np.ndarray) -> float:
    """Pearson chi-square p-value of integer draws against an exact pmf on ``support``.

    Cells with expected count < 5 are merged into the two tails (one cell each).
    """
    n = draws.size
    expected = n * pmf
    inner = expected >= 5.0
    lo, hi = support[inner].min(), support[inner].max()
    cells = support[(support >= lo) & (support <= hi)]
    observed = np.array([np.sum(draws == k) for k in cells], dtype=np.float64)
    exp_cells = n * pmf[(support >= lo) & (support <= hi)]
    tails_obs = np.array([np.sum(draws < lo), np.sum(draws > hi)], dtype=np.float64)
    tails_exp = n * np.array([pmf[support < lo].sum(), pmf[support > hi].sum()])
    keep = tails_exp > 0
    observed = np.concatenate([observed, tails_obs[keep]])
    exp_all = np.concatenate([exp_cells, tails_exp[keep]])
    exp_all *= observed.sum() / exp_all.sum()  # the pmf's truncated mass is below 1e-12
    return float(stats.chisquare(observed, exp_all).pvalue)


@pytest.mark.statistical
@pytest.mark.parametrize("sigma_squared", [0.3, Fraction(5, 2), 30.0**2])
def test_discrete_gaussian_matches_its_pmf(sigma_squared: float | Fraction) -> None:
    draws = sample_discrete_gaussian(sigma_squared, 200_000, rng=np.random.default_rng(2024))
    s2 = float(as_rational_variance(sigma_squared))
    half = int(12 * math.sqrt(s2)) + 12
    support = np.arange(-half, half + 1)
    assert _chi_square_pvalue(draws, discrete_gaussian_pmf(support, s2), support) > ALPHA


@pytest.mark.statistical
def test_discrete_gaussian_detects_a_wrong_variance() -> None:
    # The same test rejects draws of a 10% larger variance: it can fail.
    draws = sample_discrete_gaussian(30.0**2 * 1.1, 200_000, rng=np.random.default_rng(2024))
    support = np.arange(-400, 401)
    assert _chi_square_pvalue(draws, discrete_gaussian_pmf(support, 900.0), support) < ALPHA


@pytest.mark.statistical
@pytest.mark.parametrize(
    ("sigma_squared", "limit_bits"),
    [(100.0, 12), (Fraction(401, 4), 12), (30.0**2, 16), (30.0**2, 12)],
)
def test_discrete_gaussian_split_and_two_limb_paths_match_its_pmf(
    monkeypatch: pytest.MonkeyPatch, sigma_squared: float | Fraction, limit_bits: int
) -> None:
    # Lowering the int64 limit sends sigma = 10 or 30 through the paths that large sigma
    # takes: the split acceptance exp(-T_1) exp(-T_23), two-limb uniforms, and the
    # Python-integer form for draws whose w exceeds the limit (sigma = 30 at 2^12). Dropping
    # the T_23 coin gives p < 1e-20 at sigma = 10 (checked when this test was written).
    calls: list[int] = []
    product = discrete._bernoulli_exp_product

    def counted(*args: object, **kwargs: object) -> object:
        calls.append(len(args[0]))  # type: ignore[arg-type]
        return product(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(discrete, "_INT64_SAFE", 1 << limit_bits)
    monkeypatch.setattr(discrete, "_bernoulli_exp_product", counted)
    draws = sample_discrete_gaussian(sigma_squared, 200_000, rng=np.random.default_rng(77))
    assert sum(calls) > 10_000  # the split path ran on many proposals
    s2 = float(as_rational_variance(sigma_squared))
    support = np.arange(-400, 401)
    assert _chi_square_pvalue(draws, discrete_gaussian_pmf(support, s2), support) > ALPHA


@pytest.mark.statistical
def test_discrete_gaussian_split_path_detects_a_wrong_variance(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(discrete, "_INT64_SAFE", 1 << 16)
    draws = sample_discrete_gaussian(30.0**2 * 1.1, 200_000, rng=np.random.default_rng(77))
    support = np.arange(-400, 401)
    assert _chi_square_pvalue(draws, discrete_gaussian_pmf(support, 900.0), support) < ALPHA


@pytest.mark.statistical
def test_discrete_gaussian_large_sigma() -> None:
    # sigma = 10^6: Alg. 3's integers exceed 2^62; the split acceptance keeps them in int64.
    # At this sigma N_Z(0, s^2) and N(0, s^2) differ by far less than the test can see.
    sigma = 1.0e6
    draws = sample_discrete_gaussian(sigma**2, 50_000, rng=np.random.default_rng(5))
    assert draws.dtype == np.int64
    assert stats.kstest(draws / sigma, "norm").pvalue > ALPHA


def test_discrete_gaussian_shape_and_seed() -> None:
    a = sample_discrete_gaussian(4.0, (3, 5), rng=np.random.default_rng(1))
    b = sample_discrete_gaussian(4.0, (3, 5), rng=np.random.default_rng(1))
    assert a.shape == (3, 5)
    np.testing.assert_array_equal(a, b)
    c = sample_discrete_gaussian(4.0, 1000, rng=csprng_generator())  # deployment generator
    assert c.shape == (1000,) and 1.0 < float(np.var(c)) < 16.0


def test_rational_variance_rounds_up_within_2_pow_minus_16() -> None:
    for x in (0.1, 2.5, 1234.567, 1.0e9 + 0.5):
        r = as_rational_variance(x)
        assert Fraction(x) <= r <= Fraction(x) * (1 + Fraction(1, 1 << 16))
    assert as_rational_variance(1.0e6).denominator == 1
    assert as_rational_variance(Fraction(7, 3)) == Fraction(7, 3)
    for bad in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(PrivacyParameterError, match="sigma_squared"):
            as_rational_variance(bad)


@pytest.mark.statistical
@pytest.mark.parametrize("variance", [0.7, 10.0, 400.0])
def test_skellam_matches_its_pmf(variance: float) -> None:
    draws = sample_skellam(variance, 200_000, rng=np.random.default_rng(77))
    half = int(12 * math.sqrt(variance)) + 12
    support = np.arange(-half, half + 1)
    assert _chi_square_pvalue(draws, skellam_pmf(support, variance), support) > ALPHA


def test_skellam_per_coordinate_variance_and_errors() -> None:
    draws = sample_skellam(np.array([1.0, 100.0]), (50_000, 2), rng=np.random.default_rng(3))
    assert draws.dtype == np.int64
    np.testing.assert_allclose(draws.var(axis=0), [1.0, 100.0], rtol=0.05)
    with pytest.raises(PrivacyParameterError, match="Skellam variance"):
        sample_skellam(0.0, 3, rng=np.random.default_rng(0))
