"""A statistic is one record; one I^2 function (issue 18, item 3).

Higgins & Thompson's ``H^2 = Q/(n - 1)`` (Stat. Med. 21:1539, 2002, eq. 6), a post-processing
of ``Q''``, is added in the test by registering one record; it must then appear in the exact
statistics, the private result, the JSON export, the intervals, the expected errors, the
planner's table, the batch and the engine, with no other change. Reference values are the
``Q`` values of the same objects divided by ``n - 1`` (the definition).
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from fa_hetdp import plan_accuracy, private_statistics
from fa_hetdp.accuracy.metrics import batch_emse, expected_mse
from fa_hetdp.accuracy.releases import released_values
from fa_hetdp.config.protocol import ProtocolConfig
from fa_hetdp.experiments.engine import run_grid
from fa_hetdp.experiments.grid import GridSpec
from fa_hetdp.protocol.intervals import average_intervals, summed_i_squared
from fa_hetdp.protocol.plan import plan_protocol
from fa_hetdp.protocol.server import estimate_stage2, scalar_summaries
from fa_hetdp.protocol.simulate import private_statistics_batch
from fa_hetdp.registry import (
    STATISTIC_KEYS,
    Derivation,
    StatisticSpec,
    registered,
    value_of,
)
from fa_hetdp.report.results import released_truth, result_to_dict
from fa_hetdp.stats.exact import i_squared, true_statistics

N, D = 40, 6


def _h2(q: np.ndarray, n: int) -> np.ndarray:
    return q / (n - 1)


H2 = StatisticSpec(
    key="h2",
    label="H²''",
    name="H²",
    release="q",
    post_processing="H2'' = Q'' / (n - 1)  (Higgins & Thompson 2002)",
    truth="h2",
    scale="sum",
    derivation=Derivation(source="q", transform=_h2, slope=lambda n: 1.0 / (n - 1)),
)


@pytest.fixture
def x() -> np.ndarray:
    return np.random.default_rng(7).uniform(0.0, 1.0, size=(N, D))


def _close(a: object, b: object) -> None:
    np.testing.assert_allclose(np.asarray(a, float), np.asarray(b, float), rtol=1e-12, atol=0)


def test_one_record_adds_h2_everywhere(x: np.ndarray) -> None:
    with registered(H2):
        assert "h2" in STATISTIC_KEYS
        truth = true_statistics(x)
        _close(truth.summary()["h2"], np.mean(truth.q) / (N - 1))  # exact

        result = private_statistics(x, epsilon=1.0, delta=1e-5, rng=11)
        _close(value_of(result, "h2"), result.q / (N - 1))  # private
        _close(result.summary()["h2"], np.mean(result.q) / (N - 1))
        exported = json.loads(json.dumps(result_to_dict(result)))  # JSON export
        _close(exported["statistics"]["h2"], result.q / (N - 1))

        ci = result.confidence_intervals()  # intervals: the image of Q's
        _close(ci.lower["h2"], ci.lower["q"] / (N - 1))
        _close(ci.upper["h2"], ci.upper["q"] / (N - 1))
        assert result.plan is not None
        avg = average_intervals(result, result.plan)
        _close(avg.upper["h2"], avg.upper["q"] / (N - 1))
        released = {v.key: v for v in released_values(result, result.plan)}
        _close(released["h2"].noise_std, released["q"].noise_std / (N - 1))

        e = expected_mse(truth, result.plan)  # expected error
        _close(e.as_dict()["h2"], e.as_dict()["q"] / (N - 1) ** 2)

        acc = plan_accuracy(N, D, epsilon=1.0, delta=1e-5)  # the planner's table
        _close(acc.error("h2").rmse_coordinate, acc.error("q").rmse_coordinate / (N - 1))
        _close(acc.error("h2").typical, acc.error("q").typical / (N - 1))

        batch = private_statistics_batch(x, result.plan.config, repeats=4, rng=3)
        _close(batch.summary()["h2"], np.mean(batch.q) / (N - 1))  # batch
        assert "h2" in batch_emse(batch)

        only = plan_protocol(ProtocolConfig(epsilon=1.0, delta=1e-5, statistics=("h2",)), n=N, d=D)
        assert set(only.releases) == {"weighted", "q"}  # the plan makes Q'' for it

        grid = GridSpec(
            epsilons=(1.0,), delta=1e-5, mechanisms=("agm",), placements=("central",),
            compositions=("basic",), repeats=2, seed=5,
        )  # fmt: skip
        cell = run_grid(x, grid, progress=False).cells[0]  # the engine
        assert "h2" in cell.emse and "h2" in cell.expected_mse
    assert "h2" not in STATISTIC_KEYS


def test_registering_leaves_the_other_numbers_identical(x: np.ndarray) -> None:
    def run() -> tuple[bytes, str]:
        r = private_statistics(x, epsilon=1.0, delta=1e-5, rng=11, extra_i2_noise=True)
        arrays = [r.mean, r.dispersion, r.weighted_mean, r.q, r.i2, r.i2_extra]
        summary = {k: v for k, v in r.summary().items() if k != "h2"}
        return b"".join(np.asarray(a).tobytes() for a in arrays), repr(summary)

    before = run()
    with registered(H2):
        during = run()
    assert before == during


def test_a_derived_statistic_needs_a_known_released_source() -> None:
    bad = StatisticSpec(
        key="h2x", label="x", name="x", release="q", post_processing="", truth="h2x",
        scale="sum", derivation=Derivation("i2_extra", _h2, lambda n: 1.0),
    )  # fmt: skip
    with pytest.raises(ValueError, match="source of a derived statistic"):
        with registered(bad):
            pass
    unknown = StatisticSpec(
        key="h2y", label="y", name="y", release="q", post_processing="", truth="h2y",
        scale="sum", derivation=Derivation("nope", _h2, lambda n: 1.0),
    )  # fmt: skip
    with pytest.raises(KeyError, match="unknown statistic 'nope'"):
        with registered(unknown):
            pass
    assert "h2x" not in STATISTIC_KEYS and "h2y" not in STATISTIC_KEYS


@pytest.mark.parametrize("seed", range(5))
def test_every_i_squared_agrees_with_the_one_function(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 50))
    d = int(rng.integers(1, 8))
    q = rng.normal(n - 1, 2.0 * n, size=(3, d))  # around the kink, negatives included
    q[0, 0] = n - 1  # exactly at the kink
    # the server's estimate (stage 2) and its scalar summary
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plan = plan_protocol(
            ProtocolConfig(
                epsilon=1.0,
                delta=1e-5,
                adaptive_floor=False,
                noise_shape="uniform",
                dispersion_center="broadcast",
            ),
            n=n,
            d=d,
        )
    sums = np.concatenate([np.zeros((3, d)), q], axis=1)
    _close(estimate_stage2(sums, plan, n=n).i2, i_squared(q, n))
    _, i2_total = scalar_summaries(np.zeros((3, d)), q, n)
    _close(i2_total, i_squared(np.mean(q, axis=-1), n))
    # the intervals' summed I^2
    _close(summed_i_squared(q.sum(axis=-1), n, d), i_squared(q.sum(axis=-1), n, d))
    _close(i_squared(q.sum(axis=-1), n, d), i_squared(q.mean(axis=-1), n))
    # the report's truth summary
    for value in q[:, 0]:
        got = released_truth({"q": float(value), "n": float(n), "d": float(d)})
        _close(got.get("i2_total", 0.0), i_squared(np.asarray(value), n))
