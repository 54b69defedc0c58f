"""The meta-analysis on a client (``analysis = "meta"``): rounds A, B, C from its records.

The ClientApp (:mod:`fa_hetdp.clients.app`) keeps the client's records, not one vector, and
answers the three masked-input steps with the round vectors of
:mod:`fa_hetdp.protocol.meta_client` plus its noise share:

==================  ==========================================================================
``stage0_input``    round A: ``[T | U | W]`` (sums of the records, of their squares, the sum of
                    squared deviations). The request lists every client's public record count;
                    the client checks its own entry and the list's length (the session size
                    from the key directory) and keeps the list: the plan is calibrated on it
``stage1_input``    round B: ``[A | B | C | D]`` at the broadcast centre, floor and clip
``stage2_input``    round C: ``[E | F]`` at the broadcast ``tau2`` and clip ``kappa*``
``silo_summaries``  the silo-summaries design instead of rounds A, B, C: the request lists every
                    silo's public count (the client checks its own and ``d``); the reply is the
                    silo's own noisy means and sample variances, unmasked, at the whole budget
                    (:func:`silo_release`). A node whose config says
                    ``release-silo-summaries = false`` says so in its first reply and refuses
                    this step
==================  ==========================================================================

Each client computes the noise of its share from the plan and the broadcast itself
(:func:`fa_hetdp.protocol.meta_server.round_sigmas`, the server's own formula), never from a
number the server states: a broadcast floor or clip
changes the round's bounds and its noise together, so any broadcast keeps the planned
``mu`` of the round.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

import numpy as np

from fa_hetdp._types import FloatArray
from fa_hetdp.flowerkit.settings import RunSettings, meta_plan, silo_plan
from fa_hetdp.flowerkit.steps import Key
from fa_hetdp.protocol.meta_client import (
    BroadcastB,
    BroadcastC,
    ClientSummary,
    client_round,
    summarise,
)
from fa_hetdp.protocol.meta_server import round_sigmas
from fa_hetdp.protocol.silo_summaries import release_silo

__all__ = [
    "ROUND_OF_STAGE",
    "broadcast_of",
    "meta_round",
    "read_counts",
    "read_silo_counts",
    "silo_release",
]

ROUND_OF_STAGE: Final[Mapping[int, str]] = {0: "A", 1: "B", 2: "C"}
"""The round each masked-input stage carries in a meta-analysis session."""


def read_counts(request: Mapping[str, Any], *, client_id: int, m: int, n: int) -> list[list[int]]:
    """Check round A's list of record counts; return it as ``[[client id, m_i], ...]``.

    Raises
    ------
    ValueError
        The list is not ``n`` distinct ids with integer counts >= 2, or this client's entry
        is missing or not its own count ``m`` (one line: the server drops this client).
    """
    raw = request.get(Key.META_COUNTS)
    pairs: list[list[int]] = []
    if isinstance(raw, list):
        for item in raw:
            if (
                isinstance(item, list)
                and len(item) == 2
                and all(isinstance(v, int) and not isinstance(v, bool) for v in item)
            ):
                pairs.append([int(item[0]), int(item[1])])
    ids = {cid for cid, _ in pairs}
    if not isinstance(raw, list) or len(pairs) != len(raw) or len(ids) != len(pairs):
        raise ValueError("round A: the record counts must be a list of [client id, count] pairs")
    if len(pairs) != n:
        raise ValueError(f"round A: {len(pairs)} record counts for a session of n={n} clients")
    if any(count < 2 for _, count in pairs):
        raise ValueError("round A: every client's record count must be >= 2")
    own = dict((cid, count) for cid, count in pairs).get(client_id)
    if own != m:
        raise ValueError(f"round A: the counts give this client {own!r} records, it holds {m}")
    return sorted(pairs)


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
) -> dict[str, FloatArray]:
    """Return this silo's release as the reply carries it: ``{"theta": ..., "s2": ...}``.

    The plan is the run's (:func:`fa_hetdp.flowerkit.settings.silo_plan`) for the checked
    ``counts`` (:func:`read_silo_counts`); ``rng`` is the silo's noise generator.
    """
    summary: ClientSummary = summarise(records)
    plan = silo_plan(settings, [count for _, count in counts], summary.theta.shape[0])
    index = [cid for cid, _ in counts].index(client_id)
    release = release_silo(plan, index, summary, rng)
    return {"theta": release.theta, "s2": release.s2}


def _vector(request: Mapping[str, Any], key: str, d: int) -> FloatArray:
    value = np.asarray(request.get(key), dtype=np.float64)
    if value.shape != (d,) or not np.all(np.isfinite(value)):
        raise ValueError(f"the broadcast {key!r} must be {d} finite numbers")
    return value


def broadcast_of(request: Mapping[str, Any], rnd: str, d: int) -> BroadcastB | BroadcastC | None:
    """Read the broadcast of round ``rnd`` (None for round A) from the server's request.

    Raises
    ------
    ValueError
        A vector missing, of another length, or not finite; a floor not in ``(0, 1/4]``, a
        clip or ``tau2`` negative (one line).
    """
    if rnd == "A":
        return None
    centre = _vector(request, Key.META_CENTRE, d)
    floor = _vector(request, Key.META_FLOOR, d)
    if np.any(floor <= 0.0) or np.any(floor > 0.25):
        raise ValueError("the broadcast floor must lie in (0, 1/4]")
    if rnd == "B":
        kappa = _vector(request, Key.META_KAPPA, d)
        if np.any(kappa <= 0.0):
            raise ValueError("the broadcast clip kappa must be > 0")
        return BroadcastB(centre=centre, floor=floor, kappa=kappa)
    tau2 = _vector(request, Key.META_TAU2, d)
    kappa_star = _vector(request, Key.META_KAPPA_STAR, d)
    if np.any(tau2 < 0.0) or np.any(kappa_star <= 0.0):
        raise ValueError("the broadcast tau2 must be >= 0 and kappa* > 0")
    return BroadcastC(centre=centre, floor=floor, tau2=tau2, kappa_star=kappa_star)


def meta_round(
    settings: RunSettings,
    records: FloatArray,
    counts: list[list[int]],
    stage: int,
    request: Mapping[str, Any],
    rng: np.random.Generator,
) -> FloatArray:
    """Return this client's round vector of ``stage`` (its values plus its noise share).

    ``counts`` is the session's list of round A (:func:`read_counts`); the plan is the run's
    (:func:`fa_hetdp.flowerkit.settings.meta_plan`) for those counts.
    """
    summary: ClientSummary = summarise(records)
    plan = meta_plan(settings, [count for _, count in counts], summary.theta.shape[0])
    rnd = ROUND_OF_STAGE[stage]
    broadcast = broadcast_of(request, rnd, plan.d)
    return client_round(plan, summary, rnd, broadcast, round_sigmas(plan, rnd, broadcast), rng)


def counts_to_json(counts: list[list[int]]) -> str:
    """Return the counts as the session state keeps them (JSON)."""
    return json.dumps(counts)


def counts_from_json(text: object) -> list[list[int]]:
    """Read the counts kept in the session state (round A must have run)."""
    if not isinstance(text, str) or not text:
        raise RuntimeError("no record counts: round A did not run on this node")
    value = json.loads(text)
    return [[int(a), int(b)] for a, b in value]
