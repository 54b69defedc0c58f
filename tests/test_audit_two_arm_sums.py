"""Empirical privacy audit of the two-arm secure sums (docs/privacy.md, "Two-arm effects under
the secure sums").

The harness of ``tests/test_audit_levers.py`` (the exact log-likelihood ratio of the release as
the test statistic, a threshold picked on the first half of the draws and evaluated on the
second, one-sided Clopper-Pearson bounds at ``alpha/2`` each with ``alpha = 0.01``), as
``tests/test_audit_record.py`` audits the one-arm rounds: each round of the secure sums at a
fixed public broadcast, on the silos' *reduced* summaries
(:func:`~fa_hetdp.protocol.two_arm_sums.reduced_summaries`, counts ``4 m' - 3``) with the
plan the two-arm run uses (``two_arm``: the bound of ``U`` 5/2). Three silos with arm sizes
``(12, 5), (30, 25), (40, 60)`` (treated, control), ``d = 2``; the neighbours replace one
record of silo 0 *within its arm* (its smaller arm has 5 records: the largest bounds), the worst
of a seeded search over arms (uniform, 0/1, near-constant) and replacements (0, 1), measured by
the shift of the round's exact sum in units of its noise. The claim is the round's own epsilon
(its releases' mu composed); the negative control divides the noise by 4 and must be caught.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from test_audit_levers import DRAWS, Audit, _llr, epsilon_lower_bound

from fa_hetdp._types import FloatArray
from fa_hetdp.dp.calibration import achieved_epsilon
from fa_hetdp.protocol.meta_client import (
    BroadcastB,
    BroadcastC,
    ClientSummary,
    round_a_values,
    round_b_values,
    round_c_values,
)
from fa_hetdp.protocol.meta_plan import ROUNDS, MetaSettings
from fa_hetdp.protocol.meta_server import round_sigmas
from fa_hetdp.protocol.two_arm import arm_summaries
from fa_hetdp.protocol.two_arm_sums import reduced_counts, reduced_summaries, two_arm_sums_plan

EPSILON, DELTA = 8.0, 1e-5  # as the one-arm round audits: each round gets a part
COUNTS = ((12, 5), (30, 25), (40, 60))
D = 2
POWER = {"A": 0.2, "B": 1.0, "C": 0.5}
"""What the attack's lower bound reaches at the true noise (measured: A 0.43, B 3.57, C 1.06;
round C's was 0.0 while the public F's share stayed in its budget: its attack then saw 0.46 of
the round's mu)."""
TARGET = {"A": 0, "B": 0, "C": 2}
"""The silo whose record is replaced: the one whose bound sets the round's noise (rounds A and
B: the smallest arm, the largest record bounds; round C at the floor: the largest count, whose
weight range (the client bound) is the largest)."""


def _plan() -> Any:
    counts = reduced_counts([min(c) for c in COUNTS])  # the plan the two-arm run makes
    return two_arm_sums_plan(EPSILON, DELTA, counts, D, MetaSettings(privacy_unit="record"))


def _broadcast(rnd: str) -> BroadcastB | BroadcastC | None:
    centre, floor = np.full(D, 0.5), np.full(D, 0.002)
    if rnd == "B":
        return BroadcastB(centre=centre, floor=floor, kappa=np.full(D, 3.0), spread=floor)
    if rnd == "C":
        return BroadcastC(
            centre=centre, floor=floor, tau2=np.zeros(D), kappa_star=np.full(D, 3.0), spread=floor
        )
    return None


def _summaries(arms: dict[int, tuple[FloatArray, FloatArray]]) -> list[Any]:
    blocks = [a for i in range(len(COUNTS)) for a in arms[i]]
    sizes = [len(b) for b in blocks]
    x = np.vstack(blocks)
    ids = np.repeat(np.arange(2 * len(COUNTS)) // 2, sizes)
    arm = np.repeat(np.tile([1, 0], len(COUNTS)), sizes)
    return reduced_summaries(arm_summaries(x, ids, arm, minimum=2), "MD")


def _round_sum(plan: Any, rnd: str, broadcast: Any, silos: list[ClientSummary]) -> FloatArray:
    values = {
        "A": lambda s: round_a_values(plan, s),
        "B": lambda s: round_b_values(plan, s, broadcast),
        "C": lambda s: round_c_values(plan, s, broadcast),
    }[rnd]
    out: FloatArray = np.sum([values(s) for s in silos], axis=0)
    return out


def _arm(rng: np.random.Generator, m: int, kind: int, centre: FloatArray) -> FloatArray:
    if kind == 0:
        return rng.random((m, D))
    if kind == 1:
        return rng.integers(0, 2, (m, D)).astype(np.float64)
    # near the centre with a spread that puts the reduced variance near the floor, where the
    # weights (rounds B, C) move most
    spread = rng.uniform(0.01, 0.2)
    return np.clip(centre + spread * rng.standard_normal((m, D)), 0.0, 1.0)


def _neighbours(
    plan: Any, rnd: str, broadcast: Any, std: FloatArray, seed: int, target: int
) -> tuple:
    rng = np.random.default_rng(seed)
    rest = {i: (rng.random((a, D)), rng.random((c, D))) for i, (a, c) in enumerate(COUNTS)}
    live = std > 0
    best: tuple[float, Any, Any] = (-1.0, None, None)
    for trial in range(1200):
        centre = rng.uniform(0.2, 0.8, D)
        gap = rng.uniform(-0.3, 0.3, D)
        arms = [_arm(rng, m, trial % 3, centre + a * gap) for a, m in enumerate(COUNTS[target])]
        which = int(rng.integers(0, 2))
        moved = [a.copy() for a in arms]
        moved[which][0] = rng.integers(0, 2, D).astype(np.float64)
        d0 = _summaries({**rest, target: (arms[0], arms[1])})
        d1 = _summaries({**rest, target: (moved[0], moved[1])})
        assert [s.m for s in d0] == [s.m for s in d1]  # the counts are public: unchanged
        shift = _round_sum(plan, rnd, broadcast, d1) - _round_sum(plan, rnd, broadcast, d0)
        size = float(np.sqrt(np.sum((shift[live] / std[live]) ** 2)))
        if size > best[0]:
            best = (size, d0, d1)
    return best


def _audit(rnd: str, seed: int, factor: float = 1.0) -> tuple[float, float, float]:
    """Return (epsilon_lb, the round's claimed epsilon, the worst shift in noise units)."""
    plan = _plan()
    broadcast = _broadcast(rnd)
    std = plan.noise_std(round_sigmas(plan, rnd, broadcast))
    # the round's mu_k as the run spends them (MetaPlan.released_mu: a release that round A's
    # floor makes public gives its share to the others)
    seen = None if broadcast is None else broadcast.floor
    public = plan.public_releases(seen)
    mus = [plan.released_mu(r, seen) for r in ROUNDS[rnd] if r in plan.releases and r not in public]
    claimed = achieved_epsilon(1.0 / math.sqrt(math.fsum(u * u for u in mus)), DELTA)
    shift, d0, d1 = _neighbours(plan, rnd, broadcast, std, seed, TARGET[rnd])
    mean, mean_prime = (_round_sum(plan, rnd, broadcast, s) for s in (d0, d1))
    noise = std / factor
    rng = np.random.default_rng(seed)
    llr = [
        _llr(m + noise * rng.standard_normal((DRAWS, noise.size)), mean, mean_prime, noise)
        for m in (mean, mean_prime)
    ]
    mu_round = math.sqrt(math.fsum(u * u for u in mus))
    return epsilon_lower_bound(Audit(llr[0], llr[1])), claimed, shift / mu_round


@pytest.mark.statistical
@pytest.mark.parametrize("rnd", ["A", "B", "C"])
def test_audit_two_arm_round_stays_below_its_claim(rnd: str) -> None:
    lower, claimed, shift = _audit(rnd, seed=2043)
    assert lower <= claimed, (rnd, lower, claimed)
    assert shift <= 1.0 + 1e-9, (rnd, shift)  # the search never beats the planned mu
    # the search reaches the bounds' scale (measured: A 0.65, B 0.95, C 0.98 of the round's
    # mu as spent), so the attack has power (the control below is caught in every round), and
    # every round shows a positive bound here
    assert shift > 0.4, (rnd, shift)
    assert lower > POWER[rnd], (rnd, lower)


@pytest.mark.statistical
@pytest.mark.parametrize("rnd", ["A", "B", "C"])
def test_audit_two_arm_catches_noise_four_times_too_small(rnd: str) -> None:
    lower, claimed, _ = _audit(rnd, seed=2044, factor=4.0)
    assert lower > claimed, (rnd, lower, claimed)
