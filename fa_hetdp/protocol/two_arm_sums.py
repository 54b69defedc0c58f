"""Two-arm effects under the secure sums: each silo's MD or RD reduced to one summary.

The secure sums (:mod:`fa_hetdp.protocol.meta_plan`, rounds A, B, C) analyse one summary per
silo -- a mean ``theta`` in ``[0, 1]``, a sum of squared deviations ``SS``, a sum of squares
``U`` and a public count ``m`` -- and their record-level proofs (docs/privacy.md, "Record-level
sensitivity of the meta-analysis") use only these facts about one replaced record: ``theta``
stays in ``[0, 1]`` and moves by at most ``1/m``; ``m theta`` (round A's ``T``), ``U`` and ``SS``
move by at most 1. A silo's difference of two arms' means is pooled by the same inverse-variance
analysis, so it is reduced to a summary that has those facts under a replacement *within an
arm* (:func:`reduced_summaries`), with ``m_T, m_C`` the silo's public arm sizes and
``m' = min(m_T, m_C) >= 2``:

- a count ``m'' = 4 m' - 3`` (public: the arm sizes are);
- ``theta' = 1/2 + y/4`` with ``y = theta_T - theta_C`` in ``[-1, 1]``: ``theta'`` in
  ``[1/4, 3/4]``;
- ``s2' = m'' v/16`` with ``v`` the effect's sampling variance as metafor's ``escalc`` forms it
  (MD: ``s_T^2/m_T + s_C^2/m_C``, sample variances; RD: ``p_T(1 - p_T)/m_T + p_C(1 - p_C)/m_C``),
  so that ``s2'/m'' = v/16``, the variance of ``theta'``: the weights ``m''/s2' = 16/v`` are the
  effect's own and DerSimonian-Laird on ``(theta', s2'/m'')`` is DerSimonian-Laird on
  ``(y, v)`` with ``Q`` and ``I^2`` unchanged, means ``y = 4 theta' - 2`` and
  ``tau2_y = 16 tau2'``;
- ``SS' = (m'' - 1) s2'`` and ``U' = SS' + m'' theta'^2``.

A record replaced within arm ``a`` (size ``m_a >= m'``) moves ``y`` by at most ``1/m_a``, so
``theta'`` by at most ``1/(4 m') < 1/m''`` and ``m'' theta'`` by less than 1. It moves
``(m_a - 1) s_a^2`` by at most 1 (MD) or ``p_a (1 - p_a)`` by at most ``1/m_a`` (RD), so ``v``
by at most ``1/(m' (m' - 1))`` either way, and ``SS' = (m'' - 1) m'' v/16 = (m' - 1)(4 m' -
3) v/4`` by at most ``(4 m' - 3)/(4 m') < 1`` (so ``s2'`` by less than ``1/(m'' - 1)``). ``U'``
moves by less than ``1 + m'' (3/2)/(4 m') < 5/2`` (``theta' + theta'' <= 3/2``): the plan's
record bound of ``U`` is 5/2 (:data:`U_BOUND`, ``MetaPlan.two_arm``); every other fact holds as
it is, so the secure sums on the reduced summaries at the counts ``m''`` are record-level
(within-arm neighbours) DP at their own ``mu``, with every silo's arm sizes public
(docs/privacy.md, "Two-arm effects under the secure sums"). The count ``m''`` (not ``m'``)
matters: at ``m'`` every bound would hold 4 times over, and the noise with it (measured: the
population interval 4-6 times wider on the OPT and STAR trials).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from fa_hetdp.errors import InputDataError, PrivacyParameterError
from fa_hetdp.protocol.meta_client import ClientSummary
from fa_hetdp.protocol.meta_plan import TWO_ARM_U_BOUND, MetaPlan, MetaSettings, plan_meta
from fa_hetdp.protocol.meta_server import PrivateMetaAnalysis
from fa_hetdp.protocol.meta_simulate import run_rounds
from fa_hetdp.protocol.two_arm import ArmSummaries, why_not_in_the_secure_sums

__all__ = [
    "REDUCED_EFFECTS",
    "REDUCTION",
    "TWO_ARM_SUMS_SAW",
    "TWO_ARM_SUMS_UNIT",
    "U_BOUND",
    "auto_reason",
    "both_designs_problem",
    "reduced_counts",
    "reduced_summaries",
    "run_two_arm_sums",
    "silo_summaries_only",
    "two_arm_sums_labels",
    "two_arm_sums_plan",
    "two_arm_sums_problem",
]

REDUCED_EFFECTS: Final[tuple[str, ...]] = ("MD", "RD")
"""The two-arm effects the secure sums build: a difference of the arms' means, one summary per
silo, which one record moves by ``1/m``. SMD, OR and RR are not built
(:data:`~fa_hetdp.protocol.two_arm.NOT_IN_THE_SECURE_SUMS` says why)."""

REDUCTION: Final[tuple[float, float]] = (4.0, -2.0)
"""``(a, b)``: a location figure of the reduced analysis ``x`` is the effect ``a x + b`` (on the
``[0, 1]`` scale of the columns), a variance ``a^2 x``, a standard error ``a x``."""

TWO_ARM_SUMS_SAW: Final = (
    "only the noisy sums over all silos of each round (secure aggregation) and every silo's "
    "public arm sizes; no silo's own effect"
)
"""What the server saw in a two-arm run of the secure sums."""

U_BOUND: Final = TWO_ARM_U_BOUND
"""The record bound of ``U`` on the reduced summaries (module docstring; ``MetaPlan.two_arm``)."""

TWO_ARM_SUMS_UNIT: Final = (
    "one record of one client, replaced by another record of the same arm (within-arm "
    "neighbours; values in [0, 1]^d after the public scaling); n and every client's arm sizes "
    "public (the smallest arm: {m} records), so a record's arm is not protected; k records of "
    "one client together are protected only as a group (k times the GDP mu)"
)
"""What the two-arm secure sums protect (``{m}``: the smallest arm's size)."""


def reduced_summaries(arms: ArmSummaries, effect: str) -> list[ClientSummary]:
    """Return every silo's one-arm summary of its effect (the module docstring's reduction).

    Raises
    ------
    PrivacyParameterError
        ``effect`` is not one of :data:`REDUCED_EFFECTS`.
    InputDataError
        A silo's smaller arm holds fewer than 2 records, or a variance is not finite.
    """
    if effect not in REDUCED_EFFECTS:
        raise PrivacyParameterError(
            f"effect={effect!r} under the secure sums: they build {' and '.join(REDUCED_EFFECTS)} "
            "only (a difference of the arms' means, one summary per silo); use "
            "design='silo-summaries' (or 'auto')."
        )
    m = np.asarray(arms.m, dtype=np.int64)
    small = m.min(axis=1)
    if np.any(small < 2):
        silo = int(np.argmin(small))
        raise InputDataError(
            f"silo {silo} has an arm of {int(small[silo])} record(s); the two-arm secure sums "
            "need at least 2 records in each arm of every silo."
        )
    theta_t, theta_c = arms.theta[:, 0, :], arms.theta[:, 1, :]
    m_t = m[:, 0, None].astype(np.float64)
    m_c = m[:, 1, None].astype(np.float64)
    if effect == "RD":
        v = theta_t * (1.0 - theta_t) / m_t + theta_c * (1.0 - theta_c) / m_c
    else:
        v = arms.s2[:, 0, :] / m_t + arms.s2[:, 1, :] / m_c
    if not np.all(np.isfinite(v)):
        raise InputDataError("a silo's arm variance is not finite (an arm of one record?).")
    a, b = REDUCTION
    theta = (theta_t - theta_c - b) / a  # 1/2 + y/4
    counts = reduced_counts(small)
    m_eff = counts[:, None].astype(np.float64)
    s2 = m_eff * v / (a * a)
    ss = (m_eff - 1.0) * s2
    sq = ss + m_eff * theta * theta
    return [
        ClientSummary(theta=theta[i], ss=ss[i], sq=sq[i], m=int(counts[i])) for i in range(arms.n)
    ]


def reduced_counts(smaller_arm: npt.ArrayLike) -> npt.NDArray[np.int64]:
    """Return every silo's count ``m'' = 4 m' - 3`` from its smaller arm's size ``m'``."""
    return np.asarray(4 * np.asarray(smaller_arm, dtype=np.int64) - 3, dtype=np.int64)


def two_arm_sums_problem(effect: str, privacy_unit: object, min_records: object) -> str | None:
    """Why the secure sums cannot build a two-arm ``effect`` at these settings (None: they can).

    One line without a full stop: the reduction protects one record replaced within its arm with
    every silo's arm sizes public, so it needs ``privacy_unit="record"`` and no
    ``min_records``; and it builds :data:`REDUCED_EFFECTS` only (the other effects' line is
    :func:`fa_hetdp.protocol.two_arm.secure_sums_refusal`).
    """
    if privacy_unit == "record" and min_records is None:
        return None
    return (
        f"effect={effect!r} under the secure sums protects one record replaced within its "
        "arm with every silo's arm sizes public: privacy_unit='record' and no min_records "
        f"(got privacy_unit={privacy_unit!r}, min_records={min_records!r})"
    )


def silo_summaries_only(effect: str, problem: str) -> str:
    """Return the one line refusing a two-arm ``effect`` where the silo summaries cannot run.

    ``problem``: why not (:func:`~fa_hetdp.protocol.silo_summaries.silo_summaries_problem`).
    An MD or RD may still run in the secure sums, named, at the record unit without
    ``min_records``; the other effects run in the silo summaries only.
    """
    if effect in REDUCED_EFFECTS:
        where = (
            "in the silo-summaries design, or in the secure sums if design='secure-sums' is "
            "named (at privacy_unit='record', without min_records)"
        )
    else:
        where = (
            "in the silo-summaries design only (the secure sums do not build it: "
            f"{why_not_in_the_secure_sums(effect)})"
        )
    return f"effect={effect!r} runs {where}, and {problem}"


def auto_reason(effect: str, why: str | None = None) -> str:
    """Return why ``design="auto"`` runs a two-arm ``effect`` in the silo summaries (a label).

    ``why``: why an MD or RD, which both designs build, is not planned in both here (one line
    from :func:`both_designs_problem`); the other effects run on per-arm releases only.
    """
    if effect in REDUCED_EFFECTS:
        return f"'auto' runs effect={effect!r} in the silo summaries: {why}"
    return (
        f"'auto' runs effect={effect!r} in the silo summaries, the one design that builds it "
        f"(in the secure sums {why_not_in_the_secure_sums(effect)})"
    )


def both_designs_problem(
    effect: str, privacy_unit: object, min_records: object, arm_sizes: npt.ArrayLike
) -> str | None:
    """Why ``design="auto"`` cannot weigh both designs for a two-arm ``effect`` (None: it can).

    Both build an MD or RD at the record unit without ``min_records``
    (:func:`two_arm_sums_problem`) where every arm of every silo holds at least 2 records
    (:func:`reduced_summaries`). One line without a full stop.
    """
    if effect not in REDUCED_EFFECTS:
        return f"the secure sums do not build it: {why_not_in_the_secure_sums(effect)}"
    problem = two_arm_sums_problem(effect, privacy_unit, min_records)
    if problem is not None:
        return problem
    m = np.asarray(arm_sizes, dtype=np.int64)
    if m.size and int(m.min()) < 2:
        return (
            f"a silo has an arm of {int(m.min())} record; the secure sums need at least 2 in each "
            "arm of every silo"
        )
    return None


def two_arm_sums_plan(
    epsilon: float,
    delta: float,
    counts: Sequence[int] | npt.NDArray[np.integer[Any]],
    d: int,
    settings: MetaSettings,
) -> MetaPlan:
    """Return the secure sums' plan on reduced summaries at their public ``counts``.

    ``counts``: every silo's :func:`reduced_counts` ``4 m' - 3`` (what its reduced summary
    carries); the plan is ``two_arm`` (the bound of ``U`` 5/2: :data:`U_BOUND`) and the
    settings' design the secure sums'. Raises what :func:`~fa_hetdp.protocol.meta_plan.
    plan_meta` raises.
    """
    plan = plan_meta(epsilon, delta, counts, d, replace(settings, design="secure-sums"))
    return replace(plan, two_arm=True)


def two_arm_sums_labels(
    result: PrivateMetaAnalysis, effect: str, smallest_arm: int
) -> PrivateMetaAnalysis:
    """Return ``result`` (the secure sums on reduced summaries) stated as a two-arm ``effect``.

    Its unit of privacy (:data:`TWO_ARM_SUMS_UNIT`: within-arm neighbours, every silo's arm
    sizes public; ``smallest_arm`` the smallest arm's size), how each silo's effect entered
    (a label) and what the server saw (the arm sizes too).
    """
    note = (
        f"two-arm {effect} under the secure sums: each silo's effect entered as one summary "
        f"(theta' = 1/2 + {effect}/4 on the columns' [0, 1] scale, at the count 4 m' - 3 of "
        "the smaller arm's size m'; the records per client shown are these counts); no per-silo "
        "estimates"
    )
    return replace(
        result,
        unit_of_privacy=TWO_ARM_SUMS_UNIT.format(m=int(smallest_arm)),
        labels=(*result.labels, note),
        server_saw=TWO_ARM_SUMS_SAW,
    )


def run_two_arm_sums(
    epsilon: float,
    delta: float,
    arms: ArmSummaries,
    effect: str,
    settings: MetaSettings,
    rng: np.random.Generator,
) -> PrivateMetaAnalysis:
    """Run the secure sums on the silos' reduced summaries (the reduced scale: :data:`REDUCTION`).

    Raises
    ------
    PrivacyParameterError
        Not the record unit, ``min_records`` set (the arm sizes are public), or what the
        secure sums' planner refuses.
    """
    problem = two_arm_sums_problem(effect, settings.privacy_unit, settings.min_records)
    if problem is not None:
        raise PrivacyParameterError(problem + ".")
    clients = reduced_summaries(arms, effect)
    plan = two_arm_sums_plan(epsilon, delta, [c.m for c in clients], arms.d, settings)
    return two_arm_sums_labels(run_rounds(plan, clients, rng), effect, int(np.min(arms.m)))
