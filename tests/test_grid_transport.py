"""The ServerApp's transport: a step's time-out follows progress (server.app.GridTransport)."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

import fa_hetdp.server.app as server_app
from fa_hetdp.flowerkit.wire import encode
from fa_hetdp.server.app import GridTransport


@dataclass
class SlowGrid:
    """Replies after a per-node delay; ``connected`` are the nodes the SuperLink still sees."""

    delays: dict[int, float]
    connected: set[int]
    sent: dict[str, tuple[int, float]] = field(default_factory=dict)

    def push_messages(self, messages: Iterable[Any]) -> list[str]:
        ids = []
        for i, message in enumerate(messages):
            ids.append(f"m{i}")
            self.sent[f"m{i}"] = (int(message.metadata.dst_node_id), time.monotonic())
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> list[Any]:
        out = []
        for mid in list(message_ids):
            node, at = self.sent[mid]
            if node in self.delays and time.monotonic() - at >= self.delays[node]:
                out.append(
                    SimpleNamespace(
                        metadata=SimpleNamespace(reply_to_message_id=mid, src_node_id=node),
                        has_error=lambda: False,
                        content=encode({"d": node}),
                    )
                )
                del self.delays[node]
        return out

    def get_node_ids(self) -> list[int]:
        return sorted(self.connected)


@pytest.fixture(autouse=True)
def fast_poll(monkeypatch: pytest.MonkeyPatch) -> None:
    from flwr.supercore.task_identity import TaskIdentity

    monkeypatch.setattr(server_app, "POLL_SECONDS", 0.01)
    # Messages are created inside a Flower task (as test_server_strategy's transport does).
    TaskIdentity.run_id = 1
    TaskIdentity.node_id = 0
    TaskIdentity.task_id = 0


def test_a_connected_slow_node_is_not_dropped_by_the_timeout() -> None:
    # Node 2 replies after 2.5 time-outs without any reply in between: it is connected, so
    # the step waits for it (up to PATIENCE time-outs).
    grid = SlowGrid(delays={1: 0.0, 2: 0.5}, connected={1, 2})
    replies, dropouts = GridTransport(grid).exchange("advertise_keys", {1: {}, 2: {}}, 0.2)  # type: ignore[arg-type]
    assert set(replies) == {1, 2} and dropouts == {}


class StepClock:
    """The transport's clock: time moves only when it sleeps (a busy machine does not count)."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_a_node_that_is_gone_is_dropped_after_one_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = StepClock()
    monkeypatch.setattr(server_app, "time", clock)
    grid = SlowGrid(delays={1: 0.0}, connected={1})
    started = clock.monotonic()
    replies, dropouts = GridTransport(grid).exchange("advertise_keys", {1: {}, 2: {}}, 0.2)  # type: ignore[arg-type]
    assert set(replies) == {1} and set(dropouts) == {2}
    assert "no reply within" in dropouts[2]
    assert clock.monotonic() - started < 0.2 * server_app.PATIENCE


def test_a_connected_node_that_never_replies_is_dropped_after_the_patience() -> None:
    grid = SlowGrid(delays={}, connected={1})
    started = time.monotonic()
    _, dropouts = GridTransport(grid).exchange("advertise_keys", {1: {}}, 0.1)  # type: ignore[arg-type]
    waited = time.monotonic() - started
    assert set(dropouts) == {1}
    assert 0.1 * server_app.PATIENCE <= waited < 0.1 * server_app.PATIENCE + 1.0


# Flower 1.42's SuperLink answers a pull for a message whose destination node missed its
# heartbeats (HEARTBEAT_PATIENCE x its interval; under load a live node's heartbeat can be
# late) with an error reply from the SuperLink itself: src_node_id 0, ErrorCode
# NODE_UNAVAILABLE, reply_to the message. Measured at load 8: two of five live SuperNodes
# were dropped 17 s into a step with a 120 s time-out, and the run aborted.
NODE_UNAVAILABLE = 5  # flwr.common.constant.ErrorCode.NODE_UNAVAILABLE
MESSAGE_UNAVAILABLE = 3  # flwr.common.constant.ErrorCode.MESSAGE_UNAVAILABLE


def _link_error(mid: str, code: int, reason: str) -> Any:
    return SimpleNamespace(
        metadata=SimpleNamespace(reply_to_message_id=mid, src_node_id=0),
        has_error=lambda: True,
        error=SimpleNamespace(code=code, reason=reason),
    )


@dataclass
class OfflineGrid(SlowGrid):
    """Flower marks ``offline`` nodes unavailable until ``back`` seconds after the push."""

    offline: dict[int, float] = field(default_factory=dict)  # node -> seconds until back
    code: int = NODE_UNAVAILABLE

    def pull_messages(self, message_ids: Iterable[str]) -> list[Any]:
        out = []
        ids = list(message_ids)
        for mid in ids:
            node, at = self.sent[mid]
            if node in self.offline and time.monotonic() - at < self.offline[node]:
                out.append(_link_error(mid, self.code, "Error: Node Unavailable"))
        late = {mid for mid in ids if self.sent[mid][0] in self.offline}
        out += [r for r in super().pull_messages(set(ids) - late)]
        for mid in late:
            node, at = self.sent[mid]
            if time.monotonic() - at >= self.offline[node]:
                out += super().pull_messages([mid])
        return out

    def get_node_ids(self) -> list[int]:
        now = time.monotonic()
        gone = {
            node
            for mid, (node, at) in self.sent.items()
            if node in self.offline and now - at < self.offline[node]
        }
        return sorted(self.connected - gone)


def test_a_node_flower_marks_offline_for_a_while_still_counts_when_it_replies() -> None:
    # Node 2's heartbeat is late: the SuperLink answers for it with NODE_UNAVAILABLE for
    # 0.3 s, then the node is back and replies. It is a reply, not a dropout.
    grid = OfflineGrid(delays={1: 0.0, 2: 0.35}, connected={1, 2}, offline={2: 0.3})
    replies, dropouts = GridTransport(grid).exchange("advertise_keys", {1: {}, 2: {}}, 0.5)  # type: ignore[arg-type]
    assert set(replies) == {1, 2} and dropouts == {}


def test_a_node_that_stays_offline_is_dropped_with_flowers_reason() -> None:
    grid = OfflineGrid(delays={1: 0.0}, connected={1, 2}, offline={2: 60.0})
    started = time.monotonic()
    replies, dropouts = GridTransport(grid).exchange("advertise_keys", {1: {}, 2: {}}, 0.2)  # type: ignore[arg-type]
    waited = time.monotonic() - started
    assert set(replies) == {1} and set(dropouts) == {2}
    assert "Flower marked the node offline" in dropouts[2], dropouts[2]
    # one time-out without progress (it is not connected), not the full patience
    assert 0.2 <= waited < 0.2 * server_app.PATIENCE


def test_another_error_from_the_superlink_names_the_node_it_was_for() -> None:
    # An expired message (MESSAGE_UNAVAILABLE) comes from the SuperLink (src 0), not from
    # the node: it is that node's dropout, with the link's reason, at once.
    grid = OfflineGrid(
        delays={1: 0.0}, connected={1, 2}, offline={2: 60.0}, code=MESSAGE_UNAVAILABLE
    )
    started = time.monotonic()
    replies, dropouts = GridTransport(grid).exchange("advertise_keys", {1: {}, 2: {}}, 5.0)  # type: ignore[arg-type]
    assert set(replies) == {1} and set(dropouts) == {2}
    assert dropouts[2].startswith("error from the SuperLink: "), dropouts[2]
    assert time.monotonic() - started < 5.0


def test_a_message_the_superlink_did_not_accept_is_that_nodes_dropout() -> None:
    # Flower's push_messages returns None for a message it could not push (order kept).
    grid = SlowGrid(delays={1: 0.0, 2: 0.0}, connected={1, 2})
    pushed = grid.push_messages

    def push(messages: Iterable[Any]) -> list[Any]:
        ids: list[Any] = pushed(messages)
        ids[1] = None
        return ids

    grid.push_messages = push  # type: ignore[method-assign]
    replies, dropouts = GridTransport(grid).exchange("advertise_keys", {1: {}, 2: {}}, 0.2)  # type: ignore[arg-type]
    assert set(replies) == {1} and set(dropouts) == {2}
    assert "not accepted by the SuperLink" in dropouts[2]
