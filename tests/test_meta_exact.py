"""The exact meta-analysis (fa_hetdp.stats.meta) against statsmodels, and its input checks.

Reference: statsmodels ``combine_effects(theta_j, v_j, method_re="dl")`` per coordinate
(statsmodels 0.14, DerSimonian-Laird). statsmodels puts an untruncated (negative) ``tau2`` into
its random-effects weights; ours truncate at 0 (the published estimator), so the
random-effects mean is compared where ``tau2_raw >= 0`` and equals the fixed effect elsewhere.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from fa_hetdp import InputDataError, MetaAnalysis, meta_analysis
from fa_hetdp.stats.meta import i2_from_q

combine_effects = pytest.importorskip("statsmodels.stats.meta_analysis").combine_effects


def _federation(
    rng: np.random.Generator, n: int, d: int, spread: float
) -> tuple[np.ndarray, np.ndarray]:
    m = rng.integers(2, 40, n)
    ids = np.repeat(np.arange(n), m)
    centres = np.clip(0.5 + spread * rng.standard_normal((n, d)), 0.05, 0.95)
    x = np.clip(centres[ids] + 0.2 * rng.standard_normal((ids.size, d)), 0.0, 1.0)
    perm = rng.permutation(ids.size)  # records need not be grouped by client
    return x[perm], ids[perm]


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4])
def test_every_coordinate_equals_statsmodels(seed: int) -> None:
    rng = np.random.default_rng(seed)
    spread = [0.0, 0.02, 0.1, 0.3, 0.05][seed]
    x, ids = _federation(rng, n=int(rng.integers(2, 12)), d=7, spread=spread)
    res = meta_analysis(x, ids)
    assert isinstance(res, MetaAnalysis)
    n = int(ids.max()) + 1
    seen_negative = False
    for j in range(x.shape[1]):
        theta = np.array([x[ids == i, j].mean() for i in range(n)])
        v = np.array([x[ids == i, j].var(ddof=1) / np.sum(ids == i) for i in range(n)])
        with np.errstate(invalid="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # sqrt of a negative tau2's var
            ref = combine_effects(theta, v, method_re="dl")
        assert res.q[j] == pytest.approx(ref.q, rel=1e-10, abs=1e-12)
        assert res.tau2_raw[j] == pytest.approx(ref.tau2, rel=1e-10, abs=1e-14)
        assert res.tau2[j] == pytest.approx(max(ref.tau2, 0.0), rel=1e-10, abs=1e-14)
        assert res.pooled_mean[j] == pytest.approx(ref.mean_effect_fe, rel=1e-10)
        assert res.i2[j] == pytest.approx(max(ref.i2, 0.0), rel=1e-10, abs=1e-12)
        if ref.tau2 >= 0:
            assert res.random_effects_mean[j] == pytest.approx(ref.mean_effect_re, rel=1e-10)
        else:
            seen_negative = True
            assert res.random_effects_mean[j] == pytest.approx(ref.mean_effect_fe, rel=1e-10)
    if seed == 0:
        assert seen_negative  # the homogeneous federation exercises the truncation
    q_total = float(np.sum(res.q))
    assert res.i2_total == pytest.approx(max(0.0, (q_total - 7 * (n - 1)) / q_total), abs=1e-12)
    assert res.i2_average == pytest.approx(float(np.mean(res.i2)), abs=1e-12)
    assert res.n == n and res.d == 7
    assert np.array_equal(res.records_per_client, np.bincount(ids))


def test_a_constant_coordinate_is_nan_and_labelled() -> None:
    rng = np.random.default_rng(7)
    x, ids = _federation(rng, n=4, d=3, spread=0.1)
    x[ids == 2, 1] = 0.25  # client 2 constant on coordinate 1: v = 0
    res = meta_analysis(x, ids)
    assert np.isnan(res.q[1]) and np.isnan(res.i2[1]) and np.isnan(res.random_effects_mean[1])
    assert np.all(np.isfinite(res.q[[0, 2]]))
    assert any("[1]" in label and "constant" in label for label in res.labels)
    assert res.i2_average == pytest.approx(float(np.mean(res.i2[[0, 2]])))


def test_i2_from_q_truncates() -> None:
    assert np.allclose(i2_from_q(np.array([1.0, 4.0, 0.0]), 3), [0.0, 0.5, 0.0])


@pytest.mark.parametrize(
    ("records", "ids", "match"),
    [
        (np.full((4, 2), 0.5), [0, 0, 2, 2], "missing: \\[1\\]"),
        (np.full((4, 2), 0.5), [0, 0, 0, 1], "at least 2 records"),
        (np.full((4, 2), 0.5), [0, 0, -1, -1], "0..n-1"),
        (np.full((4, 2), 0.5), [0, 0, 1.5, 1], "integers"),
        (np.full((4, 2), 1.5), [0, 0, 1, 1], "\\[0, 1\\]"),
        (np.array([[0.5, np.nan]] * 4), [0, 0, 1, 1], "finite"),
        (np.full((4, 2), 0.5), [0, 0, 1], "one id per record"),
        (np.full(4, 0.5), [0, 0, 1, 1], "\\(N, d\\)"),
        (np.full((4, 2), 0.5), [0, 0, 0, 0], "at least 2 clients"),
    ],
)
def test_bad_input_is_refused_with_one_line(records: object, ids: object, match: str) -> None:
    with pytest.raises(InputDataError, match=match) as info:
        meta_analysis(records, ids)  # type: ignore[arg-type]
    assert "\n" not in str(info.value)
