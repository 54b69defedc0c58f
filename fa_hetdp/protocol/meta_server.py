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
from typing import Any

import numpy as np
from scipy.special import ndtr

from fa_hetdp._types import FloatArray
from fa_hetdp.dp.accounting import PrivacySpent
from fa_hetdp.errors import AggregationError, PrivacyParameterError
from fa_hetdp.protocol.meta_client import BroadcastB, BroadcastC
from fa_hetdp.protocol.meta_plan import MAX_WITHIN_VARIANCE, ROUNDS, MetaPlan
from fa_hetdp.stats.meta import fixed_effect_from_sums, i2_from_q

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
    "split_round",
]


def round_sigmas(
    plan: MetaPlan, rnd: str, broadcast: BroadcastB | BroadcastC | None = None
) -> FloatArray:
    """Return the calibrated ``sigma`` of every coordinate of round ``rnd``'s vector."""
    floor = kappa = kappa_star = tau2 = None
    if broadcast is not None:
        floor = broadcast.floor
        if isinstance(broadcast, BroadcastB):
            kappa = broadcast.kappa
        else:
            kappa_star, tau2 = broadcast.kappa_star, broadcast.tau2
    return np.concatenate(
        [plan.sigma_vector(r, floor, kappa, kappa_star, tau2) for r in ROUNDS[rnd]]
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


def assemble_round_a(plan: MetaPlan, total: FloatArray) -> BroadcastB:
    """Centre, floor and clip from round A's noisy sum (module docstring of meta_plan)."""
    s = plan.settings
    sums = split_round(plan, "A", total)
    m_total, n = plan.total_records, plan.n
    centre = np.clip(sums["T"] / m_total, 0.0, 1.0)
    spread = np.clip(sums["W"] / (m_total - n), s.min_floor, MAX_WITHIN_VARIANCE)
    floor = np.maximum(s.floor_fraction * spread, s.min_floor)
    kappa = np.full(plan.d, float(s.kappa))
    if "U" in plan.releases:
        # between-client sum of squares sum m_i (theta_i - mean)^2 = U - W - T^2/M, over the
        # pooled within-variance: a pilot Q; clients' z spread with RMS sqrt(Q/n)
        between = sums["U"] - sums["W"] - sums["T"] ** 2 / m_total
        pilot = np.maximum(between, 0.0) / spread
        kappa = np.maximum(kappa, s.kappa_scale * np.sqrt(pilot / n))
    kappa = np.minimum(kappa, np.sqrt(plan.m_max / floor))  # |z| <= sqrt(m/f) always
    return BroadcastB(centre=centre, floor=floor, kappa=kappa, spread=spread)


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
    plan: MetaPlan, kappa: FloatArray, big_a: FloatArray
) -> tuple[FloatArray, FloatArray]:
    """Return the mass the clip is expected to remove from ``A`` and its variance.

    Client ``i``'s ``z_i`` is modelled ``N(0, 1 + m_i rho)`` (``rho = tau2/sigma2``; the
    public ``m_i``); ``rho >= 0`` is fitted per coordinate so that ``sum_i E[min(z_i^2,
    kappa^2)]`` equals the (noisy) ``A`` (interpolated on a grid of ``rho``); the correction
    is ``sum_i E[(z_i^2 - kappa^2)_+]`` at that ``rho``, and its variance (the realised
    clipped mass scatters around it; the intervals draw it) ``sum_i Var[(z_i^2 - kappa^2)_+]``.
    Post-processing of public values; about 0 where the clip does not bind; ``A`` beyond the
    grid takes its end. Reliable while most clients are inside the clip: where most are beyond
    it, ``A`` is near ``n kappa^2`` and the inversion overshoots (measured: median 1.7 times
    the exact ``Q`` with 13 of 20 clients clipped; tests/test_meta_private.py).
    """
    m = plan.records_per_client.astype(np.float64)
    k = np.asarray(kappa, dtype=np.float64)
    target = np.asarray(big_a, dtype=np.float64)
    rho = np.concatenate([[0.0], np.logspace(-9, np.log10(1e4 * float(np.max(k)) ** 2), 400)])
    var = 1.0 + m[None, :, None] * rho[None, None, :]  # (1, n, grid)
    kk = k.reshape(-1)[:, None, None]  # (d, 1, 1)
    lost_i, lost_var_i = _lost_moments(var, kk)
    kept = np.sum(var - lost_i, axis=1)  # sum_i E[min(z^2, kappa^2)], increasing in rho
    lost, lost_var = np.sum(lost_i, axis=1), np.sum(lost_var_i, axis=1)  # (d, grid)
    flat = target.reshape(-1, k.size)
    out = np.empty_like(flat)
    out_var = np.empty_like(flat)
    for j in range(k.size):
        out[:, j] = np.interp(flat[:, j], kept[j], lost[j])
        out_var[:, j] = np.interp(flat[:, j], kept[j], lost_var[j])
    return out.reshape(target.shape), out_var.reshape(target.shape)


def clip_scatter_b(plan: MetaPlan, broadcast_b: BroadcastB, big_a: FloatArray) -> FloatArray:
    """Return the variance the clip's removed part adds to ``B`` (normal random effects).

    ``B = sum sqrt(w_i) z^_i`` loses ``sqrt(w_i) (z_i - z^_i)``, mean 0 under the symmetric
    model of :func:`clip_correction` (same fitted ``rho``), variance
    ``w_i E[(|z_i| - kappa)_+^2] = w_i 2 ((v + kappa^2) Phi(-a) - kappa sqrt(v) phi(a))``,
    ``v = 1 + m_i rho``, ``a = kappa/sqrt(v)``, with the plug-in ``w_i = m_i/max(sigma^2, f)``.
    The intervals of the means draw it (the estimate itself is left as it is).
    """
    m = plan.records_per_client.astype(np.float64)
    k = np.asarray(broadcast_b.kappa, dtype=np.float64)
    spread = broadcast_b.floor if broadcast_b.spread is None else broadcast_b.spread
    w = m[None, :, None] / np.maximum(spread, broadcast_b.floor)[:, None, None]  # (d, n, 1)
    target = np.asarray(big_a, dtype=np.float64)
    rho = np.concatenate([[0.0], np.logspace(-9, np.log10(1e4 * float(np.max(k)) ** 2), 400)])
    var = 1.0 + m[None, :, None] * rho[None, None, :]
    kk = k.reshape(-1)[:, None, None]
    lost_i, _ = _lost_moments(var, kk)
    kept = np.sum(var - lost_i, axis=1)
    sd = np.sqrt(var)
    a = kk / sd
    tail = (var + kk * kk) * ndtr(-a) - kk * sd * np.exp(-0.5 * a * a) / np.sqrt(2.0 * np.pi)
    scatter = np.sum(w * 2.0 * np.maximum(tail, 0.0), axis=1)  # (d, grid)
    flat = target.reshape(-1, k.size)
    out = np.empty_like(flat)
    for j in range(k.size):
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
    spread = broadcast_b.floor if broadcast_b.spread is None else broadcast_b.spread
    s2 = np.maximum(spread, broadcast_b.floor)
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
        big_a = big_a + clip_correction(plan, broadcast_b.kappa, big_a)[0]
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
        # a between-client variance of means in [0, 1] is at most 1/4
        out["tau2_raw"] = np.minimum((out["q"] - (n - 1)) / denom, MAX_WITHIN_VARIANCE)
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
    )
    return made, bc


@dataclass(frozen=True)
class MetaIntervals:
    """Confidence intervals of the private figures: ``lower[key]``, ``upper[key]``."""

    level: float
    lower: dict[str, Any]
    upper: dict[str, Any]


@dataclass(frozen=True)
class PrivateMetaAnalysis:
    """The private meta-analysis: the figures of :class:`~fa_hetdp.stats.meta.MetaAnalysis`.

    Figures not asked for (``statistics``) are NaN. :meth:`confidence_intervals` gives
    intervals for the privacy noise; ``labels`` says what was clipped or floored. ``design``
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
        self, level: float = 0.95, *, draws: int = 2000, seed: int = 0
    ) -> MetaIntervals:
        """Intervals for every figure from the known noise (a seeded parametric bootstrap).

        The released sums are redrawn with the plan's noise around the noisy values, the
        figures recomputed by :func:`figures_from_sums`; the interval of an untruncated figure
        (``q``, ``tau2`` before truncation, the means, the summed ``Q``) is the basic
        bootstrap ``[2 x - q_hi, 2 x - q_lo]``; ``i2`` and ``i2_total`` are the monotone images
        of their ``Q`` intervals and ``tau2`` the truncation of ``tau2_raw``'s. Conditional on
        the broadcasts (centre, floor, clip, round-C ``tau2``): the bias of a binding clip or
        floor is not in them (see :attr:`labels`).
        """
        if not 0.0 < level < 1.0:
            raise PrivacyParameterError(f"level must be in (0, 1), got level={level!r}.")
        if self.design == "silo-summaries":
            from fa_hetdp.protocol.silo_summaries import silo_intervals

            return silo_intervals(self, level, draws, seed)
        if self.broadcast_b is None:
            raise AggregationError("no sums to draw intervals from")
        rng = np.random.default_rng(seed)
        redrawn = {
            k: v + self.noise_std[k] * rng.standard_normal((draws, self.d))
            for k, v in self.sums.items()
        }
        if "A" in redrawn and self.plan.settings.clip_correction:
            # the realised clipped mass scatters around the model's mean: draw it too
            _, lost_var = clip_correction(self.plan, self.broadcast_b.kappa, self.sums["A"])
            redrawn["A"] = redrawn["A"] + np.sqrt(lost_var) * rng.standard_normal((draws, self.d))
            scatter_b = clip_scatter_b(self.plan, self.broadcast_b, self.sums["A"])
            redrawn["B"] = redrawn["B"] + np.sqrt(scatter_b) * rng.standard_normal((draws, self.d))
        tau2_used = None if self.broadcast_c is None else self.broadcast_c.tau2
        boot = figures_from_sums(self.plan, self.broadcast_b, redrawn, tau2_used)
        point = figures_from_sums(self.plan, self.broadcast_b, self.sums, tau2_used)
        lo_q, hi_q = (1.0 - level) / 2.0, (1.0 + level) / 2.0
        lower: dict[str, Any] = {}
        upper: dict[str, Any] = {}

        def basic(key: str) -> tuple[FloatArray, FloatArray]:
            x = point[key]
            b = boot[key]
            return 2 * x - np.quantile(b, hi_q, axis=0), 2 * x - np.quantile(b, lo_q, axis=0)

        nan = np.full(self.d, np.nan)
        n = self.n
        for key in ("pooled_mean", "random_effects_mean"):
            if key in point:
                lo, hi = basic(key)
                lower[key], upper[key] = np.clip(lo, 0, 1), np.clip(hi, 0, 1)
            else:
                lower[key], upper[key] = nan, nan
        if "q_raw" in point:
            lo, hi = basic("q_raw")
            lower["q"], upper["q"] = np.maximum(lo, 0.0), np.maximum(hi, 0.0)
            lower["i2"], upper["i2"] = i2_from_q(lower["q"], n), i2_from_q(upper["q"], n)
            lo_t, hi_t = basic("q_total")
            lower["i2_total"] = float(i2_from_q(max(float(lo_t), 0.0), n, self.d))
            upper["i2_total"] = float(i2_from_q(max(float(hi_t), 0.0), n, self.d))
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
        return MetaIntervals(level=level, lower=lower, upper=upper)


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
            )
        )
        for r in sums
    }
    i2 = get("i2", "i2")
    labels = list(plan.labels)
    s = plan.settings
    labels.append(
        f"round B clips |z| at kappa (per coordinate {float(np.min(broadcast_b.kappa)):.3g}-"
        f"{float(np.max(broadcast_b.kappa)):.3g}) and floors s^2 at f "
        f"({float(np.min(broadcast_b.floor)):.3g}-{float(np.max(broadcast_b.floor)):.3g}; "
        f"floor_fraction {s.floor_fraction:g}, min_floor {s.min_floor:g}): a client beyond the "
        "clip pulls Q and I^2 down, one below the floor gets less weight; the intervals cover "
        "the noise, not that bias"
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
