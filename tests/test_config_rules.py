"""The one configuration pipeline (fa_hetdp.config.rules) seen from every entry point.

Each declared rule is refused by a scenario file, the Flower run config, the ``fa-hetdp run``
flags (exit 2 before Flower starts), the experiment grid and ``ProtocolConfig``; problems are
collected with their dotted keys; the secure-aggregation threshold the scenario reports is the
one the run uses and the server writes.
"""

from __future__ import annotations

import argparse
import copy
import tomllib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import forbid_flower

import fa_hetdp.cli.run as run_module
from fa_hetdp.cli.main import main
from fa_hetdp.config.protocol import ProtocolConfig
from fa_hetdp.config.rules import (
    CROSS_RULES,
    FIELDS,
    ConfigError,
    check_value,
    validate,
)
from fa_hetdp.config.scenario import load_scenario, scenario_from_dict
from fa_hetdp.config.secagg import resolve_threshold
from fa_hetdp.errors import FaHetdpError, PrivacyParameterError, ScenarioError
from fa_hetdp.experiments.grid import GridSpec
from fa_hetdp.flowerkit.settings import RunSettings
from fa_hetdp.secagg.params import choose_parameters
from fa_hetdp.server.strategy import HeterogeneityStrategy
from fa_hetdp.stats.exact import check_variance_floor

ROOT = Path(__file__).resolve().parent.parent
APP_CONFIG: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["flwr"][
    "app"
]["config"]

BASE: dict[str, Any] = {
    "data": {"dataset": "digits", "num_clients": 100, "label_ratios": [1] * 10},
    "privacy": {"epsilon": 1.0, "delta": 1e-5},
    "secagg": {},
}


def scenario_with(section: str, key: str, value: Any) -> dict[str, Any]:
    raw = copy.deepcopy(BASE)
    raw.setdefault(section, {})[key] = value
    return raw


def problems_of(exc: pytest.ExceptionInfo[ConfigError]) -> dict[str, str]:
    return dict(exc.value.problems)


# --------------------------------------------------------------------------------------------
# One rule, every entry point
# --------------------------------------------------------------------------------------------

# (rule, scenario (section, key, value), run-config {key: value}, flag argv or None,
#  grid kwargs or None, ProtocolConfig kwargs or None)
Case = tuple[str, tuple[str, str, Any], dict[str, Any], list[str] | None, Any, Any]
RULES: list[Case] = [
    (
        "epsilon > 0",
        ("privacy", "epsilon", -1.0),
        {"epsilon": -1.0},
        ["--epsilon", "0"],
        {"epsilons": (0.0,)},
        {"epsilon": 0.0},
    ),
    (
        "delta in (0, 1)",
        ("privacy", "delta", 1.0),
        {"delta": 1.0},
        ["--delta", "1"],
        {"delta": 1.0},
        {"delta": 1.0},
    ),
    (
        "mechanism choice",
        ("privacy", "mechanism", "laplace"),
        {"mechanism": "laplace"},
        ["--mechanism", "laplace"],
        {"mechanisms": ("laplace",)},
        {"mechanism": "laplace"},
    ),
    (
        "variance floor in (0, 1/4]",
        ("privacy", "variance_floor", 0.3),
        {"variance-floor": 0.3},
        None,
        {"variance_floor": 0.3},
        {"variance_floor": 0.3},
    ),
    (
        "cgm => not gdp",
        ("privacy", "composition", "gdp"),
        {"composition": "gdp", "mechanism": "cgm"},
        ["--mechanism", "cgm", "--composition", "gdp"],
        None,  # the grid skips such cells instead
        {"mechanism": "cgm", "composition": "gdp"},
    ),
    (
        "min_honest_clients <= n",
        ("privacy", "min_honest_clients", 101),
        {"min-honest-clients": 101},
        None,
        None,  # the grid has no n
        None,
    ),
    (
        "seed >= 0",
        ("experiment", "seed", -3),
        {"mode": "simulation", "seed": -3},
        ["--seed", "-3"],
        {"seed": -3},
        None,
    ),
    (
        "neighbours even >= 4",
        ("secagg", "neighbours", 3),
        {"secagg-neighbours": 3},
        None,
        None,
        None,
    ),
    (
        "threshold count <= holders",
        ("secagg", "threshold", 12),
        {"secagg-neighbours": 10, "secagg-threshold": 12.0},
        None,
        None,
        None,
    ),
    (
        "dropout fraction in [0, 1)",
        ("secagg", "dropout_fraction", 1.0),
        {"mode": "simulation", "dropout-fraction": 1.0},
        None,
        None,
        None,
    ),
    (
        "threat model choice",
        ("secagg", "threat_model", "byzantine"),
        {"secagg-threat-model": "byzantine"},
        None,
        None,
        None,
    ),
    (
        "corrupt fraction (gamma) in [0, 1)",
        ("secagg", "corrupt_fraction", 1.0),
        {"secagg-corrupt-fraction": 1.5},
        None,
        None,
        None,
    ),
    (
        "secagg dropout tolerance (delta) in [0, 1)",
        ("secagg", "dropout_tolerance", -0.1),
        {"secagg-dropout-tolerance": 1.0},
        None,
        None,
        None,
    ),
    (
        "security bits (sigma) in (0, 256]",
        ("secagg", "security_bits", 0),
        {"secagg-security-bits": -40.0},
        None,
        None,
        None,
    ),
    (
        "correctness bits (eta) in (0, 256]",
        ("secagg", "correctness_bits", 300.0),
        {"secagg-correctness-bits": 300.0},
        None,
        None,
        None,
    ),
    (
        "noise shape choice",
        ("privacy", "noise_shape", "gaussian"),
        {"noise-shape": "gaussian"},
        ["--noise-shape", "gaussian"],
        None,
        {"noise_shape": "gaussian"},
    ),
]
IDS = [r[0] for r in RULES]


@pytest.mark.parametrize("case", RULES, ids=IDS)
def test_scenario_refuses(case: Case) -> None:
    rule, (section, key, value) = case[0], case[1]
    raw = scenario_with(section, key, value)
    if rule == "cgm => not gdp":
        raw["privacy"]["mechanism"] = "cgm"
    if rule == "threshold count <= holders":
        raw["secagg"]["neighbours"] = 10
    with pytest.raises(ConfigError) as info:
        scenario_from_dict(raw)
    assert f"{section}.{key}" in problems_of(info)


@pytest.mark.parametrize("case", RULES, ids=IDS)
def test_run_config_refuses(case: Case) -> None:
    rule, run = case[0], case[2]
    config = {**APP_CONFIG, **run}
    with pytest.raises(ConfigError) as info:
        RunSettings.from_run_config(config)
    blamed = {"cgm => not gdp": "composition", "threshold count <= holders": "secagg-threshold"}
    key = blamed.get(rule, next(k for k in run if k != "mode"))
    assert f"run-config.{key}" in problems_of(info)


@pytest.mark.parametrize("case", RULES, ids=IDS)
def test_flags_refused_before_flower_starts(
    case: Case, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    rule, flags = case[0], case[3]
    if flags is None:
        pytest.skip("no flag for this setting")

    forbid_flower(monkeypatch)
    assert main(["run", *flags]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    blamed = "--composition" if rule == "cgm => not gdp" else flags[0]
    # One problem: one line "fa-hetdp run: error: KEY: ..."; several: one indented line each.
    assert any(
        line.strip().startswith(f"{blamed}: ") or f"error: {blamed}: " in line
        for line in err.splitlines()
    ), err


@pytest.mark.parametrize("case", RULES, ids=IDS)
def test_grid_refuses(case: Case) -> None:
    grid = case[4]
    if grid is None:
        pytest.skip("not a grid setting")
    kwargs: dict[str, Any] = {"epsilons": (1.0,), "delta": 1e-5, **grid}
    with pytest.raises(ConfigError) as info:
        GridSpec(**kwargs)
    attribute = next(iter(grid))
    assert any(key.startswith(f"grid.{attribute}") for key in problems_of(info))


@pytest.mark.parametrize("case", RULES, ids=IDS)
def test_protocol_config_refuses(case: Case) -> None:
    rule, config = case[0], case[5]
    if config is None:
        pytest.skip("not a ProtocolConfig field")
    kwargs: dict[str, Any] = {"epsilon": 1.0, "delta": 1e-5, **config}
    with pytest.raises(ConfigError) as info:
        ProtocolConfig(**kwargs)
    blamed = "composition" if rule == "cgm => not gdp" else next(iter(config))
    assert blamed in problems_of(info)


def test_flag_zero_is_a_value_not_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--epsilon 0`` used to run the scenario's epsilon silently."""
    monkeypatch.setattr(run_module, "run_simulation", lambda *a, **k: pytest.fail("started"))
    assert main(["run", "--epsilon", "0"]) == 2


@pytest.mark.parametrize("timeout", ["0", "-5", "nan"])
def test_bad_timeout_flag_refused(
    timeout: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(run_module, "run_simulation", lambda *a, **k: pytest.fail("started"))
    assert main(["run", "--timeout", timeout]) == 2
    assert "--timeout: must be" in capsys.readouterr().err


def test_valid_flags_reach_the_run_config() -> None:
    # cgm needs basic composition (the quickstart uses gdp)
    args = argparse.Namespace(
        epsilon=0.5, delta=None, mechanism="cgm", placement=None, composition="basic", seed=0,
        timeout=10.0,
    )  # fmt: skip
    overrides = run_module.check_flags(args, load_scenario("quickstart"))
    assert overrides == {"epsilon": 0.5, "mechanism": "cgm", "composition": "basic", "seed": 0}


def test_grid_skips_cgm_gdp_with_the_declared_reason() -> None:
    grid = GridSpec(epsilons=(1.0,), delta=1e-5, mechanisms=("agm", "cgm"), compositions=("gdp",))
    assert grid.skip_reason("cgm", "gdp") is not None
    assert grid.skip_reason("agm", "gdp") is None


# --------------------------------------------------------------------------------------------
# Errors: one family, collected, dotted keys
# --------------------------------------------------------------------------------------------


def test_two_bad_fields_are_both_reported() -> None:
    raw = scenario_with("privacy", "epsilon", 0.0)
    raw["secagg"]["neighbours"] = 3
    with pytest.raises(ConfigError) as info:
        scenario_from_dict(raw)
    assert set(problems_of(info)) == {"privacy.epsilon", "secagg.neighbours"}
    text = str(info.value)
    assert "privacy.epsilon: must be > 0" in text and "secagg.neighbours: " in text


def test_grid_collects_problems() -> None:
    with pytest.raises(ConfigError) as info:
        GridSpec(epsilons=(1.0, -2.0), delta=2.0, repeats=0)
    assert set(problems_of(info)) == {"grid.epsilons[1]", "grid.delta", "grid.repeats"}


@pytest.mark.parametrize(
    "call",
    [
        lambda: check_variance_floor(0.3),
        lambda: ProtocolConfig(epsilon=1.0, delta=1e-5, variance_floor=0.3),
        lambda: GridSpec(epsilons=(1.0,), delta=1e-5, variance_floor=0.3),
        lambda: scenario_from_dict(scenario_with("privacy", "variance_floor", 0.3)),
        lambda: RunSettings.from_run_config({**APP_CONFIG, "variance-floor": 0.3}),
    ],
    ids=["stats", "ProtocolConfig", "grid", "scenario", "run-config"],
)
def test_bad_variance_floor_raises_one_error_type(call: Any) -> None:
    with pytest.raises(ConfigError) as info:
        call()
    assert isinstance(info.value, ScenarioError)
    assert isinstance(info.value, PrivacyParameterError)
    assert isinstance(info.value, FaHetdpError)
    assert "(0.0, 0.25]" in str(info.value)


@pytest.mark.parametrize("k", [2, 3, 5])
def test_odd_or_small_degree_refused_at_scenario_time(k: int) -> None:
    with pytest.raises(ConfigError, match=r"secagg\.neighbours: .*even integer k >= 4"):
        scenario_from_dict(scenario_with("secagg", "neighbours", k))


def test_degree_at_least_n_minus_1_is_the_complete_graph() -> None:
    scenario = scenario_from_dict(scenario_with("secagg", "neighbours", 99))
    assert scenario.secagg.degree(100) is None
    assert scenario.secagg.threshold_count(100) == 66  # ceil(2/3 x 99 holders)


# --------------------------------------------------------------------------------------------
# The threshold: one meaning, end to end
# --------------------------------------------------------------------------------------------


def test_threshold_resolution() -> None:
    assert resolve_threshold(0.5, 100, 10) == 5  # ceil(0.5 x 10 holders: never itself)
    assert resolve_threshold(0.5, 100, "complete") == 50  # ceil(0.5 x 99)
    assert resolve_threshold(0.5, 100, 99) == 50  # k >= n - 1: complete
    assert resolve_threshold(0.01, 100, 10) == 2  # at least 2
    assert resolve_threshold(7, 100, 10) == 7  # a count


def test_scenario_threshold_is_the_run_threshold_and_the_reported_one(tmp_path: Path) -> None:
    path = tmp_path / "sparse.toml"
    path.write_text(
        "[data]\n"
        'dataset = "digits"\nnum_clients = 100\nlabel_ratios = [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n'
        "[privacy]\nepsilon = 1.0\ndelta = 1e-5\n"
        "[secagg]\nthreshold = 0.5\nneighbours = 10\n"
    )
    scenario = load_scenario(path)
    derived = scenario.to_dict()["derived"]["secagg_threshold_count"]
    settings = RunSettings.from_run_config({**APP_CONFIG, "scenario": str(path)})
    document = HeterogeneityStrategy(settings).base_document()
    assert derived == settings.threshold == document["secagg_threshold"] == 5
    assert settings.neighbours == 10 and document["secagg_neighbours"] == 10


def test_auto_scenario_k_and_t_are_the_run_ones_and_the_reported_ones(tmp_path: Path) -> None:
    path = tmp_path / "auto.toml"
    path.write_text(
        "[data]\n"
        'dataset = "digits"\nnum_clients = 100\nlabel_ratios = [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n'
        "[privacy]\nepsilon = 1.0\ndelta = 1e-5\n"
        '[secagg]\nthreshold = "auto"\nneighbours = "auto"\n'
        "corrupt_fraction = 0.125\ndropout_tolerance = 0.125\n"
    )
    scenario = load_scenario(path)
    derived = scenario.to_dict()["derived"]
    chosen = choose_parameters(100, gamma=0.125, delta=0.125)
    settings = RunSettings.from_run_config({**APP_CONFIG, "scenario": str(path)})
    document = HeterogeneityStrategy(settings).base_document()
    assert (chosen.degree, chosen.threshold) == (54, 31)  # sparse: 54 < n - 1
    assert derived["secagg_threshold_count"] == settings.threshold == chosen.threshold
    assert document["secagg_threshold"] == document["secagg"]["threshold"] == chosen.threshold
    assert derived["secagg_degree"] == settings.neighbours == chosen.degree
    assert document["secagg_neighbours"] == document["secagg"]["degree"] == chosen.degree
    assert derived["secagg_guarantee"] == document["secagg"]["guarantee"] == chosen.guarantee()
    assert document["secagg"]["corrupt_fraction"] == 0.125
    assert document["secagg"]["dropout_tolerance"] == 0.125
    # a run-config override of n re-chooses (k, t) for the new n, as the scenario would
    small = RunSettings.from_run_config({**APP_CONFIG, "scenario": str(path), "num-clients": 60})
    again = choose_parameters(60, gamma=0.125, delta=0.125)
    expected_degree = None if again.complete else again.degree
    assert (small.neighbours, small.threshold) == (expected_degree, again.threshold)


def test_run_config_threshold_override_has_the_same_meaning() -> None:
    settings = RunSettings.from_run_config(
        {**APP_CONFIG, "secagg-threshold": 0.5, "secagg-neighbours": 10}
    )
    assert settings.threshold == resolve_threshold(0.5, 100, 10) == 5


# --------------------------------------------------------------------------------------------
# The table itself, and a fuzz of the validator
# --------------------------------------------------------------------------------------------


def test_every_cross_rule_names_declared_fields() -> None:
    for rule in CROSS_RULES:
        assert rule.blame in rule.fields
        assert all(name in FIELDS or name == "split" for name in rule.fields), rule.name


_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**6), max_value=10**6),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.sampled_from(["agm", "cgm", "gdp", "basic", "complete", "stage1", "simulation"]),
    st.lists(st.floats(min_value=-2, max_value=2), max_size=3),
    st.dictionaries(st.text(max_size=6), st.floats(), max_size=3),
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from([*FIELDS, "split"]), _VALUES, max_size=12))
def test_validator_fuzz_returns_problems_never_raises(values: dict[str, Any]) -> None:
    problems = validate(values, lambda name: f"fuzz.{name}", lists=("epsilon",))
    assert all(key.startswith("fuzz.") and message for key, message in problems)
    for name, value in values.items():
        if name not in ("split", "epsilon") and check_value(name, value) is not None:
            assert f"fuzz.{name}" in dict(problems)


_SECTION_VALUES = st.dictionaries(
    st.sampled_from(
        ["epsilon", "delta", "mechanism", "num_clients", "dataset", "threshold", "neighbours",
         "seed", "split", "variance_floor", "label_ratios", "dropout_fraction", "bogus"]
    ),
    _VALUES,
    max_size=6,
)  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(
    st.one_of(
        st.dictionaries(
            st.sampled_from(["data", "privacy", "secagg", "experiment", "protocol", "x"]),
            st.one_of(_SECTION_VALUES, _VALUES),
            max_size=5,
        ),
        _VALUES,
    )
)
def test_scenario_fuzz_raises_only_config_errors(raw: Any) -> None:
    try:
        scenario_from_dict(raw)
    except ConfigError:
        pass
