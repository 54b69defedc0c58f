"""``dispersion-center = "optimal"`` in a real Flower simulation (slow: SuperLink, Ray).

The run equals its in-process twin (the clients centre on the public centre the server
broadcasts, and the server subtracts ``(c - a)^2``), and its result records the centre.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from test_flower_helpers import APP_CONFIG_KEYS, assert_matches_reference, scenario_file

from fa_hetdp.cli.cluster import FlowerCluster
from fa_hetdp.data.partition import partition_scenario
from fa_hetdp.flower.settings import RunSettings
from fa_hetdp.protocol.replay import reference_statistics

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FlowerCluster]:
    with FlowerCluster(tmp_path_factory.mktemp("flower-center")) as flower:
        flower.start_superlink()
        yield flower
    for process in flower.processes:
        assert not process.alive()


def test_optimal_center_run_matches_its_twin(cluster: FlowerCluster, tmp_path: Path) -> None:
    result_path = tmp_path / "result.json"
    config: dict[str, object] = {
        "scenario": str(scenario_file(tmp_path, 20, seed=5)),
        "mode": "simulation",
        "dispersion-center": "optimal",
        "result-path": str(result_path),
        "progress-path": str(tmp_path / "progress.jsonl"),
        "stage-timeout": 120.0,
        "node-wait-timeout": 120.0,
    }
    assert set(config) <= APP_CONFIG_KEYS
    run = cluster.submit(config, num_supernodes=20, name=f"run-{tmp_path.name}")
    outcome = cluster.wait_run(run, result_path, timeout=600)
    document = outcome.result
    assert document is not None, outcome.output
    assert document["status"] == "success", document
    assert document["config"]["dispersion_center"] == "optimal"
    assert_matches_reference(document, config)  # the twin with the optimal centre
    # ... and not the twin with the broadcast centre: the centre was used
    settings = RunSettings.from_run_config({**config, "dispersion-center": "broadcast"})
    broadcast = reference_statistics(
        partition_scenario(settings.scenario).vectors,
        settings.protocol,
        seed=int(document["seed"]),
        session_size=int(document["n"]),
        stage1=document["partitions_in_sum"]["stage1"],
        stage2=document["partitions_in_sum"]["stage2"],
    )
    got = np.asarray(document["statistics"]["dispersion"])
    assert np.max(np.abs(got - np.asarray(broadcast.dispersion))) > 1e-3
