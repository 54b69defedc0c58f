"""Empirical privacy audit of the silo-summaries design (docs/privacy.md, its section).

The harness of ``tests/test_audit_levers.py`` (the exact log-likelihood ratio of the release as
the test statistic, a threshold picked on the first half of the draws and evaluated on the
second, one-sided Clopper-Pearson bounds at ``alpha/2`` each with ``alpha = 0.01``,
``epsilon_lb = ln((TPR_lo - delta)/FPR_hi)``) against ONE silo's release: the smallest silo
(``m = 20``) of a federation of four (``m = 50, 20, 400, 100``; the target is not silo 0, so a
silo-index mix-up in the calibration shows too), ``d = 4``, record unit, public counts.

Neighbours: in ``D`` the target silo's ``m`` records are all 0; in ``D'`` one of them is 1 in
every coordinate. Every coordinate's mean moves by ``1/m`` (the bound) and its sum of squared
deviations by ``1 - 1/m`` (``SS`` moves by ``1 - 2 theta - 1/m`` when a 0 becomes a 1, largest
at ``theta = 0``), so its sample variance by ``1/m = (m - 1)/m`` of the bound ``1/(m - 1)``:
the shift in noise units is ``mu sqrt(0.6 + 0.4 (19/20)^2) = 0.98 mu`` at the default split, and
no replacement of a seeded search beats it (:func:`test_the_neighbours_are_the_worst_of_a_search`).
One-hot records (``sqrt(2)`` bounds) are audited with all records of label 0 and one moved to
label 1 (two coordinates move by the same amounts).

Each audit draws ``DRAWS`` releases per data set from the production
:func:`~fa_hetdp.protocol.silo_summaries.release_silo` (seeded generator) and claims the
plan's own spent epsilon (parallel composition: the budget's epsilon, not ``n`` times it).
Negative control: the same attack on a plan whose ``sigmas`` are divided by 4 (a subclass of
:class:`~fa_hetdp.protocol.silo_summaries.SiloPlan` overriding the property
:func:`release_silo` reads; equivalently each ``mu_k`` 4 times larger, ``mu^2`` 16 times)
must be caught. The other silos' releases are checked bit-identical under the neighbour (same
seed, production :func:`~fa_hetdp.protocol.meta_simulate.run_silo_summaries`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np
import pytest
from test_audit_levers import DRAWS, Audit, _llr, epsilon_lower_bound

from fa_hetdp._types import FloatArray
from fa_hetdp.protocol.meta_client import ClientSummary
from fa_hetdp.protocol.meta_plan import MetaSettings
from fa_hetdp.protocol.meta_simulate import clients_of, run_silo_summaries
from fa_hetdp.protocol.silo_summaries import SiloPlan, plan_silo_summaries, release_silo

EPSILON, DELTA = 4.0, 1e-5  # as the other audits: large enough for the attack to have power
COUNTS = (50, 20, 400, 100)  # public record counts; the smallest silo is the target
TARGET = 1
D = 4


def _plan(one_hot: bool = False) -> SiloPlan:
    settings = MetaSettings(design="silo-summaries", one_hot=one_hot, privacy_unit="record")
    return plan_silo_summaries(EPSILON, DELTA, COUNTS, D, settings)


@dataclass(frozen=True)
class UnderNoised(SiloPlan):
    """A silo plan whose noise is ``factor`` times below calibration (the negative control)."""

    factor: float = 4.0

    @property
    def sigmas(self) -> tuple[FloatArray, FloatArray]:
        st, ss = super().sigmas
        return st / self.factor, ss / self.factor


def under_noised(plan: SiloPlan, factor: float) -> UnderNoised:
    return UnderNoised(**{f.name: getattr(plan, f.name) for f in fields(plan)}, factor=factor)


def federation(one_hot: bool = False) -> tuple[list[FloatArray], list[FloatArray]]:
    """Every silo's records in ``D`` and ``D'`` (one record of the target silo replaced)."""
    rng = np.random.default_rng(11)
    silos: list[FloatArray] = []
    for m in COUNTS:
        if one_hot:
            silos.append(np.eye(D)[rng.integers(0, D, m)])
        else:
            silos.append(rng.random((m, D)))
    m = COUNTS[TARGET]
    if one_hot:
        target = np.tile(np.eye(D)[0], (m, 1))  # every record label 0
        replaced = target.copy()
        replaced[0] = np.eye(D)[1]  # one moved to label 1: two coordinates move
    else:
        target = np.zeros((m, D))
        replaced = target.copy()
        replaced[0] = 1.0
    silos[TARGET] = target
    neighbour = [s.copy() for s in silos]
    neighbour[TARGET] = replaced
    return silos, neighbour


def summaries(silos: list[FloatArray], one_hot: bool = False) -> list[ClientSummary]:
    ids = np.repeat(np.arange(len(silos)), [s.shape[0] for s in silos])
    return clients_of(np.vstack(silos), ids, one_hot=one_hot)


def _shift_in_noise_units(plan: SiloPlan, a: ClientSummary, b: ClientSummary) -> float:
    st, ss = plan.sigmas
    dt = (b.theta - a.theta) / st[TARGET]
    ds = (b.s2 - a.s2) / ss[TARGET]
    return float(np.sqrt(np.sum(dt * dt) + np.sum(ds * ds)))


def _mu(plan: SiloPlan) -> float:
    return math.hypot(plan.mu("theta"), plan.mu("s2"))


def _audit(plan: SiloPlan, one_hot: bool, seed: int) -> Audit:
    """``DRAWS`` releases of the target silo per data set; the LLR of each draw."""
    data, data_prime = (summaries(x, one_hot)[TARGET] for x in federation(one_hot))
    st, ss = plan.sigmas
    std = np.concatenate([np.full(D, st[TARGET]), np.full(D, ss[TARGET])])
    mean = np.concatenate([data.theta, data.s2])
    mean_prime = np.concatenate([data_prime.theta, data_prime.s2])
    rng = np.random.default_rng(seed)
    llr = []
    for summary in (data, data_prime):
        y = np.empty((DRAWS, 2 * D))
        for k in range(DRAWS):
            r = release_silo(plan, TARGET, summary, rng)
            y[k, :D], y[k, D:] = r.theta, r.s2
        llr.append(_llr(y, mean, mean_prime, std))
    return Audit(llr[0], llr[1])


@pytest.mark.parametrize("one_hot", [False, True])
def test_the_neighbours_differ_in_one_record_by_the_bounds(one_hot: bool) -> None:
    silos, neighbour = federation(one_hot)
    m = COUNTS[TARGET]
    assert m == min(COUNTS)
    assert sum(int(np.any(a != b)) for a, b in zip(silos, neighbour, strict=True)) == 1
    assert int(np.sum(np.any(silos[TARGET] != neighbour[TARGET], axis=1))) == 1  # one record
    a, b = summaries(silos, one_hot)[TARGET], summaries(neighbour, one_hot)[TARGET]
    moved = 2 if one_hot else D
    np.testing.assert_allclose(np.sort(np.abs(b.theta - a.theta))[-moved:], 1.0 / m)  # bound
    np.testing.assert_allclose(np.sort(np.abs(b.s2 - a.s2))[-moved:], 1.0 / m)  # (m-1)/m of it
    assert np.count_nonzero(b.theta - a.theta) == moved
    plan = _plan(one_hot)
    shift = _shift_in_noise_units(plan, a, b)
    share = plan.mu("theta") ** 2 + plan.mu("s2") ** 2 * ((m - 1) / m) ** 2
    assert shift == pytest.approx(math.sqrt(share), rel=1e-9)
    assert 0.97 * _mu(plan) < shift <= _mu(plan)


def test_the_neighbours_are_the_worst_of_a_search() -> None:
    # no replacement of one record of the target silo moves its release further (in noise
    # units) than the audit's pair: uniform, 0/1 and nearly-constant silos, 0/1 and uniform
    # replacements, 3000 candidates
    plan = _plan()
    silos, neighbour = federation()
    best = _shift_in_noise_units(plan, summaries(silos)[TARGET], summaries(neighbour)[TARGET])
    rng = np.random.default_rng(5)
    m = COUNTS[TARGET]
    for trial in range(3000):
        kind = trial % 3
        if kind == 0:
            records = rng.random((m, D))
        elif kind == 1:
            records = rng.integers(0, 2, (m, D)).astype(np.float64)
        else:
            records = np.clip(rng.random((1, D)) + 0.05 * rng.standard_normal((m, D)), 0, 1)
        replaced = records.copy()
        replaced[rng.integers(m)] = rng.integers(0, 2, D) if trial % 2 else rng.random(D)
        a = clients_of(np.vstack([records, records]), np.repeat([0, 1], m))[0]
        b = clients_of(np.vstack([replaced, replaced]), np.repeat([0, 1], m))[0]
        st, ss = plan.sigmas
        size = math.sqrt(
            float(np.sum(((b.theta - a.theta) / st[TARGET]) ** 2))
            + float(np.sum(((b.s2 - a.s2) / ss[TARGET]) ** 2))
        )
        assert size <= best + 1e-12, (trial, size, best)


def test_the_other_silos_releases_are_bit_identical_under_the_neighbour() -> None:
    plan = _plan()
    silos, neighbour = federation()
    out = [
        run_silo_summaries(plan, summaries(x), np.random.default_rng(2031))
        for x in (silos, neighbour)
    ]
    others = [i for i in range(len(COUNTS)) if i != TARGET]
    for key in ("theta", "s2"):
        a, b = out[0].sums[key], out[1].sums[key]
        np.testing.assert_array_equal(a[others], b[others])  # bit-identical
        assert not np.array_equal(a[TARGET], b[TARGET])
    # the target's own noise is the same draw too: its releases differ by the data's shift
    a_sum, b_sum = summaries(silos)[TARGET], summaries(neighbour)[TARGET]
    np.testing.assert_allclose(
        out[1].sums["theta"][TARGET] - out[0].sums["theta"][TARGET],
        b_sum.theta - a_sum.theta,
        atol=1e-12,
    )
    np.testing.assert_allclose(
        out[1].sums["s2"][TARGET] - out[0].sums["s2"][TARGET], b_sum.s2 - a_sum.s2, atol=1e-12
    )


def test_the_claim_is_the_budget_not_n_times_it() -> None:
    plan = _plan()
    assert plan.spent.epsilon == pytest.approx(EPSILON, rel=1e-9)
    assert plan.spent.mu == pytest.approx(_mu(plan), rel=1e-12)


@pytest.mark.slow
@pytest.mark.statistical
@pytest.mark.parametrize("one_hot", [False, True], ids=["box", "one_hot"])
def test_audit_smallest_silo_stays_below_the_claim(one_hot: bool) -> None:
    plan = _plan(one_hot)
    claimed = plan.spent.epsilon
    lower = epsilon_lower_bound(_audit(plan, one_hot, seed=2032))
    assert lower <= claimed, (lower, claimed)
    assert lower > 0.5, lower  # the attack sees a good part of the budget


@pytest.mark.slow
@pytest.mark.statistical
def test_audit_catches_silo_noise_four_times_too_small() -> None:
    plan = _plan()
    broken = under_noised(plan, 4.0)
    st, ss = broken.sigmas
    np.testing.assert_allclose(st * 4.0, plan.sigmas[0])
    np.testing.assert_allclose(ss * 4.0, plan.sigmas[1])
    lower = epsilon_lower_bound(_audit(broken, False, seed=2033))
    assert lower > plan.spent.epsilon, lower
