"""The package's public surface: the names the README and the issues promise."""

from __future__ import annotations

import numpy as np
import pytest

import fa_hetdp


def test_public_names_resolve() -> None:
    for name in fa_hetdp.__all__:
        assert hasattr(fa_hetdp, name), name


def test_top_level_calibration_matches_the_module() -> None:
    from fa_hetdp.dp.calibration import calibrate_sigma

    assert fa_hetdp.calibrate_sigma is calibrate_sigma
    # Reference: the exact AGM sigma for (1, 1e-5, 1) is 3.7306316... (mpmath, dps=50, see
    # tests/test_calibration.py); rel tolerance 1e-9 as the issue asks.
    assert fa_hetdp.calibrate_sigma(1.0, 1e-5) == pytest.approx(3.730631635, rel=1e-9)


def test_top_level_private_statistics_runs_on_digits() -> None:
    x = fa_hetdp.load_dataset("digits").rows(np.arange(200))
    res = fa_hetdp.private_statistics(
        x, epsilon=1.0, delta=1e-5, variance_floor=0.05, rng=np.random.default_rng(1)
    )
    truth = fa_hetdp.true_statistics(x, variance_floor=0.05)
    assert res.mean.shape == truth.mean.shape == (64,)
    assert res.spent.epsilon <= 1.0 + 1e-9


def test_every_error_is_a_project_error() -> None:
    for cls in (
        fa_hetdp.PrivacyParameterError,
        fa_hetdp.InputDataError,
        fa_hetdp.ScenarioError,
        fa_hetdp.DatasetError,
        fa_hetdp.AggregationError,
    ):
        assert issubclass(cls, fa_hetdp.FaHetdpError)
