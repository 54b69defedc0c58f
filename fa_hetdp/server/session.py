"""The session an analysis runs on: its rounds, its release log, how it ends.

:class:`HeterogeneityStrategy <fa_hetdp.server.strategy.HeterogeneityStrategy>` sets a run up
(the nodes, the sample, the key advertisement and its checks) and then hands an
:class:`AnalysisSession` to the run's :class:`~fa_hetdp.server.analysis.Analysis`, as Flower
hands a ``Grid`` to a strategy. The analysis uses only the session's public methods:

- :meth:`~AnalysisSession.secure_sum`: one masked summation (its input step, the
  consistency check against a malicious server, the unmask step), the key sharing before the
  first; it returns the decoded sum and who is in it (:class:`SecureSum`), whose count is the
  number of noise shares that arrived (the analysis' noise accounting);
- :meth:`~AnalysisSession.collect`, :meth:`~AnalysisSession.broadcast`: a plain per-client
  request and reply (one request per client, or the same for all); a malformed reply drops
  that client only;
- :meth:`~AnalysisSession.record` and :meth:`~AnalysisSession.release`: the release log. Once
  the analysis' plan is known every release is on record before the next step goes out, with
  its cost (the analysis' statement of the releases so far: the result's ``privacy`` part);
- :meth:`~AnalysisSession.abort`: the run ends, with what was released on record;
  :meth:`~AnalysisSession.finish`: it ends with the analysis' result document.

Clients are named by their session id (``1 .. n``, the secure aggregation's); nodes, the
transport's names, stay inside the session. A reply that is an error, missing or unusable
drops its client from the rest of the session; a step goes on while at least the secure
aggregation's threshold (or the ``minimum`` a plain step asks for) remain, and the run aborts
with the step and the counts otherwise. A node that does not know a step (an older fa-hetdp:
its ``ClientApp`` has no handler of it, :func:`fa_hetdp.flowerkit.steps.unknown_step`) aborts
the run with the node and the step named: ``upgrade fa-hetdp on ...``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import numpy as np

from fa_hetdp._types import FloatArray
from fa_hetdp.errors import AggregationError
from fa_hetdp.flowerkit.settings import RunSettings
from fa_hetdp.flowerkit.steps import SHARE_KEYS, Key, SumSteps, summation_inputs, unknown_step
from fa_hetdp.flowerkit.wire import digest
from fa_hetdp.secagg.encoding import FixedPointEncoding
from fa_hetdp.secagg.errors import SecAggError
from fa_hetdp.secagg.server import SecAggServer

__all__ = [
    "AnalysisSession",
    "PrivacyStatement",
    "ProtocolAbortError",
    "ReplyCheck",
    "RunLog",
    "SecureSum",
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
class SecureSum:
    """One masked summation, unmasked: the decoded sum and who is in it.

    ``survivors``: the session ids of the clients whose inputs (and noise shares) are in
    ``sum``; ``partitions``: their partition ids (-1: a data owner's own file), sorted;
    ``max_error``: per word, the bound on the decoding error of ``sum``.
    """

    sum: FloatArray
    survivors: tuple[int, ...]
    partitions: tuple[int, ...]
    max_error: FloatArray

    @property
    def noise_shares(self) -> int:
        """The noise shares in the sum: one per survivor."""
        return len(self.survivors)


PrivacyStatement = Callable[[Sequence[str]], dict[str, Any]]
"""``privacy(released)``: the result's ``privacy`` part for the releases made so far."""
ReplyCheck = Callable[[int, Mapping[str, Any]], "str | None"]
"""``check(client, reply)``: why a reply is unusable (None: usable)."""


class RunLog(Protocol):
    """What the session needs of the run that owns it (the strategy: its record and files)."""

    @property
    def settings(self) -> RunSettings:
        """The run's settings."""
        ...

    @property
    def rng(self) -> np.random.Generator:
        """The server's noise generator."""
        ...

    @property
    def partitions(self) -> Mapping[int, int]:
        """Each client's partition id, by session id."""
        ...

    @property
    def version(self) -> str | None:
        """The fa-hetdp version the server runs (None: not checked)."""
        ...

    def progress(self, event: str, **fields: Any) -> None:
        """Log a progress event."""
        ...

    def abort(self, reason: str) -> ProtocolAbortError:
        """Write the aborted result; return the error to raise."""
        ...

    def record_step(self, outcome: StepOutcome) -> None:
        """Add one step to the run's record."""
        ...

    def log_release(self) -> None:
        """Write the result file with ``status = "running"``."""
        ...

    def base_document(self) -> dict[str, Any]:
        """Return the part of the result document every analysis shares."""
        ...

    def conclude(self, document: dict[str, Any], result: object) -> None:
        """Write the success document; keep ``result``."""
        ...


class AnalysisSession:
    """One run's session after the key advertisement, as an analysis uses it.

    Built by the strategy that owns it over the sampled nodes (``ids``: node -> session id)
    and its secure-aggregation server; the strategy opens it (:meth:`open`) once the keys are
    advertised. An analysis reads :attr:`settings`, :attr:`n`, :attr:`d`,
    :attr:`first_replies`, :attr:`partitions` and :attr:`rng`, and calls the methods of the
    module docstring.
    """

    def __init__(
        self,
        run: RunLog,
        transport: Transport,
        server: SecAggServer,
        ids: Mapping[int, int],
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._run = run
        self._transport = transport
        self._server = server
        self._ids = dict(ids)
        self._nodes_of = {client: node for node, client in self._ids.items()}
        self._active = set(self._ids)  # nodes still in the session
        self._clock = clock
        self._keys_shared = False
        self._released: list[str] = []
        self._privacy: PrivacyStatement | None = None
        self._first: dict[int, dict[str, Any]] = {}
        self._steps: list[StepOutcome] = []  # this session's steps (the run records them too)
        self.n = 0
        """Clients in the key directory (the ``n`` every client plans with)."""
        self.d = 0
        """The dimension the clients agreed on."""

    # ---------------------------------------------------------------- what it is
    @property
    def settings(self) -> RunSettings:
        """The run's settings."""
        return self._run.settings

    @property
    def rng(self) -> np.random.Generator:
        """The server's noise generator (central noise; seeded in a simulation)."""
        return self._run.rng

    @property
    def partitions(self) -> Mapping[int, int]:
        """Each client's partition id, by session id (-1: a data owner's own file)."""
        return self._run.partitions

    @property
    def clients(self) -> tuple[int, ...]:
        """The session ids of the key directory's clients, sorted."""
        return tuple(sorted(c for c in self._first if c in self._server.keys))

    @property
    def active(self) -> tuple[int, ...]:
        """The session ids of the clients still in the session, sorted."""
        return tuple(sorted(self._ids[node] for node in self._active))

    @property
    def first_replies(self) -> Mapping[int, Mapping[str, Any]]:
        """Each key-directory client's accepted ``advertise_keys`` reply, by session id."""
        return {c: self._first[c] for c in self.clients}

    @property
    def released(self) -> tuple[str, ...]:
        """What went out so far, in order (the release log)."""
        return tuple(self._released)

    def partition_of(self, clients: Sequence[int]) -> list[int]:
        """Return the partition ids of ``clients``, sorted (-1 where none is known)."""
        return sorted(self.partitions.get(c, -1) for c in clients)

    # ---------------------------------------------------------------- the release log
    def record(self, privacy: PrivacyStatement) -> None:
        """Put the run on record: every release from here on is logged with its cost.

        ``privacy(released)`` states what the releases so far cost (the result's ``privacy``
        part of an unfinished run, and of an aborted one). Writes the result file with
        ``status = "running"`` (nothing released yet).
        """
        self._privacy = privacy
        self._run.log_release()

    def release(self, what: str) -> None:
        """Log one release (``what`` went out) and write the file before the next step."""
        self._released.append(what)
        self._run.log_release()

    def privacy_so_far(self) -> dict[str, Any] | None:
        """Return the ``privacy`` part of the releases so far (None: not on record yet)."""
        return None if self._privacy is None else self._privacy(self.released)

    # ---------------------------------------------------------------- how it ends
    def abort(self, reason: str) -> ProtocolAbortError:
        """End the run: the result says ``"aborted"`` with ``reason`` and what was released.

        Returns the error to raise (``raise session.abort(...)``).
        """
        return self._run.abort(reason)

    def finish(self, document: dict[str, Any], result: object) -> dict[str, Any]:
        """End the run with the analysis' ``document`` (``status = "success"``); return it.

        ``result`` is the analysis' value (the drop-in's return value).
        """
        self._run.conclude(document, result)
        return document

    def progress(self, event: str, **fields: Any) -> None:
        """Log a progress event (Flower's log and the progress file)."""
        self._run.progress(event, **fields)

    def base_document(self) -> dict[str, Any]:
        """Return the part of the result document every analysis shares (steps, ...)."""
        return self._run.base_document()

    # ---------------------------------------------------------------- the rounds
    def secure_sum(
        self,
        steps: SumSteps,
        encoding: FixedPointEncoding,
        request: Mapping[str, Any] | None = None,
        *,
        admit: Callable[[int], str | None] | None = None,
    ) -> SecureSum:
        """Run one masked summation; return the decoded sum of the survivors' inputs.

        ``steps``: the summation's step names (the analysis' own); ``encoding``: how every
        input is encoded; ``request``: what every client is sent with its secure-aggregation
        message at the input step (the broadcast of the round). The clients' keys are shared
        before the first summation. ``admit(survivors)``: called once the survivor list is
        fixed (after the input step and, in the malicious-server mode, the consistency step)
        and *before* any unmasking is asked for; a reason it returns aborts the run with
        that reason, so that a sum the analysis would refuse (too few noise shares: more
        privacy spent than charged) is never decodable.

        Raises
        ------
        ProtocolAbortError
            Fewer clients than the threshold at a step, the secure aggregation failed, or
            ``admit`` refused the survivors.
        """
        server = self._server
        if not self._keys_shared:
            directories = self._secagg(server.key_directory)  # each: its neighbours' keys
            self._round(SHARE_KEYS, directories, server.receive_share_keys)
            self._keys_shared = True
        # the masks are bound to the round's public inputs as each node was shown them, and
        # to a drop-in's settings document (the transport's, resolved as each node resolves it)
        document = str(getattr(self._transport, "settings_document", ""))
        context = digest(summation_inputs(request or {}, document))
        requests = self._secagg(lambda: server.start_summation(encoding, context))
        self._round(steps.input, requests, server.receive_masked_input, request)
        if server.consistency:  # malicious server: every survivor signs the list it is shown
            check = self._secagg(server.consistency_request)  # fixes the survivor list
            checks = dict.fromkeys(server.survivors, check)
            self._round(steps.consistency, checks, server.receive_consistency)
        unmask = self._secagg(server.unmask_requests)  # fixes the survivors; nothing sent yet
        if admit is not None and (refused := admit(len(server.survivors))) is not None:
            raise self.abort(refused)  # before any unmask request leaves: the sum stays masked
        self._round(steps.unmask, unmask, server.receive_unmask)
        try:  # the encoding refuses a sum that count honest inputs cannot reach
            result = server.finish_summation()
        except SecAggError as exc:
            raise self.abort(f"secure aggregation aborted at the {steps.name} sum: {exc}") from exc
        for client, reason in result.reasons.items():  # dropped for cause: shown with why
            node = self._nodes_of[client]
            if node in self._active:
                self._active.discard(node)
                self._last.dropouts[node] = f"secagg: {reason}"
        survivors = tuple(sorted(int(c) for c in result.survivors))
        return SecureSum(
            sum=result.sum,
            survivors=survivors,
            partitions=tuple(self.partition_of(survivors)),
            max_error=result.max_error,
        )

    def collect(
        self,
        step: str,
        requests: Mapping[int, Mapping[str, Any]],
        *,
        check: ReplyCheck | None = None,
        minimum: int | None = None,
    ) -> dict[int, dict[str, Any]]:
        """Send each client its request (plain, unmasked); return the usable replies.

        ``requests`` by session id (a client no longer in the session is not sent one);
        ``check(client, reply)``: why a reply is unusable (None: usable), which drops that
        client only. ``minimum``: the usable replies the step needs to go on (default: the
        secure aggregation's threshold). Returns the replies by session id.
        """
        payloads = {
            self._nodes_of[c]: request
            for c, request in requests.items()
            if c in self._nodes_of and self._nodes_of[c] in self._active
        }
        node_check = None if check is None else (lambda node, r: check(self._ids[node], r))
        replies = self._step(step, payloads, check=node_check, minimum=minimum)
        return {self._ids[node]: reply for node, reply in replies.items()}

    def broadcast(
        self,
        step: str,
        request: Mapping[str, Any],
        *,
        check: ReplyCheck | None = None,
        minimum: int | None = None,
    ) -> dict[int, dict[str, Any]]:
        """Send ``request`` to every client still in the session; :meth:`collect` the replies."""
        return self.collect(step, dict.fromkeys(self.active, request), check=check, minimum=minimum)

    def drop(self, client: int, reason: str) -> None:
        """Drop ``client`` for a reply of the last step the server cannot use (``reason``)."""
        node = self._nodes_of[client]
        self._active.discard(node)
        last = self._last
        if node not in last.dropouts:
            last.replied -= 1
        last.dropouts[node] = f"malformed: {reason}"

    # ---------------------------------------------------------------- the strategy's setup
    def open(self, replies: Mapping[int, Mapping[str, Any]], d: int) -> None:
        """Accept the ``advertise_keys`` replies (by session id) the strategy kept; fix n, d.

        Each reply's keys go to the secure aggregation (a rejected one is a dropout); the key
        directory's count is the ``n`` every client plans with. The strategy's, once.
        """
        kept = self._accept(
            self._server.receive_advertise_keys,
            self._last.step,
            {self._nodes_of[c]: dict(r) for c, r in replies.items()},
        )
        self._first = {self._ids[node]: reply for node, reply in kept.items()}
        self.n = len(self._server.keys)
        self.d = int(d)

    # ---------------------------------------------------------------- inside
    @property
    def _last(self) -> StepOutcome:
        return self._steps[-1]

    def _step(
        self,
        step: str,
        payloads: Mapping[int, Mapping[str, Any]],
        *,
        check: Callable[[int, Mapping[str, Any]], str | None] | None = None,
        minimum: int | None = None,
    ) -> dict[int, dict[str, Any]]:
        """Send one step's payloads (by node); return the usable replies (the rest drop)."""
        started = self._clock()
        replies, dropouts = self._transport.exchange(step, payloads, self.settings.stage_timeout)
        for node in payloads:
            if node not in replies and node not in dropouts:
                dropouts[node] = "no reply"
        replies = {k: v for k, v in replies.items() if k in payloads and k not in dropouts}
        for node, reply in list(replies.items()):
            if check is not None and (why := check(node, reply)) is not None:
                del replies[node]
                dropouts[node] = f"malformed: {why}"
        self._active.difference_update(dropouts)
        outcome = StepOutcome(
            step, len(payloads), len(replies), dict(dropouts), self._clock() - started
        )
        self._steps.append(outcome)
        self._run.record_step(outcome)
        self._refuse_unknown_steps(dropouts)
        if minimum is None:
            self._check_threshold(step, len(replies), len(payloads))
        elif len(replies) < minimum:
            raise self.abort(
                f"step {step!r}: {len(replies)} of {len(payloads)} clients replied usably, "
                f"fewer than the {minimum} it needs"
            )
        return replies

    def _refuse_unknown_steps(self, dropouts: Mapping[int, str]) -> None:
        """Abort naming every node that does not know its step (an older fa-hetdp)."""
        lacking: list[str] = []
        for node, reason in sorted(dropouts.items()):
            name = unknown_step(reason)
            if name is None:
                continue
            client = self._ids.get(node)
            partition = self.partitions.get(client, -1) if client is not None else -1
            where = f"node {node}" + (f" (partition {partition})" if partition >= 0 else "")
            lacking.append(f"{where} lacks step {name!r}")
        if lacking:
            version = self._run.version
            to = f" {version}" if version else " this server's version"
            raise self.abort(
                f"{'; '.join(lacking)}: upgrade fa-hetdp on "
                f"{'that node' if len(lacking) == 1 else 'those nodes'} to{to} (its ClientApp "
                "has no handler of the step: an older fa-hetdp)"
            )

    def _check_threshold(self, step: str, remaining: int, sent: int) -> None:
        threshold = self.settings.threshold
        if remaining < threshold:
            raise self.abort(
                f"step {step!r}: {remaining} of {sent} clients remain, below the "
                f"secure-aggregation threshold t={threshold}; aborting "
                "(the masked sums cannot be recovered)"
            )

    def _secagg(self, call: Callable[[], _T]) -> _T:
        """Call a secagg server method; its ``ProtocolAborted`` aborts the run."""
        try:
            return call()
        except SecAggError as exc:
            raise self.abort(f"secure aggregation aborted: {exc}") from exc

    def _accept(
        self,
        receive: Callable[[Mapping[str, Any]], None],
        step: str,
        replies: dict[int, dict[str, Any]],
    ) -> dict[int, dict[str, Any]]:
        """Feed the replies (by node) to the secagg server; a rejected reply is a dropout.

        The reply's ``sender`` must be the id the server gave that node (no impersonation).
        """
        for node, reply in list(replies.items()):
            try:
                message = reply[Key.SECAGG]
                if message.get("sender") != self._ids[node]:
                    raise ValueError(
                        f"sender {message.get('sender')!r} is not this node's id {self._ids[node]}"
                    )
                receive(message)
            except (SecAggError, KeyError, TypeError, ValueError, AttributeError) as exc:
                del replies[node]
                self.drop(self._ids[node], str(exc))
        self._check_threshold(step, len(replies), self._last.sent)
        return replies

    def _round(
        self,
        step: str,
        messages: Mapping[int, Any],
        receive: Callable[[Mapping[str, Any]], None],
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        """One secagg round: each active client's own message (and ``extra``) out, replies in."""
        payloads = {
            self._nodes_of[c]: {Key.SECAGG: message, **(extra or {})}
            for c, message in messages.items()
            if self._nodes_of[c] in self._active
        }
        replies = self._step(step, payloads)
        self._accept(receive, step, replies)
