"""Tests for the discrete mechanisms behind the seam (fa_hetdp.dp.mechanisms: ddg, skellam)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats
from threshold_audit import threshold_epsilon_lower_bound

from fa_hetdp._types import Composition, Mechanism
from fa_hetdp.config.protocol import ProtocolConfig
from fa_hetdp.dp.accounting import ReleaseSpec, plan_budget, privacy_spent
from fa_hetdp.dp.discrete import discrete_gaussian_pmf, skellam_pmf
from fa_hetdp.dp.discrete_accounting import zcdp_epsilon
from fa_hetdp.dp.lattice import MAX_LATTICE, lattice_step
from fa_hetdp.dp.mechanisms import DiscreteMechanism, get_mechanism
from fa_hetdp.protocol.plan import plan_protocol
from fa_hetdp.protocol.simulate import private_statistics, private_statistics_batch
from fa_hetdp.server.results import privacy_section, stage1_spent

ALPHA = 0.001  # significance level of the statistical tests below (fixed seeds, no redraws)
KINDS: list[Mechanism] = ["ddg", "skellam"]


def test_lattice_is_a_public_power_of_two() -> None:
    s = np.array([0.0, 1e-4, 0.01, 3.0, 1e4])
    g = lattice_step(s)
    assert g[0] == 0.0
    nz = g[1:]
    np.testing.assert_array_equal(np.exp2(np.round(np.log2(nz))), nz)
    assert np.all(nz <= MAX_LATTICE) and np.all(nz <= s[1:] / 16.0)
    assert np.all(nz > np.minimum(s[1:] / 32.0, MAX_LATTICE / 2.0))


@pytest.mark.statistical
@pytest.mark.parametrize("kind", KINDS)
def test_share_is_dithered_exact_integer_noise(kind: Mechanism) -> None:
    # X = gamma (U - 1/2 + Z): floor(X/gamma + 1/2) = Z has the exact pmf and U is uniform.
    mech = get_mechanism(kind)
    scale = 1e-3  # gamma = 2^-14, s/gamma = 16.384
    x = mech.sample(scale, 100_000, rng=np.random.default_rng(4))
    gamma = float(lattice_step(scale))
    z = np.floor(x / gamma + 0.5)
    u = x / gamma + 0.5 - z
    assert stats.kstest(u, "uniform").pvalue > ALPHA
    v = (scale / gamma) ** 2
    support = np.arange(-120, 121)
    pmf = discrete_gaussian_pmf(support, v) if kind == "ddg" else skellam_pmf(support, v)
    observed = np.array([np.sum(z == k) for k in support], dtype=np.float64)
    keep = pmf * z.size >= 5
    expected = pmf[keep] * z.size
    assert observed[~keep].sum() < 50
    assert (
        stats.chisquare(observed[keep], expected * observed[keep].sum() / expected.sum()).pvalue
        > ALPHA
    )
    assert np.var(x) == pytest.approx(float(mech.variance(scale)), rel=0.03)


@pytest.mark.parametrize("kind", KINDS)
def test_zero_scale_draws_exact_zeros_and_tail_bound_holds(kind: Mechanism) -> None:
    mech = get_mechanism(kind)
    draws = mech.sample(np.array([0.0, 2.0]), (20_000, 2), rng=np.random.default_rng(9))
    assert np.all(draws[:, 0] == 0.0)
    bound = mech.tail_bound(np.array([0.0, 2.0]), 0.01)
    assert bound[0] == 0.0
    exceed = np.mean(np.abs(draws[:, 1]) > bound[1])
    assert exceed <= 0.01 and bound[1] < 2.0 * 4.0  # not looser than 4 sigma at p = 1%


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("composition", ["basic", "gdp"])
def test_calibration_meets_the_target_and_dropouts_cost(
    kind: Mechanism, composition: Composition
) -> None:
    releases = [ReleaseSpec("mean", 8.0), ReleaseSpec("q", 800.0, weight=2.0)]
    plan = plan_budget(1.0, 1e-5, releases, mechanism=kind, composition=composition)
    spent = privacy_spent(plan)
    assert spent.epsilon <= 1.0 + 1e-9
    if composition == "gdp":
        assert spent.epsilon == pytest.approx(1.0, rel=1e-6)
    assert "CKS 2020" in spent.accounting
    mech = get_mechanism(kind)
    assert isinstance(mech, DiscreteMechanism)
    # By hand: rho = factor sum (Delta/sigma)^2/2 with half the noise variance on "mean".
    half = privacy_spent(plan, {"mean": 0.5})
    rho = (
        0.5
        * mech.factor
        * sum(
            (r.sensitivity / (r.sigma * math.sqrt(0.5 if r.name == "mean" else 1.0))) ** 2
            for r in plan.releases
        )
    )
    assert half.epsilon == pytest.approx(zcdp_epsilon(rho, 1e-5), rel=1e-12)
    assert half.epsilon > spent.epsilon and half.degraded


def _audit(kind: Mechanism, noise_factor: float, trials: int = 200_000) -> tuple[float, float]:
    """Empirical lower bound on epsilon of one distributed release (n = 3, d = 1, Delta = 1).

    Neighbours: client 0 holds 0 or 1. Clopper-Pearson at ALPHA (Bonferroni over the
    thresholds) bounds P(y >= k) of both; returns (lower bound, claimed epsilon).
    """
    n = 3
    plan = plan_budget(1.0, 1e-5, [ReleaseSpec("mean", 1.0)], mechanism=kind)
    claimed = privacy_spent(plan).epsilon
    share = plan.sigma("mean") * noise_factor / math.sqrt(n)
    mech = get_mechanism(kind)
    rng = np.random.default_rng(31)
    y0 = mech.sample(share, (trials, n), rng=rng).sum(axis=1)
    y1 = 1.0 + mech.sample(share, (trials, n), rng=rng).sum(axis=1)
    thresholds = np.quantile(y1, np.linspace(0.5, 0.9999, 60))
    best = threshold_epsilon_lower_bound(y0, y1, thresholds, delta=1e-5, alpha=ALPHA)
    return best, claimed


@pytest.mark.statistical
@pytest.mark.parametrize("kind", KINDS)
def test_privacy_audit_of_the_seam(kind: Mechanism) -> None:
    lower, claimed = _audit(kind, 1.0)
    assert lower <= claimed
    lower_weak, _ = _audit(kind, 0.2)  # a fifth of the noise: caught
    assert lower_weak > claimed


@pytest.mark.parametrize("kind", KINDS)
def test_private_statistics_runs_with_the_discrete_mechanisms(kind: Mechanism) -> None:
    x = np.random.default_rng(0).random((60, 16))
    a = private_statistics(x, epsilon=1.0, delta=1e-5, mechanism=kind, rng=np.random.default_rng(1))
    b = private_statistics(x, epsilon=1.0, delta=1e-5, mechanism=kind, rng=np.random.default_rng(1))
    np.testing.assert_array_equal(a.mean, b.mean)
    assert np.all(np.isfinite(a.mean)) and a.spent.epsilon <= 1.0 + 1e-9
    assert "accounting" in " ".join(a.labels)
    assert a.spent.accounting == get_mechanism(kind).accounting
    config = ProtocolConfig(1.0, 1e-5, mechanism=kind)
    batch = private_statistics_batch(x, config, repeats=3, rng=np.random.default_rng(2))
    assert batch.mean.shape == (3, 16)
    bounds = plan_protocol(config, n=60, d=16).share_tail_bounds(1)
    assert np.all(np.isfinite(bounds)) and np.all(bounds > 0)


def test_flower_result_document_uses_the_mechanisms_conversion() -> None:
    # The stage-1-only guarantee of the result document converts zCDP, not Gaussian DP.
    config = ProtocolConfig(1.0, 1e-5, mechanism="ddg")
    plan = plan_protocol(config, n=40, d=8)
    part = stage1_spent(plan, 1.0)
    rho = 0.5 * part["mu"] ** 2
    assert part["guarantees"][0]["epsilon"] == pytest.approx(zcdp_epsilon(rho, 1e-5), rel=1e-12)
    spent = privacy_spent(plan.budget)
    section = privacy_section(plan, spent, released=["stage 2"])
    assert section["composition"] == get_mechanism("ddg").accounting
