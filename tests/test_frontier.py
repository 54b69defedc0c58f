"""Tests of fa_hetdp.experiments.frontier: the search, the planner's curve and measured checks.

``tests/test_reproduce.py::test_reproduce_quick_end_to_end`` checks that ``fa-hetdp reproduce``
writes ``frontier.png``, its table and the measured checks.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from fa_hetdp.accuracy.planner import accuracy_of_plan
from fa_hetdp.experiments import frontier as fr
from fa_hetdp.protocol.plan import plan_protocol

TOLERANCE = 0.10
"""Measured / planned per-coordinate RMSE must lie in [0.9, 1.1] (seeded; 100 repeats x 64
coordinates give a Monte-Carlo error of about 1-2 %; observed 0.97-1.04)."""


@pytest.mark.parametrize("answer", [2, 3, 17, 1234, 987_654])
@pytest.mark.parametrize("guess", [2, 50, 1234, 10**7])
def test_smallest_finds_the_threshold_to_the_stated_precision(answer: int, guess: int) -> None:
    found = fr._smallest(lambda n: n >= answer, guess)
    assert found is not None and answer <= found <= math.ceil(answer * (1 + fr.PRECISION))


def test_smallest_says_none_beyond_the_search() -> None:
    assert fr._smallest(lambda n: False, 100) is None


def test_frontier_points_meet_the_target_and_scale_as_the_noise_does() -> None:
    points = fr.frontier(dimensions=(64,), epsilons=(1.0, 4.0), statistics=("mean", "q"))
    points += fr.frontier(dimensions=(3072,), epsilons=(1.0,), statistics=("mean",))
    got = {(p.statistic, p.d, p.epsilon): p.clients for p in points}
    assert len(got) == 5 and all(v is not None for v in got.values())
    assumptions = fr.population_assumptions()
    for (statistic, d, epsilon), n in got.items():
        assert n is not None
        config = fr._config(epsilon)
        at_n = accuracy_of_plan(plan_protocol(config, n=n, d=d), assumptions)
        below = accuracy_of_plan(plan_protocol(config, n=math.floor(n / 1.02), d=d), assumptions)
        assert fr._error(at_n, statistic) <= fr.TARGET < fr._error(below, statistic)
    # mu' per coordinate: sigma ~ sqrt(d)/epsilon-ish and error ~ sigma/n, so n* ~ sqrt(d).
    ratio_d = got[("mean", 3072, 1.0)] / got[("mean", 64, 1.0)]  # type: ignore[operator]
    assert ratio_d == pytest.approx(math.sqrt(3072 / 64), rel=0.03)
    assert got[("mean", 64, 4.0)] < got[("mean", 64, 1.0)] / 3  # type: ignore[operator]


@pytest.mark.parametrize(("statistic", "d", "epsilon"), fr.MEASURED[:5])
def test_measured_points_lie_on_the_planners_curve(statistic: str, d: int, epsilon: float) -> None:
    (point,) = fr.frontier(dimensions=(d,), epsilons=(epsilon,), statistics=(statistic,))
    assert point.clients is not None
    m = fr.measure_point(
        statistic, d, epsilon, point.clients, repeats=100, rng=np.random.default_rng(11)
    )
    assert m.planned == pytest.approx(fr.TARGET, rel=0.02)
    assert abs(m.ratio - 1.0) <= TOLERANCE, (statistic, m.planned, m.measured)
    assert m.implied_clients == pytest.approx(point.clients * m.measured / fr.TARGET)


def test_population_matches_its_stated_assumptions() -> None:
    x = fr.draw_population(4000, 64, rng=np.random.default_rng(3))
    s2 = x.var(axis=1)
    assert s2.max() < fr.VARIANCE_FLOOR  # every weight is exactly W = 20, as the planner assumes
    assert abs(float(s2.mean()) - fr.WITHIN_VARIANCE) < 0.001
    assert abs(float(x.mean()) - 0.5) < 0.002
