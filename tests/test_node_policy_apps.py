"""The node policy and the privacy ledger in both apps, against the real handlers (issue 27).

Our ClientApp over the in-memory transport of ``test_server_strategy`` (each step calls
``clients.app.app`` in process) and the drop-in over the in-memory Grid of ``test_dropin``
(a user's ClientApp with ``fa_hetdp.flower.register``). Every node has its own ledger file.
Each attack ran to the end before the policy and the ledger were wired into the apps (the
server's word was all there was); each is now refused by every node at the step named, with
one line naming the node-config key.

A Flower simulation's nodes have no node config of their own: their policy is the scenario's
``[nodes]`` table, read only by our app in a Flower simulation, and ``fa-hetdp run`` refuses
before Flower starts what they would refuse.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flwr.app import Context, Message, RecordDict
from test_dropin import NODES, SEED, make_grid, partition_configs, server_context
from test_flower_helpers import run_config, scenario_file
from test_secagg_flower import roster_nodes
from test_server_strategy import InMemoryTransport

import fa_hetdp.flower
import fa_hetdp.server.app as server_app
from fa_hetdp.clients.app import app as client_app
from fa_hetdp.flowerkit.ledger import NodeLedger
from fa_hetdp.flowerkit.settings import RunSettings, dropout_partitions
from fa_hetdp.flowerkit.steps import ADVERTISE_KEYS, State
from fa_hetdp.flowerkit.wire import encode
from fa_hetdp.server.strategy import HeterogeneityStrategy, ProtocolAbortError

N = 6


@pytest.fixture(autouse=True)
def fast_poll(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server_app, "POLL_SECONDS", 0.0)


# ---------------------------------------------------------------------------- our app
class Recording(InMemoryTransport):
    """Keeps the payloads the server sent at the first step, and the nodes' refusals there."""

    sent: dict[int, Any]
    dropouts: dict[int, str]

    def exchange(self, step: str, payloads: Any, timeout: float) -> Any:
        if step == ADVERTISE_KEYS:
            self.sent = {node: dict(p) for node, p in payloads.items()}
        replies, dropouts = super().exchange(step, payloads, timeout)
        if step == ADVERTISE_KEYS:
            self.dropouts = dict(dropouts)
        return replies, dropouts


def _transport(
    tmp_path: Path,
    config: dict[str, Any],
    n: int,
    keys: dict[str, Any] | None = None,
    kind: type[InMemoryTransport] = InMemoryTransport,
) -> Any:
    transport = kind(n, config)
    for node, context in transport.contexts.items():
        context.node_config["ledger-path"] = str(tmp_path / "ledgers" / f"{node}.json")
        context.node_config.update(keys or {})
    return transport


def _own_run(transport: InMemoryTransport, config: dict[str, Any]) -> dict[str, Any]:
    return HeterogeneityStrategy(RunSettings.from_run_config(config)).run(transport)


def _own_refusals(transport: InMemoryTransport, config: dict[str, Any], step: str) -> list[str]:
    """Every node's reason at ``step`` (all refuse: the run aborts there)."""
    with pytest.raises(ProtocolAbortError, match=step):
        _own_run(transport, config)
    document = json.loads(Path(config["result-path"]).read_text())
    found = [s for s in document["steps"] if s["step"] == step]
    assert found and found[0]["replied"] == 0
    return list(found[0]["dropouts"].values())


# ---------------------------------------------------------------------------- the drop-in
def _dropin_refusals(
    tmp_path: Path,
    node_config: dict[str, Any],
    step: str = ADVERTISE_KEYS,
    per_node: list[dict[str, Any]] | None = None,
    **settings: Any,
) -> list[str]:
    """Every drop-in node's reason at ``step``; ``per_node``: node ``i``'s own extra keys."""
    configs = partition_configs(**node_config)
    for i, (node, config) in enumerate(configs.items()):
        config["ledger-path"] = str(tmp_path / "dropin-ledgers" / f"{node}.json")
        config.update(per_node[i] if per_node is not None else {})
    grid = make_grid(configs=configs)
    reasons: list[str] = []
    original = server_app.GridTransport.exchange

    def spy(self: Any, step_name: str, payloads: Any, timeout: float) -> Any:
        replies, dropouts = original(self, step_name, payloads, timeout)
        if step_name == step:
            reasons.extend(dropouts.values())
        return replies, dropouts

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(server_app.GridTransport, "exchange", spy)
        with pytest.raises(ProtocolAbortError, match=step):
            fa_hetdp.flower.measure(
                grid, server_context(), **{"epsilon": 1.0, "delta": 1e-5, "seed": SEED, **settings}
            )
    return reasons


SEEDED = {"allow-seeded-noise": True}


# ---------------------------------------------------------------------------- central noise
def test_central_placement_is_refused_by_our_app(tmp_path: Path) -> None:
    config = run_config(tmp_path, scenario_file(tmp_path, N), placement="central")
    reasons = _own_refusals(_transport(tmp_path, config, N, SEEDED), config, ADVERTISE_KEYS)
    assert len(reasons) == N
    assert all("allow-central-placement = false" in r for r in reasons)


def test_central_placement_is_refused_by_the_drop_in(tmp_path: Path) -> None:
    reasons = _dropin_refusals(tmp_path, {}, placement="central")
    assert reasons and all("allow-central-placement = false" in r for r in reasons)


def test_a_node_that_allows_central_placement_runs_it(tmp_path: Path) -> None:
    # the control: the node's own key, not the server's word, allows it
    config = run_config(tmp_path, scenario_file(tmp_path, N), placement="central")
    keys = {**SEEDED, "allow-central-placement": True}
    assert _own_run(_transport(tmp_path, config, N, keys), config)["status"] == "success"


# ---------------------------------------------------------------------------- the roster
def _roster_keys(tmp_path: Path, members: int, count: int, **extra: Any) -> dict[int, Any]:
    nodes = roster_nodes(tmp_path, members, **extra)
    return {node: keys for node, keys in nodes.items() if node < 5000 + count}


def test_a_session_smaller_than_the_roster_allows_is_refused(tmp_path: Path) -> None:
    # 20 owners on the roster, gamma = 0.2: c = ceil(0.2 x 20) = 4 colluders; the server
    # invites the target and 3 others (n = 4, t = 3 passes floor((4 + 1)/2) + 1 = 3, the
    # session count): the 3 colluders recovered the target's masked input before
    config = run_config(
        tmp_path,
        scenario_file(tmp_path, 4),
        **{
            "secagg-threat-model": "malicious-server",
            "secagg-corrupt-fraction": 0.2,
            "secagg-threshold": 3.0,
        },
    )
    transport = _transport(tmp_path, config, 4, SEEDED)
    nodes = _roster_keys(
        tmp_path, 20, 4, **{"secagg-min-gamma": 0.2, "secagg-threat-model": "malicious-server"}
    )
    for node, keys in nodes.items():
        transport.contexts[node].node_config.update(keys)
    reasons = _own_refusals(transport, config, ADVERTISE_KEYS)
    assert len(reasons) == 4
    for reason in reasons:
        assert "ceil(gamma |roster|)" in reason or "roster of 20" in reason, reason


def test_a_downgrade_to_honest_but_curious_is_refused(tmp_path: Path) -> None:
    # a node with a roster, an identity key and secagg-min-gamma but no threat-model pin:
    # the server asks for honest-but-curious (no consistency round) and the node ran it
    config = run_config(tmp_path, scenario_file(tmp_path, N))
    transport = _transport(tmp_path, config, N, SEEDED)
    for node, keys in _roster_keys(tmp_path, N, N, **{"secagg-min-gamma": 0.0}).items():
        transport.contexts[node].node_config.update(keys)
    reasons = _own_refusals(transport, config, ADVERTISE_KEYS)
    assert len(reasons) == N
    assert all("runs only the malicious-server mode" in r for r in reasons)


def test_a_downgrade_is_refused_by_the_drop_in(tmp_path: Path) -> None:
    keys = list(_roster_keys(tmp_path, NODES, NODES, **{"secagg-min-gamma": 0.0}).values())
    reasons = _dropin_refusals(tmp_path, {}, per_node=keys)
    assert len(reasons) == NODES
    assert all("runs only the malicious-server mode" in r for r in reasons)


def test_a_session_smaller_than_the_roster_is_refused_by_the_drop_in(tmp_path: Path) -> None:
    # 20 owners on the roster, gamma = 0.2 (c = 4): the server asks the 8 it picked for a
    # malicious-server session that its own rules accept for n = 8 (t = 6 >= floor((8 + 2)/2)
    # + 1); every node counts its colluders against the roster and refuses
    keys = list(
        _roster_keys(
            tmp_path,
            20,
            NODES,
            **{"secagg-min-gamma": 0.2, "secagg-threat-model": "malicious-server"},
        ).values()
    )
    settings = {"threat_model": "malicious-server", "corrupt_fraction": 0.2, "threshold": 6}
    reasons = _dropin_refusals(tmp_path, {}, per_node=keys, **settings)
    assert len(reasons) == NODES
    for reason in reasons:  # (the server keeps the start of a long reason)
        assert "c = ceil(gamma |roster|) = ceil(0.2 x 20) = 4" in reason, reason


# ---------------------------------------------------------------------------- epsilon caps
def test_a_huge_epsilon_is_refused_by_our_app(tmp_path: Path) -> None:
    config = run_config(tmp_path, scenario_file(tmp_path, N), epsilon=1e6)
    reasons = _own_refusals(_transport(tmp_path, config, N, SEEDED), config, ADVERTISE_KEYS)
    assert len(reasons) == N and all("measurement-max-epsilon = 10" in r for r in reasons)


def test_a_huge_epsilon_is_refused_by_the_drop_in(tmp_path: Path) -> None:
    reasons = _dropin_refusals(tmp_path, {}, epsilon=1e6)
    assert reasons and all("measurement-max-epsilon = 10" in r for r in reasons)


def test_a_non_dp_profile_is_refused(tmp_path: Path) -> None:
    config = run_config(tmp_path, scenario_file(tmp_path, N), profile="paper")
    reasons = _own_refusals(_transport(tmp_path, config, N, SEEDED), config, ADVERTISE_KEYS)
    assert len(reasons) == N and all("allow-non-dp = false" in r for r in reasons)


def test_a_non_dp_profile_is_refused_by_the_drop_in(tmp_path: Path) -> None:
    reasons = _dropin_refusals(tmp_path, {}, profile="paper")
    assert reasons and all("allow-non-dp = false" in r for r in reasons)


# ---------------------------------------------------------------------------- the ledger
def test_measurements_past_the_ledger_cap_are_refused_and_a_restart_remembers(
    tmp_path: Path,
) -> None:
    # before: 31 measurements (then any number) ran; the only trace was the server's caveat.
    # The node's ledger caps what it releases, whatever the server asks, across restarts.
    n = 3
    keys = {**SEEDED, "ledger-max-epsilon": 2.0}
    runs = 0
    reasons: list[str] = []
    for runs in range(1, 32):
        config = run_config(tmp_path, scenario_file(tmp_path, n), seed=runs)
        transport = _transport(tmp_path, config, n, keys, Recording)  # a new process
        try:
            document = _own_run(transport, config)
        except ProtocolAbortError:
            reasons = list(transport.dropouts.values())
            break
        assert document["status"] == "success"
    assert 1 < runs < 31, "the ledger never refused"
    assert len(reasons) == n
    assert all("ledger-max-epsilon = 2" in r and "refused" in r for r in reasons)
    for node in range(5000, 5000 + n):  # what was charged: below the cap, restored from file
        ledger = NodeLedger(tmp_path / "ledgers" / f"{node}.json", "record", 2.0)
        assert len(ledger.entries()) == runs - 1
        assert ledger.spent().epsilon <= 2.0 + 1e-9


def test_the_drop_in_charges_its_ledger(tmp_path: Path) -> None:
    configs = partition_configs(**{"ledger-max-epsilon": 1.5})
    for node, config in configs.items():
        config["ledger-path"] = str(tmp_path / f"{node}.json")
    for _ in range(2):
        fa_hetdp.flower.measure(
            make_grid(configs=configs), server_context(), epsilon=1.0, delta=1e-5, seed=SEED
        )
    with pytest.raises(ProtocolAbortError, match="advertise_keys"):
        fa_hetdp.flower.measure(
            make_grid(configs=configs), server_context(), epsilon=1.0, delta=1e-5, seed=SEED
        )
    for node in configs:
        assert len(NodeLedger(tmp_path / f"{node}.json", "record", 1.5).entries()) == 2


# ---------------------------------------------------------------------------- nonce replay
def _advertise(context: Context, payload: Any) -> Message:
    message = Message(
        content=encode(payload),
        dst_node_id=context.node_id,
        message_type=f"query.{ADVERTISE_KEYS}",
        group_id=ADVERTISE_KEYS,
    )
    return client_app(message, context)


def test_a_replayed_session_nonce_is_refused_also_after_a_restart(tmp_path: Path) -> None:
    config = run_config(tmp_path, scenario_file(tmp_path, N))
    transport = _transport(tmp_path, config, N, None, Recording)
    assert _own_run(transport, config)["status"] == "success"
    node = 5000
    context = transport.contexts[node]
    with pytest.raises(Exception, match="was seen before"):  # the same process
        _advertise(context, transport.sent[node])
    restarted = Context(  # a new process: its own state, the same node config
        run_id=2,
        node_id=node,
        node_config=dict(context.node_config),
        state=RecordDict(),
        run_config=dict(config),
    )
    with pytest.raises(Exception, match="was seen before"):
        _advertise(restarted, transport.sent[node])
    # the control: a fresh context with a fresh ledger takes the same message
    fresh = Context(
        run_id=3,
        node_id=node,
        node_config={**context.node_config, "ledger-path": str(tmp_path / "fresh.json")},
        state=RecordDict(),
        run_config=dict(config),
    )
    _advertise(fresh, transport.sent[node])


# ---------------------------------------------------------------------------- around the apps
CENTRAL_ALLOWED = "[nodes]\nallow_central_placement = true\n"


def test_a_simulated_nodes_policy_is_the_scenarios(tmp_path: Path) -> None:
    from fa_hetdp.clients.policy import simulated_node_config
    from fa_hetdp.server.results import simulation_caveats

    scenario = scenario_file(tmp_path, N, extra=CENTRAL_ALLOWED + "measurement_max_epsilon = 20\n")
    settings = RunSettings.from_run_config(run_config(tmp_path, scenario, placement="central"))
    node = simulated_node_config({"partition-id": 0, "num-partitions": N}, settings)
    assert node["allow-central-placement"] is True and node["measurement-max-epsilon"] == 20.0
    assert any("allow-central-placement" in c for c in simulation_caveats(settings))
    # a scenario without [nodes]: the node's defaults (its own keys only)
    plain = RunSettings.from_run_config(run_config(tmp_path, scenario_file(tmp_path, N)))
    assert simulated_node_config({"partition-id": 0}, plain) == {"partition-id": 0}


def test_the_nodes_table_is_checked_with_the_scenario_and_round_trips(tmp_path: Path) -> None:
    from fa_hetdp.config.rules import ConfigError
    from fa_hetdp.config.scenario import load_scenario, scenario_from_dict

    bad = "[nodes]\nallow_non_dp = 1\nmeasurement_max_epsilon = -1\nledger_max_detla = 1e-6\n"
    with pytest.raises(ConfigError) as info:
        load_scenario(scenario_file(tmp_path, N, extra=bad))
    keys = {key for key, _ in info.value.problems}
    assert keys == {"nodes.allow_non_dp", "nodes.measurement_max_epsilon", "nodes.ledger_max_detla"}
    stated = load_scenario(scenario_file(tmp_path, N, extra=CENTRAL_ALLOWED))
    assert stated.to_dict()["nodes"] == {"allow_central_placement": True}
    assert scenario_from_dict(stated.to_dict()).nodes == stated.nodes


def test_only_a_flower_simulation_of_our_app_reads_the_scenarios_nodes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import fa_hetdp.clients.policy as policy

    scenario = scenario_file(tmp_path, N, extra=CENTRAL_ALLOWED)
    config = run_config(tmp_path, scenario, placement="central")
    settings = RunSettings.from_run_config(config)
    context = Context(
        run_id=7, node_id=1, node_config={"partition-id": 0}, state=RecordDict(), run_config=config
    )
    # a SuperNode (and the in-process nodes of these tests): its node config only
    assert policy.node_policy(context, settings).allow_central_placement is False
    monkeypatch.setattr(policy, "flower_simulation", lambda: True)
    simulated = policy.node_policy(context, settings)
    assert simulated.allow_central_placement is True
    assert simulated.ledger_path.parent.name == "run-7"  # one ledger per run
    # the drop-in's settings are the server's message: never the node's policy
    assert policy.node_policy(context, settings, dropin=True).allow_central_placement is False


def test_a_simulated_run_at_central_placement_runs_when_the_scenario_allows_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The paper's distributed-vs-central comparison in a simulation: the simulated nodes'
    # policy is the scenario's (in process here, the Ray actor check stood in for).
    import fa_hetdp.clients.policy as policy

    monkeypatch.setattr(policy, "flower_simulation", lambda: True)
    allowed = scenario_file(tmp_path, N, extra=CENTRAL_ALLOWED)
    config = run_config(tmp_path, allowed, placement="central")
    assert _own_run(InMemoryTransport(N, config), config)["status"] == "success"
    plain = run_config(tmp_path / "plain", scenario_file(tmp_path, N), placement="central")
    (tmp_path / "plain").mkdir()
    reasons = _own_refusals(InMemoryTransport(N, plain), plain, ADVERTISE_KEYS)
    assert len(reasons) == N and all("allow-central-placement = false" in r for r in reasons)


def _run_args(*argv: str) -> Any:
    import argparse

    from fa_hetdp.cli.run import add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(list(argv))


@pytest.mark.parametrize("name", ["digits-all", "quickstart", "silos"])
def test_the_shipped_runs_are_within_a_nodes_defaults(name: str) -> None:
    # the main job (fa-hetdp run: digits-all at epsilon = 1) and the README's runs need no
    # [nodes] table: the node's defaults accept them
    from fa_hetdp.cli.run import DEFAULT_SCENARIO, check_simulated_nodes, prepare

    assert DEFAULT_SCENARIO == "digits-all"
    setup = prepare(_run_args(name))
    check_simulated_nodes(setup.run_config, setup.dim)


def test_fa_hetdp_run_refuses_what_the_simulated_nodes_refuse_before_flower_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import fa_hetdp.cli.run as run_module
    from fa_hetdp.cli.main import main
    from fa_hetdp.config.rules import ConfigError

    def started(*args: object, **kwargs: object) -> object:
        raise AssertionError("Flower started")

    monkeypatch.setattr(run_module, "run_simulation", started)
    monkeypatch.chdir(tmp_path)
    scenario = scenario_file(tmp_path, N)
    scenario.write_text(scenario.read_text().replace("epsilon = 1.0\n", "epsilon = 20.0\n"))
    assert main(["run", str(scenario)]) == 2
    err = capsys.readouterr().err
    assert "nodes.measurement_max_epsilon: measurement-max-epsilon = 10" in err
    assert "nodes.ledger_max_epsilon: ledger-max-epsilon = 10" in err
    assert "state nodes.measurement_max_epsilon there" in err
    plain = {"scenario": str(scenario_file(tmp_path, N)), "mode": "simulation"}
    with pytest.raises(ConfigError, match=r"nodes\.allow_central_placement"):
        run_module.check_simulated_nodes({**plain, "placement": "central"}, 64)
    with pytest.raises(ConfigError, match=r"nodes\.allow_non_dp"):
        run_module.check_simulated_nodes({**plain, "profile": "paper"}, 64)
    # the control: the scenario states its simulated nodes' caps
    caps = "[nodes]\nmeasurement_max_epsilon = 20\nledger_max_epsilon = 20\n"
    stated = scenario_file(tmp_path, N, extra=caps)
    stated.write_text(stated.read_text().replace("epsilon = 1.0\n", "epsilon = 20.0\n"))
    run_module.check_simulated_nodes({"scenario": str(stated), "mode": "simulation"}, 64)


def test_the_supernode_prints_its_ledger_at_start_and_after_a_charge(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from fa_hetdp.cli.supernode import LedgerWatch, node_ledger
    from fa_hetdp.config.rules import ConfigError

    path = tmp_path / "node.json"
    argv = ["--superlink", "x:1", "--node-config", f'partition-id=0 ledger-path="{path}"']
    watch = LedgerWatch(node_ledger(argv, {}))
    watch.show()
    assert "spent epsilon = 0" in capsys.readouterr().out
    watch.poll()
    assert capsys.readouterr().out == ""  # nothing new
    watch.ledger.charge(b"\x01" * 16, (1.0, 1e-5), unit="record")
    watch.poll()
    assert "over 1 measurement" in capsys.readouterr().out
    with pytest.raises(ConfigError, match="ledger-max-epsilon"):
        node_ledger(["--node-config", "ledger-max-epsilon=-1"], {})


# ---------------------------------------------------------------------------- realised noise
class Refusals(InMemoryTransport):
    """Keeps every node's refusal at every step (step -> node -> reason)."""

    def exchange(
        self, step: str, payloads: Mapping[int, Mapping[str, Any]], timeout: float
    ) -> tuple[dict[int, dict[str, Any]], dict[int, str]]:
        replies, dropouts = super().exchange(step, payloads, timeout)
        self.refusals = {**getattr(self, "refusals", {}), step: dict(dropouts)}
        return replies, dropouts


def _degraded(tmp_path: Path, keys: dict[str, Any]) -> tuple[dict[str, Any], Any, frozenset[int]]:
    """20 nodes, 2 lost before stage 1's masked input (their noise shares with them)."""
    config = run_config(
        tmp_path,
        scenario_file(tmp_path, 20),
        **{"dropout-fraction": 0.1, "dropout-stage": "stage1", "on-degraded": "release"},
    )
    transport = _transport(tmp_path, config, 20, {**SEEDED, **keys}, Refusals)
    return config, transport, dropout_partitions(RunSettings.from_run_config(config))


def test_each_node_charges_the_noise_its_sums_actually_hold(tmp_path: Path) -> None:
    # Issue 28: 2 of 20 nodes are lost before stage 1, so stage 1's sum holds 18 noise shares
    # and the release spends more than the plan's epsilon = 1 (the server releases it: on-degraded
    # = "release"). Before, every node's ledger said 1.000 while the result said more; now each
    # node recomputes the noise left in the sum from the unmask request (survivors less the
    # colluders it guards against) and charges that before it answers.
    config, transport, dropped = _degraded(tmp_path, {})
    document = _own_run(transport, config)
    assert document["status"] == "success" and document["clients_in_sum"]["stage1"] == 18
    spent = document["privacy"]["epsilon_spent"]
    assert spent > 1.0 + 1e-3  # degraded: more than the target
    for node in range(5000, 5020):
        if node - 5000 in dropped:
            continue  # lost before its first release: never charged
        ledger = NodeLedger(tmp_path / "ledgers" / f"{node}.json", "record")
        (entry,) = ledger.entries()
        assert entry.charge is not None and "(realised)" in entry.name
        assert ledger.spent().epsilon == pytest.approx(spent, rel=1e-6)


def test_a_node_refuses_to_unmask_a_sum_worth_more_than_its_cap(tmp_path: Path) -> None:
    # The same degraded sum against nodes whose own cap is just above the plan: each refuses
    # the unmasking (one line, with the noise left in the sum), so the sum is never decoded.
    config, transport, _ = _degraded(tmp_path, {"measurement-max-epsilon": 1.001})
    with pytest.raises(ProtocolAbortError, match="stage1_unmask"):
        _own_run(transport, config)
    reasons = list(transport.refusals["stage1_unmask"].values())
    assert len(reasons) == 18
    assert all("measurement-max-epsilon = 1.001: the noise left in the sum" in r for r in reasons)
    assert all("16 honest shares of 18" not in r for r in reasons)  # gamma = 0: c = 0
    assert all("18 honest shares of 18" in r for r in reasons)


def test_differencing_two_central_runs_needs_a_node_that_allows_central_noise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue 27's attack: under central placement the server's unmasked sums are noiseless, so
    # two accepted runs -- 9 nodes, then the same 8 without node 0 -- give back node 0's
    # vector. Against nodes that allow central noise (their own key) it still works, exactly;
    # against the default policy both runs are refused at the first step and the server never
    # holds a sum.
    from fa_hetdp.server.session import AnalysisSession

    sums: list[np.ndarray] = []
    original = AnalysisSession.secure_sum

    def recording(self: AnalysisSession, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        sums.append(np.asarray(result.sum, dtype=np.float64))
        return result

    monkeypatch.setattr(AnalysisSession, "secure_sum", recording)
    n = 9
    config = run_config(tmp_path, scenario_file(tmp_path, n), placement="central")
    allow = {**SEEDED, "allow-central-placement": True}
    first = _transport(tmp_path / "first", config, n, allow)
    assert _own_run(first, config)["status"] == "success"
    local = first.contexts[5000].state[State.LOCAL]
    x0 = np.asarray(local[State.X].numpy(), dtype=np.float64)  # node 0's own vector
    stage1_with = sums[0]
    second = _transport(tmp_path / "second", config, n, allow)
    second.silent = {5000}  # the same 8 nodes, without node 0
    assert _own_run(second, config)["status"] == "success"
    stage1_without = sums[2]  # run 1: stage 1, stage 2; run 2: stage 1, ...
    np.testing.assert_allclose((stage1_with - stage1_without)[: x0.size], x0, atol=1e-6)

    sums.clear()
    for name, silent in (("third", set()), ("fourth", {5000})):
        transport = _transport(tmp_path / name, config, n, SEEDED, Refusals)
        transport.silent = silent
        with pytest.raises(ProtocolAbortError):
            _own_run(transport, config)
        reasons = transport.refusals[ADVERTISE_KEYS].values()
        assert reasons and all("allow-central-placement = false" in r for r in reasons)
    assert sums == []  # no sum was ever decoded


def test_a_plan_with_too_little_noise_for_its_stated_epsilon_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The node recomputes the noise of the plan it is to run and the epsilon that noise buys.
    # A plan that states epsilon = 1 while its noise is calibrated for epsilon = 16 (about a
    # quarter of the noise; what a tampered or buggy plan would carry) is refused at the first
    # step, by every node, before anything leaves it.
    import dataclasses

    import fa_hetdp.clients.policy as policy_module

    built = policy_module.node_protocol_plan

    def understated(settings: Any, **kwargs: Any) -> Any:
        loud = dataclasses.replace(
            settings, protocol=dataclasses.replace(settings.protocol, epsilon=16.0)
        )
        plan = built(loud, **kwargs)
        return dataclasses.replace(plan, config=dataclasses.replace(plan.config, epsilon=1.0))

    monkeypatch.setattr(policy_module, "node_protocol_plan", understated)
    config = run_config(tmp_path, scenario_file(tmp_path, N))
    reasons = _own_refusals(_transport(tmp_path, config, N, SEEDED), config, ADVERTISE_KEYS)
    assert len(reasons) == N
    assert all("noise: the plan states epsilon = 1" in r and "refused" in r for r in reasons)
