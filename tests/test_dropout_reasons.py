"""A dropout's reason in the result is one line, without the host's addresses.

In a simulation a ClientApp's exception reaches the ServerApp as an error reply whose reason
flwr 1.42 builds as ``str(type(ex)) + ":<'" + str(ex) + "'>"`` (``vce_api.py``), where
``ex`` is Ray's ``RayTaskError``: a whole traceback, ANSI colours, and
``ip=<the host's address>`` on its first line. The server kept all of it in the result's
``steps[].dropouts``. It now keeps one line -- the ClientApp's own message when Flower's
wrapper carries one, else the first line -- with IP addresses removed.

``RAY_REASON`` was produced with ray 2.55 and flwr 1.42 on the test machine (an actor raising
``ClientAppException(str(ex)) from ex`` as flwr's ``ClientAppActor.run`` does, the reason
built as ``vce_api.py`` builds it); only its file paths and ids were shortened.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

import fa_hetdp.server.app as server_app
from fa_hetdp.server.app import GridTransport, error_summary

RAY_REASON = (
    "<class 'ray.exceptions.RayTaskError(ClientAppException)'>:<'\x1b[36mray::ClientAppActor"
    ".run()\x1b[39m (pid=12266, ip=192.0.2.2, actor_id=a2a4b06a26b4096, repr=<flwr.simulation"
    ".ray_transport.ray_actor.ClientAppActor object at 0x7fcd54078d10>)\n"
    "fa_hetdp.clients.app.SimulatedDropoutError: partition 3 drops out at step "
    "'stage1_input'\n\nThe above exception was the direct cause of the following exception:"
    "\n\n\x1b[36mray::ClientAppActor.run()\x1b[39m (pid=12266, ip=192.0.2.2, actor_id="
    "a2a4b06a26b4096, repr=<flwr.simulation.ray_transport.ray_actor.ClientAppActor object at "
    '0x7fcd54078d10>)\n  File "/venv/flwr/simulation/ray_transport/ray_actor.py", line 65, '
    "in run\n    raise ClientAppException(str(ex)) from ex\nflwr.clientapp.client_app."
    "ClientAppException: \nException ClientAppException occurred. Message: partition 3 drops "
    "out at step 'stage1_input''>"
)


@dataclass
class ErrorGrid:
    """Every node answers with an error reply carrying ``reason``."""

    reason: str
    sent: dict[str, int] = field(default_factory=dict)

    def push_messages(self, messages: Iterable[Any]) -> list[str]:
        for i, message in enumerate(messages):
            self.sent[f"m{i}"] = int(message.metadata.dst_node_id)
        return list(self.sent)

    def pull_messages(self, message_ids: Iterable[str]) -> list[Any]:
        return [
            SimpleNamespace(
                metadata=SimpleNamespace(reply_to_message_id=mid, src_node_id=self.sent[mid]),
                has_error=lambda: True,
                error=SimpleNamespace(code=2, reason=self.reason),  # CLIENT_APP_RAISED_EXCEPTION
            )
            for mid in list(message_ids)
        ]

    def get_node_ids(self) -> list[int]:
        return sorted(self.sent.values())


@pytest.fixture(autouse=True)
def in_a_task(monkeypatch: pytest.MonkeyPatch) -> None:
    from flwr.supercore.task_identity import TaskIdentity

    monkeypatch.setattr(server_app, "POLL_SECONDS", 0.01)
    TaskIdentity.run_id = 1
    TaskIdentity.node_id = 0
    TaskIdentity.task_id = 0


def test_a_ray_traceback_becomes_its_message_without_the_host_address() -> None:
    grid = ErrorGrid(RAY_REASON)
    replies, dropouts = GridTransport(grid).exchange("stage1_input", {7: {}}, 0.2)  # type: ignore[arg-type]
    assert replies == {}
    reason = dropouts[7]
    assert reason == "error reply: partition 3 drops out at step 'stage1_input'"


@pytest.mark.parametrize(
    ("raw", "kept"),
    [
        ("plain reason", "plain reason"),
        ("first line\n  File x\nsecond", "first line"),
        (
            "unreachable 10.1.2.3:9094 and fe80::1ff:fe23:4567:890a",
            "unreachable <address>:9094 and <address>",
        ),
        ("worker (pid=1, ip=172.16.0.9) died", "worker (pid=1) died"),
        ("\n\n  \x1b[31mcoloured\x1b[0m first\nrest", "coloured first"),
        ("", "(no reason given)"),
    ],
)
def test_error_summary_keeps_one_line_and_no_address(raw: str, kept: str) -> None:
    assert error_summary(raw) == kept


def test_a_long_reason_is_cut() -> None:
    summary = error_summary("x" * 10_000)
    assert len(summary) <= server_app.MAX_REASON_CHARS and summary.endswith("...")
