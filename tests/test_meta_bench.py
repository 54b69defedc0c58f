"""benchmarks/meta_bench.py: its federations are what they claim, and a small run of the whole
benchmark (table, JSON, figure) works end to end."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from support import benchmark_module

bench = benchmark_module("meta_bench")


def test_the_goal_federation_has_the_stated_shape_and_range() -> None:
    fed = bench.random_effects_federation(np.random.default_rng(3), m_range=(500, 2000))
    m = fed.records_per_client
    assert (fed.n, fed.d) == (20, 16)
    assert m.min() >= 500 and m.max() <= 2000 and m.sum() == fed.records.shape[0]
    assert np.all((fed.records >= 0.0) & (fed.records <= 1.0))
    assert fed.i2[0] == 0.0 and fed.i2[-1] == pytest.approx(0.95)
    assert not fed.one_hot


def test_the_goal_federation_reaches_its_target_i2_on_average() -> None:
    """Cochran's Q of coordinate j has mean (n - 1)/(1 - I^2_j) when all m_i are equal
    (Higgins & Thompson's typical variance). Over 40 federations (seed 11) the mean of Q is
    within 4 standard errors of it on the lowest, a middle and the highest target."""
    n, m, d = 10, 200, 5
    qs = []
    for seed in range(40):
        rng = np.random.default_rng([11, seed])
        fed = bench.random_effects_federation(rng, n=n, m_range=(m, m), d=d, i2_range=(0.0, 0.8))
        x, ids = fed.records, fed.client_ids
        theta = np.stack([x[ids == i].mean(axis=0) for i in range(n)])
        v = np.stack([x[ids == i].var(axis=0, ddof=1) / m for i in range(n)])
        w = 1.0 / v
        mu = (w * theta).sum(axis=0) / w.sum(axis=0)
        qs.append((w * (theta - mu) ** 2).sum(axis=0))
    q = np.array(qs)
    target = (n - 1) / (1.0 - fed.i2)
    se = q.std(axis=0, ddof=1) / np.sqrt(q.shape[0])
    for j in (0, 2, 4):
        assert abs(q[:, j].mean() - target[j]) <= 4 * se[j], (j, q[:, j].mean(), target[j])


def test_the_digits_split_gives_every_silo_one_hot_records() -> None:
    fed = bench.digits_label_federation(np.random.default_rng(5))
    assert fed.one_hot and fed.n == 10 and fed.d == 10
    assert fed.records.shape[0] == 1797
    np.testing.assert_array_equal(fed.records.sum(axis=1), 1.0)
    assert fed.records_per_client.min() >= 20
    shares = np.stack([fed.records[fed.client_ids == i].mean(axis=0) for i in range(10)])
    # Dirichlet(0.5) skew: silos' label shares differ far more than sampling would make them
    assert shares.std(axis=0).mean() > 0.05


def test_a_small_run_prints_json(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--runs", "2", "--cases", "small", "--json"]
    bench.main([*args, "--silos", "6", "--dim", "4", "--m-range", "100:200"])
    doc = json.loads(capsys.readouterr().out)
    rows = {r["unit"]: r for r in doc["rows"]}
    assert set(rows) == {"client", "record"} and doc["runs"] == 2
    for row in rows.values():
        assert row["case"] == "small" and row["runs"] == 2 and 0.0 <= row["coverage"] <= 1.0
        assert set(row["predicted"]) == {"i2", "tau2", "pooled_mean", "random_effects_mean"}
        assert row["median"]["defined"] == 4 and row["n"] == 6
    # the record unit is far more accurate than the client unit on the same data
    assert rows["record"]["median"]["pooled_mean"] < rows["client"]["median"]["pooled_mean"]
    assert "figure" not in doc


@pytest.mark.slow
def test_the_figure_is_drawn(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    figure = tmp_path / "meta.png"
    args = ["--runs", "1", "--cases", "small", "--units", "record", "--json"]
    args += ["--silos", "4", "--dim", "3", "--m-range", "50:60", "--figure", str(figure)]
    args += ["--figure-runs", "1", "--figure-m", "50,100", "--figure-n", "4,6"]
    bench.main([*args, "--figure-d", "3", "--figure-points", "3"])
    doc = json.loads(capsys.readouterr().out)
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert set(doc["figure"]["data"]) == {"m/record", "n/record"}
    curve = doc["figure"]["data"]["m/record"]
    assert [p["m"] for p in curve["measured"]] == [50, 100] and len(curve["planned"]) == 3


def test_the_designs_run_side_by_side(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--runs", "1", "--cases", "small", "--json", "--designs", "secure-sums,silo-summaries"]
    bench.main([*args, "--silos", "5", "--dim", "3", "--m-range", "300:400"])
    doc = json.loads(capsys.readouterr().out)
    rows = [(r["unit"], r["design"], r["ran"]) for r in doc["rows"]]
    # the silo summaries need the record unit: no client-unit row of that design
    assert rows == [
        ("client", "secure-sums", ["secure-sums"]),
        ("record", "secure-sums", ["secure-sums"]),
        ("record", "silo-summaries", ["silo-summaries"]),
    ]
    with pytest.raises(SystemExit):
        bench.main(["--designs", "secure-sum"])  # a typo is refused before any work
    assert "unknown design 'secure-sum'" in capsys.readouterr().err


def test_the_table_names_what_auto_ran_and_marks_the_case_goals() -> None:
    row = bench.Row("many-small", "record", (200, 1000), 60, 16, "auto", ["secure-sums"])
    row.runs = [
        {"i2": 0.07, "tau2": 0.3, "pooled_mean": 0.005, "random_effects_mean": 0.002,
         "hits": 96.0, "intervals": 100.0}
    ]  # fmt: skip
    line = bench.table([row])[-1]
    assert "| auto (secure-sums) |" in line
    assert "0.070 ✗" in line and "0.50 % ✓" in line  # many-small: I^2 0.06, pooled 1 %
    assert "30.00 % |" in line  # no tau^2 goal for that case


def test_the_table_marks_the_goal() -> None:
    row = bench.Row("goal", "record", (5000, 20000), 20, 16)
    row.runs = [
        {"i2": 0.04, "tau2": 0.3, "pooled_mean": 0.001, "random_effects_mean": 0.002,
         "hits": 96.0, "intervals": 100.0}
    ]  # fmt: skip
    row.predicted = {"i2": 0.05, "tau2": 0.2, "pooled_mean": 0.001, "random_effects_mean": 0.002}
    line = bench.table([row])[-1]
    assert "0.040 (0.050) ✓" in line and "30.00 % (20.00 %) ✗" in line and "96.0 % ✓" in line
