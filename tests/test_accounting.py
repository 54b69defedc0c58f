"""Tests for fa_hetdp.dp.accounting: budget plans (basic, gdp) and exact privacy spent."""

from __future__ import annotations

import dataclasses
import math
import warnings
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fa_hetdp.dp.accounting import (
    CGM_BASELINE_LABEL,
    BudgetPlan,
    ReleaseSpec,
    plan_budget,
    privacy_spent,
)
from fa_hetdp.dp.calibration import achieved_delta, calibrate_sigma, cgm_sigma
from fa_hetdp.errors import BaselineWarning, PrivacyParameterError

# The protocol's releases (docs/design.md), with d = 16, W = 100, n = 50.
PROTOCOL = (
    ReleaseSpec("mean", 4.0),
    ReleaseSpec("weighted", 100.0 * math.sqrt(17.0)),
    ReleaseSpec("dispersion", 4.0, weight=2.0),
    ReleaseSpec("q", 400.0),
    ReleaseSpec("i2_extra", 4.0 / 50.0, weight=0.5, counts_for_privacy=False),
)
FOUR_EQUAL = tuple(ReleaseSpec(name, 1.0) for name in ("a", "b", "c", "d"))
BUDGETS = [(1.0, 1e-5), (0.25, 0.1), (0.1, 1e-8), (4.0, 1e-6), (20.0, 1e-10)]


# --------------------------------------------------------------------------- planning


@pytest.mark.parametrize(("epsilon", "delta"), BUDGETS)
def test_basic_split_is_proportional_and_sums_to_total(epsilon: float, delta: float) -> None:
    plan = plan_budget(epsilon, delta, PROTOCOL, composition="basic")
    # Shares are normalised over the counted releases; the uncounted one takes no budget.
    total_w = sum(r.weight for r in PROTOCOL if r.counts_for_privacy)
    counted = [r for r in plan.releases if r.counts_for_privacy]
    assert math.fsum(r.epsilon_share or 0.0 for r in counted) == pytest.approx(epsilon)
    assert math.fsum(r.delta_share or 0.0 for r in counted) == pytest.approx(delta)
    for spec, rel in zip(PROTOCOL, plan.releases, strict=True):
        assert rel.name == spec.name
        assert rel.epsilon_share == pytest.approx(epsilon * spec.weight / total_w, rel=1e-15)
        assert rel.delta_share == pytest.approx(delta * spec.weight / total_w, rel=1e-15)
        assert rel.sigma == calibrate_sigma(rel.epsilon_share, rel.delta_share, spec.sensitivity)
        assert rel.mu_share == pytest.approx(spec.sensitivity / rel.sigma, rel=1e-15)
        assert plan.sigma(spec.name) == rel.sigma
        assert plan.release(spec.name) is rel
    assert not plan.is_baseline


@pytest.mark.parametrize(("epsilon", "delta"), BUDGETS)
def test_gdp_plan_shares_mu(epsilon: float, delta: float) -> None:
    plan = plan_budget(epsilon, delta, PROTOCOL, composition="gdp")
    mu_total = 1.0 / calibrate_sigma(epsilon, delta)
    total_w = sum(r.weight for r in PROTOCOL if r.counts_for_privacy)
    for spec, rel in zip(PROTOCOL, plan.releases, strict=True):
        assert rel.epsilon_share is None
        assert rel.delta_share is None
        assert rel.mu_share == pytest.approx(mu_total * math.sqrt(spec.weight / total_w), 1e-15)
        assert rel.sigma == pytest.approx(spec.sensitivity / rel.mu_share, rel=1e-15)
    mu_sq = math.fsum((r.mu_share or 0.0) ** 2 for r in plan.releases if r.counts_for_privacy)
    assert math.sqrt(mu_sq) == pytest.approx(mu_total, rel=1e-14)


@pytest.mark.parametrize(
    ("epsilon", "delta", "measured"),
    # Measured sigma_basic/sigma_gdp (this implementation, 4 equal releases, Delta = 1):
    [(1.0, 1e-5, 1.9554), (0.25, 0.1, 1.9133), (0.1, 1e-8, 1.9969), (4.0, 1e-6, 1.8861)],
)
def test_gdp_needs_less_noise_than_basic(epsilon: float, delta: float, measured: float) -> None:
    # An early estimate said "~1.7x"; for 4 equal releases the measured ratio is 1.89-2.00,
    # so the documented range asserted here is [1.85, 2.05].
    basic = plan_budget(epsilon, delta, FOUR_EQUAL, composition="basic")
    gdp = plan_budget(epsilon, delta, FOUR_EQUAL, composition="gdp")
    ratio = basic.sigma("a") / gdp.sigma("a")
    assert 1.85 <= ratio <= 2.05
    assert ratio == pytest.approx(measured, abs=1e-4)
    for name in ("b", "c", "d"):
        assert basic.sigma(name) / gdp.sigma(name) == pytest.approx(ratio, rel=1e-12)


def test_cgm_plan_with_small_shares_is_not_baseline() -> None:
    plan = plan_budget(
        2.0, 1e-5, FOUR_EQUAL, mechanism="cgm", composition="basic"
    )  # epsilon_k = 0.5
    assert not plan.is_baseline
    assert plan.labels == ()
    assert plan.sigma("a") == pytest.approx(cgm_sigma(0.5, 2.5e-6), rel=1e-15)


def test_cgm_plan_with_large_shares_is_labelled_baseline() -> None:
    with pytest.warns(BaselineWarning, match="not a DP guarantee") as record:
        plan = plan_budget(
            8.0, 1e-5, FOUR_EQUAL, mechanism="cgm", composition="basic"
        )  # epsilon_k = 2
    assert len(record) == 1  # one warning for the plan, not one per release
    assert plan.is_baseline
    assert any(label.startswith(CGM_BASELINE_LABEL) for label in plan.labels)
    assert plan.sigma("a") == pytest.approx(cgm_sigma(2.0, 2.5e-6), rel=1e-15)


def test_uncounted_release_is_labelled() -> None:
    plan = plan_budget(1.0, 1e-5, PROTOCOL, composition="basic")
    assert any("i2_extra" in label and "not counted" in label for label in plan.labels)


def test_plan_is_frozen() -> None:
    plan = plan_budget(1.0, 1e-5, FOUR_EQUAL)
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.epsilon = 2.0  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.releases[0].sigma = 1.0  # type: ignore[misc]


# --------------------------------------------------------------------------- privacy spent


@pytest.mark.parametrize(("epsilon", "delta"), BUDGETS)
def test_gdp_spends_exactly_the_target(epsilon: float, delta: float) -> None:
    # All releases counted: exact composition spends exactly the planned total.
    spent = privacy_spent(plan_budget(epsilon, delta, PROTOCOL[:4], composition="gdp"))
    assert spent.epsilon == pytest.approx(epsilon, rel=1e-9)
    assert spent.epsilon <= epsilon * (1 + 1e-12)
    assert spent.delta == delta
    assert spent.delta_at_target_epsilon <= delta
    assert spent.delta_at_target_epsilon == pytest.approx(delta, rel=1e-6)
    assert not spent.degraded


@pytest.mark.parametrize(("epsilon", "delta"), BUDGETS)
def test_gdp_with_uncounted_release_still_spends_the_target(epsilon: float, delta: float) -> None:
    # i2_extra is post-processing: it takes no budget, so the counted releases spend it all,
    # and they get the same noise as a plan without it.
    with_extra = plan_budget(epsilon, delta, PROTOCOL, composition="gdp")
    without = plan_budget(epsilon, delta, PROTOCOL[:4], composition="gdp")
    spent = privacy_spent(with_extra)
    assert spent.epsilon == pytest.approx(epsilon, rel=1e-9)
    assert spent.delta_at_target_epsilon <= delta
    for name in ("mean", "weighted", "dispersion", "q"):
        assert with_extra.sigma(name) == without.sigma(name)


def test_uncounted_release_uses_the_per_unit_share() -> None:
    plan = plan_budget(1.0, 1e-5, PROTOCOL, composition="basic")
    counted = math.fsum(r.weight for r in PROTOCOL if r.counts_for_privacy)
    extra = plan.release("i2_extra")
    assert extra.epsilon_share == pytest.approx(1.0 * 0.5 / counted, rel=1e-15)
    assert extra.sigma == pytest.approx(
        calibrate_sigma(0.5 / counted, 1e-5 * 0.5 / counted, 4.0 / 50.0), rel=1e-15
    )


@pytest.mark.parametrize(("epsilon", "delta"), BUDGETS)
def test_basic_spends_at_most_the_target(epsilon: float, delta: float) -> None:
    plan = plan_budget(epsilon, delta, PROTOCOL, composition="basic")
    spent = privacy_spent(plan)
    assert spent.epsilon <= epsilon
    assert spent.delta_at_target_epsilon <= delta
    assert not spent.degraded


def test_spent_mu_is_exact_composition_of_counted_releases() -> None:
    plan = plan_budget(1.0, 1e-5, PROTOCOL, composition="basic")
    spent = privacy_spent(plan)
    counted = [r for r in plan.releases if r.counts_for_privacy]
    expected = math.sqrt(math.fsum((r.sensitivity / r.sigma) ** 2 for r in counted))
    assert spent.mu == pytest.approx(expected, rel=1e-14)
    assert spent.delta_at_target_epsilon == pytest.approx(
        achieved_delta(1.0 / expected, 1.0), rel=1e-12
    )
    assert len(spent.per_release) == len(PROTOCOL)


def test_uncounted_release_does_not_change_spent() -> None:
    plan = plan_budget(1.0, 1e-5, PROTOCOL, composition="basic")
    full = privacy_spent(plan)
    none_arrived = privacy_spent(plan, {"i2_extra": 0.0})
    assert none_arrived.epsilon == full.epsilon
    assert not none_arrived.degraded
    assert math.isinf(none_arrived.per_release[-1].mu)


@given(
    fractions=st.lists(st.floats(0.01, 1.0), min_size=4, max_size=4),
    factor=st.floats(0.05, 0.99),
)
@settings(max_examples=50, deadline=None)
def test_dropouts_increase_spent_epsilon(fractions: list[float], factor: float) -> None:
    plan = plan_budget(1.0, 1e-5, FOUR_EQUAL, composition="gdp")
    names = [r.name for r in plan.releases]
    first = privacy_spent(plan, dict(zip(names, fractions, strict=True)))
    # Less noise on one release (smaller fraction): epsilon must grow.
    second_fracs = [fractions[0] * factor, *fractions[1:]]
    second = privacy_spent(plan, dict(zip(names, second_fracs, strict=True)))
    assert second.epsilon > first.epsilon
    assert second.mu > first.mu
    assert first.epsilon >= 1.0 * (1 - 1e-12)
    assert second.degraded


def test_dropout_example_values() -> None:
    plan = plan_budget(1.0, 1e-5, FOUR_EQUAL, composition="gdp")
    half = privacy_spent(plan, {"a": 0.5})
    rel = half.per_release[0]
    assert rel.noise_variance_fraction == 0.5
    assert rel.effective_sigma == pytest.approx(plan.sigma("a") * math.sqrt(0.5), rel=1e-15)
    # mu^2 = mu_total^2 (3/4 + 2/4) = 1.25 mu_total^2.
    mu_total = 1.0 / calibrate_sigma(1.0, 1e-5)
    assert half.mu == pytest.approx(mu_total * math.sqrt(1.25), rel=1e-12)
    assert half.epsilon > 1.0
    assert half.degraded


def test_no_noise_on_counted_release_gives_infinite_epsilon() -> None:
    plan = plan_budget(1.0, 1e-5, PROTOCOL, composition="basic")
    spent = privacy_spent(plan, {"mean": 0.0})
    assert math.isinf(spent.epsilon)
    assert math.isinf(spent.mu)
    assert spent.delta_at_target_epsilon == 1.0
    assert spent.degraded


def test_fraction_above_one_is_capped() -> None:
    # Contract: arrived/planned noise variance is capped at 1 (extra noise is not credited).
    plan = plan_budget(1.0, 1e-5, FOUR_EQUAL, composition="gdp")
    assert privacy_spent(plan, {"a": 1.7}).epsilon == privacy_spent(plan).epsilon
    assert privacy_spent(plan, {"a": 1.7}).per_release[0].noise_variance_fraction == 1.0


def test_no_counted_release_spends_nothing() -> None:
    plan = plan_budget(1.0, 1e-5, [ReleaseSpec("x", 1.0, counts_for_privacy=False)])
    spent = privacy_spent(plan)
    assert spent.epsilon == 0.0
    assert spent.mu == 0.0
    assert spent.delta_at_target_epsilon == 0.0


# --------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("kwargs", "shown"),
    [
        ({"name": "", "sensitivity": 1.0}, "name=''"),
        ({"name": "a", "sensitivity": 0.0}, "sensitivity of 'a'=0.0"),
        ({"name": "a", "sensitivity": math.nan}, "nan"),
        ({"name": "a", "sensitivity": 1.0, "weight": 0.0}, "weight of 'a'=0.0"),
        ({"name": "a", "sensitivity": 1.0, "weight": -1.0}, "weight of 'a'=-1.0"),
        ({"name": "a", "sensitivity": 1.0, "weight": math.inf}, "inf"),
        ({"name": "a", "sensitivity": 1.0, "counts_for_privacy": 1}, "counts_for_privacy=1"),
    ],
)
def test_invalid_release_spec(kwargs: dict[str, Any], shown: str) -> None:
    with pytest.raises(PrivacyParameterError, match="must be") as info:
        ReleaseSpec(**kwargs)
    assert shown in str(info.value)


@pytest.mark.parametrize(
    ("args", "kwargs", "shown"),
    [
        ((1.0, 1e-5, []), {}, "at least one"),
        ((1.0, 1e-5, [ReleaseSpec("a", 1.0), ReleaseSpec("a", 2.0)]), {}, "name='a'"),
        ((1.0, 1e-5, ["a"]), {}, "ReleaseSpec"),
        ((0.0, 1e-5, FOUR_EQUAL), {}, "epsilon=0.0"),
        ((1.0, 1.0, FOUR_EQUAL), {}, "delta=1.0"),
        ((1.0, 1e-5, FOUR_EQUAL), {"mechanism": "laplace"}, "mechanism='laplace'"),
        ((1.0, 1e-5, FOUR_EQUAL), {"composition": "rdp"}, "composition='rdp'"),
        ((1.0, 1e-5, FOUR_EQUAL), {"mechanism": "cgm", "composition": "gdp"}, "basic-comp"),
    ],
)
def test_invalid_plan(args: tuple[Any, ...], kwargs: dict[str, Any], shown: str) -> None:
    with pytest.raises(PrivacyParameterError) as info:
        plan_budget(*args, **kwargs)
    assert isinstance(info.value, ValueError)
    assert shown in str(info.value)


@pytest.mark.parametrize(
    ("fractions", "shown"),
    [
        ({"a": -0.1}, "-0.1"),
        ({"a": math.nan}, "nan"),
        ({"a": math.inf}, "inf"),
        ({"a": "half"}, "'half'"),
        ({"zzz": 0.5}, "'zzz'"),
    ],
)
def test_invalid_fractions(fractions: dict[str, Any], shown: str) -> None:
    plan = plan_budget(1.0, 1e-5, FOUR_EQUAL)
    with pytest.raises(PrivacyParameterError) as info:
        privacy_spent(plan, fractions)
    assert shown in str(info.value)


def test_unknown_release_name() -> None:
    plan: BudgetPlan = plan_budget(1.0, 1e-5, FOUR_EQUAL)
    with pytest.raises(PrivacyParameterError, match="'nope'"):
        plan.sigma("nope")


def test_no_warning_for_agm_plans() -> None:
    with warnings.catch_warnings():
        # no baseline warning; epsilon = 50 > 10 does warn that the guarantee is weak
        warnings.simplefilter("error", BaselineWarning)
        plan_budget(50.0, 1e-5, FOUR_EQUAL, composition="basic")
        plan_budget(50.0, 1e-5, FOUR_EQUAL, composition="gdp")
