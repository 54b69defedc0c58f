"""(k, t) from the adversary: Bell et al.'s two binomial tails, exact."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from fa_hetdp.secagg.graph import default_degree
from fa_hetdp.secagg.params import binomial_tail_at_least, choose_parameters, min_signatures


def test_binomial_tail_is_exact() -> None:
    assert binomial_tail_at_least(3, Fraction(1, 2), 2) == Fraction(1, 2)
    assert binomial_tail_at_least(4, Fraction(1, 4), 0) == 1
    assert binomial_tail_at_least(4, Fraction(1, 4), 5) == 0
    assert binomial_tail_at_least(4, Fraction(1, 4), 4) == Fraction(1, 256)


@pytest.mark.parametrize(
    ("n", "gamma", "k", "t"),
    [(1000, 0.125, 60, 34), (100, 0.125, 54, 31), (1000, 0.05, 30, 18), (10_000, 0.125, 66, 37)],
)
def test_smallest_k_and_t_meeting_both_tails(n: int, gamma: float, k: int, t: int) -> None:
    p = choose_parameters(n, gamma=gamma, delta=gamma)
    assert (p.degree, p.threshold) == (k, t)
    g, d = Fraction(gamma), Fraction(gamma)
    assert n * binomial_tail_at_least(k, g, t) <= Fraction(2) ** -40
    assert n * binomial_tail_at_least(k, d, k - t + 1) <= Fraction(2) ** -20
    # minimal: at the next smaller even degree no t meets both
    smaller = k - 2
    assert not any(
        n * binomial_tail_at_least(smaller, g, u) <= Fraction(2) ** -40
        and n * binomial_tail_at_least(smaller, d, smaller - u + 1) <= Fraction(2) ** -20
        for u in range(2, smaller + 1)
    )
    assert f"t = {t}" in p.guarantee() and "2^-40" in p.guarantee()


def test_old_defaults_expose_inputs_and_new_ones_do_not() -> None:
    # finding 1: old k = 30, t = floor((k + 1) / 2) + 1 = 16; with gamma = 1/4 at n = 1000 the
    # expected number of clients with t corrupt neighbours was 0.82 (the figure), and
    # 2.75 with t - 1 once the client's own share counted toward t
    n, gamma = 1000, Fraction(1, 4)
    k_old = default_degree(n)
    t_old = (k_old + 1) // 2 + 1
    assert round(float(n * binomial_tail_at_least(k_old, gamma, t_old)), 2) == 0.82
    assert round(float(n * binomial_tail_at_least(k_old, gamma, t_old - 1)), 2) == 2.75
    new = choose_parameters(n, gamma=0.25, delta=0.05)
    exposed_new = n * binomial_tail_at_least(new.degree, gamma, new.threshold)
    assert exposed_new <= Fraction(2) ** -40


def test_unsolvable_parameters_name_the_binding_constraint() -> None:
    with pytest.raises(ValueError, match="correctness constraint binds"):
        choose_parameters(100, gamma=0.25, delta=0.25)
    with pytest.raises(ValueError, match="privacy constraint binds"):
        choose_parameters(10, gamma=0.5, delta=0.0)
    with pytest.raises(ValueError, match="gamma \\+ delta"):
        choose_parameters(100, gamma=0.6, delta=0.5)


def test_min_signatures_makes_two_lists_impossible() -> None:
    for n in (9, 10, 100):
        for corrupt in (0, 1, n // 10):
            m = min_signatures(n, corrupt / n)
            assert 2 * m - corrupt > n  # two lists with m signatures each need > n signers
            assert m == math.floor((n + corrupt) / 2) + 1
