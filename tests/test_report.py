"""Tests of fa_hetdp.report.tables: tables, percentage changes, ratio intervals, figures."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np
import pytest

from fa_hetdp.report.tables import (
    Table,
    format_value,
    mean_percentage_change,
    percentage_change,
    plot_emse_vs_epsilon,
    plot_ratio_bands,
    ratio_confidence_interval,
    write_table,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_percentage_change_sign_convention_on_hand_made_numbers() -> None:
    # Table 5 convention: (EMSE_SH - EMSE_nonSH) / EMSE_nonSH * 100.
    # SH error 2.0 vs non-SH 4.0 -> -50 %; SH 6.0 vs 4.0 -> +50 %.
    change = percentage_change([2.0, 6.0], [4.0, 4.0])
    np.testing.assert_allclose(change, [-50.0, 50.0], rtol=0, atol=1e-12)


def test_mean_percentage_change_averages_per_epsilon_changes() -> None:
    # Per-eps changes: -50 %, +100 %, 0 % -> mean 16.666... (not the change of the means,
    # which would be (2+4+1 - (4+2+1)) / 7 = 0).
    result = mean_percentage_change([2.0, 4.0, 1.0], [4.0, 2.0, 1.0])
    assert result == pytest.approx(50.0 / 3.0, abs=1e-12)


def test_percentage_change_zero_base_is_nan_and_skipped() -> None:
    change = percentage_change([1.0, 3.0], [0.0, 1.0])
    assert math.isnan(change[0])
    assert mean_percentage_change([1.0, 3.0], [0.0, 1.0]) == pytest.approx(200.0)
    assert math.isnan(mean_percentage_change([1.0], [0.0]))


def test_table_shape_validation() -> None:
    with pytest.raises(ValueError, match="row labels"):
        Table("t", "T", ("a", "b"), ("x",), ((1.0,),))
    with pytest.raises(ValueError, match="columns"):
        Table("t", "T", ("a",), ("x", "y"), ((1.0,),))
    with pytest.raises(ValueError, match="2-D"):
        Table.from_array("t", "T", ("a",), ("x",), [1.0])


def test_table_lookup_and_array() -> None:
    table = Table.from_array("t", "T", ["r1", "r2"], ["c1", "c2"], [[1.0, 2.0], [3.0, 4.0]])
    assert table.value("r2", "c1") == 3.0
    np.testing.assert_array_equal(table.as_array(), [[1.0, 2.0], [3.0, 4.0]])
    with pytest.raises(KeyError, match="r3"):
        table.value("r3", "c1")
    with pytest.raises(KeyError, match="c3"):
        table.value("r1", "c3")


def test_write_table_csv_round_trips_full_precision(tmp_path) -> None:
    values = [[4.6654e-08, float("nan")], [1.0 / 3.0, 2.5e7]]
    table = Table.from_array(
        "table1", "Dispersion", ["EMSE", "TMSE"], ["AGM", "CGM"], values, row_header="metric"
    )
    csv_path, md_path = write_table(table, tmp_path / "out")
    with csv_path.open() as handle:
        rows = list(csv.reader(handle))
    assert rows[0] == ["metric", "AGM", "CGM"]
    assert [r[0] for r in rows[1:]] == ["EMSE", "TMSE"]
    assert float(rows[2][1]) == 1.0 / 3.0  # repr round-trips exactly
    assert math.isnan(float(rows[1][2]))
    markdown = md_path.read_text()
    assert "| metric | AGM | CGM |" in markdown
    assert "4.665e-08" in markdown
    assert "2.500e+07" in markdown
    assert "—" in markdown
    assert not list((tmp_path / "out").glob("*.tmp"))


@pytest.mark.parametrize(
    ("value", "expected"),
    [(0.0, "0"), (1.0e-9, "1.000e-09"), (0.25, "0.25"), (12.3456, "12.35"), (-math.inf, "-inf")],
)
def test_format_value(value: float, expected: str) -> None:
    assert format_value(value) == expected


def test_ratio_confidence_interval_delta_method() -> None:
    # Hand computation: ratio 2; se = sqrt(1/(100*1) + 4/(100*4)) = sqrt(0.02).
    interval = ratio_confidence_interval(2.0, 2.0, 100, 1.0, 1.0, 100)
    se = math.sqrt(0.02)
    assert interval.ratio == pytest.approx(2.0)
    assert interval.low == pytest.approx(2.0 * math.exp(-1.959963984540054 * se), rel=1e-9)
    assert interval.high == pytest.approx(2.0 * math.exp(1.959963984540054 * se), rel=1e-9)
    degenerate = ratio_confidence_interval(0.0, 0.0, 10, 1.0, 1.0, 10)
    assert math.isnan(degenerate.ratio)
    with pytest.raises(ValueError, match="level"):
        ratio_confidence_interval(1.0, 1.0, 10, 1.0, 1.0, 10, level=1.5)
    with pytest.raises(ValueError, match="2 repeats"):
        ratio_confidence_interval(1.0, 1.0, 1, 1.0, 1.0, 10)


def test_ratio_interval_covers_true_ratio() -> None:
    # statistical: seed 7, 400 trials of samples of size 200, alpha = 0.05. The coverage of a
    # 95 % interval must lie in [0.92, 0.98] (binomial 99.9 % range for p=0.95, n=400 is about
    # [0.916, 0.978]).
    rng = np.random.default_rng(7)
    hits = 0
    for _ in range(400):
        a = rng.exponential(3.0, size=200)
        b = rng.exponential(1.5, size=200)
        iv = ratio_confidence_interval(
            a.mean(), a.std(ddof=1), a.size, b.mean(), b.std(ddof=1), b.size
        )
        hits += iv.low <= 2.0 <= iv.high
    assert 0.915 <= hits / 400 <= 0.98


def test_plots_write_png_files(tmp_path) -> None:
    eps = np.array([0.25, 0.5, 1.0])
    path = plot_emse_vs_epsilon(
        {
            "dispersion": {"1:1": (eps, [1e-3, 1e-4, 1e-5]), "91:1": (eps, [2e-3, 0.0, 2e-5])},
            "Q": {"1:1": (eps, [1.0, 0.1, 0.01])},
        },
        tmp_path / "fig" / "figure1.png",
        title="Figure 1",
    )
    data = path.read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 5000
    band = plot_ratio_bands(
        {"AGM": {"dist/central": (eps, [1.0, 1.1, 0.9], [0.9, 1.0, 0.8], [1.1, 1.2, 1.0])}},
        tmp_path / "band.png",
    )
    assert band.read_bytes().startswith(PNG_MAGIC)
    with pytest.raises(ValueError, match="panel"):
        plot_emse_vs_epsilon({}, tmp_path / "x.png")
    with pytest.raises(ValueError, match="panel"):
        plot_ratio_bands({}, tmp_path / "x.png")


def test_write_json_atomic_is_strict_json_and_leaves_no_partial_file(tmp_path: Path) -> None:
    import json

    from fa_hetdp.report.files import write_json_atomic

    target = tmp_path / "sub" / "result.json"
    written = write_json_atomic(
        target, {"x": np.float32(0.5), "n": np.int64(3), "bad": float("nan"), "a": np.arange(2)}
    )
    assert written == target
    assert json.loads(target.read_text()) == {"x": 0.5, "n": 3, "bad": None, "a": [0, 1]}
    with pytest.raises(TypeError):
        write_json_atomic(target, {"unserialisable": object()})
    assert json.loads(target.read_text())["n"] == 3
    assert sorted(p.name for p in target.parent.iterdir()) == ["result.json"]
