"""The utility levers of issue 9, item 3a-c: what each option does to the plan and results.

(a) gdp composition by default; (b) release selection (``statistics``) with the optimal
Gaussian-DP split; (c) stage-2 sensitivities from the public broadcast
(``broadcast_bounds``). Their privacy audits are in ``tests/test_audit_levers.py``; the
arguments in ``docs/privacy.md``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.optimize import minimize

from fa_hetdp.config.protocol import ProtocolConfig
from fa_hetdp.config.rules import ConfigError
from fa_hetdp.dp.accounting import ReleaseSpec, optimal_weights, plan_budget, privacy_spent
from fa_hetdp.dp.calibration import calibrate_sigma
from fa_hetdp.protocol.bounds import broadcast_bound_norm, coordinate_bounds
from fa_hetdp.protocol.client import local_values, stage1_contribution, stage2_contribution
from fa_hetdp.protocol.plan import RELEASE_DEPENDENCIES, plan_protocol, release_weights
from fa_hetdp.protocol.simulate import private_statistics, private_statistics_batch
from fa_hetdp.registry import STATISTIC_KEYS

EQUAL = {"mean": 1.0, "weighted": 1.0, "dispersion": 1.0, "q": 1.0}


# --------------------------------------------------------------------------- (a) gdp default


def test_gdp_is_the_default_everywhere() -> None:
    assert ProtocolConfig(1.0, 1e-5).composition == "gdp"
    assert plan_budget(1.0, 1e-5, [ReleaseSpec("x", 1.0)]).composition == "gdp"
    res = private_statistics(
        np.random.default_rng(0).random((30, 3)), epsilon=1.0, delta=1e-5,
        rng=np.random.default_rng(1),
    )  # fmt: skip
    assert res.spent.epsilon == pytest.approx(1.0, rel=1e-9)  # gdp spends exactly the total


def test_gdp_halves_sigma_at_the_same_budget() -> None:
    # Equal split over the four releases, eps = 1, delta = 1e-5: basic / gdp sigma ~ 1.96.
    basic_config = ProtocolConfig(1.0, 1e-5, composition="basic", adaptive_floor=False)
    basic = plan_protocol(basic_config, n=100, d=64)
    gdp = plan_protocol(ProtocolConfig(1.0, 1e-5, split=EQUAL), n=100, d=64)
    for name in EQUAL:
        assert 1.85 <= basic.sigma(name) / gdp.sigma(name) <= 2.05, name
    assert privacy_spent(gdp.budget).epsilon == pytest.approx(1.0, rel=1e-9)
    assert privacy_spent(basic.budget).epsilon < 0.6  # basic wastes about half the budget


def test_cgm_needs_basic_stated() -> None:
    with pytest.raises(ConfigError, match="supports 'basic'"):
        ProtocolConfig(0.5, 1e-5, mechanism="cgm")
    assert ProtocolConfig(0.5, 1e-5, mechanism="cgm", composition="basic").mechanism == "cgm"


# --------------------------------------------------------------------------- (b) selection


@pytest.mark.parametrize(
    ("statistics", "releases"),
    [
        (("i2",), ("weighted", "q")),
        (("dispersion",), ("mean", "dispersion")),
        (("mean",), ("mean",)),
        (("weighted_mean",), ("weighted",)),
        (("q", "mean"), ("mean", "weighted", "q")),
        (("i2_extra",), ("weighted", "q", "i2_extra")),
        (None, ("mean", "weighted", "dispersion", "q", "i2_extra")),
    ],
)
def test_only_needed_releases_are_made(
    statistics: tuple[str, ...] | None, releases: tuple[str, ...]
) -> None:
    plan = plan_protocol(ProtocolConfig(1.0, 1e-5, statistics=statistics), n=50, d=4)
    assert plan.releases == releases
    for name in ("mean", "weighted", "dispersion", "q", "i2_extra"):
        assert (plan.sigma(name) > 0) == (name in releases), name
    spent = privacy_spent(plan.budget)
    assert spent.epsilon == pytest.approx(1.0, rel=1e-9)  # the whole budget on what is needed
    computable = {k for k in STATISTIC_KEYS if set(RELEASE_DEPENDENCIES[k]) <= set(releases)}
    assert set(plan.statistics) == computable


def test_unneeded_statistics_are_nan_and_labelled() -> None:
    x = np.random.default_rng(3).random((40, 5))
    res = private_statistics(
        x,
        epsilon=1.0,
        delta=1e-5,
        statistics=("i2",),
        adaptive_floor=False,
        rng=np.random.default_rng(4),
    )
    for key in ("mean", "dispersion"):
        assert np.all(np.isnan(getattr(res, key))), key
    for key in ("weighted_mean", "q", "i2"):  # mu_bar' comes with the weighted release
        assert np.all(np.isfinite(getattr(res, key))), key
    assert res.i2_extra is None
    assert set(res.sigmas) == {"weighted", "q"}
    assert any("not released" in label and "mean" in label for label in res.labels)
    assert not any("clamped" in label for label in res.labels)
    batch = private_statistics_batch(
        x, ProtocolConfig(1.0, 1e-5, statistics=("i2",)), repeats=3, rng=np.random.default_rng(5)
    )
    assert np.all(np.isnan(batch.mean)) and np.all(np.isfinite(batch.q))


def test_unneeded_blocks_carry_neither_data_nor_noise() -> None:
    plan = plan_protocol(ProtocolConfig(1.0, 1e-5, statistics=("dispersion",)), n=20, d=3)
    local = local_values(np.array([0.2, 0.9, 0.4]), variance_floor=0.01)
    rng = np.random.default_rng(0)
    s1 = stage1_contribution(local, plan, rng=rng)
    s2 = stage2_contribution(local, plan, np.full(3, 0.5), np.full(3, 0.5), rng=rng)
    assert np.all(plan.layout(1).take(s1, "weighted") == 0.0)  # exactly: no w x, no noise
    assert np.all(plan.layout(2).take(s2, "q") == 0.0)
    assert np.all(plan.layout(1).take(s1, "mean") != local.x)  # the made block is noised


def test_selection_lowers_the_noise_of_what_is_needed() -> None:
    every = plan_protocol(ProtocolConfig(1.0, 1e-5), n=100, d=64)
    only_i2 = plan_protocol(ProtocolConfig(1.0, 1e-5, statistics=("i2",)), n=100, d=64)
    assert only_i2.sigma("q") < every.sigma("q")
    assert only_i2.sigma("weighted") < every.sigma("weighted")


def test_optimal_weights_match_a_brute_force_optimiser() -> None:
    # Minimise sum_k a_k Delta_k^2 / u_k subject to sum_k u_k = mu^2 (u_k > 0) numerically
    # and compare with the closed form u_k proportional to Delta_k sqrt(a_k).
    rng = np.random.default_rng(8)
    for _ in range(5):
        k = int(rng.integers(2, 6))
        delta = rng.uniform(0.5, 50.0, k)
        a = rng.uniform(0.01, 10.0, k)
        names = [f"r{i}" for i in range(k)]
        closed = optimal_weights(
            dict(zip(names, delta, strict=True)), dict(zip(names, a, strict=True))
        )
        u_closed = np.array([closed[n] for n in names])
        u_closed = u_closed / u_closed.sum()

        def cost(z: np.ndarray, delta: np.ndarray = delta, a: np.ndarray = a) -> float:
            u = np.exp(z) / np.exp(z).sum()  # softmax: u_k > 0, sum = 1
            return float(np.sum(a * delta**2 / u))

        best = minimize(cost, np.zeros(k), method="Nelder-Mead", options={"xatol": 1e-10,
                        "fatol": 1e-12, "maxiter": 20000})  # fmt: skip
        u_brute = np.exp(best.x) / np.exp(best.x).sum()
        np.testing.assert_allclose(u_closed, u_brute, rtol=2e-3)
        assert cost(np.log(u_closed)) <= best.fun * (1 + 1e-9)
        assert np.mean(list(closed.values())) == pytest.approx(1.0)


def test_default_gdp_split_is_the_optimal_one() -> None:
    # the fixed floor W = 1/v_min = 100 (the adaptive floor, on by default, has its own release)
    plan = plan_protocol(ProtocolConfig(1.0, 1e-5, adaptive_floor=False), n=100, d=64)
    mu = 1.0 / calibrate_sigma(1.0, 1e-5, 1.0, "agm")
    u = {
        r.name: (r.sensitivity / r.sigma) ** 2 for r in plan.budget.releases if r.counts_for_privacy
    }
    assert math.fsum(u.values()) == pytest.approx(mu**2, rel=1e-12)
    # u_k proportional to Delta_k / m_k, m = 1 (mean, dispersion) or w_typ = 12 (weighted, q)
    sens = {r.name: r.sensitivity for r in plan.budget.releases if r.name in u}
    expected = release_weights(sens, max_weight=100.0)
    for name in u:
        assert u[name] / u["mean"] == pytest.approx(expected[name] / expected["mean"], rel=1e-9)
    assert u["weighted"] / u["mean"] == pytest.approx(100.0 / 12.0 * math.sqrt(65 / 64))
    # basic and an explicit split keep their weights
    basic_config = ProtocolConfig(1.0, 1e-5, composition="basic", adaptive_floor=False)
    basic = plan_protocol(basic_config, n=100, d=64)
    assert {r.epsilon_share for r in basic.budget.releases if r.counts_for_privacy} == {0.25}


# --------------------------------------------------------------------------- (c) bounds


def test_broadcast_bound_is_the_replace_one_sensitivity() -> None:
    rng = np.random.default_rng(9)
    for _ in range(20):
        d = int(rng.integers(1, 6))
        c = rng.random(d)
        bound = float(broadcast_bound_norm(c))
        # attained: x = c (contributes 0) against the far corner (contributes max(c, 1-c)^2)
        far = np.where(c < 0.5, 1.0, 0.0)
        attained = np.linalg.norm((far - c) ** 2 - (c - c) ** 2)
        assert attained == pytest.approx(bound, rel=1e-12)
        # never exceeded, over random pairs and corners
        x, y = rng.random((2000, d)), rng.integers(0, 2, (2000, d)).astype(float)
        moves = np.linalg.norm((x - c) ** 2 - (y - c) ** 2, axis=1)
        assert moves.max() <= bound + 1e-12
        assert math.sqrt(d) / 4 <= bound <= math.sqrt(d)


def test_stage2_sigmas_follow_the_broadcast() -> None:
    plan = plan_protocol(ProtocolConfig(1.0, 1e-5), n=100, d=4)
    c, cb = np.array([0.5, 0.5, 0.5, 0.5]), np.array([0.0, 1.0, 0.0, 1.0])
    s = plan.stage2_sigmas(c, cb)
    assert s["dispersion"].shape == s["q"].shape == (4,)
    np.testing.assert_allclose(s["dispersion"], plan.sigma("dispersion") / 4)  # all at 1/2
    np.testing.assert_allclose(s["q"], plan.sigma("q"))  # corners: the worst case
    off = plan_protocol(ProtocolConfig(1.0, 1e-5, broadcast_bounds=False), n=100, d=4)
    np.testing.assert_array_equal(off.stage2_sigmas(c, cb)["dispersion"], off.sigma("dispersion"))
    # mu_k = Delta_k(c)/sigma_k(c) stays as planned, so the privacy spent does not change
    assert privacy_spent(plan.budget).epsilon == pytest.approx(1.0, rel=1e-9)
    # the client's share and the server's central sigma use the same scale
    share = plan.share_std_vector(2, (c, cb))
    np.testing.assert_allclose(share[:4], s["dispersion"] / 10.0)
    np.testing.assert_allclose(plan.sigma_vector(2, (c, cb))[4:], s["q"])
    # the encoding keeps the worst case, an upper bound on every share
    assert np.all(plan.share_tail_bounds(2) >= plan.mechanism.tail_bound(share, 4e-33) - 1e-9)


def test_results_report_the_stage2_sigma_used() -> None:
    x = np.random.default_rng(6).random((50, 8)) * 0.3 + 0.35
    res = private_statistics(
        x, epsilon=1.0, delta=1e-5, adaptive_floor=False, rng=np.random.default_rng(7)
    )
    assert res.plan is not None and res.plan.config.noise_shape == "per_coordinate"
    plan = res.plan
    used = plan.stage2_sigmas(res.mu_prime_broadcast, res.weighted_mean)
    # the scalar shown is the root mean square of the per-coordinate sigmas drawn
    rms = float(np.sqrt(np.mean(used["dispersion"] ** 2)))
    assert res.sigmas["dispersion"] == pytest.approx(rms)
    assert res.sigmas["dispersion"] < plan.sigma("dispersion")


# --------------------------------------------------------------------------- settings flow


def _scenario(**privacy: object) -> dict[str, object]:
    return {
        "scenario": {"name": "levers", "description": "d"},
        "data": {"dataset": "digits", "num_clients": 20, "label_ratios": [1] * 10},
        "privacy": {"epsilon": 1.0, "delta": 1e-5, **privacy},
        "experiment": {"repeats": 2, "seed": 1},
    }


def test_scenario_settings_reach_the_protocol() -> None:
    from fa_hetdp.config.scenario import scenario_from_dict
    from fa_hetdp.experiments.grid import grid_from_scenario

    scenario = scenario_from_dict(
        _scenario(statistics=["i2", "dispersion"], broadcast_bounds=False)
    )
    assert scenario.privacy.statistics == ("i2", "dispersion")
    assert scenario.privacy.broadcast_bounds is False
    assert scenario.privacy.composition == "gdp"
    grid = grid_from_scenario(scenario)
    assert grid.statistics == ("i2", "dispersion") and grid.broadcast_bounds is False
    assert grid.compositions == ("gdp",)
    again = scenario_from_dict(scenario.to_dict())
    assert again.privacy == scenario.privacy
    defaults = scenario_from_dict(_scenario())
    assert defaults.privacy.statistics is None and defaults.privacy.broadcast_bounds is True
    with pytest.raises(ConfigError, match=r"privacy\.statistics: unknown name"):
        scenario_from_dict(_scenario(statistics=["i2", "variance"]))
    with pytest.raises(ConfigError, match=r"privacy\.statistics: has repeated"):
        scenario_from_dict(_scenario(statistics=["q", "q"]))


# --------------------------------------------------------------------------- (c') per coordinate


def test_per_coordinate_sigmas_keep_mu_and_minimise_the_summed_variance() -> None:
    rng = np.random.default_rng(13)
    plan = plan_protocol(ProtocolConfig(1.0, 1e-5, noise_shape="per_coordinate"), n=100, d=16)
    uniform = plan_protocol(ProtocolConfig(1.0, 1e-5), n=100, d=16)
    for _ in range(20):
        c, cb = rng.random(16) ** 3, rng.random(16)  # uneven: many near 0, some near 1/2
        per, uni = plan.stage2_sigmas(c, cb), uniform.stage2_sigmas(c, cb)
        for key, centre, w in (("dispersion", c, 1.0), ("q", cb, plan.max_weight)):
            b = w * coordinate_bounds(centre)  # the box of replace-one moves
            mu_planned = w * math.sqrt(16) / plan.sigma(key)
            # sum_j b_j^2 / sigma_j^2: the mu of the box's worst corner, exactly as planned
            assert math.sqrt(np.sum(b**2 / per[key] ** 2)) == pytest.approx(mu_planned, rel=1e-9)
            assert np.all(per[key] <= plan.sigma(key) * (1 + 1e-12))  # encoding bound holds
            # the least summed variance at that mu: never more than one sigma for all
            assert np.sum(per[key] ** 2) <= np.sum(uni[key] ** 2) * (1 + 1e-12)
            # and the optimum: sigma_j^2 proportional to b_j (Lagrange)
            ratio = per[key] ** 2 / b
            np.testing.assert_allclose(ratio, ratio[0], rtol=1e-9)
        # the shares and the server's noise follow the same sigma_j
        np.testing.assert_allclose(plan.sigma_vector(2, (c, cb))[:16], per["dispersion"])
        np.testing.assert_allclose(plan.share_std_vector(2, (c, cb))[16:], per["q"] / 10.0)


def test_per_coordinate_noise_needs_broadcast_bounds_and_gaussian_noise() -> None:
    with pytest.raises(ConfigError, match="needs broadcast_bounds"):
        ProtocolConfig(1.0, 1e-5, noise_shape="per_coordinate", broadcast_bounds=False)
    with pytest.raises(ConfigError, match="Gaussian noise only"):
        ProtocolConfig(1.0, 1e-5, noise_shape="per_coordinate", mechanism="ddg")
    with pytest.raises(ConfigError, match="noise_shape"):
        ProtocolConfig(1.0, 1e-5, noise_shape="diagonal")  # type: ignore[arg-type]
    # the default, "auto", resolves to it where it is allowed and to uniform elsewhere
    assert ProtocolConfig(1.0, 1e-5).noise_shape == "per_coordinate"
    assert ProtocolConfig(1.0, 1e-5, mechanism="ddg").noise_shape == "uniform"
    # private_statistics recommends it, but not where it is refused
    x = np.random.default_rng(0).random((40, 4))
    r = private_statistics(x, epsilon=1.0, delta=1e-5, rng=np.random.default_rng(0))
    assert r.plan is not None and r.plan.config.noise_shape == "per_coordinate"
    off = private_statistics(
        x, epsilon=1.0, delta=1e-5, broadcast_bounds=False, rng=np.random.default_rng(0)
    )
    assert off.plan is not None and off.plan.config.noise_shape == "uniform"
