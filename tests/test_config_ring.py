"""The secagg ring by mechanism: one resolution (config.secagg.resolve_modulus_bits), the
scenario's ``[secagg] modulus_bits`` and the run-config key ``secagg-modulus-bits``."""

from __future__ import annotations

import copy
import tomllib
from pathlib import Path
from typing import Any

import pytest

from fa_hetdp.config.rules import ConfigError
from fa_hetdp.config.scenario import scenario_from_dict
from fa_hetdp.config.secagg import DEFAULT_MODULUS_BITS, resolve_modulus_bits
from fa_hetdp.errors import PrivacyParameterError
from fa_hetdp.flowerkit.settings import UNSET, RunSettings
from fa_hetdp.server.results import secagg_section

ROOT = Path(__file__).resolve().parent.parent
APP_CONFIG: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["flwr"][
    "app"
]["config"]

BASE: dict[str, Any] = {
    "data": {"dataset": "digits", "num_clients": 8, "label_ratios": [1] * 10},
    "privacy": {"epsilon": 1.0, "delta": 1e-5},
}
DEFAULTS = {"agm": 64, "cgm": 64, "ddg": 32, "skellam": 32}


def scenario(mechanism: object = "agm", modulus_bits: object = None) -> dict[str, Any]:
    raw = copy.deepcopy(BASE)
    raw["privacy"]["mechanism"] = mechanism
    if mechanism == "cgm":
        raw["privacy"]["composition"] = "basic"
    if modulus_bits is not None:
        raw["secagg"] = {"modulus_bits": modulus_bits}
    return raw


# --------------------------------------------------------------------------------------------
# The one resolution
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("mechanism", "bits"), sorted(DEFAULTS.items()))
def test_default_follows_the_mechanism(mechanism: str, bits: int) -> None:
    assert resolve_modulus_bits(None, mechanism) == bits
    assert DEFAULT_MODULUS_BITS == {"discrete": 32, "gaussian": 64}


@pytest.mark.parametrize("mechanism", sorted(DEFAULTS))
@pytest.mark.parametrize("stated", [32, 64])
def test_an_explicit_ring_wins_both_ways(mechanism: str, stated: int) -> None:
    assert resolve_modulus_bits(stated, mechanism) == stated


def test_an_unknown_mechanism_is_refused_with_the_names() -> None:
    with pytest.raises(PrivacyParameterError, match="agm"):
        resolve_modulus_bits(None, "laplace")


# --------------------------------------------------------------------------------------------
# The scenario: left out is None (the mechanism's), stated wins, to_dict round-trips
# --------------------------------------------------------------------------------------------


def test_scenario_left_out_resolves_per_mechanism_of_a_grid() -> None:
    spec = scenario_from_dict(scenario(["agm", "ddg", "skellam"]))
    assert spec.secagg.modulus_bits is None
    assert [spec.secagg.ring_bits(m) for m in ("agm", "ddg", "skellam")] == [64, 32, 32]
    document = spec.to_dict()
    assert "modulus_bits" not in document["secagg"]  # TOML has no None: left out
    assert document["derived"]["secagg_modulus_bits"] == {"agm": 64, "ddg": 32, "skellam": 32}
    assert scenario_from_dict(document) == spec


@pytest.mark.parametrize(("mechanism", "stated"), [("ddg", 64), ("skellam", 64), ("agm", 32)])
def test_scenario_stated_ring_wins(mechanism: str, stated: int) -> None:
    spec = scenario_from_dict(scenario(mechanism, stated))
    assert spec.secagg.ring_bits(mechanism) == stated
    assert spec.to_dict()["secagg"]["modulus_bits"] == stated
    assert spec.to_dict()["derived"]["secagg_modulus_bits"] == {mechanism: stated}


def test_scenario_refuses_zero_with_the_default_explained() -> None:
    with pytest.raises(ConfigError, match=r"secagg\.modulus_bits: must be one of \(64, 32\)") as e:
        scenario_from_dict(scenario("ddg", 0))
    assert "32 for ddg and skellam and 64 for the Gaussian" in str(e.value)


# --------------------------------------------------------------------------------------------
# The run-config key secagg-modulus-bits
# --------------------------------------------------------------------------------------------


def run_config(**overrides: object) -> dict[str, Any]:
    out = dict(APP_CONFIG)
    out["mode"] = "simulation"
    out.update(overrides)
    return out


def test_pyproject_declares_the_key_unset() -> None:
    assert APP_CONFIG["secagg-modulus-bits"] == UNSET["secagg-modulus-bits"] == 0


@pytest.mark.parametrize(("mechanism", "bits"), sorted(DEFAULTS.items()))
def test_run_config_unset_takes_the_mechanism_default(mechanism: str, bits: int) -> None:
    extra = {"composition": "basic"} if mechanism == "cgm" else {}
    settings = RunSettings.from_run_config(run_config(mechanism=mechanism, **extra))
    assert settings.modulus_bits == bits


@pytest.mark.parametrize(("mechanism", "stated"), [("ddg", 64), ("skellam", 64), ("agm", 32)])
def test_run_config_override_wins_both_ways(mechanism: str, stated: int) -> None:
    config = run_config(mechanism=mechanism, **{"secagg-modulus-bits": stated})
    assert RunSettings.from_run_config(config).modulus_bits == stated


def test_run_config_unset_takes_the_scenarios_stated_ring(tmp_path: Path) -> None:
    path = tmp_path / "ring.toml"
    path.write_text(
        '[data]\ndataset = "digits"\nnum_clients = 8\nlabel_ratios = [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]'
        "\n"
        '[privacy]\nepsilon = 1.0\ndelta = 1e-5\nmechanism = "ddg"\n'
        "[secagg]\nmodulus_bits = 64\n"
    )
    assert RunSettings.from_run_config(run_config(scenario=str(path))).modulus_bits == 64
    config = run_config(scenario=str(path), **{"secagg-modulus-bits": 32})
    assert RunSettings.from_run_config(config).modulus_bits == 32


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (48, r"must be one of \(64, 32\).*run config: 0.*got 48"),
        (16, r"must be one of \(64, 32\).*got 16"),
        (-1, r"must be one of \(64, 32\).*got -1"),
        ("x", r"must be an integer: 0 \(the scenario's.*32 or 64, got 'x'"),
        (32.0, r"must be an integer: 0 .*32 or 64, got 32.0"),
        (True, r"must be an integer: 0 .*got True"),
    ],
)
def test_run_config_refuses_a_bad_ring_naming_the_key(value: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        RunSettings.from_run_config(run_config(**{"secagg-modulus-bits": value}))
    assert [key for key, _ in info.value.problems] == ["run-config.secagg-modulus-bits"]


@pytest.mark.parametrize(
    ("mechanism", "stated", "recorded"),
    [("ddg", 0, 32), ("skellam", 0, 32), ("agm", 0, 64), ("ddg", 64, 64), ("agm", 32, 32)],
)
def test_the_result_document_records_the_ring_used(
    mechanism: str, stated: int, recorded: int
) -> None:
    config = run_config(mechanism=mechanism, **{"secagg-modulus-bits": stated})
    assert secagg_section(RunSettings.from_run_config(config))["modulus_bits"] == recorded
