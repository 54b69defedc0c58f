"""The server's side of the private meta-analysis: each round's noise, broadcast and figures.

The server knows the plan (public counts ``m_i``), receives each round's noisy sum (the
secure sum of the clients' round vectors and noise shares; with the central placement it adds
the noise itself, :func:`add_central_noise`), and turns it into the next broadcast
(:func:`assemble_round_a`, :func:`assemble_round_b`) and finally into a
:class:`PrivateMetaAnalysis` (:func:`assemble_result`). Everything here is post-processing of
the noisy sums and public values. :func:`figures_from_sums` is the one formula both the
estimate and its confidence intervals (a parametric bootstrap of the known noise) use.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Final

import numpy as np
from scipy.special import ndtr

from fa_hetdp._types import FloatArray
from fa_hetdp.dp.accounting import PrivacySpent
from fa_hetdp.errors import AggregationError
from fa_hetdp.protocol.meta_client import BroadcastB, BroadcastC, pooled_variance
from fa_hetdp.protocol.meta_plan import (
    LATER_RELEASES,
    MAX_WITHIN_VARIANCE,
    ROUNDS,
    MetaPlan,
    silo_kappa,
    with_settings,
)
from fa_hetdp.stats.meta import (
    MetaIntervals,
    PredictionInterval,
    SiloEstimates,
    fixed_effect_from_sums,
    i2_from_q,
)

__all__ = [
    "PLUG_IN_NOISE",
    "MetaIntervals",
    "PrivateMetaAnalysis",
    "add_central_noise",
    "assemble_result",
    "assemble_round_a",
    "assemble_round_b",
    "clip_correction",
    "clip_scatter_b",
    "figures_from_sums",
    "plug_in_weights",
    "round_sigmas",
    "silo_clips",
    "split_round",
]


def round_sigmas(
    plan: MetaPlan, rnd: str, broadcast: BroadcastB | BroadcastC | None = None
) -> FloatArray:
    """Return the calibrated ``sigma`` of every coordinate of round ``rnd``'s vector."""
    floor = kappa = kappa_star = tau2 = rho = None
    if broadcast is not None:
        floor = broadcast.floor
        if isinstance(broadcast, BroadcastB):
            kappa, rho = broadcast.kappa, broadcast.rho
        else:
            kappa_star, tau2 = broadcast.kappa_star, broadcast.tau2
    return np.concatenate(
        [plan.sigma_vector(r, floor, kappa, kappa_star, tau2, rho) for r in ROUNDS[rnd]]
    )


def add_central_noise(
    plan: MetaPlan, sigmas: FloatArray, total: FloatArray, rng: np.random.Generator
) -> FloatArray:
    """Add the central placement's noise to the exact sum (distributed: ``total`` as is)."""
    if plan.settings.placement != "central" or not np.any(sigmas > 0):
        return np.asarray(total, dtype=np.float64)
    return np.asarray(total + plan.mechanism.sample(sigmas, sigmas.shape, rng=rng))


def split_round(plan: MetaPlan, rnd: str, total: FloatArray) -> dict[str, FloatArray]:
    """Split the round vector into its ``d``-blocks by release name."""
    vec = np.asarray(total, dtype=np.float64)
    names = ROUNDS[rnd]
    if vec.shape != (len(names) * plan.d,):
        raise AggregationError(
            f"round {rnd} sum must have {len(names) * plan.d} values, got shape {vec.shape}"
        )
    return {r: vec[i * plan.d : (i + 1) * plan.d] for i, r in enumerate(names)}


PILOT_MARGIN = 2.0
"""The pilot ratio ``rho`` of the per-silo clips is taken this many noise stds below its
estimate (a lower confidence bound: noise alone does not widen the clips)."""


def assemble_round_a(plan: MetaPlan, total: FloatArray) -> BroadcastB:
    """Centre, floor, clip and pilot ratio from round A's noisy sum (meta_plan's docstring)."""
    s = plan.settings
    sums = split_round(plan, "A", total)
    m_total, n = plan.total_records, plan.n
    centre = np.clip(sums["T"] / m_total, 0.0, 1.0)
    spread = np.clip(sums["W"] / (m_total - n), s.min_floor, MAX_WITHIN_VARIANCE)
    floor = np.maximum(s.floor_fraction * spread, s.min_floor)
    kappa = np.full(plan.d, float(s.kappa))
    rho = np.zeros(plan.d)
    if "U" in plan.releases:
        # between-client sum of squares sum m_i (theta_i - mean)^2 = U - W - T^2/M, over the
        # pooled within-variance: a pilot Q; clients' z spread with RMS sqrt(Q/n)
        between = sums["U"] - sums["W"] - sums["T"] ** 2 / m_total
        pilot = np.maximum(between, 0.0) / spread
        if s.adaptive_kappa:
            kappa = np.maximum(kappa, s.kappa_scale * np.sqrt(pilot / n))
        if s.per_silo_clip:
            # E[pilot] = (n - 1) + (tau2/sigma2) (M - sum m_i^2/M) with equal within-variances,
            # less PILOT_MARGIN times the pilot's noise std (public: the private plan's noise of
            # T, U, W, also in a noise-off run), so that noise does not widen the clips; rho is
            # tau2 over the floor, the spread of z for a silo at the floor
            m = plan.records_per_client.astype(np.float64)
            private = plan if plan.budget is not None else with_settings(plan, noise=True)
            noise = {r: private.noise_std(private.sigma_vector(r)) for r in ("T", "U", "W")}
            sd = np.sqrt(noise["U"] ** 2 + noise["W"] ** 2 + (2.0 * centre * noise["T"]) ** 2)
            excess = pilot - (n - 1) - PILOT_MARGIN * sd / spread
            tau2 = np.maximum(excess, 0.0) * spread / (m_total - float(np.sum(m * m)) / m_total)
            rho = tau2 / floor
    kappa = np.minimum(kappa, np.sqrt(plan.m_max / floor))  # |z| <= sqrt(m/f) always
    return BroadcastB(centre=centre, floor=floor, kappa=kappa, spread=spread, rho=rho)


def silo_clips(plan: MetaPlan, broadcast_b: BroadcastB) -> FloatArray:
    """Every silo's round-B clip ``kappa_ij`` (``(d, n)``; public: the broadcast and ``m_i``)."""
    m = plan.records_per_client.astype(np.float64)[None, :]
    rho = None if broadcast_b.rho is None else broadcast_b.rho[:, None]
    return silo_kappa(broadcast_b.kappa[:, None], rho, m, broadcast_b.floor[:, None])


def _clips(plan: MetaPlan, kappa: FloatArray | BroadcastB) -> FloatArray:
    """``(d, n)`` clips: the silos' own from a broadcast, or one ``(d,)`` clip for every silo."""
    if isinstance(kappa, BroadcastB):
        return silo_clips(plan, kappa)
    k = np.asarray(kappa, dtype=np.float64).reshape(-1)
    return np.broadcast_to(k[:, None], (k.size, plan.n))


def _weight_range(
    plan: MetaPlan, floor: FloatArray, tau2: FloatArray | float = 0.0
) -> tuple[FloatArray, FloatArray]:
    """Smallest possible ``sum w`` and largest single ``w`` (public, per coordinate)."""
    m = plan.records_per_client.astype(np.float64)[:, None]
    top_s2 = np.maximum(m / (4.0 * (m - 1.0)), floor[None, :])  # s^2 <= m/(4(m-1))
    least = np.sum(1.0 / (top_s2 / m + tau2), axis=0)
    most = plan.m_max / floor
    return least, np.asarray(most)


def _lost_moments(var: FloatArray, kappa: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Mean and variance of ``(Z^2 - kappa^2)_+`` for ``Z ~ N(0, var)`` (the clipped mass)."""
    a = kappa / np.sqrt(var)
    phi = np.exp(-0.5 * a * a) / np.sqrt(2.0 * np.pi)
    tail = 2.0 * ndtr(-a)
    m2 = var * (2.0 * a * phi + tail)  # E[Z^2 1{|Z| > kappa}]
    m4 = var * var * (2.0 * (a**3 + 3.0 * a) * phi + 3.0 * tail)  # E[Z^4 1{|Z| > kappa}]
    k2 = kappa * kappa
    mean = m2 - k2 * tail
    second = m4 - 2.0 * k2 * m2 + k2 * k2 * tail
    return np.asarray(mean), np.asarray(np.maximum(second - mean * mean, 0.0))


def clip_correction(
    plan: MetaPlan, kappa: FloatArray | BroadcastB, big_a: FloatArray
) -> tuple[FloatArray, FloatArray]:
    """Return the mass the clip is expected to remove from ``A`` and its variance.

    ``kappa``: round A's broadcast (each silo's own clip ``kappa_ij``, :func:`silo_clips`) or
    one ``(d,)`` clip for every silo. Client ``i``'s ``z_i`` is modelled ``N(0, 1 + m_i rho)``
    (``rho = tau2/sigma2``; the public ``m_i``); ``rho >= 0`` is fitted per coordinate so that
    ``sum_i E[min(z_i^2, kappa_i^2)]`` equals the (noisy) ``A`` (interpolated on a grid of
    ``rho``); the correction is ``sum_i E[(z_i^2 - kappa_i^2)_+]`` at that ``rho``, and its
    variance (the realised
    clipped mass scatters around it; the intervals draw it) ``sum_i Var[(z_i^2 - kappa^2)_+]``.
    Post-processing of public values; about 0 where the clip does not bind; given the
    broadcast, an ``A`` near the clip's saturation is read below it (:func:`_saturation`),
    otherwise ``A`` beyond the grid takes its end. Reliable while most clients are inside the
    clip: where most are beyond
    it, ``A`` is near ``n kappa^2`` and the inversion overshoots (measured: median 1.7 times
    the exact ``Q`` with 13 of 20 clients clipped; tests/test_meta_private.py).
    """
    m = plan.records_per_client.astype(np.float64)
    k = _clips(plan, kappa)  # (d, n)
    target = np.asarray(big_a, dtype=np.float64)
    rho = np.concatenate([[0.0], np.logspace(-9, np.log10(1e4 * float(np.max(k)) ** 2), 400)])
    var = 1.0 + m[None, :, None] * rho[None, None, :]  # (1, n, grid)
    kk = k[:, :, None]  # (d, n, 1)
    lost_i, lost_var_i = _lost_moments(var, kk)
    kept = np.sum(var - lost_i, axis=1)  # sum_i E[min(z^2, kappa^2)], increasing in rho
    lost, lost_var = np.sum(lost_i, axis=1), np.sum(lost_var_i, axis=1)  # (d, grid)
    d = k.shape[0]
    flat = target.reshape(-1, d)
    if isinstance(kappa, BroadcastB):
        flat = np.minimum(flat, _saturation(plan, kappa, kept[:, -1]))
    out = np.empty_like(flat)
    out_var = np.empty_like(flat)
    for j in range(d):
        out[:, j] = np.interp(flat[:, j], kept[j], lost[j])
        out_var[:, j] = np.interp(flat[:, j], kept[j], lost_var[j])
    return out.reshape(target.shape), out_var.reshape(target.shape)


SATURATION_SD: Final = 1.0
"""A noisy ``A`` within this many of its noise sds of the clip's saturation (every silo at its
clip, ``sum_i kappa_i^2``) is read at that distance below it (:func:`clip_correction`)."""


def _saturation(plan: MetaPlan, broadcast_b: BroadcastB, top: FloatArray) -> FloatArray:
    """Return the largest ``A`` the clip correction inverts.

    That is the saturation ``top`` less :data:`SATURATION_SD` of ``A``'s noise sds. Near its
    saturation ``A`` hardly moves with ``rho``, so noise alone can carry it past every
    finite ``rho``; the inversion would then take the grid's end (``Q`` of 10^15 on
    nycflights13's delays in half the runs). Read there, ``A`` gives the smallest ``rho`` the
    noise leaves plausible. Without noise: ``top`` itself. Public values only.
    """
    sd = plan.noise_std(
        plan.sigma_vector("A", broadcast_b.floor, broadcast_b.kappa, rho=broadcast_b.rho)
    )
    return np.asarray(np.maximum(top - SATURATION_SD * sd, 0.0))


def clip_scatter_b(plan: MetaPlan, broadcast_b: BroadcastB, big_a: FloatArray) -> FloatArray:
    """Return the variance the clip's removed part adds to ``B`` (normal random effects).

    ``B = sum sqrt(w_i) z^_i`` loses ``sqrt(w_i) (z_i - z^_i)``, mean 0 under the symmetric
    model of :func:`clip_correction` (same fitted ``rho``), variance
    ``w_i E[(|z_i| - kappa_i)_+^2] = w_i 2 ((v + kappa_i^2) Phi(-a) - kappa_i sqrt(v) phi(a))``,
    ``v = 1 + m_i rho``, ``a = kappa_i/sqrt(v)`` (each silo's own clip, :func:`silo_clips`),
    with the plug-in ``w_i = m_i/max(sigma^2, f)``. The intervals of the means draw it (the
    estimate itself is left as it is).
    """
    m = plan.records_per_client.astype(np.float64)
    k = silo_clips(plan, broadcast_b)  # (d, n)
    w = m[None, :, None] / pooled_variance(broadcast_b)[:, None, None]  # (d, n, 1)
    target = np.asarray(big_a, dtype=np.float64)
    rho = np.concatenate([[0.0], np.logspace(-9, np.log10(1e4 * float(np.max(k)) ** 2), 400)])
    var = 1.0 + m[None, :, None] * rho[None, None, :]
    kk = k[:, :, None]  # (d, n, 1)
    lost_i, _ = _lost_moments(var, kk)
    kept = np.sum(var - lost_i, axis=1)
    sd = np.sqrt(var)
    a = kk / sd
    tail = (var + kk * kk) * ndtr(-a) - kk * sd * np.exp(-0.5 * a * a) / np.sqrt(2.0 * np.pi)
    scatter = np.sum(w * 2.0 * np.maximum(tail, 0.0), axis=1)  # (d, grid)
    d = k.shape[0]
    flat = target.reshape(-1, d)
    out = np.empty_like(flat)
    for j in range(d):
        out[:, j] = np.interp(flat[:, j], kept[j], scatter[j])
    return out.reshape(target.shape)


SECURE_SUMS_SAW = (
    "only the noisy sums over all silos of each round (secure aggregation) and the public "
    "record counts; no silo's own figures"
)

PLUG_IN_NOISE = 0.05
"""A noisy ``C``, ``D`` or ``F`` whose noise std exceeds this fraction of its plug-in value
(from the pooled within-variance of round A and the public ``m_i``) is replaced by it."""


def plug_in_weights(
    plan: MetaPlan, broadcast_b: BroadcastB, tau2: FloatArray | None = None
) -> dict[str, FloatArray]:
    """``C``, ``D`` (and ``F`` with ``tau2``) as if every client had the pooled variance.

    ``w_i = m_i / max(sigma^2, f)``: public values only (post-processing of round A).
    """
    s2 = pooled_variance(broadcast_b)
    m = plan.records_per_client.astype(np.float64)[:, None]
    w = m / s2[None, :]
    out = {"C": np.sum(w, axis=0), "D": np.sum(w * w, axis=0)}
    if tau2 is not None:
        out["F"] = np.sum(1.0 / (s2[None, :] / m + tau2[None, :]), axis=0)
    return out


def _denoised(
    plan: MetaPlan, broadcast_b: BroadcastB, sums: Mapping[str, FloatArray], tau2: FloatArray | None
) -> dict[str, FloatArray]:
    """``C``, ``D``, ``F``: the noisy sum, or the plug-in where the noise is too large."""
    plug = plug_in_weights(plan, broadcast_b, tau2)
    out: dict[str, FloatArray] = {}
    for key, value in plug.items():
        if key not in sums:
            continue
        std = plan.noise_std(
            plan.sigma_vector(key, broadcast_b.floor, broadcast_b.kappa, broadcast_b.kappa, tau2)
        )
        out[key] = np.where(std > PLUG_IN_NOISE * value, value, sums[key])
    return out


def figures_from_sums(
    plan: MetaPlan,
    broadcast_b: BroadcastB,
    sums: Mapping[str, FloatArray],
    tau2_used: FloatArray | None = None,
) -> dict[str, FloatArray]:
    """Every figure from the noisy sums (arrays ``(..., d)``; vectorised over leading axes).

    Keys: ``pooled_mean``, ``q_raw`` (``A - B^2/C``, may be < 0), ``q``, ``i2``, ``tau2_raw``,
    ``tau2``, ``random_effects_mean`` (when ``E`` and ``F`` are given with ``tau2_used``,
    the ``tau2`` broadcast in round C), ``q_total``, ``i2_total``.
    """
    n = plan.n
    c0 = broadcast_b.centre
    least, most = _weight_range(plan, broadcast_b.floor)
    out: dict[str, FloatArray] = {}
    weights = _denoised(plan, broadcast_b, sums, tau2_used)
    big_c = np.maximum(weights["C"], least)
    big_a = sums.get("A")
    if big_a is not None and plan.settings.clip_correction:
        big_a = big_a + clip_correction(plan, broadcast_b, big_a)[0]
    mean, q_raw = fixed_effect_from_sums(np.nan if big_a is None else big_a, sums["B"], big_c, c0)
    out["pooled_mean"] = np.clip(mean, 0.0, 1.0)
    if big_a is not None:
        out["q_raw"] = q_raw
        q = np.maximum(q_raw, 0.0)
        out["q"] = q
        out["i2"] = i2_from_q(q, n)
        q_total = np.sum(q_raw, axis=-1)
        out["q_total"] = q_total
        out["i2_total"] = i2_from_q(np.maximum(q_total, 0.0), n, plan.d)
    if "D" in sums and "A" in sums:
        big_d = np.clip(weights["D"], big_c**2 / n, big_c * np.minimum(big_c, most))
        # regularised: the smallest public sum of weights times (1 - 1/n) (equal weights)
        denom = np.maximum(big_c - big_d / big_c, least * (1.0 - 1.0 / n))
        # a between-client variance of means in [0, 1] is at most 1/4; from the unclamped Q,
        # so that the noise on tau2_raw is Q's (a Q clamped at 0 would freeze it where noise
        # drives Q below 0, and its sample interval would collapse onto 0); tau2 is the same
        out["tau2_raw"] = np.minimum((q_raw - (n - 1)) / denom, MAX_WITHIN_VARIANCE)
        out["tau2"] = np.maximum(out["tau2_raw"], 0.0)
    if "E" in sums and "F" in sums and tau2_used is not None:
        least_f, _ = _weight_range(plan, broadcast_b.floor, tau2_used)
        big_f = np.maximum(weights["F"], least_f)
        re_mean, _ = fixed_effect_from_sums(np.nan, sums["E"], big_f, c0)  # weights w*
        out["random_effects_mean"] = np.clip(re_mean, 0.0, 1.0)
    return out


def assemble_round_b(
    plan: MetaPlan, broadcast_b: BroadcastB, total: FloatArray
) -> tuple[dict[str, FloatArray], BroadcastC]:
    """Round B's figures and the round-C broadcast (``tau2`` truncated at 0)."""
    sums = split_round(plan, "B", total)
    made = {k: v for k, v in sums.items() if k in plan.releases}
    figures = figures_from_sums(plan, broadcast_b, made)
    tau2 = figures.get("tau2", np.zeros(plan.d))
    bc = BroadcastC(
        centre=broadcast_b.centre,
        floor=broadcast_b.floor,
        tau2=np.asarray(tau2),
        kappa_star=np.maximum(np.full(plan.d, plan.settings.kappa_c), broadcast_b.kappa),
        spread=broadcast_b.spread,
    )
    return made, bc


@dataclass(frozen=True)
class PrivateMetaAnalysis:
    """The private meta-analysis: the figures of :class:`~fa_hetdp.stats.meta.MetaAnalysis`.

    Figures not asked for (``statistics``) are NaN. :meth:`confidence_intervals` gives two
    kinds of interval (``target="population"``: sampling error and privacy noise;
    ``"sample"``: the privacy noise only), :attr:`standard_errors` the population standard
    errors and :meth:`prediction_interval` a new silo's; ``labels`` says what was clipped or
    floored. ``design``
    names the design that ran (``"secure-sums"``: the rounds of this module;
    ``"silo-summaries"``: :mod:`fa_hetdp.protocol.silo_summaries`, whose result also carries
    every silo's noisy means ``silo_means`` and variance estimates ``silo_variances``);
    ``adversary`` whom the guarantee holds against and ``server_saw`` what the server saw.
    """

    pooled_mean: FloatArray
    q: FloatArray
    i2: FloatArray
    tau2: FloatArray
    random_effects_mean: FloatArray
    i2_total: float
    i2_average: float
    n: int
    d: int
    records_per_client: Any
    tau2_raw: FloatArray
    spent: PrivacySpent | None
    unit_of_privacy: str
    plan: Any
    labels: tuple[str, ...] = ()
    broadcast_b: BroadcastB | None = None
    broadcast_c: BroadcastC | None = None
    sums: dict[str, FloatArray] = field(default_factory=dict)
    noise_std: dict[str, FloatArray] = field(default_factory=dict)
    design: str = "secure-sums"
    adversary: str = ""
    server_saw: str = ""
    silo_means: FloatArray | None = None
    silo_variances: FloatArray | None = None

    def confidence_intervals(
        self,
        level: float = 0.95,
        target: str = "population",
        *,
        draws: int = 2000,
        seed: int = 0,
    ) -> MetaIntervals:
        """Intervals of the figures at ``level``; ``target`` says what they cover.

        ``"population"`` (the default; what metafor's CI means): the population effect, the
        sampling error and the privacy noise -- ``pooled_mean`` (under the common-effect model),
        ``random_effects_mean``, ``tau2`` and ``i2``; ``q`` and ``i2_total`` are sample
        statistics and have none (:func:`fa_hetdp.protocol.meta_inference.population_intervals`
        says how, per design). ``"sample"``: the exact value on these records, the privacy
        noise only -- a seeded parametric bootstrap of the known noise through the estimator,
        every figure (secure sums: conditional on the broadcasts, the bias of a binding clip or
        floor is not in them, see :attr:`labels`; silo summaries:
        :func:`~fa_hetdp.protocol.silo_summaries.silo_intervals`). The returned intervals
        carry their ``target`` and a ``methods`` line per figure.
        """
        from fa_hetdp.protocol.meta_inference import meta_intervals

        return meta_intervals(self, level, target, draws, seed)

    @cached_property
    def standard_errors(self) -> dict[str, FloatArray]:
        """Population standard errors with the privacy noise, arrays ``(d,)``.

        Keys ``"pooled_mean"``, ``"random_effects_mean"``, ``"tau2"``: sampling error and
        privacy noise in quadrature (:func:`fa_hetdp.protocol.meta_inference.standard_errors`);
        not :attr:`noise_std`, which is each release's noise alone.
        """
        from fa_hetdp.protocol.meta_inference import standard_errors

        return standard_errors(self)

    def prediction_interval(self, level: float = 0.95) -> PredictionInterval:
        """Where a new silo's true mean is expected to lie, per coordinate.

        ``mu +- t_{n-2} sqrt(tau2 + SE^2)`` with the private random-effects mean and ``tau2``,
        ``SE`` from :attr:`standard_errors` (the privacy noise included).
        """
        from fa_hetdp.protocol.meta_inference import prediction_interval

        return prediction_interval(self, level, self.standard_errors["random_effects_mean"])

    def silo_estimates(self) -> SiloEstimates | None:
        """Every silo's noisy mean, the variance its interval needs and the weights used.

        Silo summaries only (None for the secure sums: the server saw only sums). The variance
        of silo ``i``'s noisy mean around its true mean is its sampling variance plus its
        noise's, ``s2^_i/m_i + st_i^2`` (``s2^`` the variance estimate its weight used,
        :attr:`silo_variances`; ``st_i`` its mean's noise std, ``noise_std["theta"]``), as the
        population ``tau2`` interval takes it; the weights are ``m_i/s2^_i`` and
        ``1/(s2^_i/m_i + tau2)``. Post-processing of the releases.
        """
        if self.design != "silo-summaries" or self.silo_means is None:
            return None
        m = np.asarray(self.records_per_client, dtype=np.float64).reshape(-1, 1)
        means = np.asarray(self.silo_means, dtype=np.float64)
        var = np.asarray(
            np.full(means.shape, np.nan) if self.silo_variances is None else self.silo_variances,
            dtype=np.float64,
        )
        noise = np.asarray(self.noise_std.get("theta", np.zeros(means.shape)), dtype=np.float64)
        return SiloEstimates(
            effects=means,
            variances=var / m + noise * noise,
            weights_fixed=m / var,
            weights_random=1.0 / (var / m + np.asarray(self.tau2)[None, :]),
            method=(
                "the silo's noisy mean +- z sqrt(s^2/m + sigma_noise^2): its sampling error and "
                "its privacy noise"
            ),
        )

    def to_frame(
        self, level: float = 0.95, target: str = "population", *, draws: int = 2000, seed: int = 0
    ) -> Any:
        """Return a pandas DataFrame: one row per figure per coordinate, with ``design``.

        As :meth:`fa_hetdp.stats.meta.MetaAnalysis.to_frame` (:func:`~fa_hetdp.stats.meta.
        figure_frame`), the intervals :meth:`confidence_intervals` at ``level`` and ``target``
        (``"sample"``: the privacy noise only; ``se`` is then NaN), a column ``design``; ``Q``
        has no p-value (a noisy ``Q`` is not chi-square). ``attrs`` adds the design, epsilon,
        delta, the unit of privacy, the adversary and what the server saw.

        Raises
        ------
        ImportError
            pandas is not installed (it is optional: ``pip install pandas``).
        """
        from fa_hetdp.stats.meta import figure_frame

        spent = self.spent
        return figure_frame(
            self,
            self.confidence_intervals(level, target, draws=draws, seed=seed),
            extra={"design": self.design},
            attrs={
                "design": self.design,
                "epsilon": None if spent is None else spent.epsilon,
                "delta": None if spent is None else spent.delta,
                "unit_of_privacy": self.unit_of_privacy,
                "adversary": self.adversary,
                "server_saw": self.server_saw,
            },
            what="PrivateMetaAnalysis.to_frame",
        )

    def summary(self, column: int | None = None, level: float = 0.95) -> Any:
        """Return statsmodels' ``summary_frame()`` layout (population intervals, noise in them).

        Silo summaries: one row per silo (:meth:`silo_estimates`) and the pooled rows; secure
        sums: the pooled rows only (no silo's own figure was seen).
        (:func:`~fa_hetdp.stats.meta.summary_frame`.)

        Raises
        ------
        ImportError
            pandas is not installed.
        """
        from fa_hetdp.stats.meta import summary_frame

        return summary_frame(
            self,
            self.silo_estimates(),
            level,
            column=column,
            what="PrivateMetaAnalysis.summary",
        )

    @property
    def h2(self) -> FloatArray:
        """``(d,)`` ``H^2 = 1/(1 - I^2)`` of the private ``I^2`` (post-processing)."""
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.asarray(1.0 / (1.0 - np.asarray(self.i2, dtype=np.float64)))

    @property
    def q_pvalue(self) -> FloatArray:
        """``(d,)`` NaN: the private ``Q`` has no valid chi-square p-value.

        Both designs report ``Q^ = Q~ - E[noise part]``: the noisy ``Q`` less the noise's
        expected contribution (secure sums: from noisy sums; silo summaries: of the noisy means
        with weights from noisy variances). Under ``tau2 = 0`` that is not chi-square on
        ``n - 1`` df -- the noise adds spread, not only a shift -- so ``chi2.sf(Q^, n - 1)``
        would not hold its level. A valid test of ``tau2 = 0`` from the silo summaries: the
        ``q_pvalue`` of ``private_meta_analysis(..., tau2_method=..., ci_method=...)``'s result,
        whose ``Q`` takes the noise into the sites' variances (post-processing, no budget).
        """
        return np.full(int(self.d), np.nan)

    def leave_one_out(self, level: float = 0.95) -> Any:
        """Return the analysis without each silo in turn (silo summaries only; post-processing).

        :func:`fa_hetdp.stats.silo_analyses.leave_one_out` of :meth:`silo_estimates` (the
        noisy means, the noise in their variances), DerSimonian-Laird and z: no extra budget.

        Raises
        ------
        InputDataError
            The secure sums ran (no silo's estimate exists; :data:`~fa_hetdp.stats.
            silo_analyses.NO_SILO_ESTIMATES`).
        """
        from fa_hetdp.errors import InputDataError
        from fa_hetdp.stats.silo_analyses import NO_SILO_ESTIMATES, leave_one_out

        silos = self.silo_estimates()
        if silos is None:
            raise InputDataError(NO_SILO_ESTIMATES.format(what="leave-one-out") + ".")
        return leave_one_out(silos.effects, silos.variances, level=level)

    def subgroups(self, moderator: Any, level: float = 0.95) -> Any:
        """Return per-group analyses of a site-level ``moderator`` (silo summaries only).

        :func:`fa_hetdp.stats.silo_analyses.subgroup_analysis` of :meth:`silo_estimates`:
        post-processing, no extra budget.

        Raises
        ------
        InputDataError
            The secure sums ran (no silo's estimate exists).
        """
        from fa_hetdp.errors import InputDataError
        from fa_hetdp.stats.silo_analyses import NO_SILO_ESTIMATES, subgroup_analysis

        silos = self.silo_estimates()
        if silos is None:
            raise InputDataError(NO_SILO_ESTIMATES.format(what="a subgroup analysis") + ".")
        return subgroup_analysis(silos.effects, silos.variances, moderator, level=level)


def assemble_result(
    plan: MetaPlan,
    broadcast_b: BroadcastB,
    sums_a: Mapping[str, FloatArray],
    sums_b: Mapping[str, FloatArray],
    broadcast_c: BroadcastC | None,
    sums_c: Mapping[str, FloatArray] | None,
) -> PrivateMetaAnalysis:
    """Assemble the result from the noisy sums of the rounds made."""
    sums: dict[str, FloatArray] = {k: np.asarray(v) for k, v in sums_b.items()}
    if sums_c is not None:
        sums.update({k: np.asarray(v) for k, v in sums_c.items() if k in plan.releases})
    tau2_used = None if broadcast_c is None else broadcast_c.tau2
    fig = figures_from_sums(plan, broadcast_b, sums, tau2_used)
    wanted = plan.settings.wanted
    nan = np.full(plan.d, np.nan)

    def get(key: str, stat: str) -> FloatArray:
        return np.asarray(fig[key]) if stat in wanted and key in fig else nan

    noise_std = {
        r: plan.noise_std(
            plan.sigma_vector(
                r,
                broadcast_b.floor,
                broadcast_b.kappa,
                None if broadcast_c is None else broadcast_c.kappa_star,
                None if broadcast_c is None else broadcast_c.tau2,
                broadcast_b.rho,
            )
        )
        for r in sums
    }
    i2 = get("i2", "i2")
    labels = list(plan.labels)
    s = plan.settings
    clips = silo_clips(plan, broadcast_b)
    labels.append(
        f"round B clips |z| at kappa (per silo and coordinate {float(np.min(clips)):.3g}-"
        f"{float(np.max(clips)):.3g}) and floors s^2 at f "
        f"({float(np.min(broadcast_b.floor)):.3g}-{float(np.max(broadcast_b.floor)):.3g}; "
        f"floor_fraction {s.floor_fraction:g}, min_floor {s.min_floor:g}): a client beyond the "
        "clip pulls Q and I^2 down, one below the floor gets less weight; the intervals cover "
        "the noise, not that bias"
    )
    pooled = int(np.sum(~np.all(plan.own_variances(broadcast_b.floor), axis=1)))
    if pooled:
        labels.append(
            f"{pooled} of {plan.n} silos (one record can move their variance by more than a "
            "sixteenth of the floor) weigh by round A's pooled within-variance, not their own: "
            "a public weight, so their variances add no noise; where their variances differ, "
            "Q, I^2 and tau2 differ from the exact analysis', and the sample intervals cover "
            "that difference as drawn in a world of unequal variances (coefficient of "
            "variation 0.5), not a larger one"
        )
    public = plan.public_releases(broadcast_b.floor)
    if public and plan.budget is not None:
        kept = [r for r in plan.releases if r in LATER_RELEASES and r not in public]
        moved = ", ".join(
            f"{r} {plan.mu(r):.3g} -> {plan.released_mu(r, broadcast_b.floor):.3g}" for r in kept
        )
        labels.append(
            f"{', '.join(public)} turned public after round A (every silo weighs by the pooled "
            f"variance): their share of the budget went to {', '.join(kept)} (mu {moved}; the "
            "same total, a Gaussian DP privacy filter)"
        )
    total = float(fig["i2_total"]) if "i2_total" in wanted and "i2_total" in fig else float("nan")
    return PrivateMetaAnalysis(
        pooled_mean=get("pooled_mean", "pooled_mean"),
        q=get("q", "q"),
        i2=i2,
        tau2=get("tau2", "tau2"),
        random_effects_mean=get("random_effects_mean", "random_effects_mean"),
        i2_total=total,
        i2_average=float(np.mean(i2)) if "i2" in wanted else float("nan"),
        n=plan.n,
        d=plan.d,
        records_per_client=plan.records_per_client,
        tau2_raw=get("tau2_raw", "tau2"),
        spent=plan.spent,
        unit_of_privacy=plan.unit_of_privacy,
        plan=plan,
        labels=tuple(labels),
        broadcast_b=broadcast_b,
        broadcast_c=broadcast_c,
        sums=sums,
        noise_std=noise_std,
        design="secure-sums",
        adversary=plan.adversary,
        server_saw=SECURE_SUMS_SAW,
    )
