"""Empirical privacy audit of the adaptive variance floor (issue 9, lever d; ``docs/privacy.md``).

The harness of ``tests/test_audit_levers.py`` (exact log-likelihood ratio, threshold picked
on one half of the draws, Clopper-Pearson bounds at alpha/2 each on the other half,
alpha = 0.01) applied to the whole adaptive run: the stage-0 histogram, the floor the server
picks from it, and stages 1 and 2 planned with ``W = 1/floor``. The replaced client moves
between the lowest and the highest variance bucket (constant 1: ``s^2 = 0``, the largest
weight ``W``; alternating 0/1: ``s^2 = 1/4``, weight 4), so the histogram, the weights and
both stage sums all change, the weighted sums by nearly their sensitivity. Given the released
histogram the floor is the same function of it under both datasets, so the likelihood ratio
of the whole run is the histogram's times that of stages 1-2 under the plan of the chosen
floor.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pytest
from test_audit_levers import Audit, _llr, epsilon_lower_bound

from fa_hetdp._types import FloatArray
from fa_hetdp.config.protocol import ProtocolConfig
from fa_hetdp.dp.accounting import privacy_spent
from fa_hetdp.protocol.floor import choose_floor, histogram_of
from fa_hetdp.protocol.plan import ProtocolPlan, plan_protocol
from fa_hetdp.protocol.server import estimate_stage1
from fa_hetdp.stats.exact import client_weights

DELTA = 1e-5
EPSILON = 4.0  # as in test_audit_levers: the audit has power there
DRAWS = 120_000
N, D = 12, 4


def _neighbours() -> tuple[FloatArray, FloatArray]:
    """Eleven clients with spread-out values and, last, a flat 1 (D) or a 0/1 client (D')."""
    rng = np.random.default_rng(12)
    base = rng.random((N - 1, D))
    x = np.vstack([base, np.ones((1, D))])
    x_prime = np.vstack([base, np.tile([0.0, 1.0], D // 2)[None, :]])
    return x, x_prime


def _stage1(x: FloatArray, plan: ProtocolPlan) -> FloatArray:
    w, _ = client_weights(x, variance_floor=plan.variance_floor)
    return plan.zero_unmade(1, np.concatenate([x.sum(0), w @ x, [w.sum()]]))


def _stage2(x: FloatArray, plan: ProtocolPlan, m: FloatArray, mb: FloatArray) -> FloatArray:
    w, _ = client_weights(x, variance_floor=plan.variance_floor)
    disp = ((x[None, :, :] - m[:, None, :]) ** 2).sum(axis=1)
    q = np.einsum("i,rij->rj", w, (x[None, :, :] - mb[:, None, :]) ** 2)
    return plan.zero_unmade(2, np.concatenate([disp, q], axis=1))


@dataclass(frozen=True)
class Knobs:
    """A broken variant: histogram noise divided by ``hist_cut``."""

    hist_cut: float = 1.0


def _run(config: ProtocolConfig, seed: int, knobs: Knobs = Knobs()) -> Audit:
    rng = np.random.default_rng(seed)
    x, x_prime = _neighbours()
    plan0 = plan_protocol(config, n=N, d=D)
    edges = plan0.floor_edges
    h, h_prime = histogram_of(x, edges), histogram_of(x_prime, edges)
    h_std = np.full(h.shape, plan0.floor_noise_std / knobs.hist_cut)
    out = []
    for data, h_data in ((x, h), (x_prime, h_prime)):
        y0 = h_data + plan0.mechanism.sample(h_std, (DRAWS, h.size), rng=rng)
        llr = _llr(y0, h, h_prime, h_std)
        choice = choose_floor(
            y0, n=N, edges=edges, sigma=plan0.floor_noise_std, quantile=config.floor_quantile
        )
        for index in np.unique(choice.index):
            rows = np.flatnonzero(choice.index == index)
            plan = plan_protocol(config, n=N, d=D, floor=float(edges[index]))
            m1, m1p = _stage1(x, plan), _stage1(x_prime, plan)
            s1 = plan.noise_std_vector(1)
            y1 = _stage1(data, plan) + plan.mechanism.sample(s1, (rows.size, m1.size), rng=rng)
            st1 = estimate_stage1(y1, plan, n=N)
            bc = (st1.mu_prime_broadcast, st1.weighted_mu_prime)
            s2 = plan.noise_std_vector(2, bc)
            y2 = _stage2(data, plan, *bc)
            y2 = y2 + plan.mechanism.sample(s2, y2.shape, rng=rng)
            m2, m2p = _stage2(x, plan, *bc), _stage2(x_prime, plan, *bc)
            llr[rows] += _llr(y1, m1, m1p, s1) + _llr(y2, m2, m2p, s2)
        out.append(llr)
    return Audit(out[0], out[1])


def _config(**settings: object) -> ProtocolConfig:
    # floor_quantile 0.5 lets the floor move on 12 clients, so every branch is exercised
    base: dict[str, object] = {"adaptive_floor": True, "floor_quantile": 0.5}
    return ProtocolConfig(EPSILON, DELTA, **{**base, **settings})  # type: ignore[arg-type]


def test_neighbours_move_the_histogram_and_the_floor() -> None:
    config = _config()
    plan0 = plan_protocol(config, n=N, d=D)
    x, x_prime = _neighbours()
    diff = histogram_of(x_prime, plan0.floor_edges) - histogram_of(x, plan0.floor_edges)
    assert np.sum(diff**2) == pytest.approx(2.0)  # the sensitivity sqrt(2) is attained
    rng = np.random.default_rng(1)
    y = histogram_of(x, plan0.floor_edges) + rng.normal(0, plan0.floor_noise_std, (2000, 17))
    chosen = choose_floor(
        y, n=N, edges=plan0.floor_edges, sigma=plan0.floor_noise_std, quantile=0.5
    )
    assert np.unique(chosen.index).size >= 3  # the audit covers several floors


@pytest.mark.statistical
@pytest.mark.parametrize("composition", ["gdp", "basic"])
def test_audit_floor_lower_bound_stays_below_the_claim(composition: str) -> None:
    config = _config(composition=composition)
    plan = plan_protocol(config, n=N, d=D, floor=0.05)
    claimed = privacy_spent(plan.budget).epsilon  # counts the histogram release
    lower = epsilon_lower_bound(_run(config, seed=2027))
    assert lower <= claimed, (composition, lower, claimed)
    assert lower > 0.5, (composition, lower)  # the attack sees most of the budget


@pytest.mark.statistical
def test_audit_floor_catches_an_underpriced_histogram() -> None:
    # A broken lever d whose histogram carried 20x less noise than its budget share pays for
    # (its mu alone would be ~4) is caught: the audit sees more than the claimed epsilon.
    config = _config()
    lower = epsilon_lower_bound(_run(config, seed=5, knobs=Knobs(hist_cut=20.0)))
    assert lower > EPSILON, lower


def test_claim_counts_the_histogram() -> None:
    config = _config()
    plan = plan_protocol(config, n=N, d=D, floor=0.05)
    assert privacy_spent(plan.budget).epsilon == pytest.approx(EPSILON, rel=1e-9)
    without = replace(plan, budget=replace(plan.budget, releases=plan.budget.releases[1:]))
    assert privacy_spent(without.budget).epsilon < EPSILON  # the floor release is counted
