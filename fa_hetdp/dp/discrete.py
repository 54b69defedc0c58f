"""Exact samplers of integer noise: the discrete Gaussian and the symmetric Skellam distribution.

The discrete Gaussian ``N_Z(0, sigma^2)`` has ``P(k) proportional to exp(-k^2/(2 sigma^2))``
on the integers. :func:`sample_discrete_gaussian` implements the exact rejection sampler of
Canonne, Kamath & Steinke (NeurIPS 2020, "The discrete Gaussian for differential privacy",
Alg. 1-3): a discrete Laplace proposal of scale ``t = floor(sigma) + 1`` (Alg. 2), accepted
with probability ``exp(-(|Y| - sigma^2/t)^2/(2 sigma^2))`` (Alg. 3). Every coin is an exact
Bernoulli of a *rational* probability, ``P(U < r)`` for ``U`` uniform on ``{0, ..., q - 1}``,
so the output distribution is exactly ``N_Z(0, sigma^2)`` for a rational ``sigma^2`` whenever
the generator's words are uniform (no floating point touches the decisions). For large
``sigma`` the acceptance exponent is split into two non-negative parts, each an exact coin
whose integers stay in int64, and uniforms above ``2^62`` are drawn in two int64 limbs
(:func:`_gaussian_acceptance`); only draws too far in the tail for that use Python integers
(numpy object arrays), so any ``sigma`` is exact. The vectorised loops draw all coordinates
at once (``benchmarks/sampler_bench.py``: draws per second).

The symmetric Skellam distribution ``Sk(mu)`` with variance ``mu`` is the difference of two
independent ``Poisson(mu/2)`` draws (Agarwal, Kairouz & Liu, NeurIPS 2021, Def. 2.1); sums of
independent Skellam shares are Skellam, which is why it suits distributed noise.
:func:`sample_skellam` uses numpy's Poisson sampler (Hormann's PTRS transformed rejection for
``mu/2 >= 10``): exact in real arithmetic, floating point inside its acceptance test.

Both take the caller's ``numpy.random.Generator`` (seeded in simulation, the CSPRNG-backed
:func:`fa_hetdp.dp.rng.csprng_generator` in deployment).
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Final

import numpy as np
import numpy.typing as npt

from fa_hetdp._types import FloatArray, IntArray
from fa_hetdp.errors import PrivacyParameterError

__all__ = [
    "as_rational_variance",
    "discrete_gaussian_pmf",
    "sample_discrete_gaussian",
    "sample_skellam",
    "skellam_pmf",
]

_INT64_SAFE: Final = 1 << 62
"""Integers below this stay in int64 arrays; larger ones become Python integers."""
_WORD_BITS: Final = 62
VARIANCE_PRECISION_BITS: Final = 16
"""A float ``sigma^2`` is rounded up to a rational within a relative ``2^-16`` of it."""

ObjArray = npt.NDArray[np.object_]
_Ints = IntArray | ObjArray
BoolArray = npt.NDArray[np.bool_]


def as_rational_variance(sigma_squared: float | Fraction) -> Fraction:
    """Return ``sigma^2`` as an exact fraction; a float is rounded *up* to a short rational.

    The float is rounded up to a multiple of ``2^(e - 16)``, ``2^e <= sigma^2`` (an integer
    once ``sigma^2 >= 2^16``), so within a relative ``2^-16``. Rounding the variance up only
    adds noise (the discrete Gaussian's privacy improves with ``sigma``), and a small
    denominator keeps the sampler's integers within int64 up to ``sigma ~ 10^4``.

    Raises
    ------
    PrivacyParameterError
        If ``sigma_squared`` is not a finite number ``> 0``.
    """
    if isinstance(sigma_squared, Fraction):
        if sigma_squared <= 0:
            raise PrivacyParameterError(f"sigma_squared must be > 0, got {sigma_squared}.")
        return sigma_squared
    x = float(sigma_squared)
    if not (math.isfinite(x) and x > 0.0):
        raise PrivacyParameterError(f"sigma_squared must be a finite number > 0, got {x!r}.")
    den = 1 << max(0, VARIANCE_PRECISION_BITS + 1 - math.frexp(x)[1])  # x >= 2^(e-1)
    return Fraction(math.ceil(Fraction(x) * den), den)


def _uniform_below(bound: int, size: int, rng: np.random.Generator) -> _Ints:
    """``size`` exact uniform draws from ``{0, ..., bound - 1}`` (int64, or Python ints)."""
    if bound <= _INT64_SAFE:
        out: IntArray = rng.integers(0, bound, size=size, dtype=np.int64)
        return out
    bits = (bound - 1).bit_length()
    words = -(-bits // _WORD_BITS)
    result = np.empty(size, dtype=object)
    todo = np.arange(size)
    while todo.size:
        value = np.zeros(todo.size, dtype=object)
        for _ in range(words):
            word = rng.integers(0, 1 << _WORD_BITS, size=todo.size, dtype=np.int64)
            value = value * (1 << _WORD_BITS) + word.astype(object)
        value = value >> (words * _WORD_BITS - bits)  # exactly `bits` uniform bits
        ok = np.asarray(value < bound, dtype=bool)  # rejection keeps it uniform
        result[todo[ok]] = value[ok]
        todo = todo[~ok]
    return result


def _bernoulli_ratio(
    numerator: _Ints, denominator: int, rng: np.random.Generator, factor: int = 1
) -> BoolArray:
    """Exact ``Bernoulli(r_i / (q f))`` coins for ``0 <= r_i <= q f`` (``f`` = ``factor``).

    When ``q f`` exceeds int64 but ``q``, ``f`` and the ``r_i`` do not, the uniform ``U`` on
    ``{0, ..., q f - 1}`` is drawn in two limbs, ``U = U_1 f + U_2`` (``U_1`` uniform below
    ``q``, ``U_2`` below ``f``), and ``U < r = h f + l`` iff ``U_1 < h`` or (``U_1 = h``
    and ``U_2 < l``): ``U_2`` is drawn only on that tie (probability ``1/q``).
    """
    total = denominator * factor
    if total <= _INT64_SAFE or numerator.dtype == object or denominator > _INT64_SAFE:
        u = _uniform_below(total, len(numerator), rng)
        return np.asarray(u < numerator, dtype=bool)
    high, low = np.divmod(numerator, factor)
    u1 = _uniform_below(denominator, len(numerator), rng)
    out = np.asarray(u1 < high, dtype=bool)
    tie = np.flatnonzero(u1 == high)
    if tie.size:
        out[tie] = _uniform_below(factor, tie.size, rng) < low[tie]
    return out


def _bernoulli_exp_fraction(
    numerator: _Ints, denominator: int, rng: np.random.Generator
) -> BoolArray:
    """Exact ``Bernoulli(exp(-r_i/q))`` for ``0 <= r_i/q <= 1`` (CKS 2020, Alg. 1, first part).

    ``K = 1``; while ``Bernoulli(gamma/K)`` succeeds, ``K += 1``; return whether ``K`` is odd.
    """
    size = len(numerator)
    k = np.ones(size, dtype=np.int64)
    active = np.arange(size)
    step = 1
    while active.size:
        coin = _bernoulli_ratio(numerator[active], denominator, rng, step)
        k[active[coin]] += 1
        active = active[coin]
        step += 1
    return np.asarray(k % 2 == 1, dtype=bool)


def _bernoulli_exp_product(
    first: IntArray, first_den: int, second: IntArray, second_den: int, rng: np.random.Generator
) -> BoolArray:
    """Exact ``Bernoulli(exp(-p_i r_i))``, ``p_i = a_i/A`` and ``r_i = b_i/B`` both in ``[0, 1]``.

    CKS 2020 Alg. 1 for ``gamma = p r <= 1``: its coin ``Bernoulli(gamma/K)`` is the AND of
    independent ``Bernoulli(p)`` and ``Bernoulli(r/K)`` coins, so no integer exceeds ``A``,
    ``B`` or the ``a_i``, ``b_i`` (``B K`` is split in two limbs by :func:`_bernoulli_ratio`).
    """
    size = len(first)
    k = np.ones(size, dtype=np.int64)
    active = np.arange(size)
    step = 1
    while active.size:
        coin = _bernoulli_ratio(first[active], first_den, rng)
        go = active[coin]
        coin2 = _bernoulli_ratio(second[go], second_den, rng, step)
        k[go[coin2]] += 1
        active = go[coin2]
        step += 1
    return np.asarray(k % 2 == 1, dtype=bool)


def _bernoulli_exp(numerator: _Ints, denominator: int, rng: np.random.Generator) -> BoolArray:
    """Exact ``Bernoulli(exp(-a_i/q))`` for rationals ``a_i/q >= 0`` (CKS 2020, Alg. 1).

    ``exp(-gamma) = exp(-1)^floor(gamma) exp(-(gamma - floor(gamma)))``: ``floor(gamma)``
    coins of ``Bernoulli(exp(-1))`` and one of the fractional part, all of which must succeed.
    """
    size = len(numerator)
    whole = numerator // denominator
    frac = numerator - whole * denominator
    ok = _bernoulli_exp_fraction(frac, denominator, rng)
    remaining = np.asarray(whole, dtype=object) if whole.dtype == object else whole.copy()
    active = np.flatnonzero(ok & np.asarray(remaining > 0, dtype=bool))
    ones = np.ones(size, dtype=np.int64)
    while active.size:
        coin = _bernoulli_exp_fraction(ones[active], 1, rng)
        ok[active[~coin]] = False
        remaining[active] -= 1
        active = active[coin & np.asarray(remaining[active] > 0, dtype=bool)]
    return ok


def _geometric_exp_minus_one(size: int, rng: np.random.Generator) -> IntArray:
    """Count ``Bernoulli(exp(-1))`` successes before the first failure (CKS Alg. 2)."""
    count = np.zeros(size, dtype=np.int64)
    active = np.arange(size)
    ones = np.ones(size, dtype=np.int64)
    while active.size:
        coin = _bernoulli_exp_fraction(ones[: active.size], 1, rng)
        count[active[coin]] += 1
        active = active[coin]
    return count


def _discrete_laplace(t: int, size: int, rng: np.random.Generator) -> IntArray:
    """Exact discrete Laplace ``P(y) proportional to exp(-|y|/t)`` (CKS 2020, Alg. 2)."""
    out = np.empty(size, dtype=np.int64)
    filled = 0
    while filled < size:
        m = 2 * (size - filled) + 16
        u = rng.integers(0, t, size=m, dtype=np.int64)
        keep = _bernoulli_exp_fraction(u, t, rng)  # Bernoulli(exp(-U/t))
        u = u[keep]
        v = _geometric_exp_minus_one(u.size, rng)
        x = u + t * v
        negative = rng.integers(0, 2, size=u.size, dtype=np.int64) == 1
        valid = ~(negative & (x == 0))  # (B = 1, X = 0) is rejected
        y = np.where(negative, -x, x)[valid]
        take = min(y.size, size - filled)
        out[filled : filled + take] = y[:take]
        filled += take
    return out


def _gaussian_acceptance(
    abs_y: IntArray, num: int, den: int, t: int, rng: np.random.Generator
) -> BoolArray:
    """Exact ``Bernoulli(exp(-gamma_i))``, ``gamma = (|Y| - sigma^2/t)^2/(2 sigma^2)`` (Alg. 3).

    With ``sigma^2 = num/den``, ``gamma = (|Y| t den - num)^2 / (2 num den t^2)``; while those
    integers fit int64 the coins use them directly. Beyond (``sigma`` above about ``4 10^4``)
    ``|Y| - sigma^2/t = +-(w + e/c)`` with ``c = den t``, integers ``w >= 0`` and
    ``0 <= e <= c`` (``num = A c + b``, ``z = |Y| - A``; ``w, e = -z, b`` if ``z <= 0``,
    else ``z - 1, c - b``), so ``gamma = T_1 + T_23`` with non-negative parts
    ``T_1 = w^2 den/(2 num)`` and ``T_23 = (e/c) (2 w t den + e)/(2 num t)``, and
    ``exp(-gamma) = exp(-T_1) exp(-T_23)``: two independent exact coins, the second a
    product of two probabilities when ``w <= sigma^2 - 1`` (:func:`_bernoulli_exp_product`).
    Every integer then stays in int64; draws whose ``w`` is too large for that (far tails)
    take the first form with Python integers. The law is exactly the same.
    """
    q = 2 * num * den * t * t
    lin_max = (int(abs_y.max()) if abs_y.size else 0) * t * den + num
    if lin_max * lin_max < _INT64_SAFE and q < _INT64_SAFE:
        lin = abs_y * (t * den) - num
        return _bernoulli_exp(lin * lin, q, rng)  # Eq. in Alg. 3, in int64
    c = den * t
    whole, b = divmod(num, c)
    limit = _INT64_SAFE - 1
    w_max = min(math.isqrt(limit // den), (limit - c) // (2 * t * den), (num - den) // den)
    accept = np.zeros(abs_y.size, dtype=bool)
    z = abs_y - whole  # whole <= sigma^2/t < sigma <= 2^52
    w = np.where(z <= 0, -z, z - 1)
    in_int64 = w <= w_max  # all False when sigma^2 < 1 (w_max < 0)
    fast = np.flatnonzero(in_int64)
    if fast.size:
        wf, zf = w[fast], z[fast]
        ef = np.where(zf <= 0, b, c - b)
        first = _bernoulli_exp(wf * wf * den, 2 * num, rng)  # T_1
        go = np.flatnonzero(first)
        second = _bernoulli_exp_product(  # T_23; the factors are <= 1 as w <= sigma^2 - 1
            ef[go], c, 2 * wf[go] * (t * den) + ef[go], 2 * num * t, rng
        )
        accept[fast[go[second]]] = True
    slow = np.flatnonzero(~in_int64)
    if slow.size:
        lin_o = abs_y[slow].astype(object) * (t * den) - num
        accept[slow] = _bernoulli_exp(lin_o * lin_o, q, rng)  # Eq. in Alg. 3, exact integers
    return accept


def sample_discrete_gaussian(
    sigma_squared: float | Fraction, size: int | tuple[int, ...], *, rng: np.random.Generator
) -> IntArray:
    """Draw exact ``N_Z(0, sigma^2)`` integers (Canonne, Kamath & Steinke 2020, Alg. 3).

    Parameters
    ----------
    sigma_squared : float or Fraction
        The variance parameter; a float is first rounded up within a relative ``2^-16``
        (:func:`as_rational_variance`); a :class:`~fractions.Fraction` is used as is.
    size : int or tuple of int
        Output shape.
    rng : numpy.random.Generator
        Source of uniform words (seeded in simulation, CSPRNG-backed in deployment).

    Returns
    -------
    IntArray
        Integers distributed exactly as ``N_Z(0, sigma^2)`` (int64; ``sigma > 2^52``, whose
        tail could reach ``2^62``, is refused).

    Raises
    ------
    PrivacyParameterError
        If ``sigma_squared`` is not ``> 0`` or ``sigma > 2^52``.
    """
    s2 = as_rational_variance(sigma_squared)
    if s2 > Fraction(1 << 104):
        raise PrivacyParameterError(f"sigma must be <= 2^52, got sigma^2={float(s2)!r}.")
    shape = (size,) if isinstance(size, int) else tuple(size)
    total = math.prod(shape)
    num, den = s2.numerator, s2.denominator
    t = math.isqrt(num // den) + 1  # floor(sigma) + 1
    out = np.empty(total, dtype=np.int64)
    filled = 0
    while filled < total:
        m = 2 * (total - filled) + 16  # acceptance is at least ~0.5 (CKS 2020, Sec. 5.3)
        y = _discrete_laplace(t, m, rng)
        accept = _gaussian_acceptance(np.abs(y), num, den, t, rng)
        z = y[accept]
        take = min(z.size, total - filled)
        out[filled : filled + take] = z[:take]
        filled += take
    return out.reshape(shape)


def sample_skellam(
    variance: float | npt.ArrayLike, size: int | tuple[int, ...], *, rng: np.random.Generator
) -> IntArray:
    """Draw symmetric Skellam integers ``Poisson(mu/2) - Poisson(mu/2)`` of variance ``mu``.

    Parameters
    ----------
    variance : float or array_like
        ``mu > 0`` per coordinate (broadcast against ``size``).
    size : int or tuple of int
        Output shape.
    rng : numpy.random.Generator
        Source of randomness.

    Returns
    -------
    IntArray
        Integers with ``Sk(mu)`` law (Agarwal, Kairouz & Liu 2021, Def. 2.1).

    Raises
    ------
    PrivacyParameterError
        If a variance is not a finite number ``> 0``.
    """
    mu = np.asarray(variance, dtype=np.float64)
    if not (np.all(np.isfinite(mu)) and np.all(mu > 0.0)):
        raise PrivacyParameterError(f"Skellam variance must be finite and > 0, got {mu!r}.")
    half = np.broadcast_to(0.5 * mu, size)
    out: IntArray = rng.poisson(half).astype(np.int64) - rng.poisson(half).astype(np.int64)
    return out


def discrete_gaussian_pmf(k: npt.ArrayLike, sigma_squared: float) -> FloatArray:
    """``P(X = k)`` for ``X ~ N_Z(0, sigma^2)`` (normaliser summed to float precision)."""
    s2 = float(sigma_squared)
    half_width = int(40.0 * math.sqrt(s2)) + 40
    grid = np.arange(-half_width, half_width + 1, dtype=np.float64)
    norm = float(np.sum(np.exp(-(grid * grid) / (2.0 * s2))))
    kk = np.asarray(k, dtype=np.float64)
    out: FloatArray = np.exp(-(kk * kk) / (2.0 * s2)) / norm
    return out


def skellam_pmf(k: npt.ArrayLike, variance: float) -> FloatArray:
    """``P(X = k)`` for the symmetric Skellam law of variance ``mu`` (scipy's ``skellam``)."""
    from scipy import stats  # here, not at the top: scipy.stats costs a ClientApp ~0.5 s

    half = 0.5 * float(variance)
    out: FloatArray = np.asarray(stats.skellam.pmf(np.asarray(k), half, half), dtype=np.float64)
    return out
