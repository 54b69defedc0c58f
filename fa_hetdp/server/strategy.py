"""The protocol strategy: sampling, thresholds, timeouts, releases, assembling the results.

:class:`HeterogeneityStrategy` drives one private measurement (docs/design.md, "The private
protocol"; Thm 3.3, 3.8, 3.13) over any :class:`Transport` (the ServerApp's is Flower's
``Grid``; tests can use an in-memory one). Steps, each one message per active client:

1. ``advertise_keys`` -- secagg setup; clients report ``d`` and their public keys.
2. ``share_keys`` -- clients send encrypted Shamir shares for their neighbours.
   (``adaptive_floor`` only: ``stage0_input`` / ``stage0_unmask`` -- a noisy histogram of the
   ``s_i^2`` picks the floor, :func:`fa_hetdp.protocol.assemble_floor`; summations shift by 1.)
3. ``stage1_input`` -- masked ``[x, w x, w]`` + noise shares (summation 0).
4. ``stage1_unmask`` -- survivors reveal the shares that remove the masks; the server decodes
   the sum and assembles ``mu'``, ``mu_bar'`` (:func:`fa_hetdp.protocol.assemble_stage1`).
5. ``stage2_input`` -- with the broadcast ``clip(mu')``, ``mu_bar'``: masked
   ``[(x - mu')^2, w (x - mu_bar')^2]`` + noise shares (summation 1).
6. ``stage2_unmask`` -- the stage-2 sum; ``D''``, ``Q''``, ``I2''``, ``I2'''``
   (:func:`fa_hetdp.protocol.assemble_stage2`).

Analyses. Steps 1 and 2's key advertisement are the same for every run; what follows is the
analysis' (:data:`ANALYSES`, by the ``analysis`` setting): the paper's stages above, or
``"meta"``, the meta-analysis of the clients' records in the design chosen for the public
counts (:mod:`fa_hetdp.server.meta_design`): rounds A, B, C on summations 0, 1, 2, the same
steps and secure aggregation (:mod:`fa_hetdp.server.meta`), or one plain ``silo_summaries``
step, every silo's own noisy summaries (:mod:`fa_hetdp.server.silo_summaries`).

Dropouts. An error reply, a missing reply (timeout) or a malformed reply (undecodable, or
rejected by the secagg server) removes the client from the rest of the session. A step goes
on while at least ``threshold`` clients remain, and the run aborts with the step, the counts
and the threshold in its reason otherwise. A client that drops before sending a masked input
loses its noise share: the privacy actually spent is computed from the shares that arrived
(:meth:`fa_hetdp.protocol.ProtocolPlan.noise_fraction`) under exact composition.

Results are written atomically by :func:`server.results.write_result`: ``status =
"running"`` once the plan is known and again after each release (what went out so far, with
its cost: a ServerApp stopped mid-run leaves its releases on record), then ``status =
"success"`` with every private value, or ``status = "aborted"`` with the reason (never a file
that claims success for an aborted run, and never a failure over an earlier success);
``{run_id}`` in the path becomes the run id. The ``privacy`` part
(:func:`server.results.privacy_section`) says whether the setting is differentially private
at all, what was released and what it cost, also for an abort after stage 1; a release that
would spend more than ``max-epsilon`` because noise shares are missing is refused unless
``on-degraded = "release"``.

Partitions: each node reports its ``partition-id``, ``num-partitions`` and fa-hetdp version;
nodes that share a partition id, report another ``num-partitions`` than the majority, or run
another version than the server are dropped with the reason.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

import numpy as np

from fa_hetdp.accuracy.assumptions import scenario_assumptions
from fa_hetdp.config.protocol import ProtocolConfig
from fa_hetdp.dp.rng import csprng_generator
from fa_hetdp.errors import AggregationError, FaHetdpError, PrivacyParameterError
from fa_hetdp.flowerkit.limits import step_limits
from fa_hetdp.flowerkit.settings import SERVER_STREAM, RunSettings
from fa_hetdp.flowerkit.steps import (
    ADVERTISE_KEYS,
    CONSISTENCY_STEP,
    INPUT_STEP,
    SHARE_KEYS,
    UNMASK_STEP,
    Event,
    Key,
)
from fa_hetdp.flowerkit.wire import Limits
from fa_hetdp.protocol.client import contribution_encoding
from fa_hetdp.protocol.floor import FloorChoice, uses_adaptive_floor
from fa_hetdp.protocol.meta_server import PrivateMetaAnalysis
from fa_hetdp.protocol.plan import Broadcast, ProtocolPlan, SumStage, plan_protocol
from fa_hetdp.protocol.server import (
    PrivateStatistics,
    Stage1Release,
    assemble_floor,
    assemble_stage1,
    assemble_stage2,
    privacy_spent_of,
)
from fa_hetdp.protocol.sum_range import check_sum_range
from fa_hetdp.registry import STATISTICS, value_of
from fa_hetdp.report.results import sigmas_section, statistics_section
from fa_hetdp.secagg.encoding import FixedPointEncoding
from fa_hetdp.secagg.errors import SecAggError
from fa_hetdp.secagg.server import SecAggServer, SumResult
from fa_hetdp.server.meta import check_count
from fa_hetdp.server.meta_design import meta_analysis
from fa_hetdp.server.results import (
    degraded_refusal,
    floor_section,
    privacy_section,
    result_path,
    secagg_section,
    simulation_caveats,
    write_result,
)

#: Flower's logger (a child of ``flwr``): ``flwr log`` and ``flwr run --stream`` show it.
log = logging.getLogger("flwr.fa_hetdp.server")

__all__ = [
    "ANALYSES",
    "Analysis",
    "HeterogeneityStrategy",
    "ProtocolAbortError",
    "Session",
    "StepOutcome",
    "Transport",
]


_T = TypeVar("_T")


class ProtocolAbortError(AggregationError):
    """The run stopped: too few clients at some step (or too few nodes registered)."""


class Transport(Protocol):
    """How the strategy reaches the clients (Flower's ``Grid`` in the ServerApp)."""

    def node_ids(self) -> list[int]:
        """Ids of the nodes connected now."""
        ...

    def exchange(
        self, step: str, payloads: Mapping[int, Mapping[str, Any]], timeout: float
    ) -> tuple[dict[int, dict[str, Any]], dict[int, str]]:
        """Send one payload per node; return the decoded replies and the dropouts' reasons."""
        ...


@dataclass
class StepOutcome:
    """What happened at one step."""

    step: str
    sent: int
    replied: int
    dropouts: dict[int, str]
    seconds: float


@dataclass(frozen=True)
class Session:
    """One secure-aggregation session once the keys are advertised: who is in it, and how.

    ``active`` is the strategy's live set of nodes still in the session (each round removes
    its dropouts); ``advertised`` holds the accepted ``advertise_keys`` replies by node.
    """

    transport: Transport
    server: SecAggServer
    nodes_of: Mapping[int, int]
    ids: Mapping[int, int]
    active: set[int]
    n: int
    d: int
    advertised: Mapping[int, Mapping[str, Any]]

    @property
    def route(self) -> tuple[Mapping[int, int], Mapping[int, int], set[int]]:
        """``(nodes_of, ids, active)``: the arguments every round of the strategy takes."""
        return self.nodes_of, self.ids, self.active


@dataclass(frozen=True)
class Analysis:
    """What a run measures, as the strategy drives it (the ``analysis`` setting).

    ``summations``: the secure sums of the session (from the protocol settings); ``rounds``:
    everything after the key advertisement, returning the result document; ``check_reply``:
    what the analysis needs of a client's first reply. The setup steps
    (nodes, sampling, key advertisement, partition checks) are the same for every analysis.
    """

    summations: Callable[[ProtocolConfig], int]
    rounds: Callable[[HeterogeneityStrategy, Session], dict[str, Any]]
    check_reply: Callable[[Mapping[str, Any]], str | None] = lambda reply: None
    """Why a client's ``advertise_keys`` reply is unusable for this analysis (None: usable);
    such a client is dropped before the key directory is fixed."""


def _floats(values: np.ndarray) -> list[float]:
    return [float(v) for v in np.asarray(values, dtype=np.float64).ravel()]


@dataclass
class HeterogeneityStrategy:
    """Runs the two-stage protocol with secure aggregation and writes the result file.

    Parameters
    ----------
    settings : RunSettings
        The resolved run settings (scenario, privacy, secagg, timeouts, paths).
    clock : callable
        Monotonic clock (tests may replace it).
    run_id : int or None
        Flower's run id (recorded, and ``{run_id}`` in the result path).
    version : str or None
        The fa-hetdp version the ClientApps must run (None: not checked).
    write_results : bool
        Write the result file (and the partial ones); False for a drop-in measurement
        that was not asked to (:func:`fa_hetdp.flower.measure`). The returned document and
        :attr:`result` are the same either way.
    """

    settings: RunSettings
    clock: Callable[[], float] = time.monotonic
    run_id: int | None = None
    version: str | None = None
    steps: list[StepOutcome] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    partitions: dict[int, int] = field(default_factory=dict)
    write_results: bool = True
    result: PrivateStatistics | None = field(default=None, init=False)
    """The private statistics, once the run succeeded."""
    meta_result: PrivateMetaAnalysis | None = field(default=None, init=False)
    """The private meta-analysis, once a run with ``analysis = "meta"`` succeeded."""
    partial_privacy: Callable[[], dict[str, Any]] | None = field(default=None, init=False)
    """An analysis' ``privacy`` part of an unfinished run (None: the paper protocol's)."""

    def __post_init__(self) -> None:
        if self.settings.mode == "simulation" and self.settings.seed is not None:
            seq = np.random.SeedSequence(self.settings.seed, spawn_key=(SERVER_STREAM,))
            self.rng = np.random.Generator(np.random.PCG64(seq))
        else:
            self.rng = csprng_generator()
        self._start = self.clock()
        self.result_file = result_path(self.settings.result_path, self.run_id)
        self._target = self.result_file  # the configured path ({run_id} filled in)
        self._partial: Path | None = None  # where this run's unfinished document went
        self._plan: ProtocolPlan | None = None
        self._released: list[str] = []
        self._stage1_fraction: float | None = None
        self._floor_fraction: float | None = None  # adaptive_floor: stage 0's noise fraction
        self._floor: FloorChoice | None = None
        self._stage0: list[int] | None = None  # adaptive_floor: partitions in the stage-0 sum
        self._session_k: int | None = None  # neighbours per client, once sampled
        self._session_d: int | None = None  # the agreed dimension, once reported
        self._protocol_start = self._start  # set when the secagg session starts

    # ---------------------------------------------------------------- progress / results
    def progress(self, event: str, **fields: Any) -> None:
        """Log the event through Flower's logger; append it to the progress file (if any)."""
        record = {"event": event, "elapsed": round(self.clock() - self._start, 3), **fields}
        if self.run_id is not None:  # which result file is this run's ({run_id} in its path)
            record["run_id"] = self.run_id
        log.info("fa-hetdp: %s", " ".join(f"{k}={v}" for k, v in record.items()))
        path = self.settings.progress_path
        if path is None:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as fh:
            fh.write(json.dumps(record) + "\n")

    def _base_document(self) -> dict[str, Any]:
        s = self.settings
        return {
            "run_id": self.run_id,
            "scenario": s.scenario.name,
            "mode": s.mode,
            "seed": s.seed,
            "num_clients": s.num_clients,
            "secagg_threshold": s.threshold,
            "secagg_neighbours": "complete" if s.neighbours is None else s.neighbours,
            "secagg": secagg_section(s),
            "config": {
                k: (dict(v) if isinstance(v, Mapping) else v)
                for k, v in dataclasses.asdict(s.protocol).items()
            },
            "steps": [
                {
                    "step": o.step,
                    "sent": o.sent,
                    "replied": o.replied,
                    "dropouts": {str(k): v for k, v in o.dropouts.items()},
                    "seconds": round(o.seconds, 4),
                }
                for o in self.steps
            ],
            "survivors": {o.step: o.replied for o in self.steps},
            "timings": {k: round(v, 4) for k, v in self.timings.items()},
        }

    def abort(self, reason: str) -> ProtocolAbortError:
        """Write the abort result (status ``"aborted"``) and return the exception to raise."""
        self.timings["total"] = self.clock() - self._start
        self._write_partial("aborted", reason)
        self.progress(Event.ABORTED, reason=reason)
        return ProtocolAbortError(reason)

    def log_release(self) -> None:
        """Write the result file with ``status = "running"``: what went out so far, its cost.

        Called once the plan is known and after each release, before the next step goes
        out, so a ServerApp stopped at any later point (its SuperLink stopped, the process
        killed) leaves every release it made on record; a reader that finds the file still
        ``"running"`` after the run ended marks it aborted (:func:`server.results.read_result`).
        """
        self._write_partial("running", None)

    def _write_partial(self, status: str, reason: str | None) -> None:
        """Write an unfinished run's document: ``status``, ``reason``, releases and cost."""
        document: dict[str, Any] = {"status": status}
        if reason is not None:
            document["reason"] = reason
        if self._plan is not None:  # what was released so far, and its cost
            privacy = privacy_section(
                self._plan,
                None,
                released=self._released,
                stage1_fraction=self._stage1_fraction,
                floor_fraction=self._floor_fraction,
                secagg=self.settings.secagg_parameters(),
                caveats=simulation_caveats(self.settings),
            )
            document["differentially_private"] = privacy["differentially_private"]
            document["privacy"] = privacy
        elif self.partial_privacy is not None:  # another analysis: its own statement
            privacy = self.partial_privacy()
            document["differentially_private"] = privacy["differentially_private"]
            document["privacy"] = privacy
        document.update(self._base_document())
        if self.write_results:
            self._settle_file(write_result(self._target, document), partial=True)

    def _settle_file(self, written: Path, *, partial: bool) -> None:
        """Record where the document went; remove this run's earlier partial file elsewhere.

        A partial document goes beside an earlier success at the configured path (never over
        it); the next one, or the final result, replaces it, so no stale ``"running"`` file of
        this run is left beside the result.
        """
        if self._partial is not None and self._partial != written:
            self._partial.unlink(missing_ok=True)
        self._partial = written if partial else None
        self.result_file = written

    def message_limits(self, step: str) -> Limits:
        """Return what one reply of ``step`` may make the server decode.

        :mod:`fa_hetdp.flowerkit.limits`, sized from this session's ``k`` and ``d``; the
        absolute caps before the clients are sampled.
        """
        if self._session_k is None:
            return Limits()
        return step_limits(step, k=self._session_k, d=self._session_d or 0)

    # ---------------------------------------------------------------- nodes
    def wait_for_nodes(self, transport: Transport, poll: float = 0.2) -> list[int]:
        """Wait until ``num_clients`` nodes are connected (``node-wait-timeout``)."""
        wanted = self.settings.num_clients
        deadline = self.clock() + self.settings.node_wait_timeout
        nodes = transport.node_ids()
        while len(nodes) < wanted:
            if self.clock() > deadline:
                raise self.abort(
                    f"only {len(nodes)} of the expected {wanted} nodes connected within "
                    f"{self.settings.node_wait_timeout:.0f} s (node-wait-timeout)"
                )
            time.sleep(poll)
            nodes = transport.node_ids()
        self.progress(Event.NODES, connected=len(nodes), wanted=wanted)
        return nodes

    def sample(self, nodes: Sequence[int]) -> list[int]:
        """Choose ``num_clients`` of the connected nodes uniformly at random."""
        ordered = sorted(set(int(n) for n in nodes))
        n = self.settings.num_clients
        if len(ordered) == n:
            return ordered
        chosen = self.rng.choice(len(ordered), size=n, replace=False)
        return sorted(ordered[int(i)] for i in chosen)

    # ---------------------------------------------------------------- steps
    def _step(
        self,
        transport: Transport,
        step: str,
        payloads: Mapping[int, Mapping[str, Any]],
        active: set[int],
        *,
        check: Callable[[int, Mapping[str, Any]], str | None] | None = None,
        minimum: int | None = None,
    ) -> dict[int, dict[str, Any]]:
        """Send one step's payloads; return the usable replies (the rest are dropouts).

        ``check(node, reply)``: why a node's reply is unusable (None: usable); such a reply
        drops that node like a missing one. ``minimum``: the replies the step needs to go on
        (default: the secure-aggregation threshold).
        """
        started = self.clock()
        replies, dropouts = transport.exchange(step, payloads, self.settings.stage_timeout)
        for node in payloads:
            if node not in replies and node not in dropouts:
                dropouts[node] = "no reply"
        replies = {k: v for k, v in replies.items() if k in payloads and k not in dropouts}
        for node, reply in list(replies.items()):
            if check is not None and (why := check(node, reply)) is not None:
                del replies[node]
                dropouts[node] = f"malformed: {why}"
        return self._record_step(step, payloads, replies, dropouts, active, started, minimum)

    def _record_step(
        self,
        step: str,
        payloads: Mapping[int, Mapping[str, Any]],
        replies: dict[int, dict[str, Any]],
        dropouts: dict[int, str],
        active: set[int],
        started: float,
        minimum: int | None = None,
    ) -> dict[int, dict[str, Any]]:
        active.difference_update(dropouts)
        seconds = self.clock() - started
        outcome = StepOutcome(step, len(payloads), len(replies), dict(dropouts), seconds)
        self.steps.append(outcome)
        self.timings[step] = seconds
        self.progress(Event.STEP, step=step, sent=len(payloads), replied=len(replies))
        if minimum is None:
            self._check_threshold(step, len(replies), len(payloads))
        elif len(replies) < minimum:
            raise self.abort(
                f"step {step!r}: {len(replies)} of {len(payloads)} clients replied usably, "
                f"fewer than the {minimum} it needs"
            )
        return replies

    def _check_threshold(self, step: str, remaining: int, sent: int) -> None:
        if remaining < self.settings.threshold:
            raise self.abort(
                f"step {step!r}: {remaining} of {sent} clients remain, below the "
                f"secure-aggregation threshold t={self.settings.threshold}; aborting "
                "(the masked sums cannot be recovered)"
            )

    # ---------------------------------------------------------------- the protocol
    def _encoding(
        self, plan: ProtocolPlan, stage: SumStage, n: int, broadcast: Broadcast | None = None
    ) -> FixedPointEncoding:
        # The contributions in Z_2^m: a ddg/skellam run's lattice integers (protocol.client).
        bits = self.settings.modulus_bits
        return contribution_encoding(plan, stage, n, modulus_bits=bits, broadcast=broadcast)

    def run(self, transport: Transport) -> dict[str, Any]:
        """Run the whole protocol; write and return the result document.

        Any failure writes a result with ``status = "aborted"`` and its reason (replacing a
        result file left at the path by an earlier run).

        Raises
        ------
        ProtocolAbortError
            Too few nodes or too few clients left at some step, or the protocol could not be
            completed (invalid settings, secure aggregation failed).
        """
        try:
            return self._run(transport)
        except ProtocolAbortError:
            raise
        except (FaHetdpError, SecAggError) as exc:
            raise self.abort(f"{type(exc).__name__}: {exc}") from exc
        except Exception as exc:
            self.abort(f"internal error: {type(exc).__name__}: {exc}")
            raise

    def _run(self, transport: Transport) -> dict[str, Any]:
        s = self.settings
        wait_start = self.clock()
        nodes = self.wait_for_nodes(transport)
        self.timings["wait-nodes"] = self.clock() - wait_start
        sampled = self.sample(nodes)
        n = len(sampled)
        self._session_k = n - 1 if s.neighbours is None else min(s.neighbours, n - 1)
        ids = {node: index + 1 for index, node in enumerate(sampled)}
        nodes_of = {cid: node for node, cid in ids.items()}
        active = set(sampled)
        self._protocol_start = self.clock()
        analysis = ANALYSES[str(s.protocol.setting("analysis"))]
        try:
            server = SecAggServer(
                sorted(ids.values()),
                threshold=s.threshold,
                num_summations=analysis.summations(s.protocol),
                neighbours="complete" if s.neighbours is None else s.neighbours,
                rng=self.rng,
                consistency=s.threat_model == "malicious-server",
            )
        except ValueError as exc:
            raise self.abort(f"invalid secure-aggregation settings: {exc}") from exc

        # 1. advertise keys (setup) ---------------------------------------------------------
        setups = server.setup_messages()  # each client: its neighbourhood, O(k)
        payloads = {
            node: {Key.CLIENT_ID: ids[node], Key.SESSION_SIZE: n, Key.SETUP: setups[ids[node]]}
            for node in sampled
        }
        replies = self._step(transport, ADVERTISE_KEYS, payloads, active)
        dims: dict[int, int] = {}
        for node, reply in list(replies.items()):
            d_value = reply.get(Key.D)
            if (unusable := analysis.check_reply(reply)) is not None:
                self._reject(replies, node, unusable, active)
            elif isinstance(d_value, int) and not isinstance(d_value, bool) and d_value >= 1:
                dims[node] = d_value
            else:
                self._reject(replies, node, f"bad dimension {d_value!r}", active)
        if not dims:
            raise self.abort("no client reported a usable dimension d")
        self._check_partitions(replies, ids, active)
        values, counts = np.unique(list(dims.values()), return_counts=True)
        d = int(values[int(np.argmax(counts))])
        self._session_d = d
        for node, d_value in dims.items():
            if d_value != d:
                self._reject(replies, node, f"d={d_value}, majority d={d}", active)
        self._accept(server.receive_advertise_keys, ADVERTISE_KEYS, replies, ids, active)
        n = len(server.keys)  # the key directory's count: the n each client plans with
        session = Session(transport, server, nodes_of, ids, active, n=n, d=d, advertised=replies)
        return analysis.rounds(self, session)

    def _heterogeneity(self, session: Session) -> dict[str, Any]:
        """Run the paper's rounds after the key advertisement: share keys, stages (0,) 1, 2."""
        s = self.settings
        transport, server, n, d = session.transport, session.server, session.n, session.d
        nodes_of, ids, active = route = session.route
        protocol_start = self._protocol_start
        plan = plan_protocol(s.protocol, n=n, d=d)
        if (problem := plan.encoding_problem(s.modulus_bits)) is not None:
            raise PrivacyParameterError(problem)  # a share that rounds to 0: abort, nothing sent
        self._plan = plan
        self.log_release()  # on record from here on: nothing released yet

        # 2. share keys ---------------------------------------------------------------------
        directories = self._secagg(server.key_directory)  # each client: its neighbours' keys
        self._round(transport, SHARE_KEYS, directories, server.receive_share_keys, *route)

        # 2b. stage 0 (adaptive_floor): a noisy histogram of the s_i^2 picks the floor ------
        floor: dict[str, float] = {}
        if plan.adaptive:
            sum0 = self._summation(transport, server, 0, self._encoding(plan, 0, n), *route)
            n0 = len(sum0.survivors)
            self._floor_fraction = plan.noise_fraction(n0)
            spent0 = privacy_spent_of(plan, 1.0, 1.0, self._floor_fraction).epsilon
            if (refused := degraded_refusal(s, spent0, "stage 0")) is not None:
                raise self.abort(refused)  # nothing released yet
            self._stage0 = sorted(self.partitions.get(c, -1) for c in sum0.survivors)
            self._floor, plan = assemble_floor(sum0.sum, plan, noise_shares=n0, rng=self.rng, n=n0)
            self._plan, floor = plan, {Key.FLOOR: float(self._floor.floor)}
            v_floor = floor[Key.FLOOR]
            self._released.append(f"stage 0: noisy s_i^2 histogram; v_floor={v_floor:.4g} sent")
            self.log_release()
        fraction0 = 1.0 if self._floor_fraction is None else self._floor_fraction

        # 3-4. stage 1 ------------------------------------------------------------------
        encoding1 = self._encoding(plan, 1, n)
        sum1 = self._summation(transport, server, 1, encoding1, *route, extra=floor)
        n1 = len(sum1.survivors)
        refused = degraded_refusal(
            s, privacy_spent_of(plan, plan.noise_fraction(n1), 1.0, fraction0).epsilon, "stage 1"
        )
        if refused is not None:
            raise self.abort(refused)  # nothing released yet
        stage1 = assemble_stage1(sum1.sum, plan, n=n1, noise_shares=n1, rng=self.rng)
        self._stage1_fraction = stage1.noise_fraction
        self._released.append(
            f"stage 1: mu', mu_bar' broadcast to the {len(active)} remaining clients"
        )
        self.log_release()
        self.progress(Event.STAGE1, clients=n1)

        # 5-6. stage 2 ------------------------------------------------------------------
        broadcast = (stage1.mu_prime_broadcast, stage1.weighted_mu_prime)
        encoding2 = self._encoding(plan, 2, n, broadcast)
        extra = {
            Key.MU_PRIME: stage1.mu_prime_broadcast,
            Key.WEIGHTED_MU_PRIME: stage1.weighted_mu_prime,
        }
        sum2 = self._summation(transport, server, 2, encoding2, nodes_of, ids, active, extra=extra)
        n2 = len(sum2.survivors)
        result = assemble_stage2(
            sum2.sum, plan, stage1, n=n2, noise_shares=n2, rng=self.rng, floor_fraction=fraction0
        )
        result = dataclasses.replace(result, floor_choice=self._floor)
        refused = degraded_refusal(s, result.spent.epsilon, "the stage-2 release")
        if refused is not None:
            raise self.abort(refused)
        self.timings["protocol"] = self.clock() - protocol_start
        self.timings["total"] = self.clock() - self._start
        self._released.append("stage 2: every statistic of the result")
        document = self._success_document(plan, stage1, result, sum1, sum2)
        self.result = result
        if self.write_results:
            self._settle_file(write_result(self._target, document), partial=False)
        self.progress(Event.DONE)
        return document

    def _check_partitions(
        self, replies: dict[int, dict[str, Any]], ids: Mapping[int, int], active: set[int]
    ) -> None:
        """Drop nodes with another version, a shared partition id or another num-partitions."""
        for node, reply in list(replies.items()):
            version = reply.get(Key.VERSION)
            if self.version is not None and version != self.version:
                why = f"fa-hetdp {version} != the server's {self.version}"
                self._reject(replies, node, why, active)
        nums = [r.get(Key.NUM_PARTITIONS) for r in replies.values()]
        counted = [v for v in nums if isinstance(v, int) and not isinstance(v, bool) and v > 0]
        majority = max(set(counted), key=counted.count) if counted else None
        owners: dict[int, list[int]] = {}
        for node, reply in replies.items():
            pid = reply.get(Key.PARTITION_ID)
            if isinstance(pid, int) and not isinstance(pid, bool) and pid >= 0:
                owners.setdefault(pid, []).append(node)
        for node, reply in list(replies.items()):
            pid, num = reply.get(Key.PARTITION_ID), reply.get(Key.NUM_PARTITIONS)
            if isinstance(pid, int) and pid >= 0 and len(owners.get(pid, [])) > 1:
                self._reject(replies, node, f"partition-id {pid} claimed by several nodes", active)
            elif isinstance(pid, int) and pid >= 0 and num != majority:
                why = f"num-partitions={num!r}, the other nodes have {majority}"
                self._reject(replies, node, why, active)
            elif isinstance(pid, int) and not isinstance(pid, bool):
                self.partitions[ids[node]] = pid

    def _secagg(self, call: Callable[[], _T]) -> _T:
        """Call a secagg server method; its ``ProtocolAborted`` aborts the run."""
        try:
            return call()
        except SecAggError as exc:
            raise self.abort(f"secure aggregation aborted: {exc}") from exc

    def _reject(
        self, replies: dict[int, dict[str, Any]], node: int, reason: str, active: set[int]
    ) -> None:
        """Count a reply the server could not use (malformed or rejected) as a dropout."""
        replies.pop(node, None)
        active.discard(node)
        self.steps[-1].replied -= 1
        self.steps[-1].dropouts[node] = f"malformed: {reason}"

    def _accept(
        self,
        receive: Callable[[Mapping[str, Any]], None],
        step: str,
        replies: dict[int, dict[str, Any]],
        ids: Mapping[int, int],
        active: set[int],
    ) -> None:
        """Feed the replies to the secagg server; a rejected reply is a dropout.

        The reply's ``sender`` must be the id the server gave that node (no impersonation).
        """
        for node, reply in list(replies.items()):
            try:
                message = reply[Key.SECAGG]
                if message.get("sender") != ids[node]:
                    raise ValueError(
                        f"sender {message.get('sender')!r} is not this node's id {ids[node]}"
                    )
                receive(message)
            except (SecAggError, KeyError, TypeError, ValueError, AttributeError) as exc:
                self._reject(replies, node, str(exc), active)
        self._check_threshold(step, len(replies), self.steps[-1].sent)

    def _summation(
        self,
        transport: Transport,
        server: SecAggServer,
        stage: int,
        encoding: FixedPointEncoding,
        nodes_of: Mapping[int, int],
        ids: Mapping[int, int],
        active: set[int],
        extra: Mapping[str, Any] | None = None,
    ) -> SumResult:
        requests = self._secagg(lambda: server.start_summation(encoding))
        route = (nodes_of, ids, active)
        self._round(
            transport, INPUT_STEP[stage], requests, server.receive_masked_input, *route, extra
        )
        if server.consistency:  # malicious server: every survivor signs the list it is shown
            check = self._secagg(server.consistency_request)  # fixes the survivor list
            checks = dict.fromkeys(server.survivors, check)
            self._round(
                transport, CONSISTENCY_STEP[stage], checks, server.receive_consistency, *route
            )
        unmask = self._secagg(server.unmask_requests)  # each survivor: its neighbourhood
        self._round(transport, UNMASK_STEP[stage], unmask, server.receive_unmask, *route)
        try:  # the encoding refuses a sum that count honest inputs cannot reach
            result = server.finish_summation()
        except SecAggError as exc:
            raise self.abort(f"secure aggregation aborted at the stage-{stage} sum: {exc}") from exc
        if self._plan is not None:  # and the plan's tighter range (protocol.sum_range)
            check_sum_range(result.sum, self._plan, stage, len(result.survivors), encoding)
        for client, reason in result.reasons.items():  # dropped for cause: shown with why
            if nodes_of[client] in active:
                active.discard(nodes_of[client])
                self.steps[-1].dropouts[nodes_of[client]] = f"secagg: {reason}"
        return result

    def _round(
        self,
        transport: Transport,
        step: str,
        messages: Mapping[int, Any],
        receive: Callable[[Mapping[str, Any]], None],
        nodes_of: Mapping[int, int],
        ids: Mapping[int, int],
        active: set[int],
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        """One secagg round: each active client's own message (and ``extra``) out, replies in."""
        payloads = {
            nodes_of[c]: {Key.SECAGG: message, **(extra or {})}
            for c, message in messages.items()
            if nodes_of[c] in active
        }
        replies = self._step(transport, step, payloads, active)
        self._accept(receive, step, replies, ids, active)

    def _success_document(
        self,
        plan: ProtocolPlan,
        stage1: Stage1Release,
        result: PrivateStatistics,
        sum1: SumResult,
        sum2: SumResult,
    ) -> dict[str, Any]:
        secagg = self.settings.secagg_parameters()
        privacy = privacy_section(
            plan,
            result.spent,
            released=self._released,
            secagg=secagg,
            caveats=simulation_caveats(self.settings),
        )
        statistics: dict[str, list[float] | None] = {}
        for spec in STATISTICS:  # the table of statistics: key -> per-coordinate values
            values = value_of(result, spec.key)  # a derived one from its source
            statistics[spec.key] = None if values is None else _floats(values)
        return {
            "status": "success",
            "differentially_private": privacy["differentially_private"],
            **self._base_document(),
            "secagg": secagg_section(self.settings, plan, stage1),  # with the ring's words
            "n": plan.n,
            "d": plan.d,
            "min_honest_clients": plan.t,
            "clients_in_sum": {"stage1": len(sum1.survivors), "stage2": len(sum2.survivors)},
            "partitions_in_sum": {
                **({} if self._stage0 is None else {"stage0": self._stage0}),
                "stage1": sorted(self.partitions.get(c, -1) for c in sum1.survivors),
                "stage2": sorted(self.partitions.get(c, -1) for c in sum2.survivors),
            },
            "noise_shares": {"stage1": result.noise_shares[0], "stage2": result.noise_shares[1]},
            "statistics": statistics,
            "released": statistics_section(  # intervals, noise, flags, the plan before the run
                result, plan, assumptions=scenario_assumptions(self.settings.scenario)
            ),
            "summary": {  # the privacy spent is in "privacy", stated so that it holds
                k: v for k, v in result.summary().items() if k not in _SPENT_KEYS
            },
            **sigmas_section(result),  # "sigmas" and the per-coordinate "stage2_sigmas"
            "privacy": privacy,
            "labels": list(result.labels),
            "adaptive_floor": floor_section(plan, self._floor),  # cost: privacy.per_release
            "weighted_denominator_clamped": stage1.b_clamped,
            "encoding_error_bound": {
                "stage1": _floats(sum1.max_error),
                "stage2": _floats(sum2.max_error),
            },
        }


_SPENT_KEYS = frozenset({"epsilon_spent", "delta_spent"})


ANALYSES: Mapping[str, Analysis] = {
    # the paper's statistics: stage 0 (adaptive floor only), stages 1 and 2
    "heterogeneity": Analysis(
        summations=lambda p: 3 if uses_adaptive_floor(p) else 2,
        rounds=HeterogeneityStrategy._heterogeneity,
    ),
    # the meta-analysis (server.meta_design): the design chosen for the public counts, either
    # rounds A, B, C on summations 0, 1, 2 (server.meta) or one plain step of every silo's own
    # noisy summaries (server.silo_summaries)
    "meta": Analysis(summations=lambda p: 3, rounds=meta_analysis, check_reply=check_count),
}
"""The analyses a run can make, by the value of the ``analysis`` setting."""
