"""A two-arm trial from one CSV file per site, simulated: ``[data] sites`` with ``arm``.

A scenario's ``[data] sites`` with ``arm = "treated"`` and ``effect = "MD"`` runs as the
deployment does (tests/test_two_arm_flower.py: every node reading its own ``data-path``):
client ``i`` reads ``sites[i]``'s outcome columns and its 0/1 arm column through the node's
reader (:func:`fa_hetdp.clients.silo_summaries.read_arm_file`). Every file's arm column is
checked when the scenario is loaded, before any Flower process starts, and a bad one is refused
naming the file. The run equals :func:`fa_hetdp.private_meta_analysis` of the same tables with
every silo's seeded stream (the twin of tests/test_two_arm_flower.py); the slow test runs
``fa-hetdp run --scenario`` on a simulation SuperLink.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from support import forbid_flower
from test_flower_helpers import run_config
from test_meta_flower import meta_tables, our_grid, run_meta
from test_two_arm_flower import (
    CONSENT,
    COUNTS,
    SEED,
    assert_equals_twin,
    assert_twin,
    silo_tables,
    twin,
)

import fa_hetdp.server.app as server_app
from fa_hetdp.accuracy.columns import ColumnMetaAnalysis
from fa_hetdp.config.rules import ConfigError
from fa_hetdp.config.scenario import load_scenario, scenario_from_dict
from fa_hetdp.config.sites import SITES_DATASET, site_arm_records, site_records
from fa_hetdp.data.check import load_checked_records
from fa_hetdp.report.forest import POOLED_ROWS

pd = pytest.importorskip("pandas")

STEMS = [f"site-{i}" for i in range(len(COUNTS))]


@pytest.fixture(autouse=True)
def fast_poll(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server_app, "POLL_SECONDS", 0.0)


def trial(tmp_path: Path, *, effect: str = "MD", extra: str = "") -> tuple[Path, list[Path]]:
    """The sites' CSV files (:func:`silo_tables`) and a two-arm scenario of them beside."""
    folder = tmp_path / "trial"
    folder.mkdir(exist_ok=True)
    paths = silo_tables(folder)
    scenario = folder / "trial.toml"
    scenario.write_text(
        f"""[scenario]
name = "trial-sites"
[data]
sites = {json.dumps([p.name for p in paths])}
columns = ["score", "age"]
bounds = {{ score = [0, 100], age = [18, 90] }}
units = {{ score = "points" }}
arm = "treated"
effect = "{effect}"
{extra}
{meta_tables(design="silo-summaries", unit="record", seed=SEED)}"""
    )
    return scenario, paths


def problems_of(path: Path) -> dict[str, str]:
    with pytest.raises(ConfigError) as info:
        load_scenario(path)
    return dict(info.value.problems)


# ---------------------------------------------------------------------------- loading
def test_a_two_arm_scenario_of_sites_loads(tmp_path: Path) -> None:
    path, paths = trial(tmp_path)
    scenario = load_scenario(path)
    data = scenario.data
    assert data.dataset == SITES_DATASET and scenario.num_clients == len(COUNTS)
    assert data.arm == "treated" and data.effect == "MD"
    assert data.records_per_client == min(sum(c) for c in COUNTS)
    assert (
        scenario_from_dict(scenario.to_dict(), name=scenario.name, path=scenario.path) == scenario
    )
    for i, (file, (treated, control)) in enumerate(zip(paths, COUNTS, strict=True)):
        outcomes, arms = site_arm_records(scenario, i, len(paths))
        assert int(arms.sum()) == treated and int((arms == 0).sum()) == control
        # the node's own reader: the outcomes scaled by the bounds, the arm column beside them
        both = load_checked_records(
            file, columns=("score", "age", "treated"), bounds=data.column_bounds()
        )
        np.testing.assert_array_equal(outcomes, both[:, :2])
        np.testing.assert_array_equal(arms, both[:, 2].astype(np.int64))
        np.testing.assert_array_equal(site_records(scenario, i, len(paths)), outcomes)


def _rewrite(path: Path, change: str) -> None:
    frame = pd.read_csv(path)
    if change == "value-2":
        frame.loc[3, "treated"] = 2
    elif change == "value-half":
        frame["treated"] = frame["treated"].astype(float)
        frame.loc[3, "treated"] = 0.5
    elif change == "no-arm-column":
        frame = frame.drop(columns=["treated"])
    elif change == "no-treated":
        frame["treated"] = 0
    elif change == "one-control":
        first = frame.index[frame["treated"] == 0][0]
        frame["treated"] = 1
        frame.loc[first, "treated"] = 0
    frame.to_csv(path, index=False)


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ("value-2", ["outside [0, 1]", "'treated'"]),
        ("value-half", ["arm column 'treated' must hold 0 (control) or 1 (treated)"]),
        ("no-arm-column", ["lacks", "'treated'"]),
        ("no-treated", ["0 treated (1)", "at least 2 in each arm"]),
        ("one-control", ["1 control (0)", "effect = 'MD' needs at least 2"]),
    ],
)
def test_a_bad_arm_column_is_refused_at_load_naming_the_file(
    tmp_path: Path, change: str, words: list[str]
) -> None:
    path, paths = trial(tmp_path)
    _rewrite(paths[1], change)
    problems = problems_of(path)
    assert list(problems) == ["data.sites[1]"], problems
    message = problems["data.sites[1]"]
    assert str(paths[1].resolve()) in message, message
    for word in words:
        assert word in message, message


def test_arm_and_effect_are_checked_with_sites(tmp_path: Path) -> None:
    path, _ = trial(tmp_path, effect="HR")
    assert "unknown effect 'HR'" in problems_of(path)["data.effect"]
    path, _ = trial(tmp_path, effect="OR")  # proportions of numeric columns
    assert "bounds other than [0, 1]" in problems_of(path)["data.effect"]


def test_fa_hetdp_run_refuses_a_bad_arm_before_flower_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from fa_hetdp.cli.main import main

    forbid_flower(monkeypatch)
    monkeypatch.chdir(tmp_path)
    path, paths = trial(tmp_path)
    _rewrite(paths[2], "value-2")
    assert main(["run", "--scenario", str(path)]) == 2
    err = capsys.readouterr().err
    assert "data.sites[2]" in err and "site-2.csv" in err and "'treated'" in err


# ---------------------------------------------------------------------------- the run
def test_the_simulated_sites_equal_private_meta_analysis(tmp_path: Path) -> None:
    """Our ClientApp on nodes of the scenario's partitions (no data-path): client ``i`` reads
    ``sites[i]`` with its arms. The in-memory nodes are not in a Flower simulation, so they
    state the consent a simulated node of a two-arm scenario gives (:data:`CONSENT`); the slow
    test runs a real simulation."""
    path, paths = trial(tmp_path)
    config = run_config(tmp_path, path)
    grid = our_grid(config, len(paths))
    for context in grid.contexts.values():
        context.node_config.update(CONSENT)
    strategy, document = run_meta(config, grid)
    assert document["status"] == "success", document.get("reason")
    partitions = document["partitions_in_sum"]["silo_summaries"]
    assert partitions == list(range(len(paths)))
    got = strategy.outcome
    assert isinstance(got, ColumnMetaAnalysis)
    assert_twin(document, got, twin(paths, partitions, "MD"))
    assert document["two_arm"]["effect"] == "MD" and document["two_arm"]["arm"] == "treated"
    assert document["arm_counts"] == [list(c) for c in COUNTS]
    section = document["meta_analysis"]
    assert [s["site"] for s in section["silos"]] == STEMS
    assert [s["site"] for s in section["units"]["silos"]] == STEMS


@pytest.mark.slow
def test_fa_hetdp_run_of_a_two_arm_trial_of_sites(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`fa-hetdp run --scenario trial.toml` on a simulation SuperLink equals the twin."""
    from fa_hetdp.cli.main import main
    from fa_hetdp.report.run_forest import run_forest, run_forest_path

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FLWR_TELEMETRY_ENABLED", "0")
    path, paths = trial(tmp_path)
    output = tmp_path / "trial.json"
    work = str(tmp_path / "work")
    code = main(["run", "--scenario", str(path), "--output", str(output), "--workdir", work])
    printed = capsys.readouterr()
    assert code == 0, printed.err
    document = json.loads(output.read_text())
    assert document["status"] == "success", document.get("reason")
    assert document["two_arm"]["effect"] == "MD" and document["two_arm"]["arm"] == "treated"
    assert document["meta_analysis"]["effect"] == "MD"
    assert_equals_twin(document, paths)
    assert "pooled MD (fixed effect)" in printed.out and "random-effects MD" in printed.out
    (result_path,) = (tmp_path / "results").glob("trial-sites-*[0-9].json")
    figure = run_forest_path(result_path)
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    forest = run_forest(document)
    assert [panel.column for panel in forest.panels] == ["score", "age"]
    for panel in forest.panels:
        assert sorted(panel.labels[: len(STEMS)]) == STEMS
        assert panel.labels[len(STEMS) :] == POOLED_ROWS
    assert forest.titles[0].startswith("score: MD") and forest.titles[1].startswith("age: MD")
    assert any("pooled MD" in note for note in forest.notes), forest.notes
