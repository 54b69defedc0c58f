"""The malicious-server option through the Flower apps (in-memory transport, real handlers)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from test_flower_helpers import assert_matches_reference, run_config, scenario_file
from test_server_strategy import run

from fa_hetdp.flowerkit.steps import CONSISTENCY_STEP


def roster_nodes(tmp_path: Path, n: int, **extra: Any) -> dict[int, dict[str, Any]]:
    """Identity keys and one roster for nodes 5000 .. 5000 + n - 1: their node-config keys."""
    from fa_hetdp.secagg.identity import main as identity

    pairs = []
    for i in range(n):
        assert identity(["keygen", str(tmp_path / f"owner-{i}.identity")]) == 0
        pairs.append(f"owner-{i}={tmp_path / f'owner-{i}.identity.pub'}")
    assert identity(["roster", str(tmp_path / "roster.toml"), *pairs]) == 0
    return {
        5000 + i: {
            "secagg-roster": str(tmp_path / "roster.toml"),
            "secagg-identity-key": str(tmp_path / f"owner-{i}.identity"),
            **extra,
        }
        for i in range(n)
    }


def run_nodes(
    config: dict[str, Any], n: int, nodes: dict[int, dict[str, Any]], transport: Any = None
) -> dict[str, Any]:
    """:func:`run` with each node's own node-config keys added."""
    from test_server_strategy import InMemoryTransport

    from fa_hetdp.flowerkit.settings import RunSettings
    from fa_hetdp.server.strategy import HeterogeneityStrategy

    transport = transport or InMemoryTransport(n, config)
    for node, keys in nodes.items():
        transport.contexts[node].node_config.update(keys)
    return HeterogeneityStrategy(RunSettings.from_run_config(config)).run(transport)


def test_malicious_server_mode_adds_the_consistency_steps_and_matches_the_twin(
    tmp_path: Path,
) -> None:
    # n = 10, complete graph, t = ceil(2/3 x 9) = 6 >= floor(10 / 2) + 1: safe for gamma = 0
    config = run_config(
        tmp_path, scenario_file(tmp_path, 10), **{"secagg-threat-model": "malicious-server"}
    )
    document = run_nodes(config, 10, roster_nodes(tmp_path, 10, **{"secagg-min-gamma": 0.0}))
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

    from fa_hetdp.flowerkit.wire import WireFormatError, decode, encode

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
    from fa_hetdp.flowerkit.steps import Key, State
    from fa_hetdp.flowerkit.wire import encode
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
    from fa_hetdp.flowerkit.wire import encode

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

    from fa_hetdp.flowerkit.settings import RunSettings
    from fa_hetdp.flowerkit.steps import ADVERTISE_KEYS, SHARE_KEYS, Key
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

    from fa_hetdp.flowerkit.settings import RunSettings
    from fa_hetdp.server.strategy import HeterogeneityStrategy

    config = run_config(tmp_path, scenario_file(tmp_path, 8))
    transport = InMemoryTransport(8, config)
    transport.silent = {5003}
    document = HeterogeneityStrategy(RunSettings.from_run_config(config)).run(transport)
    assert document["status"] == "success"
    assert document["n"] == 7 and document["clients_in_sum"] == {"stage1": 7, "stage2": 7}
    assert_matches_reference(document, config)


def aborted(config: dict[str, Any], start: Any) -> dict[str, Any]:
    """Run ``start()``, which must abort; return the result file it wrote."""
    import json

    from fa_hetdp.server.strategy import ProtocolAbortError

    with pytest.raises(ProtocolAbortError):
        start()
    document: dict[str, Any] = json.loads(Path(config["result-path"]).read_text())
    assert document["status"] == "aborted"
    return document


def test_malicious_server_mode_without_a_roster_refuses_to_start_on_every_node(
    tmp_path: Path,
) -> None:
    # each node pins malicious-server but has no roster, identity key or gamma floor: its
    # first handler stops with the one line that says what to provide, and the run aborts
    config = run_config(tmp_path, scenario_file(tmp_path, 6))
    pinned = {5000 + i: {"secagg-threat-model": "malicious-server"} for i in range(6)}
    document = aborted(config, lambda: run_nodes(config, 6, pinned))
    reasons = document["steps"][0]["dropouts"].values()
    assert len(reasons) == 6
    assert all("needs node-config secagg-roster, secagg-identity-key" in r for r in reasons)


def test_a_server_that_lowers_gamma_in_the_run_config_is_refused_by_the_nodes_floor(
    tmp_path: Path,
) -> None:
    # Attack: the nodes guard against gamma = 0.2 (node config: t >= floor((10 + 2) / 2) + 1
    # = 7), the server writes gamma = 0 and t = 6 into the run config. Before: clients took
    # gamma from the run config and joined with t = 6. Now each refuses at the setup: the
    # stated gamma is below its floor (the noise shares too; the threshold would be refused
    # next, test_a_client_insisting_on_a_safe_threshold_refuses_a_weaker_session).
    overrides: dict[str, Any] = {
        "secagg-threat-model": "malicious-server",
        "secagg-corrupt-fraction": 0.0,
    }
    config = run_config(tmp_path, scenario_file(tmp_path, 10), **overrides)
    nodes = roster_nodes(tmp_path, 10, **{"secagg-min-gamma": 0.2})
    document = aborted(config, lambda: run_nodes(config, 10, nodes))
    reasons = list(document["steps"][0]["dropouts"].values())
    assert len(reasons) == 10
    assert all("below this node's secagg-min-gamma=0.2" in r for r in reasons)


def test_an_honest_but_curious_node_floor_refuses_a_low_threshold(tmp_path: Path) -> None:
    # the same attack against honest-but-curious nodes with their own floor gamma = 0.3:
    # t = 6 of 9 share holders leaves 10 P[Bin(9, 0.3) >= 6] > 2^-40; every node refuses,
    # whether the server states a lower gamma (refused as such) or the node's own
    for stated, refusal in (
        (0.0, "below this node's secagg-min-gamma=0.3"),
        (0.3, "guards against gamma = 0.3"),
    ):
        config = run_config(
            tmp_path, scenario_file(tmp_path, 10), **{"secagg-corrupt-fraction": stated}
        )
        nodes = {5000 + i: {"secagg-min-gamma": 0.3} for i in range(10)}
        document = aborted(config, lambda c=config, m=nodes: run_nodes(c, 10, m))
        reasons = document["steps"][0]["dropouts"].values()
        assert len(reasons) == 10 and all(refusal in r for r in reasons)


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ({"secagg-min-gamma": 1.5}, "secagg-min-gamma must be a number in [0, 1)"),
        ({"secagg-roster": "/nonexistent/roster.toml"}, "needs both secagg-roster"),
    ],
)
def test_bad_node_secagg_keys_get_one_line_errors(keys: dict[str, Any], message: str) -> None:
    from fa_hetdp.flowerkit.settings import RunSettings, node_secagg

    settings = RunSettings.from_run_config(run_config(Path("/tmp"), Path("quickstart")))
    with pytest.raises(ValueError, match=re.escape(message)):
        node_secagg(keys, settings)


def test_a_malformed_roster_file_stops_the_node_with_one_line(tmp_path: Path) -> None:
    from fa_hetdp.flowerkit.settings import RunSettings, node_secagg
    from fa_hetdp.secagg.identity import RosterError

    nodes = roster_nodes(tmp_path, 2)
    (tmp_path / "roster.toml").write_text('[members]\nowner-0 = "12"\n')
    settings = RunSettings.from_run_config(run_config(tmp_path, scenario_file(tmp_path, 4)))
    with pytest.raises(RosterError, match="member 'owner-0': the identity key must be 64"):
        node_secagg(nodes[5000], settings)


def test_one_node_with_garbled_share_ciphertexts_is_dropped_with_its_reason(
    tmp_path: Path,
) -> None:
    # Issue 17 item 4: one node's share ciphertexts arrive garbled. Before: every other node
    # failed to open them at stage 1 and dropped, and the run aborted. Now the holders report
    # it, the run goes on without that node, and the result says why it was dropped.
    from fa_hetdp.flowerkit.steps import SHARE_KEYS, UNMASK_STEP, Key

    def garble(step: str, partition: int, reply: dict[str, Any]) -> dict[str, Any] | None:
        if step != SHARE_KEYS or partition != 2:
            return None
        message = dict(reply[Key.SECAGG])
        message["ciphertexts"] = [bytes([b[0] ^ 1]) + b[1:] for b in message["ciphertexts"]]
        return {**reply, Key.SECAGG: message}

    config = run_config(tmp_path, scenario_file(tmp_path, 8), **{"on-degraded": "release"})
    document = run(config, 8, tamper=garble)
    assert document["status"] == "success"
    assert document["clients_in_sum"] == {"stage1": 7, "stage2": 7}
    assert 2 not in document["partitions_in_sum"]["stage1"]
    unmask = next(s for s in document["steps"] if s["step"] == UNMASK_STEP[1])
    assert "unreadable" in unmask["dropouts"]["5002"]
    assert_matches_reference(document, config)


def test_a_malicious_server_simulation_without_rosters_uses_seeded_identities(
    tmp_path: Path,
) -> None:
    # mode = "simulation", no node holds a roster or pins the mode: the nodes sign and check
    # with identities derived from the seed (no protection, the same code path), and the run
    # equals its twin; a node whose key is not the one its partition derives is refused
    from fa_hetdp.flowerkit.settings import RunSettings, node_secagg, simulation_identities

    config = run_config(
        tmp_path, scenario_file(tmp_path, 10), **{"secagg-threat-model": "malicious-server"}
    )
    document = run(config, 10)
    assert document["status"] == "success"
    assert_matches_reference(document, config)
    settings = RunSettings.from_run_config(config)
    own = node_secagg({}, settings, (3, 10))
    keys, roster = simulation_identities(settings.seed or 0, 10)
    assert own.identity == keys[3] and own.roster == roster
