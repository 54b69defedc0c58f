"""Tests of fa_hetdp.experiments.reproduce: table builders on hand-made results; the CLI."""

from __future__ import annotations

import csv
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from fa_hetdp.cli.main import main
from fa_hetdp.experiments.grid import GridSpec
from fa_hetdp.experiments.paper import PAPER_SKEWS
from fa_hetdp.experiments.paper_tables import (
    build_tables,
    coverage_table,
    distributed_central_table,
    minimum_values_table,
    percentage_change_tables,
    ratio_tables,
    statistic_table,
)
from fa_hetdp.experiments.reproduce import find_skew_scenarios
from fa_hetdp.experiments.results import CellResult, ExperimentResult

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
EPS = (0.25, 1.0)
STATS = ("mean", "dispersion", "weighted_mean", "q", "i2", "i2_extra")


def _cell(eps: float, mechanism: str, placement: str, value: float, **extra: object) -> CellResult:
    metrics = dict.fromkeys(STATS, value)
    return CellResult(
        epsilon=eps,
        mechanism=mechanism,
        placement=placement,
        composition=str(extra.pop("composition", "basic")),
        repeats=100,
        emse=metrics,
        emse_sd=dict.fromkeys(STATS, value / 10),
        expected_mse=dict.fromkeys(STATS, value / 2),
        tmse=dict.fromkeys(STATS, value / 4),
        tmse_sd=dict.fromkeys(STATS, value / 40),
        coverage_paper={"dispersion": 1.0, "q": 1.0, "i2_extra": 0.0},
        coverage_noise=dict.fromkeys(("mean", "dispersion", "weighted_mean", "q", "i2"), 0.97),
        sigmas={"dispersion": float(extra.pop("sigma", 1.0))},
        spent_epsilon=eps,
        spent_delta=1e-5,
    )


def _result(
    name: str, scale: float, *, truth_scale: float = 1.0, gdp: bool = False
) -> ExperimentResult:
    """EMSE = scale * base, base: AGM dist 1, AGM central 2, CGM dist 4, CGM central 8 (x1/eps)."""
    cells = []
    base = {
        ("agm", "distributed"): 1.0,
        ("agm", "central"): 2.0,
        ("cgm", "distributed"): 4.0,
        ("cgm", "central"): 8.0,
    }
    for eps in EPS:
        for mechanism in ("agm", "cgm"):
            for placement in ("distributed", "central"):
                value = scale * base[(mechanism, placement)] / eps
                cells.append(_cell(eps, mechanism, placement, value, sigma=2.0))
                if gdp and mechanism == "agm":
                    cells.append(
                        _cell(eps, mechanism, placement, value / 3, composition="gdp", sigma=1.0)
                    )
    truth = {}
    for key in ("mean", "dispersion", "weighted_mean", "q", "i2"):
        truth[key] = truth_scale
        truth[f"min_{key}"] = truth_scale / 10
    grid = GridSpec(
        epsilons=EPS,
        delta=1e-5,
        mechanisms=("agm", "cgm"),
        placements=("distributed", "central"),
        compositions=("basic", "gdp") if gdp else ("basic",),
        repeats=100,
    )
    from fa_hetdp.experiments.engine import _fill_cmse

    return ExperimentResult(
        name=name,
        grid=grid,
        n=100,
        d=64,
        truth=truth,
        n_at_floor=0,
        n_clipped=0,
        cells=tuple(_fill_cmse(cells)),
    )


def _six(scales: dict[tuple[int, bool], float]) -> dict:
    return {
        skew: _result(
            skew.slug,
            scales[(skew.num_labels, skew.heterogeneous)],
            truth_scale=float(skew.num_labels),
            gdp=skew == PAPER_SKEWS[0],
        )
        for skew in PAPER_SKEWS
    }


def test_statistic_table_picks_the_right_cells() -> None:
    table = statistic_table(_result("r", 1.0), "dispersion", "T1", "table1", epsilon=0.25)
    assert table.row_labels == ("EMSE", "TMSE", "CMSE")
    assert table.column_labels == ("AGM", "CGM", "SD AGM", "SD CGM")
    np.testing.assert_allclose(
        table.as_array(),
        [[4.0, 16.0, 0.4, 1.6], [1.0, 4.0, 0.1, 0.4], [8.0, 32.0, 0.8, 3.2]],
    )


def test_table5_sign_convention_on_hand_made_results() -> None:
    # SH EMSE = 0.5 x non-SH EMSE for 10 labels -> -50 %; 5 labels SH = 1.5 x -> +50 %;
    # 2 labels equal -> 0 %. Label-count changes: non-SH 5 labels = 2 x 10 labels -> +100 %.
    scales = {
        (10, False): 1.0,
        (10, True): 0.5,
        (5, False): 2.0,
        (5, True): 3.0,
        (2, False): 2.0,
        (2, True): 2.0,
    }
    table_a, table_b = percentage_change_tables(_six(scales))
    np.testing.assert_allclose(table_a.as_array(), [[-50.0] * 4, [50.0] * 4, [0.0] * 4])
    assert table_a.column_labels[-1].startswith("I²''")
    assert table_a.row_labels == ("10 labels", "5 labels", "2 labels")
    assert "(EMSE_SH − EMSE_nonSH) / EMSE_nonSH" in table_a.note
    assert table_b.row_labels == ("SH: 10v5", "SH: 5v2", "Non-SH: 10v5", "Non-SH: 5v2")
    # SH: 10v5 = (3 - 0.5)/0.5 = +500 %; SH: 5v2 = (2 - 3)/3 = -33.3 %;
    # Non-SH: 10v5 = (2 - 1)/1 = +100 %; Non-SH: 5v2 = 0 %.
    np.testing.assert_allclose(
        table_b.as_array()[:, 0], [500.0, -100.0 / 3.0, 100.0, 0.0], rtol=1e-12
    )


def test_ratio_and_addition_tables() -> None:
    result = _result("r", 1.0, gdp=True)
    emse_tmse, agm_cgm = ratio_tables(result, epsilon=1.0)
    np.testing.assert_allclose(emse_tmse.as_array(), 4.0)  # EMSE / (EMSE/4)
    np.testing.assert_allclose(agm_cgm.as_array(), 0.25)  # 1/4 and 2/8
    dc = distributed_central_table(result, epsilon=1.0)
    assert dc.value("D''", "AGM ratio (ε=1)") == pytest.approx(0.5)
    assert dc.value("D''", "AGM 95% low") < 0.5 < dc.value("D''", "AGM 95% high")
    cov = coverage_table(result, epsilon=1.0)
    assert cov.value("I²'''", "paper AGM (ε=1)") == 0.0
    assert cov.value("D''", "ours AGM (min over ε)") == pytest.approx(0.97)
    assert math.isnan(cov.value("μ'", "paper AGM (ε=1)"))
    tables = build_tables({PAPER_SKEWS[0]: result}, epsilon=1.0)
    comp = next(t for t in tables if t.name == "composition_basic_gdp")
    assert comp.value("1", "σ ratio basic/gdp") == pytest.approx(2.0)
    assert comp.value("1", "EMSE D'' basic/gdp") == pytest.approx(3.0)
    assert [t.name for t in tables][:3] == ["table1_dispersion", "table2_q", "table3_i2"]
    with pytest.raises(ValueError, match="1:…:1"):
        build_tables({PAPER_SKEWS[1]: result})


def test_minimum_values_table() -> None:
    table = minimum_values_table(
        {
            PAPER_SKEWS[0]: _result("a", 1.0, truth_scale=3.0),
            PAPER_SKEWS[1]: _result("b", 1.0, truth_scale=2.0),
        }
    )
    assert table.row_labels[-1] == "minimum over skews"
    assert table.value("minimum over skews", "Q (coord. mean)") == 2.0
    assert table.value("minimum over skews", "I² (coord. min)") == pytest.approx(0.2)


def test_digits_skew_scenarios_are_found() -> None:
    found = find_skew_scenarios("digits")
    assert list(found) == list(PAPER_SKEWS)
    for skew, scenario in found.items():
        ratios = np.asarray(scenario.data.label_ratios, dtype=float)
        np.testing.assert_allclose(
            ratios / ratios.sum(), np.asarray(skew.ratios) / sum(skew.ratios)
        )


def _strict_json(path: Path) -> dict:
    def no_constants(name: str) -> float:
        raise ValueError(name)

    return json.loads(path.read_text(), parse_constant=no_constants)


@pytest.mark.slow  # ~20 s (measured): the whole quick reproduction
def test_reproduce_quick_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "repro"
    code = main(["reproduce", "--quick", "--repeats", "6", "--out", str(out), "--no-progress"])
    assert code == 0
    printed = capsys.readouterr().out
    assert "Table 1: dispersion" in printed and "REPORT.md" in printed
    for stem in (
        "table1_dispersion",
        "table2_q",
        "table3_i2",
        "table4_minimum_values",
        "table5a_sh_vs_nonsh",
        "table5b_label_counts",
        "ratio_emse_tmse",
        "ratio_agm_cgm",
        "ratio_emse_expected",
        "ratio_distributed_central",
        "composition_basic_gdp",
        "ci_coverage",
    ):
        assert (out / f"{stem}.csv").stat().st_size > 0, stem
        assert (out / f"{stem}.md").stat().st_size > 0, stem
    for png in ("figure1.png", "figure1_extra.png", "frontier.png"):
        content = (out / png).read_bytes()
        assert content.startswith(PNG_MAGIC) and len(content) > 20_000
    data = _strict_json(out / "reproduce.json")
    assert set(data["runs"]) == {s.slug for s in PAPER_SKEWS}
    base = data["runs"]["labels10_iid"]
    assert base["grid"]["delta"] == 1e-5 and base["grid"]["repeats"] == 6
    assert base["grid"]["epsilons"] == [0.25, 1.0, 5.0]
    first = next(
        c
        for c in base["cells"]
        if c["epsilon"] == 0.25
        and c["mechanism"] == "agm"
        and c["placement"] == "distributed"
        and c["composition"] == "basic"
    )
    with (out / "table1_dispersion.csv").open() as handle:
        rows = {r[0]: r[1:] for r in csv.reader(handle)}
    assert float(rows["EMSE"][0]) == first["emse"]["dispersion"]
    assert float(rows["TMSE"][0]) == first["tmse"]["dispersion"]
    assert float(rows["CMSE"][0]) == first["cmse"]["dispersion"]
    report = (out / "REPORT.md").read_text()
    assert "Table 5(a)" in report and "figure1.png" in report
    assert "![Utility frontier](frontier.png)" in report  # the utility frontier (issue 9, item 5)
    frontier = (out / "frontier.md").read_text()
    assert frontier.count("planned / measured") == 1
    # the measured checks (20 repeats in --quick) lie within 20 % of the planner's RMSE
    checks = re.findall(r"(\d\.\d+) / (\d\.\d+)", frontier)
    assert len(checks) == 6
    assert all(abs(float(m) / float(p) - 1.0) <= 0.2 for p, m in checks), checks
    assert (out / "labels2_sh" / "results.json").is_file()


def test_paper_dataset_without_files_fails_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "never"
    code = main(
        [
            "reproduce",
            "--dataset",
            "cifar10",
            "--root",
            str(tmp_path / "nodata"),
            "--out",
            str(out),
            "--no-progress",
        ]
    )
    assert code == 2
    err = capsys.readouterr().err
    assert "cifar-10-batches-py" in err
    assert not out.exists()


def test_repeats_below_two_rejected(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["reproduce", "--repeats", "1", "--no-progress"]) == 2
    assert "--repeats" in capsys.readouterr().err
