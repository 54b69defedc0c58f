"""Empirical privacy audit of the two-arm silo-summaries releases (docs/privacy.md, its section).

The harness of ``tests/test_audit_levers.py`` (the exact log-likelihood ratio of the release as
the test statistic, a threshold picked on the first half of the draws and evaluated on the
second, one-sided Clopper-Pearson bounds at ``alpha/2`` each with ``alpha = 0.01``,
``epsilon_lb = ln((TPR_lo - delta)/FPR_hi)``), as ``tests/test_audit_silo.py`` uses it, against
ONE arm's release: the smallest arm (the control arm of silo 1, ``m = 10``) of a federation of
three silos with arm sizes ``(40, 35), (25, 10), (60, 80)`` (treated, control), ``d = 3``, record
unit, within-arm neighbours, arm sizes public.

Neighbours: in ``D`` the target arm's ``m`` records are all 0; in ``D'`` one of them is 1 in
every coordinate (a record replaced *within its arm*: both arms keep their sizes). Every
coordinate's mean moves by ``1/m`` (the bound) and, for MD and SMD, its sample variance by
``1/m`` (``(m - 1)/m`` of the bound ``1/(m - 1)``; the shift is ``0.96 mu`` at ``m = 10``).
Binary measures (OR, RR, RD) release the proportions only, at the whole ``mu``: the shift is
then exactly ``mu`` in noise units.

Each audit draws ``DRAWS`` releases per data set from the production
:func:`~fa_hetdp.protocol.two_arm.release_arm` (seeded) and claims the plan's own spent epsilon
(parallel composition over arms and silos: the budget's epsilon, not ``2n`` times it).
Negative control: a plan whose ``sigmas`` are divided by 4 (a subclass of
:class:`~fa_hetdp.protocol.two_arm.TwoArmPlan` overriding the property ``release_arm`` reads)
must be caught. Every other arm's release -- the same silo's treated arm and the other silos' --
is checked bit-identical under the neighbour (same seed, production
:func:`~fa_hetdp.protocol.two_arm.run_two_arm`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np
import pytest
from test_audit_levers import DRAWS, Audit, _llr, epsilon_lower_bound

from fa_hetdp._types import FloatArray
from fa_hetdp.protocol.meta_plan import MetaSettings
from fa_hetdp.protocol.two_arm import (
    ArmSummaries,
    TwoArmPlan,
    arm_summaries,
    plan_two_arm,
    release_arm,
    run_two_arm,
)

EPSILON, DELTA = 4.0, 1e-5  # as the other audits: large enough for the attack to have power
COUNTS = ((40, 35), (25, 10), (60, 80))  # public arm sizes (treated, control)
TARGET = (1, 1)  # silo 1's control arm: the smallest
D = 3


def _plan(effect: str) -> TwoArmPlan:
    settings = MetaSettings(design="silo-summaries", privacy_unit="record")
    return plan_two_arm(EPSILON, DELTA, COUNTS, D, effect, settings)


@dataclass(frozen=True)
class UnderNoised(TwoArmPlan):
    """A two-arm plan whose noise is ``factor`` times below calibration (the negative control)."""

    factor: float = 4.0

    @property
    def sigmas(self) -> tuple[FloatArray, FloatArray]:
        st, ss = super().sigmas
        return st / self.factor, ss / self.factor


def under_noised(plan: TwoArmPlan, factor: float) -> UnderNoised:
    return UnderNoised(**{f.name: getattr(plan, f.name) for f in fields(plan)}, factor=factor)


def federation(binary: bool) -> tuple[tuple[FloatArray, ...], tuple[FloatArray, ...], FloatArray]:
    """Records, ids and arms of ``D`` and ``D'`` (one record of the target arm replaced)."""
    rng = np.random.default_rng(11)
    blocks, ids, arms = [], [], []
    for i, sizes in enumerate(COUNTS):
        for a, m in enumerate(sizes):
            if (i, a) == TARGET:
                x = np.zeros((m, D))
            elif binary:
                x = (rng.random((m, D)) < 0.3).astype(np.float64)
            else:
                x = rng.random((m, D))
            blocks.append(x)
            ids.append(np.full(m, i))
            arms.append(np.full(m, 1 - a))  # arm index 0 is treated (arms == 1)
    x = np.vstack(blocks)
    first = sum(sum(s) for s in COUNTS[: TARGET[0]]) + sum(COUNTS[TARGET[0]][: TARGET[1]])
    x_prime = x.copy()
    x_prime[first] = 1.0  # one record of the target arm moved to 1 in every coordinate
    return (x, x_prime), (np.concatenate(ids), np.concatenate(arms)), first


def summaries(x: FloatArray, ids: FloatArray, arms: FloatArray) -> ArmSummaries:
    return arm_summaries(x, ids.astype(np.int64), arms, minimum=2)


def _target_summaries(binary: bool) -> tuple[ArmSummaries, ArmSummaries]:
    (x, x_prime), (ids, arms), _ = federation(binary)
    return summaries(x, ids, arms), summaries(x_prime, ids, arms)


def _vectors(plan: TwoArmPlan, s: ArmSummaries) -> FloatArray:
    i, a = TARGET
    if plan.binary:
        return np.asarray(s.theta[i, a])
    return np.concatenate([s.theta[i, a], s.s2[i, a]])


def _std(plan: TwoArmPlan) -> FloatArray:
    i, a = TARGET
    st, ss = plan.sigmas
    if plan.binary:
        return np.full(D, st[i, a])
    return np.concatenate([np.full(D, st[i, a]), np.full(D, ss[i, a])])


def _audit(plan: TwoArmPlan, seed: int) -> Audit:
    """``DRAWS`` releases of the target arm per data set; the LLR of each draw."""
    data, data_prime = _target_summaries(plan.binary)
    i, a = TARGET
    std = _std(plan)
    mean, mean_prime = _vectors(plan, data), _vectors(plan, data_prime)
    rng = np.random.default_rng(seed)
    llr = []
    for s in (data, data_prime):
        width = D if plan.binary else 2 * D
        y = np.empty((DRAWS, width))
        s2 = None if plan.binary else s.s2[i, a]
        for k in range(DRAWS):
            r = release_arm(plan, i, a, s.theta[i, a], s2, int(s.m[i, a]), rng)
            y[k, :D] = r.theta
            if r.s2 is not None:
                y[k, D:] = r.s2
        llr.append(_llr(y, mean, mean_prime, std))
    return Audit(llr[0], llr[1])


def _shift(plan: TwoArmPlan) -> float:
    data, data_prime = _target_summaries(plan.binary)
    diff = (_vectors(plan, data_prime) - _vectors(plan, data)) / _std(plan)
    return float(np.sqrt(np.sum(diff * diff)))


@pytest.mark.parametrize("effect", ["MD", "RD"])
def test_the_neighbours_differ_in_one_record_of_the_smallest_arm(effect: str) -> None:
    plan = _plan(effect)
    (x, x_prime), (ids, arms), row = federation(plan.binary)
    i, a = TARGET
    assert COUNTS[i][a] == min(min(c) for c in COUNTS)
    changed = np.flatnonzero(np.any(x != x_prime, axis=1))
    assert changed.tolist() == [row]  # one record
    assert ids[row] == i and arms[row] == 1 - a  # of the target arm: its arm is kept
    s, s_prime = summaries(x, ids, arms), summaries(x_prime, ids, arms)
    np.testing.assert_array_equal(s.m, s_prime.m)  # every arm size unchanged (public)
    m = COUNTS[i][a]
    moved = np.abs(s_prime.theta - s.theta)
    np.testing.assert_allclose(moved[i, a], 1.0 / m)  # the mean's bound on every coordinate
    untouched = np.ones(moved.shape[:2], dtype=bool)
    untouched[i, a] = False
    assert np.all(moved[untouched] == 0.0)  # the other arm, the other silos: not moved
    np.testing.assert_allclose(np.abs(s_prime.s2 - s.s2)[i, a], 1.0 / m)  # (m-1)/m of 1/(m-1)
    mu = float(plan.spent.mu)
    if plan.binary:
        assert _shift(plan) == pytest.approx(mu, rel=1e-9)  # the whole mu on the proportions
    else:
        share = plan.mu("theta") ** 2 + plan.mu("s2") ** 2 * ((m - 1) / m) ** 2
        assert _shift(plan) == pytest.approx(math.sqrt(share), rel=1e-9)
        assert 0.95 * mu < _shift(plan) <= mu  # 0.96 mu at m = 10


@pytest.mark.parametrize("effect", ["SMD", "OR"])
def test_every_other_arms_release_is_bit_identical_under_the_neighbour(effect: str) -> None:
    plan = _plan(effect)
    (x, x_prime), (ids, arms), _ = federation(plan.binary)
    out = [
        run_two_arm(plan, summaries(data, ids, arms), np.random.default_rng(2031))
        for data in (x, x_prime)
    ]
    i, a = TARGET
    others = np.ones((len(COUNTS), 2), dtype=bool)
    others[i, a] = False
    keys = ("theta",) if plan.binary else ("theta", "s2")
    for key in keys:
        r, r_prime = out[0].releases[key], out[1].releases[key]
        np.testing.assert_array_equal(r[others], r_prime[others])  # bit-identical
        assert not np.array_equal(r[i, a], r_prime[i, a])
    # the target's own noise is the same draw too: its release moves by the data's shift
    s, s_prime = summaries(x, ids, arms), summaries(x_prime, ids, arms)
    np.testing.assert_allclose(
        out[1].releases["theta"][i, a] - out[0].releases["theta"][i, a],
        s_prime.theta[i, a] - s.theta[i, a],
        atol=1e-12,
    )


@pytest.mark.parametrize("effect", ["MD", "SMD", "OR", "RR", "RD"])
def test_the_claim_is_the_budget_not_2n_times_it(effect: str) -> None:
    plan = _plan(effect)
    assert plan.spent.epsilon == pytest.approx(EPSILON, rel=1e-9)
    st, ss = plan.sigmas
    m = np.asarray(COUNTS, dtype=np.float64)
    np.testing.assert_allclose(st, math.sqrt(D) / (m * plan.mu("theta")), rtol=1e-12)
    if plan.binary:
        assert plan.mu("theta") == pytest.approx(plan.spent.mu, rel=1e-12)
        assert not np.any(ss)
    else:
        np.testing.assert_allclose(ss, math.sqrt(D) / ((m - 1) * plan.mu("s2")), rtol=1e-12)
        assert math.hypot(plan.mu("theta"), plan.mu("s2")) == pytest.approx(plan.spent.mu)


@pytest.mark.slow
@pytest.mark.statistical
@pytest.mark.parametrize("effect", ["MD", "RD"], ids=["means_and_variances", "proportions"])
def test_audit_smallest_arm_stays_below_the_claim(effect: str) -> None:
    plan = _plan(effect)
    claimed = plan.spent.epsilon
    lower = epsilon_lower_bound(_audit(plan, seed=2042))
    assert lower <= claimed, (lower, claimed)
    assert lower > 0.5, lower  # the attack sees a good part of the budget


@pytest.mark.slow
@pytest.mark.statistical
def test_audit_catches_arm_noise_four_times_too_small() -> None:
    plan = _plan("MD")
    broken = under_noised(plan, 4.0)
    st, ss = broken.sigmas
    np.testing.assert_allclose(st * 4.0, plan.sigmas[0])
    np.testing.assert_allclose(ss * 4.0, plan.sigmas[1])
    lower = epsilon_lower_bound(_audit(broken, seed=2043))
    assert lower > plan.spent.epsilon, lower
