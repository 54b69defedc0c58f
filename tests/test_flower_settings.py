"""Run settings (fa_hetdp.flowerkit.settings): scenario-backed defaults, overrides checked by the
declared rules, deployment refuses a seed."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

from fa_hetdp.config.rules import ConfigError
from fa_hetdp.errors import PrivacyParameterError, ScenarioError
from fa_hetdp.flowerkit.settings import UNSET, RunSettings, dropout_partitions
from fa_hetdp.flowerkit.steps import STEPS

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
    assert settings.threshold == 66  # ceil(2/3 * 99 holders)
    assert settings.neighbours is None
    assert settings.dropout_fraction == 0.0
    assert settings.result_path == Path("results/flower-result-{run_id}.json")


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
    assert sparse.threshold == 17  # ceil(0.6 * 28 holders)
    dense = RunSettings.from_run_config(config(**{"secagg-neighbours": 200}))
    assert dense.neighbours is None and dense.threshold == 66


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"mode": "prod"}, r"run-config\.mode: unknown value 'prod'"),
        ({"secagg-threshold": 1.5}, r"run-config\.secagg-threshold: must be in \(0\.0, 1\.0\]"),
        ({"secagg-threshold": 500.0}, r"run-config\.secagg-threshold: .* must be in 2\.\.99 "),
        ({"secagg-neighbours": 7}, r"run-config\.secagg-neighbours: .* even integer k >= 4"),
        ({"secagg-neighbours": 2}, r"run-config\.secagg-neighbours: .* even integer k >= 4"),
        ({"secagg-neighbours": -5}, r"run-config\.secagg-neighbours: must be >= 2"),
        ({"mode": "simulation", "dropout-fraction": 1.0}, r"run-config\.dropout-fraction: "),
        ({"mode": "simulation", "dropout-stage": "later"}, r"run-config\.dropout-stage: "),
        ({"dropout-fraction": 0.1}, r"run-config\.dropout-fraction: .*simulation mode only"),
        ({"stage-timeout": 0.0}, r"run-config\.stage-timeout: must be > 0"),
        ({"extra-i2-noise": "yes"}, r"run-config\.extra-i2-noise: "),
        ({"epsilon": "one"}, r"run-config\.epsilon: must be a number"),
        ({"epsilon": -1.0}, r"run-config\.epsilon: must be > 0"),
        ({"delta": 1.0}, r"run-config\.delta: must be in \(0\.0, 1\.0\)"),
        ({"variance-floor": 0.3}, r"run-config\.variance-floor: must be in \(0\.0, 0\.25\]"),
        ({"num-clients": 1}, r"run-config\.num-clients: must be >= 2"),
        ({"min-honest-clients": 101}, r"run-config\.min-honest-clients: must be <= 100"),
        ({"mechanism": "cgm", "composition": "gdp"}, r"run-config\.composition: 'gdp'"),
        ({"mode": "simulation", "seed": -3}, r"run-config\.seed: must be >= 0"),
        ({"scenario": "no/such/scenario"}, "no scenario file"),
    ],
)
def test_invalid_settings_name_the_key(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(ScenarioError, match=message):
        RunSettings.from_run_config(config(**overrides))


def test_invalid_settings_are_reported_together() -> None:
    with pytest.raises(ConfigError) as info:
        RunSettings.from_run_config(
            config(epsilon=-1.0, **{"variance-floor": 0.5, "secagg-neighbours": 3})
        )
    keys = [key for key, _ in info.value.problems]
    assert keys == [
        "run-config.epsilon",
        "run-config.variance-floor",
        "run-config.secagg-neighbours",
    ]
    assert isinstance(info.value, PrivacyParameterError)


def test_sentinels_take_the_scenario_value() -> None:
    settings = RunSettings.from_run_config(config(**dict(UNSET)))
    scenario = settings.scenario
    assert settings.protocol.epsilon == scenario.privacy.epsilons[0]
    assert settings.threshold == scenario.secagg.threshold_count(settings.num_clients)
    secagg = scenario.secagg
    assert (settings.corrupt_fraction, settings.dropout_tolerance) == (
        secagg.corrupt_fraction,
        secagg.dropout_tolerance,
    )
    assert (settings.security_bits, settings.correctness_bits, settings.threat_model) == (
        secagg.security_bits,
        secagg.correctness_bits,
        secagg.threat_model,
    )
    assert settings.secagg_parameters() == secagg.parameters(settings.num_clients)


def test_secagg_adversary_overrides() -> None:
    settings = RunSettings.from_run_config(
        config(**{"secagg-corrupt-fraction": 0.2, "secagg-dropout-tolerance": 0.1})
    )
    assert (settings.corrupt_fraction, settings.dropout_tolerance) == (0.2, 0.1)
    assert settings.secagg_parameters().gamma == 0.2
    assert settings.threshold == settings.scenario.secagg.threshold_count(100)  # explicit: kept


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
