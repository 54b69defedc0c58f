"""A real deployment on 127.0.0.1: `flower-superlink` + 5 `flower-supernode` + `flwr run`.

Each SuperNode is a separate process with its own ``--node-config`` (partition id), as on
separate hosts. In the middle of the protocol (after the key rounds, before the stage-1
masked inputs) one SuperNode is killed with SIGKILL; the run must finish with the 4
survivors. Once without TLS, with seeded noise so the result can be checked exactly against
the in-process twin of the 4 survivors; once as in production: TLS (certificates made here with
``cryptography``), SuperNode authentication (keys registered with ``flwr supernode register``;
an unregistered SuperNode is turned away) and CSPRNG noise (``mode = "deployment"``), checked
through the accounting.
Every process started is stopped, also when the test fails (``FlowerCluster`` is a context
manager).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from deployment_cluster import (
    SEEDED_NODE,
    DeploymentCluster,
    TlsSettings,
    wait_for_step,
    wait_online,
)
from test_flower_helpers import APP_CONFIG_KEYS, assert_matches_reference, scenario_file

from fa_hetdp.cli.cluster import read_progress
from fa_hetdp.dp.accounting import privacy_spent
from fa_hetdp.flowerkit.settings import RunSettings
from fa_hetdp.protocol.plan import plan_protocol
from fa_hetdp.server.certs import generate_node_keys, generate_tls_files

pytestmark = pytest.mark.slow

NUM_NODES = 5
KILLED = 4  # partition id of the SuperNode that dies


@pytest.mark.parametrize("tls", [False, True], ids=["insecure", "tls"])
def test_deployment_survives_a_killed_supernode(tmp_path: Path, tls: bool) -> None:
    tls_settings = None
    if tls:
        files = generate_tls_files(tmp_path / "certs")
        tls_settings = TlsSettings(
            ca_certificate=files.ca_certificate,
            server_certificate=files.server_certificate,
            server_key=files.server_key,
        )
    scenario = scenario_file(tmp_path, NUM_NODES, seed=9)
    result_path = tmp_path / "result.json"
    progress = tmp_path / "progress.jsonl"
    config: dict[str, object] = {
        "scenario": str(scenario),
        "mode": "deployment" if tls else "simulation",
        "result-path": str(result_path),
        "progress-path": str(progress),
        "stage-timeout": 30.0,
        "node-wait-timeout": 120.0,
        "on-degraded": "release",  # the killed node's noise share is missing: allowed here
    }
    assert set(config) <= APP_CONFIG_KEYS
    with DeploymentCluster(tmp_path / "cluster", tls=tls_settings, node_auth=tls) as cluster:
        cluster.start_superlink()
        keys = [None] * NUM_NODES
        intruder = None
        if tls:
            keys = [generate_node_keys(tmp_path / "keys", f"owner-{i}") for i in range(NUM_NODES)]
            for key in keys:
                cluster.register_supernode(key.public_key)
            stranger = generate_node_keys(tmp_path / "keys", "stranger")
            intruder = cluster.start_supernode(
                {"partition-id": 0, "num-partitions": NUM_NODES},
                name="intruder",
                auth_private_key=stranger.private_key,
            )
        nodes = [
            cluster.start_supernode(
                {"partition-id": i, "num-partitions": NUM_NODES, **({} if tls else SEEDED_NODE)},
                auth_private_key=None if key is None else key.private_key,
            )
            for i, key in enumerate(keys)
        ]
        run = cluster.submit(config, name="flwr-run")
        wait_for_step(cluster, progress, "share_keys", timeout=240)
        cluster.kill(nodes[KILLED])
        assert not nodes[KILLED].alive()
        outcome = cluster.wait_run(run, result_path, timeout=300)
        started = list(cluster.processes)
        intruder_log = "" if intruder is None else intruder.log_tail(20_000)
    for process in started:
        assert not process.alive(), process.name

    result = outcome.result
    assert result is not None, outcome.output
    assert result["status"] == "success", result.get("reason")
    assert result["clients_in_sum"] == {"stage1": 4, "stage2": 4}
    assert result["partitions_in_sum"]["stage1"] == [0, 1, 2, 3]
    assert result["survivors"]["share_keys"] == NUM_NODES
    assert result["survivors"]["stage1_input"] == NUM_NODES - 1
    assert len(result["steps"][2]["dropouts"]) == 1
    if not tls:
        assert_matches_reference(result, config)
    else:
        # The unregistered SuperNode never joined: exactly the 5 registered ones connected.
        nodes_event = next(e for e in read_progress(progress) if e["event"] == "nodes")
        assert nodes_event["connected"] == NUM_NODES, intruder_log
        assert "Failed to activate SuperNode" in intruder_log
        settings = RunSettings.from_run_config(config)
        assert settings.seed is None and result["seed"] is None
        plan = plan_protocol(settings.protocol, n=NUM_NODES, d=64)
        fraction = plan.noise_fraction(4)
        spent = privacy_spent(
            plan.budget, dict.fromkeys(("mean", "weighted", "dispersion", "q"), fraction)
        )
        assert result["privacy"]["epsilon_spent"] == pytest.approx(spent.epsilon, rel=1e-12)
        assert result["privacy"]["degraded"] is True
        assert all(len(v) == 64 for v in result["statistics"].values() if v is not None)


def test_superlink_restart_with_a_database_keeps_nodes_and_registrations(tmp_path: Path) -> None:
    """A SuperLink with ``--database`` restarts without losing its SuperNodes or their keys.

    TLS and SuperNode authentication: the keys are registered once, before the restart; after
    it the same SuperNodes (still running: they retry) reconnect and a run succeeds.
    """
    files = generate_tls_files(tmp_path / "certs")
    tls = TlsSettings(files.ca_certificate, files.server_certificate, files.server_key)
    nodes_count = 3
    scenario = scenario_file(tmp_path, nodes_count, seed=9)
    result_path = tmp_path / "result.json"
    config: dict[str, object] = {
        "scenario": str(scenario),
        "result-path": str(result_path),
        "stage-timeout": 30.0,
        "node-wait-timeout": 120.0,
    }
    cluster_dir = tmp_path / "cluster"
    with DeploymentCluster(cluster_dir, tls=tls, node_auth=True, database=True) as cluster:
        cluster.start_superlink()
        keys = [generate_node_keys(tmp_path / "keys", f"owner-{i}") for i in range(nodes_count)]
        for key in keys:
            cluster.register_supernode(key.public_key)
        nodes = [
            cluster.start_supernode(
                {"partition-id": i, "num-partitions": nodes_count},
                auth_private_key=key.private_key,
            )
            for i, key in enumerate(keys)
        ]
        wait_online(cluster, nodes_count)
        cluster.restart_superlink()
        assert all(node.alive() for node in nodes)
        wait_online(cluster, nodes_count)  # same keys, no new registration
        outcome = cluster.wait_run(cluster.submit(config), result_path, timeout=300)
    assert (cluster_dir / "superlink.db").is_file()
    result = outcome.result
    assert result is not None, outcome.output
    assert result["status"] == "success", result.get("reason")
    assert result["clients_in_sum"] == {"stage1": nodes_count, "stage2": nodes_count}
