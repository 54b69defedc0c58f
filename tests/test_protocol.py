"""Tests for fa_hetdp.protocol (the two-stage private protocol)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from scipy import stats

from fa_hetdp._types import Placement
from fa_hetdp.config.center import DispersionCenter
from fa_hetdp.config.noise import NoiseShape
from fa_hetdp.config.protocol import ProtocolConfig
from fa_hetdp.errors import (
    BaselineWarning,
    InputDataError,
    PrivacyParameterError,
)
from fa_hetdp.protocol.client import local_values, stage1_contribution, stage2_contribution
from fa_hetdp.protocol.plan import ProtocolPlan, plan_protocol
from fa_hetdp.protocol.server import (
    PrivateStatistics,
    Stage1Release,
    assemble_stage1,
    assemble_stage2,
)
from fa_hetdp.protocol.simulate import (
    _run_protocol,
    noiseless_stage1,
    noiseless_stage2,
    private_statistics,
    private_statistics_batch,
)
from fa_hetdp.stats.exact import client_weights, true_statistics

STATS = ("mean", "dispersion", "weighted_mean", "q", "i2", "i2_extra")


@pytest.fixture(scope="module")
def small_data() -> np.ndarray:
    rng = np.random.default_rng(7)
    return rng.beta(2.0, 3.0, size=(30, 6))


def _client_path(
    x: np.ndarray,
    plan_cfg: ProtocolConfig,
    *,
    client_seed: int,
    server_seed: int,
    drop_stage2: int = 0,
) -> tuple[ProtocolPlan, tuple[Stage1Release, PrivateStatistics], np.ndarray, np.ndarray]:
    """Run the protocol through the client and server functions (as the Flower apps do)."""
    n, d = x.shape
    plan = plan_protocol(plan_cfg, n=n, d=d)
    streams = [np.random.default_rng(s) for s in np.random.SeedSequence(client_seed).spawn(n)]
    server = np.random.default_rng(server_seed)
    locals_ = [local_values(row, variance_floor=plan_cfg.variance_floor) for row in x]
    s1 = np.sum(
        [stage1_contribution(lv, plan, rng=r) for lv, r in zip(locals_, streams, strict=True)],
        axis=0,
    )
    st1 = assemble_stage1(s1, plan, n=n, noise_shares=n, rng=server)
    s2 = np.sum(
        [
            stage2_contribution(lv, plan, st1.mu_prime_broadcast, st1.weighted_mu_prime, rng=r)
            for lv, r in zip(locals_, streams, strict=True)
        ],
        axis=0,
    )
    res = assemble_stage2(s2, plan, st1, n=n, noise_shares=n - drop_stage2, rng=server)
    return plan, (st1, res), s1, s2


# --------------------------------------------------------------------------- configuration


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        ({"epsilon": 0.0}, "epsilon"),
        ({"epsilon": float("nan")}, "epsilon"),
        ({"epsilon": float("inf")}, "epsilon"),
        ({"delta": 1.0}, "delta"),
        ({"delta": 0.0}, "delta"),
        ({"mechanism": "laplace"}, "mechanism"),
        ({"placement": "local"}, "placement"),
        ({"composition": "rdp"}, "composition"),
        ({"profile": "loose"}, "profile"),
        ({"mechanism": "cgm", "composition": "gdp"}, "gdp"),
        ({"variance_floor": 0.0}, "variance_floor"),
        ({"min_honest_clients": 0}, "min_honest_clients"),
        ({"min_honest_clients": 2.5}, "min_honest_clients"),
        ({"split": {"median": 1.0}}, "median"),
        ({"split": {"q": -1.0}}, "split"),
    ],
)
def test_config_rejects_bad_values(kwargs: dict[str, object], pattern: str) -> None:
    base: dict[str, object] = {"epsilon": 1.0, "delta": 1e-5}
    base.update(kwargs)
    with pytest.raises(PrivacyParameterError, match=pattern):
        ProtocolConfig(**base)  # type: ignore[arg-type]


def test_plan_sensitivities_and_noise_scales() -> None:
    cfg = ProtocolConfig(2.0, 1e-6, variance_floor=0.04, min_honest_clients=25)
    plan = plan_protocol(cfg, n=100, d=9)
    w = 25.0
    assert plan.max_weight == pytest.approx(w)
    assert plan.min_weight == pytest.approx(4.0)
    sens = {r.name: r.sensitivity for r in plan.budget.releases}
    assert sens["mean"] == pytest.approx(3.0)
    assert sens["weighted"] == pytest.approx(w * math.sqrt(10))
    assert sens["dispersion"] == pytest.approx(3.0)
    assert sens["q"] == pytest.approx(w * 3.0)
    assert sens["i2_extra"] == pytest.approx(3.0 / 100)
    assert not plan.budget.release("i2_extra").counts_for_privacy
    assert plan.t == 25
    assert plan.share_std("q") == pytest.approx(plan.sigma_q / 5.0)
    assert plan.noise_std("q") == pytest.approx(plan.sigma_q * 2.0)  # 100 shares of sigma^2/25
    assert (plan.stage1_length, plan.stage2_length) == (19, 18)
    bounds1 = plan.contribution_bounds(1)
    assert bounds1.shape == (19,) and bounds1[0] == 1.0 and bounds1[-1] == pytest.approx(w)
    assert plan.contribution_bounds(2).shape == (18,)
    central = plan_protocol(ProtocolConfig(2.0, 1e-6, placement="central"), n=100, d=9)
    assert central.share_std("mean") == 0.0
    assert central.noise_std("mean") == central.sigma_mean


def test_plan_rejects_bad_sizes() -> None:
    cfg = ProtocolConfig(1.0, 1e-5, min_honest_clients=11)
    with pytest.raises(InputDataError, match="n must be"):
        plan_protocol(cfg, n=1, d=3)
    with pytest.raises(InputDataError, match="d must be"):
        plan_protocol(cfg, n=20, d=0)
    with pytest.raises(PrivacyParameterError, match=r"\[1, 10\]"):
        plan_protocol(cfg, n=10, d=3)


def test_paper_profile_warns_and_labels() -> None:
    with pytest.warns(BaselineWarning, match="not DP for the weighted stages"):
        plan = plan_protocol(ProtocolConfig(1.0, 1e-5, profile="paper"), n=50, d=4)
    assert plan.budget.release("weighted").sensitivity == pytest.approx(math.sqrt(5))
    assert plan.budget.release("q").sensitivity == pytest.approx(2.0)
    assert any("not DP for the weighted stages" in label for label in plan.labels)


def test_cgm_at_large_epsilon_is_labelled_baseline(small_data: np.ndarray) -> None:
    with pytest.warns(BaselineWarning):
        res = private_statistics(
            small_data,
            epsilon=10.0,
            delta=1e-5,
            mechanism="cgm",
            composition="basic",
            rng=np.random.default_rng(0),
        )
    assert any("CGM" in label or "cgm" in label.lower() for label in res.labels)


def test_no_extra_i2_noise() -> None:
    plan = plan_protocol(ProtocolConfig(1.0, 1e-5, extra_i2_noise=False), n=10, d=3)
    assert "i2_extra" not in plan.releases
    assert plan.sigma_i2 == 0.0


# --------------------------------------------------------------------------- client / server


def test_client_server_split_equals_in_process_given_same_noise(small_data: np.ndarray) -> None:
    cfg = ProtocolConfig(5.0, 1e-5, min_honest_clients=20)
    plan, (st1, res), s1, s2 = _client_path(small_data, cfg, client_seed=3, server_seed=9)
    x = small_data
    w, _ = client_weights(x, variance_floor=cfg.variance_floor)
    noise1 = s1 - noiseless_stage1(x, w)
    noise2 = s2 - noiseless_stage2(x, w, st1.mu_prime_broadcast, st1.weighted_mu_prime)
    again = _run_protocol(
        true_statistics(x, variance_floor=cfg.variance_floor),
        plan,
        stage1_noise=noise1,
        stage2_noise=noise2,
        rng=np.random.default_rng(9),
    )
    for name in STATS:
        np.testing.assert_allclose(
            getattr(again, name), getattr(res, name), rtol=1e-10, atol=1e-10, err_msg=name
        )
    assert again.spent == res.spent


@pytest.mark.parametrize("center", ["broadcast", "optimal"])
def test_central_client_path_equals_private_statistics(
    small_data: np.ndarray, center: DispersionCenter
) -> None:
    # optimal: the clients centre on Stage1Release.mu_prime_broadcast (the public centre)
    cfg = ProtocolConfig(
        3.0,
        1e-6,
        placement="central",
        dispersion_center=center,
        adaptive_floor=False,  # the client path here has no stage 0
        noise_shape="uniform",
    )
    _, (st1, res), _, _ = _client_path(small_data, cfg, client_seed=1, server_seed=42)
    moved = not np.allclose(st1.mu_prime_broadcast, np.clip(st1.mu_prime, 0.0, 1.0))
    assert moved == (center == "optimal")
    direct = private_statistics(
        small_data,
        epsilon=3.0,
        delta=1e-6,
        placement="central",
        adaptive_floor=False,  # as the config above
        noise_shape="uniform",
        dispersion_center=center,
        rng=np.random.default_rng(42),
    )
    for name in STATS:
        np.testing.assert_allclose(
            getattr(direct, name), getattr(res, name), rtol=1e-10, atol=1e-10, err_msg=name
        )


@pytest.mark.parametrize("center", ["broadcast", "optimal"])
@pytest.mark.parametrize("shape", ["uniform", "per_coordinate"])
@pytest.mark.parametrize("placement", ["distributed", "central"])
def test_batch_with_one_repeat_equals_in_process(
    small_data: np.ndarray, placement: Placement, shape: NoiseShape, center: DispersionCenter
) -> None:
    # Both paths draw the same standard normals in the same order; the batch path uses the
    # identities sum (x - m)^2 = sum (x - mu)^2 + n (mu - m)^2 (and the weighted analogue),
    # and each repeat's own broadcast for the stage-2 scale (per coordinate or not).
    cfg = ProtocolConfig(
        0.5,
        1e-5,
        placement=placement,
        noise_shape=shape,
        dispersion_center=center,
        adaptive_floor=False,
    )
    direct = private_statistics(
        small_data,
        epsilon=0.5,
        delta=1e-5,
        placement=placement,
        adaptive_floor=False,  # as the config above
        noise_shape=shape,
        dispersion_center=center,
        rng=np.random.default_rng(5),
    )
    batch = private_statistics_batch(small_data, cfg, repeats=1, rng=np.random.default_rng(5))
    for name in STATS:
        np.testing.assert_allclose(
            getattr(batch, name)[0], getattr(direct, name), rtol=1e-9, atol=1e-9, err_msg=name
        )
    assert batch.weighted_denominator[0] == pytest.approx(direct.weighted_denominator)
    assert batch.spent.epsilon == pytest.approx(direct.spent.epsilon)


def test_results_carry_sigmas_spent_and_summary(small_data: np.ndarray) -> None:
    res = private_statistics(small_data, epsilon=1.0, delta=1e-5, rng=np.random.default_rng(1))
    assert set(res.sigmas) == {"mean", "weighted", "dispersion", "q", "i2_extra"}
    assert all(s > 0 for s in res.sigmas.values())
    assert 0 < res.spent.epsilon <= 1.0 + 1e-9  # basic split, exact composition is tighter
    assert not res.spent.degraded
    summary = res.summary()
    assert summary["q"] == pytest.approx(float(np.mean(res.q)))
    assert summary["n"] == 30.0
    assert np.all((res.weighted_mean >= 0) & (res.weighted_mean <= 1))
    assert np.all((res.i2 >= 0) & (res.i2 < 1))


def test_dropout_accounting(small_data: np.ndarray) -> None:
    cfg = ProtocolConfig(2.0, 1e-5)
    _, (_, full), _, _ = _client_path(small_data, cfg, client_seed=1, server_seed=2)
    _, (_, fewer), _, _ = _client_path(
        small_data, cfg, client_seed=1, server_seed=2, drop_stage2=10
    )
    assert not full.spent.degraded
    assert fewer.spent.degraded
    assert fewer.spent.epsilon > full.spent.epsilon
    assert any(label.startswith("degraded") for label in fewer.labels)
    per = {r.name: r.noise_variance_fraction for r in fewer.spent.per_release}
    assert per["q"] == pytest.approx(20 / 30)
    assert per["mean"] == 1.0
    # no share at all: no guarantee
    plan = plan_protocol(cfg, n=30, d=6)
    st1 = assemble_stage1(np.ones(13), plan, n=30, noise_shares=30, rng=np.random.default_rng(0))
    res = assemble_stage2(
        np.ones(12), plan, st1, n=30, noise_shares=0, rng=np.random.default_rng(0)
    )
    assert math.isinf(res.spent.epsilon)


def test_noise_fraction_counts_only_guaranteed_honest_shares() -> None:
    plan = plan_protocol(ProtocolConfig(1.0, 1e-5, min_honest_clients=60), n=100, d=2)
    assert plan.noise_fraction(100) == 1.0
    assert plan.noise_fraction(90) == pytest.approx(50 / 60)  # up to 40 dishonest among them
    assert plan.noise_fraction(40) == 0.0
    central = plan_protocol(ProtocolConfig(1.0, 1e-5, placement="central"), n=100, d=2)
    assert central.noise_fraction(0) == 1.0


def test_nonpositive_weight_sum_is_clamped_not_nan() -> None:
    plan = plan_protocol(ProtocolConfig(1.0, 1e-5), n=10, d=3)
    s1 = np.array([5.0, 5.0, 5.0, 30.0, -10.0, 60.0, -3.0])
    st1 = assemble_stage1(s1, plan, n=10, noise_shares=10, rng=np.random.default_rng(0))
    assert st1.b_clamped and st1.b_used == pytest.approx(40.0)
    assert np.all(np.isfinite(st1.weighted_mu_prime))
    np.testing.assert_allclose(st1.weighted_mu_prime, [0.75, 0.0, 1.0])
    # Q'' <= 0 and Q'' = 0 give I2'' = 0 without division warnings (warnings are errors).
    res = assemble_stage2(
        np.array([1.0, 1.0, 1.0, -5.0, 0.0, 100.0]),
        plan,
        st1,
        n=10,
        noise_shares=10,
        rng=np.random.default_rng(0),
    )
    np.testing.assert_allclose(res.i2, [0.0, 0.0, 0.91])
    assert any("clamped" in label for label in res.labels)


def test_client_side_checks() -> None:
    plan = plan_protocol(ProtocolConfig(1.0, 1e-5), n=10, d=3)
    lv = local_values([0.2, 1.4, -0.1], variance_floor=0.01)
    assert lv.n_clipped == 2
    np.testing.assert_array_equal(lv.x, [0.2, 1.0, 0.0])
    rng = np.random.default_rng(0)
    assert stage1_contribution(lv, plan, rng=rng).shape == (7,)
    with pytest.raises(InputDataError, match=r"\[0, 1\]"):
        stage2_contribution(lv, plan, [0.5, 1.2, 0.5], [0.5, 0.5, 0.5], rng=rng)
    with pytest.raises(InputDataError, match="shape"):
        stage2_contribution(lv, plan, [0.5, 0.5], [0.5, 0.5, 0.5], rng=rng)
    other = local_values([0.2, 0.3], variance_floor=0.01)
    with pytest.raises(InputDataError, match="expects shape"):
        stage1_contribution(other, plan, rng=rng)
    with pytest.raises(InputDataError, match="finite"):
        local_values([0.2, np.nan], variance_floor=0.01)
    with pytest.raises(InputDataError, match="shape"):
        assemble_stage1(np.zeros(5), plan, n=10, noise_shares=10, rng=rng)
    with pytest.raises(InputDataError, match="noise_shares"):
        assemble_stage1(np.zeros(7), plan, n=10, noise_shares=11, rng=rng)


def test_private_statistics_rejects_bad_data() -> None:
    with pytest.raises(InputDataError):
        private_statistics(np.ones((1, 3)), epsilon=1.0, delta=1e-5, rng=np.random.default_rng(0))
    x = np.full((4, 3), 0.5)
    x[0, 0] = 3.0
    res = private_statistics(x, epsilon=1.0, delta=1e-5, rng=np.random.default_rng(0))
    assert res.n_clipped == 1


def test_batch_rejects_bad_repeats(small_data: np.ndarray) -> None:
    with pytest.raises(InputDataError, match="repeats"):
        private_statistics_batch(
            small_data, ProtocolConfig(1.0, 1e-5), repeats=0, rng=np.random.default_rng(0)
        )


# --------------------------------------------------------------------------- statistical


@pytest.mark.statistical
def test_summed_noise_matches_sum_of_client_shares() -> None:
    # KS tests, alpha = 0.01, fixed seeds. Per-client path: the real client function
    # stage1_contribution / stage2_contribution (n = 200 shares of N(0, sigma^2/t), t = 100)
    # minus the noiseless sums; one-draw path: private_statistics' summed draw
    # (via the batch path, which uses the same draw). Both standardised by the plan's
    # total noise std sigma sqrt(n/t) and compared with each other and with N(0, 1).
    alpha = 0.01
    rng = np.random.default_rng(2024)
    n, d = 200, 8
    x = rng.random((n, d))
    # the fixed floor and one stage-2 sigma (the batch path draws with the plan's own floor)
    cfg = ProtocolConfig(
        1.0, 1e-5, min_honest_clients=100, adaptive_floor=False, noise_shape="uniform"
    )
    plan = plan_protocol(cfg, n=n, d=d)
    w, _ = client_weights(x, variance_floor=cfg.variance_floor)
    locals_ = [local_values(row, variance_floor=cfg.variance_floor) for row in x]
    std1 = np.concatenate(
        [np.full(d, plan.noise_std("mean")), np.full(d + 1, plan.noise_std("weighted"))]
    )
    mb = np.full(d, 0.5)
    std2 = plan.noise_std_vector(2, (mb, mb))  # the stage-2 scale follows the broadcast
    base1 = noiseless_stage1(x, w)
    base2 = noiseless_stage2(x, w, mb, mb)
    client_rng = np.random.default_rng(99)
    per_client = []
    for _ in range(60):
        s1 = np.sum([stage1_contribution(lv, plan, rng=client_rng) for lv in locals_], axis=0)
        s2 = np.sum(
            [stage2_contribution(lv, plan, mb, mb, rng=client_rng) for lv in locals_], axis=0
        )
        per_client.append(np.concatenate([(s1 - base1) / std1, (s2 - base2) / std2]))
    shares = np.concatenate(per_client)
    assert stats.kstest(shares, "norm").pvalue > alpha

    batch = private_statistics_batch(x, cfg, repeats=600, rng=np.random.default_rng(7))
    truth = true_statistics(x, variance_floor=cfg.variance_floor)
    one_draw = ((batch.mean - truth.mean) * n / plan.noise_std("mean")).ravel()
    assert stats.kstest(one_draw, "norm").pvalue > alpha
    assert stats.ks_2samp(shares, one_draw).pvalue > alpha
    # And the batch's per-client option (n shares drawn and summed) agrees too.
    batch_pc = private_statistics_batch(
        x, cfg, repeats=300, rng=np.random.default_rng(8), noise_draw="per_client"
    )
    pc = ((batch_pc.mean - truth.mean) * n / plan.noise_std("mean")).ravel()
    assert stats.ks_2samp(pc, one_draw).pvalue > alpha


def test_private_statistics_defaults_follow_protocol_config() -> None:
    """With nothing but epsilon, delta and rng, the run uses ProtocolConfig's defaults."""
    x = np.random.default_rng(0).random((30, 4))
    r = private_statistics(x, epsilon=1.0, delta=1e-5, rng=np.random.default_rng(1))
    assert r.plan is not None
    # ... and the adaptive variance floor, which private_statistics recommends (issue 9, d)
    # and per-coordinate stage-2 noise and the optimal dispersion centre (lever c)
    assert r.plan.config == ProtocolConfig(
        epsilon=1.0,
        delta=1e-5,
        adaptive_floor=True,
        noise_shape="per_coordinate",
        dispersion_center="optimal",
    )
    basic = private_statistics(
        x, epsilon=1.0, delta=1e-5, composition="basic", rng=np.random.default_rng(1)
    )
    assert basic.plan is not None and basic.plan.config.composition == "basic"
    assert r.total_dispersion == pytest.approx(float(np.sum(r.dispersion)))


@pytest.mark.statistical
def test_client_stage2_share_is_per_coordinate_with_per_coordinate_noise() -> None:
    # The Flower client's stage-2 share (stage2_contribution) follows sigma_j / sqrt(t) per
    # coordinate: 4000 shares of one client, per-coordinate std within 5 % (chi-square s.e.
    # 1.1 %; fixed seed) of share_std_vector, and the coordinates' scales differ.
    cfg = ProtocolConfig(1.0, 1e-5, noise_shape="per_coordinate")
    plan = plan_protocol(cfg, n=50, d=4)
    local = local_values(np.array([0.1, 0.2, 0.5, 0.9]), variance_floor=cfg.variance_floor)
    m, mb = np.array([0.02, 0.1, 0.5, 0.45]), np.array([0.3, 0.5, 0.05, 0.9])
    rng = np.random.default_rng(17)
    noiseless = stage2_contribution(
        local, dataclasses.replace(plan, config=dataclasses.replace(cfg, placement="central")),
        m, mb, rng=rng,
    )  # fmt: skip
    draws = np.stack([stage2_contribution(local, plan, m, mb, rng=rng) for _ in range(4000)])
    expected = plan.share_std_vector(2, (m, mb))
    np.testing.assert_allclose((draws - noiseless).std(axis=0) / expected, 1.0, atol=0.05)
    assert np.ptp(expected[:4]) > 0.2 * expected[:4].max()
