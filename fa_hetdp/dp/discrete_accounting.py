"""Renyi-DP accounting of the distributed discrete Gaussian and the distributed Skellam sums.

What the server sees is the *sum* of the clients' integer vectors plus the sum of their integer
noise shares (in ``Z_m``; the wrap-around is bounded separately, see
:mod:`fa_hetdp.dp.lattice`). The releases are described by events that record what
happened (dp-accounting's ``dp_event`` style) and an accountant that composes their Renyi
divergences and converts the total to ``(epsilon, delta)``:

* :class:`DiscreteGaussianSumEvent` -- ``m`` shares ``N_Z(0, sigma^2)`` summed. The sum is not
  a discrete Gaussian; Kairouz, Liu & Steinke (ICML 2021, "The distributed discrete Gaussian
  mechanism", Prop. 14 / Eq. (17), the RDP form of Thm 1) bound its Renyi divergence with
  ``tau = 10 sum_{k=1}^{m-1} exp(-2 pi^2 sigma^2 k/(k+1))``.
* :class:`SkellamSumEvent` -- a sum of Skellam shares is Skellam with the summed variance
  ``mu``; Agarwal, Kairouz & Liu (NeurIPS 2021, Thm 3.5 / Cor. 3.6) bound its RDP at integer
  orders.

Dropouts enter as fewer shares (``m`` honest shares instead of ``t``), as for the Gaussian
path. RDP composes by addition (Mironov 2017, Prop. 1); the conversion to ``(epsilon,
delta)`` is the improved one of Canonne, Kamath & Steinke (2020, Prop. 12; also Asoodeh et
al. 2021), which dp-accounting's ``RdpAccountant`` uses as well (cross-checked in the tests).
Every event is also ``rho``-zCDP (:meth:`DiscreteGaussianSumEvent.zcdp_rho`), the linear-in-
``alpha`` bound the calibration composes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from fa_hetdp._types import FloatArray
from fa_hetdp.dp.calibration import _check_delta, _check_nonnegative, _check_positive
from fa_hetdp.errors import PrivacyParameterError

__all__ = [
    "RDP_ORDERS",
    "DiscreteGaussianSumEvent",
    "DiscreteSumEvent",
    "SkellamSumEvent",
    "compose_rdp",
    "ddg_tau",
    "rdp_delta",
    "rdp_epsilon",
    "zcdp_epsilon",
    "zcdp_rho_for",
]

RDP_ORDERS: Final[tuple[float, ...]] = (
    *range(2, 65),
    *range(72, 257, 8),
    *range(288, 1025, 32),
    *range(1280, 4097, 256),
)
"""Integer Renyi orders (Skellam's bound holds at integer orders only)."""


def ddg_tau(local_sigma: float, shares: int) -> float:
    """``tau = 10 sum_{k=1}^{m-1} exp(-2 pi^2 sigma^2 k/(k+1))`` (KLS 2021, Thm 1).

    Parameters
    ----------
    local_sigma : float
        The shares' ``sigma`` in integer units (each share is ``N_Z(0, sigma^2)``).
    shares : int
        Number ``m`` of shares in the sum.
    """
    if shares < 2:
        return 0.0
    k = np.arange(1, shares, dtype=np.float64)
    return float(10.0 * np.sum(np.exp(-2.0 * math.pi**2 * local_sigma**2 * k / (k + 1.0))))


@dataclass(frozen=True)
class DiscreteGaussianSumEvent:
    """The sum of ``shares`` discrete Gaussians ``N_Z(0, local_sigma^2)`` on integer data.

    Attributes
    ----------
    local_sigma : float
        Each share's ``sigma`` in integer units (``> 0``).
    shares : int
        Shares that reached the sum from honest clients (``>= 1``).
    l2_sensitivity, l1_sensitivity : float
        L2 and L1 sensitivity of the integer sum (after scaling and rounding).
    dim : int
        Number of coordinates.
    """

    local_sigma: float
    shares: int
    l2_sensitivity: float
    l1_sensitivity: float
    dim: int

    @property
    def tau(self) -> float:
        """KLS 2021 Thm 1's ``tau`` for these shares."""
        return ddg_tau(self.local_sigma, self.shares)

    def rdp(self, orders: npt.ArrayLike = RDP_ORDERS) -> FloatArray:
        """Renyi DP at ``orders`` (KLS 2021, Prop. 14 / Eq. (17)), total ``sigma^2 = m s^2``."""
        a = np.asarray(orders, dtype=np.float64)
        sigma = math.sqrt(self.shares) * self.local_sigma
        l2 = self.l2_sensitivity / sigma
        l1 = self.l1_sensitivity / sigma
        tau, d = self.tau, float(self.dim)
        term1 = 0.5 * a * l2 * l2 + tau * d
        term2 = 0.5 * a * (l2 * l2 + 2.0 * l1 * tau + tau * tau * d)
        term3 = 0.5 * a * (l2 + math.sqrt(d) * tau) ** 2
        out: FloatArray = np.minimum(np.minimum(term1, term2), term3)
        return out

    def zcdp_rho(self) -> float:
        """``rho`` with ``rdp(alpha) <= alpha rho`` for all ``alpha``: Eq. (17)'s linear terms."""
        sigma = math.sqrt(self.shares) * self.local_sigma
        l2 = self.l2_sensitivity / sigma
        l1 = self.l1_sensitivity / sigma
        tau, d = self.tau, float(self.dim)
        return 0.5 * min(l2 * l2 + 2.0 * l1 * tau + tau * tau * d, (l2 + math.sqrt(d) * tau) ** 2)


@dataclass(frozen=True)
class SkellamSumEvent:
    """A Skellam release: integer data plus ``Sk(variance)`` noise (sum of all shares).

    Attributes
    ----------
    variance : float
        ``mu``: the total noise variance per coordinate in integer units (the shares'
        variances add up: a sum of Skellams is Skellam).
    l2_sensitivity, l1_sensitivity : float
        L2 and L1 sensitivity of the integer sum.
    """

    variance: float
    l2_sensitivity: float
    l1_sensitivity: float

    def rdp(self, orders: npt.ArrayLike = RDP_ORDERS) -> FloatArray:
        """Renyi DP at integer ``orders`` (AKL 2021, Thm 3.5 / Cor. 3.6)."""
        a = np.asarray(orders, dtype=np.float64)
        if np.any(a != np.floor(a)) or np.any(a < 2):
            raise PrivacyParameterError(
                f"the Skellam RDP bound holds at integer orders >= 2, got orders={a!r}."
            )
        mu, l2sq, l1 = self.variance, self.l2_sensitivity**2, self.l1_sensitivity
        extra = np.minimum(((2.0 * a - 1.0) * l2sq + 6.0 * l1) / (4.0 * mu * mu), 1.5 * l1 / mu)
        out: FloatArray = a * l2sq / (2.0 * mu) + extra
        return out

    def zcdp_rho(self) -> float:
        """``rho`` with ``rdp(alpha) <= alpha rho`` for ``alpha >= 1`` (bound the extra term)."""
        mu, l2sq, l1 = self.variance, self.l2_sensitivity**2, self.l1_sensitivity
        # (2a - 1) l2^2 + 6 l1 <= a (2 l2^2 + 6 l1) and 3 l1/(2 mu) <= a 3 l1/(2 mu), a >= 1.
        return l2sq / (2.0 * mu) + min((2.0 * l2sq + 6.0 * l1) / (4.0 * mu * mu), 1.5 * l1 / mu)


DiscreteSumEvent = DiscreteGaussianSumEvent | SkellamSumEvent
"""The discrete releases the accountant composes."""


def compose_rdp(
    events: Sequence[DiscreteSumEvent], orders: npt.ArrayLike = RDP_ORDERS
) -> FloatArray:
    """Sum of the events' RDP curves (Mironov 2017, Prop. 1)."""
    a = np.asarray(orders, dtype=np.float64)
    total = np.zeros_like(a)
    for event in events:
        total = total + event.rdp(a)
    return total


def rdp_epsilon(orders: npt.ArrayLike, rdp: npt.ArrayLike, delta: float) -> tuple[float, float]:
    """Smallest ``epsilon`` at ``delta`` over the orders, and the order that attains it.

    ``epsilon = rdp(a) + log((a - 1)/a) - (log delta + log a)/(a - 1)`` (Canonne, Kamath &
    Steinke 2020, Prop. 12), and 0 where ``delta^2 > 1 - exp(-rdp(a))``.
    """
    delta_f = _check_delta(delta)
    a = np.asarray(orders, dtype=np.float64)
    r = np.asarray(rdp, dtype=np.float64)
    if a.shape != r.shape or np.any(a <= 1.0):
        raise PrivacyParameterError(f"orders must be > 1 and match rdp's shape, got {a!r}.")
    eps = r + np.log1p(-1.0 / a) - (math.log(delta_f) + np.log(a)) / (a - 1.0)
    eps = np.where(np.isnan(eps), np.inf, eps)
    # delta >= sqrt(1 - exp(-KL)) already gives epsilon = 0 (as dp-accounting does).
    eps = np.where(delta_f * delta_f + np.expm1(-r) > 0.0, 0.0, eps)
    i = int(np.argmin(eps))
    return max(0.0, float(eps[i])), float(a[i])


def rdp_delta(orders: npt.ArrayLike, rdp: npt.ArrayLike, epsilon: float) -> float:
    """Smallest ``delta`` at ``epsilon``: the same conversion solved for delta, or the KL bound."""
    eps_f = _check_nonnegative("epsilon", epsilon)
    a = np.asarray(orders, dtype=np.float64)
    r = np.asarray(rdp, dtype=np.float64)
    log_delta = (a - 1.0) * (r - eps_f + np.log1p(-1.0 / a)) - np.log(a)
    with np.errstate(divide="ignore"):  # r = 0 gives log 0 = -inf: delta = 0
        kl = 0.5 * np.log1p(-np.exp(-r))  # delta <= sqrt(1 - exp(-KL)), as dp-accounting
    return float(math.exp(min(0.0, float(np.min(np.minimum(log_delta, kl))))))


def zcdp_epsilon(rho: float, delta: float, orders: npt.ArrayLike = RDP_ORDERS) -> float:
    """``epsilon`` of ``rho``-zCDP at ``delta`` (RDP ``alpha rho``, converted as above)."""
    rho_f = _check_nonnegative("rho", rho)
    a = np.asarray(orders, dtype=np.float64)
    return rdp_epsilon(a, a * rho_f, delta)[0]


def zcdp_rho_for(epsilon: float, delta: float, orders: npt.ArrayLike = RDP_ORDERS) -> float:
    """Largest ``rho`` whose zCDP converts to at most ``(epsilon, delta)`` (bisection).

    Raises
    ------
    PrivacyParameterError
        If a parameter is out of range.
    """
    eps_f = _check_positive("epsilon", epsilon)
    delta_f = _check_delta(delta)
    lo, hi = 0.0, 1.0
    while zcdp_epsilon(hi, delta_f, orders) <= eps_f:
        lo, hi = hi, 2.0 * hi
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if zcdp_epsilon(mid, delta_f, orders) <= eps_f:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-15 * hi:
            break
    return lo
