"""A Flower meta-analysis of named columns comes back in the columns' units (issue 29).

The scenario states ``[data] columns`` and public ``bounds``; every node reads its own CSV
(node config ``data-path``) by those names, clips and scales it to ``[0, 1]``. The result's
``meta_analysis`` section keeps the ``[0, 1]`` figures the protocol ran on and adds
``columns`` and ``units`` (:func:`fa_hetdp.server.meta.with_column_units`): the figures named
by column, in the columns' units. The fast tests run the real handlers, codec and strategy over
the in-memory Grid of tests/test_meta_flower.py and compare the units with the in-process
DataFrame path (:func:`~fa_hetdp.accuracy.columns.prepare_records` of the silos' tables and
:class:`~fa_hetdp.accuracy.columns.ColumnMetaAnalysis` of the same releases: in the
silo-summaries design each silo's release is drawn from its seeded stream, so the twin is
exact). The slow test runs it on a SuperLink with SuperNodes reading their CSV files.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_dropin import InMemoryGrid
from test_flower_helpers import run_config
from test_meta_design_flower import silo_twin
from test_meta_flower import SYNTHETIC_TABLE, meta_tables, our_grid, run_meta

import fa_hetdp.server.app as server_app
from fa_hetdp.accuracy.columns import (
    ColumnMetaAnalysis,
    PreparedRecords,
    in_column_units,
    prepare_records,
)
from fa_hetdp.flowerkit.settings import RunSettings, silo_plan
from fa_hetdp.protocol.meta_server import PrivateMetaAnalysis
from fa_hetdp.report.forest import forest_rows
from fa_hetdp.report.meta import format_meta
from fa_hetdp.report.run_forest import run_forest
from fa_hetdp.server.meta import COLUMN_UNITS
from fa_hetdp.server.strategy import ProtocolAbortError

pd = pytest.importorskip("pandas")

SILOS = 4
COLUMNS = ("score", "age", "flag")  # "flag" states no bounds: its values lie in [0, 1]
BOUNDS = {"score": (0.0, 100.0), "age": (18.0, 90.0)}
RANGES = {**BOUNDS, "flag": (0.0, 1.0)}
COUNTS = (300, 320, 340, 360)
SEED = 11


SYNTHETIC = f"""dataset = "synthetic"
{SYNTHETIC_TABLE}"""
"""The scenario's own d = 6 records, for the tests with a node that reads no file."""


def units_file(tmp_path: Path, *, design: str = "silo-summaries", dataset: bool = False) -> Path:
    """4 silos, the run's columns named with their public bounds (the nodes read CSV files).

    No dataset (every node reads its own file) unless ``dataset``: a synthetic one (d = 6)
    for a node without a data file.
    """
    path = tmp_path / "columns-small.toml"
    path.write_text(
        f"""
[scenario]
name = "columns-small"
[data]
num_clients = {SILOS}
records_per_client = 300
columns = {json.dumps(list(COLUMNS))}
bounds = {{ score = [0, 100], age = [18, 90] }}
{SYNTHETIC if dataset else ""}
{meta_tables(design=design, unit="record", seed=SEED)}
"""
    )
    return path


def silo_tables(tmp_path: Path) -> list[Path]:
    """Every silo's CSV: a note column, the run's columns in their units (some out of bounds)."""
    rng = np.random.default_rng(29)
    paths = []
    for i, m in enumerate(COUNTS):
        score = rng.normal(40.0 + 8.0 * i, 15.0, m)  # a few below 0 / above 100: clipped
        age = rng.normal(50.0 - 3.0 * i, 12.0, m)
        flag = (rng.random(m) < 0.3 + 0.1 * i).astype(float)
        frame = pd.DataFrame(
            {"note": [f"r{j}" for j in range(m)], "age": age, "flag": flag, "score": score}
        )
        paths.append(tmp_path / f"silo-{i}.csv")
        frame.to_csv(paths[-1], index=False, float_format="%.6f")
    return paths


def prepared_of(paths: list[Path]) -> PreparedRecords:
    """The in-process DataFrame path of the silos' tables: one table, a site column."""
    frame = pd.concat(
        [pd.read_csv(p).assign(site=i) for i, p in enumerate(paths)], ignore_index=True
    )
    prepared = prepare_records(
        frame, site="site", columns=list(COLUMNS), bounds=RANGES, private=True
    )
    assert prepared is not None
    return prepared


def file_grid(config: dict[str, Any], paths: list[Path], extra: int = 0) -> InMemoryGrid:
    """Our ClientApp on nodes reading ``paths`` (``extra`` more nodes without a data file)."""
    return our_grid(config, len(paths) + extra, paths)


@pytest.fixture(autouse=True)
def fast_poll(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server_app, "POLL_SECONDS", 0.0)


def twin(config: dict[str, Any], prepared: PreparedRecords, partitions: list[int]) -> Any:
    """The silo-summaries run in process: the DataFrame path's records, each silo's stream."""
    settings = RunSettings.from_run_config(config)
    assert settings.seed is not None
    records = [prepared.records[prepared.client_ids == pid] for pid in partitions]
    plan = silo_plan(settings, [len(r) for r in records], len(COLUMNS))
    result = silo_twin(plan, records, partitions, settings.seed)
    return ColumnMetaAnalysis.of(result, prepared)


def _floats(raw: Any) -> np.ndarray:
    return np.array([np.nan if v is None else v for v in raw], dtype=np.float64)


def assert_units_equal(section: dict[str, Any], want: ColumnMetaAnalysis, rtol: float) -> None:
    """The section's units equal the in-process result in the columns' units (its frame too)."""
    assert section["columns"] == list(COLUMNS)
    units = section["units"]
    assert units["scale"] == COLUMN_UNITS and units["columns"] == list(COLUMNS)
    assert units["bounds"] == {c: list(RANGES[c]) for c in COLUMNS}
    stats = units["statistics"]
    for name in ("pooled_mean", "random_effects_mean", "tau2", "q", "i2"):
        np.testing.assert_allclose(
            _floats(stats[name]["value"]), getattr(want, name), rtol=rtol, err_msg=name
        )
    errors = want.standard_errors
    for name in ("pooled_mean", "random_effects_mean", "tau2"):
        np.testing.assert_allclose(
            _floats(stats[name]["standard_error"]), errors[name], rtol=rtol, err_msg=name
        )
    for target in ("population", "sample"):
        ci = want.confidence_intervals(0.95, target)
        for name in ("pooled_mean", "random_effects_mean", "tau2"):
            for end, got in (("lower", ci.lower), ("upper", ci.upper)):
                np.testing.assert_allclose(
                    _floats(stats[name][target][end]), got[name], rtol=rtol, atol=1e-12
                )
    pi = want.prediction_interval(0.95)
    np.testing.assert_allclose(_floats(units["prediction_interval"]["lower"]), pi.lower, rtol=rtol)
    np.testing.assert_allclose(_floats(units["prediction_interval"]["upper"]), pi.upper, rtol=rtol)
    # the in-process DataFrame (index (column, figure)), in the columns' units
    frame = want.to_frame()
    for j, column in enumerate(COLUMNS):
        for name in ("pooled_mean", "random_effects_mean", "tau2"):
            row = frame.loc[(column, name)]
            assert stats[name]["value"][j] == pytest.approx(row["estimate"], rel=rtol)
            assert stats[name]["population"]["lower"][j] == pytest.approx(row["ci_low"], rel=rtol)
            assert stats[name]["population"]["upper"][j] == pytest.approx(row["ci_high"], rel=rtol)
    # the [0, 1] figures the protocol ran on stay where they were
    low = np.array([RANGES[c][0] for c in COLUMNS])
    span = np.array([RANGES[c][1] for c in COLUMNS]) - low
    np.testing.assert_allclose(
        in_column_units(
            _floats(section["statistics"]["pooled_mean"]["value"]), "location", low, span
        ),
        _floats(stats["pooled_mean"]["value"]),
        rtol=1e-12,
    )


# ---------------------------------------------------------------------------- the silo summaries
def test_a_silo_summaries_run_of_csv_files_comes_back_in_the_columns_units(
    tmp_path: Path,
) -> None:
    paths = silo_tables(tmp_path)
    prepared = prepared_of(paths)
    assert sum(prepared.clipped.values()) > 0  # some values were clipped into the bounds
    config = run_config(tmp_path, units_file(tmp_path))
    strategy, document = run_meta(config, file_grid(config, paths))
    assert document["status"] == "success", document.get("reason")
    assert document["design"] == "silo-summaries" and document["d"] == len(COLUMNS)
    assert document["records_per_client"] == list(COUNTS)
    partitions = document["partitions_in_sum"]["silo_summaries"]
    want = twin(config, prepared, partitions)
    assert strategy.meta_result is not None
    # the nodes scaled their files as the DataFrame path does: the same [0, 1] result
    np.testing.assert_allclose(
        strategy.meta_result.pooled_mean, want.result.pooled_mean, rtol=1e-12
    )
    on_disk = json.loads(Path(config["result-path"]).read_text())
    section = on_disk["meta_analysis"]
    assert_units_equal(section, want, rtol=1e-9)
    # every silo's release in units: means low + span x, noise sds span x (one per column)
    silos = want.silo_estimates()
    assert silos is not None
    got = section["units"]["silos"]
    np.testing.assert_allclose([s["mean"] for s in got], silos.effects, rtol=1e-9)
    span = np.array([RANGES[c][1] - RANGES[c][0] for c in COLUMNS])
    for raw, silo in zip(section["silos"], got, strict=True):
        np.testing.assert_allclose(silo["mean_noise_sd"], raw["mean_noise_sd"] * span, rtol=1e-12)
        np.testing.assert_allclose(
            silo["variance_used"], np.asarray(raw["variance_used"]) * span**2, rtol=1e-12
        )
        assert silo["records"] == raw["records"] and silo["silo"] == raw["silo"]

    # the forest plot: a panel per column, titled by it, drawn in its units
    forest = run_forest(on_disk)
    assert [panel.column for panel in forest.panels] == list(COLUMNS)
    for panel in forest.panels:
        own = forest_rows(want, panel.column)
        assert panel.labels[SILOS:] == own.labels[SILOS:]
        for got_rows, want_rows in (
            (panel.estimates, own.estimates),
            (panel.lower, own.lower),
            (panel.upper, own.upper),
            (panel.weights, own.weights),
        ):
            np.testing.assert_allclose(got_rows, want_rows, rtol=1e-9, atol=1e-12)
    assert not any("[0, 1] scale" in note for note in forest.notes)
    assert any("own units" in note and "age [18, 90]" in note for note in forest.notes)

    # the printed table names the columns and shows the units' figures
    lines = format_meta({**section, **section["units"]})
    assert any(line.strip().startswith("column") for line in lines)
    row = next(line for line in lines if line.strip().startswith("score"))
    assert f"{section['units']['statistics']['pooled_mean']['value'][0]:.4f}" in row


def test_fa_hetdp_run_prints_the_columns_and_their_units(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from fa_hetdp.cli.run import print_result

    paths = silo_tables(tmp_path)
    config = run_config(tmp_path, units_file(tmp_path))
    _, document = run_meta(config, file_grid(config, paths))
    print_result(None, json.loads(json.dumps(document)))  # type: ignore[arg-type]
    out = capsys.readouterr().out
    assert "score [0, 100], age [18, 90], flag [0, 1]" in out
    age = document["meta_analysis"]["units"]["statistics"]["pooled_mean"]["value"][1]
    assert any(line.strip().startswith("age") and f"{age:.4f}" in line for line in out.splitlines())


# ---------------------------------------------------------------------------- the secure sums
def test_a_secure_sums_run_names_its_columns_and_maps_its_figures(tmp_path: Path) -> None:
    paths = silo_tables(tmp_path)
    prepared = prepared_of(paths)
    config = run_config(tmp_path, units_file(tmp_path, design="secure-sums"))
    strategy, document = run_meta(config, file_grid(config, paths))
    assert document["status"] == "success" and document["design"] == "secure-sums"
    result = strategy.meta_result
    assert isinstance(result, PrivateMetaAnalysis)
    section = json.loads(json.dumps(document["meta_analysis"]))
    assert "silos" not in section["units"]  # the server saw sums only
    # the run's own result read through the in-process DataFrame path's scaling
    assert_units_equal(section, ColumnMetaAnalysis.of(result, prepared), rtol=1e-12)
    forest = run_forest({**document, "meta_analysis": section})
    assert [panel.column for panel in forest.panels] == list(COLUMNS)


# ---------------------------------------------------------------------------- d != len(columns)
def test_a_client_whose_d_is_not_the_columns_is_dropped_naming_both(tmp_path: Path) -> None:
    paths = silo_tables(tmp_path)
    config = run_config(tmp_path, units_file(tmp_path, dataset=True), **{"num-clients": SILOS + 1})
    grid = file_grid(config, paths, extra=1)  # the 5th node reads the scenario's d = 6 records
    _, document = run_meta(config, grid)
    assert document["status"] == "success" and document["n"] == SILOS
    (reason,) = document["steps"][0]["dropouts"].values()
    assert "d=6 but the scenario's [data] columns name 3 (score, age, flag)" in reason
    assert document["meta_analysis"]["columns"] == list(COLUMNS)


def test_a_run_whose_clients_all_report_another_d_aborts_naming_it(tmp_path: Path) -> None:
    config = run_config(tmp_path, units_file(tmp_path, dataset=True))
    with pytest.raises(ProtocolAbortError, match=r"every client: d=6 but the scenario's \[data\]"):
        run_meta(config, file_grid(config, [], extra=SILOS))  # no node reads a file
    document = json.loads(Path(config["result-path"]).read_text())
    assert document["status"] == "aborted"
    assert "columns name 3 (score, age, flag): d must equal len(columns)" in document["reason"]


# ---------------------------------------------------------------------------- Flower's runtime
@pytest.mark.slow
def test_supernodes_reading_csv_files_return_the_columns_units(tmp_path: Path) -> None:
    """A SuperLink with 5 SuperNodes: 4 read their CSV files (seeded, so the twin is exact),
    the 5th has no file (the scenario's 6-column records) and is dropped for its d."""
    from deployment_cluster import SEEDED_NODE, DeploymentCluster

    paths = silo_tables(tmp_path)
    prepared = prepared_of(paths)
    config = run_config(tmp_path, units_file(tmp_path, dataset=True), **{"num-clients": SILOS + 1})
    config.update({"stage-timeout": 120.0, "node-wait-timeout": 180.0})
    cluster = DeploymentCluster(tmp_path / "cluster")
    with cluster:
        cluster.start_superlink()
        for i in range(SILOS + 1):
            node = {"partition-id": i, "num-partitions": SILOS + 1, **SEEDED_NODE}
            if i < SILOS:
                node["data-path"] = str(paths[i])
            cluster.start_supernode(node)
        outcome = cluster.wait_run(cluster.submit(config), Path(config["result-path"]), timeout=420)
    document = outcome.result
    assert document is not None, outcome.output
    assert document["status"] == "success", document.get("reason")
    assert document["design"] == "silo-summaries" and document["n"] == SILOS
    reasons = list(document["steps"][0]["dropouts"].values())
    assert len(reasons) == 1 and "d=6 but the scenario's [data] columns name 3" in reasons[0]
    partitions = document["partitions_in_sum"]["silo_summaries"]
    assert sorted(partitions) == list(range(SILOS))
    assert_units_equal(document["meta_analysis"], twin(config, prepared, partitions), rtol=1e-9)
