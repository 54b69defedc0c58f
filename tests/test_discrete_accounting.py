"""Tests for fa_hetdp.dp.discrete_accounting (RDP of the DDG and Skellam sums, conversion)."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from dp_accounting.rdp import rdp_privacy_accountant

from fa_hetdp.dp.discrete_accounting import (
    RDP_ORDERS,
    DiscreteGaussianSumEvent,
    SkellamSumEvent,
    compose_rdp,
    ddg_tau,
    rdp_delta,
    rdp_epsilon,
    zcdp_epsilon,
    zcdp_rho_for,
)
from fa_hetdp.errors import PrivacyParameterError

ORDERS = np.asarray(RDP_ORDERS, dtype=np.float64)


@pytest.mark.parametrize("rho", [0.01, 0.5, 3.0])
@pytest.mark.parametrize("delta", [1e-5, 1e-9])
def test_conversion_matches_dp_accounting(rho: float, delta: float) -> None:
    # Reference: dp-accounting's compute_epsilon (the same CKS 2020 Prop. 12 conversion).
    want, order = rdp_privacy_accountant.compute_epsilon(ORDERS, ORDERS * rho, delta)
    got, got_order = rdp_epsilon(ORDERS, ORDERS * rho, delta)
    assert got == pytest.approx(float(want), rel=1e-12)
    assert got_order == order
    # delta at that epsilon inverts it.
    assert rdp_delta(ORDERS, ORDERS * rho, got) == pytest.approx(delta, rel=1e-9)


@pytest.mark.parametrize("rho", [0.01, 0.5, 3.0])
@pytest.mark.parametrize("epsilon", [0.5, 1.0, 4.0])
def test_delta_matches_dp_accounting(rho: float, epsilon: float) -> None:
    want, _ = rdp_privacy_accountant.compute_delta(ORDERS, ORDERS * rho, epsilon)
    assert rdp_delta(ORDERS, ORDERS * rho, epsilon) == pytest.approx(float(want), rel=1e-12)


def test_tau_against_mpmath() -> None:
    # Reference: KLS 2021 Thm 1's tau summed with mpmath at 30 digits.
    for sigma, m in ((0.5, 10), (1.0, 1000), (0.3, 50)):
        with mpmath.workdps(30):
            want = 10 * mpmath.fsum(
                mpmath.exp(-2 * mpmath.pi**2 * sigma**2 * k / (k + 1)) for k in range(1, m)
            )
        assert ddg_tau(sigma, m) == pytest.approx(float(want), rel=1e-12)
    assert ddg_tau(3.0, 1) == 0.0


def test_ddg_is_the_gaussian_when_tau_vanishes() -> None:
    # sigma = 4 per share: tau ~ 1e-136, so Prop. 14 is the Gaussian RDP alpha Delta^2/(2 m s^2).
    event = DiscreteGaussianSumEvent(4.0, 100, 20.0, 400.0, 1000)
    np.testing.assert_allclose(event.rdp(ORDERS), ORDERS * 20.0**2 / (2 * 100 * 16.0), rtol=1e-12)
    assert event.zcdp_rho() == pytest.approx(20.0**2 / (2 * 100 * 16.0), rel=1e-12)


def test_ddg_small_shares_pay_for_tau() -> None:
    gaussian = DiscreteGaussianSumEvent(2.0, 100, 20.0, 400.0, 1000).rdp(ORDERS)
    small = DiscreteGaussianSumEvent(0.2, 10_000, 20.0, 400.0, 1000)  # same total variance
    assert small.tau > 0.1
    assert np.all(small.rdp(ORDERS) > gaussian)
    assert np.all(small.rdp(ORDERS) <= ORDERS * small.zcdp_rho() + 1e-12)


def test_dropouts_cost_privacy() -> None:
    full = DiscreteGaussianSumEvent(3.0, 100, 20.0, 400.0, 1000)
    fewer = DiscreteGaussianSumEvent(3.0, 60, 20.0, 400.0, 1000)
    assert (
        rdp_epsilon(ORDERS, fewer.rdp(ORDERS), 1e-5)[0]
        > rdp_epsilon(ORDERS, full.rdp(ORDERS), 1e-5)[0]
    )


def test_skellam_bound_and_its_gaussian_limit() -> None:
    # AKL 2021 Thm 3.5 evaluated by hand at alpha = 2: 2*4/(2*10) + min((3*4 + 6*6)/400, 9/10)
    event = SkellamSumEvent(10.0, 2.0, 6.0)
    assert event.rdp([2])[0] == pytest.approx(0.4 + 48.0 / 400.0, rel=1e-15)
    # Large variance: within 1e-4 relative of the Gaussian RDP of the same variance.
    big = SkellamSumEvent(1e6, 50.0, 2500.0)
    np.testing.assert_allclose(big.rdp(ORDERS[:60]), ORDERS[:60] * 2500.0 / 2e6, rtol=1e-4)
    assert np.all(big.rdp(ORDERS) <= ORDERS * big.zcdp_rho() * (1 + 1e-12))
    with pytest.raises(PrivacyParameterError, match="integer orders"):
        event.rdp([1.5])


def test_composition_adds_and_zcdp_inverts() -> None:
    a = DiscreteGaussianSumEvent(4.0, 100, 20.0, 400.0, 1000)
    b = SkellamSumEvent(1e4, 30.0, 900.0)
    np.testing.assert_allclose(compose_rdp([a, b]), a.rdp(ORDERS) + b.rdp(ORDERS))
    for eps in (0.1, 1.0, 8.0):
        rho = zcdp_rho_for(eps, 1e-6)
        assert zcdp_epsilon(rho, 1e-6) <= eps
        assert zcdp_epsilon(rho * (1 + 1e-9), 1e-6) > eps * (1 - 1e-6)
    assert math.isclose(zcdp_epsilon(0.0, 1e-5), 0.0)
