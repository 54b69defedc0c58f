"""Every privacy setting is declared once (issue 18, item 1).

One :class:`~fa_hetdp.config.settings.Setting` in :data:`~fa_hetdp.config.settings.SETTINGS`
is all a new setting needs to reach the validator, the scenario file, the Flower run-config
reader, the CLI flags of ``fa-hetdp run`` and the documented table: the test registers one
(``test_knob``) and finds it, with its default and its rule, everywhere, with no other change.
The tables that cannot be computed at run time (``scenarios/README.md``'s and
``pyproject.toml``'s ``[tool.flwr.app.config]``) are checked against the declarations.
"""

from __future__ import annotations

import argparse
import dataclasses
import tomllib
from pathlib import Path
from typing import Any

import pytest

from fa_hetdp.config.constraints import Field, Integer
from fa_hetdp.config.protocol import ProtocolConfig
from fa_hetdp.config.rules import ConfigError, validate
from fa_hetdp.config.scenario import scenario_from_dict
from fa_hetdp.config.settings import PRESETS, SETTINGS, Setting, markdown_table
from fa_hetdp.flowerkit.settings import RunSettings

ROOT = Path(__file__).resolve().parents[1]
APP_CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["flwr"]["app"]["config"]

KNOB = Setting(
    name="test_knob",
    rule=Field((Integer(minimum=1),)),
    default=3,
    help="a knob that only this test declares",
    run_config="test-knob",
    unset=0,
    flag="--test-knob",
    protocol=False,
)


@pytest.fixture
def knob(monkeypatch: pytest.MonkeyPatch) -> Setting:
    """Register ``test_knob`` in the table, and nowhere else."""
    monkeypatch.setitem(SETTINGS, KNOB.name, KNOB)
    return KNOB


def _scenario(**privacy: Any) -> dict[str, Any]:
    return {
        "data": {"dataset": "digits", "num_clients": 20},
        "privacy": {"epsilon": 1.0, "delta": 1e-5, **privacy},
        "experiment": {"repeats": 1, "seed": 0},
    }


def test_the_validator_applies_the_declared_rule(knob: Setting) -> None:
    assert validate({"test_knob": 2}, {}) == []
    assert validate({"test_knob": 0}, {}) == [("test_knob", "must be >= 1, got 0")]


def test_a_scenario_file_takes_the_key_with_its_default_and_rule(knob: Setting) -> None:
    assert scenario_from_dict(_scenario()).setting("test_knob") == 3  # the declared default
    assert scenario_from_dict(_scenario(test_knob=7)).setting("test_knob") == 7
    with pytest.raises(ConfigError, match=r"privacy\.test_knob: must be >= 1, got 0"):
        scenario_from_dict(_scenario(test_knob=0))


def _run_config(**overrides: Any) -> dict[str, Any]:
    return {**APP_CONFIG, "mode": "simulation", **overrides}


def test_the_run_config_reader_overrides_it_by_its_kebab_key(knob: Setting) -> None:
    unset = RunSettings.from_run_config(_run_config())
    assert unset.settings["test_knob"] == 3  # unset (absent or 0): the scenario's, its default
    assert RunSettings.from_run_config(_run_config(**{"test-knob": 5})).settings["test_knob"] == 5
    with pytest.raises(ConfigError, match=r"run-config\.test-knob: must be >= 1, got -2"):
        RunSettings.from_run_config(_run_config(**{"test-knob": -2}))
    with pytest.raises(ConfigError, match=r"run-config\.test-knob: must be an integer"):
        RunSettings.from_run_config(_run_config(**{"test-knob": "x"}))


def test_the_cli_has_its_flag_with_its_help_line(knob: Setting) -> None:
    from fa_hetdp.cli.run import add_arguments, check_flags

    parser = argparse.ArgumentParser(prog="fa-hetdp run")
    add_arguments(parser)
    text = " ".join(parser.format_help().split())
    assert "--test-knob" in text
    assert "a knob that only this test declares (an integer >= 1" in text
    scenario = scenario_from_dict(_scenario())
    args = parser.parse_args(["--test-knob", "0"])
    with pytest.raises(ConfigError, match=r"--test-knob: must be >= 1, got 0"):
        check_flags(args, scenario)


def test_the_docs_table_lists_it_with_its_default(knob: Setting) -> None:
    rows = [line for line in markdown_table().splitlines() if "`test_knob`" in line]
    assert rows == ["| `test_knob` | an integer >= 1 | 3 | a knob that only this test declares |"]


# --------------------------------------------------------------------------------------------
# The files that cannot be derived at run time agree with the declarations
# --------------------------------------------------------------------------------------------


def test_scenarios_readme_holds_the_generated_table() -> None:
    text = (ROOT / "scenarios" / "README.md").read_text()
    start, end = "<!-- settings:privacy:start -->", "<!-- settings:privacy:end -->"
    assert start in text and end in text, "scenarios/README.md lost its generated table markers"
    shown = text.split(start, 1)[1].split(end, 1)[0].strip()
    assert shown == markdown_table().strip(), (
        "scenarios/README.md's [privacy] table is out of date: run "
        "`python -m fa_hetdp.config.settings --write`"
    )


def test_pyproject_lists_every_run_config_key_at_its_unset_value() -> None:
    for setting in SETTINGS.values():
        if setting.run_config is not None:
            assert APP_CONFIG.get(setting.run_config) == setting.unset, setting.run_config


def test_protocol_config_defaults_are_the_declared_ones() -> None:
    config = ProtocolConfig(epsilon=1.0, delta=1e-5)
    resolved = {"noise_shape": "per_coordinate", "dispersion_center": "optimal"}  # of "auto"
    for setting in SETTINGS.values():
        if setting.protocol and setting.required is None:
            expected = resolved[setting.name] if setting.default == "auto" else setting.default
            assert getattr(config, setting.name) == expected, setting.name


# --------------------------------------------------------------------------------------------
# Presets: a set of settings asked for by name (issue 18 item 1, "one set of defaults")
# --------------------------------------------------------------------------------------------


def test_protocol_config_means_what_private_statistics_runs() -> None:
    """One set of defaults: ``ProtocolConfig(ε, δ)`` is the recommended preset and the plan
    of ``private_statistics(ε, δ)`` (issue 18 item 1)."""
    from fa_hetdp import private_statistics

    default = ProtocolConfig(epsilon=1.0, delta=1e-5)
    assert default == ProtocolConfig.preset("recommended", epsilon=1.0, delta=1e-5)
    values = [[0.1, 0.9, 0.5], [0.2, 0.8, 0.4], [0.3, 0.7, 0.6], [0.4, 0.6, 0.5]] * 5
    result = private_statistics(values, epsilon=1.0, delta=1e-5, rng=0)
    assert result.plan.config == default
    # the levers a mechanism rules out resolve, once, to a value it allows ("auto")
    ddg = ProtocolConfig(epsilon=1.0, delta=1e-5, mechanism="ddg")
    assert (ddg.noise_shape, ddg.dispersion_center) == ("uniform", "optimal")
    assert (default.noise_shape, default.dispersion_center) == ("per_coordinate", "optimal")
    off = ProtocolConfig(epsilon=1.0, delta=1e-5, broadcast_bounds=False)
    assert (off.noise_shape, off.dispersion_center) == ("uniform", "broadcast")


def test_the_recommended_preset_is_what_private_statistics_runs() -> None:
    from fa_hetdp.protocol.recommended import recommended_config

    for settings in ({}, {"mechanism": "ddg"}, {"broadcast_bounds": False}):
        preset = ProtocolConfig.preset("recommended", epsilon=1.0, delta=1e-5, **settings)
        assert preset == recommended_config(epsilon=1.0, delta=1e-5, **settings)


def test_the_paper_preset_names_the_papers_settings() -> None:
    paper = ProtocolConfig.preset("paper", epsilon=1.0, delta=1e-5)
    assert (paper.composition, paper.broadcast_bounds, paper.adaptive_floor) == ("basic", 0, 0)
    stated = ProtocolConfig.preset("paper", epsilon=1.0, delta=1e-5, composition="gdp")
    assert stated.composition == "gdp"  # a setting given wins over the preset
    with pytest.raises(ValueError, match="unknown preset 'fast'; allowed: recommended, paper"):
        ProtocolConfig.preset("fast", epsilon=1.0, delta=1e-5)


def test_a_scenario_asks_for_a_preset_by_name() -> None:
    paper = scenario_from_dict(_scenario(preset="paper")).privacy
    assert (paper.composition, paper.broadcast_bounds) == ("basic", False)
    stated = scenario_from_dict(_scenario(preset="paper", composition="gdp")).privacy
    assert stated.composition == "gdp"  # a key stated in the file wins over the preset
    with pytest.raises(ConfigError, match=r"privacy\.preset: unknown value 'fast'"):
        scenario_from_dict(_scenario(preset="fast"))


@pytest.mark.parametrize("path", sorted((ROOT / "scenarios" / "paper").glob("*.toml")))
def test_paper_scenarios_ask_for_the_paper_preset_and_keep_their_settings(path: Path) -> None:
    raw = tomllib.loads(path.read_text())
    assert raw["privacy"].get("preset") == "paper"
    # REPRODUCTION.md's settings: the keys the file states, the rest from the preset (the
    # defaults are not the paper's: adaptive floor, per-coordinate noise, optimal centre)
    paper = {k: v for k, v in raw["privacy"].items() if k != "preset"}
    stated = {**raw, "privacy": {**PRESETS["paper"], **paper}}
    expected = dataclasses.replace(scenario_from_dict(stated).privacy, preset="paper")
    privacy = scenario_from_dict(raw).privacy
    assert privacy == expected
    assert (privacy.adaptive_floor, privacy.noise_shape, privacy.dispersion_center) == (
        False,
        "uniform",
        "broadcast",
    )


# --------------------------------------------------------------------------------------------
# A new setting in three places: its declaration, the code that reads it, pyproject.toml
# (issue 18 item 2): ProtocolConfig and private_statistics carry it without a field
# --------------------------------------------------------------------------------------------


def test_the_setting_reaches_protocol_config_without_a_field(knob: Setting) -> None:
    assert ProtocolConfig(epsilon=1.0, delta=1e-5).setting("test_knob") == 3  # its default
    given = ProtocolConfig(epsilon=1.0, delta=1e-5, extra={"test_knob": 7})
    assert given.setting("test_knob") == 7 and given.setting("mechanism") == "agm"
    preset = ProtocolConfig.preset("recommended", epsilon=1.0, delta=1e-5, test_knob=5)
    assert preset.setting("test_knob") == 5
    with pytest.raises(ConfigError, match=r"test_knob: must be >= 1, got 0"):
        ProtocolConfig(epsilon=1.0, delta=1e-5, extra={"test_knob": 0})
    with pytest.raises(ConfigError, match=r"extra: unknown 'nope'; allowed: .*test_knob"):
        ProtocolConfig(epsilon=1.0, delta=1e-5, extra={"nope": 1})
    with pytest.raises(KeyError, match="unknown setting 'nope'"):
        ProtocolConfig(epsilon=1.0, delta=1e-5).setting("nope")


def test_private_statistics_takes_the_setting_by_name(knob: Setting) -> None:
    from fa_hetdp import private_statistics

    values = [[0.1, 0.9, 0.5], [0.2, 0.8, 0.4], [0.3, 0.7, 0.6], [0.4, 0.6, 0.5]] * 5
    result = private_statistics(values, epsilon=1.0, delta=1e-5, rng=0, test_knob=6)
    assert result.plan is not None and result.plan.config.setting("test_knob") == 6
    with pytest.raises(ConfigError, match=r"test_knob: must be >= 1, got 0"):
        private_statistics(values, epsilon=1.0, delta=1e-5, rng=0, test_knob=0)


def test_a_scenario_and_a_run_config_carry_it_to_protocol_config(knob: Setting) -> None:
    from fa_hetdp.experiments.engine import _config
    from fa_hetdp.experiments.grid import grid_from_scenario

    grid = grid_from_scenario(scenario_from_dict(_scenario(test_knob=4)))
    assert _config(grid, 1.0, "agm", "distributed", "gdp").setting("test_knob") == 4
    run = RunSettings.from_run_config(_run_config(**{"test-knob": 9}))
    assert run.protocol.setting("test_knob") == 9


def test_write_rewrites_the_marked_table(tmp_path: Path, knob: Setting) -> None:
    from fa_hetdp.config.settings import TABLE_END, TABLE_START, write_table

    readme = tmp_path / "README.md"
    readme.write_text(f"before\n{TABLE_START}\nold table\n{TABLE_END}\nafter\n")
    assert write_table(readme) is True
    text = readme.read_text()
    assert text == f"before\n{TABLE_START}\n{markdown_table()}\n{TABLE_END}\nafter\n"
    assert "`test_knob`" in text
    assert write_table(readme) is False  # up to date: untouched
    readme.write_text("no markers\n")
    with pytest.raises(ValueError, match="lacks the markers"):
        write_table(readme)


def test_the_grid_defaults_are_the_declared_ones() -> None:
    # GridSpec (the in-process engine's grid) had defaults of its own (adaptive floor off,
    # uniform noise, broadcast centre) after ProtocolConfig's became the recommended ones.
    import dataclasses

    from fa_hetdp.config.settings import SETTINGS
    from fa_hetdp.experiments.grid import GridSpec

    grid = GridSpec(epsilons=(1.0,), delta=1e-5)
    for field in dataclasses.fields(GridSpec):
        if field.name in SETTINGS and field.default is not dataclasses.MISSING:
            assert getattr(grid, field.name) == SETTINGS[field.name].default, field.name
