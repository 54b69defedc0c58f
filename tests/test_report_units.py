"""Column names, their units and two-arm effects in what a meta-analysis run shows (issue 29).

A newcomer with a CSV per site states ``[data] units = {dep_delay = "minutes"}`` beside
``columns`` and ``bounds``; the scenario is refused before Flower starts when a unit is not a
string or names no listed column, and otherwise the result's ``meta_analysis["units"]`` carries
them (``unit_names``, :func:`fa_hetdp.server.meta.with_column_units`), so the printed table
(:func:`~fa_hetdp.report.meta.format_meta`), the forest plot's panels
(:func:`~fa_hetdp.report.run_forest.run_forest`) and the I² figure's rows
(:func:`~fa_hetdp.report.meta.i2_axis`) name every column with its units. A two-arm result
(``effect`` and ``arm``) says its effect instead of "pooled mean" (the log scale of OR and RR,
with the odds or risk ratio beside it). The documents are built in process: the sections the
Flower app writes (:func:`~fa_hetdp.report.meta.meta_section` with
:func:`~fa_hetdp.server.meta.with_column_units`, and
:func:`~fa_hetdp.server.silo_summaries.two_arm_section`), from the same tables the Flower tests
read, with no Flower run.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import numpy as np
import pytest
from test_sites_simulation import _problems, _scenario
from test_two_arm_flower import silo_tables, twin

from fa_hetdp import private_meta_analysis
from fa_hetdp.config.scenario import load_scenario, scenario_from_dict
from fa_hetdp.protocol.meta_server import PrivateMetaAnalysis
from fa_hetdp.report.forest import POOLED_ROWS, forest_rows
from fa_hetdp.report.meta import READING, format_meta, i2_axis, meta_section
from fa_hetdp.report.run_forest import draw_run_forest, panel_axis, panel_title, run_forest
from fa_hetdp.server.meta import with_column_units
from fa_hetdp.server.silo_summaries import two_arm_section

REPO = Path(__file__).resolve().parents[1]
SITES_DATA = (
    'sites = ["data/north.csv", "data/south.csv", "data/east.csv"]\n'
    'columns = ["score", "age"]\n'
    "bounds = { score = [0, 100], age = [0, 100] }\n"
)
COLUMNS = ("dep_delay", "arr_delay", "air_time")
BOUNDS = {"dep_delay": (-60.0, 240.0), "arr_delay": (-120.0, 240.0), "air_time": (0.0, 720.0)}
MINUTES = {"dep_delay": "minutes", "arr_delay": "minutes"}  # air_time: no units named


# ---------------------------------------------------------------------------- the scenario key
def test_units_are_read_with_the_sites_and_kept_in_column_order(tmp_path: Path) -> None:
    path = _scenario(tmp_path, SITES_DATA + 'units = { age = "years", score = "points" }\n')
    scenario = load_scenario(path)
    assert scenario.data.units == (("score", "points"), ("age", "years"))
    assert scenario.data.column_units() == {"score": "points", "age": "years"}
    plain = scenario.to_dict()
    assert plain["data"]["units"] == {"score": "points", "age": "years"}
    assert scenario_from_dict(plain, name="sites-test", path=scenario.path) == scenario


def test_the_example_names_its_columns_units() -> None:
    data = load_scenario(REPO / "examples" / "sites" / "scenario.toml").data
    assert data.column_units() == dict.fromkeys(data.columns or (), "minutes")


@pytest.mark.parametrize(
    ("units", "key", "words"),
    [
        ('units = "minutes"\n', "data.units", ["must be a table", "got string"]),
        ("units = { score = 3 }\n", "data.units.score", ["must be a non-empty string", "integer"]),
        ('units = { score = "" }\n', "data.units.score", ["must be a non-empty string"]),
        ('units = { ward = "m" }\n', "data.units.ward", ["not one of data.columns", "score, age"]),
    ],
    ids=["not-a-table", "not-a-string", "empty", "unknown-column"],
)
def test_bad_units_are_refused_naming_the_key(
    tmp_path: Path, units: str, key: str, words: list[str]
) -> None:
    problems = _problems(_scenario(tmp_path, SITES_DATA + units))
    assert key in problems, problems
    for word in words:
        assert word in problems[key], problems[key]


def test_units_need_columns_outside_a_simulation_of_sites_too() -> None:
    base: dict[str, Any] = {
        "privacy": {"epsilon": 1.0, "delta": 1e-5},
        "experiment": {"seed": 0},
    }
    data: dict[str, Any] = {"dataset": "digits", "num_clients": 20}
    with pytest.raises(Exception, match=r"data\.units: needs data\.columns"):
        scenario_from_dict({**base, "data": {**data, "units": {"a": "m"}}})
    named = {**data, "columns": ["a", "b"], "units": {"b": "kg"}}
    assert scenario_from_dict({**base, "data": named}).data.units == (("b", "kg"),)


# ---------------------------------------------------------------------------- a units document
def _settings(units: dict[str, str]) -> Any:
    """What :func:`with_column_units` reads of the run's settings: the scenario's data."""
    scenario = scenario_from_dict(
        {
            "data": {
                "dataset": "digits",
                "num_clients": 20,
                "columns": list(COLUMNS),
                "bounds": {c: list(b) for c, b in BOUNDS.items()},
                "units": units,
            },
            "privacy": {"epsilon": 1.0, "delta": 1e-5},
            "experiment": {"seed": 0},
        }
    )
    return cast(Any, SimpleNamespace(scenario=scenario))


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    """A silo-summaries result of 4 silos on the columns' [0, 1] scale, written as the app does."""
    rng = np.random.default_rng(7)
    centres = np.array([[0.2, 0.4, 0.3], [0.3, 0.35, 0.3], [0.25, 0.5, 0.32], [0.4, 0.45, 0.31]])
    records = np.clip(np.repeat(centres, 300, axis=0) + 0.08 * rng.normal(size=(1200, 3)), 0, 1)
    result = private_meta_analysis(
        records, np.repeat(np.arange(4), 300), epsilon=1.0, delta=1e-5, rng=5,
        privacy_unit="record", design="silo-summaries",
    )  # fmt: skip
    assert isinstance(result, PrivateMetaAnalysis)
    section = with_column_units(meta_section(result), _settings(MINUTES))
    return json.loads(
        json.dumps(
            {"status": "success", "analysis": "meta", "scenario": "sites", "meta_analysis": section}
        )
    )


def test_the_result_carries_the_unit_names(document: dict[str, Any]) -> None:
    units = document["meta_analysis"]["units"]
    assert units["unit_names"] == MINUTES and units["columns"] == list(COLUMNS)
    plain = with_column_units(document["meta_analysis"], _settings({}))
    assert "unit_names" not in plain["units"]  # none named: no key


def test_the_forest_panels_are_titled_and_labelled_with_the_units(
    document: dict[str, Any],
) -> None:
    forest = run_forest(document)
    assert [panel.column for panel in forest.panels] == list(COLUMNS)
    assert forest.titles == ("dep_delay (minutes)", "arr_delay (minutes)", "air_time")
    assert forest.axes == ("mean (minutes)", "mean (minutes)", "mean, the column's units")
    assert any("own units" in note for note in forest.notes)
    # stated units override the result's
    assert run_forest(document, units="min").titles[2] == "air_time (min)"
    # the figure draws them
    figure = draw_run_forest(forest)
    shown = [ax for ax in figure.axes if ax.axison]
    assert [ax.get_title() for ax in shown] == list(forest.titles)
    assert [ax.get_xlabel() for ax in shown] == list(forest.axes)


def test_a_result_on_the_unit_scale_has_no_units(document: dict[str, Any]) -> None:
    section = {k: v for k, v in document["meta_analysis"].items() if k not in ("units", "columns")}
    forest = run_forest({**document, "meta_analysis": section})
    assert forest.titles == ("x0", "x1", "x2")
    assert set(forest.axes) == {"mean, [0, 1] scale"}


def test_the_table_names_each_column_with_its_units(document: dict[str, Any]) -> None:
    section = document["meta_analysis"]
    lines = format_meta({**section, **section["units"]}, top=None)
    header = next(line for line in lines if line.strip().startswith("column"))
    assert header.split()[:2] == ["column", "(units)"] and "pooled mean" in header
    for column in COLUMNS:
        unit = MINUTES.get(column)
        row = next(line for line in lines if line.strip().startswith(column))
        assert (f"{column} ({unit})" in row) if unit else f"{column} (" not in row
    assert lines[-len(READING) :] == [f"  {line}" for line in READING]
    # the section's own [0, 1] figures: names without units
    raw = format_meta(section, top=None)
    assert not any("(minutes)" in line for line in raw)
    assert any(line.strip().startswith("dep_delay ") for line in raw)


def test_fa_hetdp_run_prints_the_units(
    document: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    from fa_hetdp.cli.run import print_result

    print_result(None, document)  # type: ignore[arg-type]
    out = capsys.readouterr().out
    assert "dep_delay (minutes)" in out
    assert "figures in the columns' units (dep_delay in minutes, arr_delay in minutes)" in out


def test_the_i2_figure_names_its_rows_by_column(document: dict[str, Any], tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from fa_hetdp.report.meta import plot_meta_i2

    section = document["meta_analysis"]
    order, ticks, label = i2_axis(section)
    assert label == "column" and ticks == [COLUMNS[j] for j in order]
    i2 = [v if v is not None else -math.inf for v in section["statistics"]["i2"]["value"]]
    assert [i2[j] for j in order] == sorted(i2)  # the largest I² on top
    unnamed = {k: v for k, v in section.items() if k not in ("units", "columns")}
    assert i2_axis(unnamed)[1:] == ([str(j) for j in order], "coordinate")
    assert plot_meta_i2(section, tmp_path / "x-i2.png").is_file()


# ---------------------------------------------------------------------------- two-arm effects
@pytest.fixture(scope="module")
def two_arm(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[dict[str, Any], Any]]:
    """MD and OR: each result document (its ``meta_analysis``) and its in-process twin."""
    paths = silo_tables(tmp_path_factory.mktemp("two-arm"))
    out = {}
    for effect in ("MD", "OR"):
        cma = twin(paths, [0, 1, 2], effect)
        section = json.loads(json.dumps(two_arm_section(cma, silo_names=[0, 1, 2])))
        out[effect] = ({"status": "success", "analysis": "meta", "meta_analysis": section}, cma)
    return out


def test_a_two_arm_table_names_its_effect(two_arm: dict[str, Any]) -> None:
    document, _ = two_arm["MD"]
    section = document["meta_analysis"]
    lines = format_meta({**section, **section["units"]})
    text = "\n".join(lines)
    assert "pooled MD (fixed effect)" in text and "random-effects MD" in text
    assert "pooled mean" not in text and "clients' means" not in text
    assert "effect: mean difference (MD), treated - control (arm column 'treated'" in text
    assert "spread between the silos' effects (MD)" in text
    assert "a new silo's effect" in text and "odds ratio" not in text


def test_a_log_odds_ratio_says_its_scale_and_shows_the_odds_ratio(two_arm: dict[str, Any]) -> None:
    document, _ = two_arm["OR"]
    section = document["meta_analysis"]
    view = {**section, **section["units"]}
    lines = format_meta(view)
    text = "\n".join(lines)
    assert "pooled log OR (fixed effect)" in text and "random-effects log OR" in text
    assert "the scale is log (0: no effect)" in text and "is the odds ratio" in text
    assert "pooled mean" not in text and "clients' means" not in text
    header = next(line for line in lines if "odds ratio (random effects)" in line)
    row = lines[lines.index(header) + 1]
    stats = view["statistics"]["random_effects_mean"]
    ratio = math.exp(stats["value"][0])
    lower, upper = (math.exp(stats["population"][k][0]) for k in ("lower", "upper"))
    assert f"{ratio:.3f} [{lower:.3f}, {upper:.3f}]" in row


@pytest.mark.parametrize("effect", ["MD", "OR"])
def test_a_two_arm_forest_draws_each_silos_effect(two_arm: dict[str, Any], effect: str) -> None:
    document, cma = two_arm[effect]
    forest = run_forest(document)
    for panel in forest.panels:
        own = forest_rows(cma, panel.column)
        assert panel.labels == (*(f"silo {i}" for i in range(3)), *POOLED_ROWS)
        for got, want in (
            (panel.estimates, own.estimates),
            (panel.lower, own.lower),
            (panel.upper, own.upper),
            (panel.weights, own.weights),
        ):
            np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)
    if effect == "MD":
        assert forest.titles == ("score: MD", "age: MD")
        assert run_forest(document, units={"score": "points"}).titles[0] == "score: MD (points)"
        assert forest.axes[0] == "mean difference (MD), treated - control"
    else:
        assert forest.titles == ("event: log OR",)
        assert forest.axes == ("log odds ratio (OR), treated vs control, log scale (0: no effect)",)
        ratio = next(note for note in forest.notes if note.startswith("odds ratio (exp"))
        assert ratio.startswith("odds ratio (exp of the random-effects estimate, 95 % CI): event ")
    assert not any("population mean" in note for note in forest.notes)
    assert any(note.startswith("axes: ") for note in forest.notes)


def test_the_titles_and_axes_of_one_panel() -> None:
    assert panel_title("dep_delay", "minutes") == "dep_delay (minutes)"
    assert panel_title("dep_delay") == "dep_delay"
    assert panel_title("score", "points", "SMD") == "score: SMD"  # unit-free
    assert panel_title("event", "", "RR") == "event: log RR"
    assert panel_axis("minutes") == "mean (minutes)"
    assert panel_axis(in_units=False) == "mean, [0, 1] scale"
    assert panel_axis("points", "MD") == "mean difference (MD), treated - control (points)"
    assert panel_axis("", "RD") == "risk difference (RD), treated - control"
