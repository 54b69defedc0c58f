"""Tests of fa_hetdp.config.scenario: the shipped files, the schema's validation, round trips."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import pytest

from fa_hetdp.config.scenario import (
    available_scenarios,
    default_scenario,
    load_scenario,
    scenario_from_dict,
    scenarios_dir,
)
from fa_hetdp.config.schema import Scenario
from fa_hetdp.config.skew import SKEW_LEVELS, skew_scenario, skew_scenario_name
from fa_hetdp.errors import ScenarioError

PAPER_EPSILONS = [0.25 * k for k in range(1, 21)]

# ---------------------------------------------------------------------------------------------
# Shipped scenarios
# ---------------------------------------------------------------------------------------------

SHIPPED = available_scenarios()


def test_shipped_scenarios_found() -> None:
    assert (scenarios_dir() / "README.md").is_file()
    assert "quickstart" in SHIPPED and "synthetic-10k" in SHIPPED
    assert len([s for s in SHIPPED if s.startswith("paper/")]) == 18
    assert len([s for s in SHIPPED if s.startswith("digits/digits-")]) >= 6


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_scenario_loads_and_round_trips(name: str) -> None:
    scenario = load_scenario(name)
    assert scenario.name == Path(name).name  # [scenario] name = file stem
    as_dict = scenario.to_dict()
    json.dumps(as_dict)  # JSON-able for results files
    again = scenario_from_dict(as_dict, path=scenario.path)
    assert again == scenario
    assert hash(again) == hash(scenario)


@pytest.mark.parametrize("dataset", ["cifar10", "cifar100", "fashion-mnist", "digits"])
@pytest.mark.parametrize("level", list(SKEW_LEVELS))
def test_paper_settings(dataset: str, level: str) -> None:
    scenario = skew_scenario(dataset, level)
    assert skew_scenario_name(dataset, level) in SHIPPED
    assert scenario.data.dataset == dataset
    assert scenario.data.label_ratios == SKEW_LEVELS[level]
    assert list(scenario.privacy.epsilons) == PAPER_EPSILONS
    assert scenario.privacy.delta == 1e-5
    assert scenario.privacy.mechanisms == ("agm", "cgm")
    assert scenario.protocol.placements == ("distributed", "central")
    assert scenario.data.records_per_client == 1
    if dataset == "digits":
        assert scenario.num_clients == 100
    else:
        # The paper's 2 % sample of the training images.
        assert scenario.data.sample_fraction == 0.02
        assert scenario.num_clients == (1200 if dataset == "fashion-mnist" else 1000)
    counts = scenario.clients_per_label()
    assert counts is not None and sum(counts) == scenario.num_clients
    if level.startswith("skew"):
        assert counts[1] == scenario.num_clients // 100  # 91:1.., 96:1.., 99:1 sum to 100


def test_synthetic_10k() -> None:
    scenario = load_scenario("synthetic-10k")
    assert scenario.num_clients == 10_000
    assert scenario.data.synthetic is not None and scenario.data.synthetic.dim == 3072


def test_default_scenario_is_quickstart() -> None:
    scenario = default_scenario()
    assert scenario.name == "quickstart"
    assert scenario.data.dataset == "digits"
    assert scenario.privacy.epsilons == (1.0,) and scenario.privacy.delta == 1e-5


def test_grid_and_helpers() -> None:
    scenario = skew_scenario("digits", "iid10")
    grid = scenario.grid()
    assert len(grid) == 20 * 2 * 2
    assert grid[0].epsilon == 0.25 and grid[-1].epsilon == 5.0
    assert {(g.mechanism, g.placement) for g in grid[:4]} == {
        ("agm", "distributed"),
        ("agm", "central"),
        ("cgm", "distributed"),
        ("cgm", "central"),
    }
    assert scenario.secagg.threshold_count(100) == 66  # ceil(2/3 x 99 holders)
    assert load_scenario("digits/digits-dropout").secagg.num_dropouts(100) == 10


def test_load_by_path_and_with_suffix(tmp_path: Path) -> None:
    path = tmp_path / "mine.toml"
    path.write_text(
        "[data]\ndataset = 'digits'\nnum_clients = 10\n[privacy]\nepsilon = 2\ndelta = 1e-6\n"
    )
    scenario = load_scenario(path)
    assert scenario.name == "mine" and scenario.path == str(path)
    assert scenario.privacy.epsilons == (2.0,)
    assert load_scenario("quickstart.toml") == load_scenario("quickstart")


def test_unknown_name_lists_shipped() -> None:
    with pytest.raises(ScenarioError, match=r"shipped: .*quickstart"):
        load_scenario("no-such-scenario")


def test_invalid_toml(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text("[data\n")
    with pytest.raises(ScenarioError, match="not valid TOML"):
        load_scenario(path)


def test_a_non_utf8_file_is_one_clear_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from fa_hetdp.cli.main import main

    path = tmp_path / "latin1.toml"
    path.write_bytes('[scenario]\nname = "caf\u00e9"\n'.encode("latin-1"))
    with pytest.raises(ScenarioError, match=rf"scenario {path} is not UTF-8 .*byte 22.*UTF-8"):
        load_scenario(path)
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not UTF-8" in err and "Traceback" not in err


def test_skew_name_rejects() -> None:
    with pytest.raises(ScenarioError, match="unknown skew level"):
        skew_scenario_name("digits", "skew3")
    with pytest.raises(ScenarioError, match="no shipped skew scenarios"):
        skew_scenario_name("synthetic", "iid10")


# ---------------------------------------------------------------------------------------------
# Validation: each kind of bad input names its key
# ---------------------------------------------------------------------------------------------

VALID: dict[str, Any] = {
    "scenario": {"name": "t", "description": "d"},
    "data": {
        "dataset": "cifar10",
        "num_clients": 1000,
        "label_ratios": [91] + [1] * 9,
        "num_labels": 10,
    },
    # AGM against CGM, as the paper compares them: basic composition (CGM has no other).
    "privacy": {
        "epsilon": [0.5, 1.0],
        "delta": 1e-5,
        "mechanism": ["agm", "cgm"],
        "composition": "basic",
    },
    "protocol": {"placement": ["distributed", "central"]},
    "secagg": {"threshold": 0.5, "neighbours": "complete"},
    "experiment": {"repeats": 3, "seed": 1},
}


def _with(path: str, value: Any) -> dict[str, Any]:
    raw = copy.deepcopy(VALID)
    *parents, leaf = path.split(".")
    table = raw
    for p in parents:
        table = table.setdefault(p, {})
    if value is _DELETE:
        del table[leaf]
    else:
        table[leaf] = value
    return raw


class _Deleted:
    """The key is left out (a stable repr: pytest-xdist workers must collect the same ids)."""

    def __repr__(self) -> str:
        return "<deleted>"


_DELETE = _Deleted()


def test_valid_base() -> None:
    scenario = scenario_from_dict(VALID)
    assert isinstance(scenario, Scenario)
    assert scenario.clients_per_label() == (910,) + (10,) * 9


BAD: list[tuple[str, Any, str, str]] = [
    # (dotted key, bad value, key named in the error, text of what is allowed)
    (
        "data.colour",
        "red",
        "data.colour",
        "unknown key; allowed in [data]: alpha, arm, bounds, class_assignment_mode, columns",
    ),
    ("extra.x", 1, "extra", "unknown section"),
    ("data.dataset", "mnist", "data.dataset", "allowed: digits, cifar10"),
    ("data.dataset", _DELETE, "data.dataset", "required"),
    ("data.split", "valid", "data.split", "allowed: train, test, all"),
    ("data.num_clients", "1000", "data.num_clients", "must be an integer, got string"),
    ("data.num_clients", 1.5, "data.num_clients", "must be an integer, got float"),
    ("data.num_clients", True, "data.num_clients", "must be an integer, got boolean"),
    ("data.num_clients", -5, "data.num_clients", "must be >= 2"),
    ("data.num_clients", _DELETE, "data.num_clients", "required"),
    ("data.num_clients", 6000, "data.num_clients", "sample larger than the data: label 0 needs"),
    ("data.sample_fraction", 0.02, "data.sample_fraction", "not both"),
    ("data.records_per_client", 0, "data.records_per_client", ">= 1"),
    ("data.records_per_client", 6, "data.num_clients", "sample larger than the data"),
    ("data.label_ratios", [1, 1, 1], "data.label_ratios", "data.num_labels = 10"),
    ("data.label_ratios", [1] * 11, "data.label_ratios", "has 11 entries but cifar10 has 10"),
    ("data.label_ratios", [1, -1], "data.label_ratios[1]", "must be >= 0"),
    ("data.label_ratios", [0, 0], "data.label_ratios", "positive sum"),
    ("data.label_ratios", [], "data.label_ratios", "non-empty array"),
    ("data.label_ratios", "91:1", "data.label_ratios", "non-empty array"),
    ("data.dirichlet_alpha", 0.5, "data.dirichlet_alpha", "not both"),
    ("data.num_labels", 11, "data.num_labels", "must be <= 10"),
    ("data.root", 3, "data.root", "must be a string"),
    ("data.synthetic", {"size": 10}, "data.synthetic", "only allowed when"),
    ("privacy.epsilon", 0.0, "privacy.epsilon", "must be > 0"),
    ("privacy.epsilon", -1, "privacy.epsilon", "must be > 0"),
    ("privacy.epsilon", [1.0, 0.0], "privacy.epsilon[1]", "must be > 0"),
    ("privacy.epsilon", [], "privacy.epsilon", "empty"),
    ("privacy.epsilon", [1.0, 1.0], "privacy.epsilon", "repeated"),
    ("privacy.epsilon", "1", "privacy.epsilon", "must be a number"),
    ("privacy.epsilon", math.inf, "privacy.epsilon", "finite"),
    ("privacy.epsilon", _DELETE, "privacy.epsilon", "required"),
    ("privacy.delta", 0.0, "privacy.delta", r"in (0.0, 1.0)"),
    ("privacy.delta", 1.0, "privacy.delta", r"in (0.0, 1.0)"),
    ("privacy.delta", _DELETE, "privacy.delta", "required"),
    ("privacy.mechanism", "laplace", "privacy.mechanism", "allowed: agm, cgm"),
    ("privacy.mechanism", ["agm", "x"], "privacy.mechanism[1]", "allowed: agm, cgm"),
    ("privacy.composition", "advanced", "privacy.composition", "allowed: basic, gdp"),
    ("privacy.composition", "gdp", "privacy.composition", "which supports 'basic'"),
    ("privacy.profile", "loose", "privacy.profile", "allowed: bounded, paper"),
    ("privacy.variance_floor", 0.0, "privacy.variance_floor", "in (0.0, 0.25]"),
    ("privacy.variance_floor", 0.26, "privacy.variance_floor", "in (0.0, 0.25]"),
    ("privacy.extra_i2_noise", "yes", "privacy.extra_i2_noise", "true or false"),
    ("privacy.min_honest_clients", 0, "privacy.min_honest_clients", ">= 1"),
    ("privacy.min_honest_clients", 1001, "privacy.min_honest_clients", "<= 1000"),
    ("privacy.split", {"mean": 1, "bogus": 2}, "privacy.split.bogus", "allowed: mean, weighted"),
    ("privacy.split", {"mean": 0}, "privacy.split.mean", "must be > 0"),
    ("privacy.split", [1, 2], "privacy.split", "table of weights"),
    ("protocol.placement", "edge", "protocol.placement", "allowed: distributed, central"),
    ("secagg.threshold", 1, "secagg.threshold", "must be >= 2"),
    ("secagg.threshold", 1001, "secagg.threshold", "must be in 2..999 (the share holders"),
    ("secagg.threshold", 1.5, "secagg.threshold", "in (0.0, 1.0]"),
    (
        "secagg.threshold",
        "half",
        "secagg.threshold",
        "fraction in (0, 1] of the share holders, a count >= 2 or 'auto'",
    ),
    ("secagg.neighbours", "ring", "secagg.neighbours", "'complete', 'auto' or an even integer"),
    ("secagg.neighbours", 1.5, "secagg.neighbours", "'complete', 'auto' or an even integer k >= 4"),
    ("secagg.neighbours", 1, "secagg.neighbours", "must be >= 2"),
    ("secagg.neighbours", 2, "secagg.neighbours", "even integer k >= 4"),
    ("secagg.neighbours", 3, "secagg.neighbours", "even integer k >= 4"),
    ("secagg.neighbours", 31, "secagg.neighbours", "even integer k >= 4"),
    ("secagg.dropout_fraction", 1.0, "secagg.dropout_fraction", "in [0.0, 1.0)"),
    ("secagg.dropout_stage", "later", "secagg.dropout_stage", "allowed: stage1, stage1-unmask"),
    ("experiment.repeats", 0, "experiment.repeats", ">= 1"),
    ("experiment.seed", -1, "experiment.seed", ">= 0"),
    ("experiment.seed", 1.0, "experiment.seed", "must be an integer"),
    ("scenario.name", "", "scenario.name", "non-empty string"),
    ("scenario.description", 3, "scenario.description", "must be a string"),
    ("privacy", 3, "privacy", "must be a table"),
]


@pytest.mark.parametrize(
    ("path", "value", "key", "allowed"), BAD, ids=[f"{b[0]}={b[1]!r}" for b in BAD]
)
def test_bad_value_names_key(path: str, value: Any, key: str, allowed: str) -> None:
    with pytest.raises(ScenarioError) as info:
        scenario_from_dict(_with(path, value))
    lines = str(info.value).splitlines()[1:]
    assert any(line.strip().startswith(f"{key}: ") and allowed in line for line in lines), str(
        info.value
    )


def test_sample_fraction_resolves_and_checks() -> None:
    raw = _with("data.num_clients", _DELETE)
    raw["data"]["sample_fraction"] = 0.02
    assert scenario_from_dict(raw).num_clients == 1000
    raw["data"]["sample_fraction"] = 0.2  # 10 000 clients, 9100 of label 0 > 5000
    with pytest.raises(ScenarioError, match=r"data\.sample_fraction: sample larger than the data"):
        scenario_from_dict(raw)
    raw["data"]["sample_fraction"] = 0.00001
    with pytest.raises(ScenarioError, match="at least 2 are needed"):
        scenario_from_dict(raw)
    raw["data"]["sample_fraction"] = 1.5
    with pytest.raises(ScenarioError, match=r"data\.sample_fraction: must be in \(0\.0, 1\.0\]"):
        scenario_from_dict(raw)


def test_digits_sample_larger_than_data() -> None:
    # digits has 178 images of label 0: 99:1 over 200 clients needs 198.
    raw = {
        "data": {"dataset": "digits", "num_clients": 200, "label_ratios": [99, 1]},
        "privacy": {"epsilon": 1.0, "delta": 1e-5},
    }
    with pytest.raises(ScenarioError, match=r"label 0 needs 198 images .* has 178"):
        scenario_from_dict(raw)
    raw["data"]["split"] = "test"
    with pytest.raises(ScenarioError, match=r"data\.split: digits has no test split"):
        scenario_from_dict(raw)


def test_uniform_and_dirichlet_sample_size() -> None:
    raw = {
        "data": {"dataset": "digits", "num_clients": 100, "num_labels": 2, "records_per_client": 4},
        "privacy": {"epsilon": 1.0, "delta": 1e-5},
    }
    with pytest.raises(ScenarioError, match=r"need 400 images but digits \(train\) has 360"):
        scenario_from_dict(raw)
    raw["data"]["dirichlet_alpha"] = 1.0
    with pytest.raises(ScenarioError, match="need 400 images"):
        scenario_from_dict(raw)


def test_synthetic_table() -> None:
    raw = {
        "data": {"dataset": "synthetic", "num_clients": 50, "synthetic": {"size": 40, "dim": 3}},
        "privacy": {"epsilon": 1.0, "delta": 1e-5},
    }
    with pytest.raises(ScenarioError, match=r"need 50 images but the synthetic dataset has 40"):
        scenario_from_dict(raw)
    raw["data"]["synthetic"] = {"dim": 3, "heterogeneity": 2, "colour": 1}
    with pytest.raises(ScenarioError) as info:
        scenario_from_dict(raw)
    message = str(info.value)
    for key in ("data.synthetic.size", "data.synthetic.heterogeneity", "data.synthetic.colour"):
        assert key in message
    raw["data"]["synthetic"] = {"size": 100, "dim": 3}
    assert scenario_from_dict(raw).data.synthetic is not None


def test_errors_are_collected_together() -> None:
    raw = _with("privacy.delta", 2.0)
    raw["privacy"]["mechanism"] = "xgm"
    raw["experiment"]["repeats"] = -1
    raw["data"]["label_ratios"] = [1, 1]
    with pytest.raises(ScenarioError, match=r"\(4 problems\)") as info:
        scenario_from_dict(raw)
    message = str(info.value)
    for key in ("privacy.delta", "privacy.mechanism", "experiment.repeats", "data.label_ratios"):
        assert f"\n  {key}: " in message


def test_error_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "broken.toml"
    path.write_text("[data]\ndataset = 'digits'\nnum_clients = 10\n[privacy]\nepsilon = 1\n")
    with pytest.raises(ScenarioError, match=rf"scenario {path} is invalid .*\n  privacy\.delta"):
        load_scenario(path)


def test_split_mapping_and_defaults() -> None:
    raw = _with("privacy.split", {"mean": 1, "dispersion": 2.5})
    scenario = scenario_from_dict(raw)
    assert scenario.privacy.split_mapping() == {"dispersion": 2.5, "mean": 1.0}
    assert scenario.privacy.variance_floor == 0.01
    agm_only = _with("privacy.mechanism", "agm")
    del agm_only["privacy"]["composition"]
    assert scenario_from_dict(agm_only).privacy.composition == "gdp"  # the default
    raw = _with("privacy.extra_i2_noise", False)
    raw["privacy"]["split"] = {"i2_extra": 1}
    with pytest.raises(
        ScenarioError, match=r"privacy\.split: a weight for 'i2_extra' is given but"
    ):
        scenario_from_dict(raw)


def test_secagg_threshold_forms() -> None:
    as_count = scenario_from_dict(_with("secagg.threshold", 600))
    assert as_count.secagg.threshold_count(1000) == 600
    as_fraction = scenario_from_dict(_with("secagg.threshold", 1.0))
    assert as_fraction.secagg.threshold_count(1000) == 999
    sparse = scenario_from_dict(_with("secagg.neighbours", 32))
    assert sparse.secagg.neighbours == 32
