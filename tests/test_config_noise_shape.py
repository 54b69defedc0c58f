"""``noise_shape`` in scenario files and the Flower run config (issue 9, lever c').

The scenario key ``[privacy] noise_shape`` and the run-config key ``noise-shape`` pass through
the one validator (:mod:`fa_hetdp.config.rules`): a bad value, or ``"per_coordinate"`` without
broadcast bounds or with a discrete mechanism, is refused before any work under the key where
it was given; an accepted value reaches the ProtocolConfig the Flower apps use, and the Flower
result carries the per-coordinate stage-2 sigmas as the in-process result JSON does.
"""

from __future__ import annotations

import copy
import json
import tomllib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.replay import reference_statistics
from test_flower_helpers import run_config, scenario_file
from test_server_strategy import InMemoryTransport

from fa_hetdp import private_statistics
from fa_hetdp.config.partition import partition_scenario
from fa_hetdp.config.rules import ConfigError
from fa_hetdp.config.scenario import load_scenario, scenario_from_dict
from fa_hetdp.data.catalog import load_dataset
from fa_hetdp.flowerkit.settings import UNSET, RunSettings
from fa_hetdp.report.results import result_to_dict, sigmas_section
from fa_hetdp.server.strategy import HeterogeneityStrategy

ROOT = Path(__file__).resolve().parent.parent
APP_CONFIG: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["flwr"][
    "app"
]["config"]

BASE: dict[str, Any] = {
    "data": {"dataset": "digits", "num_clients": 100, "label_ratios": [1] * 10},
    "privacy": {"epsilon": 1.0, "delta": 1e-5},
}


def _raw(**privacy: Any) -> dict[str, Any]:
    raw = copy.deepcopy(BASE)
    raw["privacy"].update(privacy)
    return raw


def _problems(**privacy: Any) -> dict[str, str]:
    with pytest.raises(ConfigError) as info:
        scenario_from_dict(_raw(**privacy))
    return dict(info.value.problems)


# --------------------------------------------------------------------------- scenario files


def test_scenario_default_is_auto_and_per_coordinate_parses() -> None:
    # "auto" (the default, issue 18): each run's ProtocolConfig resolves it for its mechanism
    assert scenario_from_dict(_raw()).privacy.noise_shape == "auto"
    scenario = scenario_from_dict(_raw(noise_shape="per_coordinate"))
    assert scenario.privacy.noise_shape == "per_coordinate"
    # to_dict writes it and reads back equal
    assert scenario.to_dict()["privacy"]["noise_shape"] == "per_coordinate"
    assert scenario_from_dict(scenario.to_dict(), path=scenario.path) == scenario


def test_scenario_refuses_an_unknown_shape_naming_the_key() -> None:
    problems = _problems(noise_shape="gaussian")
    assert set(problems) == {"privacy.noise_shape"}
    assert "'gaussian'" in problems["privacy.noise_shape"]
    assert "uniform" in problems["privacy.noise_shape"]
    assert "per_coordinate" in problems["privacy.noise_shape"]


def test_scenario_refuses_per_coordinate_without_broadcast_bounds() -> None:
    problems = _problems(noise_shape="per_coordinate", broadcast_bounds=False)
    assert set(problems) == {"privacy.noise_shape"}
    assert "needs broadcast_bounds=true" in problems["privacy.noise_shape"]
    # uniform noise without broadcast bounds stays allowed (the paper's scenarios)
    assert scenario_from_dict(_raw(broadcast_bounds=False)).privacy.noise_shape == "auto"
    assert scenario_from_dict(_raw(noise_shape="uniform", broadcast_bounds=False))


@pytest.mark.parametrize("mechanism", ["ddg", "skellam", ["agm", "ddg"]])
def test_scenario_refuses_per_coordinate_with_a_discrete_mechanism(mechanism: object) -> None:
    # a grid is refused when any of its mechanisms is discrete
    problems = _problems(noise_shape="per_coordinate", mechanism=mechanism)
    assert set(problems) == {"privacy.noise_shape"}
    assert "Gaussian noise only" in problems["privacy.noise_shape"]


def test_scenario_allows_per_coordinate_with_cgm() -> None:
    scenario = scenario_from_dict(
        _raw(noise_shape="per_coordinate", mechanism="cgm", composition="basic")
    )
    assert scenario.privacy.noise_shape == "per_coordinate"


def test_digits_all_uses_per_coordinate_noise() -> None:
    scenario = load_scenario("digits-all")
    assert scenario.privacy.noise_shape == "per_coordinate"
    assert scenario.privacy.broadcast_bounds is True and scenario.privacy.mechanisms == ("agm",)
    settings = RunSettings.from_run_config({**APP_CONFIG, "scenario": "digits-all"})
    assert settings.protocol.noise_shape == "per_coordinate"


# --------------------------------------------------------------------------- run config


def _settings(**overrides: object) -> RunSettings:
    return RunSettings.from_run_config({**APP_CONFIG, **overrides})


def _run_config_problems(**overrides: object) -> dict[str, str]:
    with pytest.raises(ConfigError) as info:
        _settings(**overrides)
    return dict(info.value.problems)


def test_pyproject_declares_the_key_unset() -> None:
    assert APP_CONFIG["noise-shape"] == UNSET["noise-shape"] == ""
    # unset: the scenario's (the quickstart keeps the default)
    assert _settings().protocol.noise_shape == "uniform"
    # a run config written before the key existed still resolves (the key is optional)
    old = {k: v for k, v in APP_CONFIG.items() if k != "noise-shape"}
    assert RunSettings.from_run_config(old).protocol.noise_shape == "uniform"


def test_run_config_overrides_the_scenario() -> None:
    on = _settings(**{"noise-shape": "per_coordinate"})
    assert on.protocol.noise_shape == "per_coordinate"
    off = _settings(scenario="digits-all", **{"noise-shape": "uniform"})
    assert off.protocol.noise_shape == "uniform"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"noise-shape": "gaussian"}, "'gaussian'"),
        ({"noise-shape": 1}, "must be a string"),
        ({"noise-shape": "per_coordinate", "mechanism": "ddg"}, "Gaussian noise only"),
        # the scenario asks for it, the run config switches to a discrete mechanism
        ({"scenario": "digits-all", "mechanism": "skellam"}, "Gaussian noise only"),
    ],
)
def test_run_config_refuses_under_its_key(overrides: dict[str, object], message: str) -> None:
    problems = _run_config_problems(**overrides)
    assert "run-config.noise-shape" in problems, problems
    assert message in problems["run-config.noise-shape"]


def test_run_config_refuses_per_coordinate_when_the_scenario_has_no_broadcast_bounds(
    tmp_path: Path,
) -> None:
    path = tmp_path / "no-bounds.toml"
    path.write_text(
        '[data]\ndataset = "digits"\nnum_clients = 20\n'
        "[privacy]\nepsilon = 1.0\ndelta = 1e-5\nbroadcast_bounds = false\n"
    )
    problems = _run_config_problems(scenario=str(path), **{"noise-shape": "per_coordinate"})
    assert "needs broadcast_bounds=true" in problems["run-config.noise-shape"]
    assert _settings(scenario=str(path)).protocol.noise_shape == "uniform"


# --------------------------------------------------------------------------- the result


def test_sigmas_section_is_the_in_process_format() -> None:
    x = np.asarray(load_dataset("digits").features, dtype=np.float64)[:300]
    r = private_statistics(
        x, epsilon=1.0, delta=1e-5, noise_shape="per_coordinate", rng=np.random.default_rng(1)
    )
    assert r.plan is not None
    section = json.loads(json.dumps(sigmas_section(r)))
    in_process = json.loads(json.dumps(result_to_dict(r)))
    assert section == {k: in_process[k] for k in ("sigmas", "stage2_sigmas")}
    want = r.plan.stage2_sigmas(r.mu_prime_broadcast, r.weighted_mean)
    for key in ("dispersion", "q"):
        np.testing.assert_array_equal(section["stage2_sigmas"][key], want[key])
        assert np.ptp(section["stage2_sigmas"][key]) > 0.0  # per coordinate, not one value


def test_flower_result_carries_the_per_coordinate_stage2_sigmas(tmp_path: Path) -> None:
    # a large epsilon: few clients, yet a broadcast inside (0, 1), so the sigmas differ
    overrides = {"noise-shape": "per_coordinate", "epsilon": 100.0}
    config = run_config(tmp_path, scenario_file(tmp_path, 12), **overrides)
    settings = RunSettings.from_run_config(config)
    transport = InMemoryTransport(12, config)
    for context in transport.contexts.values():  # each node's own caps allow epsilon = 100
        context.node_config.update({"measurement-max-epsilon": 100.0, "ledger-max-epsilon": 100.0})
    document = HeterogeneityStrategy(settings).run(transport)
    assert document["status"] == "success"
    # the same values as the run's in-process twin (same seed, same clients, same broadcast
    # up to the fixed-point encoding error)
    reference = reference_statistics(
        partition_scenario(settings.scenario).vectors,
        settings.protocol,
        seed=int(document["seed"]),
        session_size=int(document["n"]),
        stage1=document["partitions_in_sum"]["stage1"],
        stage2=document["partitions_in_sum"]["stage2"],
    )
    want = result_to_dict(reference)["stage2_sigmas"]
    assert set(document["stage2_sigmas"]) == set(want) == {"dispersion", "q"}
    for key, values in want.items():
        got = np.asarray(document["stage2_sigmas"][key])
        assert got.shape == (int(document["d"]),) and np.ptp(got) > 0.0
        np.testing.assert_allclose(got, values, rtol=1e-6)
        assert document["sigmas"][key] == pytest.approx(float(np.sqrt(np.mean(got**2))))
