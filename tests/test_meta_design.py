"""design = "auto": the planner's choice between the secure sums and the silo summaries.

The choice uses public inputs only (counts, d, the budget, stated assumptions), so the same
counts give the same design whatever the records; it names its reason in the result.
"""

from __future__ import annotations

import numpy as np
import pytest

import fa_hetdp
from fa_hetdp.accuracy.meta_design import choose_design
from fa_hetdp.errors import InputDataError
from fa_hetdp.protocol.meta_plan import MetaSettings

DELTA = 1e-5


def _records(counts: list[int], d: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    ids = np.repeat(np.arange(len(counts)), counts)
    centres = rng.uniform(0.3, 0.7, (len(counts), d))
    x = np.clip(centres[ids] + 0.25 * rng.standard_normal((ids.size, d)), 0.0, 1.0)
    return x, ids


def test_few_large_silos_get_the_silo_summaries() -> None:
    counts = np.linspace(5000, 20000, 20).astype(int)
    chosen = choose_design(
        counts, 16, epsilon=1.0, delta=DELTA, settings=MetaSettings(privacy_unit="record"), draws=20
    )
    assert chosen.design == "silo-summaries"
    assert chosen.alternatives[0].design == "secure-sums"
    assert "random-effects mean" in chosen.reason


def test_silos_whose_variance_release_is_noise_are_chosen_by_the_planned_error() -> None:
    # 8 silos of 100-1000 records, d = 2, epsilon = 1: the variance noise of the smallest silo
    # swamps a within-variance of 1/12. That no longer rules the silo summaries out (their
    # sample intervals draw such a silo's true variance from the silos' spread): the planned
    # random-effects mean error decides, as everywhere
    counts = [100, 150, 200, 300, 400, 600, 800, 1000]
    chosen = choose_design(
        counts, 2, epsilon=1.0, delta=DELTA, settings=MetaSettings(privacy_unit="record"), draws=20
    )
    other = chosen.alternatives[0]
    assert {chosen.design, other.design} == {"silo-summaries", "secure-sums"}
    re = "random_effects_mean"
    assert chosen.error(re).error <= other.error(re).error
    assert "random-effects mean" in chosen.reason


@pytest.mark.parametrize(
    ("settings", "why"),
    [
        ({"privacy_unit": "client"}, "privacy_unit='client'"),
        ({"min_records": 100}, "min_records"),
        ({"placement": "central"}, "central"),
    ],
)
def test_settings_that_rule_out_the_silo_summaries_run_the_secure_sums(
    settings: dict[str, object], why: str
) -> None:
    x, ids = _records([300, 400, 500], 2, 0)
    stated = {"privacy_unit": "record", **settings}
    res = fa_hetdp.private_meta_analysis(x, ids, epsilon=1.0, delta=DELTA, rng=0, **stated)
    assert res.design == "secure-sums"
    assert any(why in label for label in res.labels), res.labels


def test_the_choice_reads_no_record() -> None:
    counts = [2000, 3000, 4000, 5000]
    one = fa_hetdp.private_meta_analysis(
        *_records(counts, 3, 1), epsilon=1.0, delta=DELTA, rng=0, privacy_unit="record"
    )
    two = fa_hetdp.private_meta_analysis(
        *_records(counts, 3, 2), epsilon=1.0, delta=DELTA, rng=0, privacy_unit="record"
    )
    assert one.design == two.design
    assert one.labels[-1] == two.labels[-1]  # the reason, planned numbers included


def test_without_noise_auto_runs_the_design_the_private_run_would() -> None:
    counts = [2000, 3000, 4000, 5000]
    x, ids = _records(counts, 3, 3)
    private = fa_hetdp.private_meta_analysis(
        x, ids, epsilon=1.0, delta=DELTA, rng=0, privacy_unit="record"
    )
    reference = fa_hetdp.private_meta_analysis(
        x, ids, epsilon=1.0, delta=DELTA, rng=0, noise=False, privacy_unit="record"
    )
    assert reference.design == private.design
    assert reference.spent is None


def test_assumptions_are_for_auto_only_and_named() -> None:
    x, ids = _records([300, 400, 500], 2, 0)
    with pytest.raises(InputDataError, match="assumptions are for design='auto'"):
        fa_hetdp.private_meta_analysis(
            x,
            ids,
            epsilon=1.0,
            delta=DELTA,
            design="secure-sums",
            assumptions={"i2": 0.5},
            privacy_unit="record",
        )
    with pytest.raises(InputDataError, match="unknown assumptions"):
        fa_hetdp.private_meta_analysis(
            x, ids, epsilon=1.0, delta=DELTA, assumptions={"colour": "red"}, privacy_unit="record"
        )


def test_auto_is_refused_below_the_planner() -> None:
    from fa_hetdp.errors import PrivacyParameterError
    from fa_hetdp.protocol.meta_simulate import plan_design

    with pytest.raises(PrivacyParameterError, match="chosen by the planner"):
        plan_design(1.0, DELTA, [300, 400], 2, MetaSettings(privacy_unit="record"))


def test_the_reason_says_where_the_two_figures_disagree() -> None:
    """The random-effects mean decides; where the other design plans the smaller I^2 error the
    reason says so, with both errors (and says nothing of I^2 where they agree)."""
    from dataclasses import replace

    from fa_hetdp.accuracy.meta_planner import choose_plan

    counts = [100, 150, 200, 300, 400, 600, 800, 1000]
    base = {
        design: fa_hetdp.plan_accuracy(
            8,
            2,
            epsilon=1.0,
            delta=DELTA,
            records_per_client=counts,
            privacy_unit="record",
            design=design,
            draws=10,
        )
        for design in ("secure-sums", "silo-summaries")
    }

    def with_errors(design: str, re: float, i2: float) -> object:
        plan = base[design]
        rows = tuple(
            replace(row, error=re if row.key == "random_effects_mean" else i2)
            if row.key in ("random_effects_mean", "i2")
            else row
            for row in plan.errors
        )
        return replace(plan, errors=rows)

    settings = MetaSettings(privacy_unit="record")
    planned = {"silo-summaries": (0.02, 0.69), "secure-sums": (0.06, 0.08)}
    chosen = choose_plan(settings, lambda d: with_errors(d, *planned[d]))  # type: ignore[arg-type, return-value]
    assert chosen.design == "silo-summaries"
    assert "the secure-sums plan the smaller |I^2| error (0.08 against 0.69)" in chosen.reason
    assert "design='secure-sums' where I^2 matters more" in chosen.reason
    planned = {"silo-summaries": (0.02, 0.05), "secure-sums": (0.06, 0.08)}
    chosen = choose_plan(settings, lambda d: with_errors(d, *planned[d]))  # type: ignore[arg-type, return-value]
    assert chosen.design == "silo-summaries" and "I^2" not in chosen.reason
