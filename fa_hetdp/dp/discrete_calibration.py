"""Calibration of the distributed discrete mechanisms: scale, noise, rounding bound, modulus.

Each client maps its contribution ``x in [0, b_1] x ... x [0, b_d]`` (a box: every release of
the protocol is one) to integers by scaling with ``1/gamma`` and randomized rounding
(``floor(v) + Bernoulli(v - floor(v))``, unbiased), adds an integer noise share and sends the
result in ``Z_m``, ``m = 2^modulus_bits``. Rounding keeps every coordinate in
``[0, B_j]``, ``B_j = ceil(b_j/gamma)``, so the replace-one sensitivities of the integer sum
are deterministic: ``Delta_2 = ||B||_2`` and ``Delta_1 = sum B_j``. This replaces the DDG
paper's conditional randomized rounding (KLS 2021, Sec. 4.1), which bounds the norm of
L2-ball inputs only with probability ``1 - beta``; for box inputs the bound needs no retry
and no ``beta``.

Wrap-around: the server decodes each coordinate of the sum in the window
``[S_j/2 - m/2, S_j/2 + m/2)`` around the data's range ``[0, S_j]``, ``S_j = n B_j``, so a
coordinate wraps only if its summed noise exceeds ``h_j = floor((m - 1 - S_j)/2)``. The
probability that some coordinate wraps is bounded by the union bound over the ``d``
coordinates of the noise's tail: the sum of ``n`` shares ``N_Z(0, s^2)`` is
``n s^2``-subgaussian (Canonne, Kamath & Steinke 2020, Cor. 9 for one share; subgaussian
parameters add), and Skellam's tail is its exact Chernoff bound
``exp(mu (sqrt(1 + (h/mu)^2) - 1) - h asinh(h/mu))``.

:func:`calibrate_discrete` searches ``gamma`` on a grid of powers ``2^(k/8)``, takes for each
the smallest noise meeting ``(epsilon, delta)`` under the RDP accounting of
:mod:`fa_hetdp.dp.discrete_accounting`, and keeps the feasible ``gamma`` (wrap probability below
the limit) of least expected squared error per coordinate,
``gamma^2 (n s^2 + n/4)`` (noise plus the rounding's at most ``1/4`` variance per client).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final, Literal

import numpy as np
import numpy.typing as npt

from fa_hetdp._types import FloatArray
from fa_hetdp.dp.calibration import _check_delta, _check_positive
from fa_hetdp.dp.discrete_accounting import (
    RDP_ORDERS,
    DiscreteGaussianSumEvent,
    DiscreteSumEvent,
    SkellamSumEvent,
    rdp_epsilon,
)
from fa_hetdp.errors import PrivacyParameterError

__all__ = [
    "DEFAULT_WRAP_PROBABILITY",
    "DiscreteCalibration",
    "DiscreteKind",
    "calibrate_discrete",
    "noise_tail",
]

DiscreteKind = Literal["ddg", "skellam"]
DEFAULT_WRAP_PROBABILITY: Final = 1e-9
"""Default limit on the probability that some coordinate of the sum wraps around ``Z_m``."""
_GRID_STEP: Final = 2.0 ** (1.0 / 8.0)
_ORDERS: Final = np.asarray(RDP_ORDERS, dtype=np.float64)


def noise_tail(kind: DiscreteKind, noise: float, shares: int, h: float) -> float:
    """Bound on ``P(|Z| > h)`` for the summed noise ``Z`` of ``shares`` shares.

    ``kind="ddg"``: ``noise`` is each share's ``sigma``; ``2 exp(-h^2/(2 n s^2))``.
    ``kind="skellam"``: ``noise`` is each share's variance; twice the Chernoff bound of
    ``Sk(n noise)``.
    """
    if h <= 0:
        return 1.0
    if kind == "ddg":
        return min(1.0, 2.0 * math.exp(-(h * h) / (2.0 * shares * noise * noise)))
    mu = shares * noise
    r = h / mu
    return min(1.0, 2.0 * math.exp(mu * (math.sqrt(1.0 + r * r) - 1.0) - h * math.asinh(r)))


@dataclass(frozen=True)
class DiscreteCalibration:
    """Parameters of one discrete release and what they guarantee.

    Attributes
    ----------
    mechanism : {"ddg", "skellam"}
        The noise family.
    gamma : float
        Scale: one integer unit is ``gamma`` data units.
    noise : float
        Per share, in integer units: ``sigma`` (ddg) or the variance (skellam).
    shares : int
        Noise shares the calibration counts on (``t`` honest clients).
    n : int
        Clients whose data are summed.
    dim : int
        Coordinates.
    l2_sensitivity, l1_sensitivity : float
        Of the integer sum (``||B||_2``, ``sum B``).
    epsilon, delta : float
        The guarantee with all ``shares`` arrived (``epsilon <=`` the target).
    modulus_bits : int
        ``m = 2^modulus_bits``.
    wrap_probability : float
        Bound on the probability that some coordinate wraps around.
    expected_mse : float
        Expected squared error per coordinate of the decoded sum, data units (noise +
        rounding).
    accounting : str
        How ``epsilon`` was obtained.
    """

    mechanism: DiscreteKind
    gamma: float
    noise: float
    shares: int
    n: int
    dim: int
    l2_sensitivity: float
    l1_sensitivity: float
    epsilon: float
    delta: float
    modulus_bits: int
    wrap_probability: float
    expected_mse: float
    accounting: str

    def event(self, shares: int | None = None) -> DiscreteSumEvent:
        """Return the privacy event with ``shares`` honest shares (default: as planned)."""
        m = self.shares if shares is None else int(shares)
        if m < 1:
            raise PrivacyParameterError(f"shares must be >= 1, got shares={m}.")
        return _event(
            self.mechanism, self.noise, m, self.l2_sensitivity, self.l1_sensitivity, self.dim
        )

    def epsilon_with(self, shares: int) -> float:
        """``epsilon`` at the calibrated ``delta`` when only ``shares`` noise shares arrived."""
        return rdp_epsilon(_ORDERS, self.event(shares).rdp(_ORDERS), self.delta)[0]


def _event(
    kind: DiscreteKind, noise: float, shares: int, l2: float, l1: float, dim: int
) -> DiscreteSumEvent:
    if kind == "ddg":
        return DiscreteGaussianSumEvent(noise, shares, l2, l1, dim)
    return SkellamSumEvent(shares * noise, l2, l1)


def _accounting_label(kind: DiscreteKind) -> str:
    if kind == "ddg":
        return "RDP of the sum of discrete Gaussians (Kairouz-Liu-Steinke 2021, Prop. 14)"
    return "RDP of the Skellam mechanism (Agarwal-Kairouz-Liu 2021, Thm 3.5)"


def _smallest_noise(
    kind: DiscreteKind, epsilon: float, delta: float, shares: int, l2: float, l1: float, dim: int
) -> tuple[float, float]:
    """Smallest per-share noise meeting ``(epsilon, delta)``: bisection on ``log noise``."""

    def eps_of(noise: float) -> float:
        return rdp_epsilon(_ORDERS, _event(kind, noise, shares, l2, l1, dim).rdp(_ORDERS), delta)[0]

    # Start from the Gaussian-like scale l2/sqrt(shares) (ddg: sigma; skellam: variance).
    hi = max(l2 / math.sqrt(shares), 1.0) if kind == "ddg" else max(l2 * l2 / shares, 1.0)
    while eps_of(hi) > epsilon:
        hi *= 2.0
    lo = hi / 2.0
    while eps_of(lo) <= epsilon and lo > 1e-6:
        hi, lo = lo, lo / 2.0
    for _ in range(60):
        mid = math.sqrt(lo * hi)
        if eps_of(mid) <= epsilon:
            hi = mid
        else:
            lo = mid
        if hi / lo - 1.0 < 1e-9:
            break
    return hi, eps_of(hi)


def calibrate_discrete(
    mechanism: DiscreteKind,
    *,
    epsilon: float,
    delta: float,
    n: int,
    bounds: npt.ArrayLike,
    shares: int | None = None,
    modulus_bits: int = 32,
    wrap_probability: float = DEFAULT_WRAP_PROBABILITY,
) -> DiscreteCalibration:
    """Choose ``gamma`` and the noise of a distributed discrete release (see module docstring).

    Parameters
    ----------
    mechanism : {"ddg", "skellam"}
        Noise family.
    epsilon, delta : float
        Target of this release (``epsilon > 0``, ``delta in (0, 1)``).
    n : int
        Clients summed (``>= 1``).
    bounds : array_like, shape (d,)
        Per-coordinate bound ``b_j > 0`` of a contribution (values in ``[0, b_j]``).
    shares : int, optional
        Honest noise shares the guarantee counts on (default ``n``).
    modulus_bits : int, optional
        ``m = 2^modulus_bits`` (default 32, in ``[8, 64]``).
    wrap_probability : float, optional
        Limit on the probability that some coordinate wraps (default ``1e-9``).

    Returns
    -------
    DiscreteCalibration
        The least-error feasible parameters.

    Raises
    ------
    PrivacyParameterError
        For invalid parameters, or when no ``gamma`` fits: the message names the binding
        constraint (the modulus cannot hold the sum plus the noise the privacy target needs).
    """
    if mechanism not in ("ddg", "skellam"):
        raise PrivacyParameterError(
            f"mechanism must be 'ddg' or 'skellam', got mechanism={mechanism!r}."
        )
    eps = _check_positive("epsilon", epsilon)
    dlt = _check_delta(delta)
    b: FloatArray = np.atleast_1d(np.asarray(bounds, dtype=np.float64))
    if b.ndim != 1 or not np.all(np.isfinite(b)) or np.any(b <= 0):
        raise PrivacyParameterError(f"bounds must be finite and > 0 (shape (d,)), got {b!r}.")
    if isinstance(n, bool) or int(n) != n or n < 1:
        raise PrivacyParameterError(f"n must be an integer >= 1, got n={n!r}.")
    t = int(n) if shares is None else int(shares)
    if not 1 <= t <= n:
        raise PrivacyParameterError(f"shares must be in [1, n] = [1, {n}], got shares={shares}.")
    if not 8 <= int(modulus_bits) <= 64:
        raise PrivacyParameterError(f"modulus_bits must be in [8, 64], got {modulus_bits!r}.")
    p_wrap = float(wrap_probability)
    if not 0.0 < p_wrap < 1.0:
        raise PrivacyParameterError(f"wrap_probability must be in (0, 1), got {p_wrap!r}.")
    modulus = 2.0 ** int(modulus_bits)
    d = int(b.size)
    best: DiscreteCalibration | None = None
    closest = math.inf  # smallest union-bound wrap probability seen (for the error message)
    gamma = float(b.max()) * 2.0
    floor_gamma = float(b.max()) * 2.0**-48
    while gamma >= floor_gamma:
        top = np.ceil(b / gamma)  # B_j: the rounded contribution lies in [0, B_j]
        l2 = float(np.sqrt(np.sum(top * top)))
        l1 = float(np.sum(top))
        span = float(n * top.max())
        if span >= modulus:
            break  # finer gamma only widens the data's range
        noise, achieved = _smallest_noise(mechanism, eps, dlt, t, l2, l1, d)
        h = math.floor((modulus - 1.0 - span) / 2.0)
        wrap = min(1.0, d * noise_tail(mechanism, noise, n, h))  # all n shares may add noise
        closest = min(closest, wrap)
        if wrap <= p_wrap:
            per_share_var = noise * noise if mechanism == "ddg" else noise
            mse = gamma * gamma * (n * per_share_var + 0.25 * n)
            if best is None or mse < best.expected_mse:
                best = DiscreteCalibration(
                    mechanism=mechanism,
                    gamma=gamma,
                    noise=noise,
                    shares=t,
                    n=int(n),
                    dim=d,
                    l2_sensitivity=l2,
                    l1_sensitivity=l1,
                    epsilon=achieved,
                    delta=dlt,
                    modulus_bits=int(modulus_bits),
                    wrap_probability=wrap,
                    expected_mse=mse,
                    accounting=_accounting_label(mechanism),
                )
        gamma /= _GRID_STEP
    if best is None:
        raise PrivacyParameterError(
            f"no scale gamma fits: the wrap-around constraint binds. With n={n}, d={d}, "
            f"bounds up to {float(b.max())!r} and the noise that (epsilon={eps}, delta={dlt}) "
            f"needs, the modulus 2^{modulus_bits} leaves a wrap probability of at least "
            f"{closest:.3g} > the limit {p_wrap:g}. Raise modulus_bits, relax "
            "wrap_probability, or relax the privacy target."
        )
    return best
