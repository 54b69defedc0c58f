"""The recommended settings are defined once, and the planner plans what the API runs.

``fa_hetdp.plan_accuracy`` / ``min_clients`` / ``min_epsilon`` with nothing but the budget must
plan the settings ``fa_hetdp.private_statistics`` runs with nothing but the data and the budget
(the adaptive floor included); both read :data:`RECOMMENDED_SETTINGS`.
"""

from __future__ import annotations

from dataclasses import fields

import numpy as np
import pytest

import fa_hetdp
from fa_hetdp.accuracy.inverses import min_clients, min_epsilon
from fa_hetdp.config.protocol import ProtocolConfig
from fa_hetdp.protocol.recommended import RECOMMENDED_SETTINGS, recommended_config

EPS, DELTA = 1.0, 1e-5


def _data(n: int = 400, d: int = 8) -> np.ndarray:
    return np.random.default_rng(3).uniform(0.0, 1.0, size=(n, d))


def test_recommended_is_protocol_defaults_plus_the_one_mapping() -> None:
    rec = recommended_config(epsilon=EPS, delta=DELTA)
    base = ProtocolConfig(EPS, DELTA)
    assert rec.adaptive_floor is True
    assert base == rec  # one set of defaults (issue 18): ProtocolConfig's are the recommended
    for f in fields(ProtocolConfig):
        expected = RECOMMENDED_SETTINGS.get(f.name, getattr(base, f.name))
        assert getattr(rec, f.name) == expected, f.name


def test_none_means_not_given_and_a_given_value_wins() -> None:
    assert recommended_config(epsilon=EPS, delta=DELTA, adaptive_floor=None).adaptive_floor
    off = recommended_config(epsilon=EPS, delta=DELTA, adaptive_floor=False)
    assert off.adaptive_floor is False


def test_planner_plans_the_settings_the_api_runs() -> None:
    x = _data()
    run = fa_hetdp.private_statistics(x, epsilon=EPS, delta=DELTA, rng=0)
    acc = fa_hetdp.plan_accuracy(x.shape[0], x.shape[1], epsilon=EPS, delta=DELTA)
    assert run.plan is not None
    assert acc.plan.config == run.plan.config == recommended_config(epsilon=EPS, delta=DELTA)
    assert acc.plan.adaptive and run.plan.adaptive
    # the stage-0 histogram is calibrated identically (it does not depend on the data)
    assert acc.plan.floor_sigma == pytest.approx(run.plan.floor_sigma, rel=1e-12)


@pytest.mark.parametrize("adaptive", [True, False])
def test_inverses_default_to_the_recommended_settings(adaptive: bool) -> None:
    common = {"statistic_key": "dispersion", "target": 0.1, "delta": DELTA}
    default_n = min_clients(16, epsilon=EPS, **common)
    explicit_n = min_clients(16, epsilon=EPS, adaptive_floor=adaptive, **common)
    default_eps = min_epsilon(500, 16, **common)
    explicit_eps = min_epsilon(500, 16, adaptive_floor=adaptive, **common)
    # the floor's histogram takes 5 % of the budget: off and on plan different answers, and
    # the default is the recommended one (on)
    assert (default_n == explicit_n) is adaptive
    assert (default_eps == explicit_eps) is adaptive
