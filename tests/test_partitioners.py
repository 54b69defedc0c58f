"""Tests of flwr-datasets partitioners in scenarios ([data] partitioner, data.partitioners).

The partition is flwr-datasets' own: the rows each client gets equal those of the same
flwr-datasets partitioner applied by hand to the same local ``datasets.Dataset`` with the same
seed. Bad settings are refused when the scenario loads, before any data is read.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import warnings
from typing import Any

import numpy as np
import pytest

from fa_hetdp.config.partition import (
    PARTITION_STREAM,
    clear_partition_cache,
    client_records,
    client_summary,
    partition_scenario,
    partitioner_seed,
    scenario_dataset,
)
from fa_hetdp.config.scenario import load_scenario, scenario_from_dict
from fa_hetdp.data.partitioners import PartitionerSpec
from fa_hetdp.data.summaries import summarise
from fa_hetdp.errors import ScenarioError

fp = pytest.importorskip("flwr_datasets.partitioner")
datasets = pytest.importorskip("datasets")


def _raw(n: int = 20, seed: int = 0, **data: Any) -> dict[str, Any]:
    return {
        "data": {"dataset": "digits", "num_clients": n, **data},
        "privacy": {"epsilon": 1.0, "delta": 1e-5},
        "experiment": {"seed": seed, "repeats": 1},
    }


@pytest.fixture(autouse=True)
def _fresh_cache() -> Any:
    clear_partition_cache()
    yield
    clear_partition_cache()


def _by_hand(partitioner: Any, labels: np.ndarray, n: int) -> list[list[int]]:
    """The rows flwr-datasets gives each partition of the local labels (row = position)."""
    partitioner.dataset = datasets.Dataset.from_dict(
        {"label": labels.tolist(), "row": list(range(labels.size))}
    )
    return [list(partitioner.load_partition(i)["row"]) for i in range(n)]


# --------------------------------------------------------------------------- it is flwr's


def test_dirichlet_partition_is_flwr_datasets_own() -> None:
    scenario = scenario_from_dict(_raw(20, partitioner="dirichlet", alpha=0.3))
    assert scenario.data.partitioner == PartitionerSpec("dirichlet", alpha=0.3)
    part = partition_scenario(scenario)
    labels = scenario_dataset(scenario).labels
    seed = partitioner_seed(0)
    expected = _by_hand(
        fp.DirichletPartitioner(
            num_partitions=20, partition_by="label", alpha=0.3, min_partition_size=10, seed=seed
        ),
        labels,
        20,
    )
    assert [part.client_rows(i).tolist() for i in range(20)] == expected
    assert part.method == "flwr-dirichlet"
    assert len(set(part.indices.tolist())) == part.indices.size  # no record twice
    assert part.sizes.min() >= 10 and part.sizes.max() > part.sizes.min()
    # Each client's vector is its summary of its own records, as a Flower client computes it.
    summary = client_summary(scenario)
    for i in (0, 7, 19):
        records, recs_labels = client_records(scenario, i, 20)
        assert records.shape[0] == part.sizes[i]
        np.testing.assert_array_equal(part.vectors[i], summarise(records, recs_labels, summary))


@pytest.mark.parametrize(
    ("data", "make"),
    [
        ({"partitioner": "iid"}, lambda s: fp.IidPartitioner(num_partitions=12)),
        (
            {"partitioner": "pathological", "num_classes_per_partition": 2},
            lambda s: fp.PathologicalPartitioner(
                num_partitions=12, partition_by="label", num_classes_per_partition=2, seed=s
            ),
        ),
        (
            {"partitioner": "shard", "num_shards_per_partition": 3, "shard_size": 40},
            lambda s: fp.ShardPartitioner(
                num_partitions=12,
                partition_by="label",
                num_shards_per_partition=3,
                shard_size=40,
                seed=s,
            ),
        ),
        (
            {"partitioner": "inner_dirichlet", "alpha": 0.5},
            lambda s: fp.InnerDirichletPartitioner(
                partition_sizes=[150] * 9 + [149] * 3, partition_by="label", alpha=0.5, seed=s
            ),
        ),
    ],
    ids=["iid", "pathological", "shard", "inner_dirichlet"],
)
def test_every_partitioner_is_flwr_datasets_own(data: dict[str, Any], make: Any) -> None:
    scenario = scenario_from_dict(_raw(12, seed=3, **data))
    with warnings.catch_warnings(record=True) as ours:
        warnings.simplefilter("always")  # pathological: flwr-datasets names labels it leaves out
        part = partition_scenario(scenario)
    labels = scenario_dataset(scenario).labels
    with warnings.catch_warnings(record=True) as theirs:
        warnings.simplefilter("always")
        expected = _by_hand(make(partitioner_seed(3)), labels, 12)
    assert [str(w.message) for w in ours] == [str(w.message) for w in theirs]
    assert [part.client_rows(i).tolist() for i in range(12)] == expected
    assert part.method == f"flwr-{data['partitioner']}"
    if data["partitioner"] == "pathological":
        assert all(np.unique(labels[part.client_rows(i)]).size <= 2 for i in range(12))
    if data["partitioner"] == "shard":
        assert part.sizes.tolist() == [120] * 12
    if data["partitioner"] == "inner_dirichlet":  # default: equal sizes over all 1797 digits
        assert part.sizes.tolist() == [150] * 9 + [149] * 3


def test_num_labels_restricts_the_records_and_the_seed_decides() -> None:
    raw = _raw(10, partitioner="pathological", num_classes_per_partition=1, num_labels=3)
    a = partition_scenario(scenario_from_dict(raw))
    labels = scenario_dataset(scenario_from_dict(raw)).labels
    assert set(labels[a.indices].tolist()) <= {0, 1, 2}
    assert a.indices.size == int((labels < 3).sum())  # every record of labels 0..2 is used
    clear_partition_cache()
    b = partition_scenario(scenario_from_dict(raw))
    np.testing.assert_array_equal(a.indices, b.indices)
    clear_partition_cache()
    raw["experiment"]["seed"] = 1
    c = partition_scenario(scenario_from_dict(raw))
    assert not np.array_equal(a.indices, c.indices)
    assert partitioner_seed(0) != partitioner_seed(1)
    assert partitioner_seed(0) == int(
        np.random.SeedSequence([0, PARTITION_STREAM, 1]).generate_state(1)[0]
    )


def test_round_trip_through_results_dict() -> None:
    scenario = scenario_from_dict(
        _raw(12, partitioner="shard", shard_size=30, keep_incomplete_shard=True)
    )
    again = scenario_from_dict(scenario.to_dict())
    assert again.data == scenario.data


def test_shipped_scenario_partitions_with_flwr() -> None:
    scenario = load_scenario("digits/digits-flwr-dirichlet")
    assert scenario.data.partitioner is not None
    part = partition_scenario(scenario)
    assert part.num_clients == scenario.num_clients
    assert part.method == "flwr-dirichlet"


# --------------------------------------------------------------------------- refused at load


@pytest.mark.parametrize(
    ("data", "key", "words"),
    [
        ({"partitioner": "random"}, "data.partitioner", "allowed"),
        ({"partitioner": "dirichlet"}, "data.alpha", "required"),
        ({"partitioner": "iid", "alpha": 0.3}, "data.alpha", "only with"),
        ({"partitioner": "dirichlet", "alpha": -1.0}, "data.alpha", "> 0"),
        ({"partitioner": "pathological"}, "data.num_classes_per_partition", "required"),
        (
            {"partitioner": "pathological", "num_classes_per_partition": 11},
            "data.num_classes_per_partition",
            "<= 10",
        ),
        (
            {
                "partitioner": "pathological",
                "num_classes_per_partition": 2,
                "class_assignment_mode": "x",
            },
            "data.class_assignment_mode",
            "allowed",
        ),
        ({"partitioner": "shard"}, "data.shard_size", "required"),
        (
            {"partitioner": "shard", "num_shards_per_partition": 10, "shard_size": 10},
            "data.num_clients",
            "records",
        ),
        (
            {"partitioner": "inner_dirichlet", "alpha": 1.0, "partition_sizes": [5, 5]},
            "data.partition_sizes",
            "one size per client",
        ),
        (
            {"partitioner": "inner_dirichlet", "alpha": 1.0, "partition_sizes": [2000] * 20},
            "data.partition_sizes",
            "records",
        ),
        (
            {"partitioner": "dirichlet", "alpha": 1.0, "min_partition_size": 100},
            "data.min_partition_size",
            "records",
        ),
        ({"partitioner": "iid", "dirichlet_alpha": 0.3}, "data.partitioner", "not both"),
        ({"partitioner": "iid", "label_ratios": [1, 1]}, "data.partitioner", "not both"),
        ({"partitioner": "iid", "records_per_client": 3}, "data.records_per_client", "partitioner"),
        ({"partitioner": "iid", "self_balancing": True}, "data.self_balancing", "only with"),
    ],
)
def test_bad_partitioner_settings_are_refused_at_load(
    data: dict[str, Any], key: str, words: str
) -> None:
    with pytest.raises(ScenarioError) as info:
        scenario_from_dict(_raw(20, **data))
    lines = [line for line in str(info.value).splitlines() if key in line]
    assert lines, str(info.value)
    assert any(words in line for line in lines), str(info.value)


def test_more_clients_than_records_is_refused_at_load() -> None:
    with pytest.raises(ScenarioError, match=r"data\.num_clients.*records"):
        scenario_from_dict(_raw(400, partitioner="iid", num_labels=2))


def test_missing_flwr_datasets_is_named_at_load(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, *args: Any) -> Any:
        return None if name == "flwr_datasets" else real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    with pytest.raises(ScenarioError, match=r"fa-hetdp\[partitioners\]"):
        scenario_from_dict(_raw(20, partitioner="iid"))


# --------------------------------------------------------------------------- no network


NO_NETWORK = """
import socket
attempts = []
def refuse(*args, **kwargs):
    attempts.append(args[1:2] or args[:1])
    raise OSError("network refused by the test")
socket.socket.connect = refuse
socket.socket.connect_ex = refuse
socket.getaddrinfo = refuse
socket.create_connection = refuse
import flwr_datasets  # import time
from fa_hetdp.config.partition import partition_scenario
from fa_hetdp.config.scenario import scenario_from_dict
s = scenario_from_dict({"data": {"dataset": "digits", "num_clients": 10,
    "partitioner": "dirichlet", "alpha": 0.5}, "privacy": {"epsilon": 1.0, "delta": 1e-5}})
p = partition_scenario(s)
assert p.num_clients == 10, p.num_clients
print("attempts", attempts)
"""


@pytest.mark.slow  # a fresh interpreter imports flwr-datasets (2.5-5 s)
def test_flwr_datasets_partitions_without_the_network() -> None:
    env = {
        k: v
        for k, v in os.environ.items()
        if k.lower() not in {"http_proxy", "https_proxy", "all_proxy", "no_proxy"}
    }
    env["HF_DATASETS_OFFLINE"] = "1"
    env["HF_HUB_OFFLINE"] = "1"
    out = subprocess.run(
        [sys.executable, "-c", NO_NETWORK], capture_output=True, text=True, env=env, check=False
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "attempts []" in out.stdout
