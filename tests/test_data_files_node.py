"""The node's path of a data file with a header (issue 29): the run's columns from the scenario.

The analyst's scenario states ``[data] columns`` and public ``bounds``; a SuperNode with
``data-path`` reads those columns of its CSV by name, clips and scales them, and hands the
protocol ``(records, d)`` in ``[0, 1]``. A bad file stops the node with the public text only.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

import numpy as np
import pytest
from flwr.app import Context, RecordDict
from test_flower_helpers import run_config
from test_server_strategy import InMemoryTransport

from fa_hetdp.clients.app import load_vector, scenario_records
from fa_hetdp.config.rules import ConfigError
from fa_hetdp.config.scenario import load_scenario, scenario_from_dict
from fa_hetdp.data.check import DataCheckError
from fa_hetdp.flowerkit.settings import RunSettings
from fa_hetdp.server.strategy import HeterogeneityStrategy

DATA = """
[data]
dataset = "digits"
num_clients = {n}
columns = ["score", "age"]
bounds = {{ score = [0, 100], age = [18, 90] }}
"""
REST = """
[privacy]
epsilon = 1.0
delta = 1e-5
adaptive_floor = false
noise_shape = "uniform"
dispersion_center = "broadcast"
[secagg]
threshold = 0.6
[experiment]
seed = 3
"""


def _scenario(tmp_path: Path, n: int = 6) -> Path:
    path = tmp_path / "columns.toml"
    path.write_text('[scenario]\nname = "columns"\n' + DATA.format(n=n) + REST)
    return path


def _context(tmp_path: Path, data_path: Path) -> Context:
    return Context(
        run_id=1,
        node_id=7,
        node_config={"data-path": str(data_path)},
        state=RecordDict(),
        run_config=run_config(tmp_path, _scenario(tmp_path)),
    )


def test_the_node_reads_the_run_columns_of_its_csv(tmp_path: Path) -> None:
    path = tmp_path / "owner.csv"
    path.write_text("site_note,age,score\nx,41.5,73.125\ny,18,50\nz,90,120\n")
    records, labels = scenario_records(_context(tmp_path, path))
    assert labels is None
    expected = [[0.73125, (41.5 - 18) / 72], [0.5, 0.0], [1.0, 1.0]]
    np.testing.assert_allclose(records, expected)
    np.testing.assert_allclose(
        load_vector(
            str(path), columns=("score", "age"), bounds={"score": (0, 100), "age": (18, 90)}
        ),
        np.mean(expected, axis=0),
    )


def test_a_bad_file_stops_the_node_with_the_public_text_only(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "owner.csv"
    path.write_text("patient_secret,score\nx,73.125\n")
    with caplog.at_level(logging.ERROR, logger="fa_hetdp.data_owner"):
        with pytest.raises(DataCheckError) as info:
            scenario_records(_context(tmp_path, path))
    public = str(info.value)
    assert "lacks the run's column(s) 'age'" in public
    for leak in ("73.125", "patient_secret", str(path)):
        assert leak not in public
    assert "patient_secret" in caplog.text  # the detail stays in the node's own log


def test_the_coordinator_sees_the_kind_of_problem_only(tmp_path: Path) -> None:
    config = run_config(tmp_path, _scenario(tmp_path), mode="deployment", seed=-1)
    config["on-degraded"] = "release"
    settings = dataclasses.replace(RunSettings.from_run_config(config), threshold=2)
    transport = InMemoryTransport(6, config)
    rng = np.random.default_rng(0)
    for index, context in enumerate(transport.contexts.values()):
        path = tmp_path / f"owner-{index}.csv"
        rows = [f"r{j},{s:.3f},{a:.2f}" for j, (s, a) in enumerate(rng.random((4, 2)) * 80 + 10)]
        if index == 4:
            rows[2] = "patient_secret,73.125,nan"
        path.write_text("note,score,age\n" + "\n".join(rows) + "\n")
        context.node_config = {"data-path": str(path)}
    document = HeterogeneityStrategy(settings).run(transport)
    assert document["status"] == "success" and document["clients_in_sum"]["stage1"] == 5
    saved = json.loads((tmp_path / "result.json").read_text())
    (reason,) = saved["steps"][0]["dropouts"].values()
    assert "pre-flight check" in reason and "NaN" in reason
    text = " ".join(_strings(saved))
    for leak in ("73.125", "patient_secret", "line 4", "record 2", "owner-4"):
        assert leak not in text


# ------------------------------------------------------------------------------ the scenario
def _raw(**data: object) -> dict[str, object]:
    base: dict[str, object] = {"dataset": "digits", "num_clients": 4}
    return {"data": {**base, **data}, "privacy": {"epsilon": 1.0, "delta": 1e-5}}


def test_the_scenario_states_columns_and_bounds(tmp_path: Path) -> None:
    scenario = load_scenario(_scenario(tmp_path))
    assert scenario.data.columns == ("score", "age")
    assert scenario.data.column_bounds() == {"score": (0.0, 100.0), "age": (18.0, 90.0)}
    again = scenario_from_dict(scenario.to_dict())
    assert again.data == scenario.data
    plain = scenario_from_dict(_raw())
    assert plain.data.columns is None and plain.data.bounds == ()
    some = scenario_from_dict(_raw(columns=["flag", "score"], bounds={"score": [0, 100]}))
    assert some.data.column_bounds() == {"score": (0.0, 100.0)}


@pytest.mark.parametrize(
    ("data", "key", "words"),
    [
        ({"columns": ["age", "age"]}, "data.columns", "twice"),
        ({"columns": []}, "data.columns", "non-empty"),
        ({"columns": "age"}, "data.columns", "array"),
        ({"columns": ["age", ""]}, "data.columns", "non-empty string"),
        ({"columns": ["age"], "bounds": {"age": [90, 18]}}, "data.bounds.age", "low < high"),
        ({"columns": ["age"], "bounds": {"age": [5, 5]}}, "data.bounds.age", "low < high"),
        ({"columns": ["age"], "bounds": {"age": [0, float("inf")]}}, "data.bounds.age", "finite"),
        ({"columns": ["age"], "bounds": {"age": [float("nan"), 1]}}, "data.bounds.age", "finite"),
        ({"columns": ["age"], "bounds": {"age": [1]}}, "data.bounds.age", "pair"),
        ({"columns": ["age"], "bounds": {"age": ["a", "b"]}}, "data.bounds.age", "pair"),
        ({"columns": ["age"], "bounds": {"score": [0, 1]}}, "data.bounds.score", "no column"),
        ({"columns": ["age"], "bounds": [0, 1]}, "data.bounds", "table"),
        ({"bounds": {"age": [0, 1]}}, "data.bounds", "needs data.columns"),
    ],
)
def test_bad_columns_or_bounds_are_refused_before_the_run(
    data: dict[str, object], key: str, words: str
) -> None:
    with pytest.raises(ConfigError) as info:
        scenario_from_dict(_raw(**data))
    message = str(info.value)
    assert f"{key}:" in message and words in message, message


def _strings(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (str(k), *_strings(v))]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []
