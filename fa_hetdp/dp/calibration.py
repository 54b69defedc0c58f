"""Calibration of Gaussian noise: the analytic (AGM) and the classical (CGM) Gaussian mechanism.

The analytic Gaussian mechanism (paper Thm 2.10 and Alg. 1; Balle & Wang, ICML 2018, Thm 8)
adds the *smallest* noise ``sigma`` for which the Gaussian mechanism with L2 sensitivity
``Delta`` is ``(epsilon, delta)``-DP. The paper's Theorem 2.10 gives the exact condition

    delta(sigma) = Phi(Delta/(2 sigma) - epsilon sigma/Delta)
                   - e^epsilon Phi(-Delta/(2 sigma) - epsilon sigma/Delta) <= delta,

and ``delta(sigma)`` is strictly decreasing in ``sigma``. Instead of the paper's Algorithm 1
(whose ``alpha`` has a typo: it must read ``sqrt(1 + v/2) -+ sqrt(v/2)``) we solve that condition
directly for ``log sigma`` with a bracketing root finder, evaluating ``log delta(sigma)`` without
cancellation (see :func:`_log_delta`). The result is within a relative ``1e-12`` of the exact
solution (measured: ``<= 4e-14`` against mpmath at 50 digits) and never below it:
``achieved_delta(calibrate_sigma(e, d), e) <= d``.

The classical Gaussian mechanism (paper Thm 2.9) uses ``sigma = Delta sqrt(2 ln(1.25/delta))/
epsilon``; it is a DP guarantee only for ``epsilon < 1``, so larger ``epsilon`` gives a labelled
baseline and a :class:`~fa_hetdp.errors.BaselineWarning`.
"""

from __future__ import annotations

import math
import warnings
from numbers import Real
from typing import Final

import numpy as np
from scipy.special import erf, erfcx, log_ndtr, ndtr, ndtri

from fa_hetdp._types import Mechanism
from fa_hetdp.errors import BaselineWarning, PrivacyParameterError

__all__ = [
    "EPSILON_WARNING_THRESHOLD",
    "Mechanism",
    "WeakPrivacyWarning",
    "achieved_delta",
    "achieved_epsilon",
    "calibrate_sigma",
    "cgm_sigma",
]


_SQRT2: Final = math.sqrt(2.0)
_LOG_SQRT_2PI: Final = 0.5 * math.log(2.0 * math.pi)
_MACHINE_EPS: Final = 2.220446049250313e-16
_TWO_OVER_SQRT_PI: Final = 2.0 / math.sqrt(math.pi)
_GL_NODES, _GL_WEIGHTS = np.polynomial.legendre.leggauss(12)
# Relative accuracy of the root of log delta(s) = log(target) in s (brentq on log s).
_LOG_S_XTOL: Final = 1e-15
# Hard cap on upward nudges when the float check still finds delta above target.
_MAX_NUDGES: Final = 64

EPSILON_WARNING_THRESHOLD: Final = 10.0
"""A total epsilon above this runs, but warns and says so in the result: at ``epsilon > 10``
an observer's odds of telling two neighbouring datasets apart may grow by more than
``e^10 ~ 22000``, which is not a meaningful protection for one client (``docs/privacy.md``,
"A large epsilon")."""


class WeakPrivacyWarning(UserWarning):
    """A budget above :data:`EPSILON_WARNING_THRESHOLD`: formally DP, hardly a protection."""


def weak_privacy_label(epsilon: float) -> str | None:
    """Return the caveat of a total ``epsilon`` above :data:`EPSILON_WARNING_THRESHOLD`, or None."""
    if epsilon <= EPSILON_WARNING_THRESHOLD:
        return None
    return (
        f"weak privacy: epsilon = {epsilon:g} > {EPSILON_WARNING_THRESHOLD:g} (the threshold "
        "above which the guarantee is formally DP but hardly protects one client)"
    )


# --------------------------------------------------------------------------- validation


def _as_real(name: str, value: object) -> float:
    """Return ``value`` as a float, or raise if it is not a real number (bools refused)."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise PrivacyParameterError(
            f"{name} must be a real number, got {name}={value!r} ({type(value).__name__})"
        )
    return float(value)


def _check_positive(name: str, value: object) -> float:
    """Validate a finite, strictly positive parameter (epsilon, sensitivity, sigma)."""
    x = _as_real(name, value)
    if not (math.isfinite(x) and x > 0.0):
        raise PrivacyParameterError(f"{name} must be a finite number > 0, got {name}={x!r}")
    return x


def _check_nonnegative(name: str, value: object) -> float:
    """Validate a finite parameter ``>= 0`` (epsilon where 0 is meaningful)."""
    x = _as_real(name, value)
    if not (math.isfinite(x) and x >= 0.0):
        raise PrivacyParameterError(f"{name} must be a finite number >= 0, got {name}={x!r}")
    return x


def _check_delta(value: object) -> float:
    """Validate ``delta`` in the open interval (0, 1)."""
    x = _as_real("delta", value)
    if not (0.0 < x < 1.0):
        raise PrivacyParameterError(f"delta must be in the open interval (0, 1), got delta={x!r}")
    return x


def _check_mechanism(mechanism: object) -> Mechanism:
    """Validate the mechanism name."""
    if mechanism == "agm":
        return "agm"
    if mechanism == "cgm":
        return "cgm"
    raise PrivacyParameterError(
        f"mechanism must be one of 'agm', 'cgm', got mechanism={mechanism!r}"
    )


# --------------------------------------------------------------------------- exact delta


def _log_erfcx_ratio(s: float, epsilon: float) -> tuple[float, float]:
    """``x = log erfcx(u) - log erfcx(w)`` for ``u = -b/sqrt2 > w = -a/sqrt2 > 0``.

    The two arguments are ``u, w = (epsilon s +- 1/(2s))/sqrt2``: their midpoint
    ``epsilon s/sqrt2`` and width ``L = 1/(s sqrt2)`` are computed directly. For a narrow
    interval (``L <= 1/2``, large noise) the log-ratio is small and a plain difference would
    lose ``~ulp/|x|`` relative; there ``x = integral_w^u g(z) dz`` with
    ``g = (log erfcx)' = 2z - 2/(sqrt(pi) erfcx(z))`` by 12-point Gauss-Legendre (the
    integrand is analytic well beyond the interval, so the rule is exact to rounding) with a
    relative error of about ``4 ulp z**2`` from the cancellation in ``g``.

    Returns
    -------
    tuple of float
        ``x`` (``< 0``) and a bound on the relative error it causes in ``delta``.
    """
    mid = epsilon * s / _SQRT2
    width = 1.0 / (s * _SQRT2)
    u = mid + 0.5 * width
    if width <= 0.5:
        z = mid + 0.5 * width * _GL_NODES
        g = 2.0 * z - _TWO_OVER_SQRT_PI / erfcx(z)
        x = 0.5 * width * float(np.dot(_GL_WEIGHTS, g))
        return x, _MACHINE_EPS * (32.0 + 16.0 * u * u)
    w = mid - 0.5 * width
    x = math.log(float(erfcx(u)) / float(erfcx(w)))
    return x, _MACHINE_EPS * (16.0 + 8.0 / max(-math.expm1(x), _MACHINE_EPS))


def _log_delta(s: float, epsilon: float) -> float:
    """``log delta`` of a Gaussian mechanism with noise ``s = sigma/Delta`` at ``epsilon``.

    Evaluates the left side of the paper's Thm 2.10 (Balle & Wang 2018, Thm 8) without
    catastrophic cancellation, for ``s > 0`` and ``epsilon >= 0``. With
    ``a = 1/(2s) - epsilon s`` and ``b = -1/(2s) - epsilon s`` (so ``b < 0`` and
    ``b**2 - a**2 = 2 epsilon``):

    * ``a >= 0``: ``delta = (erf(a/sqrt2) + erf(-b/sqrt2))/2 - (e^epsilon - 1) Phi(b)``; the
      first term is ``Phi(a) - Phi(b)`` written as a sum of positive terms, and ``delta`` is at
      least ``delta_0`` of Alg. 1 here, so the subtraction is benign.
    * ``a < 0``: with ``Phi(t) = exp(-t**2/2) erfcx(-t/sqrt2)/2`` the factor ``e^epsilon``
      cancels exactly against ``exp(-(b**2 - a**2)/2)``, so
      ``delta = Phi(a) (1 - erfcx(-b/sqrt2)/erfcx(-a/sqrt2))``, evaluated as
      ``log_ndtr(a) + log(-expm1(x))`` with ``x = log of the erfcx ratio < 0``.

    Parameters
    ----------
    s : float
        Noise standard deviation in units of the sensitivity (``sigma/Delta``), ``> 0``.
    epsilon : float
        Privacy parameter ``>= 0``.

    Returns
    -------
    float
        ``log delta(s)``; ``-inf`` only if ``delta`` underflows.
    """
    a = 0.5 / s - epsilon * s
    b = -0.5 / s - epsilon * s
    if a >= 0.0:
        # Thm 2.10: Phi(a) - e^eps Phi(b) = [Phi(a) - Phi(b)] - (e^eps - 1) Phi(b)
        head = 0.5 * (float(erf(a / _SQRT2)) + float(erf(-b / _SQRT2)))
        if epsilon < 1.0:  # (e^eps - 1) Phi(b) without cancellation for small epsilon
            tail = math.expm1(epsilon) * float(ndtr(b))
        else:  # no overflow of e^eps for large epsilon
            tail = math.exp(epsilon + float(log_ndtr(b))) - float(ndtr(b))
        d = head - tail
        return math.log(d) if d > 0.0 else -math.inf
    # Thm 2.10 in the erfcx form: delta = Phi(a) * (1 - erfcx(-b/sqrt2) / erfcx(-a/sqrt2))
    x, _ = _log_erfcx_ratio(s, epsilon)
    if x >= 0.0:
        return -math.inf
    return float(log_ndtr(a)) + math.log(-math.expm1(x))


def _log_delta_error(s: float, epsilon: float) -> float:
    """Bound on the relative float error of ``exp(_log_delta(s, epsilon))``.

    Rounding of the arguments ``a``, ``b`` costs about ``ulp * (|a| + |b|)**2`` (the
    derivative of ``log Phi`` at ``a`` is about ``|a|``); in the ``a < 0`` branch the erfcx
    log-ratio ``x`` adds its own error (see :func:`_log_erfcx_ratio`). The bound has a
    safety factor of 2 or more over the worst error seen against mpmath (dps = 50).
    """
    a = 0.5 / s - epsilon * s
    b = -0.5 / s - epsilon * s
    base = _MACHINE_EPS * (16.0 + 4.0 * (abs(a) + abs(b)) ** 2)
    if a >= 0.0:
        return base
    x, err = _log_erfcx_ratio(s, epsilon)
    if x >= 0.0:
        return math.inf
    return base + err


def _log_elasticity(s: float, epsilon: float, log_delta: float) -> float:
    """``log |d log delta / d log s|`` at ``s``.

    Differentiating Thm 2.10, the density terms combine because
    ``e^epsilon phi(b) = phi(a)``: ``d delta/ds = -phi(a)/s**2``, so the elasticity is
    ``phi(a)/(s delta)``.
    """
    a = 0.5 / s - epsilon * s
    return -0.5 * a * a - _LOG_SQRT_2PI - math.log(s) - log_delta


def _delta_value(s: float, epsilon: float) -> float:
    """``delta`` as a float, exactly as :func:`achieved_delta` reports it (checks use this)."""
    return min(1.0, math.exp(_log_delta(s, epsilon)))


def achieved_delta(sigma: float, epsilon: float, sensitivity: float = 1.0) -> float:
    """Exact ``delta`` of the Gaussian mechanism with noise ``sigma`` at privacy ``epsilon``.

    The smallest ``delta`` for which adding ``N(0, sigma**2 I)`` to a function of L2
    sensitivity ``sensitivity`` is ``(epsilon, delta)``-DP: the left side of the paper's
    Thm 2.10 (Balle & Wang 2018, Thm 8), evaluated in log space so that values down to
    ``1e-300`` keep full relative precision.

    Parameters
    ----------
    sigma : float
        Noise standard deviation, finite and ``> 0``.
    epsilon : float
        Privacy parameter, finite and ``>= 0`` (``0`` gives ``erf(Delta/(2 sqrt2 sigma))``).
    sensitivity : float, optional
        L2 sensitivity ``Delta``, finite and ``> 0``. Default 1.

    Returns
    -------
    float
        ``delta`` in ``[0, 1]``.

    Raises
    ------
    PrivacyParameterError
        If a parameter is outside its range.
    """
    sigma_f = _check_positive("sigma", sigma)
    epsilon_f = _check_nonnegative("epsilon", epsilon)
    sensitivity_f = _check_positive("sensitivity", sensitivity)
    s = sigma_f / sensitivity_f
    if not (math.isfinite(s) and s > 0.0):
        raise PrivacyParameterError(
            f"sigma/sensitivity must be a finite number > 0, got sigma={sigma_f!r}, "
            f"sensitivity={sensitivity_f!r}"
        )
    return _delta_value(s, epsilon_f)


# --------------------------------------------------------------------------- calibration


def cgm_sigma(epsilon: float, delta: float, sensitivity: float = 1.0) -> float:
    """Noise of the classical Gaussian mechanism (paper Thm 2.9), without the warning.

    ``sigma = Delta sqrt(2 ln(1.25/delta))/epsilon``. A DP guarantee only for ``epsilon < 1``;
    :func:`calibrate_sigma` with ``mechanism="cgm"`` warns for larger ``epsilon``.

    Parameters
    ----------
    epsilon : float
        Privacy parameter, finite and ``> 0``.
    delta : float
        Privacy parameter in ``(0, 1)``.
    sensitivity : float, optional
        L2 sensitivity, finite and ``> 0``. Default 1.

    Returns
    -------
    float
        The CGM noise standard deviation.

    Raises
    ------
    PrivacyParameterError
        If a parameter is outside its range.
    """
    epsilon_f = _check_positive("epsilon", epsilon)
    delta_f = _check_delta(delta)
    sensitivity_f = _check_positive("sensitivity", sensitivity)
    return sensitivity_f * math.sqrt(2.0 * math.log(1.25 / delta_f)) / epsilon_f  # Thm 2.9


def _agm_unit_sigma(epsilon: float, delta: float) -> float:
    """AGM noise for sensitivity 1 (validated inputs): smallest ``s`` with delta(s) <= delta.

    Solves Thm 2.10 for ``log s`` with Brent's method. Upper bracket: ``delta(s) <= Phi(a)``,
    so the root ``s_hi`` of ``Phi(1/(2s) - epsilon s) = delta`` bounds the solution from
    above; the lower end halves ``s`` until ``delta(s) > target`` (``delta -> 1`` as
    ``s -> 0``). The root is then raised by the float error bound of ``delta`` divided by
    the elasticity ``|d log delta/d log s|`` and finally nudged up while the float check
    still says ``delta > target``, so the result never under-noises.
    """
    log_target = math.log(delta)
    z = float(ndtri(delta))
    root = math.sqrt(z * z + 2.0 * epsilon)
    # s_hi solves epsilon s^2 + z s - 1/2 = 0 (a(s) = z), written without cancellation.
    s_hi = (root - z) / (2.0 * epsilon) if z <= 0.0 else 1.0 / (z + root)

    def f(log_s: float) -> float:
        return _log_delta(math.exp(log_s), epsilon) - log_target

    hi = math.log(s_hi)
    f_hi = f(hi)
    if f_hi > 0.0:  # float noise at a bound that is exact only in real arithmetic
        while f_hi > 0.0:
            hi += math.log(2.0)
            f_hi = f(hi)
    lo = hi - math.log(2.0)
    while f(lo) <= 0.0:
        hi = lo
        lo -= math.log(2.0)
    from scipy.optimize import brentq  # here: scipy.optimize costs a ClientApp ~0.3 s

    log_s = float(brentq(f, lo, hi, xtol=_LOG_S_XTOL, rtol=4.0 * _MACHINE_EPS, maxiter=200))
    s = math.exp(log_s)
    # Raise s by (float error of delta)/(elasticity) so the exact delta(s) <= target.
    log_delta_s = _log_delta(s, epsilon)
    rel_err = _log_delta_error(s, epsilon)
    elasticity = math.exp(_log_elasticity(s, epsilon, log_delta_s))
    s *= 1.0 + 2.0 * rel_err / elasticity + 8.0 * _MACHINE_EPS
    nudges = 0
    while _delta_value(s, epsilon) > delta:
        s *= 1.0 + _MACHINE_EPS * 2.0 ** min(nudges, 40)  # 1 ulp first, then doubling steps
        nudges += 1
        if nudges > _MAX_NUDGES:  # pragma: no cover - defensive: never seen in [1e-3, 100]
            raise PrivacyParameterError(
                f"AGM calibration did not converge for epsilon={epsilon!r}, delta={delta!r}"
            )
    return s


def calibrate_sigma(
    epsilon: float,
    delta: float,
    sensitivity: float = 1.0,
    mechanism: Mechanism = "agm",
) -> float:
    """Noise standard deviation that makes a Gaussian mechanism ``(epsilon, delta)``-DP.

    ``"agm"``: the analytic Gaussian mechanism (paper Thm 2.10 and Alg. 1; Balle & Wang 2018,
    Thm 8): the smallest ``sigma`` satisfying Thm 2.10, found by solving the exact condition
    in log space (not via Alg. 1, whose ``alpha`` has a typo; the correct form is
    ``sqrt(1 + v/2) -+ sqrt(v/2)``). Within a relative ``1e-12`` of a 50-digit solution
    (measured ``<= 4e-14``) and never below it, i.e.
    ``achieved_delta(sigma, epsilon) <= delta``, for ``epsilon in [1e-3, 100]`` and
    ``delta in [1e-15, 0.5]`` (tested; also accurate for ``epsilon`` down to ``1e-6``). For
    ``delta`` very close to 1 (``1 - delta < 1e-12``) the result stays conservative but can
    be several times too large, since float ``delta`` cannot resolve ``1 - delta`` there.

    ``"cgm"``: the classical Gaussian mechanism (paper Thm 2.9),
    ``sigma = Delta sqrt(2 ln(1.25/delta))/epsilon``. It is a DP guarantee only for
    ``epsilon < 1``; for ``epsilon >= 1`` the value is returned as a labelled baseline and a
    :class:`~fa_hetdp.errors.BaselineWarning` is issued.

    ``sigma`` is linear in ``sensitivity`` (Thm 2.10 depends on ``sigma/Delta`` only).

    Parameters
    ----------
    epsilon : float
        Privacy parameter, finite and ``> 0``.
    delta : float
        Privacy parameter in the open interval ``(0, 1)``.
    sensitivity : float, optional
        L2 sensitivity ``Delta`` of the released function, finite and ``> 0``. Default 1.
    mechanism : {"agm", "cgm"}, optional
        Calibration rule. Default ``"agm"``.

    Returns
    -------
    float
        The noise standard deviation ``sigma``.

    Raises
    ------
    PrivacyParameterError
        If a parameter is outside its range or the mechanism is unknown.

    Warns
    -----
    BaselineWarning
        For ``mechanism="cgm"`` with ``epsilon >= 1`` (Thm 2.9 does not apply).
    """
    mech = _check_mechanism(mechanism)
    epsilon_f = _check_positive("epsilon", epsilon)
    delta_f = _check_delta(delta)
    sensitivity_f = _check_positive("sensitivity", sensitivity)
    if mech == "cgm":
        if epsilon_f >= 1.0:
            warnings.warn(
                f"CGM at epsilon={epsilon_f!r} >= 1 is not a DP guarantee (Thm 2.9 needs "
                "epsilon < 1); the noise is returned as a labelled baseline",
                BaselineWarning,
                stacklevel=2,
            )
        return cgm_sigma(epsilon_f, delta_f, sensitivity_f)
    return sensitivity_f * _agm_unit_sigma(epsilon_f, delta_f)


def achieved_epsilon(sigma: float, delta: float, sensitivity: float = 1.0) -> float:
    """Smallest ``epsilon >= 0`` for which the Gaussian mechanism is ``(epsilon, delta)``-DP.

    Inverts the paper's Thm 2.10 in ``epsilon`` (``delta(epsilon)`` is strictly decreasing)
    with Brent's method on the same cancellation-free ``log delta`` as
    :func:`achieved_delta`. Used by the accountant for the exact composition of Gaussian
    mechanisms (Dong, Roth & Su, Gaussian DP, Cor. 3.3): a ``mu``-GDP composition is
    ``achieved_epsilon(1.0, delta, mu)``.

    Parameters
    ----------
    sigma : float
        Noise standard deviation, finite and ``> 0``.
    delta : float
        Target ``delta`` in ``(0, 1)``.
    sensitivity : float, optional
        L2 sensitivity, finite and ``> 0``. Default 1.

    Returns
    -------
    float
        ``epsilon``; ``0.0`` if ``achieved_delta(sigma, 0, sensitivity) <= delta`` already.

    Raises
    ------
    PrivacyParameterError
        If a parameter is outside its range.
    """
    sigma_f = _check_positive("sigma", sigma)
    delta_f = _check_delta(delta)
    sensitivity_f = _check_positive("sensitivity", sensitivity)
    s = sigma_f / sensitivity_f
    if not (math.isfinite(s) and s > 0.0):
        raise PrivacyParameterError(
            f"sigma/sensitivity must be a finite number > 0, got sigma={sigma_f!r}, "
            f"sensitivity={sensitivity_f!r}"
        )
    log_target = math.log(delta_f)
    if _log_delta(s, 0.0) <= log_target:
        return 0.0

    def f(eps: float) -> float:
        return _log_delta(s, eps) - log_target

    lo, hi = 0.0, 1.0
    while f(hi) > 0.0:
        lo, hi = hi, 2.0 * hi
        if hi > 1e12:  # pragma: no cover - needs s < ~1e-6 and delta near 1e-300
            raise PrivacyParameterError(
                f"achieved_epsilon diverged for sigma={sigma_f!r}, delta={delta_f!r}, "
                f"sensitivity={sensitivity_f!r}"
            )
    from scipy.optimize import brentq  # here: scipy.optimize costs a ClientApp ~0.3 s

    eps = float(brentq(f, lo, hi, xtol=1e-300, rtol=4.0 * _MACHINE_EPS, maxiter=200))
    # Never report less than the truth: step up while the float check exceeds the target.
    for nudge in range(_MAX_NUDGES):
        if _delta_value(s, eps) <= delta_f:
            break
        eps = max(eps * (1.0 + _MACHINE_EPS * 2.0 ** min(nudge, 40)), 5e-324)
    else:  # pragma: no cover - defensive: never seen
        raise PrivacyParameterError(
            f"achieved_epsilon did not converge for sigma={sigma_f!r}, delta={delta_f!r}, "
            f"sensitivity={sensitivity_f!r}"
        )
    return eps
