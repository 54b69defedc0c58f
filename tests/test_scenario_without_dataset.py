"""A scenario for nodes that read their own files: ``[data] columns`` and no ``dataset`` (issue 29).

Every SuperNode of a deployment reads its own CSV (node config ``data-path``) by the scenario's
``columns`` and ``bounds``, so the scenario names no dataset: n is ``num_clients``, d is
``len(columns)``. What would need the scenario's partitions (a simulation, a node without
``data-path``, the experiment engine, ``reproduce``) refuses with one public line,
:data:`fa_hetdp.config.partition.NO_DATASET`: before Flower starts where the CLI can know it,
on the node otherwise.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flwr.app import Context, RecordDict
from support import forbid_flower
from test_flower_helpers import run_config
from test_meta_flower import meta_tables, our_grid, run_meta

import fa_hetdp.server.app as server_app
from fa_hetdp.clients.app import scenario_records
from fa_hetdp.config.partition import (
    NO_DATASET,
    client_records,
    client_summary,
    client_vector,
    partition_scenario,
)
from fa_hetdp.config.rules import ConfigError
from fa_hetdp.config.scenario import load_scenario, scenario_from_dict
from fa_hetdp.errors import ScenarioError

SILOS = 4
COUNTS = (40, 45, 50, 55)
SEED = 7


def scenario_file(tmp_path: Path, *, design: str = "silo-summaries") -> Path:
    """The complete minimal scenario of CSV owners: no dataset, no ``[data.synthetic]``."""
    path = tmp_path / "owners.toml"
    path.write_text(
        f"""
[scenario]
name = "owners"
[data]
num_clients = {SILOS}
records_per_client = {min(COUNTS)}
columns = ["score", "age"]
bounds = {{ score = [0, 100], age = [18, 90] }}
units = {{ score = "points" }}
{meta_tables(design=design, unit="record", seed=SEED)}
"""
    )
    return path


def owner_files(tmp_path: Path) -> list[Path]:
    """Every owner's CSV: a note column, the run's columns (some values out of bounds)."""
    rng = np.random.default_rng(3)
    paths = []
    for i, m in enumerate(COUNTS):
        score = rng.normal(45.0 + 5.0 * i, 20.0, m)
        age = rng.normal(50.0, 15.0, m)
        lines = ["note,age,score"] + [
            f"r{j},{a:.3f},{s:.3f}" for j, (a, s) in enumerate(zip(age, score, strict=True))
        ]
        paths.append(tmp_path / f"owner-{i}.csv")
        paths[-1].write_text("\n".join(lines) + "\n")
    return paths


def node_context(tmp_path: Path, node_config: dict[str, Any]) -> Context:
    return Context(
        run_id=1,
        node_id=7,
        node_config=dict(node_config),
        state=RecordDict(),
        run_config=run_config(tmp_path, scenario_file(tmp_path), mode="deployment"),
    )


@pytest.fixture(autouse=True)
def fast_poll(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server_app, "POLL_SECONDS", 0.0)


# ---------------------------------------------------------------------------- the scenario
def test_the_scenario_loads_without_a_dataset(tmp_path: Path) -> None:
    scenario = load_scenario(scenario_file(tmp_path))
    data = scenario.data
    assert data.dataset is None and data.sites is None
    assert scenario.num_clients == SILOS and data.columns == ("score", "age")
    assert data.column_bounds() == {"score": (0.0, 100.0), "age": (18.0, 90.0)}
    assert client_summary(scenario).image_shape == (1, 1, 2)  # d = len(columns)
    written = scenario.to_dict()
    assert "dataset" not in written["data"] and "split" not in written["data"]
    assert scenario_from_dict(written).data == data


def _data_problems(**data: object) -> str:
    raw = {"data": data, "privacy": {"epsilon": 1.0, "delta": 1e-5}}
    with pytest.raises(ConfigError) as info:
        scenario_from_dict(raw)
    return str(info.value)


def test_what_needs_a_dataset_is_refused_naming_the_key() -> None:
    columns = ["score"]
    assert "data.num_clients: required without data.dataset" in _data_problems(columns=columns)
    assert "data.sample_fraction: needs data.dataset" in _data_problems(
        columns=columns, sample_fraction=0.02
    )
    assert "data.label_ratios: needs data.dataset" in _data_problems(
        columns=columns, num_clients=4, label_ratios=[1, 1]
    )
    assert "data.synthetic: needs data.dataset" in _data_problems(
        columns=columns, num_clients=4, synthetic={"size": 100, "dim": 2}
    )
    assert "data.summary: without data.dataset only 'mean'" in _data_problems(
        columns=columns, num_clients=4, summary="label-histogram"
    )
    # without columns (and without sites) the dataset is still required, as before
    assert "data.dataset: required" in _data_problems(num_clients=4)


def test_everything_that_needs_the_partitions_refuses_with_the_line(tmp_path: Path) -> None:
    from fa_hetdp.experiments.engine import run_scenario

    scenario = load_scenario(scenario_file(tmp_path))
    for attempt in (
        lambda: partition_scenario(scenario),
        lambda: client_records(scenario, 0, SILOS),
        lambda: client_vector(scenario, 0, SILOS),
        lambda: run_scenario(scenario, progress=False),
    ):
        with pytest.raises(ScenarioError) as info:
            attempt()
        assert str(info.value) == NO_DATASET


# ---------------------------------------------------------------------------- the node
def test_a_node_with_a_csv_data_path_reads_its_columns(tmp_path: Path) -> None:
    path = tmp_path / "owner.csv"
    path.write_text("note,age,score\nx,41.5,73.125\ny,18,50\nz,90,120\n")
    records, labels = scenario_records(node_context(tmp_path, {"data-path": str(path)}))
    assert labels is None
    np.testing.assert_allclose(records, [[0.73125, (41.5 - 18) / 72], [0.5, 0.0], [1.0, 1.0]])


def test_a_node_without_a_data_path_refuses_with_the_public_line(tmp_path: Path) -> None:
    context = node_context(tmp_path, {"partition-id": 1, "num-partitions": SILOS})
    with pytest.raises(ScenarioError) as info:
        scenario_records(context)
    assert str(info.value) == NO_DATASET
    assert str(tmp_path) not in str(info.value)


# ---------------------------------------------------------------------------- the CLI
def test_fa_hetdp_run_refuses_before_any_flower_process_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from fa_hetdp.cli.main import main

    forbid_flower(monkeypatch)
    monkeypatch.chdir(tmp_path)
    assert main(["run", "--scenario", str(scenario_file(tmp_path))]) == 2
    assert capsys.readouterr().err == f"fa-hetdp run: error: {NO_DATASET}\n"


def test_check_data_reads_the_columns_of_the_scenario(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from fa_hetdp.cli.main import main

    path = owner_files(tmp_path)[0]
    assert main(["check-data", str(path), "--scenario", str(scenario_file(tmp_path))]) == 0
    assert "d=2, columns score, age" in capsys.readouterr().out


# ---------------------------------------------------------------------------- a meta run
@pytest.mark.parametrize("design", ["silo-summaries", "secure-sums"])
def test_a_meta_run_over_csv_nodes_succeeds(tmp_path: Path, design: str) -> None:
    """Four nodes read their CSVs; a fifth, without a data-path, is dropped with the line."""
    paths = owner_files(tmp_path)
    config = run_config(
        tmp_path, scenario_file(tmp_path, design=design), **{"num-clients": SILOS + 1}
    )
    _, document = run_meta(config, our_grid(config, SILOS + 1, paths))
    assert document["status"] == "success", document.get("reason")
    assert document["design"] == design and document["n"] == SILOS
    assert document["d"] == 2 and document["records_per_client"] == list(COUNTS)
    (reason,) = document["steps"][0]["dropouts"].values()
    assert NO_DATASET in reason
    on_disk = json.loads(Path(config["result-path"]).read_text())
    assert on_disk["meta_analysis"]["columns"] == ["score", "age"]
    assert on_disk["meta_analysis"]["units"]["unit_names"] == {"score": "points"}
    for leak in (str(tmp_path), "owner-"):
        assert leak not in json.dumps(on_disk["steps"])
