"""The planned split (benchmarks/planned_split.py): deterministic, data-free, never worse than the
closed form under the planner's model."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from support import benchmark_module

from fa_hetdp.accuracy.assumptions import DataAssumptions, planned_protocol
from fa_hetdp.accuracy.planner import accuracy_of_plan
from fa_hetdp.config.protocol import ProtocolConfig
from fa_hetdp.errors import PrivacyParameterError
from fa_hetdp.protocol.simulate import private_statistics_batch

_split = benchmark_module("planned_split")
planned_split, split_objective = _split.planned_split, _split.split_objective

ASSUME = DataAssumptions.stated(within_variance=1.0 / 12.0)


def _objective(config: ProtocolConfig, n: int, d: int) -> float:
    acc = accuracy_of_plan(planned_protocol(config, n=n, d=d, assumptions=ASSUME), ASSUME)
    return split_objective(acc)


def test_planned_split_is_deterministic() -> None:
    config = ProtocolConfig(1.0, 1e-5, adaptive_floor=True)
    first = planned_split(config, n=500, d=8)
    second = planned_split(config, n=500, d=8)
    assert dict(first) == dict(second)
    assert first.objective == second.objective
    assert set(first) == {"mean", "weighted", "dispersion", "q"}
    assert np.mean(list(first.values())) == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("n", "d", "settings"),
    [
        (1797, 64, {"adaptive_floor": True}),
        (1797, 64, {}),  # W = 1/v_min: the broadcast term of Q'' dominates
        (100, 16, {"adaptive_floor": True}),
        (2000, 8, {"statistics": ("dispersion",)}),
    ],
)
def test_planned_error_not_above_the_closed_form(n: int, d: int, settings: dict[str, Any]) -> None:
    config = ProtocolConfig(1.0, 1e-5, **settings)
    split = planned_split(config, n=n, d=d)
    closed = _objective(config, n, d)  # split=None: the closed form of release_weights
    planned = _objective(ProtocolConfig(1.0, 1e-5, split=dict(split), **settings), n, d)
    assert split.closed_form_objective == pytest.approx(closed, rel=1e-9)
    assert planned == pytest.approx(split.objective, rel=1e-9)
    assert planned <= closed * (1.0 + 1e-12)


def test_planned_split_moves_budget_at_large_w() -> None:
    # At W = 100 the model sees the broadcast's error in Q'': the weighted release gains.
    split = planned_split(ProtocolConfig(1.0, 1e-5), n=1797, d=64)
    assert split.objective < 0.99 * split.closed_form_objective
    assert (
        split["weighted"] / split["mean"]
        > split.closed_form["weighted"] / split.closed_form["mean"]
    )


def test_same_split_for_two_datasets_of_the_same_shape() -> None:
    n, d = 60, 4
    config = ProtocolConfig(1.0, 1e-5, adaptive_floor=True)
    split = dict(planned_split(config, n=n, d=d))
    rng = np.random.default_rng(7)
    data = (rng.uniform(size=(n, d)), rng.beta(0.5, 3.0, size=(n, d)))
    shares = []
    for x in data:
        batch = private_statistics_batch(
            x, ProtocolConfig(1.0, 1e-5, adaptive_floor=True, split=split), repeats=2, rng=1
        )
        mu = {r.name: r.mu_share for r in batch.plan.budget.releases if r.counts_for_privacy}
        shares.append(mu)
    assert shares[0].keys() == shares[1].keys()
    for k in shares[0]:
        assert shares[0][k] == pytest.approx(shares[1][k], rel=1e-12)


def test_planned_split_refuses_basic_composition() -> None:
    with pytest.raises(PrivacyParameterError, match="composition='basic'"):
        planned_split(ProtocolConfig(1.0, 1e-5, composition="basic"), n=100, d=4)
