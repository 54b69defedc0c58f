"""A Python-API result exports to a dict, to JSON and (pandas installed) to a DataFrame.

The exact counts (``n_clipped``, ``n_at_floor``) are not DP: they are kept apart under
``"not_private"`` with a note saying so.
"""

from __future__ import annotations

import builtins
import json
from typing import Any

import numpy as np
import pytest

import fa_hetdp
from fa_hetdp.report.results import (
    EXACT_COUNTS_NOTE,
    result_to_dict,
    result_to_frame,
    result_to_json,
)


@pytest.fixture(scope="module")
def result() -> fa_hetdp.PrivateStatistics:
    x = fa_hetdp.load_dataset("digits").rows(np.arange(120))
    return fa_hetdp.private_statistics(
        x, epsilon=1.0, delta=1e-5, variance_floor=0.05, rng=np.random.default_rng(4)
    )


def test_dict_holds_every_statistic_and_the_privacy_pairs(
    result: fa_hetdp.PrivateStatistics,
) -> None:
    exported = result_to_dict(result)
    assert exported["n"] == 120 and exported["d"] == 64
    np.testing.assert_array_equal(exported["statistics"]["mean"], result.mean)
    np.testing.assert_array_equal(exported["statistics"]["q"], result.q)
    if result.i2_extra is None:
        assert exported["statistics"]["i2_extra"] is None
    assert exported["scalars"]["i2_total"] == pytest.approx(result.i2_total)
    first, second = exported["privacy"]["guarantees"]
    assert first == {"epsilon": result.spent.epsilon, "delta": result.spent.delta}
    assert second["delta"] == result.spent.delta_at_target_epsilon and second["epsilon"] == 1.0
    assert exported["sigmas"] == dict(result.sigmas)


def test_exact_counts_are_kept_apart_and_labelled(result: fa_hetdp.PrivateStatistics) -> None:
    exported = result_to_dict(result)
    assert exported["not_private"] == {
        "note": EXACT_COUNTS_NOTE,
        "n_clipped": result.n_clipped,
        "n_at_floor": result.n_at_floor,
    }
    assert "NOT differentially private" in EXACT_COUNTS_NOTE
    others = {k for k in exported if k != "not_private"}
    assert not any("clipped" in k or "floor" in k for k in others)


def test_json_is_strict_and_round_trips(result: fa_hetdp.PrivateStatistics) -> None:
    text = result_to_json(result)
    assert "NaN" not in text and "Infinity" not in text
    assert json.loads(text) == json.loads(json.dumps(result_to_dict(result)))


def test_data_frame_one_row_per_coordinate(result: fa_hetdp.PrivateStatistics) -> None:
    pd = pytest.importorskip("pandas")
    frame = result_to_frame(result)
    assert isinstance(frame, pd.DataFrame)
    assert frame.shape[0] == 64 and frame.index.name == "coordinate"
    assert {"mean", "dispersion", "weighted_mean", "q", "i2"} <= set(frame.columns)
    np.testing.assert_array_equal(frame["dispersion"].to_numpy(), result.dispersion)
    assert frame.attrs["not_private"]["note"] == EXACT_COUNTS_NOTE


def test_data_frame_without_pandas_says_how_to_get_it(
    result: fa_hetdp.PrivateStatistics, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_import = builtins.__import__

    def no_pandas(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "pandas" or name.startswith("pandas."):
            raise ImportError("No module named 'pandas'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pandas)
    monkeypatch.delitem(__import__("sys").modules, "pandas", raising=False)
    with pytest.raises(ImportError, match="pip install pandas"):
        result_to_frame(result)


def test_a_simulation_labels_its_exact_values() -> None:
    """``results.json`` of the engine (simulation): the truth and the counts are labelled."""
    from fa_hetdp.experiments.grid import GridSpec
    from fa_hetdp.experiments.results import NOT_PRIVATE_NOTE, ExperimentResult

    grid = GridSpec(epsilons=(1.0,), delta=1e-5, repeats=2)
    exported = ExperimentResult("x", grid, 10, 4, {"mean": 0.5}, 1, 2, ()).to_dict()
    assert exported["not_private"] == {
        "keys": ["truth", "n_at_floor", "n_clipped"],
        "note": NOT_PRIVATE_NOTE,
    }
    assert all(key in exported for key in exported["not_private"]["keys"])
    assert "NOT differentially private" in NOT_PRIVATE_NOTE
