"""Empirical privacy audits of the utility levers (issue 9, item 3a-c; ``docs/privacy.md``).

Each test builds neighbouring datasets (one client replaced by an extreme one), runs the
protocol's releases many times with a fixed seed, and turns the best threshold test on the
exact log-likelihood ratio of the releases (the Neyman-Pearson test, the strongest there is
for Gaussian releases with a known mean) into a lower bound on epsilon: for an
(epsilon, delta)-DP mechanism every test has ``TPR <= e^epsilon FPR + delta``, so
``epsilon >= ln((TPR_lo - delta)/FPR_hi)`` with Clopper-Pearson bounds (Jagielski et al. 2020;
Nasr et al. 2021). The threshold is picked on the first half of the draws and evaluated on the
second half; the two Clopper-Pearson bounds each use alpha/2 with alpha = 0.01, so each
reported lower bound holds with probability >= 99 %.

The releases are drawn exactly as every path of the protocol draws them: the plan's
per-coordinate noise scales (:meth:`ProtocolPlan.noise_std_vector`, the stage-2 one at each
repeat's public broadcast), the server's own stage-1 post-processing
(:func:`estimate_stage1`) for the broadcast, and exact zeros for releases the plan does not
make (:meth:`ProtocolPlan.zero_unmade`). The audit is also shown to have power: a claim
below what the noise gives is caught (:func:`test_audit_catches_an_overclaim`).

Per-coordinate stage-2 noise (``noise_shape = "per_coordinate"``, lever c) is audited on
neighbours whose coordinates sit at different broadcast values, so the stage-2 sigmas differ
between coordinates, with the replaced client at the vertex of the sensitivity box; its
negative control (a third of the per-coordinate noise) is caught.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest
from scipy.stats import beta

from fa_hetdp._types import FloatArray
from fa_hetdp.config.protocol import ProtocolConfig
from fa_hetdp.dp.accounting import privacy_spent
from fa_hetdp.protocol.plan import ProtocolPlan, plan_protocol
from fa_hetdp.protocol.server import estimate_stage1
from fa_hetdp.stats.exact import client_weights

ALPHA = 0.01
DELTA = 1e-5
EPSILON = 4.0  # large enough that the audit has power (mu ~ 0.92), small enough to be real
DRAWS = 120_000  # per dataset; half to pick the threshold, half to measure
N, D = 12, 4


def _neighbours() -> tuple[FloatArray, FloatArray]:
    """``n`` clients around 0.25 and, as the last client, 0.25 (D) or 1.0 (D') everywhere.

    Both extreme clients have within-variance 0, so both carry the largest weight ``W``; the
    stage-1 sums move by ``0.75`` per coordinate and the stage-2 sums by about
    ``max(c, 1 - c)^2`` -- near the broadcast bound that lever (c) calibrates to.
    """
    rng = np.random.default_rng(11)
    base = np.clip(0.25 + 0.1 * rng.standard_normal((N - 1, D)), 0.0, 1.0)
    x = np.vstack([base, np.full((1, D), 0.25)])
    x_prime = np.vstack([base, np.ones((1, D))])
    return x, x_prime


def _stage1(x: FloatArray, plan: ProtocolPlan) -> FloatArray:
    w, _ = client_weights(x, variance_floor=plan.config.variance_floor)
    return plan.zero_unmade(1, np.concatenate([x.sum(0), w @ x, [w.sum()]]))


def _stage2(x: FloatArray, plan: ProtocolPlan, m: FloatArray, mb: FloatArray) -> FloatArray:
    """Noiseless stage-2 sums for each repeat's broadcast ``m``, ``mb`` (shape (R, d))."""
    w, _ = client_weights(x, variance_floor=plan.config.variance_floor)
    disp = ((x[None, :, :] - m[:, None, :]) ** 2).sum(axis=1)
    q = np.einsum("i,rij->rj", w, (x[None, :, :] - mb[:, None, :]) ** 2)
    return plan.zero_unmade(2, np.concatenate([disp, q], axis=1))


@dataclass(frozen=True)
class Audit:
    """Log-likelihood ratios of the releases under D and under D'."""

    llr_d: FloatArray
    llr_d_prime: FloatArray


def _llr(y: FloatArray, mean_d: FloatArray, mean_dp: FloatArray, std: FloatArray) -> FloatArray:
    """``log p_D'(y)/p_D(y)`` of independent Gaussian coordinates (zero-std ones skipped)."""
    live = std > 0
    var = np.where(live, std, 1.0) ** 2
    diff = np.where(live, mean_dp - mean_d, 0.0)
    out: FloatArray = np.sum((y - mean_d) * diff / var - diff**2 / (2 * var), axis=-1)
    return out


def _run(plan: ProtocolPlan, x: FloatArray, x_prime: FloatArray, seed: int) -> Audit:
    """Draw the two-stage release ``DRAWS`` times from each dataset; LLR of each draw."""
    rng = np.random.default_rng(seed)
    m1, m1p = _stage1(x, plan), _stage1(x_prime, plan)
    s1_std = plan.noise_std_vector(1)
    out = []
    for data in (x, x_prime):
        mean1 = _stage1(data, plan)
        y1 = mean1 + plan.mechanism.sample(s1_std, (DRAWS, plan.stage1_length), rng=rng)
        st1 = estimate_stage1(y1, plan, n=N)
        bc = (st1.mu_prime_broadcast, st1.weighted_mu_prime)
        s2_std = plan.noise_std_vector(2, bc)  # the stage-2 scale at each public broadcast
        y2 = _stage2(data, plan, *bc)
        y2 = y2 + plan.mechanism.sample(s2_std, y2.shape, rng=rng)
        m2, m2p = _stage2(x, plan, *bc), _stage2(x_prime, plan, *bc)
        out.append(_llr(y1, m1, m1p, s1_std) + _llr(y2, m2, m2p, s2_std))
    return Audit(out[0], out[1])


def stage2_under_noised(plan: ProtocolPlan, factor: float) -> ProtocolPlan:
    """``plan`` with its stage-2 noise ``factor`` times below calibration (negative controls)."""

    class Under(ProtocolPlan):
        def noise_std_vector(self, stage, broadcast=None):  # type: ignore[no-untyped-def]
            out = super().noise_std_vector(stage, broadcast)
            return out / factor if stage == 2 else out

    return Under(plan.config, plan.n, plan.d, plan.t, plan.budget, plan.labels)


def epsilon_lower_bound(audit: Audit, delta: float = DELTA, alpha: float = ALPHA) -> float:
    """Clopper-Pearson lower bound on epsilon from the best threshold on the LLR.

    Thresholds are scanned on the first half of the draws (point estimate), the best one is
    evaluated on the second half: ``ln((TPR_lo - delta)/FPR_hi)`` with one-sided
    Clopper-Pearson bounds at ``alpha/2`` each. Both directions (D vs D', D' vs D) are tried;
    with two directions the bound holds with probability ``>= 1 - alpha`` per direction.
    """
    half = DRAWS // 2
    best = 0.0
    for a, b in ((audit.llr_d, audit.llr_d_prime), (-audit.llr_d_prime, -audit.llr_d)):
        pick_a, pick_b, test_a, test_b = a[:half], b[:half], a[half:], b[half:]
        taus = np.quantile(pick_a, 1.0 - np.geomspace(1e-4, 0.2, 40))
        fpr = (pick_a[None, :] > taus[:, None]).mean(axis=1)
        tpr = (pick_b[None, :] > taus[:, None]).mean(axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            est = np.log(np.maximum(tpr - delta, 1e-300) / np.maximum(fpr, 1.0 / half))
        tau = taus[int(np.argmax(est))]
        m = test_a.size
        k_fp = int((test_a > tau).sum())
        k_tp = int((test_b > tau).sum())
        fpr_hi = float(beta.ppf(1 - alpha / 2, k_fp + 1, m - k_fp)) if k_fp < m else 1.0
        tpr_lo = float(beta.ppf(alpha / 2, k_tp, m - k_tp + 1)) if k_tp > 0 else 0.0
        if tpr_lo > delta:
            best = max(best, math.log((tpr_lo - delta) / fpr_hi))
    return best


def _plan(**settings: object) -> ProtocolPlan:
    return plan_protocol(ProtocolConfig(EPSILON, DELTA, **settings), n=N, d=D)  # type: ignore[arg-type]


EQUAL = {"mean": 1.0, "weighted": 1.0, "dispersion": 1.0, "q": 1.0}

LEVERS = {
    # (a) gdp composition alone: all releases, equal split, worst-case stage-2 bounds.
    "a_gdp": {"composition": "gdp", "broadcast_bounds": False, "split": EQUAL},
    # (b) release selection + optimal split: only I2 (weighted, q made; mean, dispersion not).
    "b_selection": {"statistics": ("i2",), "broadcast_bounds": False},
    # (c) stage-2 bounds from the broadcast, under basic composition (alone).
    "c_broadcast_bounds": {"composition": "basic", "broadcast_bounds": True},
    # all three (the defaults).
    "all": {},
}


@pytest.mark.statistical
@pytest.mark.parametrize("lever", sorted(LEVERS))
def test_audit_lower_bound_stays_below_the_claim(lever: str) -> None:
    plan = _plan(**LEVERS[lever])
    claimed = privacy_spent(plan.budget).epsilon  # the total a result states (exact)
    x, x_prime = _neighbours()
    lower = epsilon_lower_bound(_run(plan, x, x_prime, seed=2026))
    assert lower <= claimed, (lever, lower, claimed)
    assert lower > 0.5, (lever, lower)  # the attack is strong: it sees most of the budget


@pytest.mark.statistical
def test_audit_catches_an_overclaim() -> None:
    # The same audit on the default plan: noise calibrated for epsilon = 4 cannot be claimed
    # as epsilon = 1 -- the lower bound exceeds 1 (the harness has power).
    plan = _plan()
    x, x_prime = _neighbours()
    assert epsilon_lower_bound(_run(plan, x, x_prime, seed=7)) > 1.0


@pytest.mark.statistical
def test_audit_catches_stage2_noise_below_its_bound() -> None:
    # A broken lever (c) whose stage-2 noise were 4x below the broadcast bound's calibration
    # (say, a bound of max(c, 1 - c)^2 / 4) is caught: the audit sees more than the claim.
    plan = _plan(statistics=("dispersion",), broadcast_bounds=True)
    broken = stage2_under_noised(plan, 4.0)
    x, x_prime = _neighbours()
    assert epsilon_lower_bound(_run(broken, x, x_prime, seed=3)) > plan.budget.epsilon


# ---------------------------------------------------------------- (c) per-coordinate noise


def _uneven_neighbours() -> tuple[FloatArray, FloatArray]:
    """Clients whose coordinates sit at different broadcast values (near 0.05 and near 0.5).

    With ``noise_shape = "per_coordinate"`` the stage-2 sigmas then differ between
    coordinates (``b_j`` near 0.9 and near 0.25). The last client is ``c`` (summand 0) in D and
    the far corner of every coordinate in D' (summand ``b_j``): the box's vertex, where the
    per-coordinate privacy loss ``sum_j b_j^2 / sigma_j^2`` is attained.
    """
    rng = np.random.default_rng(12)
    centre = np.array([0.05, 0.05, 0.5, 0.5])
    base = np.clip(centre + 0.03 * rng.standard_normal((N - 1, D)), 0.0, 1.0)
    x = np.vstack([base, centre[None, :]])
    x_prime = np.vstack([base, np.where(centre < 0.5, 1.0, 0.0)[None, :]])
    return x, x_prime


PER_COORDINATE = {
    # D'' alone (releases mean and dispersion)
    "dispersion": {"statistics": ("dispersion",), "noise_shape": "per_coordinate"},
    # Q'' alone and every release; v_min = 1/4 makes every weight W = 4, so the weighted
    # sums move by W times the data and the q summands reach W b_j (the box's vertex)
    "q": {"statistics": ("q",), "noise_shape": "per_coordinate", "variance_floor": 0.25},
    "all": {"noise_shape": "per_coordinate", "variance_floor": 0.25},
}


@pytest.mark.statistical
@pytest.mark.parametrize("lever", sorted(PER_COORDINATE))
def test_audit_per_coordinate_noise_stays_below_the_claim(lever: str) -> None:
    plan = _plan(**PER_COORDINATE[lever])
    claimed = privacy_spent(plan.budget).epsilon
    x, x_prime = _uneven_neighbours()
    audit = _run(plan, x, x_prime, seed=2027)
    m1 = _stage1(x, plan)  # the broadcast these neighbours give: per-coordinate sigmas differ
    st1 = estimate_stage1(m1[None, :], plan, n=N)
    s2 = plan.noise_std_vector(2, (st1.mu_prime_broadcast, st1.weighted_mu_prime))
    for block in (s2[0, :D], s2[0, D:]):  # "dispersion", "q" (zero when not made)
        assert np.max(block) == 0.0 or np.ptp(block) > 0.1 * np.max(block)
    assert np.max(s2) > 0.0
    lower = epsilon_lower_bound(audit)
    assert lower <= claimed, (lever, lower, claimed)
    assert lower > 0.5, (lever, lower)


@pytest.mark.statistical
def test_audit_catches_per_coordinate_noise_below_its_calibration() -> None:
    # Negative control: per-coordinate stage-2 noise at a third of sigma_wc sqrt(b_j sum b/d)
    # (as if the sum over coordinates were dropped) is caught by the same audit.
    plan = _plan(statistics=("dispersion",), noise_shape="per_coordinate")
    under = stage2_under_noised(plan, 3.0)
    x, x_prime = _uneven_neighbours()
    assert epsilon_lower_bound(_run(under, x, x_prime, seed=4)) > plan.budget.epsilon
