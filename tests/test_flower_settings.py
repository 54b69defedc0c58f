"""Run settings: scenario-backed defaults, overrides, deployment refuses a seed."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

from fa_hetdp.errors import PrivacyParameterError, ScenarioError
from fa_hetdp.flower.settings import UNSET, RunSettings, dropout_partitions
from fa_hetdp.flower.steps import STEPS

ROOT = Path(__file__).resolve().parent.parent
APP_CONFIG: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["flwr"][
    "app"
]["config"]


def config(**overrides: object) -> dict[str, Any]:
    out = dict(APP_CONFIG)
    out.update(overrides)
    return out


def test_pyproject_defaults_are_the_quickstart_in_deployment_mode() -> None:
    assert set(UNSET) <= set(APP_CONFIG)
    assert all(APP_CONFIG[key] == value for key, value in UNSET.items())
    settings = RunSettings.from_run_config(APP_CONFIG)
    assert settings.mode == "deployment" and settings.seed is None
    assert settings.scenario.name == "quickstart"
    assert settings.num_clients == 100
    assert settings.protocol.epsilon == 1.0 and settings.protocol.delta == 1e-5
    assert settings.threshold == 67  # ceil(2/3 * 100)
    assert settings.neighbours is None
    assert settings.dropout_fraction == 0.0
    assert settings.result_path == Path("results/flower-result.json")


def test_simulation_uses_the_scenario_seed_unless_overridden() -> None:
    assert RunSettings.from_run_config(config(mode="simulation")).seed == 0
    assert RunSettings.from_run_config(config(mode="simulation", seed=7)).seed == 7


def test_deployment_refuses_a_seed() -> None:
    with pytest.raises(PrivacyParameterError, match="refuse a seed"):
        RunSettings.from_run_config(config(seed=3))


def test_overrides() -> None:
    settings = RunSettings.from_run_config(
        config(
            mode="simulation",
            epsilon=0.5,
            placement="central",
            composition="gdp",
            **{
                "variance-floor": 0.05,
                "extra-i2-noise": "false",
                "secagg-threshold": 6.0,
                "secagg-neighbours": 8,
                "min-honest-clients": 50,
            },
        )
    )
    protocol = settings.protocol
    assert protocol.epsilon == 0.5 and protocol.placement == "central"
    assert protocol.composition == "gdp" and protocol.variance_floor == 0.05
    assert protocol.extra_i2_noise is False and protocol.min_honest_clients == 50
    assert settings.threshold == 6 and settings.neighbours == 8


def test_fractional_threshold_is_a_fraction_of_the_share_holders() -> None:
    sparse = RunSettings.from_run_config(
        config(**{"secagg-neighbours": 28, "secagg-threshold": 0.6})
    )
    assert sparse.threshold == 18  # ceil(0.6 * (28 + 1))
    dense = RunSettings.from_run_config(config(**{"secagg-neighbours": 200}))
    assert dense.neighbours is None and dense.threshold == 67


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"mode": "prod"}, "mode"),
        ({"secagg-threshold": 1.5}, "secagg-threshold"),
        ({"secagg-threshold": 500.0}, "threshold must be in"),
        ({"secagg-neighbours": 7}, "even degree"),
        ({"mode": "simulation", "dropout-fraction": 1.0}, "dropout-fraction"),
        ({"mode": "simulation", "dropout-stage": "later"}, "dropout-stage"),
        ({"dropout-fraction": 0.1}, "simulation mode only"),
        ({"stage-timeout": 0.0}, "timeouts"),
        ({"extra-i2-noise": "yes"}, "extra-i2-noise"),
        ({"epsilon": "one"}, "type float"),
        ({"scenario": "no/such/scenario"}, "no scenario file"),
    ],
)
def test_invalid_settings_name_the_key(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(ScenarioError, match=message):
        RunSettings.from_run_config(config(**overrides))


def test_dropout_partitions_are_a_seeded_choice() -> None:
    settings = RunSettings.from_run_config(
        config(mode="simulation", **{"dropout-fraction": 0.1, "dropout-stage": "stage2"})
    )
    chosen = dropout_partitions(settings)
    assert len(chosen) == 10 and chosen <= set(range(100))
    assert dropout_partitions(settings) == chosen
    assert settings.dropout_step == "stage2_input"
    other = RunSettings.from_run_config(
        config(mode="simulation", seed=1, **{"dropout-fraction": 0.1})
    )
    assert dropout_partitions(other) != chosen
    assert dropout_partitions(RunSettings.from_run_config(config(mode="simulation"))) == set()


def test_steps_are_valid_handler_names() -> None:
    assert all(step.isidentifier() for step in STEPS)
    assert len(STEPS) == 6
