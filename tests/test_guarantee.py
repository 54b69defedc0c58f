"""Issue 17, item 3: the guarantee a result states (dp, epsilon, delta, unit, adversary).

- A setting that is not DP (the ``paper`` profile, CGM at a per-release epsilon >= 1) shows
  no epsilon or delta anywhere: ``spent``, ``summary()``, ``result_to_dict/json/frame``, the
  engine's cells, the Flower document.
- Every (epsilon, delta) pair stored holds together: the accountant's delta at the stored
  epsilon is at most the stored delta.
- Every result states its unit of privacy and the adversary it assumes, from one place.
- The adaptive floor spends nothing when no weighted statistic is released.
- A large epsilon warns (:data:`EPSILON_WARNING_THRESHOLD`); one that cannot be calibrated
  is refused with the reason.
"""

from __future__ import annotations

import json
import math
import warnings
from typing import Any

import numpy as np
import pytest

from fa_hetdp import PrivateStatistics, private_statistics
from fa_hetdp.config.protocol import ProtocolConfig
from fa_hetdp.dp.accounting import privacy_spent
from fa_hetdp.dp.calibration import EPSILON_WARNING_THRESHOLD, WeakPrivacyWarning
from fa_hetdp.errors import BaselineWarning, PrivacyParameterError
from fa_hetdp.experiments.engine import run_grid
from fa_hetdp.experiments.grid import GridSpec
from fa_hetdp.protocol.guarantee import UNIT_OF_PRIVACY, guarantee_of
from fa_hetdp.protocol.plan import plan_protocol
from fa_hetdp.report.results import result_to_dict, result_to_frame, result_to_json
from fa_hetdp.secagg.params import choose_parameters


def data(n: int = 40, d: int = 4) -> np.ndarray:
    return np.random.default_rng(0).random((n, d))


def quiet(**kwargs: Any) -> PrivateStatistics:
    settings = {"epsilon": 1.0, "delta": 1e-5, "rng": 2, **kwargs}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BaselineWarning)
        return private_statistics(data(), **settings)


NOT_DP = [
    pytest.param({"profile": "paper"}, id="paper-profile"),
    pytest.param(  # epsilon_k = 8/4 = 2 >= 1 for each of the 4 counted releases
        {"mechanism": "cgm", "composition": "basic", "adaptive_floor": False, "epsilon": 8.0},
        id="cgm-at-epsilon-k-2",
    ),
]


def _numbers_named(obj: object, names: tuple[str, ...]) -> list[object]:
    """Every value under a key in ``names`` anywhere in a JSON-like object."""
    found: list[object] = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k in names:
                found.append(v)
            found.extend(_numbers_named(v, names))
    elif isinstance(obj, list):
        for v in obj:
            found.extend(_numbers_named(v, names))
    return found


@pytest.mark.parametrize("settings", NOT_DP)
def test_a_setting_that_is_not_dp_states_no_epsilon(settings: dict[str, object]) -> None:
    result = quiet(**settings)
    assert result.spent.epsilon is None
    assert result.spent.delta is None
    assert result.spent.delta_at_target_epsilon is None
    summary = result.summary()
    assert "epsilon_spent" not in summary and "delta_spent" not in summary
    g = result.guarantee
    assert g.dp is False and g.epsilon is None and g.delta is None and g.not_dp_because
    exported = result_to_dict(result)
    assert exported["guarantee"]["dp"] is False
    eps_values = _numbers_named(exported, ("epsilon", "delta", "epsilon_spent", "delta_spent"))
    assert all(v is None for v in eps_values), eps_values
    text = json.loads(result_to_json(result))
    assert all(v is None for v in _numbers_named(text, ("epsilon", "delta")))
    frame = result_to_frame(result)
    assert "epsilon" not in frame.attrs["guarantee"]  # omitted, never a number


def test_the_paper_profile_is_marked_not_dp_in_the_engine() -> None:
    grid = GridSpec(epsilons=(1.0,), delta=1e-5, repeats=2, profile="paper")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BaselineWarning)
        result = run_grid(data(), grid, progress=False)
    (cell,) = result.cells
    assert cell.is_baseline
    assert cell.spent_epsilon is None and cell.spent_delta is None
    assert cell.to_dict()["spent_epsilon"] is None


@pytest.mark.parametrize("composition", ["basic", "gdp"])
def test_every_stored_pair_holds_together(composition: str) -> None:
    grid = GridSpec(epsilons=(0.5, 2.0), delta=1e-5, repeats=2, compositions=(composition,))
    x = data()
    result = run_grid(x, grid, progress=False)
    for cell in result.cells:
        config = ProtocolConfig(epsilon=cell.epsilon, delta=1e-5, composition=composition)
        spent = privacy_spent(plan_protocol(config, n=x.shape[0], d=x.shape[1]).budget)
        assert cell.spent_epsilon is not None and cell.spent_delta is not None
        mech = plan_protocol(config, n=x.shape[0], d=x.shape[1]).mechanism
        _, delta_at = mech.guarantee(spent.mu, delta=cell.spent_delta, epsilon=cell.spent_epsilon)
        assert delta_at <= cell.spent_delta * (1 + 1e-9), (cell.spent_epsilon, cell.spent_delta)


def test_every_pair_in_a_python_result_holds_together() -> None:
    result = quiet(composition="basic", adaptive_floor=False)
    plan = result.plan
    assert plan is not None
    for pair in result_to_dict(result)["privacy"]["guarantees"]:
        _, delta_at = plan.mechanism.guarantee(
            result.spent.mu, delta=pair["delta"], epsilon=pair["epsilon"]
        )
        assert delta_at <= pair["delta"] * (1 + 1e-9)


def test_a_result_states_its_unit_and_adversary() -> None:
    result = quiet(corrupt_fraction=0.1)
    g = result.guarantee
    assert g.dp is True
    assert g.unit_of_privacy == UNIT_OF_PRIVACY
    assert "one client with all its records" in g.unit_of_privacy
    assert "replace-one" in g.unit_of_privacy and "n public" in g.unit_of_privacy
    assert "honest-but-curious" in g.adversary
    assert "at most ceil(gamma n) = 4 colluding clients" in g.adversary
    assert g.epsilon == pytest.approx(1.0) and g.delta == 1e-5
    exported = result_to_dict(result)["guarantee"]
    assert exported == g.as_dict()
    assert set(exported) >= {"unit_of_privacy", "adversary", "epsilon", "delta", "dp"}


def test_without_gamma_the_adversary_says_no_colluding_clients() -> None:
    g = quiet().guarantee
    assert "no colluding clients" in g.adversary


def test_the_secagg_sentence_comes_from_secagg_params() -> None:
    plan = plan_protocol(ProtocolConfig(epsilon=1.0, delta=1e-5, corrupt_fraction=0.05), n=100, d=4)
    params = choose_parameters(100, gamma=0.05, delta=0.05)
    g = guarantee_of(plan, privacy_spent(plan.budget), secagg=params)
    assert params.guarantee() in g.adversary


def test_the_flower_privacy_section_carries_the_guarantee() -> None:
    from fa_hetdp.cli.run import privacy_lines
    from fa_hetdp.server.results import privacy_section

    plan = plan_protocol(ProtocolConfig(epsilon=1.0, delta=1e-5, corrupt_fraction=0.05), n=100, d=4)
    params = choose_parameters(100, gamma=0.05, delta=0.05)
    section = privacy_section(plan, privacy_spent(plan.budget), released=[], secagg=params)
    assert section["guarantee"]["unit_of_privacy"] == UNIT_OF_PRIVACY
    assert params.guarantee() in section["guarantee"]["adversary"]
    lines = privacy_lines({"status": "success", "privacy": section})
    assert any(UNIT_OF_PRIVACY in line for line in lines), lines
    assert any("adversary" in line and "colluding" in line for line in lines), lines


def test_the_adaptive_floor_buys_nothing_for_mean_only() -> None:
    config = ProtocolConfig(epsilon=1.0, delta=1e-5, adaptive_floor=True, statistics=("mean",))
    plan = plan_protocol(config, n=100, d=8)
    assert not plan.adaptive
    assert [r.name for r in plan.budget.releases] == ["mean"]
    mu_total = plan.mechanism.total_mu(1.0, 1e-5)
    assert plan.budget.release("mean").mu_share == pytest.approx(mu_total, rel=1e-12)


def test_epsilon_above_the_threshold_warns_and_says_so() -> None:
    assert EPSILON_WARNING_THRESHOLD == 10.0
    with pytest.warns(WeakPrivacyWarning, match=r"epsilon = 20 > 10"):
        plan = plan_protocol(ProtocolConfig(epsilon=20.0, delta=1e-5), n=50, d=4)
    assert any("epsilon = 20 > 10" in label for label in plan.labels)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plan_protocol(ProtocolConfig(epsilon=10.0, delta=1e-5), n=50, d=4)


@pytest.mark.parametrize("epsilon", [1e12, 1e100, 1e300])
def test_epsilon_that_cannot_be_calibrated_is_refused_with_the_reason(epsilon: float) -> None:
    with (
        warnings.catch_warnings(),
        pytest.raises(PrivacyParameterError, match=r"epsilon=.* cannot be calibrated"),
    ):
        warnings.simplefilter("ignore", WeakPrivacyWarning)
        plan_protocol(ProtocolConfig(epsilon=epsilon, delta=1e-5), n=50, d=4)


def test_noise_below_one_step_of_the_ring_is_refused() -> None:
    config = ProtocolConfig(epsilon=1e9, delta=1e-5, adaptive_floor=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", WeakPrivacyWarning)
        plan = plan_protocol(config, n=10_000, d=4)
    problem = plan.encoding_problem(32)
    assert problem is not None and "rounds to 0" in problem
    assert plan.encoding_problem(64) is None
    assert math.isfinite(plan.sigma("mean"))
