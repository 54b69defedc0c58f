"""``statistics_of_validated`` and ``within_variance`` work in row chunks: the direct formulas."""

from __future__ import annotations

import numpy as np
import pytest

import fa_hetdp.stats.exact as exact


@pytest.mark.parametrize("chunk_values", [7, 64, 1 << 20])  # 1 row, several rows, one chunk
def test_chunked_statistics_equal_the_direct_formulas(
    chunk_values: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(11)
    x = rng.beta(0.5, 2.0, size=(203, 9))
    x[:5] = 0.3  # constant clients: s_i^2 = 0, at the floor
    monkeypatch.setattr(exact, "WORK_CHUNK_VALUES", chunk_values)
    got = exact.statistics_of_validated(x, variance_floor=0.02)
    s2 = x.var(axis=1)
    w = 1.0 / np.maximum(s2, 0.02)
    mu = x.mean(axis=0)
    mu_bar = (w @ x) / w.sum()
    np.testing.assert_allclose(got.mean, mu, rtol=1e-12)
    np.testing.assert_allclose(got.dispersion, ((x - mu) ** 2).mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(got.weighted_mean, mu_bar, rtol=1e-12)
    np.testing.assert_allclose(got.q, w @ (x - mu_bar) ** 2, rtol=1e-12)
    np.testing.assert_allclose(got.weights, w, rtol=1e-12)
    assert got.n_at_floor == int(np.count_nonzero(s2 <= 0.02)) >= 5
