"""Inference of the private meta-analysis: two kinds of interval, standard errors, prediction.

A private figure ``x~`` differs from the population value ``x`` by two errors: the sampling
error of the exact figure ``x^`` on these records (the silos are a sample of silos, their
records of records) and the privacy noise ``x~ - x^``. Two intervals follow
(docs/design.md, 4.1, "Two kinds of interval"):

- ``target="sample"`` covers ``x^`` -- the privacy noise only: a seeded parametric bootstrap of
  the known noise through the design's estimator (:func:`noise_errors`; secure sums redraw the
  released sums through :func:`~fa_hetdp.protocol.meta_server.figures_from_sums`, silo
  summaries every silo's release through
  :func:`~fa_hetdp.protocol.silo_summaries.silo_figures`);
- ``target="population"`` covers ``x`` -- sampling error *and* privacy noise. The noise is
  drawn independently of the data, so (law of total variance) the two errors add in variance:
  the means' intervals are ``x~ +- z sqrt(SE_s^2 + SE_n^2)`` (:data:`NOISE_METHODS`:
  ``"quadrature"``; ``"bootstrap"`` takes the quantiles of the noise draws convolved with the
  normal sampling error instead; measured in benchmarks/meta_inference_bench.py), ``SE_s`` the
  classical standard error at the private weights and ``SE_n`` the standard deviation of the
  noise draws. ``tau2``: where the design has per-silo estimates (silo summaries) the
  Q-profile interval of the noisy silo means with each silo's noise variance added to its
  sampling variance (the noisy mean is the true one plus independent known noise); the secure
  sums have only sums, so ``Q``'s distribution is matched to a scaled chi-square with
  Biggerstaff-Tweedie's moments and convolved with the noise of ``Q`` (normal, its variance from
  the noise draws), and ``tau2``'s interval inverts it (the Q-profile's logic on sums). ``I^2``
  is the image of ``tau2``'s (:func:`~fa_hetdp.stats.meta.i2_from_tau2`); ``q`` and
  ``i2_total`` are sample statistics and have none.

Everything here is post-processing of the released values and public counts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import numpy as np
from scipy.special import gammainc
from scipy.stats import norm

from fa_hetdp._types import FloatArray
from fa_hetdp.errors import AggregationError, PrivacyParameterError
from fa_hetdp.protocol.meta_client import pooled_variance
from fa_hetdp.protocol.meta_server import (
    _denoised,
    _weight_range,
    clip_correction,
    clip_scatter_b,
    figures_from_sums,
    plug_in_weights,
)
from fa_hetdp.protocol.silo_summaries import UNKNOWN_VARIANCE_CV, SiloPlan, silo_noise_errors
from fa_hetdp.stats.meta import (
    NO_POPULATION_INTERVAL,
    MetaIntervals,
    PredictionInterval,
    check_target,
    dl_tau2_variance,
    i2_from_q,
    i2_from_tau2,
    prediction_bounds,
    q_profile,
)

if TYPE_CHECKING:
    from fa_hetdp.protocol.meta_server import PrivateMetaAnalysis

__all__ = [
    "NOISE_METHODS",
    "intervals_from_errors",
    "meta_intervals",
    "noise_errors",
    "population_intervals",
    "prediction_interval",
    "sampling_parts",
    "secure_sums_noise_errors",
    "standard_errors",
]

NOISE_METHODS: Final[tuple[str, ...]] = ("quadrature", "bootstrap")
"""How the privacy noise enters a population interval of a mean (module docstring); the first
is the default, chosen by the coverage measured in benchmarks/meta_inference_bench.py."""

SAMPLE_METHOD: Final = (
    "privacy noise only: a seeded parametric bootstrap of the known noise through the "
    "estimator (the interval of the exact value on these records)"
)


def check_level(level: float) -> float:
    """Return ``level`` in (0, 1) (:class:`PrivacyParameterError` otherwise, as before)."""
    if not 0.0 < float(level) < 1.0:
        raise PrivacyParameterError(f"level must be in (0, 1), got level={level!r}.")
    return float(level)


def secure_sums_noise_errors(
    result: PrivateMetaAnalysis, draws: int, seed: int
) -> tuple[dict[str, FloatArray], dict[str, FloatArray]]:
    """Return the point figures and ``draws`` noise errors (redrawn minus point), secure sums.

    The released sums are redrawn with the plan's noise around the noisy values (and the
    realised clipped mass around the clip model's mean), the figures recomputed by
    :func:`figures_from_sums`. Conditional on the broadcasts (centre, floor, clip, round-C
    ``tau2``): the bias of a binding clip or floor is not in them.
    """
    if result.broadcast_b is None:
        raise AggregationError("no sums to draw intervals from")
    rng = np.random.default_rng(seed)
    redrawn = {
        k: v + result.noise_std[k] * rng.standard_normal((draws, result.d))
        for k, v in result.sums.items()
    }
    if "A" in redrawn and result.plan.settings.clip_correction:
        # the realised clipped mass scatters around the model's mean: draw it too
        _, lost_var = clip_correction(result.plan, result.broadcast_b.kappa, result.sums["A"])
        redrawn["A"] = redrawn["A"] + np.sqrt(lost_var) * rng.standard_normal((draws, result.d))
        scatter_b = clip_scatter_b(result.plan, result.broadcast_b, result.sums["A"])
        redrawn["B"] = redrawn["B"] + np.sqrt(scatter_b) * rng.standard_normal((draws, result.d))
    tau2_used = None if result.broadcast_c is None else result.broadcast_c.tau2
    boot = figures_from_sums(result.plan, result.broadcast_b, redrawn, tau2_used)
    point = figures_from_sums(result.plan, result.broadcast_b, result.sums, tau2_used)
    err = {k: np.asarray(boot[k] - point[k]) for k in point if k in boot}
    for k, gap in pooled_weight_errors(result, point, draws, rng).items():
        if k in err:
            err[k] = np.asarray(err[k] + gap)
    return point, err


_WORLD_KEYS: Final = ("pooled_mean", "q_raw", "tau2_raw", "random_effects_mean", "q_total")


def _world_figures(
    theta: FloatArray, var: FloatArray, m: FloatArray, n: int
) -> dict[str, FloatArray]:
    """DerSimonian-Laird of silo means ``theta`` with variances ``var`` ((draws, n, d))."""
    w = m / var
    big_c = np.sum(w, axis=1)
    mean = np.sum(w * theta, axis=1) / big_c
    q = np.sum(w * (theta - mean[:, None, :]) ** 2, axis=1)
    tau2_raw = (q - (n - 1)) / (big_c - np.sum(w * w, axis=1) / big_c)
    w_star = 1.0 / (var / m + np.maximum(tau2_raw, 0.0)[:, None, :])
    re = np.sum(w_star * theta, axis=1) / np.sum(w_star, axis=1)
    return {
        "pooled_mean": mean,
        "q_raw": q,
        "tau2_raw": tau2_raw,
        "random_effects_mean": re,
        "q_total": np.sum(q, axis=-1),
    }


def pooled_weight_errors(
    result: PrivateMetaAnalysis, point: dict[str, FloatArray], draws: int, rng: np.random.Generator
) -> dict[str, FloatArray]:
    """``draws`` errors of weighing the small silos by the pooled variance (secure sums).

    Where small silos weigh by round A's pooled variance ``sigma^2`` (``public_small_silo
    _weights``), the figures are not the exact analysis' even without noise. In a world drawn
    from the point figures -- each silo's true variance ``sigma^2 G_i`` (a gamma of mean 1 and
    coefficient of variation :data:`~fa_hetdp.protocol.silo_summaries.UNKNOWN_VARIANCE_CV`),
    its mean from the random-effects model ``N(mu, tau2 + sigma_i^2/m_i)`` and its sample
    variance ``sigma_i^2 chi2_{m_i - 1}/(m_i - 1)``, which the exact analysis weighs by -- each
    draw is the analysis with the pooled silos at ``sigma^2`` less the exact analysis (the
    silos that keep their own variance weigh by it in both). Added to the noise errors, the
    sample intervals cover that difference too. Empty where no silo is pooled. Post-processing
    of released figures and public counts.
    """
    plan, bb = result.plan, result.broadcast_b
    if bb is None:
        return {}
    own = plan.own_variances(bb.floor)  # (n, d)
    if np.all(own):
        return {}
    n, d = plan.n, plan.d
    m = plan.records_per_client.astype(np.float64)
    sigma2 = pooled_variance(bb)
    tau2 = np.maximum(np.nan_to_num(np.asarray(point.get("tau2", np.zeros(d)))), 0.0)
    mu = np.nan_to_num(np.asarray(point.get("pooled_mean", np.full(d, 0.5))), nan=0.5)
    shape = 1.0 / UNKNOWN_VARIANCE_CV**2
    true_var = sigma2 * rng.gamma(shape, 1.0 / shape, (draws, n, d))
    mm = m[None, :, None]
    theta = mu + np.sqrt(tau2 + true_var / mm) * rng.standard_normal((draws, n, d))
    sample_var = true_var * rng.chisquare(mm - 1.0, (draws, n, d)) / (mm - 1.0)
    sample_var = np.maximum(sample_var, 1e-12)  # a school of 2 with equal scores
    used = np.where(own[None, :, :], sample_var, sigma2)
    exact = _world_figures(theta, sample_var, mm, n)
    pooled = _world_figures(theta, used, mm, n)
    return {k: np.asarray(pooled[k] - exact[k]) for k in _WORLD_KEYS}


def noise_errors(
    result: PrivateMetaAnalysis, draws: int, seed: int
) -> tuple[dict[str, FloatArray], dict[str, FloatArray]]:
    """Return the design's point figures and ``draws`` bootstrap errors of the privacy noise."""
    if result.design == "silo-summaries":
        return silo_noise_errors(result, draws, seed)
    return secure_sums_noise_errors(result, draws, seed)


def intervals_from_errors(
    point: dict[str, FloatArray],
    err: dict[str, FloatArray],
    level: float,
    n: int,
    d: int,
    mean_range: tuple[float, float] = (0.0, 1.0),
) -> MetaIntervals:
    """Sample intervals ``[x - e_hi, x - e_lo]`` from the noise errors' quantiles.

    The interval of an untruncated figure (``q_raw``, ``tau2_raw``, the means, the summed
    ``Q``) is the estimate less the quantiles of the bootstrap error; ``q``, ``i2``,
    ``i2_total`` and ``tau2`` are the monotone images of theirs. The means' intervals are
    clipped into ``mean_range`` (a mean of values in ``[0, 1]``; a two-arm effect's range).
    """
    lo_q, hi_q = (1.0 - level) / 2.0, (1.0 + level) / 2.0
    lower: dict[str, Any] = {}
    upper: dict[str, Any] = {}
    nan = np.full(d, np.nan)

    def basic(key: str) -> tuple[FloatArray, FloatArray]:
        x, e = point[key], err[key]
        return x - np.quantile(e, hi_q, axis=0), x - np.quantile(e, lo_q, axis=0)

    for key in ("pooled_mean", "random_effects_mean"):
        if key in point:
            lo, hi = basic(key)
            lower[key], upper[key] = np.clip(lo, *mean_range), np.clip(hi, *mean_range)
        else:
            lower[key], upper[key] = nan, nan
    if "q_raw" in point:
        lo, hi = basic("q_raw")
        lower["q"], upper["q"] = np.maximum(lo, 0.0), np.maximum(hi, 0.0)
        lower["i2"], upper["i2"] = i2_from_q(lower["q"], n), i2_from_q(upper["q"], n)
        lo_t, hi_t = basic("q_total")
        lower["i2_total"] = float(i2_from_q(max(float(lo_t), 0.0), n, d))
        upper["i2_total"] = float(i2_from_q(max(float(hi_t), 0.0), n, d))
    else:
        for key in ("q", "i2"):
            lower[key], upper[key] = nan, nan
        lower["i2_total"] = upper["i2_total"] = float("nan")
    if "tau2_raw" in point:
        lo, hi = basic("tau2_raw")
        lower["tau2_raw"], upper["tau2_raw"] = lo, hi
        lower["tau2"], upper["tau2"] = np.maximum(lo, 0.0), np.maximum(hi, 0.0)
    else:
        for key in ("tau2", "tau2_raw"):
            lower[key], upper[key] = nan, nan
    methods = {key: SAMPLE_METHOD for key in lower}
    return MetaIntervals(level=level, lower=lower, upper=upper, target="sample", methods=methods)


def sampling_parts(result: PrivateMetaAnalysis, point: dict[str, FloatArray]) -> dict[str, Any]:
    """Return the sampling side at the private estimate, per coordinate (post-processing).

    ``s1``, ``s2``, ``s3`` (``sum w^k``, fixed-effect weights), ``tr_p`` (the ``tau2``
    denominator the estimate used), ``se_pooled`` (``1/sqrt(s1)``), ``se_re`` (``1/sqrt(sum
    w*)``, NaN without the random-effects mean); silo summaries also ``theta`` and ``v`` (every
    silo's noisy mean and the variance it carries: sampling plus its noise's).
    """
    plan = result.plan
    n = result.n
    if isinstance(plan, SiloPlan):
        m = plan.records_per_client.astype(np.float64)[:, None]
        var = np.asarray(point["variance"])
        w = m / var
        s1, s2, s3 = (np.sum(w**k, axis=0) for k in (1, 2, 3))
        tau2 = np.asarray(point["tau2"])
        w_star = 1.0 / (var / m + tau2[None, :])
        st, _ = plan.sigmas
        return {
            "s1": s1,
            "s2": s2,
            "s3": s3,
            "tr_p": s1 - s2 / s1,
            "se_pooled": 1.0 / np.sqrt(s1),
            "se_re": 1.0 / np.sqrt(np.sum(w_star, axis=0)),
            "theta": np.asarray(result.sums["theta"]),
            "v": var / m + (st * st)[:, None],
        }
    bb = result.broadcast_b
    if bb is None:
        raise AggregationError("no sums to draw intervals from")
    tau2_used = None if result.broadcast_c is None else result.broadcast_c.tau2
    least, most = _weight_range(plan, bb.floor)
    weights = _denoised(plan, bb, result.sums, tau2_used)
    c = np.maximum(weights["C"], least)
    out: dict[str, Any] = {"s1": c, "se_pooled": 1.0 / np.sqrt(c)}
    plug = plug_in_weights(plan, bb)
    w_plug = plan.records_per_client.astype(np.float64)[:, None] / pooled_variance(bb)
    s3_plug = np.sum(w_plug**3, axis=0)
    if "D" in weights:
        dd = np.clip(weights["D"], c**2 / n, c * np.minimum(c, most))
        out["s2"] = dd
        # S3 is not released: the plug-in's, scaled like S2 (equal within-variances otherwise)
        out["s3"] = s3_plug * (dd / plug["D"]) ** 1.5
        out["tr_p"] = np.maximum(c - dd / c, least * (1.0 - 1.0 / n))
    if "F" in weights and tau2_used is not None:
        least_f, _ = _weight_range(plan, bb.floor, tau2_used)
        out["se_re"] = 1.0 / np.sqrt(np.maximum(weights["F"], least_f))
    else:
        out["se_re"] = np.full(result.d, np.nan)
    return out


def _noise_sd(err: dict[str, FloatArray], key: str, d: int) -> FloatArray:
    return np.asarray(np.std(err[key], axis=0)) if key in err else np.full(d, np.nan)


def _tau2_moment_interval(
    q_obs: FloatArray, noise_var: FloatArray, parts: dict[str, Any], n: int, level: float
) -> tuple[FloatArray, FloatArray]:
    """``tau2``'s interval from sums: invert ``P(Q + e <= q_obs)`` (module docstring).

    ``Q`` is a scaled chi-square (gamma) with the mean ``(n - 1) + tau2 tr P`` and
    Biggerstaff-Tweedie's variance, ``e ~ N(0, noise_var)`` (Gauss-Hermite, 40 nodes); the
    probability decreases in ``tau2``; bisection.
    """
    s1, s2, s3 = parts["s1"], parts["s2"], parts["s3"]
    tr_p = s1 - s2 / s1
    tr_p2 = s2 - 2.0 * s3 / s1 + s2 * s2 / (s1 * s1)
    nodes, wts = np.polynomial.hermite.hermgauss(40)
    e = np.sqrt(2.0 * np.maximum(noise_var, 0.0))[None, :] * nodes[:, None]  # (40, d)
    wts = wts / np.sqrt(np.pi)

    def below(tau2: FloatArray) -> FloatArray:
        mean = (n - 1) + tau2 * tr_p
        var = 2.0 * (n - 1) + 4.0 * tau2 * tr_p + 2.0 * tau2 * tau2 * tr_p2
        shape, scale = mean * mean / var, var / mean
        x = np.maximum(q_obs[None, :] - e, 0.0) / scale[None, :]
        return np.asarray(np.sum(wts[:, None] * gammainc(shape[None, :], x), axis=0))

    def solve(goal: float) -> FloatArray:
        zero = below(np.zeros_like(q_obs))
        lo = np.zeros_like(q_obs)
        hi = np.full_like(q_obs, 1.0)  # a variance of means in [0, 1] is at most 1/4
        for _ in range(70):
            mid = 0.5 * (lo + hi)
            big = below(mid) > goal
            lo = np.where(big, mid, lo)
            hi = np.where(big, hi, mid)
        return np.asarray(np.where(zero > goal, 0.5 * (lo + hi), 0.0))

    alpha = 1.0 - level
    return solve(1.0 - alpha / 2.0), solve(alpha / 2.0)


def population_intervals(
    result: PrivateMetaAnalysis,
    level: float = 0.95,
    *,
    draws: int = 2000,
    seed: int = 0,
    noise: str = NOISE_METHODS[0],
    errors: tuple[dict[str, FloatArray], dict[str, FloatArray]] | None = None,
) -> MetaIntervals:
    """Confidence intervals of the population figures: sampling error and privacy noise.

    Module docstring; ``noise`` (:data:`NOISE_METHODS`) says how the privacy noise enters the
    means' intervals; ``errors`` (:func:`noise_errors`' answer) saves drawing them again.
    """
    lvl = check_level(level)
    if noise not in NOISE_METHODS:
        raise PrivacyParameterError(f"noise must be one of {NOISE_METHODS}, got {noise!r}.")
    point, err = noise_errors(result, draws, seed) if errors is None else errors
    parts = sampling_parts(result, point)
    d, n = result.d, result.n
    z = float(norm.ppf(0.5 + lvl / 2.0))
    nan = np.full(d, np.nan)
    lower: dict[str, Any] = {}
    upper: dict[str, Any] = {}
    methods: dict[str, str] = {}
    noise_words = (
        "sqrt(SE_sampling^2 + SE_noise^2), z-interval"
        if noise == "quadrature"
        else "the noise draws convolved with the normal sampling error, their quantiles"
    )
    for key, se_key, model in (
        ("pooled_mean", "se_pooled", "under the common-effect model (one mean for all silos)"),
        ("random_effects_mean", "se_re", "DerSimonian-Laird random-effects mean"),
    ):
        x = np.asarray(getattr(result, key), dtype=np.float64)
        se_s = np.asarray(parts[se_key])
        if key not in err:
            lower[key], upper[key] = nan, nan
        elif noise == "quadrature":
            half = z * np.sqrt(se_s**2 + np.var(err[key], axis=0))
            lower[key], upper[key] = np.clip(x - half, 0, 1), np.clip(x + half, 0, 1)
        else:
            rng = np.random.default_rng(seed + 1)
            total = err[key] + se_s * rng.standard_normal(err[key].shape)
            lo_q, hi_q = (1.0 - lvl) / 2.0, (1.0 + lvl) / 2.0
            lower[key] = np.clip(x - np.quantile(total, hi_q, axis=0), 0, 1)
            upper[key] = np.clip(x - np.quantile(total, lo_q, axis=0), 0, 1)
        methods[key] = f"{model}: {noise_words}"
    if isinstance(result.plan, SiloPlan):
        tau_lo, tau_hi = q_profile(parts["theta"], parts["v"], lvl)
        methods["tau2"] = (
            "Q-profile (Viechtbauer 2007) of the silos' noisy means, each silo's noise variance "
            "added to its sampling variance"
        )
    elif "q_raw" in point and "s2" in parts:
        tau_lo, tau_hi = _tau2_moment_interval(
            np.asarray(point["q_raw"]), np.var(err["q_raw"], axis=0), parts, n, lvl
        )
        methods["tau2"] = (
            "secure sums have no per-silo estimates, so no Q-profile: Q as a scaled chi-square "
            "(Biggerstaff-Tweedie moments from the released sums of weights; sum w^3 from the "
            "plug-in weights) convolved with Q's privacy noise, inverted in tau2"
        )
    else:
        tau_lo, tau_hi = nan, nan
        methods["tau2"] = "none: tau2 was not released"
    defined = np.where(np.isfinite(result.tau2), 0.0, np.nan)
    lower["tau2"], upper["tau2"] = tau_lo + defined, tau_hi + defined
    tr_p = parts.get("tr_p", nan)
    i2_defined = np.where(np.isfinite(result.i2), 0.0, np.nan)
    lower["i2"] = i2_from_tau2(tau_lo, tr_p, n) + i2_defined
    upper["i2"] = i2_from_tau2(tau_hi, tr_p, n) + i2_defined
    methods["i2"] = "the image of tau2's interval, tau2/(tau2 + s^2), s^2 = (n - 1)/tr P"
    methods["q"] = NO_POPULATION_INTERVAL
    methods["i2_total"] = NO_POPULATION_INTERVAL
    return MetaIntervals(level=lvl, lower=lower, upper=upper, target="population", methods=methods)


def meta_intervals(
    result: PrivateMetaAnalysis, level: float, target: str, draws: int, seed: int
) -> MetaIntervals:
    """:meth:`PrivateMetaAnalysis.confidence_intervals` (module docstring)."""
    lvl = check_level(level)
    check_target(target)
    if target == "population":
        return population_intervals(result, lvl, draws=draws, seed=seed)
    if result.design == "silo-summaries":
        from fa_hetdp.protocol.silo_summaries import silo_intervals

        return silo_intervals(result, lvl, draws, seed)
    point, err = secure_sums_noise_errors(result, draws, seed)
    return intervals_from_errors(point, err, lvl, result.n, result.d)


def standard_errors(
    result: PrivateMetaAnalysis,
    draws: int = 2000,
    seed: int = 0,
    errors: tuple[dict[str, FloatArray], dict[str, FloatArray]] | None = None,
) -> dict[str, FloatArray]:
    """Return the population standard errors with the privacy noise (quadrature), ``(d,)``.

    ``"pooled_mean"`` (common-effect model) and ``"random_effects_mean"``: the classical
    standard error at the private weights and the noise draws' standard deviation;
    ``"tau2"``: the DerSimonian-Laird estimator's sampling standard error at the private
    ``tau2`` (:func:`~fa_hetdp.stats.meta.dl_tau2_variance`) and its noise's. ``errors``:
    as :func:`population_intervals`.
    """
    point, err = noise_errors(result, draws, seed) if errors is None else errors
    parts = sampling_parts(result, point)
    d = result.d
    out: dict[str, FloatArray] = {}
    for key, se_key in (("pooled_mean", "se_pooled"), ("random_effects_mean", "se_re")):
        se = np.sqrt(np.asarray(parts[se_key]) ** 2 + _noise_sd(err, key, d) ** 2)
        out[key] = np.where(np.isfinite(getattr(result, key)), se, np.nan)
    if "s2" in parts and "s3" in parts:
        var = dl_tau2_variance(parts["s1"], parts["s2"], parts["s3"], result.tau2, result.n)
        se_tau2 = np.sqrt(var + _noise_sd(err, "tau2_raw", d) ** 2)
        out["tau2"] = np.where(np.isfinite(result.tau2), se_tau2, np.nan)
    else:
        out["tau2"] = np.full(d, np.nan)
    return out


def prediction_interval(
    result: PrivateMetaAnalysis, level: float, se_re: FloatArray
) -> PredictionInterval:
    """``mu~ +- t_{n-2} sqrt(tau2~ + SE^2)``, ``SE`` the random-effects mean's with the noise."""
    lvl = check_level(level)
    lo, hi = prediction_bounds(result.random_effects_mean, result.tau2, se_re, result.n, lvl)
    return PredictionInterval(
        level=lvl,
        lower=lo,
        upper=hi,
        method=(
            "random-effects mean +- t_{n-2} sqrt(tau2 + SE^2) (Higgins et al. 2009), SE with "
            "the privacy noise"
        ),
    )
