"""The silo-summaries design on a client: the silo's own noisy means and variances.

A meta-analysis in the silo-summaries design (:mod:`fa_hetdp.server.silo_summaries`) asks each
silo once, after the key advertisement, with one plain ``silo_summaries`` message: the request
lists every silo's public record count and ``d``; the client checks its own count and ``d``
(:func:`read_silo_counts`) and replies with its own noisy means and sample variances, unmasked,
at the whole budget (:func:`silo_release`; parallel composition over disjoint records), drawn
from its own noise generator (a CSPRNG in deployment mode, the seeded stream in simulation).

A node whose config says ``release-silo-summaries = false`` says so in its first reply (the
server then runs the secure sums) and refuses this step with one line. Otherwise the release is
checked by the node's policy and charged to its privacy ledger before the reply is built
(:func:`fa_hetdp.clients.policy.charge`, issue 27).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import numpy as np
from flwr.app import Context, Message

from fa_hetdp._types import FloatArray
from fa_hetdp.clients.meta import local_records, read_counts
from fa_hetdp.clients.policy import charge
from fa_hetdp.clients.session import (
    Handler,
    analysis_of,
    noise_generator,
    reply_to,
    save_generator,
    start_step,
    state_int,
    step_limits_of,
)
from fa_hetdp.flowerkit.settings import RunSettings, releases_silo_summaries, silo_plan
from fa_hetdp.flowerkit.steps import SILO_SUMMARIES, Key, NodeConfig, State
from fa_hetdp.flowerkit.wire import decode
from fa_hetdp.protocol.meta_client import ClientSummary, summarise
from fa_hetdp.protocol.silo_summaries import SiloPlan, release_silo

__all__ = ["HANDLERS", "read_silo_counts", "silo_release", "silo_summaries"]


def read_silo_counts(
    request: Mapping[str, Any], *, client_id: int, m: int, d: int
) -> list[list[int]]:
    """Check a ``silo_summaries`` request; return its counts as ``[[client id, m_i], ...]``.

    The list must hold distinct ids with integer counts >= 2 (at least two silos), this
    client's own entry with its own count ``m``, and the request's ``d`` must be the
    client's. Its length is not checked against the session: a silo's noise depends on its
    own count only (:func:`fa_hetdp.flowerkit.settings.silo_plan`), so no list the server
    sends can lower it.

    Raises
    ------
    ValueError
        One line: what is wrong (the server drops this silo).
    """
    raw = request.get(Key.META_COUNTS)
    size = len(raw) if isinstance(raw, list) else -1
    try:
        pairs = read_counts(request, client_id=client_id, m=m, n=size)
    except ValueError as exc:
        raise ValueError(str(exc).replace("round A:", "silo summaries:")) from None
    if len(pairs) < 2:
        raise ValueError("silo summaries: a meta-analysis needs at least 2 silos' counts")
    stated = request.get(Key.D)
    if stated != d:
        raise ValueError(f"silo summaries: the request says d={stated!r}, this silo has d={d}")
    return pairs


def silo_release(
    settings: RunSettings,
    records: FloatArray,
    counts: list[list[int]],
    client_id: int,
    rng: np.random.Generator,
    plan: SiloPlan | None = None,
) -> dict[str, FloatArray]:
    """Return this silo's release as the reply carries it: ``{"theta": ..., "s2": ...}``.

    The plan is the run's (:func:`fa_hetdp.flowerkit.settings.silo_plan`) for the checked
    ``counts`` (:func:`read_silo_counts`); ``rng`` is the silo's noise generator.
    """
    summary: ClientSummary = summarise(records)
    if plan is None:
        plan = silo_plan(settings, [count for _, count in counts], summary.theta.shape[0])
    index = [cid for cid, _ in counts].index(client_id)
    release = release_silo(plan, index, summary, rng)
    return {"theta": release.theta, "s2": release.s2}


def silo_summaries(msg: Message, context: Context) -> Message:
    """Meta-analysis, silo-summaries design: this silo's own noisy means and variances.

    Refused (one line) when the node's config says ``release-silo-summaries = false``, and
    outside a meta-analysis session. The noise comes from the node's generator (a CSPRNG in
    deployment mode, the seeded stream in simulation).
    """
    if not releases_silo_summaries(context.node_config):  # the node's word, checked first
        raise ValueError(
            f"this node does not release its own summaries (node-config "
            f"{NodeConfig.RELEASE_SILO_SUMMARIES} = false): only the secure sums"
        )
    settings, pid, record = start_step(context, SILO_SUMMARIES)
    if analysis_of(settings) != "meta":
        raise RuntimeError("silo_summaries outside a meta-analysis session")
    records = local_records(context)
    request = decode(msg.content, limits=step_limits_of(context, SILO_SUMMARIES))
    client_id = state_int(record, State.CLIENT_ID)
    counts = read_silo_counts(request, client_id=client_id, m=records.shape[0], d=records.shape[1])
    plan = silo_plan(settings, [count for _, count in counts], records.shape[1])
    # the node's own release, charged to its ledger before the reply is built
    charge(context, settings, record, None, plan)
    rng = noise_generator(settings, record, pid)
    release = silo_release(settings, records, counts, client_id, rng, plan)
    save_generator(settings, record, rng)
    return reply_to(msg, {Key.SILO_RELEASE: release})


HANDLERS: Final[Mapping[str, Handler]] = {SILO_SUMMARIES: silo_summaries}
"""The silo summaries' handler by step."""
