"""Tests for fa_hetdp.stats.exact (exact statistics, input policy)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from fa_hetdp.errors import InputDataError, PrivacyParameterError
from fa_hetdp.stats.exact import (
    client_weights,
    i_squared,
    true_statistics,
    validate_clients,
    within_variance,
)


def test_hand_computed_example() -> None:
    # Reference values computed by hand (exact fractions), tolerance 1e-12:
    # x1=(0,1): s^2=1/4 -> w=4; x2=(1,1): s^2=0 -> floor 0.01 -> w=100;
    # x3=(1/2,0): s^2=1/16 -> w=16.  B=120.
    x = np.array([[0.0, 1.0], [1.0, 1.0], [0.5, 0.0]])
    t = true_statistics(x, variance_floor=0.01)
    np.testing.assert_allclose(t.weights, [4.0, 100.0, 16.0], rtol=1e-12)
    assert t.n_at_floor == 1
    assert (t.n, t.d, t.n_clipped) == (3, 2, 0)
    np.testing.assert_allclose(t.mean, [0.5, 2 / 3], rtol=1e-12)
    np.testing.assert_allclose(t.dispersion, [1 / 6, 2 / 9], rtol=1e-12)
    np.testing.assert_allclose(t.weighted_mean, [108 / 120, 104 / 120], rtol=1e-12)
    np.testing.assert_allclose(t.q, [6.8, 208 / 15], rtol=1e-12)
    np.testing.assert_allclose(t.i2, [12 / 17, 89 / 104], rtol=1e-12)
    summary = t.summary()
    assert summary["q"] == pytest.approx((6.8 + 208 / 15) / 2, rel=1e-12)
    assert summary["n_at_floor"] == 1.0


def test_constant_variance_gives_weighted_mean_equal_to_mean() -> None:
    # Def. 2.5 without the stray 1/n: s_i^2 = const -> mu_bar = mu (the paper's own remark).
    rng = np.random.default_rng(1)
    base = rng.permutation(np.array([0.0, 0.2, 0.4, 0.6, 0.8, 1.0]))
    x = np.stack([rng.permutation(base) for _ in range(40)])
    s2 = within_variance(x)
    np.testing.assert_allclose(s2, s2[0], rtol=1e-12)
    t = true_statistics(x, variance_floor=0.01)
    np.testing.assert_allclose(t.weighted_mean, t.mean, rtol=1e-12, atol=1e-15)


def test_weights_floor_and_range() -> None:
    x = np.array([[0.3, 0.3, 0.3], [0.0, 1.0, 0.5], [0.0, 0.0, 1.0]])
    w, at_floor = client_weights(x, variance_floor=0.05)
    assert at_floor == 1
    assert w[0] == pytest.approx(20.0)
    assert np.all(w >= 4.0) and np.all(w <= 20.0)


@settings(max_examples=60, deadline=None)
@given(
    arrays(
        np.float64,
        st.tuples(st.integers(2, 12), st.integers(1, 6)),
        elements=st.floats(0.0, 1.0, allow_nan=False),
    ),
    st.floats(1e-4, 0.25),
)
def test_i2_in_unit_interval_and_permutation_invariance(x: np.ndarray, floor: float) -> None:
    t = true_statistics(x, variance_floor=floor)
    assert np.all(t.i2 >= 0.0) and np.all(t.i2 < 1.0)
    assert np.all(t.q >= -1e-12) and np.all(t.dispersion >= 0.0)
    assert np.all((t.weighted_mean >= 0.0) & (t.weighted_mean <= 1.0))
    perm = np.random.default_rng(0).permutation(x.shape[0])
    tp = true_statistics(x[perm], variance_floor=floor)
    for name in ("mean", "dispersion", "weighted_mean", "q", "i2"):
        np.testing.assert_allclose(
            getattr(tp, name), getattr(t, name), rtol=1e-9, atol=1e-12, err_msg=name
        )


def test_i_squared_guards_nonpositive_q() -> None:
    q = np.array([-5.0, 0.0, 3.0, 4.0, 8.0])
    np.testing.assert_allclose(i_squared(q, 5), [0.0, 0.0, 0.0, 0.0, 0.5])


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_rejected(bad: float) -> None:
    x = np.full((3, 2), 0.5)
    x[1, 1] = bad
    with pytest.raises(InputDataError, match=r"finite.*\[1, 1\]"):
        validate_clients(x)


@pytest.mark.parametrize(
    ("shape", "pattern"),
    [((5,), "ndim=1"), ((2, 3, 4), "ndim=3"), ((1, 4), "n=1"), ((3, 0), "d=0"), ((0, 3), "n=0")],
)
def test_bad_shapes_rejected(shape: tuple[int, ...], pattern: str) -> None:
    with pytest.raises(InputDataError, match=pattern):
        validate_clients(np.zeros(shape))


def test_non_numeric_rejected() -> None:
    with pytest.raises(InputDataError, match="real numbers"):
        validate_clients(np.array([["a", "b"], ["c", "d"]]))
    with pytest.raises(InputDataError, match="real numbers"):
        validate_clients(np.ones((2, 2), dtype=complex))


def test_out_of_range_clipped_and_counted() -> None:
    x = np.array([[-0.5, 0.5, 1.5], [0.2, 2.0, 0.3]])
    clipped, n_clipped = validate_clients(x)
    assert n_clipped == 3
    np.testing.assert_array_equal(clipped, [[0.0, 0.5, 1.0], [0.2, 1.0, 0.3]])
    assert x[0, 0] == -0.5  # input not modified
    assert true_statistics(x).n_clipped == 3


@pytest.mark.parametrize("floor", [0.0, -0.1, 0.3, np.nan, np.inf])
def test_bad_variance_floor(floor: float) -> None:
    with pytest.raises(PrivacyParameterError, match="variance_floor"):
        true_statistics(np.full((3, 2), 0.5), variance_floor=floor)
