"""The meta-analysis over Flower in the silo-summaries design: one plain step, every silo's release.

Under the record unit with public counts each silo releases its own noisy means and sample
variances at the whole budget (:mod:`fa_hetdp.protocol.silo_summaries`: silos hold disjoint
records, so their releases compose in parallel). After the key advertisement (each node's first
reply states its count ``m_i``), :func:`silo_round` sends one ``silo_summaries`` message per
node: the session's public counts and ``d``, nothing masked, no secure aggregation. Each node
rebuilds the plan from its own settings and the counts, checks its own count and ``d``, and
replies with :func:`~fa_hetdp.protocol.silo_summaries.release_silo` drawn from its own noise
generator (:func:`fa_hetdp.clients.meta.silo_release`).

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
from typing import TYPE_CHECKING, Any

import numpy as np

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
from fa_hetdp.server.meta import meta_privacy_section, session_counts
from fa_hetdp.server.results import simulation_caveats, write_result

if TYPE_CHECKING:
    from fa_hetdp.server.strategy import HeterogeneityStrategy, Session

__all__ = ["MIN_SILOS", "silo_round"]

MIN_SILOS = 2
"""The fewest usable releases a meta-analysis can be made of."""


def silo_round(
    strategy: HeterogeneityStrategy, session: Session, *, reason: str = ""
) -> dict[str, Any]:
    """Ask every silo for its own noisy summaries; analyse them; write and return the result.

    ``reason``: why this design runs (stated in the result).
    """
    s = strategy.settings
    d = session.d
    nodes_of, ids, active = session.route
    counts = session_counts(strategy, session)
    count_of = dict((cid, m) for cid, m in counts)
    planned = silo_plan(s, [m for _, m in counts], d)  # every silo's noise, before any release
    released: list[str] = []
    caveats = simulation_caveats(s)
    strategy.partial_privacy = lambda: meta_privacy_section(
        planned, None, released=released, caveats=caveats
    )
    strategy.log_release()  # on record from here on: nothing released yet

    releases: dict[int, SiloRelease] = {}

    def check(node: int, reply: Mapping[str, Any]) -> str | None:
        cid = ids[node]
        try:
            releases[cid] = check_silo_release(reply.get(Key.SILO_RELEASE), d, count_of[cid])
        except ValueError as exc:
            return str(exc)
        return None

    payloads = {
        nodes_of[cid]: {Key.META_COUNTS: counts, Key.D: d}
        for cid, _ in counts
        if nodes_of[cid] in active
    }
    replies = strategy._step(
        session.transport, SILO_SUMMARIES, payloads, active, check=check, minimum=MIN_SILOS
    )
    kept = sorted(ids[node] for node in replies)
    releases = {cid: releases[cid] for cid in kept}
    released.append(
        f"silo summaries: {len(kept)} of {len(counts)} silos' own noisy means and variances "
        "(each at the whole budget; parallel composition over disjoint records)"
    )
    strategy.log_release()
    strategy.progress(Event.STAGE1, clients=len(kept), round="silo summaries")

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
    released.append("the meta-analysis (every figure of the result)")
    strategy.timings["protocol"] = strategy.clock() - strategy._protocol_start
    strategy.timings["total"] = strategy.clock() - strategy._start
    partitions = [strategy.partitions.get(c, -1) for c in kept]
    document = _document(strategy, plan, result, released, partitions, reason)
    strategy.meta_result = result
    if strategy.write_results:
        strategy._settle_file(write_result(strategy._target, document), partial=False)
    strategy.progress(Event.DONE)
    return document


def _with_labels(result: PrivateMetaAnalysis, labels: Sequence[str]) -> PrivateMetaAnalysis:
    return dataclasses.replace(result, labels=tuple(labels))


def _floats(values: Any) -> list[float]:
    return [float(v) for v in np.asarray(values, dtype=np.float64).ravel()]


def _document(
    strategy: HeterogeneityStrategy,
    plan: SiloPlan,
    result: PrivateMetaAnalysis,
    released: Sequence[str],
    partitions: Sequence[int],
    reason: str,
) -> dict[str, Any]:
    s = strategy.settings
    privacy = meta_privacy_section(
        plan, result.spent, released=released, caveats=simulation_caveats(s)
    )
    st, ss = plan.sigmas
    return {
        "status": "success",
        "differentially_private": privacy["differentially_private"],
        **strategy._base_document(),
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
        "meta_analysis": meta_section(result, silo_names=list(partitions)),
        "noise_std": {"theta": _floats(st), "s2": _floats(ss)},  # per silo, every coordinate
        "privacy": privacy,
        "labels": list(result.labels),
    }
