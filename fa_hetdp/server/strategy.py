"""The run's strategy: nodes, sampling, the key advertisement, then the run's analysis.

:class:`HeterogeneityStrategy` drives one private measurement over any :class:`Transport`
(the ServerApp's is Flower's ``Grid``; tests can use an in-memory one). Every run starts the
same way, each step one message per active client:

1. wait for ``num-clients`` nodes and sample them;
2. ``advertise_keys`` -- secagg setup; clients report ``d`` (and what the analysis needs of
   their first reply, :meth:`Analysis.check_reply <fa_hetdp.server.analysis.Analysis.
   check_reply>`) and their public keys.

Then it hands the :class:`~fa_hetdp.server.session.AnalysisSession` to the run's analysis
(:data:`ANALYSES`, by the ``analysis`` setting; :mod:`fa_hetdp.server.analysis`): the paper's
stages (:mod:`fa_hetdp.server.heterogeneity`), or the meta-analysis in the design chosen for
the public counts (:mod:`fa_hetdp.server.meta_design`: the secure sums of
:mod:`fa_hetdp.server.meta` or the silo summaries of :mod:`fa_hetdp.server.silo_summaries`).
The analyses use the session's public methods only (secure sums, plain steps, the release log,
abort, finish).

Dropouts. An error reply, a missing reply (timeout) or a malformed reply (undecodable, or
rejected by the secagg server) removes the client from the rest of the session. A step goes
on while at least ``threshold`` clients remain, and the run aborts with the step, the counts
and the threshold in its reason otherwise (:mod:`fa_hetdp.server.session`).

Results are written atomically by :func:`server.results.write_result`: ``status =
"running"`` once the analysis' plan is known and again after each release (what went out so
far, with its cost: a ServerApp stopped mid-run leaves its releases on record), then ``status
= "success"`` with the analysis' document, or ``status = "aborted"`` with the reason (never a
file that claims success for an aborted run, and never a failure over an earlier success);
``{run_id}`` in the path becomes the run id.

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
from typing import Any

import numpy as np

from fa_hetdp.dp.rng import csprng_generator
from fa_hetdp.errors import FaHetdpError
from fa_hetdp.flowerkit.limits import advertisement_limits, step_limits
from fa_hetdp.flowerkit.settings import SERVER_STREAM, RunSettings
from fa_hetdp.flowerkit.steps import ADVERTISE_KEYS, WIRE_REVISION, Event, Key
from fa_hetdp.flowerkit.wire import Limits
from fa_hetdp.protocol.meta_server import PrivateMetaAnalysis
from fa_hetdp.protocol.server import PrivateStatistics
from fa_hetdp.secagg.errors import SecAggError
from fa_hetdp.secagg.server import SecAggServer
from fa_hetdp.server.analysis import Analysis
from fa_hetdp.server.heterogeneity import HeterogeneityAnalysis
from fa_hetdp.server.meta_design import MetaAnalysis
from fa_hetdp.server.results import result_path, secagg_section, write_result
from fa_hetdp.server.session import (
    AnalysisSession,
    ProtocolAbortError,
    StepOutcome,
    Transport,
)

#: Flower's logger (a child of ``flwr``): ``flwr log`` and ``flwr run --stream`` show it.
log = logging.getLogger("flwr.fa_hetdp.server")

__all__ = [
    "ANALYSES",
    "Analysis",
    "AnalysisSession",
    "HeterogeneityStrategy",
    "ProtocolAbortError",
    "StepOutcome",
    "Transport",
]


ANALYSES: Mapping[str, Callable[[], Analysis]] = {
    # the paper's statistics: stage 0 (adaptive floor only), stages 1 and 2
    "heterogeneity": HeterogeneityAnalysis,
    # the meta-analysis (server.meta_design): the design chosen for the public counts, either
    # rounds A, B, C (server.meta) or one plain step of every silo's own noisy summaries
    # (server.silo_summaries)
    "meta": MetaAnalysis,
}
"""The analyses a run can make, by the value of the ``analysis`` setting (a new one each run)."""


def _columns_mismatch(reported: Sequence[int], columns: Sequence[str]) -> str:
    """Return why a client reporting ``d`` in ``reported`` does not fit the run's ``columns``.

    The scenario's ``[data] columns`` fix the run's ``d``: a node reads exactly those columns
    of its file, so another ``d`` means it read other records (the scenario's partitions, its
    own app's records).
    """
    said = ", ".join(f"d={d}" for d in reported)
    return (
        f"{said} but the scenario's [data] columns name {len(columns)} "
        f"({', '.join(columns)}): d must equal len(columns)"
    )


@dataclass
class HeterogeneityStrategy:
    """Sets a run up, runs its analysis on the session and writes the result file.

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
        :attr:`outcome` are the same either way.
    """

    settings: RunSettings
    clock: Callable[[], float] = time.monotonic
    run_id: int | None = None
    version: str | None = None
    steps: list[StepOutcome] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    partitions: dict[int, int] = field(default_factory=dict)
    write_results: bool = True
    outcome: object = field(default=None, init=False)
    """The analysis' result once the run succeeded (:attr:`result`, :attr:`meta_result`)."""

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
        self._session: AnalysisSession | None = None
        self._session_k: int | None = None  # neighbours per client, once sampled
        self._session_d: int | None = None  # the agreed dimension, once reported
        self._protocol_start = self._start  # set when the secagg session starts

    @property
    def result(self) -> PrivateStatistics | None:
        """The private statistics, once a run of the paper's statistics succeeded."""
        return self.outcome if isinstance(self.outcome, PrivateStatistics) else None

    @property
    def meta_result(self) -> PrivateMetaAnalysis | None:
        """The private meta-analysis, once a run with ``analysis = "meta"`` succeeded."""
        return self.outcome if isinstance(self.outcome, PrivateMetaAnalysis) else None

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

    def base_document(self) -> dict[str, Any]:
        """Return the part of the result document every analysis shares."""
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
            "timings": self._rounded_timings(),
        }

    def _rounded_timings(self) -> dict[str, float]:
        return {k: round(v, 4) for k, v in self.timings.items()}

    def record_step(self, outcome: StepOutcome) -> None:
        """Add one step's outcome to the run's record (and a progress event)."""
        self.steps.append(outcome)
        self.timings[outcome.step] = outcome.seconds
        self.progress(Event.STEP, step=outcome.step, sent=outcome.sent, replied=outcome.replied)

    def abort(self, reason: str) -> ProtocolAbortError:
        """Write the abort result (status ``"aborted"``) and return the exception to raise."""
        self.timings["total"] = self.clock() - self._start
        self._write_partial("aborted", reason)
        self.progress(Event.ABORTED, reason=reason)
        return ProtocolAbortError(reason)

    def log_release(self) -> None:
        """Write the result file with ``status = "running"``: what went out so far, its cost.

        Called once the analysis' plan is known and after each release, before the next step
        goes out, so a ServerApp stopped at any later point (its SuperLink stopped, the
        process killed) leaves every release it made on record; a reader that finds the file
        still ``"running"`` after the run ended marks it aborted
        (:func:`server.results.read_result`).
        """
        self._write_partial("running", None)

    def conclude(self, document: dict[str, Any], result: object) -> None:
        """Write the analysis' success ``document`` (with the final timings); keep ``result``."""
        self.timings["protocol"] = self.clock() - self._protocol_start
        self.timings["total"] = self.clock() - self._start
        document["timings"] = self._rounded_timings()
        self.outcome = result
        if self.write_results:
            self._settle_file(write_result(self._target, document), partial=False)
        self.progress(Event.DONE)

    def _write_partial(self, status: str, reason: str | None) -> None:
        """Write an unfinished run's document: ``status``, ``reason``, releases and cost."""
        document: dict[str, Any] = {"status": status}
        if reason is not None:
            document["reason"] = reason
        privacy = None if self._session is None else self._session.privacy_so_far()
        if privacy is not None:  # the analysis' statement of what went out, and its cost
            document["differentially_private"] = privacy["differentially_private"]
            document["privacy"] = privacy
        document.update(self.base_document())
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

        :mod:`fa_hetdp.flowerkit.limits`, sized from this session's ``k`` and ``d``; a key
        advertisement (the reply to the first request) has its own constant cap, whatever
        ``k``.

        Raises
        ------
        RuntimeError
            A step after the first one asked for before the clients are sampled.
        """
        if step == ADVERTISE_KEYS:
            return advertisement_limits()
        if self._session_k is None:
            raise RuntimeError(f"no caps for {step!r} before the clients are sampled")
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

    # ---------------------------------------------------------------- the run
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
        self._protocol_start = self.clock()
        analysis = ANALYSES[str(s.protocol.setting("analysis"))]()
        try:
            server = SecAggServer(
                sorted(ids.values()),
                threshold=s.threshold,
                num_summations=max(1, analysis.summations(s.protocol)),
                neighbours="complete" if s.neighbours is None else s.neighbours,
                rng=self.rng,
                consistency=s.threat_model == "malicious-server",
            )
        except ValueError as exc:
            raise self.abort(f"invalid secure-aggregation settings: {exc}") from exc
        session = AnalysisSession(self, transport, server, ids, clock=self.clock)
        self._session = session

        # advertise keys (setup) ------------------------------------------------------------
        setups = server.setup_messages()  # each client: its neighbourhood, O(k)
        payloads = {
            cid: {Key.CLIENT_ID: cid, Key.SESSION_SIZE: n, Key.SETUP: setups[cid]}
            for cid in ids.values()
        }
        replies = session.collect(ADVERTISE_KEYS, payloads)
        dims: dict[int, int] = {}
        for client, reply in list(replies.items()):
            d_value = reply.get(Key.D)
            if (unusable := analysis.check_reply(reply)) is not None:
                self._reject(session, replies, client, unusable)
            elif isinstance(d_value, int) and not isinstance(d_value, bool) and d_value >= 1:
                dims[client] = d_value
            else:
                self._reject(session, replies, client, f"bad dimension {d_value!r}")
        named = s.scenario.data.columns  # the run's [data] columns: d = len(columns)
        if named is not None:
            other = sorted({d_value for d_value in dims.values() if d_value != len(named)})
            for client, d_value in list(dims.items()):
                if d_value != len(named):
                    del dims[client]
                    self._reject(session, replies, client, _columns_mismatch([d_value], named))
            if not dims and other:
                raise self.abort(f"every client: {_columns_mismatch(other, named)}")
        if not dims:
            raise self.abort("no client reported a usable dimension d")
        self._check_partitions(session, replies)
        values, counts = np.unique(list(dims.values()), return_counts=True)
        d = int(values[int(np.argmax(counts))])
        self._session_d = d
        for client, d_value in dims.items():
            if d_value != d and client in replies:
                self._reject(session, replies, client, f"d={d_value}, majority d={d}")
        session.open(replies, d)
        return analysis.run(session)

    @staticmethod
    def _reject(
        session: AnalysisSession, replies: dict[int, dict[str, Any]], client: int, reason: str
    ) -> None:
        """Drop a client whose first reply the server cannot use."""
        replies.pop(client, None)
        session.drop(client, reason)

    def _check_partitions(
        self, session: AnalysisSession, replies: dict[int, dict[str, Any]]
    ) -> None:
        """Drop nodes of another wire revision or version, a shared partition id or count."""
        for client, reply in list(replies.items()):
            wire = reply.get(Key.WIRE)
            if wire != WIRE_REVISION:
                why = (
                    f"wire revision {wire!r} != the server's {WIRE_REVISION}: its masks would not "
                    "cancel with the others' (revision 2 binds them to each round's public "
                    "inputs); run the same fa-hetdp on every node"
                    if wire is not None
                    else f"no wire revision (an fa-hetdp older than revision {WIRE_REVISION}, "
                    "which binds every sum's masks to its public inputs): upgrade that node"
                )
                self._reject(session, replies, client, why)
                continue
            version = reply.get(Key.VERSION)
            if self.version is not None and version != self.version:
                why = f"fa-hetdp {version} != the server's {self.version}"
                self._reject(session, replies, client, why)
        nums = [r.get(Key.NUM_PARTITIONS) for r in replies.values()]
        counted = [v for v in nums if isinstance(v, int) and not isinstance(v, bool) and v > 0]
        majority = max(set(counted), key=counted.count) if counted else None
        owners: dict[int, list[int]] = {}
        for client, reply in replies.items():
            pid = reply.get(Key.PARTITION_ID)
            if isinstance(pid, int) and not isinstance(pid, bool) and pid >= 0:
                owners.setdefault(pid, []).append(client)
        for client, reply in list(replies.items()):
            pid, num = reply.get(Key.PARTITION_ID), reply.get(Key.NUM_PARTITIONS)
            if isinstance(pid, int) and pid >= 0 and len(owners.get(pid, [])) > 1:
                why = f"partition-id {pid} claimed by several nodes"
                self._reject(session, replies, client, why)
            elif isinstance(pid, int) and pid >= 0 and num != majority:
                why = f"num-partitions={num!r}, the other nodes have {majority}"
                self._reject(session, replies, client, why)
            elif isinstance(pid, int) and not isinstance(pid, bool):
                self.partitions[client] = pid
