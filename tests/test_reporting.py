"""Tests of what private values say about themselves (:mod:`fa_hetdp.accuracy.releases`,
:mod:`fa_hetdp.report.results`, the scalars of :class:`PrivateStatistics`).

Coverage is measured over ``R = 2000`` seeded repeats of the batch path (seed 2). The
interval of ``mu'`` is exact (coverage 0.95); the others are conservative. Each check allows
``3`` binomial standard errors below 0.95 computed as if the ``R d`` (repeat, coordinate) pairs
were independent (one-sided alpha = 0.0013 for the exact interval; conservative intervals have
more room).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from fa_hetdp import ProtocolConfig, private_statistics, private_statistics_batch
from fa_hetdp.accuracy.releases import released_values
from fa_hetdp.data.catalog import load_dataset
from fa_hetdp.protocol.intervals import coverage, noise_confidence_intervals
from fa_hetdp.report.results import format_released, statistics_section
from fa_hetdp.stats.exact import i_squared

REPEATS = 2000
LEVEL = 0.95


def _digits(n: int) -> np.ndarray:
    return np.asarray(load_dataset("digits").features, dtype=np.float64)[:n]


@pytest.mark.statistical
@pytest.mark.parametrize(
    ("name", "epsilon", "shape"),
    [
        ("digits100", 1.0, "uniform"),
        ("digits1797", 1.0, "uniform"),
        ("digits1797", 4.0, "uniform"),
        ("beta500x8", 1.0, "uniform"),
        # per-coordinate stage-2 noise (lever c): each coordinate's interval uses its own sigma
        ("digits100", 1.0, "per_coordinate"),
        ("digits1797", 1.0, "per_coordinate"),
        ("beta500x8", 1.0, "per_coordinate"),
    ],
)
def test_intervals_cover_at_least_the_level(name: str, epsilon: float, shape: str) -> None:
    if name.startswith("digits"):
        x = _digits(int(name.removeprefix("digits")))
    else:
        x = np.random.default_rng(0).beta(2.0, 3.0, size=(500, 8))
    config = ProtocolConfig(epsilon=epsilon, delta=1e-5, noise_shape=shape)  # type: ignore[arg-type]
    res = private_statistics_batch(x, config, repeats=REPEATS, rng=np.random.default_rng(2))
    cov = coverage(noise_confidence_intervals(res, res.plan, level=LEVEL), res.truth)
    assert set(cov) >= {"mean", "dispersion", "weighted_mean", "q", "i2"}
    assert {"total_dispersion", "i2_total"} <= set(cov)
    for key, c in cov.items():
        pairs = REPEATS * (1 if key in ("total_dispersion", "i2_total") else x.shape[1])
        slack = 3.0 * math.sqrt(LEVEL * (1 - LEVEL) / pairs)
        assert c >= LEVEL - slack, (key, c)


def test_scalars_follow_their_definitions() -> None:
    x = _digits(300)
    r = private_statistics(x, epsilon=1.0, delta=1e-5, rng=np.random.default_rng(0))
    assert r.total_dispersion == pytest.approx(float(np.sum(r.dispersion)))
    n, d = r.n, r.d
    expected = max(0.0, 1.0 - (n - 1) * d / float(np.sum(r.q)))
    assert r.i2_total == pytest.approx(expected)
    batch = private_statistics_batch(
        x, ProtocolConfig(epsilon=1.0, delta=1e-5), repeats=5, rng=np.random.default_rng(0)
    )
    assert batch.total_dispersion == pytest.approx(batch.dispersion.sum(axis=1))
    assert batch.i2_total == pytest.approx(i_squared(batch.q.mean(axis=1), n))


def test_noise_is_on_the_statistics_own_scale() -> None:
    x = _digits(500)
    r = private_statistics(x, epsilon=1.0, delta=1e-5, rng=np.random.default_rng(0))
    assert r.plan is not None
    by_key = {v.key: v for v in released_values(r, r.plan)}
    # sigma of the mean is that of the sum over n (Thm 3.3), not the sum's
    assert np.allclose(by_key["mean"].noise_std, r.plan.noise_std("mean") / r.n)
    assert float(by_key["total_dispersion"].noise_std) > 0.0


def test_quickstart_size_is_flagged_and_full_digits_mostly_not() -> None:
    small = private_statistics(_digits(100), epsilon=1.0, delta=1e-5, rng=np.random.default_rng(0))
    assert small.plan is not None
    flags = {v.key: np.asarray(v.noise_dominated) for v in released_values(small, small.plan)}
    assert flags["mean"].mean() > 0.5 and flags["dispersion"].mean() > 0.5
    full = private_statistics(
        _digits(1797),
        epsilon=1.0,
        delta=1e-5,
        variance_floor=0.08,
        rng=np.random.default_rng(0),
    )
    assert full.plan is not None
    flags = {v.key: np.asarray(v.noise_dominated) for v in released_values(full, full.plan)}
    assert not flags["mean"].any() and not flags["dispersion"].any()
    assert not bool(flags["total_dispersion"])


def test_statistics_section_is_json_and_per_coordinate() -> None:
    r = private_statistics(_digits(200), epsilon=1.0, delta=1e-5, rng=np.random.default_rng(0))
    assert r.plan is not None
    section = statistics_section(r, r.plan)
    json.dumps(section, allow_nan=False)
    values = section["values"]
    assert len(values["mean"]["value"]) == r.d
    assert len(values["mean"]["lower"]) == r.d
    assert len(values["q"]["noise_dominated"]) == r.d
    assert isinstance(values["i2_total"]["value"], float)
    for entry in values.values():
        low, up = np.asarray(entry["lower"]), np.asarray(entry["upper"])
        assert np.all(low <= up)


def test_printed_lines_never_show_a_bare_value() -> None:
    r = private_statistics(_digits(100), epsilon=1.0, delta=1e-5, rng=np.random.default_rng(0))
    assert r.plan is not None
    lines = format_released(released_values(r, r.plan))
    for line in lines[2:]:
        assert "[" in line and "]" in line  # an interval on every line
    assert any("NOISE-DOMINATED" in line or "noise-dominated" in line for line in lines)


def test_run_prints_value_interval_noise_and_flag(capsys: pytest.CaptureFixture[str]) -> None:
    from fa_hetdp.cli.run import RunSetup, print_result
    from fa_hetdp.stats.exact import true_statistics

    x = _digits(100)
    r = private_statistics(x, epsilon=1.0, delta=1e-5, rng=np.random.default_rng(0))
    assert r.plan is not None
    truth = true_statistics(x).summary()
    setup = RunSetup(scenario_name="demo", num_clients=100, run_config={}, truth=truth, dim=64)
    doc = {"n": 100, "d": 64, "privacy": {}, "released": statistics_section(r, r.plan)}
    print_result(setup, json.loads(json.dumps(doc)))
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith(("mean μ'", "I² of"))]
    rows = [line for line in rows if "[" in line]  # the released values (not the noise table)
    assert len(rows) == 2
    for row in rows:
        assert "[" in row and "]" in row
    assert "noise-dominated" in rows[0] and "NOISE-DOMINATED" in rows[1]
    assert "σ of release" not in out


def test_run_plan_lines_warn_for_the_quickstart() -> None:
    from fa_hetdp.cli.plan import run_plan_lines

    lines = run_plan_lines({"scenario": "quickstart", "mode": "simulation"}, 64)
    assert lines[0].startswith("accuracy plan: n=100 clients, d=64")
    warned = [line for line in lines if line.startswith("warning:")]
    assert any("dispersion" in line for line in warned)


def test_quantile_on_the_ratio_grid_is_never_below_the_exact_one() -> None:
    # many distinct (scale, sd) pairs (per-coordinate noise over repeats) take the ratio grid
    from fa_hetdp.protocol.intervals import _bisect_quantile, _quantile_chi2_plus_normal

    rng = np.random.default_rng(0)
    scale, sd = rng.random(3000) * 2.0 + 0.01, rng.random(3000) + 0.1
    grid = _quantile_chi2_plus_normal(scale, sd, 0.975)
    exact = _bisect_quantile(scale, sd, 0.975)
    assert np.all(grid >= exact * (1.0 - 1e-12))
    assert np.max(grid / exact - 1.0) <= 1.1e-3


def test_result_json_stores_the_per_coordinate_stage2_sigmas() -> None:
    from fa_hetdp.report.results import result_to_dict

    x = _digits(300)
    r = private_statistics(x, epsilon=1.0, delta=1e-5, rng=np.random.default_rng(0))
    assert r.plan is not None and r.plan.config.noise_shape == "per_coordinate"
    doc = json.loads(json.dumps(result_to_dict(r)))
    for key in ("dispersion", "q"):
        per = np.asarray(doc["stage2_sigmas"][key])
        assert per.shape == (r.d,) and np.ptp(per) > 0.0  # they differ between coordinates
        assert doc["sigmas"][key] == pytest.approx(float(np.sqrt(np.mean(per**2))))
        assert np.all(per <= r.plan.sigma(key) * (1 + 1e-12))  # never above the worst case
    # the interval of D''_j uses sigma_j: wider where the broadcast bound is larger
    by_key = {v.key: v for v in released_values(r, r.plan)}
    np.testing.assert_allclose(
        by_key["dispersion"].noise_std,
        r.plan.noise_std_vector(2, (r.mu_prime_broadcast, r.weighted_mean))[: r.d] / r.n,
    )
