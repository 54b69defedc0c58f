"""Step names and message keys shared by the ClientApp, the ServerApp and the launcher.

The client (:mod:`fa_hetdp.clients.app`) and the server (:mod:`fa_hetdp.server.strategy`,
:mod:`fa_hetdp.server.app`) meet only through messages; every name they must agree on is
defined here once (as Flower does for SecAgg+ in
``flwr.common.secure_aggregation.secaggplus_constants``):

- the protocol steps, in order, with the labels the launcher shows (:data:`STEPS`,
  :data:`STEP_LABELS`); each is one ``query.<step>`` message per client and one
  ``@app.query(<step>)`` handler on the client (:data:`ALL_STEPS`: every one of them). Each
  analysis has its own steps, named for what travels: the paper protocol's ``stageK_*``, the
  meta-analysis' ``meta_round_a/b/c*`` (:data:`META_ROUNDS`) and ``silo_summaries``; a node that
  lacks one fails it naming it, and the server refuses that node by name
  (:func:`unknown_step`);
- the keys of the request and reply payloads (:class:`Key`);
- the keys the client keeps in ``context.state`` between steps (:class:`State`);
- the keys of a SuperNode's ``--node-config`` (:class:`NodeConfig`);
- the events of the server's JSON-lines progress file (:class:`Event`).

This module imports nothing from Flower, so the launcher and the tests can use it too.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, final

__all__ = [
    "ADVERTISE_KEYS",
    "ALL_STEPS",
    "CONSISTENCY_STEP",
    "INPUT_STEP",
    "MASKED_INPUT_STEPS",
    "META_ROUNDS",
    "META_ROUND_A",
    "META_ROUND_A_CONSISTENCY",
    "META_ROUND_A_UNMASK",
    "META_ROUND_B",
    "META_ROUND_B_CONSISTENCY",
    "META_ROUND_B_UNMASK",
    "META_ROUND_C",
    "META_ROUND_C_CONSISTENCY",
    "META_ROUND_C_UNMASK",
    "SETTINGS_DOCUMENT",
    "SHARE_KEYS",
    "SILO_SUMMARIES",
    "STAGE0_CONSISTENCY",
    "STAGE0_INPUT",
    "STAGE0_UNMASK",
    "STAGE1_CONSISTENCY",
    "STAGE1_INPUT",
    "STAGE1_UNMASK",
    "STAGE2_CONSISTENCY",
    "STAGE2_INPUT",
    "STAGE2_UNMASK",
    "STAGE_SUMS",
    "STEPS",
    "STEP_LABELS",
    "UNMASK_STEP",
    "WIRE_REVISION",
    "Event",
    "Key",
    "NodeConfig",
    "State",
    "SumSteps",
    "message_type",
    "public_inputs",
    "summation_inputs",
    "unknown_step",
]

# ---------------------------------------------------------------------------- steps
ADVERTISE_KEYS: Final = "advertise_keys"
"""Secagg round 0: session setup; clients reply with ``d`` and their public keys."""
SHARE_KEYS: Final = "share_keys"
"""Secagg round 1: encrypted Shamir shares for the neighbours."""
STAGE0_INPUT: Final = "stage0_input"
"""Stage 0, ``adaptive_floor`` only: masked one-hot bucket of ``s_i^2`` plus a noise share (the
histogram that picks the variance floor; the session's first summation)."""
STAGE0_UNMASK: Final = "stage0_unmask"
"""Stage 0: the shares that remove the masks."""
STAGE0_CONSISTENCY: Final = "stage0_consistency"
"""Stage 0, ``threat_model = "malicious-server"`` only: sign the survivor list shown."""
STAGE1_INPUT: Final = "stage1_input"
"""Stage 1: masked ``[x, w x, w]`` plus a noise share (summation 0)."""
STAGE1_UNMASK: Final = "stage1_unmask"
"""Stage 1: the shares that remove the masks."""
STAGE2_INPUT: Final = "stage2_input"
"""Stage 2: masked ``[(x - mu')^2, w (x - mu_bar')^2]`` plus a noise share (summation 1)."""
STAGE2_UNMASK: Final = "stage2_unmask"
"""Stage 2: the shares that remove the masks."""

STAGE1_CONSISTENCY: Final = "stage1_consistency"
"""Stage 1, ``threat_model = "malicious-server"`` only: sign the survivor list shown."""
STAGE2_CONSISTENCY: Final = "stage2_consistency"
"""Stage 2, ``threat_model = "malicious-server"`` only: sign the survivor list shown."""

SILO_SUMMARIES: Final = "silo_summaries"
"""Meta-analysis, silo-summaries design only: one plain (unmasked) message per silo after the
key advertisement; the request lists every silo's public record count, the reply is the silo's
own noisy means and sample variances (no secure aggregation; not in :data:`STEPS`)."""

META_ROUND_A: Final = "meta_round_a"
"""Meta-analysis, secure-sums design: round A's masked ``[T | U | W]`` plus a noise share; the
request lists every client's public record count (the session's first summation)."""
META_ROUND_A_CONSISTENCY: Final = "meta_round_a_consistency"
"""Round A, ``threat_model = "malicious-server"`` only: sign the survivor list shown."""
META_ROUND_A_UNMASK: Final = "meta_round_a_unmask"
"""Round A: the shares that remove the masks."""
META_ROUND_B: Final = "meta_round_b"
"""Round B: masked ``[A | B | C | D]`` plus a noise share, at the broadcast centre, floor and
clip (the second summation)."""
META_ROUND_B_CONSISTENCY: Final = "meta_round_b_consistency"
"""Round B, ``threat_model = "malicious-server"`` only: sign the survivor list shown."""
META_ROUND_B_UNMASK: Final = "meta_round_b_unmask"
"""Round B: the shares that remove the masks."""
META_ROUND_C: Final = "meta_round_c"
"""Round C (when the random-effects mean is asked for): masked ``[E | F]`` plus a noise share,
at the broadcast ``tau2`` and clip ``kappa*`` (the third summation)."""
META_ROUND_C_CONSISTENCY: Final = "meta_round_c_consistency"
"""Round C, ``threat_model = "malicious-server"`` only: sign the survivor list shown."""
META_ROUND_C_UNMASK: Final = "meta_round_c_unmask"
"""Round C: the shares that remove the masks."""

STEPS: Final[tuple[str, ...]] = (
    ADVERTISE_KEYS,
    SHARE_KEYS,
    STAGE1_INPUT,
    STAGE1_UNMASK,
    STAGE2_INPUT,
    STAGE2_UNMASK,
)
"""The protocol steps, in order: one ``@app.query`` handler each on the client."""

STEP_LABELS: Final[tuple[tuple[str, str], ...]] = (
    (ADVERTISE_KEYS, "secagg: advertise keys"),
    (SHARE_KEYS, "secagg: share keys"),
    (STAGE1_INPUT, "stage 1: masked [x, w x, w] + noise"),
    (STAGE1_UNMASK, "stage 1: unmask"),
    (STAGE2_INPUT, "stage 2: masked squared deviations + noise"),
    (STAGE2_UNMASK, "stage 2: unmask"),
)
"""``(step, label)`` pairs, in protocol order, for progress displays."""

INPUT_STEP: Final[Mapping[int, str]] = {0: STAGE0_INPUT, 1: STAGE1_INPUT, 2: STAGE2_INPUT}
"""The masked-input step of stages 0 (``adaptive_floor`` only, not in :data:`STEPS`), 1, 2."""
UNMASK_STEP: Final[Mapping[int, str]] = {0: STAGE0_UNMASK, 1: STAGE1_UNMASK, 2: STAGE2_UNMASK}
"""The unmask step of stages 0, 1 and 2."""
CONSISTENCY_STEP: Final[Mapping[int, str]] = {
    0: STAGE0_CONSISTENCY,
    1: STAGE1_CONSISTENCY,
    2: STAGE2_CONSISTENCY,
}
"""The consistency step (Bonawitz et al.'s signatures on the survivor list) of each stage,
between its input and unmask steps; only with ``secagg-threat-model = "malicious-server"``
(not in :data:`STEPS`, which lists the steps of every run)."""


@dataclass(frozen=True)
class SumSteps:
    """The three steps of one masked summation, and its name in messages (``"stage-1"``).

    The masked input, the consistency check (``malicious-server`` only) and the unmask.
    """

    input: str
    consistency: str
    unmask: str
    name: str

    @property
    def steps(self) -> tuple[str, str, str]:
        """``(input, consistency, unmask)``, in the order they run."""
        return self.input, self.consistency, self.unmask


STAGE_SUMS: Final[Mapping[int, SumSteps]] = {
    stage: SumSteps(
        INPUT_STEP[stage], CONSISTENCY_STEP[stage], UNMASK_STEP[stage], f"stage-{stage}"
    )
    for stage in (0, 1, 2)
}
"""The paper protocol's summations: stages 0 (``adaptive_floor`` only), 1 and 2."""
META_ROUNDS: Final[Mapping[str, SumSteps]] = {
    "A": SumSteps(META_ROUND_A, META_ROUND_A_CONSISTENCY, META_ROUND_A_UNMASK, "round-A"),
    "B": SumSteps(META_ROUND_B, META_ROUND_B_CONSISTENCY, META_ROUND_B_UNMASK, "round-B"),
    "C": SumSteps(META_ROUND_C, META_ROUND_C_CONSISTENCY, META_ROUND_C_UNMASK, "round-C"),
}
"""The meta-analysis' secure-sums rounds A, B, C, by round (their own steps: an old node that
lacks them is refused by name, :func:`unknown_step`)."""
MASKED_INPUT_STEPS: Final[frozenset[str]] = frozenset(
    s.input for s in (*STAGE_SUMS.values(), *META_ROUNDS.values())
)
"""Every step whose messages carry stage vectors of ``d``-words (masked inputs)."""
ALL_STEPS: Final[tuple[str, ...]] = (
    ADVERTISE_KEYS,
    SHARE_KEYS,
    *(step for sums in STAGE_SUMS.values() for step in sums.steps),
    *(step for sums in META_ROUNDS.values() for step in sums.steps),
    SILO_SUMMARIES,
)
"""Every step a ClientApp of this version answers (one ``@app.query`` handler each)."""

_UNKNOWN_STEP = re.compile(
    r"(?:No query function registered with name|unknown step) '(?P<step>[A-Za-z0-9_.-]+)'"
)


def unknown_step(reason: str) -> str | None:
    """Return the step an error reply says its node does not know, or None.

    A ``ClientApp`` without a handler of a step (an older fa-hetdp, a drop-in registered with
    an older version) fails it with Flower's ``No query function registered with name
    '<step>'``; the server refuses such a node by name (``upgrade fa-hetdp on ...``).
    """
    match = _UNKNOWN_STEP.search(reason)
    return None if match is None else match.group("step")


_QUERY: Final = "query"  # flwr.app.MessageType.QUERY (not imported: this module is Flower-free)


def message_type(step: str) -> str:
    """Return the Flower message type of ``step`` (``"query.<step>"``)."""
    return f"{_QUERY}.{step}"


# ---------------------------------------------------------------------------- payload keys
@final
class Key:
    """Keys of the request and reply payloads (the dicts :mod:`fa_hetdp.flowerkit.wire` encodes)."""

    SECAGG: Final = "secagg"
    """A secure-aggregation message (:mod:`fa_hetdp.secagg.messages`), in every step."""
    CLIENT_ID: Final = "client-id"
    """``advertise_keys`` request: the client's secagg id (1..n)."""
    SESSION_SIZE: Final = "session-size"
    """``advertise_keys`` request: the number n of sampled clients."""
    SETUP: Final = "setup"
    """``advertise_keys`` request: the secagg session setup."""
    D: Final = "d"
    """``advertise_keys`` reply: the client's dimension d."""
    PARTITION_ID: Final = "partition-id"
    """``advertise_keys`` reply: the client's partition id (-1 for a data owner's own file)."""
    NUM_PARTITIONS: Final = "num-partitions"
    """``advertise_keys`` reply: the node's ``num-partitions`` (0 for a data owner's own file)."""
    VERSION: Final = "fa-hetdp-version"
    """``advertise_keys`` reply: the fa-hetdp version of the code the ClientApp runs."""
    WIRE: Final = "fa-hetdp-wire"
    """``advertise_keys`` reply: the node's :data:`WIRE_REVISION` (an older node sends none)."""
    MU_PRIME: Final = "mu-prime"
    """``stage2_input`` request: the broadcast ``clip(mu')``."""
    WEIGHTED_MU_PRIME: Final = "weighted-mu-prime"
    """``stage2_input`` request: the broadcast ``mu_bar'``."""
    FLOOR: Final = "variance-floor"
    """``stage1_input`` request (``adaptive_floor``): the floor chosen from the stage-0
    histogram, which the client uses in stages 1 and 2."""

    # the meta-analysis (analysis = "meta"): rounds A, B, C (META_ROUNDS), the silo summaries
    RECORDS: Final = "records"
    """``advertise_keys`` reply (meta-analysis): the client's record count ``m_i`` (public)."""
    META_COUNTS: Final = "meta-counts"
    """``meta_round_a`` request (round A), and ``silo_summaries`` request: ``[[client id,
    m_i], ...]`` of every client in the key directory, which the plan is calibrated for (each
    client checks its own)."""
    META_CENTRE: Final = "meta-centre"
    """``meta_round_b``/``meta_round_c`` requests (rounds B, C): the centre ``c``."""
    META_FLOOR: Final = "meta-floor"
    """Rounds B, C: the variance floor ``f`` of every coordinate."""
    META_SPREAD: Final = "meta-spread"
    """Rounds B, C: round A's pooled within-variance, at least the floor, which a silo too small
    to weigh by its own variance weighs by (:func:`fa_hetdp.protocol.meta_client.
    pooled_variance`)."""
    META_KAPPA: Final = "meta-kappa"
    """Round B: the clip ``kappa`` of the standardised deviations."""
    META_RHO: Final = "meta-rho"
    """Round B: the pilot ratio ``rho`` of the per-silo clips (client ``i`` clips at
    :func:`fa_hetdp.protocol.meta_plan.silo_kappa` ``(kappa, rho, m_i, f)``)."""
    META_TAU2: Final = "meta-tau2"
    """Round C: the between-client variance ``tau2`` of round B."""
    META_KAPPA_STAR: Final = "meta-kappa-star"
    """Round C: the clip ``kappa*``."""
    RELEASES_SILO_SUMMARIES: Final = "releases-silo-summaries"
    """``advertise_keys`` reply (meta-analysis): whether this node releases its own noisy
    summaries (its node config's ``release-silo-summaries``); one ``False`` makes the server
    run the secure sums."""
    SILO_RELEASE: Final = "silo-release"
    """``silo_summaries`` reply: ``{"theta": (d,), "s2": (d,)}``, the silo's noisy means and
    sample variances (:func:`fa_hetdp.protocol.silo_summaries.release_silo`)."""
    ARM_COUNTS: Final = "arm-counts"
    """Two-arm effects (scenario ``[data] arm``): the ``advertise_keys`` reply's ``[treated,
    control]`` arm sizes (public), and the ``silo_summaries`` request's ``[[client id, treated,
    control], ...]`` of every silo; the reply's ``silo-release`` then holds ``(2, d)`` arrays,
    treated first (:func:`fa_hetdp.protocol.two_arm.release_silo_arms`)."""


# ---------------------------------------------------------------------------- client state
@final
class State:
    """Keys the client keeps in ``context.state`` between steps."""

    RECORD: Final = "fa-hetdp"
    """The ``ConfigRecord`` of the session (the fields below)."""
    LOCAL: Final = "fa-hetdp-local"
    """The ``ArrayRecord`` holding the client's vector under :attr:`X`."""
    X: Final = "x"
    """The client's vector ``x_i`` in :attr:`LOCAL`."""
    SECAGG: Final = "secagg"
    """The serialised :class:`secagg.client.SecAggClient`."""
    CLIENT_ID: Final = "client-id"
    """The client's secagg id."""
    SESSION_SIZE: Final = "session-size"
    """The number n of sampled clients."""
    D: Final = "d"
    """The client's dimension d."""
    RNG_STATE: Final = "rng-state"
    """The noise generator's state as JSON (simulation mode; ``""`` otherwise)."""
    FLOOR: Final = "variance-floor"
    """The adaptive floor received with ``stage1_input`` (``adaptive_floor`` runs only)."""
    RECORDS: Final = "records"
    """The client's records ``(m, d)`` in :attr:`LOCAL` (meta-analysis: not one vector)."""
    ARMS: Final = "arms"
    """Two-arm effects: each record's arm ``(m,)`` in :attr:`LOCAL` (1 treated, 0 control)."""
    META_COUNTS: Final = "meta-counts"
    """The session's public record counts ``[[client id, m_i], ...]`` as JSON (round A on)."""
    NODE_GAMMA: Final = "node-gamma"
    """The corrupt fraction the node guards against (``NodeSecAgg.gamma``; its own plans)."""
    ROSTER_SIZE: Final = "roster-size"
    """The members of the node's roster (``-1``: none); colluders are counted against it."""
    SESSION_NONCE: Final = "session-nonce"
    """The session's nonce (bytes), kept in the node's ledger (issue 27)."""
    REALISED: Final = "realised-shares"
    """JSON ``{release: honest shares}`` of the summations unmasked so far (survivors less the
    colluders the node guards against; its realised charge, issue 28)."""


# ---------------------------------------------------------------------------- node config
@final
class NodeConfig:
    """Keys of a SuperNode's ``--node-config``."""

    PARTITION_ID: Final = "partition-id"
    """The node's partition of the scenario's data."""
    NUM_PARTITIONS: Final = "num-partitions"
    """The number of partitions the scenario's data is split into."""
    DATA_PATH: Final = "data-path"
    """A data owner's own file (``.npy`` or ``.csv``), instead of a partition."""
    THREAT_MODEL: Final = "secagg-threat-model"
    """The node's own threat model (``"malicious-server"`` to insist on the consistency
    round and safe parameters whatever the run config says)."""
    ROSTER: Final = "secagg-roster"
    """Path of the federation's roster (member name -> Ed25519 identity public key,
    :mod:`fa_hetdp.secagg.identity`), the same file on every node; required with
    ``"malicious-server"``."""
    IDENTITY_KEY: Final = "secagg-identity-key"
    """Path of this data owner's Ed25519 identity private key (on the roster); required
    with :attr:`ROSTER`."""
    MIN_GAMMA: Final = "secagg-min-gamma"
    """The corrupt fraction gamma this node guards against, whatever the run config says:
    it refuses a session (and an unmask request) whose threshold is too low for it.
    Required with ``"malicious-server"``."""
    RELEASE_SILO_SUMMARIES: Final = "release-silo-summaries"
    """Whether this node releases its own noisy summaries in a meta-analysis (the
    silo-summaries design; default ``true``). ``false``: it says so in its first reply, the
    server runs the secure sums instead, and the node refuses a ``silo_summaries`` request."""


def public_inputs(request: Mapping[str, Any]) -> dict[str, Any]:
    """Return a masked-input request's public inputs: everything but its secagg message.

    The same for every node of an honest session (the round's broadcast, a meta-analysis'
    counts); both sessions bind the summation's masks to its digest
    (:func:`fa_hetdp.flowerkit.wire.digest`), so a server that shows nodes different inputs gets
    no decodable sum.
    """
    return {key: value for key, value in request.items() if key != Key.SECAGG}


WIRE_REVISION: Final = 3
"""What a node's sums are made of; nodes of different revisions cannot share a sum. 2: every
summation's pairwise masks are bound to the digest of its public inputs
(:func:`summation_inputs`); a node of revision 1 (none stated) masks without it, so its masks
would not cancel with a revision-2 peer's and the sum would be refused. 3: the meta-analysis'
rounds B and C carry round A's pooled within-variance (:attr:`Key.META_SPREAD`), by which a
silo too small to weigh by its own variance weighs; a revision-2 node would weigh by its own
variance where its peers and the server expect a public weight. The server drops a node
of another revision at its first reply, by name (:mod:`fa_hetdp.server.strategy`)."""

SETTINGS_DOCUMENT: Final = "settings-document"
"""The key under which :func:`summation_inputs` holds a drop-in's settings document."""


def summation_inputs(request: Mapping[str, Any], settings_document: str) -> dict[str, Any]:
    """Return what a summation's masks are bound to: the request's public inputs and the settings.

    ``settings_document``: a drop-in measurement's settings document as the node resolved it
    (:meth:`fa_hetdp.flowerkit.measurement.SentSettings.to_json`, the budget and the settings
    every node was sent at the key advertisement; empty: the run config's session, the same on
    every node). A server that sent nodes different documents (a larger epsilon to one, which
    then adds a smaller noise share) gets no decodable sum.
    """
    inputs = public_inputs(request)
    if settings_document:
        inputs[SETTINGS_DOCUMENT] = settings_document
    return inputs


# ---------------------------------------------------------------------------- progress
@final
class Event:
    """Events of the server's JSON-lines progress file (read by ``fa-hetdp run``)."""

    NODES: Final = "nodes"
    """The expected nodes connected."""
    STEP: Final = "step"
    """One step finished (with ``step``, ``sent``, ``replied``)."""
    STAGE1: Final = "stage1"
    """Stage 1 assembled (with ``clients``)."""
    DESIGN: Final = "design"
    """A meta-analysis' design resolved (with ``design`` and ``reason``), before any release."""
    DONE: Final = "done"
    """The result file was written with ``status = "success"``."""
    ABORTED: Final = "aborted"
    """The run aborted (with ``reason``)."""
