"""The public centre of the dispersion release (``dispersion_center = "optimal"``; lever c).

Clients send ``(x_i - a)^2`` for a public ``a in [0, 1]^d`` instead of ``(x_i - c)^2``,
``c = clip(mu', 0, 1)``. The identity ``(1/n) sum_i (x_i - a)^2 = D + (mu - a)^2`` (Thm 3.3's
summand moved to ``a``) gives the estimator ``D'' = (sum + noise)/n - (c - a)^2``
(:func:`center_correction`; ``a = c`` is the broadcast estimator). Moving ``a_j`` from ``c_j``
toward 1/2 shrinks the coordinate's bound ``b_j = max(a_j, 1 - a_j)^2``
(:mod:`fa_hetdp.protocol.bounds`), so the noise, and adds the correction's error
``(mu - a)^2 - (c - a)^2 = e^2 + 2 e (c - a)``, ``e = mu - c``, of variance about
``4 (c - a)^2 tau^2`` (``tau = s_1/n``, the noise sd of ``mu'``).

:func:`optimal_center` minimises the predicted summed per-coordinate MSE. With
``kappa = (s_wc/n)^2/d`` (``s_wc`` the worst-case dispersion noise sd) and ``u = min(c, 1 - c)``
(the other half mirrored), ``a' = min(a, 1 - a)``:

- ``"per_coordinate"`` noise (``f_j^2 = b_j S/d``, ``S = sum_i b_i``): the objective
  ``kappa S^2 + sum_j 4 (u_j - a'_j)^2 tau^2`` is stationary at
  ``a'_j = (4 S kappa + 8 tau^2 u_j) / (4 S kappa + 8 tau^2)``, capped at 1/2, with ``S``
  iterated to its fixed point (:data:`ITERATIONS` rounds);
- ``"uniform"`` noise (``f_j^2 = sum_i b_i^2/d``): the objective
  ``kappa d sum_j b_j^2 + sum_j 4 (u_j - a'_j)^2 tau^2`` is separable; its stationary point
  solves ``8 tau^2 (a' - u) = 4 kappa d (1 - a')^3`` on ``[u, 1/2]`` (bisection).

The centre is a function of the released ``mu'`` and the plan's public sigmas only:
post-processing (``docs/privacy.md``, lever c).
"""

from __future__ import annotations

import math
from typing import Final

import numpy as np
import numpy.typing as npt

from fa_hetdp._types import FloatArray
from fa_hetdp.protocol.plan import ProtocolPlan

__all__ = [
    "ITERATIONS",
    "center_correction",
    "center_given_total",
    "center_scales",
    "dispersion_center",
    "optimal_center",
]

ITERATIONS: Final = 8
"""Fixed-point rounds on ``S = sum_i b_i`` (per-coordinate noise); ``S`` moves < 1e-6 after 5
on digits."""

_BISECTIONS: Final = 48


def center_scales(plan: ProtocolPlan) -> tuple[float, float]:
    """Return ``(tau, s_wc/n)``: noise sds of ``mu'`` and of the worst-case ``D''`` (public)."""
    mech = plan.mechanism

    def sd(name: str) -> float:
        return math.sqrt(float(mech.variance(plan.noise_std(name)))) / plan.n

    return sd("mean"), sd("dispersion")


def center_given_total(
    broadcast: npt.ArrayLike, total: npt.ArrayLike, *, tau: float, noise: float, shape: str
) -> FloatArray:
    """Return the optimal centre per coordinate with ``S = sum_i b_i`` held at ``total``.

    Parameters
    ----------
    broadcast : array_like, shape (..., d)
        ``c = clip(mu', 0, 1)``.
    total : array_like, shape (...) or (..., 1)
        ``S`` (read only for ``"per_coordinate"``).
    tau, noise : float
        Noise sd of ``mu'`` and of the worst-case ``D''`` (:func:`center_scales`).
    shape : {"uniform", "per_coordinate"}
        The plan's ``noise_shape``.

    Returns
    -------
    FloatArray, shape (..., d)
        ``a``, between ``c`` and 1/2 per coordinate.
    """
    c = np.asarray(broadcast, dtype=np.float64)
    u = np.minimum(c, 1.0 - c)
    d = c.shape[-1]
    kappa = noise * noise / d
    t2 = tau * tau
    if shape == "per_coordinate":
        s = np.asarray(total, dtype=np.float64)
        s = s if s.ndim == c.ndim else s[..., None]
        k = 4.0 * s * kappa
        a = np.minimum((k + 8.0 * t2 * u) / (k + 8.0 * t2), 0.5)
    else:
        lo, hi = u.copy(), np.full_like(u, 0.5)
        for _ in range(_BISECTIONS):  # h(a) = 8 tau^2 (a - u) - 4 kappa d (1 - a)^3, increasing
            mid = 0.5 * (lo + hi)
            below = 8.0 * t2 * (mid - u) < 4.0 * kappa * d * (1.0 - mid) ** 3
            lo = np.where(below, mid, lo)
            hi = np.where(below, hi, mid)
        a = hi
    out: FloatArray = np.where(c <= 0.5, a, 1.0 - a)
    return out


def optimal_center(broadcast: npt.ArrayLike, *, tau: float, noise: float, shape: str) -> FloatArray:
    """Return the public centre ``a`` minimising the predicted summed per-coordinate MSE.

    Parameters
    ----------
    broadcast : array_like, shape (..., d)
        ``c = clip(mu', 0, 1)`` (any leading repeat axes).
    tau, noise : float
        Noise sd of ``mu'`` and of the worst-case ``D''`` (:func:`center_scales`).
    shape : {"uniform", "per_coordinate"}
        The plan's ``noise_shape``.

    Returns
    -------
    FloatArray, shape (..., d)
        ``a in [0, 1]``; ``c`` itself when there is no noise to save (``noise = 0``).
    """
    c = np.asarray(broadcast, dtype=np.float64)
    if noise <= 0.0:
        return c.copy()
    a = c
    for _ in range(ITERATIONS if shape == "per_coordinate" else 1):
        total = np.sum(np.maximum(a, 1.0 - a) ** 2, axis=-1)
        a = center_given_total(c, total, tau=tau, noise=noise, shape=shape)
    return a


def dispersion_center(broadcast: npt.ArrayLike, plan: ProtocolPlan) -> FloatArray:
    """Return the dispersion centre the plan's clients use: ``c`` or :func:`optimal_center`.

    ``c`` itself (a copy) unless ``dispersion_center = "optimal"`` and ``D''`` is released.
    """
    c = np.asarray(broadcast, dtype=np.float64)
    if plan.config.dispersion_center != "optimal" or "dispersion" not in plan.releases:
        return c.copy()
    tau, noise = center_scales(plan)
    return optimal_center(c, tau=tau, noise=noise, shape=plan.config.noise_shape)


def center_correction(mu_prime: npt.ArrayLike, center: npt.ArrayLike) -> FloatArray:
    """``(clip(mu', 0, 1) - a)^2``: what the server subtracts from ``sum (x_i - a)^2 / n``."""
    c = np.clip(np.asarray(mu_prime, dtype=np.float64), 0.0, 1.0)
    out: FloatArray = (c - np.asarray(center, dtype=np.float64)) ** 2
    return out
