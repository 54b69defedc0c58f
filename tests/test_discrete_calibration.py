"""Tests for benchmarks/discrete_reference.py's calibration (gamma, noise, wrap-around)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from support import benchmark_module

from fa_hetdp.dp.calibration import calibrate_sigma
from fa_hetdp.errors import PrivacyParameterError

_reference = benchmark_module("discrete_reference")
calibrate_discrete, noise_tail = _reference.calibrate_discrete, _reference.noise_tail
DiscreteKind = str


@pytest.mark.parametrize("kind", ["ddg", "skellam"])
def test_calibration_meets_every_constraint(kind: DiscreteKind) -> None:
    bounds = np.ones(64)
    cal = calibrate_discrete(kind, epsilon=1.0, delta=1e-5, n=100, bounds=bounds, modulus_bits=16)
    assert cal.epsilon <= 1.0 and cal.wrap_probability <= 1e-9
    top = np.ceil(bounds / cal.gamma)
    assert cal.l2_sensitivity == pytest.approx(float(np.linalg.norm(top)))
    # The data's range plus the tail bound fit in the modulus.
    h = math.floor((2**16 - 1 - 100 * top.max()) / 2)
    assert 64 * noise_tail(kind, cal.noise, 100, h) == pytest.approx(cal.wrap_probability)
    # Fewer shares (dropouts) give a larger epsilon.
    assert cal.epsilon_with(60) > cal.epsilon


@pytest.mark.parametrize("kind", ["ddg", "skellam"])
def test_error_approaches_the_gaussian_with_more_bits(kind: DiscreteKind) -> None:
    gauss = calibrate_sigma(1.0, 1e-5, math.sqrt(256)) ** 2
    ratios = [
        calibrate_discrete(
            kind, epsilon=1.0, delta=1e-5, n=100, bounds=np.ones(256), modulus_bits=bits
        ).expected_mse
        / gauss
        for bits in (14, 18, 24)
    ]
    assert ratios[0] >= ratios[1] >= ratios[2]
    # RDP accounting of the sum is a little looser than the exact AGM: within 25% at 24 bits.
    assert 1.0 < ratios[2] < 1.25


def test_no_fit_names_the_binding_constraint() -> None:
    with pytest.raises(PrivacyParameterError, match="wrap-around constraint binds"):
        calibrate_discrete(
            "ddg", epsilon=1.0, delta=1e-5, n=1000, bounds=np.ones(3072), modulus_bits=12
        )


def test_invalid_parameters() -> None:
    with pytest.raises(PrivacyParameterError, match="mechanism"):
        calibrate_discrete("laplace", epsilon=1.0, delta=1e-5, n=10, bounds=[1.0])  # type: ignore[arg-type]
    with pytest.raises(PrivacyParameterError, match="bounds"):
        calibrate_discrete("ddg", epsilon=1.0, delta=1e-5, n=10, bounds=[0.0])
    with pytest.raises(PrivacyParameterError, match="shares"):
        calibrate_discrete("ddg", epsilon=1.0, delta=1e-5, n=10, bounds=[1.0], shares=11)
