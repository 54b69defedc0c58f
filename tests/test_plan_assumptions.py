"""The plan printed before a run comes from the scenario's stated assumptions.

- a scenario states public knowledge about its data in ``[assumptions]`` (validated like every
  key); the shipped run scenarios state it, with its source;
- ``fa-hetdp run`` plans from it (not from within-variance 1/4 and coordinate mean 1/2) and
  prints the planned noise sd of each statistic beside the run's, under the same names;
- no statistic is called noise-dominated from a typical value nobody stated (the plan says it
  cannot judge it instead);
- ``I² of Σ Q''`` carries the noise of ``Σ Q''`` (delta method), never a noise sd of 0.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from fa_hetdp import plan_accuracy, private_statistics
from fa_hetdp.accuracy.assumptions import DataAssumptions, scenario_assumptions
from fa_hetdp.config.partition import partition_scenario
from fa_hetdp.config.rules import ConfigError
from fa_hetdp.config.scenario import load_scenario, scenario_from_dict
from fa_hetdp.protocol.intervals import i2_slope, stage2_noise_stds, summed_q_bounds
from fa_hetdp.report.results import format_noise_comparison, format_section, statistics_section

BASE = {
    "data": {"dataset": "digits", "num_clients": 100},
    "privacy": {"epsilon": 1.0, "delta": 1e-5},
}


def _main_job() -> tuple[object, object]:
    scenario = load_scenario("digits-all")
    x = partition_scenario(scenario).vectors
    p = scenario.privacy
    result = private_statistics(
        x,
        epsilon=p.epsilons[0],
        delta=p.delta,
        variance_floor=p.variance_floor,
        adaptive_floor=p.adaptive_floor,
        extra_i2_noise=p.extra_i2_noise,
        noise_shape=p.noise_shape,
        dispersion_center=p.dispersion_center,
        rng=np.random.default_rng(0),
    )
    return scenario, result


# ------------------------------------------------------------------ the scenario's table


def test_a_scenario_states_its_assumptions() -> None:
    raw = {
        **BASE,
        "assumptions": {
            "within_variance": 0.14,
            "coordinate_mean": 0.3,
            "spread": 0.07,
            "i2": 0.02,
            "source": "a public proxy",
        },
    }
    scenario = scenario_from_dict(raw)
    a = scenario_assumptions(scenario)
    assert (a.within_variance, a.coordinate_mean, a.dispersion, a.i2) == (0.14, 0.3, 0.07, 0.02)
    assert a.assumed == () and a.source == "a public proxy"
    assert scenario_from_dict(scenario.to_dict()) == scenario  # round trip
    unstated = scenario_assumptions(scenario_from_dict(BASE))
    assert set(unstated.assumed) == {"within_variance", "coordinate_mean", "dispersion", "i2"}


@pytest.mark.parametrize(
    ("key", "value", "allowed"),
    [
        ("within_variance", 0.3, "in (0.0, 0.25]"),
        ("within_variance", 0, "in (0.0, 0.25]"),
        ("coordinate_mean", 1.5, "in [0.0, 1.0]"),
        ("spread", -0.1, "in [0.0, 0.25]"),
        ("i2", 1.0, "in [0.0, 1.0)"),
        ("i2", "high", "must be a number"),
        ("source", 3, "must be a string"),
        ("typical_q", 5.0, "unknown key"),
    ],
)
def test_bad_assumptions_name_the_key_and_what_is_allowed(
    key: str, value: object, allowed: str
) -> None:
    with pytest.raises(ConfigError) as info:
        scenario_from_dict({**BASE, "assumptions": {key: value}})
    lines = [line for line in str(info.value).splitlines() if f"assumptions.{key}" in line]
    assert len(lines) == 1 and allowed in lines[0], str(info.value)


@pytest.mark.parametrize("name", ["quickstart", "digits-300", "digits-all", "synthetic-10k"])
def test_shipped_run_scenarios_state_all_four_with_a_source(name: str) -> None:
    a = scenario_assumptions(load_scenario(name))
    assert a.assumed == () and a.source


def test_shipped_digits_assumptions_are_the_public_datasets() -> None:
    # the numbers in the scenario files are those of the published digits (all 1797 images)
    from fa_hetdp.stats.exact import true_statistics, within_variance

    scenario, _ = _main_job()
    x = partition_scenario(scenario).vectors  # digits-all: every image once
    truth = true_statistics(x, variance_floor=scenario.privacy.variance_floor)
    a = scenario_assumptions(scenario)
    assert a.within_variance == pytest.approx(len(x) / np.sum(1 / within_variance(x)), abs=5e-4)
    assert a.coordinate_mean == pytest.approx(np.mean(truth.mean), abs=5e-4)
    assert a.dispersion == pytest.approx(np.mean(truth.dispersion), abs=5e-4)
    assert a.i2 == pytest.approx(np.mean(truth.i2), abs=5e-4)


# ------------------------------------------------------------------ the plan before a run


def test_run_plan_uses_the_scenario_assumptions() -> None:
    from fa_hetdp.cli.plan import run_accuracy, run_plan_lines

    acc = run_accuracy({"scenario": "digits-all", "mode": "simulation"}, 64)
    assert acc.assumptions.within_variance == 0.138
    assert acc.assumptions.assumed == ()
    lines = run_plan_lines({"scenario": "digits-all", "mode": "simulation"}, 64)
    i = next(k for k, line in enumerate(lines) if line.startswith("assumptions:"))
    assert "within-vector variance 0.138" in lines[i] and "defaults taken: none" in lines[i]
    assert lines[i + 1].strip().startswith("source: scikit-learn digits")


def test_planned_noise_agrees_with_the_run_under_the_stated_assumptions() -> None:
    # the main job in process: each statistic's noise sd (own scale, RMS over coordinates) as
    # planned from the scenario's assumptions is within 1.5x of the run's; from the old
    # defaults (within-variance 1/4, coordinate mean 1/2) the weighted mean and Q'' were not
    scenario, result = _main_job()
    stated = statistics_section(result, result.plan, assumptions=scenario_assumptions(scenario))
    default = statistics_section(result, result.plan, assumptions=DataAssumptions.stated())

    def ratios(section: dict[str, object]) -> dict[str, float]:
        out = {}
        for key, entry in section["values"].items():  # type: ignore[attr-defined]
            run = float(np.sqrt(np.mean(np.asarray(entry["noise_std"]) ** 2)))
            out[key] = run / section["plan"]["statistics"][key]["noise_std"]  # type: ignore[index]
        return out

    good, old = ratios(stated), ratios(default)
    assert all(1 / 1.5 <= r <= 1.5 for r in good.values()), good
    assert not all(1 / 1.5 <= r <= 1.5 for r in old.values()), old


def test_no_noise_dominated_warning_from_an_unstated_typical_i2() -> None:
    from fa_hetdp.report.results import format_accuracy_plan

    acc = plan_accuracy(
        1797,
        64,
        epsilon=1.0,
        delta=1e-5,
        within_variance=0.138,
        coordinate_mean=0.305,
        variance_floor=0.08,
        adaptive_floor=False,
    )
    lines = format_accuracy_plan(acc)
    warned = [line for line in lines if line.startswith("warning:")]
    assert not any("I²" in line for line in warned), warned
    assert not {"i2", "i2_total"} & {r.key for r in acc.noise_dominated}
    assert any(line.startswith("the plan cannot judge") and "I²''" in line for line in lines)
    stated = plan_accuracy(
        1797,
        64,
        epsilon=1.0,
        delta=1e-5,
        within_variance=0.138,
        coordinate_mean=0.305,
        i2=0.015,
        variance_floor=0.08,
        adaptive_floor=False,
    )
    assert "i2" in {r.key for r in stated.noise_dominated}  # the stated value is the yardstick


def test_plan_command_takes_the_assumptions_as_flags(capsys: pytest.CaptureFixture[str]) -> None:
    from fa_hetdp.cli.main import main

    args = ["plan", "-n", "1797", "-d", "64", "--variance-floor", "0.08", "--json"]
    assert main([*args, "--within-variance", "0.138", "--i2", "0.015"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["assumptions"]["i2"] == 0.015 and "i2" not in doc["assumptions"]["assumed"]
    assert doc["statistics"]["i2"]["typical_stated"] is True
    assert doc["statistics"]["mean"]["typical_stated"] is False  # no --coordinate-mean
    assert doc["statistics"]["mean"]["noise_std"] > 0.0


# ------------------------------------------------------------------ after the run


def test_run_prints_planned_and_measured_noise_side_by_side(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from fa_hetdp.cli.run import RunSetup, print_result

    scenario, result = _main_job()
    section = statistics_section(result, result.plan, assumptions=scenario_assumptions(scenario))
    doc = json.loads(json.dumps({"n": 1797, "d": 64, "privacy": {}, "released": section}))
    setup = RunSetup(scenario_name="digits-all", num_clients=1797, run_config={}, truth={})
    print_result(setup, doc)
    out = capsys.readouterr().out
    head = next(line for line in out.splitlines() if "planned" in line and "this run" in line)
    assert head.index("planned") < head.index("this run")
    table = format_noise_comparison(doc["released"])
    mean_row = next(line for line in table if line.startswith("mean μ'"))
    assert "as planned" in mean_row
    for line in table[2:]:
        if "x the plan" in line:  # a difference says which assumption it comes from
            assert "it assumed" in line


def test_i2_of_summed_q_has_the_noise_of_summed_q() -> None:
    scenario, result = _main_job()
    section = statistics_section(result, result.plan, assumptions=scenario_assumptions(scenario))
    entry = section["values"]["i2_total"]
    _, s4 = stage2_noise_stds(result, result.plan)
    n, d = result.n, result.d
    low, _ = summed_q_bounds(result, result.plan)  # the lower end: the largest slope
    expected = float(i2_slope(low, n, d)) * math.sqrt(float(np.sum(s4**2)))
    assert entry["noise_std"] == pytest.approx(min(expected, 0.5))
    assert entry["noise_std"] > 0.0
    row = next(line for line in format_section(section, None) if line.startswith("I² of Σ Q''"))
    sd = float(row.split("]", 1)[1].split()[0])
    assert sd > 0.0
    if entry["upper"] == 0.0:  # [0, 0]: said why (the whole interval of Σ Q'' is below (n-1)d)
        assert "below (n - 1) d" in row


def test_i2_of_summed_q_is_flagged_when_its_interval_spans_the_range() -> None:
    x = partition_scenario(load_scenario("quickstart")).vectors
    r = private_statistics(x, epsilon=1.0, delta=1e-5, rng=np.random.default_rng(0))
    section = statistics_section(r, r.plan)
    for key in ("i2_total", "weighted_mean", "i2"):  # values in [0, 1]: sd at most 1/2
        assert 0.0 < np.max(section["values"][key]["noise_std"]) <= 0.5
    entry = section["values"]["i2_total"]
    if entry["upper"] - entry["lower"] >= 0.9:
        assert entry["noise_dominated"] is True


def test_scenarios_readme_documents_the_table() -> None:
    text = (Path(__file__).resolve().parents[1] / "scenarios" / "README.md").read_text()
    assert "### `[assumptions]`" in text
    for key in ("within_variance", "coordinate_mean", "spread", "i2", "source"):
        assert f"| `{key}` |" in text
