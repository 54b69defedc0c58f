"""The meta-analysis over Flower in the silo-summaries design: one plain step, every silo's release.

Under the record unit with public counts each silo releases its own noisy means and sample
variances at the whole budget (:mod:`fa_hetdp.protocol.silo_summaries`: silos hold disjoint
records, so their releases compose in parallel). After the key advertisement (each node's first
reply states its count ``m_i``), :class:`SiloSummaries` (an
:class:`~fa_hetdp.server.analysis.Analysis`) sends one ``silo_summaries`` message per node
(:meth:`~fa_hetdp.server.session.AnalysisSession.broadcast`): the session's public counts and
``d``, nothing masked, no secure aggregation. Each node rebuilds the plan from its own
settings and the counts, checks its own count and ``d``, and replies with
:func:`~fa_hetdp.protocol.silo_summaries.release_silo` drawn from its own noise
generator (:mod:`fa_hetdp.clients.silo_summaries`).

A reply that is missing, an error or malformed (:func:`~fa_hetdp.protocol.silo_summaries.
check_silo_release`) drops that silo only. The server analyses the silos that replied with the
plan over *them* (:func:`fa_hetdp.flowerkit.settings.silo_plan` on their counts): a silo's
noise depends only on its own ``m_i``, ``d`` and the budget, never on the other silos, so the
plan over the silos that replied gives each of them exactly the noise it drew, and the analysis
of that subset is the silo-summaries analysis of those silos (the result lists them, and says
how many were dropped). Fewer than 2 usable releases abort the run; what went out was each
silo's own release at the whole budget, so the run spent at most the plan's ``(epsilon,
delta)`` (parallel composition).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from fa_hetdp._types import FloatArray
from fa_hetdp.accuracy.columns import ColumnMetaAnalysis
from fa_hetdp.config.protocol import ProtocolConfig
from fa_hetdp.config.sites import site_labels
from fa_hetdp.flowerkit.settings import silo_plan, two_arm_plan
from fa_hetdp.flowerkit.steps import SILO_SUMMARIES, Event, Key
from fa_hetdp.protocol.meta_server import PrivateMetaAnalysis
from fa_hetdp.protocol.silo_summaries import (
    SiloPlan,
    SiloRelease,
    assemble_silo_result,
    check_silo_release,
)
from fa_hetdp.protocol.two_arm import (
    TwoArmMetaAnalysis,
    TwoArmPlan,
    assemble_two_arm,
    min_arm_size,
)
from fa_hetdp.report.meta import json_floats, meta_section
from fa_hetdp.server.analysis import Analysis
from fa_hetdp.server.meta import (
    EFFECT_SCALES,
    check_count,
    column_ranges,
    effect_section,
    meta_privacy_section,
    session_counts,
    with_column_units,
)
from fa_hetdp.server.results import simulation_caveats
from fa_hetdp.server.session import AnalysisSession

__all__ = [
    "EFFECT_SCALES",
    "MIN_SILOS",
    "SiloSummaries",
    "TwoArmSummaries",
    "check_arm_counts",
    "silo_round",
    "two_arm_round",
    "two_arm_section",
]

MIN_SILOS = 2
"""The fewest usable releases a meta-analysis can be made of."""


class SiloSummaries(Analysis):
    """The meta-analysis' silo summaries: every silo's own noisy release, one plain step.

    ``reason``: why this design runs (stated in the result).
    """

    def __init__(self, reason: str = "") -> None:
        self.reason = reason

    def summations(self, protocol: ProtocolConfig) -> int:
        """Return 0: nothing is masked (no key is shared)."""
        del protocol
        return 0

    def check_reply(self, reply: Mapping[str, Any]) -> str | None:
        """Refuse a reply without a usable record count (:func:`~.meta.check_count`)."""
        return check_count(reply)

    def run(self, session: AnalysisSession) -> dict[str, Any]:
        """Ask every silo for its release; analyse them (:func:`silo_round`)."""
        return silo_round(session, reason=self.reason)


def silo_round(session: AnalysisSession, *, reason: str = "") -> dict[str, Any]:
    """Ask every silo for its own noisy summaries; analyse them; write and return the result.

    ``reason``: why this design runs (stated in the result).
    """
    s = session.settings
    d = session.d
    counts = session_counts(session)
    count_of = dict((cid, m) for cid, m in counts)
    planned = silo_plan(s, [m for _, m in counts], d)  # every silo's noise, before any release
    caveats = simulation_caveats(s)
    session.record(  # on record from here on: nothing released yet
        lambda released: meta_privacy_section(planned, None, released=released, caveats=caveats)
    )

    releases: dict[int, SiloRelease] = {}

    def check(cid: int, reply: Mapping[str, Any]) -> str | None:
        try:
            releases[cid] = check_silo_release(reply.get(Key.SILO_RELEASE), d, count_of[cid])
        except ValueError as exc:
            return str(exc)
        return None

    request = {Key.META_COUNTS: counts, Key.D: d}
    replies = session.broadcast(SILO_SUMMARIES, request, check=check, minimum=MIN_SILOS)
    kept = sorted(replies)
    releases = {cid: releases[cid] for cid in kept}
    session.release(
        f"silo summaries: {len(kept)} of {len(counts)} silos' own noisy means and variances "
        "(each at the whole budget; parallel composition over disjoint records)"
    )
    session.progress(Event.STAGE1, clients=len(kept), round="silo summaries")

    plan = silo_plan(s, [count_of[c] for c in kept], d)  # each silo's own noise (docstring)
    result = assemble_silo_result(plan, [releases[c] for c in kept])
    labels = list(result.labels)
    if reason:
        labels.append(f"design silo-summaries: {reason}")
    if len(kept) < len(counts):
        labels.append(
            f"{len(counts) - len(kept)} of {len(counts)} silos sent no usable release and are "
            f"left out: this is the analysis of the {len(kept)} silos that replied (a silo's "
            "noise depends only on its own count, so the plan over them is the one each drew)"
        )
    result = _with_labels(result, labels)
    released = [*session.released, "the meta-analysis (every figure of the result)"]
    partitions = [session.partitions.get(c, -1) for c in kept]
    document = _document(session, plan, result, released, partitions, reason)
    return session.finish(document, result)


def _with_labels(result: PrivateMetaAnalysis, labels: Sequence[str]) -> PrivateMetaAnalysis:
    return dataclasses.replace(result, labels=tuple(labels))


def _labelled(
    section: dict[str, Any], sites: Sequence[str] | None, partitions: Sequence[int]
) -> dict[str, Any]:
    """Add each silo's ``site`` label (its file's stem) in a simulation of site files."""
    labels = site_labels(sites, partitions)
    if labels is not None and section.get("silos"):
        section["silos"] = [
            {**silo, "site": label} for silo, label in zip(section["silos"], labels, strict=True)
        ]
    return section


def _labelled_two_arm(
    section: dict[str, Any], sites: Sequence[str] | None, partitions: Sequence[int]
) -> dict[str, Any]:
    """Label a two-arm section's silos (its own scale's and its units') by their sites."""
    units = section.get("units")
    if isinstance(units, dict):
        section["units"] = _labelled(units, sites, partitions)
    return _labelled(section, sites, partitions)


def _floats(values: Any) -> list[float]:
    return [float(v) for v in np.asarray(values, dtype=np.float64).ravel()]


def _document_head(
    session: AnalysisSession,
    plan: SiloPlan | TwoArmPlan,
    result: PrivateMetaAnalysis | TwoArmMetaAnalysis,
    released: Sequence[str],
    reason: str,
    why: str,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Return what every silo-summaries result document opens with, and its privacy section."""
    privacy = meta_privacy_section(
        plan, result.spent, released=released, caveats=simulation_caveats(session.settings)
    )
    head = {
        "status": "success",
        "differentially_private": privacy["differentially_private"],
        **session.base_document(),
        "analysis": "meta",
        "design": result.design,
        "design_reason": reason,
        "server_saw": result.server_saw,
        "secagg": {"used": False, "why": why},
    }
    return head, privacy


def _document(
    session: AnalysisSession,
    plan: SiloPlan,
    result: PrivateMetaAnalysis,
    released: Sequence[str],
    partitions: Sequence[int],
    reason: str,
) -> dict[str, Any]:
    s = session.settings
    why = "silo summaries: each silo's own release, unmasked (no secure sum is made)"
    head, privacy = _document_head(session, plan, result, released, reason, why)
    st, ss = plan.sigmas
    return {
        **head,
        "n": plan.n,
        "d": plan.d,
        "records_per_client": [int(m) for m in plan.records_per_client],
        "clients_in_sum": {"silo_summaries": plan.n},
        "partitions_in_sum": {"silo_summaries": list(partitions)},
        "meta_analysis": with_column_units(
            _labelled(
                meta_section(result, silo_names=list(partitions)), s.scenario.data.sites, partitions
            ),
            s,
        ),
        "noise_std": {"theta": _floats(st), "s2": _floats(ss)},  # per silo, every coordinate
        "privacy": privacy,
        "labels": list(result.labels),
    }


# ---------------------------------------------------------------------------- two-arm effects
def check_arm_counts(reply: Mapping[str, Any]) -> str | None:
    """Why an ``advertise_keys`` reply's arm sizes are unusable (None: usable, or none stated).

    A two-arm run's node states ``[treated, control]``: integers >= 1 summing to its count.
    """
    if Key.ARM_COUNTS not in reply:
        return None
    arms, m = reply.get(Key.ARM_COUNTS), reply.get(Key.RECORDS)
    if (
        isinstance(arms, list)
        and len(arms) == 2
        and all(isinstance(a, int) and not isinstance(a, bool) and a >= 1 for a in arms)
        and sum(arms) == m
    ):
        return None
    return f"arm sizes {arms!r}: two integers >= 1 (treated, control) summing to the count {m!r}"


def _arm_release(raw: Any, d: int, binary: bool) -> tuple[FloatArray, FloatArray | None]:
    """Check one silo's two-arm release (``(2, d)`` finite arrays); return ``(theta, s2)``.

    Raises
    ------
    ValueError
        One line: what is wrong (the server drops that silo).
    """
    names = ("theta",) if binary else ("theta", "s2")
    if not isinstance(raw, Mapping) or sorted(raw) != sorted(names):
        raise ValueError(
            f"a two-arm release must hold {' and '.join(repr(k) for k in names)}, (2, d) each"
        )
    out: list[FloatArray] = []
    for name in names:
        array = np.asarray(raw[name], dtype=np.float64)
        if array.shape != (2, d) or not np.all(np.isfinite(array)):
            raise ValueError(f"a two-arm release's {name!r} must be (2, {d}) finite numbers")
        out.append(array)
    return out[0], None if binary else out[1]


class TwoArmSummaries(SiloSummaries):
    """Two-arm effects (``[data] arm`` and ``effect``): every silo's per-arm release.

    One plain step (:func:`two_arm_round`), nothing masked, as :class:`SiloSummaries`.
    ``reason``: why this design runs.
    """

    def check_reply(self, reply: Mapping[str, Any]) -> str | None:
        """Refuse a reply without a usable record count or arm sizes."""
        return check_count(reply) or check_arm_counts(reply)

    def run(self, session: AnalysisSession) -> dict[str, Any]:
        """Ask every silo for its two arm releases; pool the effects (:func:`two_arm_round`)."""
        return two_arm_round(session, reason=self.reason)


def two_arm_round(session: AnalysisSession, *, reason: str = "") -> dict[str, Any]:
    """Ask every silo for its per-arm releases; form and pool the effects; write the result.

    The in-process two-arm silo-summaries analysis
    (:func:`fa_hetdp.private_meta_analysis` with ``arm=`` and ``effect=``) over Flower: every
    silo's public ``(treated, control)`` sizes come with its first reply; the plan over them
    (:func:`fa_hetdp.flowerkit.settings.two_arm_plan`) is put on record before anything is
    released; the one plain ``silo_summaries`` step sends every silo the arm sizes and ``d``,
    and each replies with its two arms' noisy summaries
    (:func:`fa_hetdp.clients.silo_summaries.two_arm_release`). The server forms every silo's
    effect and its variance (the noise's included) and pools them by DerSimonian-Laird with
    :func:`fa_hetdp.protocol.two_arm.assemble_two_arm`, the in-process code, over the plan of
    the silos that replied (a silo's noise depends on its own arm sizes only). A silo whose arm
    is below the effect's least size (2 for MD and SMD) is dropped before the step, named.
    """
    s = session.settings
    d = session.d
    data = s.scenario.data
    effect = data.effect
    least = min_arm_size(effect)
    arms_of: dict[int, list[int]] = {}
    for cid, reply in sorted(session.first_replies.items()):
        arms = reply.get(Key.ARM_COUNTS)
        if not isinstance(arms, list) or check_arm_counts(reply) is not None:
            raise session.abort(
                f"effect={effect!r}: silo {cid} stated no usable arm sizes in its first reply"
            )
        if min(arms) < least:
            session.drop(
                cid,
                f"effect={effect!r} needs at least {least} records in each arm, this silo holds "
                f"{arms[0]} treated and {arms[1]} control",
            )
            continue
        arms_of[cid] = [int(a) for a in arms]
    if len(arms_of) < MIN_SILOS:
        raise session.abort(
            f"effect={effect!r}: {len(arms_of)} silos with at least {least} records in each arm; "
            f"a meta-analysis needs {MIN_SILOS}"
        )
    rows = [[cid, *arms] for cid, arms in sorted(arms_of.items())]
    planned = two_arm_plan(s, [row[1:] for row in rows], d)  # before any release
    caveats = simulation_caveats(s)
    session.record(
        lambda released: meta_privacy_section(planned, None, released=released, caveats=caveats)
    )

    releases: dict[int, tuple[FloatArray, FloatArray | None]] = {}

    def check(cid: int, reply: Mapping[str, Any]) -> str | None:
        try:
            releases[cid] = _arm_release(reply.get(Key.SILO_RELEASE), d, planned.binary)
        except ValueError as exc:
            return str(exc)
        return None

    request = {Key.ARM_COUNTS: rows, Key.D: d}
    replies = session.collect(
        SILO_SUMMARIES, dict.fromkeys(arms_of, request), check=check, minimum=MIN_SILOS
    )
    kept = sorted(replies)
    what = "proportions" if planned.binary else "means and variances"
    session.release(
        f"two-arm silo summaries ({effect}): {len(kept)} of {len(rows)} silos' noisy per-arm "
        f"{what} (each arm at the whole budget; within-arm neighbours, parallel composition)"
    )
    session.progress(Event.STAGE1, clients=len(kept), round="silo summaries (two arms)")

    plan = two_arm_plan(s, [arms_of[c] for c in kept], d)  # each silo's own noise (docstring)
    theta = np.stack([releases[c][0] for c in kept])
    s2 = None if plan.binary else np.stack([np.asarray(releases[c][1]) for c in kept])
    result = assemble_two_arm(plan, theta, s2)
    labels = list(result.labels)
    if reason:
        labels.append(f"design silo-summaries: {reason}")
    if len(kept) < len(rows):
        labels.append(
            f"{len(rows) - len(kept)} of {len(rows)} silos sent no usable release and are left "
            f"out: this is the analysis of the {len(kept)} silos that replied (a silo's noise "
            "depends only on its own arm sizes, so the plan over them is the one each drew)"
        )
    result = dataclasses.replace(result, labels=tuple(labels))
    partitions = [session.partitions.get(c, -1) for c in kept]
    columns = column_ranges(s) or {f"x{j}": (0.0, 1.0) for j in range(d)}
    if len(columns) != d:
        raise session.abort(
            f"the meta-analysis has d={d} coordinates but the scenario's [data] columns name "
            f"{len(columns)}"
        )
    in_units = ColumnMetaAnalysis(
        result=result,
        columns=tuple(columns),
        low=np.array([low for low, _ in columns.values()], dtype=np.float64),
        high=np.array([high for _, high in columns.values()], dtype=np.float64),
        site_labels=tuple(partitions),
        effect=effect,
        arm=data.arm,
        arm_levels=(1, 0),
    )
    released = [*session.released, "the meta-analysis (every figure of the result)"]
    document = _two_arm_document(session, plan, in_units, released, partitions, reason)
    return session.finish(document, in_units)


#: How each two-arm effect is read (the result's ``two_arm.scale``).
def two_arm_section(
    cma: ColumnMetaAnalysis,
    *,
    level: float = 0.95,
    silo_names: Sequence[Any] = (),
    unit_names: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Return the ``meta_analysis`` section of a two-arm run.

    Figures on the analysis' own scale (as :class:`~fa_hetdp.protocol.two_arm.
    TwoArmMetaAnalysis` holds them) and in ``units`` (an MD in the column's units, the other
    effects unit-free: the in-process :class:`~fa_hetdp.accuracy.columns.ColumnMetaAnalysis`),
    with every silo's effect, the variance it carries and its arm sizes; ``unit_names``
    (``{column: units}``, the scenario's ``[data] units``) go into ``units`` as the one-arm
    section's do.
    """
    result = cma.result
    if not isinstance(result, TwoArmMetaAnalysis):  # pragma: no cover - built by two_arm_round
        raise TypeError("a two-arm section needs a two-arm result")
    names = list(silo_names) or list(range(result.n))

    def silos(view: ColumnMetaAnalysis) -> list[dict[str, Any]]:
        own = view.silo_estimates()
        if own is None:  # pragma: no cover - a two-arm result has every silo's effect
            raise TypeError("a two-arm result without silo estimates")
        sampling = view._variance(result.sampling_variances)
        return [
            {
                "silo": names[i],
                "records": int(result.arm_counts[i].sum()),
                "arms": {
                    "treated": int(result.arm_counts[i, 0]),
                    "control": int(result.arm_counts[i, 1]),
                },
                "effect": json_floats(own.effects[i]),
                "variance": json_floats(own.variances[i]),
                "sampling_variance": json_floats(sampling[i]),
            }
            for i in range(result.n)
        ]

    return effect_section(
        cma, result.arm_counts.tolist(), level=level, unit_names=unit_names, silos=silos
    )


def _two_arm_document(
    session: AnalysisSession,
    plan: TwoArmPlan,
    cma: ColumnMetaAnalysis,
    released: Sequence[str],
    partitions: Sequence[int],
    reason: str,
) -> dict[str, Any]:
    s = session.settings
    result = cma.result
    if not isinstance(result, TwoArmMetaAnalysis):  # pragma: no cover - built by two_arm_round
        raise TypeError("a two-arm section needs a two-arm result")
    why = "silo summaries: each silo's own per-arm release, unmasked (no secure sum)"
    head, privacy = _document_head(session, plan, result, released, reason, why)
    st, ss = plan.sigmas
    return {
        **head,
        "two_arm": {
            "effect": result.effect,
            "arm": cma.arm,
            "arm_levels": {"treated": 1, "control": 0},
            "scale": EFFECT_SCALES[result.effect],
            "neighbours": result.unit_of_privacy,
            "released_per_arm": list(plan.releases),
        },
        "n": plan.n,
        "d": plan.d,
        "records_per_client": [int(m) for m in result.records_per_client],
        "arm_counts": [[int(a) for a in row] for row in plan.arm_counts],
        "clients_in_sum": {"silo_summaries": plan.n},
        "partitions_in_sum": {"silo_summaries": list(partitions)},
        "meta_analysis": _labelled_two_arm(
            two_arm_section(cma, silo_names=partitions, unit_names=s.scenario.data.column_units()),
            s.scenario.data.sites,
            partitions,
        ),
        "noise_std": {  # per silo and arm (treated, control), every coordinate
            "theta": [[float(v) for v in row] for row in st],
            **({} if plan.binary else {"s2": [[float(v) for v in row] for row in ss]}),
        },
        "privacy": privacy,
        "labels": list(result.labels),
    }
