"""The fa-hetdp ``ServerApp``: drives the protocol over Flower's ``Grid``.

``@app.main()`` resolves the run settings from ``context.run_config``
(:class:`fa_hetdp.flowerkit.settings.RunSettings`), and hands a :class:`GridTransport` to
:class:`server.strategy.HeterogeneityStrategy`, which waits for the expected nodes, runs
the key advertisement and the run's analysis (:mod:`fa_hetdp.server.analysis`) and writes the
result file. On an abort the strategy writes a result with
``status = "aborted"`` and its reason, and the ServerApp raises so Flower marks the run failed.
"""

from __future__ import annotations

import ipaddress
import logging
import re
import time
from collections.abc import Callable, Mapping
from typing import Any

from flwr.app import Context, Message
from flwr.common.constant import ErrorCode
from flwr.serverapp import Grid, ServerApp

import fa_hetdp
from fa_hetdp.flowerkit.measurement import SETTINGS_KEY, read_settings
from fa_hetdp.flowerkit.settings import RunSettings
from fa_hetdp.flowerkit.steps import ADVERTISE_KEYS, message_type
from fa_hetdp.flowerkit.wire import Limits, WireFormatError, decode, encode
from fa_hetdp.server.results import result_path, write_result
from fa_hetdp.server.strategy import HeterogeneityStrategy

__all__ = [
    "FIRST_POLL_SECONDS",
    "MAX_REASON_CHARS",
    "MAX_REPLY_BYTES",
    "PATIENCE",
    "POLL_SECONDS",
    "GridTransport",
    "app",
    "error_summary",
]

#: Flower's logger (a child of ``flwr``): ``flwr log`` and ``flwr run --stream`` show it.
log = logging.getLogger("flwr.fa_hetdp.server")

app = ServerApp()

#: A step waits for connected nodes up to this many stage time-outs in all.
PATIENCE = 4
#: Longest wait between two pulls of the replies: the wait starts at
#: :data:`FIRST_POLL_SECONDS` after the messages go out (and after each pull that brought a
#: reply) and doubles after each pull that brought none, up to this.
POLL_SECONDS = 0.25
#: Shortest wait between two pulls (see :data:`POLL_SECONDS`).
FIRST_POLL_SECONDS = 0.005
#: Largest client reply decoded (document plus blob), in bytes; a larger one drops that
#: client, not the step. Every legitimate reply is O(k + d') words: k share ciphertexts of
#: about 300 bytes, or masked vectors of d' 8-byte words; 256 MiB leaves room for
#: d' = 2^24 coordinates twice over and still bounds what one client can make the server parse.
MAX_REPLY_BYTES = 1 << 28


#: Longest error-reply reason kept in the result (one line).
MAX_REASON_CHARS = 300

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_IP_FIELD = re.compile(r",?\s*\bip=[^,)\s]*")  # Ray's "(pid=1, ip=10.0.0.5, ...)"
_IPV4 = re.compile(r"(?<![\w.])(?:\d{1,3}\.){3}\d{1,3}(?![\w.])")
_IPV6 = re.compile(r"(?<![\w:])(?:[0-9A-Fa-f]{0,4}:){2,7}[0-9A-Fa-f]{0,4}(?![\w:])")


def _no_address(match: re.Match[str]) -> str:
    try:
        ipaddress.ip_address(match.group(0))
    except ValueError:
        return match.group(0)  # a time of day, a ratio: not an address
    return "<address>"


def error_summary(reason: str) -> str:
    """Return one line of an error reply's ``reason``, without IP addresses.

    In a simulation the reason is flwr's ``str(type(ex)) + ":<'" + str(ex) + "'>"`` of Ray's
    ``RayTaskError``: a traceback with ANSI colours and ``ip=<host address>``. Kept: the
    ClientApp's own message when Flower's wrapper carries one (``... Message: TEXT``), else
    the first non-blank line; IP addresses become ``<address>`` (Ray's ``ip=`` field is
    dropped); at most :data:`MAX_REASON_CHARS` characters.
    """
    text = _ANSI.sub("", reason)
    if "Message: " in text:  # flwr.clientapp.ClientAppException around the app's error
        text = text.rsplit("Message: ", 1)[1].strip().splitlines()[0].removesuffix("'>")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    line = lines[0] if lines else "(no reason given)"
    line = _IPV6.sub(_no_address, _IPV4.sub(_no_address, _IP_FIELD.sub("", line)))
    if len(line) > MAX_REASON_CHARS:
        line = line[: MAX_REASON_CHARS - 3] + "..."
    return line


class GridTransport:
    """:class:`server.strategy.Transport` over a Flower ``Grid`` (one query per step).

    A reply counts when it has no error, comes from a node that was sent a message at this
    step, and decodes; every other node of the step is a dropout, with its reason. An error
    the SuperLink writes itself (source 0, an expired message) is put to the node its message
    was for. The SuperLink's "node unavailable" answer (Flower marks a node offline when it
    misses its heartbeats, as a live node on a busy machine can) is not a reply: the message
    stays pending and the node may still answer; if it does not, its dropout says Flower
    marked it offline.

    The time-out follows progress: the step waits while replies keep arriving (each one
    restarts the ``timeout`` window); after ``timeout`` seconds without a reply it still
    waits for the nodes that are connected to the SuperLink (alive: their heartbeats arrive;
    a busy machine is slow, not dead), up to :data:`PATIENCE` times ``timeout`` in all, and
    drops only the nodes that are gone (one ``timeout`` without progress, a node marked
    offline included) or that have not replied by then.
    """

    def __init__(
        self,
        grid: Grid,
        limits: Callable[[str], Limits] | None = None,
        settings: Mapping[str, Any] | None = None,
    ) -> None:
        self.grid = grid
        self.limits = limits  # step -> what one reply may decode (fa_hetdp.flowerkit.limits)
        # a drop-in measurement's settings document, sent with every advertise_keys request
        # (fa_hetdp.flowerkit.measurement); None: the clients read the run config
        self.settings = None if settings is None else dict(settings)
        # that document as every node resolves it: what each summation's masks are bound to
        # (fa_hetdp.flowerkit.steps.summation_inputs); empty without one
        self.settings_document = "" if settings is None else read_settings(settings).to_json()

    def node_ids(self) -> list[int]:
        """Ids of the nodes connected now."""
        return [int(n) for n in self.grid.get_node_ids()]

    def exchange(
        self, step: str, payloads: Mapping[int, Mapping[str, Any]], timeout: float
    ) -> tuple[dict[int, dict[str, Any]], dict[int, str]]:
        """Send one ``query.<step>`` message per node and collect the replies."""
        if step == ADVERTISE_KEYS and self.settings is not None:
            payloads = {node: {**p, SETTINGS_KEY: self.settings} for node, p in payloads.items()}
        messages = [
            Message(
                content=encode(payload),
                dst_node_id=node,
                message_type=message_type(step),
                group_id=step,
            )
            for node, payload in payloads.items()
        ]
        replies: dict[int, dict[str, Any]] = {}
        dropouts: dict[int, str] = {}
        limits = Limits() if self.limits is None else self.limits(step)
        limits = Limits(  # MAX_REPLY_BYTES caps every step's reply on top
            min(limits.message, MAX_REPLY_BYTES),
            limits.document,
            min(limits.decoded, MAX_REPLY_BYTES),
        )
        # Flower keeps the order of push_messages' ids (None for a message it did not take).
        to_node: dict[str, int] = {}
        for mid, node in zip(self.grid.push_messages(messages), payloads, strict=True):
            if mid is None:
                dropouts[node] = "not accepted by the SuperLink (a malformed or oversized message)"
            else:
                to_node[mid] = node
        pending = set(to_node)
        offline: set[int] = set()  # nodes the SuperLink answered for: heartbeat late
        start = last_reply = time.monotonic()
        wait = FIRST_POLL_SECONDS
        while pending:
            pulled = False
            for reply in self.grid.pull_messages(pending):
                mid = reply.metadata.reply_to_message_id
                asked = to_node.get(mid)
                if _node_unavailable(reply) and asked is not None:
                    # not progress: Flower says the node missed its heartbeats, which a busy
                    # machine's live node can; the message stays, and the node may come back
                    offline.add(asked)
                    continue
                pending.discard(mid)
                last_reply = time.monotonic()
                pulled = True
                source = int(reply.metadata.src_node_id)
                if source not in payloads and asked is not None and reply.has_error():
                    # the SuperLink's own error about this node's message (an expired TTL)
                    source, link = asked, "error from the SuperLink: "
                else:
                    link = "error reply: "
                if source not in payloads or source in replies or source in dropouts:
                    continue
                offline.discard(source)
                if reply.has_error():
                    dropouts[source] = link + error_summary(reply.error.reason or "")
                    continue
                try:
                    replies[source] = decode(reply.content, limits=limits)
                except WireFormatError as exc:
                    dropouts[source] = f"malformed: {exc}"
            now = time.monotonic()
            if pending and now - last_reply > timeout:
                waiting = set(payloads) - set(replies) - set(dropouts)
                if not waiting & set(self.node_ids()) or now - start > PATIENCE * timeout:
                    break
            if pending:  # a reply came: the others are likely close; none: back off
                wait = FIRST_POLL_SECONDS if pulled else wait
                time.sleep(min(wait, POLL_SECONDS))
                wait = min(2 * wait, POLL_SECONDS)
        waited = time.monotonic() - start
        for node in payloads:
            if node in replies or node in dropouts:
                continue
            if node in offline:
                dropouts[node] = (
                    "Flower marked the node offline (its heartbeats stopped or came late) and "
                    f"it did not come back within {waited:.0f} s"
                )
            else:
                dropouts[node] = f"no reply within {waited:.0f} s"
        return replies, dropouts


def _node_unavailable(reply: Message) -> bool:
    """Whether ``reply`` is the SuperLink's "node unavailable" answer for its message."""
    return bool(reply.has_error()) and int(reply.error.code) == ErrorCode.NODE_UNAVAILABLE


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Run one private heterogeneity measurement and write the result file."""
    run_id = int(context.run_id)
    try:
        settings = RunSettings.from_run_config(context.run_config)
    except Exception as exc:
        path = context.run_config.get("result-path")
        if isinstance(path, str) and path:
            from pathlib import Path

            where = write_result(
                result_path(Path(path).expanduser(), run_id),
                {"status": "aborted", "run_id": run_id, "reason": f"invalid run config: {exc}"},
            )
            log.error("fa-hetdp: invalid run config; result in %s", where)
        raise
    strategy = HeterogeneityStrategy(settings, run_id=run_id, version=fa_hetdp.__version__)
    try:
        document = strategy.run(GridTransport(grid, limits=strategy.message_limits))
    except Exception:
        log.error("fa-hetdp: run %s aborted; result in %s", run_id, strategy.result_file)
        raise
    privacy = document["privacy"]
    log.info(
        "fa-hetdp: done; n=%s d=%s %s; result in %s",
        document["n"],
        document["d"],
        f"epsilon spent={privacy['epsilon_spent']}"
        if privacy["differentially_private"]
        else "NOT differentially private",
        strategy.result_file,
    )
