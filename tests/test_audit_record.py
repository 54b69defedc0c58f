"""Empirical privacy audit of the record unit (``privacy_unit = "record"``, issue 19 item 1).

The harness of ``tests/test_audit_levers.py`` (exact log-likelihood ratio of the releases,
threshold picked on one half of the draws, Clopper-Pearson at alpha = 0.01 on the other half,
``epsilon_lb = ln((TPR_lo - delta)/FPR_hi)``) on record-level neighbours: twelve clients, each
the mean of ``m = 4`` records in ``[0, 1]^4``; in ``D`` the last client's records average
``1 - 1/m`` on every coordinate (within-vector variance 0, weight ``W``), in ``D'`` one of its
records is replaced so that its mean alternates ``1`` and ``1 - 2/m`` (every coordinate moves by
``1/m``, the mean's bound; the spread grows from 0 to ``1/m``, so its weight falls to ``m^2`` --
close to :func:`~fa_hetdp.protocol.record_bounds.weight_change_bound`; the coordinates that
reach 1 attain the dispersion bound at ``c < 1/2``). The releases are drawn with the record
plan's own noise (stage 2 at each repeat's broadcast), so the audit checks the record-level
sensitivities and the stage-2 scaling of ``docs/privacy.md``, "Unit of privacy". Negative
control: the same plan with every sigma divided by 4 (as if each record-level sensitivity were
4 times smaller) is caught.

The meta-analysis (``fa_hetdp/protocol/meta_*.py``) is audited round by round (A: ``T, U, W``;
B: ``A, B, C, D``; C: ``E, F``) at a fixed public broadcast, with its own client functions and
its plan's noise, against the epsilon of the round's own ``mu``; each round's negative control
(sigmas / 4) is caught.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from test_audit_levers import N, _run, epsilon_lower_bound

from fa_hetdp._types import FloatArray
from fa_hetdp.config.protocol import ProtocolConfig
from fa_hetdp.dp.accounting import privacy_spent
from fa_hetdp.protocol.plan import ProtocolPlan, plan_protocol

EPSILON, DELTA = 4.0, 1e-5  # as the lever audits: large enough for the audit to have power
M, D = 4, 4  # records per client (min_records) and coordinates


def record_neighbours() -> tuple[FloatArray, FloatArray]:
    """The client vectors of ``D`` and ``D'`` (one record of the last client replaced).

    The last client's ``m`` records: ``r = (0, 1, 0, 1)`` and ``m - 1`` records
    ``(1, 2/3, 1, 2/3)`` (``m = 4``), mean ``3/4`` everywhere. ``D'`` replaces ``r`` by
    ``(1, 0, 1, 0)``: the mean becomes ``(1, 1/2, 1, 1/2)``, ``1/m`` away on every coordinate.
    """
    rng = np.random.default_rng(11)
    base = np.clip(0.25 + 0.1 * rng.standard_normal((N - 1, D)), 0.0, 1.0)
    even = np.arange(D) % 2 == 0
    records = np.vstack([np.where(even, 0.0, 1.0), np.tile(np.where(even, 1.0, 2 / 3), (M - 1, 1))])
    replaced = records.copy()
    replaced[0] = np.where(even, 1.0, 0.0)
    assert np.all((records >= 0) & (records <= 1))
    x = np.vstack([base, records.mean(axis=0)])
    x_prime = np.vstack([base, replaced.mean(axis=0)])
    return x, x_prime


def _plan(**settings: object) -> ProtocolPlan:
    config = ProtocolConfig(
        EPSILON,
        DELTA,
        adaptive_floor=False,
        extra={"privacy_unit": "record", "min_records": M},
        **settings,  # type: ignore[arg-type]
    )
    return plan_protocol(config, n=N, d=D)


def under_noised(plan: ProtocolPlan, factor: float) -> ProtocolPlan:
    """``plan`` with every sigma ``factor`` times below calibration (the negative control)."""

    class Under(ProtocolPlan):
        def noise_std_vector(self, stage, broadcast=None):  # type: ignore[no-untyped-def]
            return super().noise_std_vector(stage, broadcast) / factor

    return Under(plan.config, plan.n, plan.d, plan.t, plan.budget, plan.labels)


def test_the_neighbours_differ_in_one_record_by_the_bound() -> None:
    x, x_prime = record_neighbours()
    np.testing.assert_allclose(np.abs(x_prime - x)[-1], 1.0 / M)  # the mean's bound, attained
    np.testing.assert_array_equal(x_prime[:-1], x[:-1])  # no other client moves


@pytest.mark.statistical
@pytest.mark.parametrize("shape", ["uniform", "per_coordinate"])
def test_audit_record_unit_stays_below_the_claim(shape: str) -> None:
    plan = _plan(noise_shape=shape)
    claimed = privacy_spent(plan.budget).epsilon
    lower = epsilon_lower_bound(_run(plan, *record_neighbours(), seed=2027))
    assert lower <= claimed, (lower, claimed)
    assert lower > 0.5, lower  # the attack sees a good part of the budget


@pytest.mark.statistical
def test_audit_catches_record_sensitivities_four_times_too_small() -> None:
    plan = _plan()
    broken = under_noised(plan, 4.0)
    lower = epsilon_lower_bound(_run(broken, *record_neighbours(), seed=2028))
    assert lower > privacy_spent(plan.budget).epsilon, lower


# --------------------------------------------------------------------------------------------
# The meta-analysis' releases, one audit per round (docs/privacy.md, "Record-level sensitivity
# of the meta-analysis")
# --------------------------------------------------------------------------------------------
#
# Each round is audited at a fixed public broadcast (centre, floor, clip, tau2): the round's
# releases are mu_k-GDP for every broadcast, so the round alone must not show more than the
# epsilon of sqrt(sum over its releases of mu_k^2). The neighbours replace one record of the
# last of six clients; the replaced record is the worst of a seeded search over candidates
# (uniform, 0/1 and near-floor clients; 0/1 replacements), measured by the shift of the round's
# exact sum in units of its noise.

META_N, META_D = 6, 3
META_EPSILON = 8.0  # the whole analysis; each round gets a part (about 2.5-6.4 at this delta)


def _meta_plan(m: int, public: bool = True) -> Any:
    """The plan for META_N silos of ``m`` records; ``public=False``: the counts private
    (``min_records=m``), so that every silo weighs by its own variance (``variance_used``)."""
    from fa_hetdp.protocol.meta_plan import MetaSettings, plan_meta

    settings = MetaSettings(privacy_unit="record", min_records=None if public else m)
    return plan_meta(META_EPSILON, DELTA, [m] * META_N, META_D, settings)


def _meta_broadcast(rnd: str, floor: float, tau2: float, centre: float) -> Any:
    from fa_hetdp.protocol.meta_client import BroadcastB, BroadcastC

    half, d = np.full(META_D, centre), META_D
    spread = np.full(d, floor)  # the pooled weight m/spread at its largest (floor_fraction 1)
    if rnd == "B":
        return BroadcastB(
            centre=half, floor=np.full(d, floor), kappa=np.full(d, 3.0), spread=spread
        )
    if rnd == "C":
        return BroadcastC(
            centre=half,
            floor=np.full(d, floor),
            tau2=np.full(d, tau2),
            kappa_star=np.full(d, 3.0),
            spread=spread,
        )
    return None


def _meta_sum(plan: Any, rnd: str, broadcast: Any, clients: list[FloatArray]) -> FloatArray:
    """The exact round sum of the clients' records (H14's client functions)."""
    from fa_hetdp.protocol.meta_client import (
        round_a_values,
        round_b_values,
        round_c_values,
        summarise,
    )

    values = {
        "A": lambda s: round_a_values(plan, s),
        "B": lambda s: round_b_values(plan, s, broadcast),
        "C": lambda s: round_c_values(plan, s, broadcast),
    }[rnd]
    out: FloatArray = np.sum([values(summarise(r)) for r in clients], axis=0)
    return out


def _meta_neighbours(
    plan: Any, rnd: str, broadcast: Any, m: int, floor: float, std: FloatArray, seed: int
) -> tuple[list[FloatArray], list[FloatArray]]:
    rng = np.random.default_rng(seed)
    others = [rng.random((m, META_D)) for _ in range(META_N - 1)]
    best: tuple[float, FloatArray, FloatArray] = (-1.0, others[0], others[0])
    live = std > 0
    for trial in range(300):
        kind = trial % 3
        if trial == 0:  # at the floor near 0, one record moved to the far corner
            low = np.where(np.arange(m) % 2 == 0, 0.0, 2.0 * math.sqrt(floor))
            records = np.tile(low[:, None], (1, META_D))
        elif kind == 0:
            records = rng.random((m, META_D))
        elif kind == 1:
            records = rng.integers(0, 2, (m, META_D)).astype(np.float64)
        else:  # at the floor: the weights move most
            sign = np.where(rng.random((m, META_D)) < 0.5, -1.0, 1.0)
            spread = np.sqrt(floor) * rng.uniform(0.5, 1.2)
            records = np.clip(rng.random((1, META_D)) + spread * sign, 0.0, 1.0)
        replaced = records.copy()
        replaced[0] = 1.0 if trial == 0 else rng.integers(0, 2, META_D)
        shift = _meta_sum(plan, rnd, broadcast, [replaced]) - _meta_sum(
            plan, rnd, broadcast, [records]
        )
        size = float(np.sqrt(np.sum((shift[live] / std[live]) ** 2)))
        if size > best[0]:
            best = (size, records, replaced)
    return [*others, best[1]], [*others, best[2]]


def _meta_audit(  # type: ignore[no-untyped-def]
    rnd: str,
    m: int,
    floor: float,
    tau2: float,
    centre: float,
    public: bool,
    seed: int,
    factor: float = 1.0,
):
    """Return (epsilon_lb, the round's claimed epsilon) for round ``rnd``."""
    from test_audit_levers import DRAWS, Audit, _llr

    from fa_hetdp.dp.calibration import achieved_epsilon
    from fa_hetdp.protocol.meta_plan import ROUNDS
    from fa_hetdp.protocol.meta_server import round_sigmas

    plan = _meta_plan(m, public)
    broadcast = _meta_broadcast(rnd, floor, tau2, centre)
    std = plan.noise_std(round_sigmas(plan, rnd, broadcast)) / factor
    # the round's mu_k as the run spends them (where round A's floor makes releases public,
    # their share is the others': MetaPlan.released_mu)
    seen = None if broadcast is None else broadcast.floor
    public = plan.public_releases(seen)
    mus = [plan.released_mu(r, seen) for r in ROUNDS[rnd] if r in plan.releases and r not in public]
    claimed = achieved_epsilon(1.0 / math.sqrt(math.fsum(u * u for u in mus)), DELTA)
    data, data_prime = _meta_neighbours(plan, rnd, broadcast, m, floor, std * factor, seed)
    mean, mean_prime = (_meta_sum(plan, rnd, broadcast, x) for x in (data, data_prime))
    rng = np.random.default_rng(seed)
    llr = [
        _llr(mu + std * rng.standard_normal((DRAWS, std.size)), mean, mean_prime, std)
        for mu in (mean, mean_prime)
    ]
    return epsilon_lower_bound(Audit(llr[0], llr[1])), claimed


META_CASES = {
    # round: (records per client, public floor, tau2, centre, public counts) where the bounds
    # are nearest. Under public counts a silo of 4 or 5 records at the floor 0.01 weighs by the
    # pooled variance (own_variance: 1/(m - 1) > f/16; its weight public), one of 5000 by its
    # own; with the counts private (min_records) every silo weighs by its own.
    "A": (4, 0.01, 0.0, 0.5, True),
    "B": (4, 0.01, 0.0, 0.5, False),
    "B_pooled": (4, 0.01, 0.0, 0.5, True),
    "C": (5000, 0.01, 0.0, 0.1, True),
    "C_pooled": (5, 0.01, 0.0, 0.5, True),
    "C_tau2": (5000, 0.01, 1e-3, 0.1, True),  # the weights capped by a public tau2
}


@pytest.mark.statistical
@pytest.mark.parametrize("rnd", sorted(META_CASES))
def test_audit_meta_round_stays_below_its_claim(rnd: str) -> None:
    lower, claimed = _meta_audit(rnd[0], *META_CASES[rnd], seed=2029)
    assert lower <= claimed, (rnd, lower, claimed)
    # the attack sees a part of the round's budget (round A: 0.25 of its 2.11 since it holds U
    # for the per-silo clips, 0.45 of 1.72 before; its sigma/4 control reaches 4.81)
    assert lower > 0.2, (rnd, lower)


@pytest.mark.statistical
@pytest.mark.parametrize("rnd", sorted(META_CASES))
def test_audit_meta_catches_sensitivities_four_times_too_small(rnd: str) -> None:
    lower, claimed = _meta_audit(rnd[0], *META_CASES[rnd], seed=2030, factor=4.0)
    assert lower > claimed, (rnd, lower, claimed)
