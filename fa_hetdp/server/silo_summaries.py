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

from fa_hetdp.config.protocol import ProtocolConfig
from fa_hetdp.flowerkit.settings import silo_plan
from fa_hetdp.flowerkit.steps import SILO_SUMMARIES, Event, Key
from fa_hetdp.protocol.meta_server import PrivateMetaAnalysis
from fa_hetdp.protocol.silo_summaries import (
    SiloPlan,
    SiloRelease,
    assemble_silo_result,
    check_silo_release,
)
from fa_hetdp.report.meta import meta_section
from fa_hetdp.server.analysis import Analysis
from fa_hetdp.server.meta import (
    check_count,
    meta_privacy_section,
    session_counts,
    with_column_units,
)
from fa_hetdp.server.results import simulation_caveats
from fa_hetdp.server.session import AnalysisSession

__all__ = ["MIN_SILOS", "SiloSummaries", "silo_round"]

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


def _floats(values: Any) -> list[float]:
    return [float(v) for v in np.asarray(values, dtype=np.float64).ravel()]


def _document(
    session: AnalysisSession,
    plan: SiloPlan,
    result: PrivateMetaAnalysis,
    released: Sequence[str],
    partitions: Sequence[int],
    reason: str,
) -> dict[str, Any]:
    s = session.settings
    privacy = meta_privacy_section(
        plan, result.spent, released=released, caveats=simulation_caveats(s)
    )
    st, ss = plan.sigmas
    return {
        "status": "success",
        "differentially_private": privacy["differentially_private"],
        **session.base_document(),
        "analysis": "meta",
        "design": result.design,
        "design_reason": reason,
        "server_saw": result.server_saw,
        "secagg": {
            "used": False,
            "why": "silo summaries: each silo's own release, unmasked (no secure sum is made)",
        },
        "n": plan.n,
        "d": plan.d,
        "records_per_client": [int(m) for m in plan.records_per_client],
        "clients_in_sum": {"silo_summaries": plan.n},
        "partitions_in_sum": {"silo_summaries": list(partitions)},
        "meta_analysis": with_column_units(meta_section(result, silo_names=list(partitions)), s),
        "noise_std": {"theta": _floats(st), "s2": _floats(ss)},  # per silo, every coordinate
        "privacy": privacy,
        "labels": list(result.labels),
    }
