"""The Z_2^32 option: ``[secagg] modulus_bits`` through the one validator to the encoding."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from fa_hetdp.config.rules import ConfigError
from fa_hetdp.config.scenario import scenario_from_dict

BASE: dict[str, Any] = {
    "data": {"dataset": "digits", "num_clients": 8, "label_ratios": [1] * 10},
    "privacy": {"epsilon": 1.0, "delta": 1e-5},
}


def with_modulus(bits: object) -> dict[str, Any]:
    raw = copy.deepcopy(BASE)
    raw["secagg"] = {"modulus_bits": bits}
    return raw


def test_scenario_default_is_64_and_32_is_accepted() -> None:
    assert scenario_from_dict(copy.deepcopy(BASE)).secagg.modulus_bits == 64
    scenario = scenario_from_dict(with_modulus(32))
    assert scenario.secagg.modulus_bits == 32
    assert scenario.to_dict()["secagg"]["modulus_bits"] == 32


@pytest.mark.parametrize(
    ("bits", "message"),
    [
        (48, r"must be one of \(64, 32\).*got 48"),
        (16, r"must be one of \(64, 32\).*got 16"),
        ("32", "must be an integer"),
        (True, "must be an integer"),
    ],
)
def test_scenario_refuses_other_rings_with_the_key(bits: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        scenario_from_dict(with_modulus(bits))
    assert "secagg.modulus_bits" in str(info.value)
