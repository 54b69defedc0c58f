"""Tests of :mod:`fa_hetdp.accuracy.planner`: the data-free planner against Monte-Carlo errors.

Each grid point runs the in-process batch path (:func:`private_statistics_batch`, seed 1) with
``R = 2000`` repeats. The Monte-Carlo standard error of a measured RMSE is about
``1/sqrt(2 R d) < 0.2 %`` per coordinate and ``1/sqrt(2 R) = 1.6 %`` for the coordinate
average (Gaussian errors; somewhat more for the chi-square-like errors of ``Q''``), well
below the +-10 % tolerance. The assumptions are what a user could state publicly: for
synthetic data one typical value each; for digits a typical within-vector variance and a
template image (per-coordinate means and spreads), here taken from the data themselves.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from fa_hetdp import ProtocolConfig, plan_accuracy, private_statistics_batch, true_statistics
from fa_hetdp.accuracy.assumptions import DataAssumptions
from fa_hetdp.accuracy.inverses import min_clients, min_epsilon
from fa_hetdp.accuracy.planner import accuracy_of_plan
from fa_hetdp.config.center import DispersionCenter
from fa_hetdp.config.noise import NoiseShape
from fa_hetdp.data.catalog import load_dataset
from fa_hetdp.errors import InputDataError
from fa_hetdp.protocol.recommended import recommended_config
from fa_hetdp.stats.exact import within_variance

REPEATS = 2000
TOLERANCE = 0.10


def _typical_within_variance(x: np.ndarray, floor: float) -> float:
    """The harmonic mean of the floored within-vector variances (so ``B = n w`` exactly)."""
    return float(min(0.25, 1.0 / np.mean(1.0 / np.maximum(within_variance(x), floor))))


def _ratios(
    x: np.ndarray,
    epsilon: float,
    per_coordinate: bool,
    shape: NoiseShape = "uniform",
    center: DispersionCenter = "broadcast",
) -> dict[str, tuple[float, float]]:
    config = ProtocolConfig(  # the fixed floor W = 1/v_min (true_statistics below uses it)
        epsilon=epsilon,
        delta=1e-5,
        noise_shape=shape,
        dispersion_center=center,
        adaptive_floor=False,
    )
    truth = true_statistics(x, variance_floor=config.variance_floor)
    v = _typical_within_variance(x, config.variance_floor)
    if per_coordinate:
        assumptions = DataAssumptions(
            within_variance=v,
            coordinate_mean=tuple(truth.weighted_mean),
            dispersion=tuple(truth.dispersion),
        )
    else:
        assumptions = DataAssumptions(
            within_variance=v,
            coordinate_mean=float(np.sqrt(np.mean(truth.weighted_mean**2))),
            dispersion=float(np.mean(truth.dispersion)),
            i2=float(np.mean(truth.i2)),
        )
    result = private_statistics_batch(x, config, repeats=REPEATS, rng=np.random.default_rng(1))
    planned = accuracy_of_plan(result.plan, assumptions)
    out: dict[str, tuple[float, float]] = {}
    for row in planned.errors:
        est = getattr(result, row.key)
        true = getattr(truth, "i2" if row.key == "i2_extra" else row.key)
        per = float(np.sqrt(np.mean((est - true) ** 2)))
        avg = float(np.sqrt(np.mean((est.mean(axis=1) - true.mean()) ** 2)))
        out[row.key] = (row.rmse_coordinate / per, row.rmse_average / avg)
    return out


@pytest.mark.statistical
@pytest.mark.parametrize("n", [200, 1797])
@pytest.mark.parametrize("epsilon", [0.5, 1.0, 4.0])
def test_predicted_rmse_matches_measured_on_digits(n: int, epsilon: float) -> None:
    x = np.asarray(load_dataset("digits").features, dtype=np.float64)[:n]
    for key, (per, avg) in _ratios(x, epsilon, per_coordinate=True).items():
        assert abs(per - 1.0) <= TOLERANCE, (key, "per coordinate", per)
        assert abs(avg - 1.0) <= TOLERANCE, (key, "coordinate average", avg)


@pytest.mark.statistical
@pytest.mark.parametrize(("n", "epsilon"), [(200, 1.0), (1797, 1.0), (1797, 4.0)])
def test_predicted_rmse_matches_measured_with_per_coordinate_noise(n: int, epsilon: float) -> None:
    # noise_shape = "per_coordinate": the planner's E[mean_j f_j^2] over the noisy broadcast
    x = np.asarray(load_dataset("digits").features, dtype=np.float64)[:n]
    ratios = _ratios(x, epsilon, per_coordinate=True, shape="per_coordinate")
    for key, (per, avg) in ratios.items():
        assert abs(per - 1.0) <= TOLERANCE, (key, "per coordinate", per)
        assert abs(avg - 1.0) <= TOLERANCE, (key, "coordinate average", avg)


@pytest.mark.statistical
@pytest.mark.parametrize(
    ("n", "epsilon", "shape"),
    [(200, 1.0, "uniform"), (1797, 1.0, "per_coordinate"), (1797, 4.0, "per_coordinate")],
)
def test_predicted_rmse_matches_measured_at_the_optimal_center(
    n: int, epsilon: float, shape: NoiseShape
) -> None:
    # dispersion_center = "optimal": the correction's error (m - a)^2 - (c - a)^2 and the
    # factors of the centre a, integrated over the broadcast's noise
    x = np.asarray(load_dataset("digits").features, dtype=np.float64)[:n]
    ratios = _ratios(x, epsilon, per_coordinate=True, shape=shape, center="optimal")
    for key, (per, avg) in ratios.items():
        assert abs(per - 1.0) <= TOLERANCE, (key, "per coordinate", per)
        assert abs(avg - 1.0) <= TOLERANCE, (key, "coordinate average", avg)
    synthetic = np.random.default_rng(0).beta(2.0, 3.0, size=(2000, 64))
    per, avg = _ratios(synthetic, epsilon, False, shape=shape, center="optimal")["dispersion"]
    assert abs(per - 1.0) <= TOLERANCE and abs(avg - 1.0) <= TOLERANCE, (per, avg)


@pytest.mark.statistical
@pytest.mark.parametrize(("n", "d"), [(500, 8), (2000, 64)])
@pytest.mark.parametrize("epsilon", [1.0, 4.0])
def test_predicted_rmse_matches_measured_on_synthetic(n: int, d: int, epsilon: float) -> None:
    x = np.random.default_rng(0).beta(2.0, 3.0, size=(n, d))
    for key, (per, avg) in _ratios(x, epsilon, per_coordinate=False).items():
        assert abs(per - 1.0) <= TOLERANCE, (key, "per coordinate", per)
        assert abs(avg - 1.0) <= TOLERANCE, (key, "coordinate average", avg)


def test_defaults_are_recorded_and_follow_the_recommended_settings() -> None:
    acc = plan_accuracy(100, 64, epsilon=1.0, delta=1e-5, within_variance=0.1)
    assert acc.assumptions.assumed == ("coordinate_mean", "dispersion", "i2")
    assert acc.plan.config == recommended_config(epsilon=1.0, delta=1e-5)
    assert {r.key for r in acc.scalars} == {"total_dispersion", "i2_total"}
    # the quickstart size is noise-dominated for Q'' and I2''
    dominated = {r.key for r in acc.noise_dominated}
    assert {"q", "i2"} <= dominated


def test_error_falls_with_n_and_epsilon() -> None:
    small = plan_accuracy(200, 16, epsilon=1.0, delta=1e-5)
    large = plan_accuracy(2000, 16, epsilon=1.0, delta=1e-5)
    loose = plan_accuracy(200, 16, epsilon=4.0, delta=1e-5)
    for a, b, c in zip(small.errors, large.errors, loose.errors, strict=True):
        assert b.rmse_coordinate < a.rmse_coordinate
        assert c.rmse_coordinate < a.rmse_coordinate


def test_min_clients_is_the_smallest() -> None:
    n = min_clients(64, statistic_key="dispersion", target=0.1, epsilon=1.0, delta=1e-5)
    assert n is not None

    def rel(k: int) -> float:
        return plan_accuracy(k, 64, epsilon=1.0, delta=1e-5).error("dispersion").relative()

    assert rel(n) <= 0.1 < rel(n - 1)


def test_min_epsilon_reaches_the_target() -> None:
    eps = min_epsilon(
        1797, 64, statistic_key="mean", target=0.01, delta=1e-5, relative=False, scope="coordinate"
    )
    assert eps is not None
    hit = plan_accuracy(1797, 64, epsilon=eps, delta=1e-5).error("mean").rmse_coordinate
    miss = plan_accuracy(1797, 64, epsilon=eps / 1.02, delta=1e-5).error("mean").rmse_coordinate
    assert hit <= 0.01 < miss


def test_unreachable_target_gives_none() -> None:
    assert (
        min_clients(64, statistic_key="mean", target=1e-9, epsilon=1.0, delta=1e-5, max_clients=64)
        is None
    )


@pytest.mark.parametrize(
    "kwargs",
    [{"within_variance": 0.0}, {"coordinate_mean": 1.5}, {"dispersion": -0.1}, {"i2": 1.0}],
)
def test_bad_assumptions_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(InputDataError):
        plan_accuracy(100, 4, epsilon=1.0, delta=1e-5, **kwargs)


def test_per_coordinate_assumption_must_match_d() -> None:
    with pytest.raises(InputDataError, match="d=4"):
        plan_accuracy(100, 4, epsilon=1.0, delta=1e-5, coordinate_mean=(0.1, 0.2))


def test_plan_command_prints_the_table_and_the_inverse(capsys: pytest.CaptureFixture[str]) -> None:
    from fa_hetdp.cli.main import main

    assert main(["plan", "-n", "100", "-d", "64"]) == 0
    out = capsys.readouterr().out
    assert "RMSE/coord" in out and "defaults taken" in out
    assert "expected to be noise-dominated" in out
    code = main(["plan", "-d", "16", "--target", "0.1", "--statistic", "mean", "--json"])
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    n = doc["inverse"]["answer"]
    assert plan_accuracy(n, 16, epsilon=1.0, delta=1e-5).error("mean").relative() <= 0.1
