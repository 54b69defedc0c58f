"""Tests for fa_hetdp.dp.calibration: AGM (Thm 2.10, Alg. 1) and CGM (Thm 2.9) calibration.

Reference values come from an mpmath solution of the paper's Thm 2.10 condition at
``mp.dps = 50`` (independent of the float code: the float result only proposes a bracket,
whose sign change is checked in mpmath before the 50-digit root is taken).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import mpmath as mp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fa_hetdp.dp.calibration import (
    achieved_delta,
    achieved_epsilon,
    calibrate_sigma,
    cgm_sigma,
)
from fa_hetdp.errors import BaselineWarning, PrivacyParameterError

mp.mp.dps = 50

EPSILONS = [float(e) for e in np.logspace(-3, 2, 8)]
DELTAS = [float(d) for d in np.logspace(-15, math.log10(0.5), 8)]
GRID = [(e, d) for e in EPSILONS for d in DELTAS]
# Points where Balle & Wang's reference implementation is known to fail (1.4x target delta
# at (1e-3, 1e-12); 2 % off in sigma at (20, 1e-10)).
BALLE_FAILURES = [(1e-3, 1e-12), (20.0, 1e-10)]


def mp_delta(s: Any, epsilon: Any) -> Any:
    """Thm 2.10 left side in mpmath, for sensitivity 1 and noise ``s``."""
    s = mp.mpf(s)
    eps = mp.mpf(epsilon)
    return mp.ncdf(1 / (2 * s) - eps * s) - mp.exp(eps) * mp.ncdf(-1 / (2 * s) - eps * s)


@functools.cache
def mp_sigma(epsilon: float, delta: float) -> Any:
    """50-digit smallest s with mp_delta(s) <= delta (sensitivity 1)."""
    guess = calibrate_sigma(epsilon, delta)  # proposes a bracket only
    log_target = mp.log(mp.mpf(delta))

    def f(log_s: Any) -> Any:
        return mp.log(mp_delta(mp.exp(log_s), epsilon)) - log_target

    lo = mp.log(mp.mpf(guess)) - mp.mpf("0.01")
    hi = mp.log(mp.mpf(guess)) + mp.mpf("0.01")
    if not (f(lo) > 0 > f(hi)):
        raise AssertionError(f"oracle bracket has no sign change at {epsilon}, {delta}")
    return mp.exp(mp.findroot(f, (lo, hi), solver="anderson"))


# --------------------------------------------------------------------------- AGM accuracy


@pytest.mark.parametrize(("epsilon", "delta"), GRID + BALLE_FAILURES)
def test_agm_matches_mpmath_and_never_under_noises(epsilon: float, delta: float) -> None:
    sigma = calibrate_sigma(epsilon, delta)
    exact = mp_sigma(epsilon, delta)
    rel = float((mp.mpf(sigma) - exact) / exact)
    # Reference: mpmath dps=50. Required: 1e-9 relative; asserted: 1e-12 (measured on this
    # grid: <= 3.5e-14, always >= 0 because sigma is raised by its float error bound).
    assert abs(rel) <= 1e-12
    # Never under-noise: the 50-digit delta of the returned sigma is at most the target.
    assert mp_delta(sigma, epsilon) <= mp.mpf(delta)


@pytest.mark.parametrize(("epsilon", "delta"), BALLE_FAILURES)
def test_agm_with_sensitivity_at_balle_failure_points(epsilon: float, delta: float) -> None:
    sensitivity = 3.7
    sigma = calibrate_sigma(epsilon, delta, sensitivity)
    exact = sensitivity * mp_sigma(epsilon, delta)
    assert abs(float((mp.mpf(sigma) - exact) / exact)) <= 1e-12
    assert mp_delta(sigma / sensitivity, epsilon) <= mp.mpf(delta)


@pytest.mark.parametrize("epsilon", [1e-6, 1e-5, 1e-4])
@pytest.mark.parametrize("delta", [1e-300, 1e-15, 1e-5])
def test_agm_accurate_below_the_specified_epsilon_range(epsilon: float, delta: float) -> None:
    # Outside the specified range: the small-noise-width quadrature keeps full accuracy.
    # Reference: mpmath dps=50; measured <= 2.5e-14; tolerance 1e-12 relative.
    sigma = calibrate_sigma(epsilon, delta)
    exact = mp_sigma(epsilon, delta)
    assert 0.0 <= float((mp.mpf(sigma) - exact) / exact) <= 1e-12


def test_achieved_delta_matches_mpmath_on_random_points() -> None:
    # Reference: mpmath dps=50; tolerance 1e-10 relative in delta. Covers both branches of
    # the cancellation-free evaluation, epsilon = 0, and delta down to ~1e-280.
    rng = np.random.default_rng(20240601)
    checked = 0
    for _ in range(300):
        epsilon = float(10 ** rng.uniform(-3, 2))
        s = float(10 ** rng.uniform(-2, 4))
        if rng.random() < 0.1:
            epsilon = 0.0
        exact = mp_delta(s, epsilon)
        if exact < mp.mpf("1e-280"):
            continue
        got = achieved_delta(s, epsilon)
        assert abs(float((mp.mpf(got) - exact) / exact)) <= 1e-10, (s, epsilon)
        checked += 1
    assert checked > 200


def test_achieved_delta_scales_with_sensitivity() -> None:
    assert achieved_delta(6.0, 0.5, 2.0) == pytest.approx(achieved_delta(3.0, 0.5), rel=1e-14)


def test_achieved_delta_at_epsilon_zero_is_erf() -> None:
    # delta(s, 0) = Phi(1/(2s)) - Phi(-1/(2s)) = erf(1/(2 sqrt2 s)).
    for s in (0.1, 1.0, 1e3, 1e6):
        assert achieved_delta(s, 0.0) == pytest.approx(math.erf(1 / (2 * math.sqrt(2) * s)), 1e-13)


# --------------------------------------------------------------------------- cross-checks


@pytest.mark.parametrize(("epsilon", "delta"), GRID)
def test_agm_agrees_with_dp_accounting(epsilon: float, delta: float) -> None:
    gm = pytest.importorskip("dp_accounting.gaussian_mechanism")
    theirs = gm.get_sigma_gaussian(epsilon, delta)
    # dp_accounting solves the same condition (brentq, xtol=1e-12 absolute); measured on this
    # grid: it is within 2.7e-12 of mpmath (ours within 3.5e-14); tolerance 1e-10 relative.
    assert calibrate_sigma(epsilon, delta) == pytest.approx(theirs, rel=1e-10)


@pytest.mark.parametrize("sigma", [0.1, 0.7, 3.0, 25.0, 400.0])
@pytest.mark.parametrize("delta", [1e-12, 1e-6, 0.01])
def test_achieved_epsilon_agrees_with_dp_accounting(sigma: float, delta: float) -> None:
    gm = pytest.importorskip("dp_accounting.gaussian_mechanism")
    theirs = gm.get_epsilon_gaussian(sigma, delta)
    ours = achieved_epsilon(sigma, delta)
    if theirs == 0:
        assert ours == 0.0
    else:
        # Tolerance 1e-9 relative (dp_accounting brentq, xtol=1e-12 absolute in epsilon).
        assert ours == pytest.approx(theirs, rel=1e-9, abs=1e-11)


# --------------------------------------------------------------------------- inversion


@pytest.mark.parametrize(("epsilon", "delta"), GRID[::3] + BALLE_FAILURES)
def test_inversion(epsilon: float, delta: float) -> None:
    sigma = calibrate_sigma(epsilon, delta, 2.5)
    got_delta = achieved_delta(sigma, epsilon, 2.5)
    assert got_delta <= delta
    assert got_delta == pytest.approx(delta, rel=1e-6)
    got_eps = achieved_epsilon(sigma, delta, 2.5)
    # Float rounding allows the inverse to land a few ulps above epsilon.
    assert got_eps <= epsilon * (1 + 1e-12)
    assert got_eps == pytest.approx(epsilon, rel=1e-8)
    # achieved_epsilon never under-reports: delta at the returned epsilon is <= delta.
    assert achieved_delta(sigma, got_eps, 2.5) <= delta


def test_achieved_epsilon_zero_when_delta_already_met() -> None:
    # delta(s=10, eps=0) = erf(1/(20 sqrt2)) ~ 0.0399 <= 0.5.
    assert achieved_epsilon(10.0, 0.5) == 0.0
    assert achieved_epsilon(10.0, 0.01) > 0.0


@given(
    sigma=st.floats(0.05, 1e3),
    delta=st.floats(1e-14, 0.5),
)
@settings(max_examples=60, deadline=None)
def test_achieved_epsilon_is_smallest(sigma: float, delta: float) -> None:
    eps = achieved_epsilon(sigma, delta)
    assert achieved_delta(sigma, eps) <= delta
    if eps > 0.0:
        assert achieved_delta(sigma, eps * (1 - 1e-6)) > delta


# --------------------------------------------------------------------------- properties

_eps = st.floats(1e-3, 100.0)
_delta = st.floats(1e-15, 0.5)


@given(e1=_eps, e2=_eps, delta=_delta)
@settings(max_examples=80, deadline=None)
def test_sigma_decreasing_in_epsilon(e1: float, e2: float, delta: float) -> None:
    lo, hi = sorted((e1, e2))
    # Monotone up to the root finder's float rounding (relative 1e-12), strictly when the
    # inputs differ by more than a relative 1e-6.
    assert calibrate_sigma(lo, delta) >= calibrate_sigma(hi, delta) * (1 - 1e-12)
    if hi > lo * (1 + 1e-6):
        assert calibrate_sigma(lo, delta) > calibrate_sigma(hi, delta)


@given(epsilon=_eps, d1=_delta, d2=_delta)
@settings(max_examples=80, deadline=None)
def test_sigma_decreasing_in_delta(epsilon: float, d1: float, d2: float) -> None:
    lo, hi = sorted((d1, d2))
    assert calibrate_sigma(epsilon, lo) >= calibrate_sigma(epsilon, hi) * (1 - 1e-12)
    if hi > lo * (1 + 1e-6):
        assert calibrate_sigma(epsilon, lo) > calibrate_sigma(epsilon, hi)


@given(epsilon=_eps, delta=_delta, sensitivity=st.floats(1e-6, 1e6))
@settings(max_examples=80, deadline=None)
def test_sigma_linear_in_sensitivity(epsilon: float, delta: float, sensitivity: float) -> None:
    assert calibrate_sigma(epsilon, delta, sensitivity) == pytest.approx(
        sensitivity * calibrate_sigma(epsilon, delta), rel=1e-14
    )


def test_accepts_numpy_scalars() -> None:
    assert calibrate_sigma(np.float64(1.0), np.float64(1e-5), np.int64(2)) == pytest.approx(
        2 * calibrate_sigma(1.0, 1e-5), rel=1e-15
    )


# --------------------------------------------------------------------------- CGM


def test_cgm_formula() -> None:
    # Thm 2.9: sigma = Delta sqrt(2 ln(1.25/delta))/epsilon; value by hand.
    expected = 2.0 * math.sqrt(2.0 * math.log(1.25 / 1e-5)) / 0.5
    assert calibrate_sigma(0.5, 1e-5, 2.0, mechanism="cgm") == pytest.approx(expected, 1e-15)
    assert cgm_sigma(0.5, 1e-5, 2.0) == pytest.approx(expected, 1e-15)


@pytest.mark.parametrize("epsilon", [1e-3, 0.05, 0.3, 0.9, 0.999])
@pytest.mark.parametrize("delta", [1e-15, 1e-8, 1e-3, 0.1, 0.5])
def test_cgm_is_more_noise_than_agm_below_one(epsilon: float, delta: float) -> None:
    assert calibrate_sigma(epsilon, delta, mechanism="cgm") >= calibrate_sigma(epsilon, delta)


@pytest.mark.parametrize("epsilon", [1.0, 2.0, 50.0])
def test_cgm_warns_at_epsilon_one_or_more(epsilon: float) -> None:
    with pytest.warns(BaselineWarning, match="not a DP guarantee"):
        sigma = calibrate_sigma(epsilon, 1e-5, mechanism="cgm")
    assert sigma == pytest.approx(cgm_sigma(epsilon, 1e-5), rel=1e-15)


def test_cgm_below_one_does_not_warn() -> None:
    # filterwarnings=error: any warning would fail this test.
    calibrate_sigma(0.99, 1e-5, mechanism="cgm")


# --------------------------------------------------------------------------- validation

_INVALID: list[tuple[Callable[..., float], dict[str, Any], str]] = [
    (calibrate_sigma, {"epsilon": -1.0, "delta": 1e-5}, "epsilon=-1.0"),
    (calibrate_sigma, {"epsilon": 0.0, "delta": 1e-5}, "epsilon=0.0"),
    (calibrate_sigma, {"epsilon": math.inf, "delta": 1e-5}, "epsilon=inf"),
    (calibrate_sigma, {"epsilon": math.nan, "delta": 1e-5}, "epsilon=nan"),
    (calibrate_sigma, {"epsilon": "1", "delta": 1e-5}, "epsilon='1'"),
    (calibrate_sigma, {"epsilon": True, "delta": 1e-5}, "epsilon=True"),
    (calibrate_sigma, {"epsilon": 1.0, "delta": 0.0}, "delta=0.0"),
    (calibrate_sigma, {"epsilon": 1.0, "delta": 1.0}, "delta=1.0"),
    (calibrate_sigma, {"epsilon": 1.0, "delta": -0.1}, "delta=-0.1"),
    (calibrate_sigma, {"epsilon": 1.0, "delta": math.nan}, "delta=nan"),
    (calibrate_sigma, {"epsilon": 1.0, "delta": 1e-5, "sensitivity": 0.0}, "sensitivity=0.0"),
    (calibrate_sigma, {"epsilon": 1.0, "delta": 1e-5, "sensitivity": -2.0}, "sensitivity=-2.0"),
    (calibrate_sigma, {"epsilon": 1.0, "delta": 1e-5, "sensitivity": math.nan}, "sensitivity=nan"),
    (calibrate_sigma, {"epsilon": 1.0, "delta": 1e-5, "mechanism": "laplace"}, "'laplace'"),
    (calibrate_sigma, {"epsilon": -1.0, "delta": 1e-5, "mechanism": "cgm"}, "epsilon=-1.0"),
    (achieved_delta, {"sigma": 0.0, "epsilon": 1.0}, "sigma=0.0"),
    (achieved_delta, {"sigma": -1.0, "epsilon": 1.0}, "sigma=-1.0"),
    (achieved_delta, {"sigma": math.nan, "epsilon": 1.0}, "sigma=nan"),
    (achieved_delta, {"sigma": 1.0, "epsilon": -0.5}, "epsilon=-0.5"),
    (achieved_delta, {"sigma": 1.0, "epsilon": math.inf}, "epsilon=inf"),
    (achieved_delta, {"sigma": 1.0, "epsilon": 1.0, "sensitivity": 0.0}, "sensitivity=0.0"),
    (achieved_epsilon, {"sigma": 0.0, "delta": 1e-5}, "sigma=0.0"),
    (achieved_epsilon, {"sigma": math.inf, "delta": 1e-5}, "sigma=inf"),
    (achieved_epsilon, {"sigma": 1.0, "delta": 1.5}, "delta=1.5"),
    (achieved_epsilon, {"sigma": 1.0, "delta": 1e-5, "sensitivity": -1.0}, "sensitivity=-1.0"),
    (cgm_sigma, {"epsilon": 1.0, "delta": 2.0}, "delta=2.0"),
]


@pytest.mark.parametrize(("func", "kwargs", "shown"), _INVALID)
def test_invalid_parameters_raise(
    func: Callable[..., float], kwargs: dict[str, Any], shown: str
) -> None:
    with pytest.raises(PrivacyParameterError) as info:
        func(**kwargs)
    assert isinstance(info.value, ValueError)
    message = str(info.value)
    assert shown in message
    # The message states the allowed range or the allowed values.
    assert any(word in message for word in ("> 0", ">= 0", "(0, 1)", "one of", "real number"))
