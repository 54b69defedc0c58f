"""Confidence intervals of the private statistics and their empirical coverage.

- :func:`paper_confidence_intervals`: the paper's Thm 3.6, 3.9, 3.14 as written (labelled;
  not calibrated to the noise);
- :func:`noise_confidence_intervals`: built from the public noise distribution (coverage
  ``>= level``);
- :func:`average_intervals`: the interval of each coordinate average (the number a report
  prints for a per-coordinate statistic), from the noise of the average itself;
- :func:`coverage`: the fraction of (repeat, coordinate) intervals that contain the truth
  (:func:`average_coverage`: of the coordinate averages' intervals).

Theorem numbers are the paper's (see ``docs/design.md``); where they may be ambiguous the
LaTeX label is given too.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt
from scipy.special import ndtr, ndtri
from scipy.stats import chi2

from fa_hetdp._types import FloatArray
from fa_hetdp.errors import InputDataError
from fa_hetdp.protocol.plan import ProtocolPlan
from fa_hetdp.protocol.server import PrivateStatistics
from fa_hetdp.protocol.simulate import BatchResult
from fa_hetdp.registry import derive, statistic, value_of
from fa_hetdp.stats.exact import TrueStatistics, i_squared

__all__ = [
    "AVERAGE_CI_LABEL",
    "NOISE_CI_LABEL",
    "PAPER_CI_LABEL",
    "Intervals",
    "average_coverage",
    "average_intervals",
    "coverage",
    "i2_slope",
    "noise_confidence_intervals",
    "paper_confidence_intervals",
    "stage2_noise_stds",
    "summed_i_squared",
    "summed_q_bounds",
    "true_value",
]

PAPER_CI_LABEL: Final = (
    "paper confidence intervals (Thm 3.6, 3.9, 3.14 as written): not calibrated to the noise"
)
NOISE_CI_LABEL: Final = (
    "intervals from the public noise distribution (coverage >= level; delta method for mu_bar')"
)

AVERAGE_CI_LABEL: Final = (
    "intervals of the coordinate averages, from the noise of the average (coverage >= level; "
    "delta method for mu_bar' and I2'')"
)

Result = PrivateStatistics | BatchResult


def _leading(result: Result, values: FloatArray) -> FloatArray:
    """Broadcast a per-result scalar/array so it lines up with ``(..., d)`` arrays."""
    return values[..., None] if isinstance(result, BatchResult) else values


@dataclass(frozen=True)
class Intervals:
    """Confidence intervals for some statistics (per coordinate, optional repeat axis).

    Attributes
    ----------
    lower, upper : Mapping[str, FloatArray]
        Bounds by statistic name (``"dispersion"``, ``"q"``, ``"i2"``, ...), shape
        ``(d,)`` or ``(repeats, d)``.
    level : float
        Nominal coverage.
    label : str
        Where the intervals come from.
    """

    lower: Mapping[str, FloatArray]
    upper: Mapping[str, FloatArray]
    level: float
    label: str

    def width(self, name: str) -> float:
        """Mean width of the intervals of statistic ``name``."""
        return float(np.mean(self.upper[name] - self.lower[name]))


def coverage(intervals: Intervals, truth: TrueStatistics) -> dict[str, float]:
    """Empirical coverage: fraction of (repeat, coordinate) intervals containing the truth.

    Parameters
    ----------
    intervals : Intervals
        From :func:`paper_confidence_intervals` or :func:`noise_confidence_intervals`.
    truth : TrueStatistics
        The exact statistics.

    Returns
    -------
    dict[str, float]
        Coverage by statistic name.
    """
    return _coverage(intervals, truth, average=False)


def _coverage(intervals: Intervals, truth: TrueStatistics, *, average: bool) -> dict[str, float]:
    """Fraction of intervals holding the truth (its coordinate average with ``average``)."""
    out: dict[str, float] = {}
    for name, low in intervals.lower.items():
        exact = true_value(truth, name)
        true = np.mean(exact) if average else exact
        out[name] = float(np.mean((low <= true) & (true <= intervals.upper[name])))
    return out


def true_value(truth: TrueStatistics, name: str) -> FloatArray:
    """Return the exact value a statistic or scalar estimates (``i2_extra`` estimates I^2)."""
    if name == "total_dispersion":
        return np.asarray(np.sum(truth.dispersion), dtype=np.float64)
    if name == "i2_total":
        return summed_i_squared(float(np.sum(truth.q)), truth.n, truth.d)
    key = statistic(name).truth
    return np.asarray(value_of(truth, key), dtype=np.float64)


def _check_level(level: float) -> float:
    value = float(level)
    if not (0.0 < value < 1.0):
        raise InputDataError(f"level must be in (0, 1), got level={level!r}.")
    return value


def paper_confidence_intervals(
    result: Result, plan: ProtocolPlan, truth: TrueStatistics
) -> Intervals:
    """Build the paper's 95 % intervals of Thm 3.6, 3.9 and 3.14, as written (labelled).

    The paper's noise variances are taken as the variances of the noise our protocol actually
    adds: ``xi_1^2 = (s_1/n)^2`` (noise of ``mu'``) and ``eta_1^2 = (s_2/B)^2`` (noise of
    ``A'/B`` with ``B`` fixed), instead of the CGM formula ``2 d log(1.25/delta_1)/(n eps_1)^2``
    -- the same quantity for the paper's own mechanism.

    - Thm 3.6 (``thm:dispconf``): ``D'' +- 7.84 sqrt(6) xi_1^4 / sqrt(n)``;
    - Thm 3.9 (``thm:qconf``): ``Q'' +- sum_i 7.84 w_i sqrt(6) eta_1^4 / sqrt(n)``;
    - Thm 3.14 (``thm:isquaredconf``):
      ``I2''' +- sum_i 0.625 (n-1) / (w_i sqrt(n) eta_1^4)`` (``I2''`` without the extra
      noise).

    The weights are the true client weights (the paper's formula needs them; they are not
    public). The half-widths do not depend on the noise actually drawn.

    Parameters
    ----------
    result : PrivateStatistics or BatchResult
        The private releases.
    plan : ProtocolPlan
        The calibrated protocol.
    truth : TrueStatistics
        The exact statistics (for the weights).

    Returns
    -------
    Intervals
        For ``"dispersion"``, ``"q"`` and ``"i2"``, labelled as the paper's.
    """
    n = truth.n
    xi1_sq = (plan.noise_std("mean") / n) ** 2
    eta1_sq = (plan.noise_std("weighted") / truth.weight_sum) ** 2
    w = truth.weights
    h_d = 7.84 * math.sqrt(6.0) * xi1_sq**2 / math.sqrt(n)  # Thm 3.6
    h_q = float(np.sum(7.84 * w * math.sqrt(6.0) * eta1_sq**2 / math.sqrt(n)))  # Thm 3.9
    h_i = float(np.sum(0.625 * (n - 1) / (w * math.sqrt(n) * eta1_sq**2)))  # Thm 3.14
    i2 = result.i2 if result.i2_extra is None else result.i2_extra
    return Intervals(
        lower={"dispersion": result.dispersion - h_d, "q": result.q - h_q, "i2": i2 - h_i},
        upper={"dispersion": result.dispersion + h_d, "q": result.q + h_q, "i2": i2 + h_i},
        level=0.95,
        label=PAPER_CI_LABEL,
    )


_EXACT_PAIRS: Final = 512
"""Above this many distinct ``(scale, sd)`` pairs the quantile is read off a ratio grid."""
_RATIO_STEP: Final = 1e-3
"""Relative step of that grid (the quantile at the next node up: at most 0.1 % wider)."""


def _bisect_quantile(scale: FloatArray, sd: FloatArray, p: float) -> FloatArray:
    nodes, weights = np.polynomial.hermite_e.hermegauss(96)
    weights = weights / weights.sum()
    y2 = nodes**2
    lo = -10.0 * sd
    hi = 40.0 * scale + 10.0 * sd
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        cdf = ndtr((mid[:, None] - scale[:, None] * y2) / sd[:, None]) @ weights
        below = cdf < p
        lo = np.where(below, mid, lo)
        hi = np.where(below, hi, mid)
    return hi


def _quantile_chi2_plus_normal(
    scale_chi2: FloatArray, sd_normal: FloatArray | float, p: float
) -> FloatArray:
    """``p``-quantile of ``scale_chi2 * Y^2 + sd_normal * Z`` (``Y, Z`` iid standard normal).

    The CDF ``E_Y[Phi((u - scale Y^2)/sd)]`` is evaluated by Gauss-Hermite quadrature over
    ``Y`` (a smooth integrand) and inverted by bisection, vectorised over the distinct
    ``(scale_chi2, sd_normal)`` pairs (one per repeat unless the noise is per coordinate).
    With more than :data:`_EXACT_PAIRS` of them (per-coordinate noise over many repeats) it
    uses ``q(scale, sd) = sd q(scale/sd, 1)`` and ``q(r, 1)`` increasing in ``r``: the quantile
    at the grid node of ratio just above ``scale/sd`` (a relative grid step of
    :data:`_RATIO_STEP`), never below the exact one, so coverage stays ``>= p``.
    """
    shape = np.broadcast_shapes(np.shape(scale_chi2), np.shape(sd_normal))
    pairs = np.stack(
        [
            np.broadcast_to(np.asarray(scale_chi2, dtype=np.float64), shape).reshape(-1),
            np.broadcast_to(np.asarray(sd_normal, dtype=np.float64), shape).reshape(-1),
        ],
        axis=1,
    )
    distinct, inverse = np.unique(pairs, axis=0, return_inverse=True)
    scale, sd = distinct[:, 0], distinct[:, 1]
    # A term that is exactly zero (a release not made has no noise; a scale of 0) has a
    # closed form: the other term's quantile alone (the quadrature would divide by sd = 0).
    q = np.where(sd > 0.0, sd * float(ndtri(p)), scale * float(chi2.ppf(p, 1)))
    both = (sd > 0.0) & (scale > 0.0)
    if np.any(both):
        q[both] = _bisect_both(scale[both], sd[both], p)
    out: FloatArray = q[inverse.reshape(-1)].reshape(shape)
    return out


def _bisect_both(scale: FloatArray, sd: FloatArray, p: float) -> FloatArray:
    # Both terms present (scale > 0, sd > 0): exact bisection, or the ratio grid when many.
    if scale.shape[0] <= _EXACT_PAIRS:
        return _bisect_quantile(scale, sd, p)
    step = math.log1p(_RATIO_STEP)
    log_r = np.log(scale / sd)
    k = np.ceil((log_r - log_r.min()) / step).astype(np.int64)
    grid = np.exp(log_r.min() + step * np.arange(int(k.max()) + 1))
    out: FloatArray = sd * _bisect_quantile(grid, np.ones_like(grid), p)[k]
    return out


def stage2_noise_stds(result: Result, plan: ProtocolPlan) -> tuple[FloatArray, FloatArray]:
    """Return the total noise std of ``"dispersion"`` and ``"q"`` at the result's broadcast.

    The plan scales the stage-2 sigmas by :meth:`ProtocolPlan.stage2_factors` of the public
    broadcast ``(clip(mu', 0, 1), mu_bar')``, per coordinate: shape ``(d,)`` or
    ``(repeats, d)``.
    """
    factors = plan.stage2_factors((result.mu_prime_broadcast, result.weighted_mean))
    s3 = np.asarray(plan.noise_std("dispersion") * factors["dispersion"], dtype=np.float64)
    s4 = np.asarray(plan.noise_std("q") * factors["q"], dtype=np.float64)
    return s3, s4


def summed_i_squared(q_sum: npt.ArrayLike, n: int, d: int) -> FloatArray:
    """Return ``max(0, 1 - (n - 1) d / sum_j Q_j)``, the ``I^2`` of the summed Q."""
    return i_squared(q_sum, n, d)


def noise_confidence_intervals(
    result: Result, plan: ProtocolPlan, *, level: float = 0.95
) -> Intervals:
    """Intervals built from the public noise distribution (coverage >= ``level``).

    Only public quantities are used (the plan's sigmas, ``n``, the released ``B'``). Each
    interval splits ``alpha = 1 - level`` into two tails of ``alpha/2``:

    - ``mean``: ``mu' +- z s_1/n`` (exact).
    - ``dispersion``: ``E = D'' - D = (mu - clip(mu'))^2 + N(0, s_3^2)/n`` and
      ``0 <= (mu - clip(mu'))^2 <= Y_1^2`` (clipping only shrinks the deviation), so
      ``D in [D'' - U, D'' + z s_3/n]`` with ``U`` the ``1 - alpha/2`` quantile of
      ``tau^2 chi^2_1 + N(0, (s_3/n)^2)``: coverage ``>= level`` exactly.
    - ``weighted_mean``: ``mu_bar' +- z sqrt(v)`` clipped to ``[0, 1]``, with the
      delta-method variance ``v = s_2^2 (1 + m^2)/B_lo^2`` made conservative by
      ``m = min(1, mu_bar' + z s_2 sqrt(2)/B_lo)`` and ``B_lo = max(B' - z s_2, n w_min)``.
    - ``q``: ``Q'' - Q = B (mu_bar - mu_bar')^2 + N(0, s_4^2)`` with
      ``B (mu_bar - mu_bar')^2 <~ (2 s_2^2/B_lo) chi^2_1`` (delta method, ``mu_bar <= 1``), so
      ``Q in [max(0, Q'' - U), Q'' + z s_4]`` with ``U`` the quantile of that sum.
    - ``i2``: the image of the ``Q`` interval under the monotone map
      ``Q -> max(0, 1 - (n-1)/Q)`` (built on ``I2''``; ``I2'''`` only adds noise, so it
      gets the same interval).
    - ``total_dispersion = sum_j D''_j``: as ``dispersion``, with
      ``sum_j (mu_j - clip(mu'_j))^2 <= tau^2 chi^2_d`` and noise std
      ``sqrt(sum_j s_3j^2)/n`` (``sqrt(d) s_3/n`` for a uniform ``s_3``).
    - Both dispersion intervals are then cut to the public range ``[0, 1/4]`` per
      coordinate (``[0, d/4]`` for the total): the true value lies there, so every interval
      that held it still does.
    - ``i2_total = max(0, 1 - (n-1) d/sum_j Q''_j)``: the image of the interval of
      ``sum_j Q_j``, whose lower side bounds ``B sum_j delta_j^2`` by
      ``(2 s_2^2/B_lo) chi^2_d`` (delta method) and the noise by ``sqrt(sum_j s_4j^2)``.

    With ``dispersion_center = "optimal"`` the error of ``D''`` gains
    ``(mu - a)^2 - (c - a)^2 = e^2 + 2 e (c - a)`` (``e = mu - c``, ``|e| <= tau |Y_1|``; a bound,
    not a variance term): the lower side adds ``2 |c - a| tau z'`` to the quantile of
    ``tau^2 chi^2_1 + N`` at ``1 - alpha/4`` (``z'`` the two-sided ``alpha/4`` quantile of
    ``|Y_1|``), the upper side adds ``min((c - a)^2, 2 |c - a| tau z')`` to the one-sided
    ``alpha/4`` bound of the noise; ``total_dispersion`` the same with Cauchy-Schwarz,
    ``|sum_j e_j (c_j - a_j)| <= tau ||Y_1||_2 ||c - a||_2``, on the ``chi^2_d`` event it
    already uses (its upper side splits ``alpha/2`` between that event and the noise).

    The scalars split each lower side's ``alpha/2`` between its two terms (union bound). The
    stage-2 scales ``s_3``, ``s_4`` are those at the result's public broadcast, per coordinate
    (:func:`stage2_noise_stds`; they differ between coordinates with
    ``noise_shape = "per_coordinate"``).

    Parameters
    ----------
    result : PrivateStatistics or BatchResult
        The private releases.
    plan : ProtocolPlan
        The calibrated protocol (the noise scales assume every share arrived; fewer shares
        mean less noise, so the intervals stay conservative).
    level : float, default 0.95
        Nominal coverage in ``(0, 1)``.

    Returns
    -------
    Intervals
        For ``"mean"``, ``"dispersion"``, ``"weighted_mean"``, ``"q"`` and ``"i2"``.
    """
    level = _check_level(level)
    alpha = 1.0 - level
    z = float(ndtri(1.0 - alpha / 2.0))
    n, d = plan.n, plan.d
    s1, s2 = plan.noise_std("mean"), plan.noise_std("weighted")
    s3, s4 = stage2_noise_stds(result, plan)  # at the public broadcast
    tau = s1 / n
    lower: dict[str, FloatArray] = {}
    upper: dict[str, FloatArray] = {}
    lower["mean"] = result.mean - z * tau
    upper["mean"] = result.mean + z * tau

    centred = plan.config.dispersion_center == "optimal"
    k = np.clip(result.mean, 0.0, 1.0) - result.mu_prime_broadcast  # c - a (0 at a = c)
    if centred:  # E = e^2 + 2 e (c - a) + N, |e| <= tau |Y|: union bound over Y and N
        z8 = float(ndtri(1.0 - alpha / 8.0))
        u_d = _quantile_chi2_plus_normal(np.asarray(tau**2), s3 / n, 1.0 - alpha / 4.0)
        lower["dispersion"] = result.dispersion - u_d - 2.0 * np.abs(k) * tau * z8
        below = np.minimum(k * k, 2.0 * np.abs(k) * tau * z8)  # e^2 + 2 e (c - a) >= -(c - a)^2
        upper["dispersion"] = result.dispersion + float(ndtri(1.0 - alpha / 4.0)) * s3 / n + below
    else:
        u_d = _quantile_chi2_plus_normal(np.asarray(tau**2), s3 / n, 1.0 - alpha / 2.0)
        lower["dispersion"] = result.dispersion - u_d
        upper["dispersion"] = result.dispersion + z * s3 / n

    b_lo = _b_lo(result, plan, z)
    b_lo_c = _leading(result, b_lo)
    m = np.minimum(1.0, result.weighted_mean + z * s2 * math.sqrt(2.0) / b_lo_c)
    half = z * s2 * np.sqrt(1.0 + m**2) / b_lo_c
    lower["weighted_mean"] = np.clip(result.weighted_mean - half, 0.0, 1.0)
    upper["weighted_mean"] = np.clip(result.weighted_mean + half, 0.0, 1.0)

    u_q = _quantile_chi2_plus_normal(2.0 * s2**2 / b_lo_c, s4, 1.0 - alpha / 2.0)
    q_lo = np.maximum(result.q - u_q, 0.0)
    q_hi = np.maximum(result.q + z * s4, 0.0)  # Q >= 0 is public
    lower["q"] = q_lo
    upper["q"] = q_hi

    lower["i2"] = i_squared(q_lo, n)  # the image under the monotone Q -> I^2
    upper["i2"] = i_squared(q_hi, n)
    if result.i2_extra is not None:  # I2''' only adds noise to I2''; Q'' bounds I^2 already
        lower["i2_extra"], upper["i2_extra"] = lower["i2"], upper["i2"]

    # Scalars: each lower side's alpha/2 is split between its two error terms (union bound).
    z4 = float(ndtri(1.0 - alpha / 4.0))
    chi2_d = float(chi2.ppf(1.0 - alpha / 4.0, d))
    sd_total = np.sqrt(np.sum(s3**2, axis=-1)) / n  # sqrt(d) s_3/n for a uniform s_3
    total = np.sum(result.dispersion, axis=-1)
    lower["total_dispersion"] = total - (tau**2 * chi2_d + z4 * sd_total)
    upper["total_dispersion"] = total + z * sd_total
    if centred:  # |sum_j e_j (c_j - a_j)| <= tau ||Y||_2 ||c - a||_2 (Cauchy-Schwarz)
        k2 = np.sqrt(np.sum(k * k, axis=-1))
        lower["total_dispersion"] -= 2.0 * tau * math.sqrt(chi2_d) * k2
        cross = np.minimum(k2 * k2, 2.0 * tau * math.sqrt(chi2_d) * k2)
        upper["total_dispersion"] = total + z4 * sd_total + cross
    # D in [0, 1/4] per coordinate is public (vectors in [0, 1]): cutting both ends to that
    # range keeps every D the interval held, so coverage is unchanged
    for name, top in (("dispersion", 0.25), ("total_dispersion", 0.25 * d)):
        lower[name] = np.clip(lower[name], 0.0, top)
        upper[name] = np.clip(upper[name], 0.0, top)
    q_sum_lo, q_sum_hi, _ = _q_sum_bounds(result, plan, s4, b_lo, alpha)
    lower["i2_total"] = summed_i_squared(q_sum_lo, n, d)
    upper["i2_total"] = summed_i_squared(q_sum_hi, n, d)
    derive(lower, n, "value")  # a derived statistic: the image of its source's interval
    derive(upper, n, "value")
    return Intervals(lower=lower, upper=upper, level=level, label=NOISE_CI_LABEL)


def _b_lo(result: Result, plan: ProtocolPlan, z: float) -> FloatArray:
    """``max(B' - z s_2, n w_min)``: a lower bound of ``B`` (shape ``()`` or ``(repeats,)``)."""
    b_rel = np.asarray(result.weighted_denominator, dtype=np.float64)
    out: FloatArray = np.maximum(b_rel - z * plan.noise_std("weighted"), plan.n * plan.min_weight)
    return out


def _q_sum_bounds(
    result: Result, plan: ProtocolPlan, s4: FloatArray, b_lo: FloatArray, alpha: float
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Bounds of ``sum_j Q_j`` and the bound of its upward bias ``B sum_j delta_j^2``.

    The lower side splits ``alpha/2`` between the bias (``(2 s_2^2/B_lo) chi^2_d``, delta
    method, ``mu_bar <= 1``) and the noise (sd ``sqrt(sum_j s_4j^2)``); the upper side is the
    noise's one-sided ``alpha/2`` bound (the bias only raises ``Q''``).
    """
    z = float(ndtri(1.0 - alpha / 2.0))
    z4 = float(ndtri(1.0 - alpha / 4.0))
    chi2_d = float(chi2.ppf(1.0 - alpha / 4.0, plan.d))
    q_sum = np.sum(result.q, axis=-1)
    bias = 2.0 * plan.noise_std("weighted") ** 2 / b_lo * chi2_d
    sd_q_sum = np.sqrt(np.sum(s4**2, axis=-1))
    low: FloatArray = np.maximum(q_sum - bias - z4 * sd_q_sum, 0.0)
    high: FloatArray = np.maximum(q_sum + z * sd_q_sum, 0.0)
    return low, high, np.asarray(bias, dtype=np.float64)


def summed_q_bounds(
    result: Result, plan: ProtocolPlan, *, level: float = 0.95
) -> tuple[FloatArray, FloatArray]:
    """Return the interval of ``sum_j Q_j`` whose image is the interval of ``i2_total``."""
    level = _check_level(level)
    alpha = 1.0 - level
    _, s4 = stage2_noise_stds(result, plan)
    b_lo = _b_lo(result, plan, float(ndtri(1.0 - alpha / 2.0)))
    low, high, _ = _q_sum_bounds(result, plan, s4, b_lo, alpha)
    return low, high


def i2_slope(q: npt.ArrayLike, n: int, d: int = 1) -> FloatArray:
    """Return ``(n - 1) d / max(Q, (n - 1) d)^2``: the slope of ``I^2`` at or above ``Q``.

    ``I^2 = max(0, 1 - (n - 1) d/Q)`` is flat below ``(n - 1) d`` and concave above it; this
    is the slope of ``1 - (n - 1) d/Q`` at ``max(Q, (n - 1) d)``, the largest slope of ``I^2``
    at or above ``Q``, and never 0: the delta method's factor from the noise of ``Q''`` (of
    ``sum_j Q''_j`` with ``d > 1``) to the noise of ``I^2``.
    """
    null = (n - 1) * d
    out: FloatArray = null / np.maximum(np.asarray(q, dtype=np.float64), null) ** 2
    return out


def average_intervals(result: Result, plan: ProtocolPlan, *, level: float = 0.95) -> Intervals:
    """Intervals of the coordinate averages ``mean_j X_j``, from the noise of the average.

    The number a report prints for a per-coordinate statistic is its coordinate average; its
    interval is that of the average itself, not the average of the coordinates' bounds (about
    ``sqrt(d)`` times wider where the noise is independent across coordinates). Only public
    quantities are used, as in :func:`noise_confidence_intervals` (two tails of
    ``alpha/2``), and each statistic gets the method of its per-coordinate interval, applied
    to the average:

    - ``mean``: ``mean_j mu'_j +- z tau/sqrt(d)``: exact, the noise of the average is
      ``N(0, tau^2/d)``.
    - ``dispersion``: the interval of ``total_dispersion`` over ``d`` (the ``tau^2 chi^2_d``
      bound of the broadcast's error, the noise sd ``sqrt(sum_j s_3j^2)/(n d)``, with the
      optimal centre its Cauchy-Schwarz term): a valid bound.
    - ``weighted_mean``: ``mean_j mu_bar'_j +- z sqrt(v)`` cut to ``[0, 1]``, delta method
      with ``v = s_2^2 (1/d + m^2)/B_lo^2`` (the noise of ``A'`` averages out; that of ``B'``
      is shared by every coordinate and does not), ``m`` and ``B_lo`` as per coordinate.
    - ``q``: the interval of ``sum_j Q_j`` over ``d`` (bias ``(2 s_2^2/B_lo) chi^2_d``, delta
      method; noise sd ``sqrt(sum_j s_4j^2)``), as ``i2_total`` uses.
    - ``i2`` (and ``i2_extra``, whose extra noise does not move the truth): delta method on
      ``I2''_j = g(Q''_j)``, ``g(Q) = max(0, 1 - (n - 1)/Q)``, each coordinate's slope ``h_j``
      the largest slope of ``g`` over its own ``Q`` interval (:func:`i2_slope` at the
      interval's lower end: conservative where ``g`` is concave):
      ``[mean - max_j h_j b/d - z' sd, mean + z sd]`` cut to ``[0, 1]``, with
      ``sd = sqrt(sum_j h_j^2 s_4j^2)/d``, ``b`` the bias bound of ``sum_j Q''_j`` and the lower
      side's ``alpha/2`` split between bias and noise (``z'`` at ``alpha/4``).

    Parameters
    ----------
    result : PrivateStatistics or BatchResult
        The private releases.
    plan : ProtocolPlan
        The calibrated protocol.
    level : float, default 0.95
        Nominal coverage in ``(0, 1)``.

    Returns
    -------
    Intervals
        Bounds of shape ``()`` (``(repeats,)`` for a batch) for each statistic.
    """
    level = _check_level(level)
    alpha = 1.0 - level
    z = float(ndtri(1.0 - alpha / 2.0))
    z4 = float(ndtri(1.0 - alpha / 4.0))
    n, d = plan.n, plan.d
    per = noise_confidence_intervals(result, plan, level=level)
    s2 = plan.noise_std("weighted")
    _, s4 = stage2_noise_stds(result, plan)
    tau = plan.noise_std("mean") / n
    lower: dict[str, FloatArray] = {}
    upper: dict[str, FloatArray] = {}
    mean = np.mean(result.mean, axis=-1)
    lower["mean"] = mean - z * tau / math.sqrt(d)
    upper["mean"] = mean + z * tau / math.sqrt(d)
    lower["dispersion"] = per.lower["total_dispersion"] / d
    upper["dispersion"] = per.upper["total_dispersion"] / d
    b_lo = _b_lo(result, plan, z)
    wm = np.mean(result.weighted_mean, axis=-1)
    m = np.minimum(1.0, wm + z * s2 * math.sqrt(2.0) / b_lo)
    half = z * s2 * np.sqrt(1.0 / d + m**2) / b_lo
    lower["weighted_mean"] = np.clip(wm - half, 0.0, 1.0)
    upper["weighted_mean"] = np.clip(wm + half, 0.0, 1.0)
    q_sum_lo, q_sum_hi, bias = _q_sum_bounds(result, plan, s4, b_lo, alpha)
    lower["q"], upper["q"] = q_sum_lo / d, q_sum_hi / d
    i2 = np.mean(result.i2, axis=-1)
    h = i2_slope(per.lower["q"], n)
    sd_i2 = np.sqrt(np.sum((h * s4) ** 2, axis=-1)) / d
    lower["i2"] = np.clip(i2 - np.max(h, axis=-1) * bias / d - z4 * sd_i2, 0.0, 1.0)
    upper["i2"] = np.clip(i2 + z * sd_i2, 0.0, 1.0)
    if result.i2_extra is not None:  # I2''' only adds noise to I2''; Q'' bounds I^2 already
        lower["i2_extra"], upper["i2_extra"] = lower["i2"], upper["i2"]
    derive(lower, n, "value")  # affine: the average's interval maps like the coordinates'
    derive(upper, n, "value")
    return Intervals(lower=lower, upper=upper, level=level, label=AVERAGE_CI_LABEL)


def average_coverage(intervals: Intervals, truth: TrueStatistics) -> dict[str, float]:
    """Return the fraction of repeats whose average interval holds the true average.

    Parameters
    ----------
    intervals : Intervals
        From :func:`average_intervals`.
    truth : TrueStatistics
        The exact statistics (their coordinate averages are the truth).

    Returns
    -------
    dict[str, float]
        Coverage by statistic name.
    """
    return _coverage(intervals, truth, average=True)
