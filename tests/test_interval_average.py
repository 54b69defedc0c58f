"""The interval printed beside a coordinate average is the interval of that average.

A report prints a per-coordinate statistic as its coordinate average; the interval beside it
must be the average's own (:func:`fa_hetdp.protocol.intervals.average_intervals`), not the
average of the coordinates' bounds, which is about ``sqrt(d)`` = 8 times wider for ``mu'`` at
``d = 64``.

Coverage: ``R = 2000`` seeded repeats of the batch path (seed 2), one average per repeat.
The interval of ``mean_j mu'_j`` is exact (coverage 0.95); the others are conservative.
Each check allows 3 binomial standard errors of ``R`` independent repeats below 0.95
(one-sided alpha = 0.0013 for the exact interval; ``3 sqrt(0.95 * 0.05 / 2000) = 0.0146``).

Width: the mean width of the average's interval over the true spread of the average's
error, the central 95 % range of ``mean_j private_j - mean_j true_j`` over the repeats (the
width a perfect 95 % interval would have). Stated factors: at most 1.1 for ``mu'`` (exact:
about 1, Monte-Carlo error of the quantiles aside) and at most 6 for the others (conservative
bounds: the bias terms of ``D''`` and ``Q''`` are bounded, not estimated). The old interval,
the average of the per-coordinate bounds, is 7.9 times the spread for ``mu'``: it fails.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest

from fa_hetdp import ProtocolConfig, private_statistics, private_statistics_batch
from fa_hetdp.accuracy.releases import released_values
from fa_hetdp.data.catalog import load_dataset
from fa_hetdp.protocol.intervals import (
    average_coverage,
    average_intervals,
    noise_confidence_intervals,
    true_value,
)
from fa_hetdp.report.results import format_section, statistics_section

REPEATS = 2000
LEVEL = 0.95
SLACK = 3.0 * math.sqrt(LEVEL * (1.0 - LEVEL) / REPEATS)
WIDTH_FACTOR = {"mean": 1.1}
"""Largest width over the true 95 % spread of the average's error (6 where not listed)."""
DEFAULT_WIDTH_FACTOR = 6.0

MAIN_JOB = {
    "variance_floor": 0.08,
    "noise_shape": "per_coordinate",
    "dispersion_center": "optimal",
    "extra_i2_noise": False,
}
QUICKSTART = {"adaptive_floor": False, "noise_shape": "uniform", "dispersion_center": "broadcast"}
"""The settings scenarios/quickstart.toml states (the defaults before issue 18)."""
CASES = [
    ("digits100", QUICKSTART),  # the quickstart's size and settings: noise-dominated
    ("digits1797", MAIN_JOB),  # the main job's settings
    ("digits1797", {"epsilon": 4.0}),
    ("beta500x8", {}),
]


def _data(name: str) -> np.ndarray:
    if name.startswith("digits"):
        x = np.asarray(load_dataset("digits").features, dtype=np.float64)
        return x[: int(name.removeprefix("digits"))]
    return np.random.default_rng(0).beta(2.0, 3.0, size=(500, 8))


def _batch(name: str, settings: dict[str, object]):  # type: ignore[no-untyped-def]
    config = ProtocolConfig(**{"epsilon": 1.0, "delta": 1e-5, **settings})  # type: ignore[arg-type]
    return private_statistics_batch(
        _data(name), config, repeats=REPEATS, rng=np.random.default_rng(2)
    )


def _spread(res, key: str) -> float:  # type: ignore[no-untyped-def]
    error = np.mean(getattr(res, key), axis=-1) - float(np.mean(true_value(res.truth, key)))
    return float(np.quantile(error, 0.975) - np.quantile(error, 0.025))


@pytest.mark.statistical
@pytest.mark.parametrize(("name", "settings"), CASES)
def test_average_interval_covers_and_is_as_narrow_as_the_noise_allows(
    name: str, settings: dict[str, object]
) -> None:
    res = _batch(name, settings)
    intervals = average_intervals(res, res.plan, level=LEVEL)
    assert {"mean", "dispersion", "weighted_mean", "q", "i2"} <= set(intervals.lower)
    for key, cov in average_coverage(intervals, res.truth).items():
        assert cov >= LEVEL - SLACK, (key, cov)
        width = float(np.mean(intervals.upper[key] - intervals.lower[key]))
        factor = WIDTH_FACTOR.get(key, DEFAULT_WIDTH_FACTOR)
        assert width <= factor * _spread(res, key), (key, width / _spread(res, key))


@pytest.mark.statistical
def test_the_average_of_the_coordinate_bounds_fails_the_width_check() -> None:
    # the check above can fail: the old printed interval (mean of per-coordinate bounds)
    res = _batch("digits1797", MAIN_JOB)
    per = noise_confidence_intervals(res, res.plan, level=LEVEL)
    old = float(np.mean(np.mean(per.upper["mean"] - per.lower["mean"], axis=-1)))
    assert old > WIDTH_FACTOR["mean"] * _spread(res, "mean")
    assert old > 7.0 * _spread(res, "mean")  # sqrt(64) = 8 times the exact width


def _digits_result(n: int):  # type: ignore[no-untyped-def]
    x = _data(f"digits{n}")
    settings: dict[str, Any] = dict(MAIN_JOB)
    return private_statistics(x, epsilon=1.0, delta=1e-5, rng=np.random.default_rng(0), **settings)


def test_released_values_carry_the_average_its_interval_and_noise() -> None:
    r = _digits_result(1797)
    by_key = {v.key: v for v in released_values(r, r.plan)}
    mean = by_key["mean"]
    assert mean.average is not None and mean.average_noise_std is not None
    assert float(mean.average) == pytest.approx(float(np.mean(r.mean)))
    tau = r.plan.noise_std("mean") / r.n
    assert float(mean.average_noise_std) == pytest.approx(tau / math.sqrt(r.d))
    z = 1.959963984540054
    assert float(mean.average_upper) - float(mean.average_lower) == pytest.approx(
        2 * z * tau / math.sqrt(r.d)
    )
    for key in ("dispersion", "weighted_mean", "q", "i2"):
        rv = by_key[key]
        assert rv.average_lower is not None and rv.average_upper is not None
        assert float(rv.average_lower) <= float(rv.average_upper)
        assert float(rv.average_noise_std) > 0.0  # type: ignore[arg-type]
    assert by_key["total_dispersion"].average is None  # a scalar is its own number


def test_printed_row_shows_the_interval_and_noise_of_the_number_shown() -> None:
    r = _digits_result(1797)
    section = json.loads(json.dumps(statistics_section(r, r.plan)))
    stored = section["values"]["mean"]["average"]
    lines = format_section(section, None)
    row = next(line for line in lines if line.startswith("mean μ'"))
    lo, hi = (float(v) for v in row.split("[", 1)[1].split("]", 1)[0].split(","))
    assert lo == pytest.approx(stored["lower"], rel=1e-3)
    assert hi == pytest.approx(stored["upper"], rel=1e-3)
    tau = r.plan.noise_std("mean") / r.n
    assert hi - lo == pytest.approx(2 * 1.96 * tau / 8.0, rel=2e-3)  # not 2 z tau
    noise = float(row.split("]", 1)[1].split()[0])
    assert noise == pytest.approx(tau / 8.0, rel=1e-3)
