"""The malicious-server option through the Flower apps (in-memory transport, real handlers)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from test_flower_helpers import assert_matches_reference, run_config, scenario_file
from test_server_strategy import run

from fa_hetdp.flower.steps import CONSISTENCY_STEP


def test_malicious_server_mode_adds_the_consistency_steps_and_matches_the_twin(
    tmp_path: Path,
) -> None:
    # n = 10, complete graph, t = ceil(2/3 x 9) = 6 >= floor(10 / 2) + 1: safe for gamma = 0
    config = run_config(
        tmp_path, scenario_file(tmp_path, 10), **{"secagg-threat-model": "malicious-server"}
    )
    document = run(config, 10)
    assert document["status"] == "success"
    steps = [s["step"] for s in document["steps"]]
    assert CONSISTENCY_STEP[1] in steps and CONSISTENCY_STEP[2] in steps
    assert_matches_reference(document, config)


def test_a_client_insisting_on_a_safe_threshold_refuses_a_weaker_session(tmp_path: Path) -> None:
    # the run config says malicious-server, but the server's threshold (3) is below
    # floor((10 + 2) / 2) + 1 = 7 for gamma = 0.2: every client refuses at the setup
    overrides: dict[str, Any] = {
        "secagg-threat-model": "malicious-server",
        "secagg-corrupt-fraction": 0.2,
        "secagg-threshold": 3.0,
    }
    config = run_config(tmp_path, scenario_file(tmp_path, 10), **overrides)
    try:
        document = run(config, 10)
    except Exception as exc:  # the strategy aborts: too few clients left
        assert "threshold" in str(exc)
    else:
        assert document["status"] == "aborted"


def test_decode_refuses_a_message_over_the_step_cap_before_parsing() -> None:
    import numpy as np
    import pytest

    from fa_hetdp.flower.wire import WireFormatError, decode, encode

    message = encode({"vector": np.zeros(1000, dtype=np.uint64)})
    assert decode(message, max_bytes=10_000)["vector"].shape == (1000,)
    with pytest.raises(WireFormatError, match="cap of 4000"):
        decode(message, max_bytes=4000)


def test_a_refusing_client_keeps_its_excluded_state_across_flower_steps(tmp_path: Path) -> None:
    # finding 5: the unmask handler used to drop the state change of a refusal
    import numpy as np
    import pytest
    from flwr.app import ConfigRecord, Context, Message, RecordDict
    from flwr.supercore.task_identity import TaskIdentity

    from fa_hetdp.clients.app import stage1_unmask
    from fa_hetdp.flower.steps import Key, State
    from fa_hetdp.flower.wire import encode
    from fa_hetdp.secagg import SecAggClient, SecAggServer, UnmaskRefused, choose_encoding

    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 0, 0
    server = SecAggServer(range(4), threshold=2, num_summations=2, rng=np.random.default_rng(0))
    clients = {i: SecAggClient(i) for i in range(4)}
    for c in clients.values():
        server.receive_advertise_keys(c.advertise_keys(server.setup_messages()[c.client_id]))
    for i, directory in server.key_directory().items():
        server.receive_share_keys(clients[i].share_keys(directory))
    requests = server.start_summation(choose_encoding(4, np.ones(2)))
    for i in (0, 1, 2, 3):
        reply = clients[i].masked_input(requests[i], np.zeros(2), rng=np.random.default_rng(i))
        if i:
            server.receive_masked_input(reply)
    # client 0's input "missed": a survivor's request (complete graph) lists it as dropped
    request = server.unmask_requests()[1]
    config = run_config(tmp_path, scenario_file(tmp_path, 4))
    record = ConfigRecord({State.SECAGG: clients[0].to_bytes(), State.CLIENT_ID: 0})
    context = Context(
        run_id=1,
        node_id=1,
        node_config={"partition-id": 0, "num-partitions": 4},
        state=RecordDict({State.RECORD: record}),
        run_config=dict(config),
    )
    message = Message(
        content=encode({Key.SECAGG: request}),
        dst_node_id=1,
        message_type="query.stage1_unmask",
        group_id="stage1_unmask",
    )
    with pytest.raises(UnmaskRefused, match="dropped"):
        stage1_unmask(message, context)
    saved = context.state[State.RECORD][State.SECAGG]
    assert SecAggClient.from_bytes(saved).phase == "excluded"


def test_an_oversized_reply_drops_that_client_not_the_step(monkeypatch: Any) -> None:
    # server.app.GridTransport decodes every reply under MAX_REPLY_BYTES: node 2's reply is
    # over the cap (here lowered to 64 KiB), so node 2 drops and node 1's reply still counts.
    from types import SimpleNamespace

    import numpy as np
    from flwr.supercore.task_identity import TaskIdentity

    import fa_hetdp.server.app as server_app
    from fa_hetdp.flower.wire import encode

    monkeypatch.setattr(server_app, "MAX_REPLY_BYTES", 1 << 16)
    monkeypatch.setattr(server_app, "POLL_SECONDS", 0.01)
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 0, 0
    sizes = {1: 1000, 2: 10_000}  # uint64 words: 8 KB and 80 KB

    class Grid:
        def push_messages(self, messages: Any) -> list[int]:
            return [int(m.metadata.dst_node_id) for m in messages]

        def pull_messages(self, ids: Any) -> list[Any]:
            return [
                SimpleNamespace(
                    metadata=SimpleNamespace(reply_to_message_id=node, src_node_id=node),
                    has_error=lambda: False,
                    content=encode({"vector": np.zeros(sizes[node], dtype=np.uint64)}),
                )
                for node in list(ids)
            ]

        def get_node_ids(self) -> list[int]:
            return [1, 2]

    transport = server_app.GridTransport(Grid())  # type: ignore[arg-type]
    replies, dropouts = transport.exchange("masked_input", {1: {}, 2: {}}, 0.5)
    assert set(replies) == {1} and replies[1]["vector"].shape == (1000,)
    assert set(dropouts) == {2} and "cap of 65536" in dropouts[2]


def test_clients_take_n_from_the_key_directory_not_from_what_the_server_states(
    tmp_path: Path,
) -> None:
    # The server states n = 10^6 beside every setup and shows one node a key directory that
    # miscounts the advertised clients: the stated number never reaches the noise (the run
    # still equals its in-process twin, whose noise uses the directory's n), and the node
    # shown the wrong count refuses and drops.
    from collections.abc import Mapping

    from test_server_strategy import InMemoryTransport

    from fa_hetdp.flower.settings import RunSettings
    from fa_hetdp.flower.steps import ADVERTISE_KEYS, SHARE_KEYS, Key
    from fa_hetdp.server.strategy import HeterogeneityStrategy

    class LyingServer(InMemoryTransport):
        def exchange(
            self, step: str, payloads: Mapping[int, Mapping[str, Any]], timeout: float
        ) -> Any:
            changed = {node: dict(p) for node, p in payloads.items()}
            if step == ADVERTISE_KEYS:
                for payload in changed.values():
                    payload[Key.SESSION_SIZE] = 10**6
            if step == SHARE_KEYS:
                victim = min(changed)
                directory = dict(changed[victim][Key.SECAGG])
                directory["num_advertised"] += 1
                changed[victim][Key.SECAGG] = directory
            return super().exchange(step, changed, timeout)

    config = run_config(tmp_path, scenario_file(tmp_path, 10), **{"on-degraded": "release"})
    settings = RunSettings.from_run_config(config)
    document = HeterogeneityStrategy(settings).run(LyingServer(10, config))
    assert document["status"] == "success"
    share = next(s for s in document["steps"] if s["step"] == SHARE_KEYS)
    assert any("shows 10 keys" in why for why in share["dropouts"].values())
    assert document["n"] == 10 and document["clients_in_sum"]["stage1"] == 9
    assert_matches_reference(document, config)


def test_server_and_clients_plan_with_the_directory_n_after_an_advertise_dropout(
    tmp_path: Path,
) -> None:
    # node 5003 never advertises keys: the directory counts 7, every client's noise share and
    # the server's plan use n = 7 (not the 8 invited), and the run equals its twin at n = 7
    from test_server_strategy import InMemoryTransport

    from fa_hetdp.flower.settings import RunSettings
    from fa_hetdp.server.strategy import HeterogeneityStrategy

    config = run_config(tmp_path, scenario_file(tmp_path, 8))
    transport = InMemoryTransport(8, config)
    transport.silent = {5003}
    document = HeterogeneityStrategy(RunSettings.from_run_config(config)).run(transport)
    assert document["status"] == "success"
    assert document["n"] == 7 and document["clients_in_sum"] == {"stage1": 7, "stage2": 7}
    assert_matches_reference(document, config)
