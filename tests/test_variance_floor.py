"""Unit tests of the adaptive variance floor (issue 9, lever d): :mod:`fa_hetdp.protocol.floor`."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from fa_hetdp import private_statistics
from fa_hetdp.config.protocol import ProtocolConfig
from fa_hetdp.config.rules import ConfigError
from fa_hetdp.dp.accounting import privacy_spent
from fa_hetdp.dp.mechanisms import get_mechanism
from fa_hetdp.errors import InputDataError, PrivacyParameterError
from fa_hetdp.protocol.floor import (
    FLOOR_BUDGET_SHARE,
    FLOOR_EDGES,
    FLOOR_RELEASE,
    choose_floor,
    floor_buckets,
    floor_contribution,
    floor_edges,
    floored_count_estimate,
    histogram_of,
)
from fa_hetdp.protocol.plan import plan_protocol
from fa_hetdp.protocol.server import assemble_floor, privacy_spent_of
from fa_hetdp.protocol.simulate import private_statistics_batch
from fa_hetdp.stats.exact import client_weights, within_variance

ALPHA = 0.01


def _data(n: int = 400, d: int = 16, seed: int = 0) -> np.ndarray:
    """Clients with within-variances spread over about [0.02, 0.08]."""
    rng = np.random.default_rng(seed)
    spread = rng.uniform(0.5, 1.0, size=(n, 1))
    out: np.ndarray = np.clip(0.5 + spread * (rng.random((n, d)) - 0.5), 0.0, 1.0)
    return out


def test_edges_start_at_v_min_and_end_at_a_quarter() -> None:
    edges = floor_edges(0.01)
    assert edges.size == FLOOR_EDGES
    assert edges[0] == 0.01 and edges[-1] == pytest.approx(0.25)
    ratios = edges[1:] / edges[:-1]
    np.testing.assert_allclose(ratios, ratios[0])  # geometric
    np.testing.assert_array_equal(floor_edges(0.25), [0.25])
    with pytest.raises(InputDataError, match="variance_floor"):
        floor_edges(0.3)


def test_buckets_are_half_open_at_the_edges() -> None:
    edges = np.array([0.01, 0.1, 0.25])
    got = floor_buckets([0.0, 0.0099, 0.01, 0.05, 0.1, 0.2, 0.25], edges)
    np.testing.assert_array_equal(got, [0, 0, 1, 1, 2, 2, 3])


def test_client_contribution_sums_to_the_histogram() -> None:
    x = _data(50, 8)
    edges = floor_edges(0.01)
    mech = get_mechanism("agm")
    rng = np.random.default_rng(0)
    total = sum(floor_contribution(row, edges, 0.0, mechanism=mech, rng=rng) for row in x)
    np.testing.assert_array_equal(total, histogram_of(x, edges))
    assert histogram_of(x, edges).sum() == 50
    noisy = floor_contribution(x[0], edges, 2.0, mechanism=mech, rng=rng)
    assert np.count_nonzero(noisy) == edges.size + 1  # a noise share on every bucket


def test_floored_count_estimate_is_exact_without_noise_and_has_its_stated_variance() -> None:
    x = _data()
    edges = floor_edges(0.01)
    h = histogram_of(x, edges)
    s2 = within_variance(x)
    est, _ = floored_count_estimate(h, n=x.shape[0], sigma=0.0)
    np.testing.assert_allclose(est, [np.sum(s2 < e) for e in edges])
    sigma = 5.0
    rng = np.random.default_rng(3)
    draws, sd = floored_count_estimate(
        h + rng.normal(0.0, sigma, (20_000, h.size)), n=x.shape[0], sigma=sigma
    )
    np.testing.assert_allclose(draws.mean(axis=0), est, atol=0.25)  # unbiased
    np.testing.assert_allclose(draws.std(axis=0), sd[0], rtol=0.03)
    assert np.all(sd[0] <= sigma * np.sqrt(np.arange(1, h.size)))  # below the plain cumsum


def test_noiseless_choice_is_the_largest_edge_within_the_quantile() -> None:
    x = _data()
    n = x.shape[0]
    edges = floor_edges(0.01)
    choice = choose_floor(histogram_of(x, edges), n=n, edges=edges, sigma=0.0, quantile=0.1)
    s2 = within_variance(x)
    within = [e for e in edges if np.sum(s2 < e) <= 0.1 * n]
    assert float(choice.floor) == max(within)
    assert float(choice.floored) == np.sum(s2 < float(choice.floor))
    # nothing qualifies -> v_min
    low = choose_floor(np.r_[n, np.zeros(edges.size)], n=n, edges=edges, sigma=0.0, quantile=0.1)
    assert float(low.floor) == 0.01


@pytest.mark.statistical
def test_noisy_choice_floors_at_most_the_quantile_with_high_probability() -> None:
    # The rule's margin: the true number of clients below the chosen floor exceeds q n in
    # at most a few per cent of draws (one-sided 95 % per edge; alpha = 0.01 binomial check).
    x = _data(1000, 16, seed=1)
    n, q, sigma = x.shape[0], 0.1, 20.0
    edges = floor_edges(0.01)
    h = histogram_of(x, edges)
    rng = np.random.default_rng(2026)
    choice = choose_floor(
        h + rng.normal(0.0, sigma, (4000, h.size)), n=n, edges=edges, sigma=sigma, quantile=q
    )
    s2 = within_variance(x)
    counts = np.array([np.sum(s2 < f) for f in choice.floor])
    over = int(np.sum(counts > q * n))
    from scipy.stats import binom

    assert binom.sf(over - 1, counts.size, 0.05) > ALPHA or over <= 0.05 * counts.size
    assert float(np.median(choice.floor)) > 0.01  # it does move off v_min


def test_plan_counts_the_histogram_and_its_sigma_does_not_depend_on_the_floor() -> None:
    config = ProtocolConfig(1.0, 1e-5, adaptive_floor=True)
    before = plan_protocol(config, n=500, d=16)
    assert before.adaptive and FLOOR_RELEASE not in before.releases
    assert before.floor is None and before.max_weight == pytest.approx(100.0)
    after = plan_protocol(config, n=500, d=16, floor=0.08)
    assert after.max_weight == pytest.approx(12.5) and after.min_weight == 4.0
    assert after.floor_sigma == before.floor_sigma > 0
    mu = privacy_spent(after.budget).mu
    assert after.budget.release(FLOOR_RELEASE).mu_share == pytest.approx(
        mu * math.sqrt(FLOOR_BUDGET_SHARE)
    )
    assert privacy_spent(after.budget).epsilon == pytest.approx(1.0, rel=1e-9)
    # W = 12.5 instead of 100: the weighted release carries several times less noise
    plain = plan_protocol(ProtocolConfig(1.0, 1e-5, adaptive_floor=False), n=500, d=16)
    assert after.sigma("weighted") < plain.sigma("weighted") / 4
    # basic composition: the histogram takes the same share of (epsilon, delta)
    basic = plan_protocol(
        ProtocolConfig(1.0, 1e-5, adaptive_floor=True, composition="basic"), n=500, d=16
    )
    share = basic.budget.release(FLOOR_RELEASE).epsilon_share
    assert share == pytest.approx(FLOOR_BUDGET_SHARE)


def test_missing_histogram_shares_degrade_the_claim() -> None:
    config = ProtocolConfig(1.0, 1e-5, adaptive_floor=True)
    plan = plan_protocol(config, n=100, d=4, floor=0.05)
    assert privacy_spent_of(plan, 1.0, 1.0, 0.5).epsilon > privacy_spent_of(plan, 1.0, 1.0).epsilon


def test_floor_refused_where_it_does_not_apply() -> None:
    with pytest.raises(PrivacyParameterError, match="no adaptive floor"):
        plan_protocol(ProtocolConfig(1.0, 1e-5, adaptive_floor=False), n=10, d=2, floor=0.05)
    config = ProtocolConfig(1.0, 1e-5, adaptive_floor=True, variance_floor=0.02)
    with pytest.raises(PrivacyParameterError, match="v_min"):
        plan_protocol(config, n=10, d=2, floor=0.01)  # never below the user's v_min
    with pytest.raises(ConfigError, match="floor_quantile"):
        ProtocolConfig(1.0, 1e-5, floor_quantile=0.0)
    with pytest.raises(ConfigError, match="adaptive_floor"):
        ProtocolConfig(1.0, 1e-5, adaptive_floor="yes")  # type: ignore[arg-type]
    quarter = plan_protocol(
        ProtocolConfig(1.0, 1e-5, adaptive_floor=True, variance_floor=0.25), n=10, d=2
    )
    assert not quarter.adaptive  # nothing to choose


def test_central_placement_adds_the_histogram_noise_on_the_server() -> None:
    config = ProtocolConfig(1.0, 1e-5, adaptive_floor=True, placement="central")
    plan = plan_protocol(config, n=400, d=16)
    h = histogram_of(_data(), plan.floor_edges)
    choice, after = assemble_floor(h, plan, noise_shares=0, rng=np.random.default_rng(0))
    assert not np.array_equal(choice.noisy_histogram, h)
    assert after.floor == float(choice.floor)
    with pytest.raises(InputDataError, match="shape"):
        assemble_floor(h[:-1], plan, noise_shares=0, rng=np.random.default_rng(0))


def test_private_statistics_uses_the_floor_by_default_and_reports_it_privately() -> None:
    x = _data(2000, 16, seed=4)
    res = private_statistics(x, epsilon=1.0, delta=1e-5, rng=np.random.default_rng(5))
    assert res.plan is not None and res.plan.config.adaptive_floor
    choice = res.floor_choice
    assert choice is not None
    s2 = within_variance(x)
    assert 0.01 < float(choice.floor) <= np.quantile(s2, 0.1)
    assert res.plan.max_weight == pytest.approx(1.0 / float(choice.floor))
    assert res.spent.epsilon == pytest.approx(1.0, rel=1e-9)  # histogram included
    info = choice.as_dict()
    assert "noisy" in info["label"] and info["clients_floored_std"] > 0
    assert any("adaptive variance floor" in label for label in res.labels)
    # clients at or above the floor keep 1/s^2
    w, _ = client_weights(x, variance_floor=float(choice.floor))
    above = s2 >= float(choice.floor)
    np.testing.assert_allclose(w[above], 1.0 / s2[above])
    off = private_statistics(
        x, epsilon=1.0, delta=1e-5, adaptive_floor=False, rng=np.random.default_rng(5)
    )
    assert off.floor_choice is None and off.plan is not None and off.plan.max_weight == 100.0


def test_batch_groups_repeats_by_floor_and_keeps_the_truth_at_v_min() -> None:
    x = _data(300, 8, seed=6)
    config = ProtocolConfig(
        1.0, 1e-5, adaptive_floor=True, noise_shape="uniform", dispersion_center="broadcast"
    )
    batch = private_statistics_batch(x, config, repeats=60, rng=np.random.default_rng(7))
    assert batch.floor_choice is not None
    assert batch.floor_choice.floor.shape == (60,)
    assert np.unique(batch.floor_choice.floor).size >= 2  # several groups merged
    assert batch.mean.shape == (60, 8) and batch.i2_total.shape == (60,)
    assert batch.truth.variance_floor == 0.01
    assert np.all(np.isfinite(batch.q))
    assert batch.spent.epsilon == pytest.approx(1.0, rel=1e-9)
    # one repeat equals the in-process run with the same seed
    one = private_statistics_batch(x, config, repeats=1, rng=np.random.default_rng(8))
    direct = private_statistics(
        x,
        epsilon=1.0,
        delta=1e-5,
        adaptive_floor=True,
        noise_shape="uniform",  # as the config above
        dispersion_center="broadcast",
        rng=np.random.default_rng(8),
    )
    for key in ("mean", "dispersion", "weighted_mean", "q"):
        np.testing.assert_allclose(getattr(one, key)[0], getattr(direct, key), rtol=1e-9)


def test_planner_counts_the_histogram_and_predicts_the_floor() -> None:
    from fa_hetdp import plan_accuracy

    stated = plan_accuracy(
        1797, 64, epsilon=1.0, delta=1e-5, within_variance=0.14, adaptive_floor=True
    )
    edges = floor_edges(0.01)
    assert stated.plan.variance_floor == max(e for e in edges if e <= 0.14)
    assert FLOOR_RELEASE in {r.name for r in stated.plan.budget.releases}
    assert privacy_spent(stated.plan.budget).epsilon == pytest.approx(1.0, rel=1e-9)
    assert stated.as_dict()["planned_floor"] == stated.plan.variance_floor
    fixed = plan_accuracy(
        1797, 64, epsilon=1.0, delta=1e-5, within_variance=0.14, adaptive_floor=False
    )
    for key in ("weighted_mean", "q"):
        assert stated.error(key).rmse_average < fixed.error(key).rmse_average / 3, key
    # unstated within-variance: planned conservatively at v_min (W = 100), the share still paid
    blind = plan_accuracy(1797, 64, epsilon=1.0, delta=1e-5, adaptive_floor=True)
    assert blind.plan.max_weight == pytest.approx(100.0)
    plain = plan_accuracy(1797, 64, epsilon=1.0, delta=1e-5, adaptive_floor=False)
    assert blind.plan.sigma("mean") > plain.plan.sigma("mean")
    # too few clients for the histogram's noise: the rule keeps v_min
    small = plan_accuracy(
        20, 64, epsilon=1.0, delta=1e-5, within_variance=0.14, adaptive_floor=True
    )
    assert small.plan.variance_floor == 0.01


def test_scenario_option_reaches_the_run_settings_and_the_grid(tmp_path: Path) -> None:
    from test_flower_helpers import run_config, scenario_file

    from fa_hetdp.config.scenario import load_scenario, scenario_from_dict
    from fa_hetdp.experiments.grid import grid_from_scenario
    from fa_hetdp.flowerkit.settings import RunSettings

    path = scenario_file(tmp_path, 20, extra="")
    text = path.read_text().replace(
        "adaptive_floor = false\n", "adaptive_floor = true\nfloor_quantile = 0.2\n"
    )
    path.write_text(text)
    scenario = load_scenario(path)
    assert scenario.privacy.adaptive_floor and scenario.privacy.floor_quantile == 0.2
    assert scenario_from_dict(scenario.to_dict()).privacy == scenario.privacy  # round trip
    settings = RunSettings.from_run_config(run_config(tmp_path, path))
    assert settings.protocol.adaptive_floor and settings.protocol.floor_quantile == 0.2
    grid = grid_from_scenario(scenario)
    assert grid.adaptive_floor and grid.floor_quantile == 0.2
    bad = path.read_text().replace("floor_quantile = 0.2", "floor_quantile = 0.9")
    path.write_text(bad)
    with pytest.raises(ConfigError, match=r"privacy\.floor_quantile"):
        load_scenario(path)


def test_python_api_result_json_carries_the_floor() -> None:
    import json

    from fa_hetdp.report.results import result_to_json

    x = _data(500, 8, seed=9)
    res = private_statistics(x, epsilon=2.0, delta=1e-5, rng=np.random.default_rng(2))
    doc = json.loads(result_to_json(res))
    floor = doc["stage0_histogram"]
    assert floor["floor"] == float(res.plan.variance_floor)  # type: ignore[union-attr]
    assert len(floor["noisy_histogram"]) == FLOOR_EDGES + 1 and "noisy" in floor["label"]
    off = private_statistics(
        x, epsilon=2.0, delta=1e-5, adaptive_floor=False, rng=np.random.default_rng(2)
    )
    assert json.loads(result_to_json(off))["stage0_histogram"] is None
