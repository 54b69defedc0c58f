"""Error metrics of Section 4: EMSE, analytic expected MSE and the paper's TMSE.

- **EMSE** (:func:`emse`, :func:`squared_error`, :func:`batch_emse`): Monte-Carlo mean over
  repeats of the coordinate mean of ``(private - true)^2``. The paper's CMSE is the EMSE of a
  run with ``placement="central"``.
- **Expected MSE** (:func:`expected_mse`): the analytic ``E[(private - true)^2]`` of the
  protocol of :mod:`fa_hetdp.protocol`, per coordinate and coordinate-averaged. Exact for
  ``mu'`` and ``D''`` (including the clipping of the broadcast ``mu'``); for the ratio
  ``mu_bar' = A'/B'`` exact given the noise of ``B'`` and integrated over it by quadrature
  (a refined delta method), hence for ``Q''``; ``I2''`` by numerical quadrature.
- **Paper TMSE** (:func:`paper_tmse`): the paper's Cor. 3.4, 3.5, 3.10, 3.11 (and the ``I^2``
  corollary, ``cor:msenoisyisquared``) evaluated on the realised noise, *as written*. They are
  wrong (Cor. 3.11 averages per-client terms where the error of ``Q''`` is their sum, so it
  misses by orders of magnitude); they are kept, labelled, to reproduce the paper's tables.
- **Confidence intervals** live in :mod:`fa_hetdp.protocol.intervals`.

The statistics are those of :data:`fa_hetdp.registry.STATISTICS`. Theorem numbers are
the paper's (see ``docs/design.md``); where they may be ambiguous the LaTeX label is given
too.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt
from scipy.special import ndtr

from fa_hetdp._types import FloatArray
from fa_hetdp.errors import InputDataError
from fa_hetdp.protocol.bounds import coordinate_bounds, expected_square_factor
from fa_hetdp.protocol.center import ITERATIONS, center_given_total, center_scales
from fa_hetdp.protocol.plan import ProtocolPlan
from fa_hetdp.protocol.server import PrivateStatistics
from fa_hetdp.protocol.simulate import BatchResult
from fa_hetdp.registry import STATISTICS, derive, value_of
from fa_hetdp.stats.exact import (
    TrueStatistics,
    coordinate_averages,
    i_squared,
    validate_clients,
)

__all__ = [
    "ExpectedMSE",
    "PaperTMSE",
    "batch_emse",
    "centred_dispersion_moments",
    "clipped_gaussian_moment",
    "emse",
    "expected_mse",
    "paper_tmse",
    "squared_error",
]

PAPER_TMSE_LABEL: Final = (
    "paper TMSE (Cor. 3.4, 3.5, 3.10, 3.11 and cor:msenoisyisquared as written): not the "
    "expected MSE of the estimators (wrong for Q by orders of magnitude)"
)

_Z_CLIP: Final = 40.0  # phi(40) underflows to 0, so z^k phi(z) -> 0 without inf * 0
_GH_B: Final = 24
_GH_Y: Final = 32
_GH_Z: Final = 32

Result = PrivateStatistics | BatchResult


# --------------------------------------------------------------------------- EMSE


def squared_error(private: npt.ArrayLike, true: npt.ArrayLike) -> FloatArray:
    """Coordinate mean of ``(private - true)^2`` for each repeat.

    Parameters
    ----------
    private : array_like, shape (d,) or (repeats, d)
        Private estimates.
    true : array_like, shape (d,)
        The true statistic.

    Returns
    -------
    FloatArray, shape () or (repeats,)
        Mean over the last axis of the squared error.
    """
    p = np.asarray(private, dtype=np.float64)
    t = np.asarray(true, dtype=np.float64)
    if p.shape[-1:] != t.shape[-1:] or t.ndim != 1:
        raise InputDataError(
            f"private has shape {p.shape} and true has shape {t.shape}; expected (..., d) and (d,)."
        )
    return np.asarray(np.mean((p - t) ** 2, axis=-1), dtype=np.float64)


def emse(private: npt.ArrayLike, true: npt.ArrayLike) -> float:
    """Empirical MSE: mean over repeats of the coordinate-mean squared error (Section 4).

    Parameters
    ----------
    private : array_like, shape (d,) or (repeats, d)
        Private estimates (one row per repeat).
    true : array_like, shape (d,)
        The true statistic.

    Returns
    -------
    float
        The EMSE (the CMSE when ``private`` comes from central placement).
    """
    return float(np.mean(squared_error(private, true)))


def batch_emse(result: BatchResult) -> dict[str, float]:
    """EMSE of every statistic of a batch against its truth.

    ``I2'''`` is compared with the true ``I^2``.

    Parameters
    ----------
    result : BatchResult
        From :func:`~fa_hetdp.protocol.private_statistics_batch`.

    Returns
    -------
    dict[str, float]
        Keys from :data:`~fa_hetdp.registry.STATISTICS` (optional ones only when
        present), each against its ``truth`` statistic.
    """
    out: dict[str, float] = {}
    for spec in STATISTICS:
        estimates = value_of(result, spec.key)
        if estimates is not None:
            out[spec.key] = emse(estimates, value_of(result.truth, spec.truth))
    return out


# --------------------------------------------------------------------------- expected MSE


def _phi(z: FloatArray) -> FloatArray:
    return np.asarray(np.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi), dtype=np.float64)


def clipped_gaussian_moment(
    center: npt.ArrayLike,
    scale: npt.ArrayLike,
    k: int,
    *,
    location: npt.ArrayLike | None = None,
) -> FloatArray:
    """``E[(clip(m + Y, 0, 1) - c)^k]`` for ``Y ~ N(0, scale^2)``, ``k`` in {1, 2, 3, 4}.

    ``c = center`` and ``m = location`` (default ``m = c``). Exact, from the Gaussian partial
    moments ``I_j(a, b) = int_a^b z^j phi(z) dz`` (``I_0 = Phi(b) - Phi(a)``,
    ``I_1 = phi(a) - phi(b)``, ``I_j = a^{j-1} phi(a) - b^{j-1} phi(b) + (j-1) I_{j-2}``)::

        E = sum_j C(k, j) (m - c)^{k-j} scale^j I_j(a, b)
            + (-c)^k Phi(a) + (1 - c)^k (1 - Phi(b)),   a = -m/scale, b = (1-m)/scale

    Parameters
    ----------
    center : array_like
        ``c``, the value the error is measured from (the true statistic).
    scale : array_like
        Noise standard deviation, ``>= 0``.
    k : int
        Moment order, 1 to 4.
    location : array_like, optional
        ``m``, the mean of the unclipped estimate (default: ``center``, i.e. unbiased).

    Returns
    -------
    FloatArray
        The moment, shape of the broadcast inputs.
    """
    if k not in (1, 2, 3, 4):
        raise InputDataError(f"moment order k must be 1, 2, 3 or 4, got k={k!r}.")
    c = np.asarray(center, dtype=np.float64)
    m = c if location is None else np.asarray(location, dtype=np.float64)
    c, m, s = np.broadcast_arrays(c, m, np.asarray(scale, dtype=np.float64))
    positive = s > 0.0
    s_safe = np.where(positive, s, 1.0)
    a = np.clip(-m / s_safe, -_Z_CLIP, _Z_CLIP)
    b = np.clip((1.0 - m) / s_safe, -_Z_CLIP, _Z_CLIP)
    pa, pb = _phi(a), _phi(b)
    partial = [ndtr(b) - ndtr(a), pa - pb]  # I_0, I_1
    for j in range(2, k + 1):
        partial.append(a ** (j - 1) * pa - b ** (j - 1) * pb + (j - 1) * partial[j - 2])
    shift = m - c
    inside = sum(math.comb(k, j) * shift ** (k - j) * s_safe**j * partial[j] for j in range(k + 1))
    tails = (-c) ** k * ndtr(a) + (1.0 - c) ** k * ndtr(-b)
    clipped = np.clip(m, 0.0, 1.0) - c  # scale 0: no noise
    return np.asarray(np.where(positive, inside + tails, clipped**k), dtype=np.float64)


def _ratio_nodes(
    truth: TrueStatistics, plan: ProtocolPlan, sigma_weighted: float
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Gauss-Hermite model of ``mu_bar' = clip(A'/max(B', n w_min), 0, 1)``.

    Given the noise ``b`` on ``B``, ``A'/B~`` is exactly Gaussian with mean ``B mu_bar/B~`` and
    std ``s_2/B~`` (``B~ = max(B + b, n w_min)``); ``b ~ N(0, s_2^2)`` is integrated by
    Gauss-Hermite quadrature. Returns (weights (k,), locations (k, d), scales (k,)).
    """
    nodes, weights = np.polynomial.hermite_e.hermegauss(_GH_B)
    weights = weights / weights.sum()
    b = truth.weight_sum
    b_used = np.maximum(b + sigma_weighted * nodes, truth.n * plan.min_weight)
    locations = (b * truth.weighted_mean)[None, :] / b_used[:, None]
    return weights, locations, sigma_weighted / b_used


def _ratio_moment(
    truth: TrueStatistics, plan: ProtocolPlan, sigma_weighted: float, k: int
) -> FloatArray:
    """``E[(mu_bar' - mu_bar)^k]`` per coordinate (quadrature over the noise of ``B'``)."""
    weights, locations, scales = _ratio_nodes(truth, plan, sigma_weighted)
    moments = clipped_gaussian_moment(
        truth.weighted_mean[None, :], scales[:, None], k, location=locations
    )
    return np.asarray(weights @ moments, dtype=np.float64)


@dataclass(frozen=True)
class ExpectedMSE:
    """Analytic expected MSE of each private statistic.

    Attributes
    ----------
    mean, dispersion, weighted_mean, q, i2 : float
        Coordinate averages of ``E[(private - true)^2]``.
    i2_extra : float or None
        Same for ``I2'''`` against ``I^2`` (None when the plan has no extra noise).
    per_coordinate : Mapping[str, FloatArray]
        The per-coordinate values (keys as the attributes).
    method : Mapping[str, str]
        How each was obtained ("exact", "delta method", ...).
    """

    mean: float
    dispersion: float
    weighted_mean: float
    q: float
    i2: float
    i2_extra: float | None
    per_coordinate: Mapping[str, FloatArray]
    method: Mapping[str, str]

    def as_dict(self) -> dict[str, float]:
        """Coordinate-averaged values by statistic name (the registry's order)."""
        out: dict[str, float] = {}
        for spec in STATISTICS:
            if spec.derivation is not None:  # from its source's, in expected_mse
                if spec.key in self.per_coordinate:
                    out[spec.key] = float(np.mean(self.per_coordinate[spec.key]))
                continue
            value: float | None = getattr(self, spec.key)
            if value is not None:
                out[spec.key] = value
        return out


def _noise_scale(plan: ProtocolPlan, name: str, noise_shares: int | None) -> float:
    """Std of the total noise in release ``name`` given how many shares arrived."""
    if plan.config.placement == "central" or noise_shares is None:
        return plan.noise_std(name)
    return plan.sigma(name) * math.sqrt(noise_shares / plan.t)


def _i2_quadrature(
    truth: TrueStatistics, plan: ProtocolPlan, sigma_weighted: float, sigma_q: FloatArray
) -> FloatArray:
    """``E[(I2'' - I^2)^2]`` per coordinate by 3-D Gauss-Hermite quadrature.

    ``Q'' = Q + B (mu_bar' - mu_bar)^2 + sigma_4 Z`` with ``mu_bar'`` modelled as in
    :func:`_ratio_nodes` (noise of ``B'``, then Gaussian ``A'/B~``, clipped) and
    ``Z ~ N(0, 1)``; ``I2'' = max(0, 1 - (n-1)/Q'')``; ``sigma_4`` per coordinate.
    """
    n = truth.n
    s4 = np.broadcast_to(np.asarray(sigma_q, dtype=np.float64), (truth.d,))
    bw, locations, scales = _ratio_nodes(truth, plan, sigma_weighted)
    y_nodes, y_w = np.polynomial.hermite_e.hermegauss(_GH_Y)
    z_nodes, z_w = np.polynomial.hermite_e.hermegauss(_GH_Z)
    y_w = y_w / y_w.sum()
    z_w = z_w / z_w.sum()
    b = truth.weight_sum
    out = np.zeros(truth.d)
    chunk = 64
    for start in range(0, truth.d, chunk):
        sl = slice(start, start + chunk)
        mb = truth.weighted_mean[sl]
        acc = np.zeros(mb.shape[0])
        for j in range(bw.shape[0]):
            est = np.clip(locations[j, sl, None] + scales[j] * y_nodes, 0.0, 1.0)  # (c, Y)
            q_y = truth.q[sl, None] + b * (est - mb[:, None]) ** 2
            q_all = q_y[:, :, None] + s4[sl, None, None] * z_nodes  # (c, Y, Z)
            err = (i_squared(q_all, n) - truth.i2[sl, None, None]) ** 2
            acc += bw[j] * np.einsum("cyz,y,z->c", err, y_w, z_w)
        out[sl] = acc
    return out


def expected_mse(
    truth: TrueStatistics, plan: ProtocolPlan, *, noise_shares: int | None = None
) -> ExpectedMSE:
    """Analytic ``E[(private - true)^2]`` of every statistic (``docs/design.md``, error metrics).

    With ``tau = s_1/n`` (``s_k`` the total noise std of release ``k``:
    :meth:`ProtocolPlan.noise_std`, the same for both placements when ``t = n``):

    - ``mu'`` (exact): ``tau^2``.
    - ``D''`` (exact): ``D'' - D = (mu - clip(mu'))^2 + N(0, s_3^2)/n`` because
      ``sum (x_i - mu) = 0``, so ``E = E[(clip(mu + Y) - mu)^4] + (s_3/n)^2`` with
      ``Y ~ N(0, tau^2)`` (Gaussian partial moments, :func:`clipped_gaussian_moment`); without
      clipping this is ``3 tau^4 + (s_3/n)^2``.
    - ``mu_bar'``: given the noise ``b`` on ``B``, ``A'/B~`` (``B~ = max(B + b, n w_min)``,
      the released clamp) is exactly ``N(B mu_bar/B~, (s_2/B~)^2)``; its clipping to
      ``[0, 1]`` is applied exactly and ``b ~ N(0, s_2^2)`` is integrated by Gauss-Hermite
      quadrature -- exact up to quadrature (the first-order delta method
      ``v = s_2^2 (1 + mu_bar^2)/B^2`` misses ``O(s_2^2/B^2)`` relative terms, ~6 % at
      ``s_2/B = 0.08`` for the fourth moment, which is why it is not used).
    - ``Q''``: ``Q'' - Q = B (mu_bar' - mu_bar)^2 + N(0, s_4^2)`` because
      ``sum w_i (x_i - mu_bar) = 0``, so ``E = B^2 E[(mu_bar' - mu_bar)^4] + s_4^2`` with the
      fourth moment computed as for ``mu_bar'``.
    - ``I2''``: ``E[(max(0, 1 - (n-1)/Q'') - I^2)^2]`` by 3-D Gauss-Hermite quadrature over
      the same model of ``Q''`` (not a Taylor expansion: ``I^2`` has a kink at
      ``Q = n - 1``). ``I2'''``: that plus ``s_5^2`` (independent noise).

    Parameters
    ----------
    truth : TrueStatistics
        The exact statistics of the data.
    plan : ProtocolPlan
        The calibrated protocol.
    noise_shares : int or None
        Shares that arrived in each sum (distributed placement); None: all ``n``.

    Returns
    -------
    ExpectedMSE
        Coordinate-averaged and per-coordinate expected MSE with the method of each.
    """
    n = truth.n
    if truth.d != plan.d:
        raise InputDataError(f"truth has d={truth.d} but the plan has d={plan.d}.")
    s1 = _noise_scale(plan, "mean", noise_shares)
    s2 = _noise_scale(plan, "weighted", noise_shares)
    s3 = _noise_scale(plan, "dispersion", noise_shares)
    s4 = _noise_scale(plan, "q", noise_shares)
    # The stage-2 noise follows the public broadcast (ProtocolPlan.stage2_factors); plug-in
    # at the broadcast's noiseless value (clip(mu), mu_bar).
    f = plan.stage2_factors((np.clip(truth.mean, 0.0, 1.0), truth.weighted_mean))
    s3_j, s4_j = s3 * f["dispersion"], s4 * f["q"]  # per coordinate, shape (d,)
    variance = plan.mechanism.variance  # noise variance per coordinate of a given scale
    tau = s1 / n
    per: dict[str, FloatArray] = {}
    # Cor. 3.4 corrected: Var(Y_1) = Var(noise_1)/n^2.
    per["mean"] = np.full(truth.d, variance(s1) / n**2)
    # Cor. 3.5 corrected: D'' - D = (mu - clip(mu'))^2 + noise_3/n.
    per["dispersion"] = clipped_gaussian_moment(truth.mean, tau, 4) + variance(s3_j) / n**2
    centred = plan.config.dispersion_center == "optimal" and s3 > 0.0
    if centred:  # the correction's error and the centre's factors (integrated over mu')
        sd1 = math.sqrt(float(variance(s1))) / n
        _, e2, f2 = centred_dispersion_moments(plan, truth.mean, tau=sd1, nodes=_GH_Y)
        per["dispersion"] = e2 + float(variance(s3)) * f2 / n**2
    # Lemma 3.7: mu_bar' = clip(A'/max(B', n w_min)); quadrature over the noise of B'.
    per["weighted_mean"] = _ratio_moment(truth, plan, s2, 2)
    # Cor. 3.11 corrected: Q'' - Q = B (mu_bar' - mu_bar)^2 + N(0, s_4^2).
    b = truth.weight_sum
    per["q"] = b**2 * _ratio_moment(truth, plan, s2, 4) + variance(s4_j)
    per["i2"] = _i2_quadrature(truth, plan, s2, s4_j)
    method = {
        "mean": "exact",
        "dispersion": "exact (incl. clipping of the broadcast mu')"
        + ("; optimal centre by quadrature over mu'" if centred else ""),
        "weighted_mean": "exact given B' (Gaussian A'/B', clipped); quadrature over B' noise",
        "q": "as weighted_mean for (mu_bar' - mu_bar)^4, rest exact",
        "i2": "3-D Gauss-Hermite quadrature (B' noise, A' noise, Q noise)",
    }
    i2_extra: float | None = None
    if plan.config.extra_i2_noise:
        per["i2_extra"] = per["i2"] + variance(plan.sigma_i2)
        method["i2_extra"] = method["i2"] + " + sigma_5^2"
        i2_extra = float(np.mean(per["i2_extra"]))
    derive(per, n, "mse")  # a derived statistic: slope^2 times its source's
    for spec in STATISTICS:
        if spec.derivation is not None and spec.key in per:
            method[spec.key] = f"{method[spec.derivation.source]}, times the slope squared"
    return ExpectedMSE(
        mean=float(np.mean(per["mean"])),
        dispersion=float(np.mean(per["dispersion"])),
        weighted_mean=float(np.mean(per["weighted_mean"])),
        q=float(np.mean(per["q"])),
        i2=float(np.mean(per["i2"])),
        i2_extra=i2_extra,
        per_coordinate=per,
        method=method,
    )


def centred_dispersion_moments(
    plan: ProtocolPlan, m: npt.ArrayLike, *, tau: float, nodes: int
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """``E[e]``, ``E[e^2]`` and ``E[f_j^2]`` (each (d,)) of ``D''`` at the optimal centre.

    ``e = (m - a)^2 - (c - a)^2`` (the correction's error; ``(m - c)^2`` at ``a = c``) with
    ``c = clip(m + tau Y)`` (``tau`` the sd of the noise of ``mu'`` that arrived) and ``a``
    the server's centre of ``c`` at the plan's scales
    (:func:`~fa_hetdp.protocol.center.center_scales`), ``S = sum_i b_i`` held at its expected
    fixed point (:func:`~fa_hetdp.protocol.center.center_given_total`); by Gauss-Hermite
    quadrature over ``Y`` (``nodes`` nodes). ``f_j^2``, the squared stage-2 factor, from the
    moments of ``b = max(a, 1 - a)^2`` (:func:`~fa_hetdp.protocol.bounds.expected_square_factor`).
    """
    y, py = np.polynomial.hermite_e.hermegauss(nodes)
    py = py / py.sum()
    mean = np.asarray(m, dtype=np.float64)
    shape = plan.config.noise_shape
    c = np.clip(mean[None, :] + tau * y[:, None], 0.0, 1.0)  # (Y, d)
    b = coordinate_bounds(c)
    a = c
    planned_tau, noise = center_scales(plan)
    for _ in range(ITERATIONS if shape == "per_coordinate" else 1):
        total = float(np.sum(py @ b))
        a = center_given_total(c, total, tau=planned_tau, noise=noise, shape=shape)
        b = coordinate_bounds(a)
    err = (mean[None, :] - a) ** 2 - (c - a) ** 2
    f2 = expected_square_factor(py @ b, py @ (b * b), shape=shape)
    return py @ err, py @ (err * err), f2


# --------------------------------------------------------------------------- paper TMSE


@dataclass(frozen=True)
class PaperTMSE:
    """The paper's TMSE on the realised noise, coordinate-averaged (one value per repeat).

    Attributes
    ----------
    mean, dispersion, weighted_mean, q, i2 : FloatArray, shape () or (repeats,)
        Cor. 3.4 (``cor:msemean``), Cor. 3.5 (``cor:msedisp``), Cor. 3.10
        (``cor:msewmean``), Cor. 3.11 (``cor:msenoisyq``) and ``cor:msenoisyisquared``.
    label : str
        States that these are the paper's formulas, not expected errors.
    """

    mean: FloatArray
    dispersion: FloatArray
    weighted_mean: FloatArray
    q: FloatArray
    i2: FloatArray
    label: str = PAPER_TMSE_LABEL

    def averages(self) -> dict[str, float]:
        """Monte-Carlo means over repeats (the paper's TMSE columns)."""
        return coordinate_averages(self)


def paper_tmse(x: npt.ArrayLike, result: Result, truth: TrueStatistics) -> PaperTMSE:
    """Evaluate the paper's TMSE formulas on the realised noise, as written.

    The realised noises are recovered from the releases and the truth:
    ``Y_1 = mu' - mu``; ``Y_2 = D'' - D - (mu - clip(mu'))^2`` (the noise added to ``D''``);
    ``Z_1 = mu_bar' - mu_bar``; ``Z_2 = Q'' - Q - B (mu_bar - mu_bar')^2``;
    ``Z_3 = I2''' - I2''`` (0 without the extra noise). Then, per coordinate:

    - Cor. 3.4: ``Y_1^2``; Cor. 3.10: ``Z_1^2``;
    - Cor. 3.5: ``(1/n) sum_i [Y_1 (Y_1 - 2 (x_i - mu)) + Y_2]^2 = (Y_1^2 + Y_2)^2 + 4 Y_1^2 D``;
    - Cor. 3.11: ``(1/n) sum_i [w_i Z_1 (Z_1 - 2 (x_i - mu_bar)) + Z_2]^2`` (expanded with the
      sums ``sum w_i^2``, ``sum w_i^2 (x_i - mu_bar)``, ``sum w_i^2 (x_i - mu_bar)^2``);
    - ``cor:msenoisyisquared``: ``(1/n) [Z_3 - (n-1)/Q'' + (n-1)/Q]^2`` with the paper's
      convention ``Q := max(Q, n - 1)`` for both ``Q`` and ``Q''``.

    Parameters
    ----------
    x : array_like, shape (n, d)
        The client data (needed by Cor. 3.11's per-client terms).
    result : PrivateStatistics or BatchResult
        The private releases.
    truth : TrueStatistics
        The exact statistics of ``x``.

    Returns
    -------
    PaperTMSE
        Coordinate-averaged values per repeat, labelled.
    """
    values, _ = validate_clients(x)
    n = truth.n
    if values.shape != (truth.n, truth.d):
        raise InputDataError(
            f"x has shape {values.shape} but the truth is for (n, d) = ({truth.n}, {truth.d})."
        )
    w = truth.weights
    b = truth.weight_sum
    u = values - truth.weighted_mean
    sw2 = float(np.sum(w**2))
    sw2u = np.einsum("i,ij->j", w**2, u)
    sw2u2 = np.einsum("i,ij->j", w**2, u**2)
    del values, u

    y1 = result.mean - truth.mean
    y2 = result.dispersion - truth.dispersion - (truth.mean - np.clip(result.mean, 0.0, 1.0)) ** 2
    z1 = result.weighted_mean - truth.weighted_mean
    z2 = result.q - truth.q - b * z1**2
    z3 = np.zeros_like(result.i2) if result.i2_extra is None else result.i2_extra - result.i2
    tmse_mean = y1**2  # Cor. 3.4: MSE(mu') = Y_1^2
    tmse_disp = (y1**2 + y2) ** 2 + 4.0 * y1**2 * truth.dispersion  # Cor. 3.5 expanded
    tmse_wmean = z1**2  # Cor. 3.10: MSE(mu_bar') = Z_1^2
    # Cor. 3.11: (1/n) sum_i [w_i Z_1 (Z_1 - 2 u_i) + Z_2]^2, with sum w_i u_i = 0.
    tmse_q = (
        z1**4 * sw2 - 4.0 * z1**3 * sw2u + 4.0 * z1**2 * sw2u2 + 2.0 * z2 * z1**2 * b + n * z2**2
    ) / n
    q_true = np.maximum(truth.q, n - 1)  # the paper: "if Q < n-1, we assume Q = n-1"
    q_priv = np.maximum(result.q, n - 1)
    tmse_i2 = (z3 - (n - 1) / q_priv + (n - 1) / q_true) ** 2 / n  # cor:msenoisyisquared
    return PaperTMSE(
        mean=np.asarray(np.mean(tmse_mean, axis=-1)),
        dispersion=np.asarray(np.mean(tmse_disp, axis=-1)),
        weighted_mean=np.asarray(np.mean(tmse_wmean, axis=-1)),
        q=np.asarray(np.mean(tmse_q, axis=-1)),
        i2=np.asarray(np.mean(tmse_i2, axis=-1)),
    )
