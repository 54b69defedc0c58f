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

import fa_hetdp
from fa_hetdp.dp.rng import client_generator
from fa_hetdp.errors import PrivacyParameterError
from fa_hetdp.protocol.meta_client import client_round, summarise
from fa_hetdp.protocol.meta_server import (
    PrivateMetaAnalysis,
    assemble_result,
    assemble_round_a,
    assemble_round_b,
    round_sigmas,
    split_round,
)


def _replay(result: PrivateMetaAnalysis) -> PrivateMetaAnalysis:
    """The session in process: each node's seeded generator, the plain sum, the server's
    meta functions, with the plan the run calibrated on the counts it learnt."""
    plan = result.plan
    summaries = [summarise(FEATURES[rows]) for rows in PARTS]
    rngs = [client_generator("simulation", seed=SEED, partition_id=i) for i in range(NODES)]

    def secure_sum(rnd: str, broadcast: object) -> np.ndarray:
        sigmas = round_sigmas(plan, rnd, broadcast)  # type: ignore[arg-type]
        total = np.zeros(sigmas.shape)
        for summary, rng in zip(summaries, rngs, strict=True):
            values = client_round(plan, summary, rnd, broadcast, sigmas, rng)  # type: ignore[arg-type]
            rng.random(values.size)  # the encoding's stochastic rounding draws
            total += values
        return total

    total_a = secure_sum("A", None)
    broadcast_b = assemble_round_a(plan, total_a)
    sums_b, broadcast_c = assemble_round_b(plan, broadcast_b, secure_sum("B", broadcast_b))
    sums_c = split_round(plan, "C", secure_sum("C", broadcast_c))
    return assemble_result(
        plan, broadcast_b, split_round(plan, "A", total_a), sums_b, broadcast_c, sums_c
    )


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
