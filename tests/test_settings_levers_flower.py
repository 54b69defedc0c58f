"""The stage-2 levers in a real Flower simulation (slow: SuperLink, Ray), one SuperLink.

- ``noise-shape = "per_coordinate"``: the run equals its in-process twin, and its result
  document carries the twin's per-coordinate stage-2 sigmas (``stage2_sigmas``);
- ``dispersion-center = "optimal"``: the run equals its in-process twin (the clients centre on
  the public centre the server broadcasts, the server subtracts ``(c - a)^2``), not the twin
  with the broadcast centre, and its result records the centre.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.replay import reference_statistics
from test_flower_helpers import APP_CONFIG_KEYS, assert_matches_reference, scenario_file

from fa_hetdp.cli.cluster import FlowerCluster
from fa_hetdp.config.partition import partition_scenario
from fa_hetdp.flowerkit.settings import RunSettings
from fa_hetdp.protocol.server import PrivateStatistics
from fa_hetdp.report.results import result_to_dict

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FlowerCluster]:
    with FlowerCluster(tmp_path_factory.mktemp("flower-levers")) as flower:
        flower.start_superlink()
        yield flower
    for process in flower.processes:
        assert not process.alive()


NODE_CAPS = "[nodes]\nmeasurement_max_epsilon = 100\nledger_max_epsilon = 1000\n"
"""The simulated nodes' caps for these runs (the default caps, 10, refuse epsilon = 100)."""


def _run(
    cluster: FlowerCluster, tmp_path: Path, **settings: object
) -> tuple[dict[str, Any], dict[str, object]]:
    """Run 20 clients with the run-config ``settings``; return the result document, config."""
    result_path = tmp_path / "result.json"
    config: dict[str, object] = {
        # the simulated nodes' caps (their policy: [nodes]) allow the epsilon = 100 run below
        "scenario": str(scenario_file(tmp_path, 20, seed=5, extra=NODE_CAPS)),
        "mode": "simulation",
        "result-path": str(result_path),
        "progress-path": str(tmp_path / "progress.jsonl"),
        "stage-timeout": 120.0,
        "node-wait-timeout": 120.0,
        **settings,
    }
    assert set(config) <= APP_CONFIG_KEYS
    run = cluster.submit(config, num_supernodes=20, name=f"run-{tmp_path.name}")
    outcome = cluster.wait_run(run, result_path, timeout=600)
    document = outcome.result
    assert document is not None, outcome.output
    assert document["status"] == "success", document
    assert_matches_reference(document, config)  # the in-process twin of these settings
    return document, config


def _twin(document: dict[str, Any], config: dict[str, object]) -> PrivateStatistics:
    settings = RunSettings.from_run_config(config)
    return reference_statistics(
        partition_scenario(settings.scenario).vectors,
        settings.protocol,
        seed=int(document["seed"]),
        session_size=int(document["n"]),
        stage1=document["partitions_in_sum"]["stage1"],
        stage2=document["partitions_in_sum"]["stage2"],
    )


def test_per_coordinate_run_matches_its_twin(cluster: FlowerCluster, tmp_path: Path) -> None:
    # a large epsilon: 20 clients, yet a broadcast inside (0, 1), so the sigmas differ
    document, config = _run(cluster, tmp_path, epsilon=100.0, **{"noise-shape": "per_coordinate"})
    assert RunSettings.from_run_config(config).protocol.noise_shape == "per_coordinate"
    for key, values in result_to_dict(_twin(document, config))["stage2_sigmas"].items():
        got = np.asarray(document["stage2_sigmas"][key])
        assert np.ptp(got) > 0.0
        np.testing.assert_allclose(got, values, rtol=1e-6)


def test_optimal_center_run_matches_its_twin(cluster: FlowerCluster, tmp_path: Path) -> None:
    document, config = _run(cluster, tmp_path, **{"dispersion-center": "optimal"})
    assert document["config"]["dispersion_center"] == "optimal"
    # ... and not the twin with the broadcast centre: the centre was used
    broadcast = _twin(document, {**config, "dispersion-center": "broadcast"})
    got = np.asarray(document["statistics"]["dispersion"])
    assert np.max(np.abs(got - np.asarray(broadcast.dispersion))) > 1e-3
