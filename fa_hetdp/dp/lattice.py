"""The lattice of a discrete noise share: its step ``gamma`` and the integer pipeline.

A client of a distributed discrete mechanism (:class:`~fa_hetdp.dp.mechanisms.DiscreteMechanism`:
``"ddg"``, ``"skellam"``, or one registered later) sends, per coordinate ``j``,
``gamma_j (R(v_j/gamma_j) + Z_j)``: ``R`` the unbiased randomized rounding
(``floor(y) + Bernoulli(y - floor(y))``) of its contribution ``v_j`` in lattice units and
``Z_j`` its exact integer noise share of scale ``s_j/gamma_j`` (the mechanism's
``sample_integers``). The functions here take the mechanism itself (:class:`IntegerNoise`:
its sampler and its tails), never its name.
The secure-aggregation encoding at scale ``1/gamma_j`` then carries exactly the integers
``R + Z mod 2^m`` (:func:`discretise`; the encoding's own rounding is the identity on the
lattice), so what is summed and released is the modular sum of the discrete mechanism's
integers.

The step (:func:`choose_lattice`), a power of two per coordinate, is the finest of

- the rule of the real-valued summed path, :func:`lattice_step`:
  ``2^floor(log2 min(s_j/16, 2^-12))``;
- the finest step at which the SUM of ``n`` contributions fits the ring,
  ``n ceil(b_j/gamma_j) + ceil(H_j) < 2^(m-1)``, ``H_j`` the tail of the summed noise of ``n``
  shares at ``q/k`` (the mechanism's ``sum_tail``): the union bound over the ``k`` noisy
  coordinates keeps the probability that some coordinate of the sum leaves the signed range --
  the only way it wraps -- below the stated ``q`` (default :data:`DEFAULT_WRAP_PROBABILITY`).
  A sum of ``n`` discrete Gaussian shares is ``n v``-subgaussian (Canonne, Kamath & Steinke
  2020; subgaussian parameters add), a sum of Skellam shares is Skellam (its Chernoff bound);
  the rounded data lie in ``[-n ceil(b/gamma), n ceil(b/gamma)]``, so the signed read of the
  modular sum is exact whenever the summed noise is within
  ``2^(m-1) - 1 - n ceil(b_j/gamma_j) >= H_j`` (:attr:`Lattice.wrap_probability` bounds the
  rest: the noise grows like ``sqrt(n)``, not ``n``);

and it is refused (:class:`~fa_hetdp.errors.PrivacyParameterError` naming ``n``, the bound and
the ring) when that needs ``gamma_j > s_j/16`` (too few lattice steps of noise: the DDG sum's
``tau`` and Skellam's extra term assume ``>= 16``) or ``gamma_j > 2^-12 beta_j``.

Each client also states its own bound ``gamma (ceil(b_j/gamma) + ceil(h_j))``, ``h_j`` the
ONE share's tail at the failure probability ``p`` (the mechanism's ``integer_tail``): a value
beyond it is refused by the encoding (a client-side failure, probability at most ``n k p``,
:attr:`Lattice.refusal_probability`); it no longer sizes the ring.

Accounting (:data:`SENSITIVITY_INFLATION`). ``beta_j`` is the largest move of coordinate ``j``
between neighbours (the contribution's box bound), and every release's sensitivity satisfies
``Delta >= ||beta_S||_2/4`` over the coordinates ``S`` it changes (box bounds ``1`` and ``W``;
the stage-2 broadcast bounds ``max(c, 1 - c)^2 >= 1/4`` of the worst case; the histogram's
0/1). Randomized rounding moves a changed coordinate by at most ``ceil(|v_j - v'_j|/gamma_j)``
lattice steps, so in data units the change grows by at most ``gamma_j`` per changed coordinate
and ``||Delta_int gamma|| <= Delta + ||gamma_S|| <= Delta (1 + 4 max_j gamma_j/beta_j) <=
Delta (1 + 2^-10)`` (with any per-coordinate noise scale, coordinate by coordinate). With
``beta_j >= 1/4`` this is the bound ``1 + 4 gamma_max`` at ``gamma_max <= 2^-12``; weighted
coordinates (``beta_j = W``) may take steps up to ``2^-12 W`` at the same accounting.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final, Protocol

import numpy as np
import numpy.typing as npt

from fa_hetdp._types import FloatArray, IntArray
from fa_hetdp.dp.discrete import as_rational_variance
from fa_hetdp.errors import PrivacyParameterError

__all__ = [
    "DEFAULT_WRAP_PROBABILITY",
    "MAX_LATTICE",
    "MIN_SHARE_UNITS",
    "ROUNDING_VARIANCE_BOUND",
    "SENSITIVITY_INFLATION",
    "IntegerNoise",
    "Lattice",
    "choose_lattice",
    "discretise",
    "lattice_step",
]

DEFAULT_WRAP_PROBABILITY: Final = 1e-9
"""Default limit on the probability that some coordinate of the sum wraps around ``Z_m``."""
MAX_LATTICE: Final = 2.0**-12
"""Coarsest step per unit of coordinate bound (bounds the rounding's sensitivity inflation)."""
MIN_SHARE_UNITS: Final = 16.0
"""A discrete share's scale is at least this many lattice steps (makes the DDG ``tau`` vanish)."""
SENSITIVITY_INFLATION: Final = 1.0 + 4.0 * MAX_LATTICE
"""``Delta_int gamma / Delta`` at most: ``1 + 4 max_j gamma_j/beta_j <= 1 + 2^-10``."""
ROUNDING_VARIANCE_BOUND: Final = 1.0 / (4.0 * MIN_SHARE_UNITS**2)
"""A client's rounding variance per unit of its share's variance, at most:
``gamma^2/4 <= (s/16)^2/4 = s^2/1024`` (Bernoulli rounding, ``gamma <= s/16``)."""
_FLOAT_EXACT: Final = 2.0**52  # lattice integers below this are exact in float64


def lattice_step(scale: npt.ArrayLike) -> FloatArray:
    """``gamma = 2^floor(log2 min(s/16, 2^-12))`` per coordinate (0 where ``s = 0``)."""
    s = np.asarray(scale, dtype=np.float64)
    if np.any(~np.isfinite(s)) or np.any(s < 0.0):
        raise PrivacyParameterError(f"scale must be finite and >= 0, got {s!r}.")
    target = np.minimum(s / MIN_SHARE_UNITS, MAX_LATTICE)
    with np.errstate(divide="ignore"):
        out: FloatArray = np.where(
            s > 0.0, np.exp2(np.floor(np.log2(np.where(s > 0, target, 1.0)))), 0.0
        )
    return out


class IntegerNoise(Protocol):
    """What the lattice needs of a discrete mechanism.

    :class:`~fa_hetdp.dp.mechanisms.DiscreteMechanism` implements it. ``name`` is recorded in
    the :class:`Lattice`; :meth:`sample_integers` draws the exact integer shares;
    :meth:`integer_tail` and :meth:`sum_tail` bound one share's and the sum's tail (lattice
    steps).
    """

    @property
    def name(self) -> str:
        """The mechanism's registry name."""

    def sample_integers(
        self, variance: float, count: int | tuple[int, ...], *, rng: np.random.Generator
    ) -> IntArray:
        """Draw ``count`` integer shares of ``variance`` (lattice units)."""

    def integer_tail(self, units: float, failure_probability: float) -> float:
        """``h`` with ``P(|Z| > h) <= p`` for one share of scale ``units``."""

    def sum_tail(self, units: float, shares: int, wrap_probability: float) -> float:
        """``H`` with ``P(|Z_1 + ... + Z_n| > H) <= q`` for ``n = shares`` shares."""


@dataclass(frozen=True)
class Lattice:
    """The lattice of one stage's contributions (public: both ends compute it).

    Attributes
    ----------
    kind : str
        The discrete mechanism's name (its integer noise).
    gamma : FloatArray, shape (k,)
        Step per coordinate, a power of two: the encoding's scale is ``1/gamma``.
    units : FloatArray, shape (k,)
        The share's scale in lattice steps, ``s/gamma`` (0 where the stage adds no noise).
    bounds : FloatArray, shape (k,)
        The stated per-client bound, ``gamma (ceil(b/gamma) + ceil(h))`` (data units).
    n : int
        Clients summed.
    modulus_bits : int
        ``m`` of the ring ``Z_2^m``.
    failure_probability : float
        ``P(|Z_j| > h_j)`` per share and coordinate: such a value is refused by its client.
    data_words : FloatArray, shape (k,)
        ``ceil(b/gamma)``: a rounded contribution lies in ``[-data_words, data_words]``.
    sum_bounds : FloatArray, shape (k,)
        The stated bound on the sum of ``n`` values, ``gamma (n ceil(b/gamma) + ceil(H))``,
        ``H`` the summed noise's tail at ``wrap_limit/k`` (``sum_tail``); below
        ``gamma 2^(m-1)``.
    wrap_limit : float
        ``q``: the ring is sized so that some coordinate of the sum wraps with probability at
        most ``q`` (union bound over the ``k`` noisy coordinates).
    """

    kind: str
    gamma: FloatArray
    units: FloatArray
    bounds: FloatArray
    n: int
    modulus_bits: int
    failure_probability: float
    data_words: FloatArray
    sum_bounds: FloatArray
    wrap_limit: float

    @property
    def refusal_probability(self) -> float:
        """Bound on the probability that some client's value is refused (client side).

        Union bound: ``n k p`` over the ``n`` clients and ``k`` noisy coordinates.
        """
        noisy = int(np.count_nonzero(self.units > 0.0))
        return min(1.0, self.n * noisy * self.failure_probability)

    @property
    def noise_room(self) -> FloatArray:
        """``2^(m-1) - 1 - n ceil(b/gamma)``: the summed noise (lattice steps) that still decodes.

        The signed read of the modular sum of ``n`` values is exact whenever every
        coordinate's summed noise is at most this; it is ``>= ceil(H_j)``, so the sum wraps
        with probability at most :attr:`wrap_probability`. Fewer values (dropouts) only
        widen it.
        """
        out: FloatArray = 2.0 ** (self.modulus_bits - 1) - 1.0 - self.n * self.data_words
        return out

    @property
    def wrap_probability(self) -> float:
        """Bound on the probability that some coordinate of the sum of ``n`` values wraps.

        The stated limit ``q``: ``sum_j P(|summed noise_j| > H_j) <= k (q/k)``, and a
        coordinate wraps only if its summed noise exceeds :attr:`noise_room` ``>= H_j``.
        """
        noisy = bool(np.any(self.units > 0.0))
        return self.wrap_limit if noisy else 0.0


def choose_lattice(
    noise: IntegerNoise,
    share_scale: npt.ArrayLike,
    bound: npt.ArrayLike,
    *,
    n: int,
    modulus_bits: int,
    failure_probability: float,
    move_bound: npt.ArrayLike | None = None,
    wrap_probability: float = DEFAULT_WRAP_PROBABILITY,
) -> Lattice:
    """Choose each coordinate's power-of-two step (module docstring) and state its bounds.

    Parameters
    ----------
    noise : IntegerNoise
        The discrete mechanism (its tail bounds; its name is recorded).
    share_scale : array_like, shape (k,)
        One client's noise-share scale per coordinate (data units; 0: no noise).
    bound : array_like, shape (k,)
        ``b_j``: ``|contribution_j| <= b_j``.
    n : int
        Clients summed.
    modulus_bits : int
        ``m``: the sum lives in ``Z_2^m``.
    failure_probability : float
        ``p`` of a client's stated share bound, per coordinate (its refusal).
    move_bound : array_like, optional
        ``beta_j`` of the accounting (default ``bound``).
    wrap_probability : float
        ``q``: limit on the probability that some coordinate of the sum wraps.

    Raises
    ------
    PrivacyParameterError
        If some coordinate needs a step above ``s_j/16`` or ``2^-12 beta_j`` to fit the ring.
    """
    s = np.atleast_1d(np.asarray(share_scale, dtype=np.float64))
    b = np.broadcast_to(np.asarray(bound, dtype=np.float64), s.shape)
    beta = b if move_bound is None else np.broadcast_to(np.asarray(move_bound, float), s.shape)
    q = float(wrap_probability)
    if int(n) < 1 or not 0.0 < failure_probability < 1.0 or not 0.0 < q < 1.0:
        raise PrivacyParameterError(
            f"choose_lattice needs n >= 1, 0 < p < 1 and 0 < q < 1; got n={n!r}, "
            f"p={failure_probability!r}, q={wrap_probability!r}."
        )
    room = 2.0 ** (int(modulus_bits) - 1)
    per_coordinate = q / max(1, int(np.count_nonzero(s > 0.0)))  # the union bound's share
    out = np.zeros((5, s.size))  # gamma, units, stated bound, data words, sum bound
    cache: dict[tuple[float, float, float], tuple[float, float, float, float, float]] = {}
    for j in range(s.size):
        key = (float(s[j]), float(b[j]), float(beta[j]))
        if key not in cache:
            cache[key] = _coordinate(
                noise, *key, n=int(n), room=room, p=failure_probability, q=per_coordinate
            )
        out[:, j] = cache[key]
    gamma, units, stated, data, sums = out
    return Lattice(
        noise.name,
        gamma,
        units,
        stated,
        int(n),
        int(modulus_bits),
        failure_probability,
        data,
        sums,
        q,
    )


def _coordinate(
    noise: IntegerNoise, s: float, b: float, beta: float, *, n: int, room: float, p: float, q: float
) -> tuple[float, float, float, float, float]:
    """``(gamma, s/gamma, stated bound, ceil(b/gamma), sum bound)`` of one coordinate."""
    if s > 0.0:
        gamma = float(lattice_step(s))
        cap = min(s / MIN_SHARE_UNITS, MAX_LATTICE * beta)
    else:  # no noise (a release the plan does not make: the value is exactly 0)
        gamma, cap = MAX_LATTICE, math.inf
    while True:
        units = s / gamma
        data = math.ceil(b / gamma)
        words = data + math.ceil(noise.integer_tail(units, p))
        total = n * data + math.ceil(noise.sum_tail(units, n, q))  # Eq.: n B + H < 2^(m-1)
        if total < room and words <= _FLOAT_EXACT:
            return gamma, units, gamma * words, float(data), gamma * total
        gamma *= 2.0
        if gamma > cap:
            binding = (
                f"s/{MIN_SHARE_UNITS:g} = {s / MIN_SHARE_UNITS:.4g} (noise of at least "
                f"{MIN_SHARE_UNITS:g} lattice steps)"
                if s / MIN_SHARE_UNITS <= MAX_LATTICE * beta
                else f"2^-12 beta = {MAX_LATTICE * beta:.4g} (the accounting's sensitivity "
                f"inflation 1 + 2^-10)"
            )
            raise PrivacyParameterError(
                f"the ring Z_2^{round(math.log2(room)) + 1} cannot hold the sum of n={n} "
                f"lattice contributions bounded by {b:.6g} plus n noise shares of scale "
                f"{s:.6g} (their sum's tail at wrap probability {q * 1.0:.3g} per "
                f"coordinate): it needs a lattice step above {binding}. Use a larger "
                "secagg modulus (64 bits) or fewer clients."
            )


def discretise(
    noise: IntegerNoise, values: npt.ArrayLike, lattice: Lattice, *, rng: np.random.Generator
) -> FloatArray:
    """Return ``gamma (R(v/gamma) + Z)``: the contribution rounded onto the lattice plus its share.

    ``R`` rounds at random (unbiased; one ``rng.random`` draw per coordinate, first) and ``Z``
    is the exact integer share of variance ``(s/gamma)^2`` (rounded up to a short rational,
    :func:`~fa_hetdp.dp.discrete.as_rational_variance`), drawn per distinct scale. Exact in
    float64: the result times ``1/gamma`` is the integer ``R + Z``.
    """
    v = np.asarray(values, dtype=np.float64)
    if v.shape != lattice.gamma.shape or not np.all(np.isfinite(v)):
        raise PrivacyParameterError(
            f"values must be finite of shape {lattice.gamma.shape}, got shape {v.shape}."
        )
    scaled = v / lattice.gamma
    low = np.floor(scaled)
    integers = low + (rng.random(v.shape) < (scaled - low))
    for units in np.unique(lattice.units[lattice.units > 0.0]):
        where = lattice.units == units
        variance = float(as_rational_variance(float(units) ** 2))
        count = int(np.count_nonzero(where))
        integers[where] += noise.sample_integers(variance, count, rng=rng)
    out: FloatArray = lattice.gamma * integers
    return out
