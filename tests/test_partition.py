"""Tests of fa_hetdp.config.partition: label skew, Dirichlet and uniform samples, client vectors."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fa_hetdp.config.partition import (
    clear_partition_cache,
    client_vector,
    partition_rng,
    partition_scenario,
    scenario_dataset,
)
from fa_hetdp.config.scenario import load_scenario, scenario_from_dict
from fa_hetdp.config.schema import Scenario
from fa_hetdp.data.catalog import load_dataset
from fa_hetdp.data.dataset import Dataset
from fa_hetdp.data.sampling import (
    clients_per_label,
    sample_dirichlet,
    sample_label_skew,
    sample_uniform,
)
from fa_hetdp.data.synthetic import synthetic_dataset
from fa_hetdp.errors import DatasetError, ScenarioError


def _unique_dataset(per_label: int = 50, num_labels: int = 10, d: int = 6) -> Dataset:
    """Every record distinct (row i encodes i), labels in file order 0,0,..,1,1,.."""
    n = per_label * num_labels
    raw = np.zeros((n, d), dtype=np.float64)
    raw[:, 0] = np.arange(n) / n
    raw[:, 1:] = np.random.default_rng(0).uniform(size=(n, d - 1))
    labels = np.repeat(np.arange(num_labels), per_label).astype(np.int64)
    return Dataset("unique", raw, 1.0, labels, num_labels, "unique test data")


# ---------------------------------------------------------------------------------------------
# Largest-remainder rounding
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "ratios", "expected"),
    [
        (1000, [91] + [1] * 9, [910] + [10] * 9),  # the paper's SH level, exact
        (1200, [96, 1, 1, 1, 1], [1152, 12, 12, 12, 12]),
        (1000, [99, 1], [990, 10]),
        (7, [1, 1, 1], [3, 2, 2]),  # tie: lower label first
        (10, [91] + [1] * 9, [9, 1, 0, 0, 0, 0, 0, 0, 0, 0]),  # quotas 9.1, 0.1 x 9
        (5, [2.5, 2.5], [3, 2]),
        (0, [1, 1], [0, 0]),
        (4, [0, 1, 3], [0, 1, 3]),
    ],
)
def test_clients_per_label_examples(n: int, ratios: list[float], expected: list[int]) -> None:
    assert clients_per_label(n, ratios).tolist() == expected


@given(
    n=st.integers(min_value=0, max_value=100_000),
    ratios=st.lists(st.integers(min_value=0, max_value=1000), min_size=1, max_size=20).filter(
        lambda r: sum(r) > 0
    ),
)
def test_clients_per_label_properties(n: int, ratios: list[int]) -> None:
    counts = clients_per_label(n, ratios)
    quotas = n * np.asarray(ratios, dtype=float) / sum(ratios)
    assert counts.sum() == n
    assert np.all(np.abs(counts - quotas) < 1.0)
    assert np.all(counts[np.asarray(ratios) == 0] == 0)


@given(
    n=st.integers(min_value=0, max_value=5000),
    ratios=st.lists(st.integers(min_value=0, max_value=100), min_size=1, max_size=10).filter(
        lambda r: sum(r) > 0
    ),
)
def test_scenario_validation_uses_the_same_rounding(n: int, ratios: list[int]) -> None:
    # Scenario validation (sample size) re-implements the rule without numpy; they must agree.
    from fa_hetdp.config.schema import largest_remainder as _largest_remainder

    assert list(_largest_remainder(n, ratios)) == clients_per_label(n, ratios).tolist()


@pytest.mark.parametrize("ratios", [[], [-1, 2], [0, 0], [1, float("nan")]])
def test_clients_per_label_rejects(ratios: list[float]) -> None:
    with pytest.raises(ScenarioError, match="label ratios"):
        clients_per_label(10, ratios)


# ---------------------------------------------------------------------------------------------
# Label skew
# ---------------------------------------------------------------------------------------------


def test_label_skew_counts_distinct_random_records() -> None:
    ds = _unique_dataset(per_label=200)
    part = sample_label_skew(
        ds, num_clients=100, label_ratios=[91] + [1] * 9, rng=np.random.default_rng(1)
    )
    assert part.vectors.shape == (100, 6)
    assert part.label_counts().tolist() == [91] + [1] * 9
    # Distinct records and distinct vectors (the authors' code gave every client one image).
    assert len(np.unique(part.indices)) == 100
    assert len(np.unique(part.vectors, axis=0)) == 100
    np.testing.assert_array_equal(part.record_labels[:, 0], part.labels)
    np.testing.assert_array_equal(ds.labels[part.indices[:, 0]], part.labels)
    np.testing.assert_array_equal(part.vectors, ds.rows(part.indices[:, 0]))
    # Random within each label, not the first images in file order.
    label0 = np.sort(part.indices[part.labels == 0, 0])
    assert not np.array_equal(label0, np.arange(91))
    # Client order is shuffled, not grouped by label.
    assert not np.array_equal(part.labels, np.sort(part.labels))


def test_label_skew_uses_first_k_labels() -> None:
    ds = _unique_dataset()
    part = sample_label_skew(ds, num_clients=40, label_ratios=[1, 1], rng=np.random.default_rng(0))
    assert set(part.labels.tolist()) == {0, 1}
    assert part.label_counts()[:2].tolist() == [20, 20]


def test_label_skew_records_per_client_mean() -> None:
    ds = _unique_dataset()
    part = sample_label_skew(
        ds,
        num_clients=20,
        label_ratios=[1] * 10,
        records_per_client=3,
        rng=np.random.default_rng(2),
    )
    assert part.indices.shape == (20, 3) and part.records_per_client == 3
    assert len(np.unique(part.indices)) == 60
    np.testing.assert_allclose(part.vectors, ds.rows(part.indices).mean(axis=1), rtol=0, atol=1e-15)
    # Every record of a client has the client's label.
    np.testing.assert_array_equal(part.record_labels, np.repeat(part.labels[:, None], 3, axis=1))


def test_label_skew_deterministic_in_seed() -> None:
    ds = _unique_dataset()
    kwargs: dict[str, Any] = {"num_clients": 30, "label_ratios": [1] * 10}
    a = sample_label_skew(ds, rng=np.random.default_rng(5), **kwargs)
    b = sample_label_skew(ds, rng=np.random.default_rng(5), **kwargs)
    c = sample_label_skew(ds, rng=np.random.default_rng(6), **kwargs)
    np.testing.assert_array_equal(a.indices, b.indices)
    assert not np.array_equal(a.indices, c.indices)


def test_label_skew_sample_larger_than_label() -> None:
    ds = _unique_dataset(per_label=50)
    with pytest.raises(DatasetError, match=r"label 0 needs 99 images \(99 clients x 1 records\)"):
        sample_label_skew(ds, num_clients=100, label_ratios=[99, 1], rng=np.random.default_rng(0))
    with pytest.raises(DatasetError, match="has 50"):
        sample_label_skew(
            ds, num_clients=10, label_ratios=[1], records_per_client=6, rng=np.random.default_rng(0)
        )


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"num_clients": 0, "label_ratios": [1]}, "num_clients must be >= 1"),
        ({"num_clients": 5, "label_ratios": [1], "records_per_client": 0}, "records_per_client"),
        ({"num_clients": 5, "label_ratios": [1] * 11}, "11 entries but dataset"),
    ],
)
def test_label_skew_rejects(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ScenarioError, match=match):
        sample_label_skew(_unique_dataset(), rng=np.random.default_rng(0), **kwargs)


# ---------------------------------------------------------------------------------------------
# Dirichlet and uniform
# ---------------------------------------------------------------------------------------------


def _majority_share(alpha: float) -> float:
    ds = _unique_dataset(per_label=400)
    part = sample_dirichlet(
        ds, num_clients=100, alpha=alpha, records_per_client=10, rng=np.random.default_rng(4)
    )
    assert len(np.unique(part.indices)) == 1000
    np.testing.assert_array_equal(ds.labels[part.indices], part.record_labels)
    share = (part.record_labels == part.labels[:, None]).mean()
    return float(share)


def test_dirichlet_alpha_controls_skew() -> None:
    # Fixed seed. alpha = 0.05: one label dominates (E share ~0.9); alpha = 100: near uniform
    # mixtures, so the majority of 10 records holds ~2-3 of them (share ~0.25).
    assert _majority_share(0.05) > 0.8
    assert _majority_share(100.0) < 0.4


def test_dirichlet_vectors_are_record_means() -> None:
    ds = _unique_dataset()
    part = sample_dirichlet(
        ds,
        num_clients=10,
        alpha=0.5,
        num_labels=3,
        records_per_client=4,
        rng=np.random.default_rng(0),
    )
    assert part.method == "dirichlet"
    assert part.record_labels.max() <= 2
    np.testing.assert_allclose(part.vectors, ds.rows(part.indices).mean(axis=1), atol=1e-15)


def test_dirichlet_rejects() -> None:
    ds = _unique_dataset(per_label=5)
    with pytest.raises(ScenarioError, match="alpha must be > 0"):
        sample_dirichlet(ds, num_clients=2, alpha=0.0, rng=np.random.default_rng(0))
    with pytest.raises(DatasetError, match=r"needs \d+ images of label"):
        sample_dirichlet(
            ds, num_clients=40, alpha=0.01, records_per_client=1, rng=np.random.default_rng(0)
        )
    with pytest.raises(ScenarioError, match=r"num_labels must be in 1\.\.10"):
        sample_dirichlet(ds, num_clients=2, alpha=1.0, num_labels=11, rng=np.random.default_rng(0))


def test_uniform_sample() -> None:
    ds = _unique_dataset(per_label=10)
    part = sample_uniform(ds, num_clients=30, num_labels=3, rng=np.random.default_rng(0))
    assert part.method == "uniform"
    assert len(np.unique(part.indices)) == 30  # all 30 records of labels 0..2
    assert part.label_counts()[:3].tolist() == [10, 10, 10]
    with pytest.raises(DatasetError, match="need 31 images"):
        sample_uniform(ds, num_clients=31, num_labels=3, rng=np.random.default_rng(0))


def test_partition_arrays_read_only() -> None:
    part = sample_uniform(_unique_dataset(), num_clients=5, rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="read-only"):
        part.vectors[0, 0] = 1.0


# ---------------------------------------------------------------------------------------------
# Scenarios and client vectors
# ---------------------------------------------------------------------------------------------


def _scenario(**data: Any) -> Scenario:
    raw = {
        "data": {"dataset": "digits", "num_clients": 20, **data},
        "privacy": {"epsilon": 1.0, "delta": 1e-5},
        "experiment": {"seed": 3},
    }
    return scenario_from_dict(raw, name="t")


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("digits/digits-skew10", [91] + [1] * 9),
        ("digits/digits-skew5", [96, 1, 1, 1, 1, 0, 0, 0, 0, 0]),
        ("digits/digits-iid2", [50, 50] + [0] * 8),
        ("quickstart", [10] * 10),
    ],
)
def test_shipped_digits_scenarios_partition(name: str, expected: list[int]) -> None:
    scenario = load_scenario(name)
    part = partition_scenario(scenario)
    assert part.vectors.shape == (100, 64)
    assert part.label_counts().tolist() == expected
    assert len(np.unique(part.indices)) == 100
    assert 0.0 <= part.vectors.min() and part.vectors.max() <= 1.0


def test_shipped_dirichlet_scenario_partitions() -> None:
    part = partition_scenario(load_scenario("digits/digits-dirichlet"))
    assert part.indices.shape == (100, 5)
    assert len(np.unique(part.indices)) == 500


def test_partition_scenario_deterministic_and_seeded() -> None:
    a = partition_scenario(_scenario(label_ratios=[1] * 10))
    clear_partition_cache()
    b = partition_scenario(_scenario(label_ratios=[1] * 10))
    assert a is not b
    np.testing.assert_array_equal(a.indices, b.indices)
    rng = partition_rng(3)
    direct = sample_label_skew(
        load_dataset("digits"), num_clients=20, label_ratios=[1] * 10, rng=rng
    )
    np.testing.assert_array_equal(a.indices, direct.indices)
    other = scenario_from_dict(
        {
            "data": {"dataset": "digits", "num_clients": 20, "label_ratios": [1] * 10},
            "privacy": {"epsilon": 1.0, "delta": 1e-5},
            "experiment": {"seed": 4},
        }
    )
    assert not np.array_equal(partition_scenario(other).indices, a.indices)


def test_partition_scenario_methods() -> None:
    assert partition_scenario(_scenario()).method == "uniform"
    assert partition_scenario(_scenario(num_labels=2)).labels.max() <= 1
    dirichlet = partition_scenario(_scenario(dirichlet_alpha=0.5, records_per_client=2))
    assert dirichlet.method == "dirichlet" and dirichlet.indices.shape == (20, 2)


def test_synthetic_scenario_dataset() -> None:
    scenario = scenario_from_dict(
        {
            "data": {
                "dataset": "synthetic",
                "num_clients": 40,
                "label_ratios": [3, 1],
                "synthetic": {"size": 100, "dim": 16, "num_labels": 2, "heterogeneity": 1.0},
            },
            "privacy": {"epsilon": 1.0, "delta": 1e-5},
        }
    )
    ds = scenario_dataset(scenario)
    assert (ds.size, ds.dim, ds.num_labels) == (100, 16, 2)
    part = partition_scenario(scenario)
    assert part.label_counts().tolist() == [30, 10]


def test_client_vector_is_its_row() -> None:
    scenario = _scenario(label_ratios=[1] * 10)
    part = partition_scenario(scenario)
    for pid in (0, 7, 19):
        x = client_vector(scenario, pid, 20)
        np.testing.assert_array_equal(x, part.vectors[pid])
        x[0] = -1.0  # a copy: the cached partition is untouched
    assert part.vectors.min() >= 0.0


@pytest.mark.parametrize(
    ("pid", "num", "match"),
    [(20, 20, r"0\.\.19, got 20"), (-1, 20, r"got -1"), (0, 0, r"num_partitions must be >= 1")],
)
def test_client_vector_rejects(pid: int, num: int, match: str) -> None:
    with pytest.raises(ScenarioError, match=match):
        client_vector(_scenario(label_ratios=[1] * 10), pid, num)


def test_client_vector_other_federation_size() -> None:
    # A run config may override the client count: the same rule samples that many clients.
    scenario = _scenario(label_ratios=[1] * 10)
    small = partition_scenario(scenario, 10)
    assert small.num_clients == 10 and small.label_counts().tolist() == [1] * 10
    np.testing.assert_array_equal(client_vector(scenario, 9, 10), small.vectors[9])
    with pytest.raises(DatasetError, match="label 0 needs 179 images"):
        client_vector(scenario, 0, 1790)
    with pytest.raises(ScenarioError, match="num_clients must be >= 1"):
        partition_scenario(scenario, 0)


def test_client_vector_same_in_another_process() -> None:
    # Flower client processes each compute the partition; they must agree.
    code = (
        "from fa_hetdp.config.scenario import load_scenario\n"
        "from fa_hetdp.config.partition import client_vector\n"
        "print(client_vector(load_scenario('digits/digits-skew10'), 42, 100).tobytes().hex())\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    ).stdout.strip()
    here = client_vector(load_scenario("digits/digits-skew10"), 42, 100)
    assert bytes.fromhex(out) == here.tobytes()


def test_synthetic_helper_used_for_large_partition() -> None:
    ds = synthetic_dataset(3000, 3072, 10, 0.5, rng=np.random.default_rng(0))
    part = sample_label_skew(
        ds, num_clients=3000, label_ratios=[1] * 10, rng=np.random.default_rng(0)
    )
    assert part.vectors.shape == (3000, 3072)
    assert len(np.unique(part.indices)) == 3000
