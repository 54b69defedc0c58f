"""The meta-analysis' settings and figures are declared once (issue 25 item 5).

Every meta setting is a :class:`~fa_hetdp.config.settings.Setting` with ``meta=True``:
:class:`~fa_hetdp.protocol.meta_plan.MetaSettings` takes its default and its rule from there
(one validator, every problem in one error), a run's value reaches the plan the node and the
server build (:func:`fa_hetdp.flowerkit.settings.meta_settings`), and a meta setting added in a
test is found everywhere. The figures (:data:`fa_hetdp.stats.meta_figures.META_FIGURES`) are
read by the plan, the planner and the report. The unit of privacy has one default
(``"client"``); :func:`fa_hetdp.private_meta_analysis` asks for it.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fa_hetdp.config.constraints import Field, Integer
from fa_hetdp.config.rules import ConfigError
from fa_hetdp.config.scenario import scenario_from_dict
from fa_hetdp.config.settings import SETTINGS, Setting, markdown_table, meta_settings
from fa_hetdp.errors import PrivacyParameterError
from fa_hetdp.flowerkit.settings import RunSettings
from fa_hetdp.flowerkit.settings import meta_settings as run_meta_settings
from fa_hetdp.protocol.meta_plan import UNIT_REQUIRED, MetaSettings, settings_from
from fa_hetdp.stats.meta_figures import META_FIGURES

ROOT = Path(__file__).resolve().parents[1]
APP_CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["flwr"]["app"]["config"]

KNOB = Setting(
    name="test_meta_knob",
    rule=Field((Integer(minimum=1),)),
    default=3,
    help="a meta-analysis knob that only this test declares",
    run_config="test-meta-knob",
    unset=0,
    protocol=False,
    meta=True,
)


@pytest.fixture
def knob(monkeypatch: pytest.MonkeyPatch) -> Setting:
    """Register ``test_meta_knob`` in the table, and nowhere else."""
    monkeypatch.setitem(SETTINGS, KNOB.name, KNOB)
    return KNOB


def _scenario(**privacy: Any) -> dict[str, Any]:
    return {
        "data": {"dataset": "digits", "num_clients": 20},
        "privacy": {"epsilon": 1.0, "delta": 1e-5, **privacy},
        "experiment": {"repeats": 1, "seed": 0},
    }


def test_meta_settings_take_the_declared_defaults() -> None:
    settings = MetaSettings()
    declared = list(meta_settings())
    assert {"kappa", "kappa_star", "floor_fraction", "min_floor", "clip_correction"} <= {
        s.name for s in declared
    }
    for setting in declared:
        assert settings.setting(setting.name) == setting.default, setting.name
        assert setting.run_config is not None, setting.name  # reaches a run


def test_a_meta_setting_added_in_a_test_is_found_everywhere(knob: Setting) -> None:
    assert MetaSettings().setting("test_meta_knob") == 3  # its declared default
    assert settings_from(privacy_unit="record", test_meta_knob=5).setting("test_meta_knob") == 5
    with pytest.raises(ConfigError, match=r"test_meta_knob: must be >= 1, got 0"):
        MetaSettings(extra={"test_meta_knob": 0})
    assert scenario_from_dict(_scenario(test_meta_knob=7)).setting("test_meta_knob") == 7
    assert "`test_meta_knob`" in markdown_table()
    run = RunSettings.from_run_config({**APP_CONFIG, "mode": "simulation", "test-meta-knob": 9})
    assert run_meta_settings(run).setting("test_meta_knob") == 9  # the node's and the server's


def test_a_run_configs_meta_settings_reach_the_plan() -> None:
    run = RunSettings.from_run_config(
        {
            **APP_CONFIG,
            "mode": "simulation",
            "kappa": 2.5,
            "floor-fraction": 0.5,
            "clip-correction": "false",
        }
    )
    meta = run_meta_settings(run)
    assert (meta.kappa, meta.floor_fraction, meta.clip_correction) == (2.5, 0.5, False)
    with pytest.raises(ConfigError, match=r"run-config\.kappa: must be > 0.0, got -1"):
        RunSettings.from_run_config({**APP_CONFIG, "mode": "simulation", "kappa": -1.0})


def test_every_bad_value_is_listed_in_one_error() -> None:
    with pytest.raises(PrivacyParameterError) as info:
        MetaSettings(kappa=-1.0, floor_fraction=2.0, placement="nowhere")
    assert isinstance(info.value, ConfigError)
    keys = [key for key, _ in info.value.problems]
    assert sorted(keys) == ["floor_fraction", "kappa", "placement"]
    assert "(3 problems)" in str(info.value)


def test_the_unit_of_privacy_has_one_default_and_the_api_asks_for_it() -> None:
    from fa_hetdp import private_meta_analysis

    assert SETTINGS["privacy_unit"].default == "client"
    assert MetaSettings().privacy_unit == "client"
    assert scenario_from_dict(_scenario()).setting("privacy_unit") == "client"
    rng = np.random.default_rng(0)
    x = rng.uniform(size=(60, 2))
    ids = np.repeat(np.arange(3), 20)
    with pytest.raises(PrivacyParameterError) as info:
        private_meta_analysis(x, ids, epsilon=1.0, delta=1e-5, rng=0)
    assert str(info.value) == UNIT_REQUIRED
    assert "'record'" in UNIT_REQUIRED and "'client'" in UNIT_REQUIRED


def test_the_figures_are_read_from_the_one_table() -> None:
    from fa_hetdp.accuracy.meta_planner import META_STATISTICS as PLANNED
    from fa_hetdp.accuracy.meta_planner import RELATIVE
    from fa_hetdp.protocol.meta_plan import META_STATISTICS as RELEASES
    from fa_hetdp.report.meta import META_STATISTICS as ROWS

    by_key = {f.key: f for f in META_FIGURES}
    assert dict(RELEASES) == {k: f.releases for k, f in by_key.items() if f.derived is None}
    assert dict(PLANNED) == {k: f.display for k, f in by_key.items() if f.planned}
    assert RELATIVE == {k for k, f in by_key.items() if f.relative}
    assert ROWS == tuple(k for k, f in by_key.items() if not f.scalar)
