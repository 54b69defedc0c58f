"""The meta-analysis on a client (``analysis = "meta"``): rounds A, B, C from its records.

The ClientApp (:mod:`fa_hetdp.clients.app`) keeps the client's records, not one vector, and
answers the meta-analysis' own steps (:data:`HANDLERS`, :data:`fa_hetdp.flowerkit.steps.
META_ROUNDS`) with the round vectors of :mod:`fa_hetdp.protocol.meta_client` plus its noise
share:

=======================  ========================================================================
``meta_round_a``         round A: ``[T | U | W]`` (sums of the records, of their squares, the
                         sum of squared deviations). The request lists every client's public
                         record count; the client checks its own entry and the list's length
                         (the session size from the key directory) and keeps the list: the plan
                         is calibrated on it
``meta_round_b``         round B: ``[A | B | C | D]`` at the broadcast centre, floor and clip
``meta_round_c``         round C: ``[E | F]`` at the broadcast ``tau2`` and clip ``kappa*``
``meta_round_x_unmask``  each round's shares that remove the masks; against a malicious server
                         ``meta_round_x_consistency`` signs the survivor list shown first
=======================  ========================================================================

The silo-summaries design's client part is :mod:`fa_hetdp.clients.silo_summaries`.

**Two-arm effects** (the scenario's ``[data] arm``, an MD or RD with ``design =
"secure-sums"``): a node whose session keeps its records' arms (its first reply stated its arm
sizes, on its own consent ``allow-public-arm-sizes``) enters the rounds with one summary, its
silo's effect reduced by :func:`fa_hetdp.protocol.two_arm_sums.reduced_summaries` of its own
:func:`~fa_hetdp.protocol.two_arm.arm_summaries` (:func:`reduced_summary`), never with its
records' own sums. Round A's request then lists every silo's ``[client id, treated,
control]`` (and ``d``); the node checks its own entry and the list's length and calibrates on
the counts ``4 m' - 3`` of every silo's smaller arm
(:func:`~fa_hetdp.protocol.two_arm_sums.reduced_counts`), with the reduced plan's bound of
``U`` (:func:`fa_hetdp.flowerkit.settings.reduced_meta_plan`: every count public, so no
``min_records`` enters it; its own colluders counted as :func:`fa_hetdp.clients.policy.
node_meta_plan` counts them). The node decides this from its own
data, not from the request: a request without the arm sizes is refused, and the plan it
checks and charges publishes its arm sizes (:func:`fa_hetdp.flowerkit.node_policy.meta_view`).

Each client computes the noise of its share from the plan and the broadcast itself
(:func:`fa_hetdp.protocol.meta_server.round_sigmas`, the server's own formula), never from a
number the server states: a broadcast floor or clip
changes the round's bounds and its noise together, so any broadcast keeps the planned
``mu`` of the round. The plan is the node's own (:func:`fa_hetdp.clients.policy.node_meta_plan`:
with a roster, its colluders counted against the roster), checked by the node's policy and
charged whole to its privacy ledger at round A, before the reply is built (issue 27); a later
round that asks for more than was charged is refused.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

import numpy as np
import numpy.typing as npt
from flwr.app import ArrayRecord, ConfigRecord, Context, Message

from fa_hetdp._types import FloatArray
from fa_hetdp.clients.policy import (
    charge,
    node_gamma_roster,
    node_meta_plan,
    node_meta_settings,
    realise,
)
from fa_hetdp.clients.session import (
    Handler,
    UnmaskCheck,
    analysis_of,
    consistency,
    masked_input,
    noise_generator,
    secagg_client,
    start_step,
    state_int,
    step_limits_of,
    unmask,
)
from fa_hetdp.data.arms import arm_sizes
from fa_hetdp.flowerkit.settings import RunSettings, meta_plan, reduced_meta_plan
from fa_hetdp.flowerkit.steps import META_ROUNDS, Key, State
from fa_hetdp.flowerkit.wire import decode
from fa_hetdp.protocol.meta_client import (
    BroadcastB,
    BroadcastC,
    ClientSummary,
    client_round,
    summarise,
)
from fa_hetdp.protocol.meta_plan import ROUNDS, MetaPlan
from fa_hetdp.protocol.meta_server import round_sigmas
from fa_hetdp.secagg.client import SecAggClient

__all__ = [
    "HANDLERS",
    "ROUND_OF_STAGE",
    "broadcast_of",
    "local_records",
    "meta_round",
    "read_arm_rows",
    "read_counts",
    "reduced_summary",
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


def read_arm_rows(
    request: Mapping[str, Any], *, client_id: int, arms: list[int], n: int, d: int
) -> list[list[int]]:
    """Check a two-arm round A's arm sizes; return the counts as ``[[client id, 4 m' - 3]]``.

    The request lists every silo's ``[client id, treated, control]`` and ``d``
    (:func:`fa_hetdp.clients.silo_summaries.read_arm_counts`: distinct ids, this node's own
    sizes ``arms``, its own ``d``), ``n`` of them (the session size from the key directory);
    every silo's count is :func:`~fa_hetdp.protocol.two_arm_sums.reduced_counts` of its
    smaller arm, computed here, never a count the server states.

    Raises
    ------
    ValueError
        One line: what is wrong (the run aborts: every silo takes part in every round).
    """
    from fa_hetdp.clients.silo_summaries import read_arm_counts
    from fa_hetdp.protocol.two_arm_sums import reduced_counts

    try:
        rows = read_arm_counts(request, client_id=client_id, arms=arms, d=d)
    except ValueError as exc:
        raise ValueError(str(exc).replace("silo summaries:", "round A:")) from None
    if len(rows) != n:
        raise ValueError(f"round A: {len(rows)} silos' arm sizes for a session of n={n} clients")
    if any(min(row[1:]) < 2 for row in rows):
        raise ValueError("round A: the two-arm secure sums need at least 2 records in each arm")
    counts = reduced_counts([min(row[1:]) for row in rows])
    return sorted([row[0], int(m)] for row, m in zip(rows, counts, strict=True))


def reduced_summary(
    settings: RunSettings, records: FloatArray, arms: npt.ArrayLike
) -> ClientSummary:
    """Return this silo's one summary of its two-arm effect (the run's ``[data] effect``).

    :func:`fa_hetdp.protocol.two_arm_sums.reduced_summaries` of the silo's own
    :func:`~fa_hetdp.protocol.two_arm.arm_summaries` (one silo): the function the in-process
    :func:`~fa_hetdp.protocol.two_arm_sums.run_two_arm_sums` runs for every silo.

    Raises
    ------
    PrivacyParameterError
        An effect the secure sums do not build (SMD, OR, RR).
    InputDataError
        An arm below 2 records, or (RD) a column that is not 0/1.
    """
    from fa_hetdp.clients.silo_summaries import check_binary
    from fa_hetdp.protocol.two_arm import arm_summaries
    from fa_hetdp.protocol.two_arm_sums import reduced_summaries

    check_binary(settings, records)
    flags = np.asarray(arms, dtype=np.int64)
    silo = arm_summaries(records, np.zeros(flags.shape[0], dtype=np.int64), flags, minimum=2)
    (summary,) = reduced_summaries(silo, settings.scenario.data.effect)
    return summary


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
    spread = _vector(request, Key.META_SPREAD, d)
    if np.any(spread <= 0.0) or np.any(spread > 0.25):
        raise ValueError("the broadcast pooled within-variance (spread) must lie in (0, 1/4]")
    if rnd == "B":
        kappa = _vector(request, Key.META_KAPPA, d)
        rho = _vector(request, Key.META_RHO, d)
        if np.any(kappa <= 0.0) or np.any(rho < 0.0):
            raise ValueError("the broadcast clip kappa must be > 0 and rho >= 0")
        return BroadcastB(centre=centre, floor=floor, kappa=kappa, rho=rho, spread=spread)
    tau2 = _vector(request, Key.META_TAU2, d)
    kappa_star = _vector(request, Key.META_KAPPA_STAR, d)
    if np.any(tau2 < 0.0) or np.any(kappa_star <= 0.0):
        raise ValueError("the broadcast tau2 must be >= 0 and kappa* > 0")
    return BroadcastC(centre=centre, floor=floor, tau2=tau2, kappa_star=kappa_star, spread=spread)


def meta_round(
    settings: RunSettings,
    records: FloatArray,
    counts: list[list[int]],
    stage: int,
    request: Mapping[str, Any],
    rng: np.random.Generator,
    plan: MetaPlan | None = None,
    arms: npt.ArrayLike | None = None,
) -> FloatArray:
    """Return this client's round vector of ``stage`` (its values plus its noise share).

    ``counts`` is the session's list of round A (:func:`read_counts`; two-arm:
    :func:`read_arm_rows`); the plan is the run's (:func:`fa_hetdp.flowerkit.settings.
    meta_plan` for those counts; two-arm: :func:`~fa_hetdp.flowerkit.settings.
    reduced_meta_plan`), or ``plan`` (the node's own, :func:`fa_hetdp.clients.policy.
    node_meta_plan`: its colluders counted against its roster). ``arms`` (a two-arm session:
    every record's arm, 1 treated): the silo enters as its :func:`reduced_summary`.
    """
    summary: ClientSummary = (
        summarise(records) if arms is None else reduced_summary(settings, records, arms)
    )
    if plan is None:
        build = meta_plan if arms is None else reduced_meta_plan
        plan = build(settings, [count for _, count in counts], summary.theta.shape[0])
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


# ---------------------------------------------------------------------------- the handlers
def local_records(context: Context) -> FloatArray:
    """Return the records the session keeps (``(m, d)``: a meta-analysis keeps them all)."""
    arrays = context.state.get(State.LOCAL)
    if not isinstance(arrays, ArrayRecord):
        raise RuntimeError("no local data: the session did not start on this node")
    return np.asarray(arrays[State.RECORDS].numpy(), dtype=np.float64)


def local_arms(context: Context) -> npt.NDArray[np.int64] | None:
    """Return the arm of every record the session keeps (None: a one-arm session).

    A two-arm session's first step keeps them beside the records
    (:func:`fa_hetdp.clients.silo_summaries.arm_local_data`): the node's own data says
    whether it compares two arms, not the server's request.
    """
    arrays = context.state.get(State.LOCAL)
    if not isinstance(arrays, ArrayRecord) or State.ARMS not in arrays:
        return None
    return np.asarray(arrays[State.ARMS].numpy(), dtype=np.int64)


def _node_plan(
    settings: RunSettings, counts: list[list[int]], d: int, record: ConfigRecord, two_arm: bool
) -> MetaPlan:
    """Return the node's own plan for the session's counts (two-arm: the reduced plan).

    Its colluders counted against its roster (:func:`fa_hetdp.clients.policy.node_meta_plan`;
    two-arm: the same settings, :func:`fa_hetdp.clients.policy.node_meta_settings`, planned by
    :func:`fa_hetdp.flowerkit.settings.reduced_meta_plan`).
    """
    if not two_arm:
        return node_meta_plan(settings, [count for _, count in counts], d, record)
    gamma, roster = node_gamma_roster(record)
    own = node_meta_settings(settings, len(counts), gamma, roster)
    return reduced_meta_plan(own, [count for _, count in counts], d)


def _round_input(stage: int) -> Handler:
    """Return the handler of round ``ROUND_OF_STAGE[stage]``'s masked input."""
    step = META_ROUNDS[ROUND_OF_STAGE[stage]].input

    def handler(msg: Message, context: Context) -> Message:
        settings, pid, record = start_step(context, step)
        if analysis_of(settings) != "meta":
            raise RuntimeError(f"{step} outside a meta-analysis session")
        request = decode(msg.content, limits=step_limits_of(context, step))
        rng = noise_generator(settings, record, pid)
        records = local_records(context)
        arms = local_arms(context)  # a two-arm session: the silo's reduced summary
        if stage == 0:  # round A: the public counts the plan is calibrated on
            client_id = state_int(record, State.CLIENT_ID)
            n = state_int(record, State.SESSION_SIZE)
            if arms is None:
                counts = read_counts(request, client_id=client_id, m=records.shape[0], n=n)
            else:
                counts = read_arm_rows(
                    request, client_id=client_id, arms=arm_sizes(arms), n=n, d=records.shape[1]
                )
            record[State.META_COUNTS] = counts_to_json(counts)
        counts = counts_from_json(record.get(State.META_COUNTS))
        plan = _node_plan(settings, counts, records.shape[1], record, arms is not None)
        values = meta_round(settings, records, counts, stage, request, rng, plan, arms)
        # the whole plan charged to the node's ledger (round A) before the reply is built
        charge(context, settings, record, secagg_client(record), plan)
        return masked_input(msg, request, values, settings, record, rng)

    handler.__name__ = step
    handler.__doc__ = f"Round {ROUND_OF_STAGE[stage]}: this client's masked vector + noise share."
    return handler


def _realised(rnd: str) -> UnmaskCheck:
    """Return the node's realised charge of round ``rnd``'s sum, run before its unmasking."""

    def check(
        context: Context, settings: RunSettings, record: ConfigRecord, secagg: SecAggClient, k: int
    ) -> None:
        counts = counts_from_json(record.get(State.META_COUNTS))
        d = local_records(context).shape[1]
        plan = _node_plan(settings, counts, d, record, local_arms(context) is not None)
        releases = [r for r in ROUNDS[rnd] if r in plan.releases]
        realise(context, settings, record, secagg, plan, releases, k)

    return check


def _secagg_step(rnd: str, step: str) -> Handler:
    """Return the handler of a round's consistency or unmask step (secure aggregation's)."""

    def handler(msg: Message, context: Context) -> Message:
        if step.endswith("_unmask"):
            return unmask(msg, context, step, before=_realised(rnd))
        return consistency(msg, context, step)

    handler.__name__ = step
    handler.__doc__ = f"{step}: the secure aggregation's round of the meta-analysis."
    return handler


HANDLERS: Final[Mapping[str, Handler]] = {
    **{META_ROUNDS[rnd].input: _round_input(stage) for stage, rnd in ROUND_OF_STAGE.items()},
    **{
        step: _secagg_step(rnd, step)
        for rnd, steps in META_ROUNDS.items()
        for step in (steps.consistency, steps.unmask)
    },
}
"""The meta rounds' handlers by step (:data:`fa_hetdp.flowerkit.steps.META_ROUNDS`)."""
