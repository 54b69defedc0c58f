"""Tests of fa_hetdp.experiments.bench_noise: comparisons, outputs, validation before any work."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from fa_hetdp.cli.main import main
from fa_hetdp.experiments.bench_noise import BENCH_STATISTICS, compare, comparison_table
from fa_hetdp.experiments.grid import GridSpec
from fa_hetdp.experiments.results import CellResult, ExperimentResult
from fa_hetdp.report.tables import ratio_confidence_interval

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

TINY = """
[scenario]
name = "tiny-bench"

[data]
dataset = "digits"
num_clients = 24
label_ratios = [1, 1, 1]

[privacy]
epsilon = [0.5, 1.0, 4.0]
delta = 1e-5
mechanism = "agm"
composition = "{composition}"

[experiment]
repeats = 8
seed = 2
"""


def _write(tmp_path: Path, composition: str = "basic", extra: str = "") -> Path:
    path = tmp_path / "tiny.toml"
    path.write_text(TINY.format(composition=composition) + extra)
    return path


def _cell(mechanism: str, placement: str, emse: float, sd: float, expected: float) -> CellResult:
    return CellResult(
        epsilon=1.0,
        mechanism=mechanism,
        placement=placement,
        composition="basic",
        repeats=50,
        emse=dict.fromkeys(BENCH_STATISTICS, emse),
        emse_sd=dict.fromkeys(BENCH_STATISTICS, sd),
        expected_mse=dict.fromkeys(BENCH_STATISTICS, expected),
    )


def hand_made_result() -> ExperimentResult:
    """Four hand-made cells: agm and cgm, distributed and central, at one epsilon."""
    cells = (
        _cell("agm", "distributed", 2.0, 1.0, 2.0),
        _cell("agm", "central", 1.0, 0.5, 2.0),
        _cell("cgm", "distributed", 8.0, 4.0, 10.0),
        _cell("cgm", "central", 8.0, 4.0, 10.0),
    )
    grid = GridSpec(
        epsilons=(1.0,),
        delta=1e-5,
        mechanisms=("agm", "cgm"),
        placements=("distributed", "central"),
        repeats=50,
    )
    return ExperimentResult("hand", grid, 10, 4, {}, 0, 0, cells)


def test_compare_on_hand_made_cells() -> None:
    result = hand_made_result()
    comparisons = compare(result)
    assert len(comparisons) == 3 * len(BENCH_STATISTICS)
    by_name = {c.name: c for c in comparisons if c.statistic == "q"}
    assert by_name["distributed/central AGM"].interval.ratio == pytest.approx(2.0)
    assert by_name["distributed/central AGM"].expected == 1.0
    assert by_name["distributed/central CGM"].interval.ratio == pytest.approx(1.0)
    agm_cgm = by_name["AGM/CGM"]
    assert agm_cgm.interval.ratio == pytest.approx(0.25)
    assert agm_cgm.expected == pytest.approx(0.2)  # 2 / 10 from the expected MSEs
    reference = ratio_confidence_interval(2.0, 1.0, 50, 8.0, 4.0, 50)
    assert agm_cgm.interval == reference
    table = comparison_table(comparisons, title="t")
    assert table.column_labels == ("epsilon", "ratio", "low", "high", "expected")
    assert len(table.row_labels) == len(comparisons)


def test_bench_noise_on_a_tiny_scenario(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    code = main(["bench-noise", str(_write(tmp_path)), "--out", str(out), "--no-progress"])
    assert code == 0
    printed = capsys.readouterr().out
    assert "tiny-bench: D'' EMSE ratios" in printed
    assert "distributed/central AGM" in printed
    with (out / "bench_noise.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 3 * 3 * len(BENCH_STATISTICS)  # eps x comparisons x statistics
    for row in rows:
        ratio, low, high = float(row["ratio"]), float(row["low"]), float(row["high"])
        assert low <= ratio <= high
    png = (out / "bench_noise.png").read_bytes()
    assert png.startswith(PNG_MAGIC) and len(png) > 20_000
    assert (out / "results.json").is_file() and (out / "cells.csv").is_file()


def test_gdp_scenario_compares_cgm_with_basic_composition(tmp_path: Path) -> None:
    out = tmp_path / "out"
    path = _write(tmp_path, composition="gdp")
    code = main(
        ["bench-noise", str(path), "--out", str(out), "--quick", "--repeats", "4", "--no-progress"]
    )
    assert code == 0
    with (out / "cells.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    ran = {(r["mechanism"], r["composition"]) for r in rows if not r["skipped"]}
    assert ran == {("agm", "basic"), ("agm", "gdp"), ("cgm", "basic")}
    with (out / "bench_noise.csv").open() as handle:
        names = {r["comparison"].split(" ", 2)[-1] for r in csv.DictReader(handle)}
    assert names == {"distributed/central AGM", "distributed/central CGM", "AGM/CGM"}


def test_bad_scenario_rejected_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    bad = _write(tmp_path, extra="\n[protocol]\nplacment = 'central'\n")
    assert main(["bench-noise", str(bad), "--out", str(out), "--no-progress"]) == 2
    assert "placment" in capsys.readouterr().err
    assert not out.exists()
    assert main(["bench-noise", str(tmp_path / "missing.toml"), "--out", str(out)]) == 2
    assert "missing.toml" in capsys.readouterr().err
    assert main(["bench-noise", str(_write(tmp_path)), "--repeats", "1", "--out", str(out)]) == 2
    assert "--repeats" in capsys.readouterr().err
    assert not out.exists()


def test_missing_cells_are_left_out() -> None:
    grid = GridSpec(epsilons=(1.0,), delta=1e-5, repeats=50)
    result = ExperimentResult(
        "only-agm", grid, 10, 4, {}, 0, 0, (_cell("agm", "distributed", 1.0, 0.1, 1.0),)
    )
    assert compare(result) == []
