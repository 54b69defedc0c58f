"""``ddg`` and ``skellam`` through the Flower runtime: simulation and a real deployment.

A Flower simulation (SuperLink --simulation, Ray, ``flwr run``) per discrete mechanism and a
deployment on 127.0.0.1 (``flower-superlink`` + 3 ``flower-supernode`` processes) with
``mechanism = "ddg"``. Every run is seeded so that it must equal its in-process twin
(``test_flower_helpers.assert_matches_reference``), and its result must carry the mechanism
and its accounting. Few clients: CI runs these on 2 cores. The same settings over the
in-memory transport run fast in ``test_discrete_flower.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from deployment_cluster import SEEDED_NODE, DeploymentCluster
from test_flower_helpers import APP_CONFIG_KEYS, assert_matches_reference, scenario_file

from fa_hetdp.cli.cluster import FlowerCluster
from fa_hetdp.dp.mechanisms import get_mechanism

pytestmark = pytest.mark.slow

NUM_CLIENTS = 4


def assert_discrete_result(result: dict[str, Any] | None, output: str, mechanism: str) -> None:
    assert result is not None, output
    assert result["status"] == "success", result.get("reason")
    assert result["config"]["mechanism"] == mechanism
    assert result["privacy"]["composition"] == get_mechanism(mechanism).accounting
    assert result["clients_in_sum"] == {"stage1": NUM_CLIENTS, "stage2": NUM_CLIENTS}


def run_config(tmp_path: Path, mechanism: str, mode: str = "simulation") -> dict[str, object]:
    config: dict[str, object] = {
        "scenario": str(scenario_file(tmp_path, NUM_CLIENTS, seed=7)),
        "mode": mode,
        "mechanism": mechanism,
        "result-path": str(tmp_path / "result.json"),
        "progress-path": str(tmp_path / "progress.jsonl"),
        "stage-timeout": 120.0,
        "node-wait-timeout": 120.0,
    }
    assert set(config) <= APP_CONFIG_KEYS
    return config


@pytest.fixture(scope="module")
def simulation(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FlowerCluster]:
    with FlowerCluster(tmp_path_factory.mktemp("flower-sim-discrete")) as flower:
        flower.start_superlink()
        yield flower
    for process in flower.processes:
        assert not process.alive()


@pytest.mark.parametrize("mechanism", ["ddg", "skellam"])
def test_simulation_with_discrete_noise_matches_its_twin(
    simulation: FlowerCluster, tmp_path: Path, mechanism: str
) -> None:
    config = run_config(tmp_path, mechanism)
    run = simulation.submit(config, num_supernodes=NUM_CLIENTS, name=f"run-{tmp_path.name}")
    outcome = simulation.wait_run(run, tmp_path / "result.json", timeout=600)
    assert_discrete_result(outcome.result, outcome.output, mechanism)
    assert outcome.result is not None
    assert_matches_reference(outcome.result, config)


def test_deployment_with_ddg_matches_its_twin(tmp_path: Path) -> None:
    config = run_config(tmp_path, "ddg")
    cluster = DeploymentCluster(tmp_path / "cluster")
    with cluster:
        cluster.start_superlink()
        for i in range(NUM_CLIENTS):
            cluster.start_supernode(
                {"partition-id": i, "num-partitions": NUM_CLIENTS, **SEEDED_NODE}
            )
        outcome = cluster.wait_run(cluster.submit(config), tmp_path / "result.json", timeout=300)
        started = list(cluster.processes)
    for process in started:
        assert not process.alive(), process.name
    assert_discrete_result(outcome.result, outcome.output, "ddg")
    assert outcome.result is not None
    assert_matches_reference(outcome.result, config)
