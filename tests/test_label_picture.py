"""The label picture (issue 20 §6): what result.plot() and fa-hetdp run's figure show.

The test reads the drawn figure back: each panel's bar heights equal the result's released
values, and its interval lines run from the result's own interval ends (cut to the range) at
the same labels. Values come from a fixed-seed private measurement of label histograms.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import fa_hetdp
from fa_hetdp.errors import InputDataError
from fa_hetdp.protocol.label_picture import PANELS, label_picture
from fa_hetdp.report.label_figure import (
    label_figure_path,
    picture_from_document,
    write_label_figure,
)
from fa_hetdp.report.results import statistics_section

pytest.importorskip("matplotlib")

RANGES = {"mean": (0.0, 1.0), "dispersion": (0.0, 0.25), "i2": (0.0, 1.0)}


def _histograms(n: int = 60, labels: int = 6, seed: int = 0) -> np.ndarray:
    """Label histograms of clients with 20 records each and Dirichlet(0.3) label mixtures."""
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.full(labels, 0.3), size=n)
    counts = np.stack([rng.multinomial(20, row) for row in p])
    hist: np.ndarray = counts / 20.0
    return hist


@pytest.fixture(scope="module")
def result() -> fa_hetdp.PrivateStatistics:
    return fa_hetdp.private_statistics(
        _histograms(), epsilon=2.0, delta=1e-5, rng=np.random.default_rng(7)
    )


def _read_panel(ax: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Bar centres and heights, and the interval segments' x, lower and upper."""
    bars = ax.patches
    centres = np.array([b.get_x() + b.get_width() / 2 for b in bars])
    heights = np.array([b.get_height() for b in bars])
    (lines,) = [c for c in ax.collections if c.get_gid() == "interval"]
    segs = np.array(lines.get_segments())
    return centres, heights, segs[:, 0, 0], np.stack([segs[:, 0, 1], segs[:, 1, 1]])


def test_plot_shows_the_results_values_and_intervals(
    result: fa_hetdp.PrivateStatistics, tmp_path: Path
) -> None:
    names = ["a", "b", "c", "d", "e", "f"]
    out = tmp_path / "labels.png"
    figure = result.plot(out, names=names, level=0.9)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    intervals = result.confidence_intervals(0.9)
    axes = figure.get_axes()
    assert len(axes) == 3
    released = {"mean": result.mean, "dispersion": result.dispersion, "i2": result.i2}
    for ax, key in zip(axes, PANELS, strict=True):
        centres, heights, xs, ends = _read_panel(ax)
        np.testing.assert_array_equal(centres, np.arange(6))
        np.testing.assert_allclose(heights, released[key], rtol=0, atol=1e-12)
        np.testing.assert_array_equal(xs, np.arange(6))
        lo_r, hi_r = RANGES[key]
        np.testing.assert_allclose(ends[0], np.clip(intervals.lower[key], lo_r, hi_r), atol=1e-12)
        np.testing.assert_allclose(ends[1], np.clip(intervals.upper[key], lo_r, hi_r), atol=1e-12)
        assert np.all(ends[1] > ends[0])  # an interval is drawn at every label
        assert [t.get_text() for t in ax.get_xticklabels()] == names
    title = figure.get_suptitle()
    assert "60 clients" in title and "ε = 2" in title and "federation I²" in title
    assert f"{result.i2_total:.2f}" in title


def test_the_shares_panel_is_the_federations_label_shares(
    result: fa_hetdp.PrivateStatistics,
) -> None:
    # mu' of label histograms estimates the federation's average share of each label.
    truth = _histograms().mean(axis=0)
    picture = label_picture(result)
    intervals = result.confidence_intervals()
    inside = (intervals.lower["mean"] <= truth) & (truth <= intervals.upper["mean"])
    assert inside.mean() >= 0.5  # 95 % intervals: a fixed-seed sanity check, not coverage
    np.testing.assert_array_equal(picture.values["mean"], result.mean)


def test_run_figure_draws_the_values_of_the_result_file(
    result: fa_hetdp.PrivateStatistics, tmp_path: Path
) -> None:
    assert result.plan is not None
    document: dict[str, Any] = {
        "status": "success",
        "differentially_private": True,
        "n": result.n,
        "released": statistics_section(result, result.plan),
        "privacy": {"epsilon_spent": result.spent.epsilon, "delta": result.spent.delta},
    }
    picture = picture_from_document(document)
    for key in PANELS:
        entry = document["released"]["values"][key]
        np.testing.assert_allclose(picture.values[key], entry["value"], atol=0)
        lo_r, hi_r = RANGES[key]
        np.testing.assert_allclose(picture.lower[key], np.clip(entry["lower"], lo_r, hi_r))
    total = document["released"]["values"]["i2_total"]
    assert picture.i2_total == total["value"]
    assert picture.i2_total_interval == (total["lower"], total["upper"])
    written = write_label_figure(document, tmp_path / "digits-x-123.json")
    assert written == tmp_path / "digits-x-123-labels.png"
    assert written == label_figure_path(tmp_path / "digits-x-123.json")
    assert written.read_bytes()[:4] == b"\x89PNG"
    assert not list(tmp_path.glob(".*"))  # no temporary file left behind


def test_a_failed_or_incomplete_result_is_refused(result: fa_hetdp.PrivateStatistics) -> None:
    with pytest.raises(InputDataError, match="successful run"):
        picture_from_document({"status": "aborted"})
    with pytest.raises(InputDataError, match="no released 'mean'"):
        picture_from_document({"status": "success", "released": {"values": {}}})
    with pytest.raises(InputDataError, match="one per label"):
        result.plot(names=["only one"])


def test_fa_hetdp_run_writes_the_picture_beside_its_result(
    result: fa_hetdp.PrivateStatistics, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fa_hetdp.cli.run import label_figure_line, prepare

    assert result.plan is not None
    document: dict[str, Any] = {
        "status": "success",
        "differentially_private": True,
        "n": result.n,
        "released": statistics_section(result, result.plan),
        "privacy": {"epsilon_spent": result.spent.epsilon, "delta": result.spent.delta},
    }
    path = tmp_path / "results" / "digits-histogram-abc.json"
    line = label_figure_line(document, path)
    assert line.startswith("label picture: ") and line.endswith("digits-histogram-abc-labels.png")
    assert (tmp_path / "results" / "digits-histogram-abc-labels.png").is_file()
    # Only a label-histogram scenario asks for it.
    import argparse

    from fa_hetdp.cli.run import add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert prepare(parser.parse_args(["digits/digits-histogram", "--epsilon", "1"])).label_histogram
    assert not prepare(parser.parse_args(["quickstart"])).label_histogram
    # Without matplotlib: one line that names the extra, and the run still succeeds.
    monkeypatch.setitem(__import__("sys").modules, "matplotlib.figure", None)
    line = label_figure_line(document, tmp_path / "other.json")
    assert "fa-hetdp[plots]" in line


@pytest.mark.slow
def test_fa_hetdp_run_on_a_flwr_partitioned_scenario_writes_the_picture(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # End to end (about 35 s): the Flower clients load flwr-datasets partitions of different
    # sizes (client_records), the run succeeds, and the picture is written beside the result.
    pytest.importorskip("flwr_datasets")
    import json

    from fa_hetdp.cli.main import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FLWR_TELEMETRY_ENABLED", "0")
    code = main(["run", "digits/digits-flwr-dirichlet", "--workdir", str(tmp_path / "work")])
    printed = capsys.readouterr()
    assert code == 0, printed.err
    (result_file,) = (tmp_path / "results").glob("digits-flwr-dirichlet-*[0-9].json")
    picture_file = label_figure_path(result_file)
    assert picture_file.is_file()
    assert f"label picture: results/{picture_file.name}" in printed.out
    document = json.loads(result_file.read_text())
    assert document["n"] == 20 and document["d"] == 10
    picture = picture_from_document(document)
    np.testing.assert_array_equal(picture.values["mean"], document["statistics"]["mean"])
