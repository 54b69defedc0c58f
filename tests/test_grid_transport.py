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


def test_a_node_that_is_gone_is_dropped_after_one_timeout() -> None:
    grid = SlowGrid(delays={1: 0.0}, connected={1})
    started = time.monotonic()
    replies, dropouts = GridTransport(grid).exchange("advertise_keys", {1: {}, 2: {}}, 0.2)  # type: ignore[arg-type]
    assert set(replies) == {1} and set(dropouts) == {2}
    assert "no reply within" in dropouts[2]
    assert time.monotonic() - started < 0.2 * server_app.PATIENCE


def test_a_connected_node_that_never_replies_is_dropped_after_the_patience() -> None:
    grid = SlowGrid(delays={}, connected={1})
    started = time.monotonic()
    _, dropouts = GridTransport(grid).exchange("advertise_keys", {1: {}}, 0.1)  # type: ignore[arg-type]
    waited = time.monotonic() - started
    assert set(dropouts) == {1}
    assert 0.1 * server_app.PATIENCE <= waited < 0.1 * server_app.PATIENCE + 1.0
