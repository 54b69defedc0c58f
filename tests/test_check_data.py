"""A data owner's pre-flight check: ``fa-hetdp check-data PATH`` and the ClientApp's use of it."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from test_flower_helpers import run_config, scenario_file
from test_server_strategy import InMemoryTransport

from fa_hetdp.cli.check_data import DataCheckError, inspect_data, load_checked
from fa_hetdp.cli.main import main
from fa_hetdp.flowerkit.settings import RunSettings
from fa_hetdp.server.strategy import HeterogeneityStrategy

# Values an owner would not want to leave its node: found in no public text.
SECRET = 0.7137
OUTSIDE = 7.25


def bad_table() -> np.ndarray:
    table = np.full((4, 16), SECRET)
    table[2, 5] = np.nan
    table[3, 11] = OUTSIDE
    return table


def test_a_good_file_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "x.npy"
    np.save(path, np.linspace(0.0, 1.0, 32).reshape(2, 16))
    assert main(["check-data", str(path), "--dim", "16"]) == 0
    out = capsys.readouterr().out
    assert str(path) in out and "2 record(s), d=16" in out
    np.testing.assert_allclose(load_checked(path), np.linspace(0.0, 1.0, 32).reshape(2, 16).mean(0))


def test_every_problem_is_named_for_the_owner(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "owner.csv"
    np.savetxt(path, bad_table(), delimiter=",")
    assert main(["check-data", str(path), "--dim", "8"]) == 1
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert len(lines) == 3 and all(str(path) in line for line in lines)
    assert "NaN" in lines[0] and "record 2, coordinate 5" in lines[0]
    assert "outside [0, 1]" in lines[1] and "7.25" in lines[1] and "record 3" in lines[1]
    assert "d=16" in lines[2] and "d=8" in lines[2]


@pytest.mark.parametrize(
    ("content", "kind"),
    [(b"not numbers\n", "unreadable"), (np.zeros((2, 2, 2)), "shape")],
)
def test_unreadable_and_bad_shapes(tmp_path: Path, content: object, kind: str) -> None:
    if isinstance(content, bytes):
        path = tmp_path / "x.csv"
        path.write_bytes(content)
    else:
        path = tmp_path / "x.npy"
        np.save(path, content)
    data, problems = inspect_data(path)
    assert data is None and [p.kind for p in problems] == [kind]


def test_public_text_carries_no_value_and_no_position(tmp_path: Path) -> None:
    path = tmp_path / "owner.npy"
    np.save(path, bad_table())
    with pytest.raises(DataCheckError) as info:
        load_checked(path, expected_d=16)
    public = str(info.value)
    assert "NaN" in public and "outside [0, 1]" in public
    for leak in ("0.7137", "7.25", "record", "coordinate", str(path)):
        assert leak not in public


def test_the_coordinator_sees_the_kind_of_problem_only(tmp_path: Path) -> None:
    config = run_config(tmp_path, scenario_file(tmp_path, 6), mode="deployment", seed=-1)
    config["on-degraded"] = "release"
    settings = dataclasses.replace(RunSettings.from_run_config(config), threshold=2)
    transport = InMemoryTransport(6, config)
    rng = np.random.default_rng(0)
    for index, context in enumerate(transport.contexts.values()):
        path = tmp_path / f"owner-{index}.npy"
        np.save(path, bad_table() if index == 4 else rng.random((3, 16)))
        context.node_config = {"data-path": str(path)}
    document = HeterogeneityStrategy(settings).run(transport)
    assert document["status"] == "success" and document["clients_in_sum"]["stage1"] == 5
    saved = (tmp_path / "result.json").read_text()
    (reason,) = json.loads(saved)["steps"][0]["dropouts"].values()
    assert "pre-flight check" in reason and "NaN" in reason
    # The owner's values could only leak as text: the statistics are numbers with CSPRNG noise
    # (deployment mode), so a substring check on the whole file would fail by chance.
    text = " ".join(_strings(json.loads(saved)))
    assert "pre-flight check" in text
    for leak in ("0.7137", "7.25", "record 2", "coordinate 5", "coordinate 11", "owner-4"):
        assert leak not in text


def _strings(value: object) -> list[str]:
    """Every string (keys and values) in a decoded JSON document."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (str(k), *_strings(v))]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


# ------------------------------------------------------------------------------ named columns
OWNER_CSV = "note,score,age\nsecret-a,73.125,41.5\nsecret-b,50,18\nsecret-c,120,90\n"


def test_columns_and_bounds_from_the_flags(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "owner.csv"
    path.write_text(OWNER_CSV)
    args = ["check-data", str(path), "--columns", "score,age", "--bounds", "score=0:100,age=18:90"]
    assert main([*args, "--dim", "2"]) == 0
    out = capsys.readouterr().out
    assert "ok: 3 record(s), d=2, columns score, age" in out
    assert "clipped into the bounds: score 1" in out  # the owner's own screen
    assert main([*args, "--dim", "3"]) == 1
    assert "the run expects d=3" in capsys.readouterr().err
    # Without bounds the columns must already lie in [0, 1].
    assert main(["check-data", str(path), "--columns", "score,age"]) == 1
    assert "outside [0, 1]" in capsys.readouterr().err


def test_columns_and_bounds_from_a_scenario(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "owner.csv"
    path.write_text(OWNER_CSV.replace("age", "weight"))
    scenario = tmp_path / "run.toml"
    scenario.write_text(
        '[data]\ndataset = "digits"\nnum_clients = 4\ncolumns = ["score", "age"]\n'
        "bounds = { score = [0, 100], age = [18, 90] }\n"
        "[privacy]\nepsilon = 1.0\ndelta = 1e-5\n"
    )
    assert main(["check-data", str(path), "--scenario", str(scenario)]) == 1
    err = capsys.readouterr().err
    assert "lacks the run's column(s) 'age'" in err and "'weight'" in err
    path.write_text(OWNER_CSV)
    assert main(["check-data", str(path), "--scenario", str(scenario)]) == 0
    assert "columns score, age" in capsys.readouterr().out
    # The flags win over the scenario's columns.
    assert main(["check-data", str(path), "--scenario", str(scenario), "--columns", "score"]) == 0
    assert "d=1, columns score" in capsys.readouterr().out


def test_bad_flags_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "owner.csv"
    path.write_text(OWNER_CSV)
    assert main(["check-data", str(path), "--bounds", "score=0:100"]) == 2
    assert "--columns" in capsys.readouterr().err
    assert main(["check-data", str(path), "--columns", "age", "--bounds", "score=0:1"]) == 2
    assert "bounds.score" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["check-data", str(path), "--columns", "age", "--bounds", "age=90:18"])
    assert "low < high" in capsys.readouterr().err
    assert main(["check-data", str(path), "--scenario", str(tmp_path / "none.toml")]) == 2
