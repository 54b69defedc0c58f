"""The adaptive floor's flags: ``fa-hetdp plan``, ``fa-hetdp run`` and the run-config keys.

The run-config keys ``adaptive-floor`` / ``floor-quantile`` go through the one validator
(:mod:`fa_hetdp.config.rules`) into :class:`RunSettings`; ``fa-hetdp run --adaptive-floor``
becomes that key; the progress bar counts the stage-0 steps.
"""

from __future__ import annotations

import argparse
import json
import tomllib
from pathlib import Path
from typing import Any

import pytest

from fa_hetdp.cli.main import main
from fa_hetdp.cli.run import add_arguments, check_flags, step_count
from fa_hetdp.config.rules import ConfigError
from fa_hetdp.config.scenario import load_scenario
from fa_hetdp.flowerkit.settings import UNSET, RunSettings

ROOT = Path(__file__).resolve().parent.parent
APP_CONFIG: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["flwr"][
    "app"
]["config"]


def _config(**overrides: object) -> dict[str, Any]:
    return {**APP_CONFIG, **overrides}


def test_pyproject_declares_the_keys_unset() -> None:
    assert APP_CONFIG["adaptive-floor"] == UNSET["adaptive-floor"] == ""
    assert APP_CONFIG["floor-quantile"] == UNSET["floor-quantile"] == 0.0
    # unset: the scenario's (the quickstart keeps ProtocolConfig's default, off)
    settings = RunSettings.from_run_config(APP_CONFIG)
    assert settings.protocol.adaptive_floor is False
    assert settings.protocol.floor_quantile == 0.1


def test_run_config_keys_override_the_scenario() -> None:
    on = RunSettings.from_run_config(_config(**{"adaptive-floor": "true", "floor-quantile": 0.2}))
    assert on.protocol.adaptive_floor is True and on.protocol.floor_quantile == 0.2
    off = RunSettings.from_run_config(_config(scenario="digits-all", **{"adaptive-floor": "false"}))
    assert off.protocol.adaptive_floor is False


@pytest.mark.parametrize(
    ("overrides", "key", "message"),
    [
        ({"adaptive-floor": "yes"}, "run-config.adaptive-floor", "'', 'true' or 'false'"),
        ({"floor-quantile": 0.9}, "run-config.floor-quantile", r"in (0.0, 0.5]"),
        ({"adaptive-floor": True}, "run-config.adaptive-floor", "must be a string"),
    ],
)
def test_bad_values_are_refused_under_their_key(
    overrides: dict[str, object], key: str, message: str
) -> None:
    with pytest.raises(ConfigError) as info:
        RunSettings.from_run_config(_config(**overrides))
    problems = dict(info.value.problems)
    assert key in problems and message in problems[key], problems


def test_run_flag_becomes_the_run_config_key() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    quick = load_scenario("quickstart")
    on = check_flags(parser.parse_args(["--adaptive-floor"]), quick)
    assert on == {"adaptive-floor": "true"}
    off = check_flags(parser.parse_args(["--no-adaptive-floor"]), quick)
    assert off == {"adaptive-floor": "false"}
    assert check_flags(parser.parse_args([]), quick) == {}
    # the key it writes resolves through the same settings reader
    resolved = RunSettings.from_run_config(_config(**on))
    assert resolved.protocol.adaptive_floor is True


def test_progress_counts_the_stage0_steps() -> None:
    assert step_count(False, False) == 6
    assert step_count(True, False) == 8  # stage 0: input and unmask
    assert step_count(True, True) == 11  # and one consistency round per summation
    assert step_count(False, True) == 8


@pytest.mark.parametrize(("flag", "adaptive"), [([], True), (["--no-adaptive-floor"], False)])
def test_plan_flag(flag: list[str], adaptive: bool, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["plan", "-n", "1797", "-d", "64", "--within-variance", "0.14", "--json", *flag]
    assert main(args) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["planned_floor"] is not None) is adaptive
    if adaptive:
        assert doc["planned_floor"] < 0.14


def test_plan_floor_quantile_is_checked(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--floor-quantile", "0.9"]) != 0
    assert "floor_quantile: must be in (0.0, 0.5], got 0.9" in capsys.readouterr().err
