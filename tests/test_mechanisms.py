"""Tests for fa_hetdp.dp.mechanisms (the noise-mechanism seam) and its use by the protocol."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from fa_hetdp._types import MECHANISMS
from fa_hetdp.config.protocol import ProtocolConfig
from fa_hetdp.dp.accounting import ReleaseSpec, plan_budget, privacy_spent
from fa_hetdp.dp.calibration import achieved_epsilon, calibrate_sigma, cgm_sigma
from fa_hetdp.dp.mechanisms import GaussianEvent, get_mechanism, mechanism_names
from fa_hetdp.errors import PrivacyParameterError
from fa_hetdp.protocol.plan import ENCODING_FAILURE_PROBABILITY, plan_protocol
from fa_hetdp.protocol.server import estimate_stage1, estimate_stage2, extra_i2_noise
from fa_hetdp.protocol.simulate import private_statistics_batch

ALPHA = 0.01  # significance level of the statistical tests below (fixed seeds)

RELEASES = [
    ReleaseSpec("mean", 4.0),
    ReleaseSpec("weighted", 100.0 * math.sqrt(17.0)),
    ReleaseSpec("dispersion", 4.0),
    ReleaseSpec("q", 400.0),
    ReleaseSpec("i2_extra", 4.0 / 50, counts_for_privacy=False),
]


def test_registry_names_match_the_config_choices() -> None:
    assert mechanism_names() == MECHANISMS == ("agm", "cgm", "ddg", "skellam")
    for name in mechanism_names():
        assert get_mechanism(name).name == name
    with pytest.raises(PrivacyParameterError, match="mechanism='laplace'"):
        get_mechanism("laplace")


def test_compositions_declared_by_the_mechanism() -> None:
    assert get_mechanism("agm").supports("gdp")
    assert not get_mechanism("cgm").supports("gdp")
    with pytest.raises(PrivacyParameterError, match="gdp"):
        get_mechanism("cgm").calibrate_gdp(1.0, 1.0)


def test_calibrate_matches_the_calibration_rules() -> None:
    assert get_mechanism("agm").calibrate(0.5, 1e-6, 3.0) == calibrate_sigma(0.5, 1e-6, 3.0)
    assert get_mechanism("cgm").calibrate(0.5, 1e-6, 3.0) == cgm_sigma(0.5, 1e-6, 3.0)
    assert get_mechanism("agm").calibrate_gdp(0.25, 3.0) == 12.0
    assert get_mechanism("cgm").is_baseline(1.0) and not get_mechanism("agm").is_baseline(5.0)


@pytest.mark.parametrize("name", ["agm", "cgm"])
def test_sample_has_the_stated_variance(name: str) -> None:
    mech = get_mechanism(name)
    scale = np.array([0.5, 2.0, 7.0])
    draws = mech.sample(scale, (20_000, 3), rng=np.random.default_rng(11))
    assert draws.shape == (20_000, 3)
    variance = mech.variance(scale)
    for j in range(3):
        # KS test of the standardised draws against N(0, 1) at ALPHA.
        z = draws[:, j] / math.sqrt(variance[j])
        assert stats.kstest(z, "norm").pvalue > ALPHA
        # chi-square test of the sample variance: (N-1) s^2 / v ~ chi2(N-1), two-sided.
        n = draws.shape[0]
        statistic = (n - 1) * np.var(draws[:, j], ddof=1) / variance[j]
        cdf = stats.chi2.cdf(statistic, n - 1)
        assert ALPHA / 2 < cdf < 1 - ALPHA / 2


def test_sample_is_the_plain_gaussian_stream() -> None:
    # The protocol's seeded streams rely on exactly this generator call.
    mech = get_mechanism("agm")
    scale = np.array([1.0, 3.0])
    got = mech.sample(scale, (4, 2), rng=np.random.default_rng(3))
    want = np.random.default_rng(3).standard_normal((4, 2)) * scale
    np.testing.assert_array_equal(got, want)


def test_tail_bound_holds_at_the_stated_probability() -> None:
    mech = get_mechanism("agm")
    p = 1e-3
    bound = mech.tail_bound(2.0, p)
    assert float(bound) == pytest.approx(2.0 * stats.norm.isf(p / 2), rel=1e-12)
    draws = mech.sample(2.0, 400_000, rng=np.random.default_rng(5))
    exceed = int(np.sum(np.abs(draws) > bound))
    # Exceedances ~ Binomial(N, p): the one-sided test at ALPHA must not reject.
    assert stats.binom.sf(exceed - 1, draws.size, p) > ALPHA
    # The encoding's default is the old twelve standard deviations.
    assert float(mech.tail_bound(1.0, ENCODING_FAILURE_PROBABILITY)) == pytest.approx(12.0)
    with pytest.raises(PrivacyParameterError, match="failure_probability"):
        mech.tail_bound(1.0, 0.0)


def test_event_and_accountant_compose_to_the_same_numbers() -> None:
    event = get_mechanism("agm").event(8.0, 2.0)
    assert event == GaussianEvent(sigma=8.0, sensitivity=2.0)
    assert event.noise_multiplier == 4.0 and event.mu == 0.25
    assert GaussianEvent(sigma=0.0, sensitivity=1.0).mu == math.inf
    plan = plan_budget(1.0, 1e-5, RELEASES, composition="basic")
    spent = privacy_spent(plan, {"q": 0.5})
    mus = []
    for r in plan.releases:
        if r.counts_for_privacy:
            frac = 0.5 if r.name == "q" else 1.0
            mus.append(r.sensitivity / (r.sigma * math.sqrt(frac)))
    mu = math.sqrt(math.fsum(m * m for m in mus))
    assert spent.mu == mu
    assert spent.epsilon == achieved_epsilon(1.0, 1e-5, mu)
    gdp = privacy_spent(plan_budget(1.0, 1e-5, RELEASES, composition="gdp"))
    assert gdp.epsilon == pytest.approx(1.0, rel=1e-9)


def test_plan_noise_vectors_follow_the_layout() -> None:
    plan = plan_protocol(ProtocolConfig(1.0, 1e-5, min_honest_clients=25), n=100, d=3)
    share = plan.share_std_vector(1)
    assert share.shape == (7,)
    np.testing.assert_array_equal(share[:3], plan.share_std("mean"))
    np.testing.assert_array_equal(share[3:], plan.share_std("weighted"))
    total = plan.noise_std_vector(2)
    np.testing.assert_array_equal(total[:3], plan.noise_std("dispersion"))
    np.testing.assert_array_equal(total[3:], plan.noise_std("q"))
    np.testing.assert_array_equal(plan.share_tail_bounds(2), 12.0 * plan.share_std_vector(2))


@pytest.mark.parametrize("placement", ["distributed", "central"])
def test_batch_uses_the_server_functions(placement: str) -> None:
    # repeats=1: the batch result equals the server's estimates of the same noisy sums.
    x = np.random.default_rng(2).random((30, 5))
    config = ProtocolConfig(
        1.0,
        1e-5,
        placement=placement,
        adaptive_floor=False,
        noise_shape="uniform",
        dispersion_center="broadcast",
    )  # type: ignore[arg-type]
    batch = private_statistics_batch(x, config, repeats=1, rng=np.random.default_rng(7))
    plan, truth = batch.plan, batch.truth
    rng = np.random.default_rng(7)
    z1 = rng.standard_normal((1, plan.stage1_length)) * plan.noise_std_vector(1)
    b = truth.weight_sum
    s1 = np.concatenate([truth.n * truth.mean, b * truth.weighted_mean, [b]]) + z1[0]
    st1 = estimate_stage1(s1, plan, n=30)
    m, mb = st1.mu_prime_broadcast, st1.weighted_mu_prime
    # The stage-2 scale follows the public broadcast (broadcast_bounds, the default).
    z2 = rng.standard_normal((1, plan.stage2_length)) * plan.noise_std_vector(2, (m, mb))
    s2 = np.concatenate(
        [
            ((np.clip(x, 0, 1) - m) ** 2).sum(axis=0),
            np.einsum("i,ij->j", truth.weights, (x - mb) ** 2),
        ]
    )
    st2 = estimate_stage2(s2 + z2[0], plan, n=30)
    i2_extra = extra_i2_noise(st2.i2, plan, rng=rng)
    np.testing.assert_array_equal(batch.mean[0], st1.mu_prime)
    np.testing.assert_array_equal(batch.weighted_mean[0], st1.weighted_mu_prime)
    np.testing.assert_allclose(batch.dispersion[0], st2.dispersion, rtol=1e-10)
    np.testing.assert_allclose(batch.q[0], st2.q, rtol=1e-10)
    assert batch.i2_extra is not None
    np.testing.assert_allclose(batch.i2_extra[0], i2_extra, rtol=1e-10, atol=1e-12)
    assert batch.weighted_denominator[0] == st1.b_used


def test_estimates_are_vectorised_over_repeats() -> None:
    plan = plan_protocol(
        ProtocolConfig(
            1.0, 1e-5, adaptive_floor=False, noise_shape="uniform", dispersion_center="broadcast"
        ),
        n=20,
        d=4,
    )
    sums = np.random.default_rng(4).random((3, plan.stage1_length)) * 20
    many = estimate_stage1(sums, plan, n=20)
    for r in range(3):
        one = estimate_stage1(sums[r], plan, n=20)
        np.testing.assert_array_equal(many.weighted_mu_prime[r], one.weighted_mu_prime)
        assert many.b_used[r] == one.b_used
    sums2 = np.random.default_rng(5).random((3, plan.stage2_length)) * 20
    many2 = estimate_stage2(sums2, plan, n=20)
    np.testing.assert_array_equal(many2.i2[1], estimate_stage2(sums2[1], plan, n=20).i2)
