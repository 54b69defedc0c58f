"""Tests of fa_hetdp.data.summaries: pooled means, label histograms, shapes, validation.

Also the summary through every entry point: the scenario file (validation by the one rule set),
the partition (simulation and ``fa-hetdp run``), and the Flower client's own computation.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fa_hetdp.config.partition import (
    client_records,
    client_summary,
    partition_scenario,
)
from fa_hetdp.config.rules import CROSS_RULES
from fa_hetdp.config.scenario import load_scenario, scenario_from_dict
from fa_hetdp.data.catalog import load_dataset
from fa_hetdp.data.sampling import sample_uniform
from fa_hetdp.data.summaries import (
    ClientSummary,
    label_histogram,
    pool_blocks,
    pooled_shape,
    summarise,
    summarise_mean,
)
from fa_hetdp.errors import DatasetError, InputDataError, ScenarioError

# ---------------------------------------------------------------------------------------------
# The summaries themselves
# ---------------------------------------------------------------------------------------------


def test_pool_blocks_of_a_4x4_image_by_hand() -> None:
    image = np.arange(16, dtype=np.float64) / 16.0  # row-major 4 x 4: value = (4 r + c) / 16
    pooled = pool_blocks(image, (1, 4, 4), 2)
    # block (0, 0) holds 0, 1, 4, 5 -> 2.5 / 16; (0, 1): 2, 3, 6, 7 -> 4.5 / 16; ...
    np.testing.assert_allclose(pooled, np.array([2.5, 4.5, 10.5, 12.5]) / 16.0, rtol=0, atol=1e-15)


def test_pool_blocks_keeps_channels_apart_and_their_order() -> None:
    # Channel-major (3, 4, 4), as CIFAR is stored: channel c is constant c / 2.
    x = np.repeat(np.array([0.0, 0.5, 1.0]), 16)
    pooled = pool_blocks(x, (3, 4, 4), 2)
    np.testing.assert_array_equal(pooled, np.repeat([0.0, 0.5, 1.0], 4))
    assert pool_blocks(np.zeros((5, 7, 3072)), (3, 32, 32), 4).shape == (5, 7, 192)


def test_pool_blocks_of_a_row_without_image_shape_averages_runs() -> None:
    x = np.array([0.0, 1.0, 0.2, 0.4, 1.0, 1.0])
    np.testing.assert_allclose(pool_blocks(x, (1, 1, 6), 2), [0.5, 0.3, 1.0], atol=1e-15)
    np.testing.assert_allclose(pool_blocks(x, (1, 1, 6), 3), [0.4, 0.8], atol=1e-15)


def test_pooled_shapes_and_refused_blocks() -> None:
    assert pooled_shape((1, 8, 8), 2) == (1, 4, 4)
    assert pooled_shape((3, 32, 32), 8) == (3, 4, 4)
    assert pooled_shape((1, 1, 64), 4) == (1, 1, 16)
    with pytest.raises(DatasetError, match=r"does not divide .* 8 x 8; allowed: 1, 2, 4, 8"):
        pooled_shape((1, 8, 8), 3)
    with pytest.raises(DatasetError, match="must be >= 1, got 0"):
        pooled_shape((1, 8, 8), 0)
    with pytest.raises(DatasetError, match="dimension 63 do not have the image shape"):
        pool_blocks(np.zeros(63), (1, 8, 8), 2)


def test_label_histogram_by_hand() -> None:
    labels = np.array([[0, 0, 2, 1], [3, 3, 3, 3]])
    np.testing.assert_array_equal(
        label_histogram(labels, 4), [[0.5, 0.25, 0.25, 0.0], [0.0, 0.0, 0.0, 1.0]]
    )
    with pytest.raises(DatasetError, match=r"labels must lie in 0\.\.2, got 0\.\.3"):
        label_histogram(labels, 3)
    with pytest.raises(DatasetError, match="at least one record"):
        label_histogram(np.zeros((2, 0), dtype=np.int64), 3)


def test_summarise_shapes_range_and_linearity() -> None:
    rng = np.random.default_rng(7)
    records = rng.uniform(size=(6, 5, 64))  # 6 clients x 5 records, 8 x 8 images
    labels = rng.integers(0, 10, size=(6, 5))
    kinds: dict[str, int] = {"mean": 64, "pooled": 16, "label-histogram": 10}
    for kind, dim in kinds.items():
        spec = ClientSummary(kind, (1, 8, 8), 10, 2)  # type: ignore[arg-type]
        out = summarise(records, labels, spec)
        assert out.shape == (6, dim) and spec.dim == dim
        assert out.min() >= 0.0 and out.max() <= 1.0
    pooled = ClientSummary("pooled", (1, 8, 8), 10, 2)
    # Pooling is linear: the pooled mean equals the mean of the pooled records.
    np.testing.assert_allclose(
        summarise(records, labels, pooled),
        pool_blocks(records, (1, 8, 8), 2).mean(axis=1),
        rtol=0,
        atol=1e-15,
    )
    np.testing.assert_allclose(
        summarise_mean(records.mean(axis=1), pooled), summarise(records, labels, pooled)
    )
    with pytest.raises(InputDataError, match="needs each record's label"):
        summarise_mean(records.mean(axis=1), ClientSummary("label-histogram", (1, 8, 8), 10))
    with pytest.raises(DatasetError, match=r"shape \(\.\.\., r, 64\)"):
        summarise(records[..., :63], labels, pooled)
    with pytest.raises(DatasetError, match="does not divide"):
        ClientSummary("pooled", (1, 8, 8), 10, 3)


# ---------------------------------------------------------------------------------------------
# Scenarios: validation by the declared rules
# ---------------------------------------------------------------------------------------------

BASE: dict[str, Any] = {
    "data": {"dataset": "digits", "num_clients": 50, "records_per_client": 4},
    "privacy": {"epsilon": 1.0, "delta": 1e-5},
}


def _with(**data: Any) -> dict[str, Any]:
    raw = copy.deepcopy(BASE)
    raw["data"].update(data)
    return raw


def _problems(raw: dict[str, Any]) -> str:
    with pytest.raises(ScenarioError) as info:
        scenario_from_dict(raw)
    return str(info.value)


def test_the_pool_block_rules_are_declared_once() -> None:
    names = {rule.name for rule in CROSS_RULES}
    assert {"pool-block-pooled-only", "pool-block-fits"} <= names


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"summary": "median"}, "data.summary: unknown value 'median'; allowed: mean, pooled"),
        ({"summary": 3}, "data.summary: must be a string"),
        ({"summary": "pooled", "pool_block": 3}, "data.pool_block: pool block 3 does not divide"),
        ({"summary": "pooled", "pool_block": 0}, "data.pool_block: must be >= 1, got 0"),
        ({"summary": "pooled", "pool_block": 2.0}, "data.pool_block: must be an integer"),
        ({"pool_block": 2}, "data.pool_block: pool_block=2 is only used with summary = 'pooled'"),
        ({"summary": "label-histogram", "pool_block": 4}, "only used with summary = 'pooled'"),
    ],
)
def test_bad_summaries_are_refused_with_their_key(data: dict[str, Any], expected: str) -> None:
    assert expected in _problems(_with(**data))


def test_synthetic_pool_block_is_checked_against_its_dim() -> None:
    raw = _with(
        dataset="synthetic",
        synthetic={"size": 400, "dim": 30, "num_labels": 4},
        summary="pooled",
        pool_block=4,
    )
    assert "1 x 30; allowed: 1, 2, 3, 5, 6, 10, 15, 30" in _problems(raw)
    raw["data"]["pool_block"] = 5
    assert scenario_from_dict(raw).data.pool_block == 5


def test_summary_round_trips_and_defaults() -> None:
    plain = scenario_from_dict(BASE)
    assert plain.data.summary == "mean" and plain.data.pool_block is None
    assert "summary" not in plain.to_dict()["data"]
    pooled = scenario_from_dict(_with(summary="pooled"))
    assert pooled.data.pool_block == 2  # the default block
    assert scenario_from_dict(pooled.to_dict()) == pooled
    hist = scenario_from_dict(_with(summary="label-histogram"))
    assert scenario_from_dict(hist.to_dict()) == hist


# ---------------------------------------------------------------------------------------------
# The partition (simulation, fa-hetdp run) and the Flower client
# ---------------------------------------------------------------------------------------------


def test_partition_vectors_are_the_pooled_means_of_each_clients_records() -> None:
    scenario = scenario_from_dict(_with(summary="pooled", pool_block=4))
    part = partition_scenario(scenario)
    assert part.vectors.shape == (50, 4) and part.summary == "pooled"
    digits = load_dataset("digits")
    images = digits.rows(part.indices).reshape(50, 4, 2, 4, 2, 4)  # (n, r, 8, 8) in 4x4 blocks
    expected = images.mean(axis=(1, 3, 5)).reshape(50, 4)
    np.testing.assert_allclose(part.vectors, expected, rtol=0, atol=1e-14)


def test_partition_vectors_are_the_label_histograms_of_the_records() -> None:
    scenario = scenario_from_dict(_with(summary="label-histogram", num_labels=5))
    part = partition_scenario(scenario)
    assert part.vectors.shape == (50, 5)  # one entry per label used
    counts = np.stack([np.bincount(row, minlength=5) for row in part.record_labels])
    np.testing.assert_array_equal(part.vectors, counts / 4.0)
    np.testing.assert_allclose(part.vectors.sum(axis=1), 1.0)


def test_the_flower_clients_own_summary_equals_its_partition_row() -> None:
    for name in ("digits/digits-histogram", "digits/digits-pooled"):
        scenario = load_scenario(name)
        vectors = partition_scenario(scenario).vectors
        spec = client_summary(scenario)
        for pid in (0, 17, scenario.num_clients - 1):
            records, labels = client_records(scenario, pid, scenario.num_clients)
            assert records.shape == (12, 64) and labels.shape == (12,)
            np.testing.assert_array_equal(summarise(records, labels, spec), vectors[pid])


def test_sampler_default_is_the_mean_of_records() -> None:
    digits = load_dataset("digits")
    part = sample_uniform(
        digits, num_clients=10, records_per_client=3, rng=np.random.default_rng(1)
    )
    np.testing.assert_allclose(part.vectors, digits.rows(part.indices).mean(axis=1), atol=1e-15)


def test_shipped_summary_scenarios() -> None:
    hist = load_scenario("digits/digits-histogram")
    pooled = load_scenario("digits/digits-pooled")
    assert (hist.data.summary, client_summary(hist).dim) == ("label-histogram", 10)
    assert (pooled.data.summary, client_summary(pooled).dim) == ("pooled", 16)


def _advertise(tmp_path: Path, summary: str, node_config: dict[str, Any]) -> tuple[Any, Any]:
    """Run the ClientApp's advertise_keys handler for a 4-client digits scenario."""
    from flwr.app import Context, Message, RecordDict
    from flwr.supercore.task_identity import TaskIdentity
    from test_flower_helpers import run_config

    from fa_hetdp.clients.app import advertise_keys
    from fa_hetdp.flowerkit.steps import Key, State
    from fa_hetdp.flowerkit.wire import decode, encode
    from fa_hetdp.secagg import SecAggServer

    path = tmp_path / f"{summary}.toml"
    block = "pool_block = 2\n" if summary == "pooled" else ""
    path.write_text(
        '[data]\ndataset = "digits"\nnum_clients = 4\nrecords_per_client = 3\n'
        f'summary = "{summary}"\n{block}[privacy]\nepsilon = 1.0\ndelta = 1e-5\n'
        "[secagg]\nthreshold = 0.6\n"
    )
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 0, 0
    server = SecAggServer(range(4), threshold=2, num_summations=2, rng=np.random.default_rng(0))
    context = Context(
        run_id=1,
        node_id=1,
        node_config={"allow-seeded-noise": True, **node_config},  # in process: seeded noise
        state=RecordDict(),
        run_config=dict(run_config(tmp_path, path)),
    )
    message = Message(
        content=encode({Key.CLIENT_ID: 2, Key.SETUP: server.setup_messages()[2]}),
        dst_node_id=1,
        message_type="query.advertise_keys",
        group_id="advertise_keys",
    )
    reply = decode(advertise_keys(message, context).content)
    return reply[Key.D], context.state[State.LOCAL][State.X].numpy()


@pytest.mark.parametrize(("summary", "dim"), [("pooled", 16), ("label-histogram", 10)])
def test_the_flower_client_reports_its_own_summary(tmp_path: Path, summary: str, dim: int) -> None:
    d, x = _advertise(tmp_path, summary, {"partition-id": 2, "num-partitions": 4})
    assert d == dim
    expected = partition_scenario(load_scenario(tmp_path / f"{summary}.toml")).vectors[2]
    np.testing.assert_array_equal(x, expected)


def test_a_data_owners_file_is_pooled_and_a_histogram_is_refused(tmp_path: Path) -> None:
    records = np.random.default_rng(5).uniform(size=(3, 64))
    np.save(tmp_path / "x.npy", records)
    d, x = _advertise(tmp_path, "pooled", {"data-path": str(tmp_path / "x.npy")})
    assert d == 16
    np.testing.assert_allclose(x, pool_blocks(records.mean(axis=0), (1, 8, 8), 2), atol=1e-15)
    with pytest.raises(InputDataError, match="needs each record's label"):
        _advertise(tmp_path, "label-histogram", {"data-path": str(tmp_path / "x.npy")})


def test_the_python_example_in_docs_summaries_runs() -> None:
    import re

    text = (Path(__file__).parents[1] / "docs" / "summaries.md").read_text(encoding="utf-8")
    (code,) = re.findall(r"```python\n(.*?)```", text, re.S)
    namespace: dict[str, Any] = {}
    exec(compile(code, "docs/summaries.md", "exec"), namespace)
    assert namespace["pooled"].shape == (500, 16) and namespace["hist"].shape == (500, 10)
    np.testing.assert_allclose(namespace["hist"].sum(axis=1), 1.0)
    assert namespace["res"].mean.shape == (16,)
