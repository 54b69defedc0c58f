"""``noise-shape = "per_coordinate"`` in a real Flower simulation (slow: SuperLink, Ray).

The run equals its in-process twin, and its result document carries the per-coordinate
stage-2 sigmas (``stage2_sigmas``) of the twin.
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
from fa_hetdp.report.results import result_to_dict

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FlowerCluster]:
    with FlowerCluster(tmp_path_factory.mktemp("flower-noise-shape")) as flower:
        flower.start_superlink()
        yield flower
    for process in flower.processes:
        assert not process.alive()


def test_per_coordinate_run_matches_its_twin(cluster: FlowerCluster, tmp_path: Path) -> None:
    result_path = tmp_path / "result.json"
    config: dict[str, object] = {
        "scenario": str(scenario_file(tmp_path, 20, seed=5)),
        "mode": "simulation",
        # a large epsilon: 20 clients, yet a broadcast inside (0, 1), so the sigmas differ
        "epsilon": 100.0,
        "noise-shape": "per_coordinate",
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
    assert_matches_reference(document, config)
    settings = RunSettings.from_run_config(config)
    assert settings.protocol.noise_shape == "per_coordinate"
    reference = reference_statistics(
        partition_scenario(settings.scenario).vectors,
        settings.protocol,
        seed=int(document["seed"]),
        session_size=int(document["n"]),
        stage1=document["partitions_in_sum"]["stage1"],
        stage2=document["partitions_in_sum"]["stage2"],
    )
    for key, values in result_to_dict(reference)["stage2_sigmas"].items():
        got = np.asarray(document["stage2_sigmas"][key])
        assert np.ptp(got) > 0.0
        np.testing.assert_allclose(got, values, rtol=1e-6)
