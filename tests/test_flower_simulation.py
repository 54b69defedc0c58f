"""The Flower apps in a real Flower simulation (SuperLink --simulation, Ray, `flwr run`).

One SuperLink (own FLWR_HOME, free port) serves every run of this module; the fixture stops
it and everything it started, also when a test fails.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_flower_helpers import APP_CONFIG_KEYS, assert_matches_reference, scenario_file

from fa_hetdp.cli.cluster import FlowerCluster, read_progress

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FlowerCluster]:
    with FlowerCluster(tmp_path_factory.mktemp("flower-sim")) as flower:
        flower.start_superlink()
        yield flower
    for process in flower.processes:
        assert not process.alive()


def simulate(
    cluster: FlowerCluster, tmp_path: Path, num_clients: int, **config: object
) -> tuple[dict[str, Any] | None, dict[str, Any], str]:
    result_path = tmp_path / "result.json"
    run_config: dict[str, object] = {
        "mode": "simulation",
        "result-path": str(result_path),
        "progress-path": str(tmp_path / "progress.jsonl"),
        "stage-timeout": 120.0,
        "node-wait-timeout": 120.0,
        **config,
    }
    assert set(run_config) <= APP_CONFIG_KEYS
    run = cluster.submit(run_config, num_supernodes=num_clients, name=f"run-{tmp_path.name}")
    outcome = cluster.wait_run(run, result_path, timeout=600)
    return outcome.result, run_config, outcome.output


def test_simulation_matches_in_process_twin(cluster: FlowerCluster, tmp_path: Path) -> None:
    scenario = scenario_file(tmp_path, 20, seed=5)
    result, config, output = simulate(cluster, tmp_path, 20, scenario=str(scenario))
    assert result is not None, output
    assert result["status"] == "success"
    assert result["survivors"] == dict.fromkeys(result["survivors"], 20)
    assert_matches_reference(result, config)


def test_hundred_clients_with_ten_percent_dropouts(cluster: FlowerCluster, tmp_path: Path) -> None:
    scenario = scenario_file(tmp_path, 100, seed=2)
    result, config, output = simulate(
        cluster,
        tmp_path,
        100,
        scenario=str(scenario),
        **{"dropout-fraction": 0.1, "dropout-stage": "stage1-unmask", "on-degraded": "release"},
    )
    assert result is not None, output
    assert result["status"] == "success"
    # They sent their stage-1 input (in the sum, noise share arrived) and then left.
    assert result["clients_in_sum"] == {"stage1": 100, "stage2": 90}
    assert result["survivors"]["stage1_unmask"] == 90
    assert result["survivors"]["stage2_unmask"] == 90
    assert result["privacy"]["degraded"] is True
    assert_matches_reference(result, config)
    events = [e["event"] for e in read_progress(tmp_path / "progress.jsonl")]
    assert events[0] == "nodes" and events[-1] == "done"


def test_below_threshold_aborts_cleanly(cluster: FlowerCluster, tmp_path: Path) -> None:
    scenario = scenario_file(tmp_path, 10, seed=1)
    result, _, output = simulate(
        cluster,
        tmp_path,
        10,
        scenario=str(scenario),
        **{"dropout-fraction": 0.5, "dropout-stage": "stage1"},
    )
    assert result is not None, output
    assert result["status"] == "aborted"
    assert "stage1_input" in result["reason"] and "threshold t=6" in result["reason"]
    assert "statistics" not in result
    print(json.dumps(result["steps"]), file=sys.stderr)


def test_flwr_run_dot_the_flower_way(tmp_path: Path) -> None:
    """`flwr run .` with flwr's own local SuperLink (which it leaves running: stopped here)."""
    import os
    import signal
    import subprocess

    from fa_hetdp.cli.cluster import APP_DIR, free_port, toml_value

    home = tmp_path / "flwr-home"
    env = dict(os.environ)
    env.update(
        {
            "FLWR_HOME": str(home),
            "FLWR_TELEMETRY_ENABLED": "0",
            "FLWR_DISABLE_UPDATE_CHECK": "1",
            "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
            "FLWR_LOCAL_SUPERLINK_HTTP_API_PORT": str(free_port()),
            "FLWR_LOCAL_CONTROL_API_PORT": str(free_port()),
            "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "0",
        }
    )
    result_path = tmp_path / "result.json"
    overrides = {
        "scenario": str(scenario_file(tmp_path, 8, seed=6)),
        "mode": "simulation",
        "result-path": str(result_path),
    }
    config = tmp_path / "overrides.toml"
    config.write_text("".join(f"{k} = {toml_value(v)}\n" for k, v in overrides.items()))
    try:
        completed = subprocess.run(
            [
                "flwr",
                "run",
                str(APP_DIR),
                "--stream",
                "--run-config",
                str(config),
                "--federation-config",
                "num-supernodes=8",
            ],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert result_path.is_file(), completed.stdout[-3000:] + completed.stderr[-3000:]
        result = json.loads(result_path.read_text())
        assert result["status"] == "success"
        assert result["n"] == 8 and result["seed"] == 6
    finally:
        marker = f"FLWR_HOME={home}".encode()
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    if marker in (entry / "environ").read_bytes().split(b"\0"):
                        os.kill(int(entry.name), signal.SIGKILL)
                except (OSError, ProcessLookupError):
                    pass
