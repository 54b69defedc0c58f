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
"""

from __future__ import annotations

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
