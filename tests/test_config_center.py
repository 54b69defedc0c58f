"""``dispersion_center`` in the Flower run config and the main job (issue 9, lever c'').

The run-config key ``dispersion-center`` passes through the one validator
(:mod:`fa_hetdp.config.rules`): a bad value, or ``"optimal"`` when the scenario has no broadcast
bounds, is refused under ``run-config.dispersion-center`` before anything starts; an accepted
value reaches the ProtocolConfig the Flower apps use, and a run with it equals its in-process
twin. The main job (``scenarios/digits-all.toml``) runs the optimal centre, the setting
``fa-hetdp plan`` plans for it.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.replay import reference_statistics
from test_flower_helpers import assert_matches_reference, run_config, scenario_file
from test_server_strategy import InMemoryTransport

from fa_hetdp.config.partition import partition_scenario
from fa_hetdp.config.rules import ConfigError
from fa_hetdp.config.scenario import load_scenario
from fa_hetdp.flowerkit.settings import UNSET, RunSettings
from fa_hetdp.protocol.recommended import recommended_config
from fa_hetdp.server.strategy import HeterogeneityStrategy

ROOT = Path(__file__).resolve().parent.parent
APP_CONFIG: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["flwr"][
    "app"
]["config"]


def _settings(**overrides: object) -> RunSettings:
    return RunSettings.from_run_config({**APP_CONFIG, **overrides})


def _problems(**overrides: object) -> dict[str, str]:
    with pytest.raises(ConfigError) as info:
        _settings(**overrides)
    return dict(info.value.problems)


# --------------------------------------------------------------------------- the main job


def test_digits_all_uses_the_optimal_center() -> None:
    scenario = load_scenario("digits-all")
    assert scenario.privacy.dispersion_center == "optimal"
    assert scenario.privacy.broadcast_bounds is True
    settings = _settings(scenario="digits-all")
    assert settings.protocol.dispersion_center == "optimal"
    assert settings.protocol.noise_shape == "per_coordinate"


def test_the_main_jobs_plan_line_plans_the_main_job() -> None:
    # README.md and scenarios/digits-all.toml give `fa-hetdp plan -n 1797 -d 64
    # --variance-floor 0.08 --no-adaptive-floor --no-extra-i2-noise` for the main job: the
    # planner's recommended settings with those flags must be the run's protocol exactly
    # (the centre and the noise shape included, which the line leaves to the defaults).
    # (and the scenario's corrupt_fraction = 0.05: the honest shares the noise is calibrated to)
    line = (
        "fa-hetdp plan -n 1797 -d 64 --variance-floor 0.08 --no-adaptive-floor --no-extra-i2-noise"
    )
    assert line + " --corrupt-fraction 0.05" in (ROOT / "README.md").read_text()
    toml = (ROOT / "scenarios" / "digits-all.toml").read_text()
    assert line in toml and "--corrupt-fraction 0.05`" in toml
    planned = recommended_config(
        epsilon=1.0,
        delta=1e-5,
        variance_floor=0.08,
        adaptive_floor=False,
        extra_i2_noise=False,
        corrupt_fraction=0.05,
    )
    settings = _settings(scenario="digits-all")
    assert settings.scenario.num_clients == 1797
    assert settings.protocol == planned


# --------------------------------------------------------------------------- run config


def test_pyproject_declares_the_key_unset() -> None:
    assert APP_CONFIG["dispersion-center"] == UNSET["dispersion-center"] == ""
    # unset: the scenario's (quickstart keeps the default)
    assert _settings().protocol.dispersion_center == "broadcast"
    # a run config written before the key existed still resolves (the key is optional)
    old = {k: v for k, v in APP_CONFIG.items() if k != "dispersion-center"}
    assert RunSettings.from_run_config(old).protocol.dispersion_center == "broadcast"


def test_run_config_overrides_the_scenario() -> None:
    on = _settings(**{"dispersion-center": "optimal"})
    assert on.protocol.dispersion_center == "optimal"
    off = _settings(scenario="digits-all", **{"dispersion-center": "broadcast"})
    assert off.protocol.dispersion_center == "broadcast"
    # any mechanism: the centre replaces c wherever stage 2 uses it, lattices included
    ddg = _settings(**{"dispersion-center": "optimal", "mechanism": "ddg"})
    assert (ddg.protocol.dispersion_center, ddg.protocol.mechanism) == ("optimal", "ddg")


@pytest.mark.parametrize(
    ("value", "message"),
    [("median", "'median'"), ("Optimal", "'Optimal'"), (1, "must be a string")],
)
def test_run_config_refuses_a_bad_value_under_its_key(value: object, message: str) -> None:
    problems = _problems(**{"dispersion-center": value})
    assert set(problems) == {"run-config.dispersion-center"}, problems
    assert message in problems["run-config.dispersion-center"]
    if isinstance(value, str):
        assert "broadcast, optimal" in problems["run-config.dispersion-center"]


def test_run_config_refuses_optimal_when_the_scenario_has_no_broadcast_bounds(
    tmp_path: Path,
) -> None:
    path = tmp_path / "no-bounds.toml"
    path.write_text(
        '[data]\ndataset = "digits"\nnum_clients = 20\n'
        "[privacy]\nepsilon = 1.0\ndelta = 1e-5\nbroadcast_bounds = false\n"
    )
    problems = _problems(scenario=str(path), **{"dispersion-center": "optimal"})
    assert set(problems) == {"run-config.dispersion-center"}, problems
    assert "needs broadcast_bounds=true" in problems["run-config.dispersion-center"]
    assert _settings(scenario=str(path)).protocol.dispersion_center == "broadcast"


# --------------------------------------------------------------------------- a run


def test_in_memory_run_with_the_optimal_center_equals_its_twin(tmp_path: Path) -> None:
    config = run_config(tmp_path, scenario_file(tmp_path, 12), **{"dispersion-center": "optimal"})
    settings = RunSettings.from_run_config(config)
    assert settings.protocol.dispersion_center == "optimal"
    document = HeterogeneityStrategy(settings).run(InMemoryTransport(12, config))
    assert document["status"] == "success"
    assert document["config"]["dispersion_center"] == "optimal"
    assert_matches_reference(document, config)
    # the twin with the broadcast centre (same seed, clients and noise draws) gives another D''
    # (the centre moves: 12 clients at epsilon = 1 put it well away from clip(mu'))
    broadcast = reference_statistics(
        partition_scenario(settings.scenario).vectors,
        RunSettings.from_run_config({**config, "dispersion-center": "broadcast"}).protocol,
        seed=int(document["seed"]),
        session_size=int(document["n"]),
        stage1=document["partitions_in_sum"]["stage1"],
        stage2=document["partitions_in_sum"]["stage2"],
    )
    got = np.asarray(document["statistics"]["dispersion"])
    assert np.max(np.abs(got - np.asarray(broadcast.dispersion))) > 1e-3
    np.testing.assert_allclose(document["statistics"]["mean"], broadcast.mean, atol=1e-9)
