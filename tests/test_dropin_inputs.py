"""The drop-in's inputs: the record unit's ``min_records``, a two-arm node's ``(outcomes, arms)``.

Four defects found in review, each with the run it broke:

1. ``privacy_unit="record"`` without ``min_records``: the server's checks passed and every node
   then refused ("fewer than the session's min_records=None"). The paper's statistics need the
   public lower bound (their record-level noise is calibrated to ``1/min_records``): the server
   now refuses the settings before any message. A meta-analysis publishes every node's count
   (its plan is calibrated on them), so it needs none and its nodes take part.
2. A node whose ``records(context)`` returned no arms in a two-arm run was taken for a one-arm
   node, and the server then aborted the whole run; it is now refused at its first step, and
   the run goes on with the others.
3. An arm other than 0/1 was counted as control in the public arm sizes (the node then dropped
   with a misleading "arm too small"); it is now refused at the first step, saying what is
   allowed.
4. Boolean arms (``df.treated == 1``) were refused as "labels must be N integers"; they are now
   cast to 0/1, and a refusal of the arms names the arms.

The runs use the in-memory Grid of ``tests/test_dropin.py`` (the real handlers, codec and
strategy; fast).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from flwr.app import Context
from test_dropin import (
    fast_poll,  # noqa: F401  (the autouse fixture: no poll wait)
    make_grid,
    partition_configs,
    server_context,
)
from test_dropin_two_arm import COUNTS, NODE_CONFIG, SEED, SITES, trial_records

import fa_hetdp
import fa_hetdp.server.app as server_app
from fa_hetdp.accuracy.columns import ColumnMetaAnalysis
from fa_hetdp.clients.app import _check_record_count
from fa_hetdp.clients.silo_summaries import arm_local_data
from fa_hetdp.config.rules import ConfigError
from fa_hetdp.errors import InputDataError
from fa_hetdp.flowerkit.measurement import read_settings, settings_document
from fa_hetdp.flowerkit.settings import RUN_CONFIG_KEYS, RunSettings
from fa_hetdp.flowerkit.steps import ADVERTISE_KEYS, State
from fa_hetdp.protocol.meta_server import PrivateMetaAnalysis
from fa_hetdp.protocol.two_arm import TwoArmMetaAnalysis

MIN_RECORDS_KEY = f"run-config.{RUN_CONFIG_KEYS['min_records']}"


@pytest.fixture
def dropouts() -> Iterator[list[tuple[str, dict[int, str]]]]:
    """Every step's dropouts with their reasons, as the server saw them."""
    seen: list[tuple[str, dict[int, str]]] = []
    original = server_app.GridTransport.exchange

    def spy(self: Any, step: str, payloads: Any, timeout: float) -> Any:
        replies, dropped = original(self, step, payloads, timeout)
        seen.append((step, dict(dropped)))
        return replies, dropped

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(server_app.GridTransport, "exchange", spy)
        yield seen


# ---------------------------------------------------------------------------- 1. min_records
def test_the_papers_statistics_at_the_record_unit_need_min_records_before_sending() -> None:
    grid = make_grid(configs=partition_configs(**{"privacy-unit": "record"}))
    with pytest.raises(ConfigError) as info:
        fa_hetdp.flower.measure(
            grid, server_context(), epsilon=1.0, delta=1e-5, seed=SEED, privacy_unit="record"
        )
    assert grid.log == []  # refused before any message
    found = dict(info.value.problems)
    assert set(found) == {MIN_RECORDS_KEY}
    assert "min_records is required with privacy_unit='record'" in found[MIN_RECORDS_KEY]
    assert "lower bound" in found[MIN_RECORDS_KEY]  # what it is for
    assert "\n" not in found[MIN_RECORDS_KEY]


def test_a_node_refuses_a_record_unit_document_without_min_records() -> None:
    # the server's word is checked on the node too (a document built without the check)
    document = settings_document(
        epsilon=1.0, delta=1e-5, num_clients=4, seed=SEED,
        settings={"privacy_unit": "record", "min_records": 2},
    )  # fmt: skip
    del document["run-config"][RUN_CONFIG_KEYS["min_records"]]
    with pytest.raises(ConfigError, match="min_records is required"):
        read_settings(document)


def test_our_own_app_never_releases_the_papers_statistics_without_the_bound() -> None:
    # the run config's path (no document): a session without the bound is refused by name
    def settings(analysis: str, min_records: int | None) -> RunSettings:
        document = settings_document(
            epsilon=1.0, delta=1e-5, num_clients=4, seed=SEED,
            settings={"privacy_unit": "record", "min_records": 2, "analysis": analysis},
        )  # fmt: skip
        config = dict(document["run-config"])
        del config[RUN_CONFIG_KEYS["min_records"]]
        if min_records is not None:
            config[RUN_CONFIG_KEYS["min_records"]] = min_records
        return RunSettings.from_run_config(config, scenario_records=False)

    run = settings("heterogeneity", None)
    assert run.protocol.setting("min_records") is None
    with pytest.raises(InputDataError, match="min_records is required") as info:
        _check_record_count(run, 30)
    assert "None" not in str(info.value)
    # a meta-analysis publishes every count: no bound is needed, none is asked for
    _check_record_count(settings("meta", None), 30)
    # with the bound stated, a node below it still refuses (both analyses)
    for analysis in ("heterogeneity", "meta"):
        with pytest.raises(InputDataError, match="fewer than the session's min_records=31"):
            _check_record_count(settings(analysis, 31), 30)
        _check_record_count(settings(analysis, 30), 30)


@pytest.mark.parametrize("design", ["silo-summaries", "secure-sums"])
def test_a_record_unit_meta_analysis_needs_no_min_records(
    design: str, dropouts: list[tuple[str, dict[int, str]]]
) -> None:
    def outcomes(context: Context) -> np.ndarray:  # the sites' outcomes, one arm
        return SITES[int(context.node_config["partition-id"])][0]

    grid = make_grid(outcomes, partition_configs(len(COUNTS), **{"privacy-unit": "record"}))
    budget = fa_hetdp.PrivacyBudget(epsilon=2.0, delta=1e-5)
    result = fa_hetdp.flower.measure(
        grid, server_context(), epsilon=1.0, delta=1e-5, seed=SEED, analysis="meta",
        privacy_unit="record", design=design, budget=budget,
    )  # fmt: skip
    assert isinstance(result, PrivateMetaAnalysis)
    assert result.design == design and result.n == len(COUNTS)
    assert [int(m) for m in result.records_per_client] == [sum(c) for c in COUNTS]
    assert all(not dropped for _, dropped in dropouts)  # every node took part
    assert result.plan is not None and result.plan.settings.min_records is None  # counts public
    assert budget.spent().epsilon == pytest.approx(1.0, rel=1e-6)


def test_a_two_arm_document_states_no_min_records() -> None:
    # the arm sizes are public and the plan is calibrated on them: no bound is defaulted
    document = settings_document(
        epsilon=1.0, delta=1e-5, num_clients=4, seed=SEED, effect="MD", arm="treated",
        settings={"analysis": "meta", "privacy_unit": "record"},
    )  # fmt: skip
    assert RUN_CONFIG_KEYS["min_records"] not in document["run-config"]
    assert read_settings(document).run.protocol.setting("min_records") is None


# ---------------------------------------------------------------------------- 2-4. the arms
def _two_arm(
    records: Callable[[Context], Any], dropouts: list[tuple[str, dict[int, str]]]
) -> tuple[ColumnMetaAnalysis, dict[int, str]]:
    """Run an MD measurement; return it and the first step's dropouts (nothing later)."""
    grid = make_grid(records, partition_configs(len(COUNTS), **NODE_CONFIG))
    got = fa_hetdp.flower.measure(
        grid, server_context(), epsilon=1.0, delta=1e-5, seed=SEED, analysis="meta",
        privacy_unit="record", effect="MD", arm="treated",
    )  # fmt: skip
    assert isinstance(got, ColumnMetaAnalysis) and isinstance(got.result, TwoArmMetaAnalysis)
    first = dict(dropouts[0][1]) if dropouts and dropouts[0][0] == ADVERTISE_KEYS else {}
    assert all(not dropped for _, dropped in dropouts[1:])
    return got, first


def _partitions(got: ColumnMetaAnalysis) -> list[int]:
    return sorted(int(p) for p in got.site_labels)


def test_a_node_without_arms_is_dropped_at_its_first_step_and_the_run_goes_on(
    dropouts: list[tuple[str, dict[int, str]]],
) -> None:
    def records(context: Context) -> Any:
        if int(context.node_config["partition-id"]) == 1:
            return SITES[1][0]  # the outcomes only: no arms
        return trial_records(context)

    got, first = _two_arm(records, dropouts)
    assert _partitions(got) == [0, 2, 3]
    assert len(first) == 1
    (reason,) = first.values()
    assert "effect='MD' needs records(context) to return (outcomes, arms)" in reason
    assert "\n" not in reason


def test_an_arm_other_than_0_or_1_is_refused_at_the_first_step(
    dropouts: list[tuple[str, dict[int, str]]],
) -> None:
    def records(context: Context) -> Any:
        outcomes, arms = trial_records(context)
        if int(context.node_config["partition-id"]) == 2:
            arms = np.where(arms == 0, 2, 1)  # 2 for control: neither 0 nor 1
        return outcomes, arms

    got, first = _two_arm(records, dropouts)
    assert _partitions(got) == [0, 1, 3]
    (reason,) = first.values()
    assert "arms must be 0 (control) or 1 (treated)" in reason
    assert "too small" not in reason


def test_arm_local_data_checks_the_arms_itself() -> None:
    outcomes = np.full((4, 1), 0.5)
    with pytest.raises(InputDataError, match=r"0 \(control\) or 1 \(treated\)"):
        arm_local_data(outcomes, np.array([0, 1, 2, 1]))
    with pytest.raises(InputDataError, match=r"0 \(control\) or 1 \(treated\)"):
        arm_local_data(outcomes, np.array([0.0, 1.0, 0.5, 1.0]))  # never truncated to 0
    local, shown = arm_local_data(outcomes, np.array([True, False, True, True]))
    assert list(shown.values()) == [[3, 1]]  # [treated, control]
    arms = local[State.ARMS]
    assert arms.dtype == np.int64 and arms.tolist() == [1, 0, 1, 1]


def test_boolean_arms_are_the_0_1_arms(dropouts: list[tuple[str, dict[int, str]]]) -> None:
    def as_bool(context: Context) -> Any:
        outcomes, arms = trial_records(context)
        return outcomes, arms == 1  # what df.treated == 1 gives

    got, first = _two_arm(as_bool, dropouts)
    assert first == {}
    want, _ = _two_arm(trial_records, [])
    assert _partitions(got) == list(range(len(COUNTS)))
    assert isinstance(want.result, TwoArmMetaAnalysis)
    assert isinstance(got.result, TwoArmMetaAnalysis)
    np.testing.assert_array_equal(got.result.arm_counts, want.result.arm_counts)
    np.testing.assert_allclose(got.random_effects_mean, want.random_effects_mean, rtol=1e-12)


def test_bad_arms_are_refused_as_arms(dropouts: list[tuple[str, dict[int, str]]]) -> None:
    def records(context: Context) -> Any:
        outcomes, arms = trial_records(context)
        if int(context.node_config["partition-id"]) == 3:
            return outcomes, arms[:-1]  # one arm short
        return outcomes, arms

    got, first = _two_arm(records, dropouts)
    assert _partitions(got) == [0, 1, 2]
    (reason,) = first.values()
    assert "arms" in reason and "labels" not in reason
    assert "one per record" in reason
