"""``fa-hetdp run --noise-shape`` and ``fa-hetdp plan --noise-shape`` (issue 9, lever c').

``--noise-shape`` of ``run`` becomes the run-config key ``noise-shape`` and is checked by the
declared rules before Flower starts (as ``--adaptive-floor``); ``plan``'s reaches the planner.
"""

from __future__ import annotations

import argparse
import json
import tomllib
from pathlib import Path
from typing import Any

import pytest

import fa_hetdp.cli.run as run_module
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


@pytest.mark.parametrize(
    ("flag", "field", "on", "off"),
    [
        ("noise-shape", "noise_shape", "per_coordinate", "uniform"),
        ("dispersion-center", "dispersion_center", "optimal", "broadcast"),
    ],
)
def test_run_flag_becomes_the_run_config_key(flag: str, field: str, on: str, off: str) -> None:
    quick = load_scenario("quickstart")
    given = check_flags(_parse(f"--{flag}", on), quick)
    assert given == {flag: on}
    assert check_flags(_parse(), quick) == {}
    # the key it writes resolves through the same settings reader
    resolved = RunSettings.from_run_config({**APP_CONFIG, **given})
    assert getattr(resolved.protocol, field) == on
    # digits-all states both levers on: the flag turns one off
    taken = check_flags(_parse(f"--{flag}", off), load_scenario("digits-all"))
    resolved = RunSettings.from_run_config({**APP_CONFIG, "scenario": "digits-all", **taken})
    assert getattr(resolved.protocol, field) == off


def test_run_flag_with_a_discrete_mechanism_is_refused_under_the_flag() -> None:
    with pytest.raises(ConfigError) as info:
        check_flags(
            _parse("--noise-shape", "per_coordinate", "--mechanism", "ddg"),
            load_scenario("quickstart"),
        )
    problems = dict(info.value.problems)
    assert "Gaussian noise only" in problems["--noise-shape"]


def test_main_job_with_a_discrete_mechanism_runs_uniform_noise_with_a_note(
    capsys: pytest.CaptureFixture[str],
) -> None:
    digits_all = load_scenario("digits-all")  # per_coordinate in the scenario
    overrides = check_flags(_parse("--mechanism", "ddg"), digits_all)
    assert overrides == {"mechanism": "ddg", "noise-shape": "uniform"}
    assert "uniform stage-2 noise" in capsys.readouterr().err
    # an explicit --noise-shape is never changed: per_coordinate with ddg is refused
    with pytest.raises(ConfigError) as info:
        check_flags(_parse("--mechanism", "ddg", "--noise-shape", "per_coordinate"), digits_all)
    assert "Gaussian noise only" in dict(info.value.problems)["--noise-shape"]
    # a Gaussian mechanism keeps the scenario's shape
    flags = _parse("--mechanism", "cgm", "--composition", "basic")
    assert check_flags(flags, digits_all) == {"mechanism": "cgm", "composition": "basic"}


@pytest.mark.parametrize(
    ("flag", "bad"), [("--noise-shape", "gaussian"), ("--dispersion-center", "median")]
)
def test_bad_run_flag_exits_2_before_flower_starts(
    flag: str, bad: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(run_module, "run_simulation", lambda *a, **k: pytest.fail("started"))
    assert main(["run", flag, bad]) == 2
    err = capsys.readouterr().err
    assert f"{flag}: " in err and f"'{bad}'" in err and "Traceback" not in err


@pytest.mark.parametrize("shape", ["uniform", "per_coordinate"])
def test_plan_flag_reaches_the_planner(shape: str, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plan", "-n", "1797", "-d", "64", "--no-adaptive-floor", "--json"]
    assert main([*argv, "--noise-shape", shape]) == 0
    doc = json.loads(capsys.readouterr().out)
    want = plan_accuracy(1797, 64, epsilon=1.0, delta=1e-5, adaptive_floor=False, noise_shape=shape)
    assert doc == json.loads(json.dumps(want.as_dict()))
    other = "uniform" if shape == "per_coordinate" else "per_coordinate"
    unlike = plan_accuracy(
        1797, 64, epsilon=1.0, delta=1e-5, adaptive_floor=False, noise_shape=other
    )
    assert doc != json.loads(json.dumps(unlike.as_dict()))


def test_plan_refuses_an_unknown_shape(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["plan", "--noise-shape", "gaussian"])
    assert info.value.code == 2
    assert "invalid choice: 'gaussian'" in capsys.readouterr().err
