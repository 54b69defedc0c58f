"""``fa-hetdp run --dispersion-center`` and ``fa-hetdp plan --dispersion-center`` (lever c'').

``--dispersion-center`` of ``run`` becomes the run-config key ``dispersion-center`` and is
checked by the declared rules before Flower starts (as ``--noise-shape``); ``plan``'s reaches
the planner, whose default (the recommended settings) is ``"optimal"``.
"""

from __future__ import annotations

import argparse
import json
import tomllib
from pathlib import Path
from typing import Any

import pytest

from fa_hetdp.accuracy.planner import plan_accuracy
from fa_hetdp.cli.main import main
from fa_hetdp.cli.run import add_arguments, check_flags
from fa_hetdp.config.rules import ConfigError
from fa_hetdp.config.scenario import load_scenario
from fa_hetdp.flowerkit.settings import RunSettings

ROOT = Path(__file__).resolve().parent.parent
APP_CONFIG: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["flwr"][
    "app"
]["config"]


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(list(argv))


def test_main_job_with_a_discrete_mechanism_keeps_the_center(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # unlike per-coordinate noise, the centre holds for any mechanism: --mechanism ddg on the
    # main job changes the noise shape (with a note) but not the centre
    overrides = check_flags(_parse("--mechanism", "ddg"), load_scenario("digits-all"))
    assert overrides == {"mechanism": "ddg", "noise-shape": "uniform"}
    assert "dispersion" not in capsys.readouterr().err
    resolved = RunSettings.from_run_config({**APP_CONFIG, "scenario": "digits-all", **overrides})
    assert resolved.protocol.dispersion_center == "optimal"


def test_run_flag_refused_under_the_flag(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        check_flags(_parse("--dispersion-center", "median"), load_scenario("quickstart"))
    problems = dict(info.value.problems)
    assert set(problems) == {"--dispersion-center"}, problems
    assert "'median'" in problems["--dispersion-center"]
    assert "broadcast, optimal" in problems["--dispersion-center"]
    # optimal on a scenario without broadcast bounds
    path = tmp_path / "no-bounds.toml"
    path.write_text(
        '[data]\ndataset = "digits"\nnum_clients = 20\n'
        "[privacy]\nepsilon = 1.0\ndelta = 1e-5\nbroadcast_bounds = false\n"
    )
    with pytest.raises(ConfigError) as info:
        check_flags(_parse("--dispersion-center", "optimal"), load_scenario(path))
    problems = dict(info.value.problems)
    assert "needs broadcast_bounds=true" in problems["--dispersion-center"], problems


@pytest.mark.parametrize("center", ["broadcast", "optimal"])
def test_plan_flag_reaches_the_planner(center: str, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plan", "-n", "1797", "-d", "64", "--no-adaptive-floor", "--json"]
    assert main([*argv, "--dispersion-center", center]) == 0
    doc = json.loads(capsys.readouterr().out)
    kwargs: dict[str, Any] = {"epsilon": 1.0, "delta": 1e-5, "adaptive_floor": False}
    want = plan_accuracy(1797, 64, dispersion_center=center, **kwargs)
    assert doc == json.loads(json.dumps(want.as_dict()))
    other = "broadcast" if center == "optimal" else "optimal"
    unlike = plan_accuracy(1797, 64, dispersion_center=other, **kwargs)
    assert doc != json.loads(json.dumps(unlike.as_dict()))
    # without the flag: the recommended setting, the optimal centre
    assert main(argv) == 0
    default = json.loads(capsys.readouterr().out)
    assert (default == doc) == (center == "optimal")


def test_plan_flag_reaches_the_inverse(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plan", "-d", "64", "--target", "0.25", "--per-coordinate", "--json"]
    answers = {}
    for center in ("broadcast", "optimal"):
        assert main([*argv, "--dispersion-center", center]) == 0
        answers[center] = json.loads(capsys.readouterr().out)["inverse"]["answer"]
    # the centre lowers the per-coordinate error of D'': fewer clients meet the same target
    assert answers["optimal"] < answers["broadcast"], answers


def test_plan_refuses_an_unknown_center(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["plan", "--dispersion-center", "median"])
    assert info.value.code == 2
    assert "invalid choice: 'median'" in capsys.readouterr().err
