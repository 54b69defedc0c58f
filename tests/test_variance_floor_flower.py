"""The adaptive variance floor through the Flower apps' handlers and strategy (in memory).

Stage 0 (``stage0_input`` / ``stage0_unmask``) is a third secure summation before the two
stages; the server picks the floor from the unmasked noisy histogram, sends it with
``stage1_input``, and the result document carries the floor, the histogram and its cost.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_flower_helpers import (
    APP_CONFIG_KEYS,
    assert_matches_reference,
    run_config,
    scenario_file,
)
from test_server_strategy import InMemoryTransport

from fa_hetdp.cli.cluster import FlowerCluster
from fa_hetdp.flowerkit.settings import RunSettings
from fa_hetdp.flowerkit.steps import STAGE0_INPUT, STAGE0_UNMASK, STAGE1_INPUT
from fa_hetdp.protocol.floor import FLOOR_RELEASE, floor_edges
from fa_hetdp.protocol.plan import plan_protocol
from fa_hetdp.server.results import privacy_section
from fa_hetdp.server.strategy import HeterogeneityStrategy, ProtocolAbortError


def _adaptive(tmp_path: Path, n: int, epsilon: float = 20.0) -> dict[str, object]:
    # epsilon = 20 is above a node's default caps (10, issue 27): the nodes state theirs, the
    # simulated ones in the scenario's [nodes] table, the in-process ones in their node
    # config (_transport)
    caps = f"[nodes]\nmeasurement_max_epsilon = {epsilon}\nledger_max_epsilon = {epsilon}\n"
    path = scenario_file(tmp_path, n, extra=caps)
    text = path.read_text().replace("epsilon = 1.0\n", f"epsilon = {epsilon}\n")
    path.write_text(text.replace("adaptive_floor = false\n", "adaptive_floor = true\n"))
    return run_config(tmp_path, path)


def _transport(config: dict[str, object], n: int) -> InMemoryTransport:
    """In-process nodes with the caps of the scenario's [nodes] in their own node config."""
    settings = RunSettings.from_run_config(config)
    transport = InMemoryTransport(n, config)
    for context in transport.contexts.values():
        context.node_config.update(settings.scenario.nodes.node_config())
    return transport


def test_adaptive_run_releases_the_histogram_and_uses_its_floor(tmp_path: Path) -> None:
    config = _adaptive(tmp_path, 16)
    settings = RunSettings.from_run_config(config)
    document = HeterogeneityStrategy(settings).run(_transport(config, 16))
    assert document["status"] == "success"
    steps = [s["step"] for s in document["steps"]]
    assert steps.index(STAGE0_INPUT) < steps.index(STAGE0_UNMASK) < steps.index(STAGE1_INPUT)
    floor = document["adaptive_floor"]
    assert floor is not None and floor["floor"] in list(floor_edges(0.01))
    assert len(floor["noisy_histogram"]) == 17 and 0 <= floor["clients_floored_noisy"] <= 16
    assert "noisy" in floor["label"] and floor["budget_share"] == 0.05
    # stages 1-2 were planned with W = 1/floor, and the histogram's cost is counted
    plan = plan_protocol(settings.protocol, n=16, d=64, floor=floor["floor"])
    assert document["sigmas"]["mean"] == pytest.approx(plan.sigma("mean"))
    assert document["sigmas"]["weighted"] == pytest.approx(plan.sigma("weighted"))
    per_release = {r["name"] for r in document["privacy"]["per_release"]}
    assert FLOOR_RELEASE in per_release
    assert document["privacy"]["epsilon_spent"] == pytest.approx(20.0, rel=1e-6)
    assert any("stage 0" in line for line in document["privacy"]["released"])
    assert_matches_reference(document, config)  # the in-process twin replays stage 0 too


def test_a_client_refuses_stage1_without_the_floor(tmp_path: Path) -> None:
    # A server that skips sending the floor loses every client at stage 1 (they refuse).
    config = _adaptive(tmp_path, 8)
    settings = RunSettings.from_run_config(config)
    transport = _transport(config, 8)
    original = transport.exchange

    def drop_floor(step, payloads, timeout):  # type: ignore[no-untyped-def]
        if step == STAGE1_INPUT:
            payloads = {k: {**v, "variance-floor": None} for k, v in payloads.items()}
            payloads = {k: {kk: vv for kk, vv in v.items() if vv is not None}
                        for k, v in payloads.items()}  # fmt: skip
        return original(step, payloads, timeout)

    transport.exchange = drop_floor  # type: ignore[method-assign]
    strategy = HeterogeneityStrategy(settings)
    with pytest.raises(ProtocolAbortError, match="stage1_input"):
        strategy.run(transport)
    aborted = json.loads(strategy.result_file.read_text())
    privacy = aborted["privacy"]  # the histogram went out and is recorded with its cost
    assert any("stage 0" in line for line in privacy["released"])
    assert 0 < privacy["guarantees"][0]["epsilon"] < 20.0


def test_abort_after_stage0_states_the_histograms_cost(tmp_path: Path) -> None:
    settings = RunSettings.from_run_config(_adaptive(tmp_path, 8))
    plan = plan_protocol(settings.protocol, n=8, d=64)
    section = privacy_section(plan, None, released=["stage 0"], floor_fraction=1.0)
    eps = section["guarantees"][0]["epsilon"]
    assert 0 < eps < 20.0 / 2  # the histogram's 5 % of mu^2 alone
    assert section["degraded"] is False


@pytest.mark.slow
def test_adaptive_floor_in_a_flower_simulation(tmp_path: Path) -> None:
    # The real Flower runtime (SuperLink --simulation, flwr run): stage 0 goes through it too.
    config = _adaptive(tmp_path, 12)
    keys = {"scenario", "mode", "result-path", "progress-path", "stage-timeout"}
    run_config = {k: v for k, v in config.items() if k in keys}
    run_config["node-wait-timeout"] = 120.0
    run_config["stage-timeout"] = 120.0
    assert set(run_config) <= APP_CONFIG_KEYS
    result_path = Path(str(run_config["result-path"]))
    with FlowerCluster(tmp_path / "flower") as flower:
        flower.start_superlink()
        run_id = flower.submit(run_config, num_supernodes=12, name="adaptive-floor")
        outcome = flower.wait_run(run_id, result_path, timeout=600)
    assert outcome.result is not None, outcome.output
    assert outcome.result["status"] == "success"
    assert outcome.result["adaptive_floor"] is not None
    assert outcome.result["survivors"][STAGE0_UNMASK] == 12
    assert_matches_reference(outcome.result, run_config)
