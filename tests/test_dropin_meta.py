"""measure(..., analysis="meta"): the private meta-analysis as a drop-in measurement.

Before: the meta rounds ran (every release made) and measure() then raised "the measurement
ended without a result"; with a budget it failed before sending (plan_protocol refuses a
meta-analysis). Now it returns the :class:`PrivateMetaAnalysis`, charged to the budget
before any message, equal to its in-process replay.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_dropin import (
    FEATURES,
    NODES,
    PARTS,
    SEED,
    fast_poll,  # noqa: F401  (the autouse fixture: no poll wait)
    make_grid,
    server_context,
)
from test_meta_flower import replay_records

import fa_hetdp
from fa_hetdp.errors import PrivacyParameterError
from fa_hetdp.protocol.meta_server import PrivateMetaAnalysis


def _replay(result: PrivateMetaAnalysis) -> PrivateMetaAnalysis:
    """The session in process, with the plan the run calibrated on the counts it learnt."""
    return replay_records(result.plan, [FEATURES[rows] for rows in PARTS], SEED)


def test_measure_returns_the_meta_analysis_charged_and_equal_to_its_replay() -> None:
    budget = fa_hetdp.PrivacyBudget(epsilon=2.0, delta=1e-5)
    result = fa_hetdp.flower.measure(
        make_grid(), server_context(), epsilon=1.0, delta=1e-5, seed=SEED, analysis="meta",
        budget=budget,
    )  # fmt: skip
    assert isinstance(result, PrivateMetaAnalysis)
    assert (result.n, result.d) == (NODES, FEATURES.shape[1])
    assert [int(m) for m in result.records_per_client] == [len(rows) for rows in PARTS]
    assert result.spent is not None and result.spent.epsilon == pytest.approx(1.0, rel=1e-6)
    assert budget.spent().epsilon == pytest.approx(1.0, rel=1e-6)  # charged before the run
    want = _replay(result)
    assert result.broadcast_b is not None and want.broadcast_b is not None
    for name in ("centre", "floor", "kappa"):
        np.testing.assert_allclose(
            getattr(result.broadcast_b, name), getattr(want.broadcast_b, name), rtol=1e-9
        )
    for name in ("pooled_mean", "q", "i2", "tau2"):
        np.testing.assert_allclose(
            getattr(result, name), getattr(want, name), rtol=1e-6, atol=1e-9, err_msg=name
        )


def test_a_meta_measurement_over_budget_sends_nothing() -> None:
    grid = make_grid()
    budget = fa_hetdp.PrivacyBudget(epsilon=0.5, delta=1e-5)
    with pytest.raises(PrivacyParameterError):
        fa_hetdp.flower.measure(
            grid, server_context(), epsilon=1.0, delta=1e-5, seed=SEED, analysis="meta",
            budget=budget,
        )  # fmt: skip
    assert grid.log == []


def test_a_meta_measurement_refuses_a_summary_before_sending() -> None:
    grid = make_grid()
    with pytest.raises(PrivacyParameterError, match="summary='pooled' does not apply"):
        fa_hetdp.flower.measure(
            grid, server_context(), epsilon=1.0, delta=1e-5, seed=SEED, analysis="meta",
            summary="pooled", image_shape=(8, 8, 1),
        )  # fmt: skip
    assert grid.log == []
