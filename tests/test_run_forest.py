"""``fa-hetdp run`` draws a meta-analysis' forest plots beside its result (issue 29).

The documents are real results of the Flower app: the fast tests run the real handlers, codec
and strategy over the in-memory Grid of tests/test_meta_flower.py (4 silos x 300 records, d = 6)
under each design, and check the rows the figure draws (:func:`run_forest`, before matplotlib)
against the result JSON and against the in-process rows of the same result
(:func:`~fa_hetdp.report.forest.forest_rows`). The failure tests run ``fa-hetdp run`` with that
document in place of Flower; the slow tests run it on a simulation SuperLink.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy.stats import norm
from test_flower_helpers import run_config
from test_meta_flower import SILOS, our_grid, run_meta, silos_file

import fa_hetdp.server.app as server_app
from fa_hetdp.protocol.meta_server import PrivateMetaAnalysis
from fa_hetdp.report.forest import POOLED_ROWS, forest_rows
from fa_hetdp.report.run_forest import (
    MAX_PANELS,
    NO_SILO_ROWS,
    RunForest,
    draw_run_forest,
    run_forest,
    run_forest_path,
    write_run_forest,
)

pytest.importorskip("matplotlib")

DESIGNS = ("silo-summaries", "secure-sums")
D = 6  # silos_file's columns


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[dict, PrivateMetaAnalysis]]:
    """Each design's result document and in-process result, from one in-memory Flower run."""
    out: dict[str, tuple[dict, PrivateMetaAnalysis]] = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(server_app, "POLL_SECONDS", 0.0)
        for design in DESIGNS:
            tmp = tmp_path_factory.mktemp(design)
            config = run_config(tmp, silos_file(tmp, design=design))
            strategy, document = run_meta(config, our_grid(config))
            assert document["status"] == "success" and document["design"] == design
            assert strategy.meta_result is not None
            out[design] = (json.loads(json.dumps(document)), strategy.meta_result)
    return out


def _pooled(section: dict[str, Any], j: int) -> dict[str, tuple[float, float, float]]:
    stats = section["statistics"]

    def row(name: str) -> tuple[float, float, float]:
        entry = stats[name]
        return (
            entry["value"][j],
            entry["population"]["lower"][j],
            entry["population"]["upper"][j],
        )

    prediction = section["prediction_interval"]
    return {
        "fixed effect": row("pooled_mean"),
        "random effects": row("random_effects_mean"),
        "prediction interval": (
            stats["random_effects_mean"]["value"][j],
            prediction["lower"][j],
            prediction["upper"][j],
        ),
    }


def _assert_pooled_rows_are_the_documents(forest: RunForest, document: dict[str, Any]) -> None:
    section = document["meta_analysis"]
    for j, panel in zip(forest.columns, forest.panels, strict=True):
        for label, want in _pooled(section, j).items():
            assert panel.row(label) == want, (j, label)  # the JSON's numbers, unchanged


# ---------------------------------------------------------------------------- the rows drawn
def test_silo_summaries_draw_a_row_per_silo_then_the_pooled_rows(runs: dict) -> None:
    document, result = runs["silo-summaries"]
    forest = run_forest(document)
    section = document["meta_analysis"]
    assert forest.columns == tuple(range(D)) and forest.d == D
    assert len(forest.panels) == D
    for j, panel in enumerate(forest.panels):
        assert panel.column == f"x{j}"
        assert panel.labels == (*(f"silo {i}" for i in range(SILOS)), *POOLED_ROWS)
        assert panel.sites == SILOS
        assert math.isclose(sum(panel.weights), 1.0)
    _assert_pooled_rows_are_the_documents(forest, document)
    # a silo's row: its noisy released mean +- z sqrt(s^2/m + sigma^2), from the JSON
    z = float(norm.ppf(0.975))
    silo = section["silos"][2]
    sd = math.sqrt(silo["variance_used"][4] / silo["records"] + silo["mean_noise_sd"] ** 2)
    assert forest.panels[4].row("silo 2") == pytest.approx(
        (silo["mean"][4], silo["mean"][4] - z * sd, silo["mean"][4] + z * sd), rel=1e-12
    )
    # the JSON carries all the in-process plot needs: the same rows as forest_plot's
    for j, panel in enumerate(forest.panels):
        own = forest_rows(result, f"x{j}")
        assert own.labels[SILOS:] == POOLED_ROWS
        for got, want in (
            (panel.estimates, own.estimates),
            (panel.lower, own.lower),
            (panel.upper, own.upper),
            (panel.weights, own.weights),
        ):
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)
    assert "silo-summaries, ε = 1, δ = 1e-05" in forest.title
    assert "unit of privacy: one record of one client" in forest.title
    assert forest.notes[0].startswith("silo rows: each silo's noisy released mean")
    assert "population mean (sampling error and privacy noise)" in forest.notes[1]


def test_secure_sums_draw_the_pooled_rows_only_and_say_why(runs: dict) -> None:
    document, result = runs["secure-sums"]
    forest = run_forest(document)
    assert "silos" not in document["meta_analysis"]  # nothing per silo was released
    assert [panel.labels for panel in forest.panels] == [POOLED_ROWS] * D
    assert all(panel.sites == 0 for panel in forest.panels)
    _assert_pooled_rows_are_the_documents(forest, document)
    for j, panel in enumerate(forest.panels):
        np.testing.assert_allclose(panel.estimates, forest_rows(result, f"x{j}").estimates)
    assert forest.notes[0] == NO_SILO_ROWS
    assert "secure-sums, ε = 1" in forest.title


@pytest.mark.parametrize("design", DESIGNS)
def test_the_figure_has_a_panel_per_column_with_the_rows(
    runs: dict, design: str, tmp_path: Path
) -> None:
    document, _ = runs[design]
    result_path = tmp_path / "results" / "silos-small-5.json"
    written, forest = write_run_forest(document, result_path)
    assert written == run_forest_path(result_path) == tmp_path / "results/silos-small-5-forest.png"
    assert written.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in written.parent.iterdir()] == [written.name]  # no temporary left
    figure = draw_run_forest(forest)
    shown = [ax for ax in figure.axes if ax.axison]
    assert len(shown) == D
    assert [t.get_text() for t in shown[0].get_yticklabels()] == list(forest.panels[0].labels)
    for ax, panel in zip(shown, forest.panels, strict=True):
        assert len(ax.get_yticks()) == len(panel.labels)  # the labels: on the left panels only
        assert ax.get_title().startswith(panel.column)
        # what is on the axes is the rows: the silos' squares, the pooled means' diamonds
        squares = [tuple(c.get_offsets()[0]) for c in ax.collections]
        assert [x for x, _ in squares] == list(panel.estimates[: panel.sites])
        diamonds = [p.get_xy() for p in ax.patches]
        assert [(xy[0][0], xy[1][0], xy[2][0]) for xy in diamonds] == [
            (lo, est, hi)
            for label in ("fixed effect", "random effects")
            for est, lo, hi in [panel.row(label)]
        ]
    assert figure.get_suptitle() == forest.title


def test_a_wide_result_draws_the_columns_with_the_largest_i2(tmp_path: Path) -> None:
    from fa_hetdp import private_meta_analysis
    from fa_hetdp.cli.run import forest_figure_line
    from fa_hetdp.report.meta import meta_section

    rng = np.random.default_rng(4)
    d = 20
    centres = rng.uniform(0.3, 0.7, size=(4, d)) * rng.uniform(0.0, 1.0, size=d)
    records = np.clip(np.repeat(centres, 300, axis=0) + 0.1 * rng.normal(size=(1200, d)), 0, 1)
    result = private_meta_analysis(
        records, np.repeat(np.arange(4), 300), epsilon=1.0, delta=1e-5, rng=5,
        privacy_unit="record", design="silo-summaries",
    )  # fmt: skip
    assert isinstance(result, PrivateMetaAnalysis)
    document = {"status": "success", "analysis": "meta", "meta_analysis": meta_section(result)}
    forest = run_forest(document)
    i2 = np.where(np.isfinite(result.i2), result.i2, -np.inf)
    top = tuple(sorted(np.argsort(-i2, kind="stable")[:MAX_PANELS].tolist()))
    assert forest.columns == top and len(forest.panels) == MAX_PANELS and forest.d == d
    assert any(
        note.startswith(f"columns drawn: the 16 of {d} with the largest I²")
        for note in forest.notes
    )
    line, drawn = forest_figure_line(document, tmp_path / "wide-1.json")
    assert drawn and line.startswith("forest plot: ") and f"the 16 of {d} columns" in line
    assert (tmp_path / "wide-1-forest.png").is_file()


def test_a_run_without_dp_says_so_and_shows_no_epsilon(runs: dict) -> None:
    document, _ = runs["secure-sums"]
    plain = {**document, "differentially_private": False}
    title = run_forest(plain).title
    assert "not DP" in title and "ε" not in title


# ---------------------------------------------------------------------------- a failed figure
@pytest.fixture
def run_without_flower(
    runs: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Path, Path]]:
    """`fa-hetdp run` of the silo-summaries scenario, the in-memory run's document in place of
    Flower (written first, as the ServerApp does); yields the scenario and the result path."""
    import fa_hetdp.cli.run as run_module
    from fa_hetdp.cli.cluster import RunOutcome

    document, _ = runs["silo-summaries"]
    monkeypatch.chdir(tmp_path)
    result_path = tmp_path / "results" / "silos-small-1.json"
    result_path.parent.mkdir()
    result_path.write_text(json.dumps(document))

    def simulated(*args: object, **kwargs: object) -> RunOutcome:
        return RunOutcome(returncode=0, output="", result=document, result_path=result_path)

    monkeypatch.setattr(run_module, "run_simulation", simulated)
    yield silos_file(tmp_path, design="silo-summaries"), result_path


def test_an_unwritable_figure_path_keeps_the_result_and_exits_0(
    run_without_flower: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    from fa_hetdp.cli.main import main

    scenario, result_path = run_without_flower
    before = result_path.read_bytes()
    blocked = run_forest_path(result_path)
    blocked.mkdir()  # a folder with a file in it where the figure goes: os.replace fails
    (blocked / "keep").write_text("x")
    assert main(["run", str(scenario)]) == 0
    printed = capsys.readouterr()
    assert "result: results/silos-small-1.json" in printed.out
    assert "forest plot: not drawn (" in printed.err and "the result is kept" in printed.err
    assert result_path.read_bytes() == before
    assert (blocked / "keep").read_text() == "x"
    assert not [p for p in result_path.parent.iterdir() if p.name.startswith(".")]  # no temp


def test_a_figure_that_fails_to_draw_keeps_the_result_and_exits_0(
    run_without_flower: tuple[Path, Path],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import fa_hetdp.report.run_forest as run_forest_module
    from fa_hetdp.cli.main import main

    def broken(*args: object, **kwargs: object) -> Path:
        raise RuntimeError("the figure writer broke")

    monkeypatch.setattr(run_forest_module, "write_figure_atomic", broken)
    scenario, result_path = run_without_flower
    before = result_path.read_bytes()
    assert main(["run", str(scenario)]) == 0
    printed = capsys.readouterr()
    assert "forest plot: not drawn (RuntimeError: the figure writer broke)" in printed.err
    assert "result: results/silos-small-1.json" in printed.out
    assert result_path.read_bytes() == before
    assert not run_forest_path(result_path).exists()


def test_the_figure_is_drawn_when_it_can_be(
    run_without_flower: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    from fa_hetdp.cli.main import main

    scenario, result_path = run_without_flower
    assert main(["run", str(scenario)]) == 0
    out = capsys.readouterr().out
    assert "forest plot: results/silos-small-1-forest.png" in out
    assert run_forest_path(result_path).read_bytes()[:4] == b"\x89PNG"


# ---------------------------------------------------------------------------- Flower's runtime
@pytest.mark.slow
@pytest.mark.parametrize("design", DESIGNS)
def test_fa_hetdp_run_of_a_meta_scenario_writes_the_forest_plot(
    design: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`fa-hetdp run` on a simulation SuperLink (4 silos x 300 records, d = 6)."""
    import fa_hetdp.report.run_forest as run_forest_module
    from fa_hetdp.cli.main import main

    drawn: list[RunForest] = []
    original = run_forest_module.draw_run_forest

    def spy(forest: RunForest, **kwargs: Any) -> Any:
        drawn.append(forest)
        return original(forest, **kwargs)

    monkeypatch.setattr(run_forest_module, "draw_run_forest", spy)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FLWR_TELEMETRY_ENABLED", "0")
    scenario = silos_file(tmp_path, design=design)
    code = main(["run", str(scenario), "--workdir", str(tmp_path / "work")])
    printed = capsys.readouterr()
    assert code == 0, printed.err
    (result_path,) = (tmp_path / "results").glob("silos-small-*[0-9].json")
    document = json.loads(result_path.read_text())
    assert document["status"] == "success" and document["design"] == design
    figure = run_forest_path(result_path)
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"forest plot: results/{figure.name}" in printed.out
    (forest,) = drawn
    sites = SILOS if design == "silo-summaries" else 0
    assert [len(panel.labels) for panel in forest.panels] == [sites + len(POOLED_ROWS)] * D
    _assert_pooled_rows_are_the_documents(forest, document)
    assert (NO_SILO_ROWS in forest.notes) == (design == "secure-sums")
    assert f"{design}, ε = 1" in forest.title
