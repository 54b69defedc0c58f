"""Inverse-variance meta-analysis of the clients' coordinate means, computed exactly (no noise).

Every client ``i`` holds ``m_i >= 2`` records ``x_ik`` in ``[0, 1]^d``. Per coordinate ``j``
the client's effect is its mean ``theta_ij``, its sampling variance
``v_ij = s2_ij / m_i`` (``s2`` the sample variance, ``ddof = 1``) and its inverse-variance
weight ``w_ij = 1/v_ij``. Across the ``n`` clients, per coordinate:

- fixed effect ``mu_FE = sum w theta / sum w``;
- Cochran's ``Q = sum w (theta - mu_FE)^2`` and ``I^2 = max(0, (Q - (n - 1))/Q)``;
- DerSimonian-Laird ``tau2_raw = (Q - (n - 1))/(sum w - sum w^2/sum w)``,
  ``tau2 = max(0, tau2_raw)``;
- random effects ``mu_RE = sum w* theta / sum w*`` with ``w* = 1/(v + tau2)``.

The scalars: ``i2_total`` is the ``I^2`` of the summed ``Q`` (``Q_tot = sum_j Q_j`` on
``d (n - 1)`` degrees of freedom) and ``i2_average`` the coordinate average of ``I^2``.

These equal statsmodels' ``combine_effects(theta_j, v_j, method_re="dl")`` per coordinate
(``q``, ``tau2`` before truncation, the fixed-effect mean, ``i2`` after truncation at 0), with
one deliberate difference: the random-effects weights use the *truncated* ``tau2`` (the
DerSimonian-Laird estimator as published), where statsmodels puts a negative ``tau2`` into the
weights; where ``tau2_raw >= 0`` the two agree.

A coordinate on which some client's records are constant (``v_ij = 0``; an ``SS`` at or
below the rounding of equal values, ``m (m eps theta)^2``, counts as 0) has no
inverse-variance weight (statsmodels divides by zero there too): every figure of that
coordinate is NaN, and :attr:`MetaAnalysis.labels` names it. The scalars average and sum over
the defined coordinates only.

The private path (:func:`fa_hetdp.private_meta_analysis`) computes the same figures from noisy
sums; :func:`fixed_effect_from_sums` and :func:`dl_from_sums` are the formulas both share.

Inference (:meth:`MetaAnalysis.confidence_intervals`, ``target="population"``: what metafor's
CI means, the population effect under the random-effects model): the pooled means'
z-intervals (the fixed-effect one under the common-effect model), ``tau2``'s Q-profile
interval (:func:`q_profile`, Viechtbauer 2007) and ``I^2``'s as its image
(:func:`i2_from_tau2`, as metafor does); ``Q`` and ``i2_total`` are statistics of these records
and have none. :attr:`MetaAnalysis.standard_errors` and :meth:`MetaAnalysis.prediction_interval`
(``mu +- t_{n-2} sqrt(tau2 + SE^2)``) complete it. The exact analysis has no privacy noise, so it
has no ``target="sample"`` interval: its figures are the sample values.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Final

import numpy as np
import numpy.typing as npt
from scipy.special import ndtri

from fa_hetdp._types import FloatArray
from fa_hetdp.errors import InputDataError
from fa_hetdp.stats.exact import i_squared

__all__ = [
    "FRAME_COLUMNS",
    "FRAME_FIGURES",
    "NO_POPULATION_INTERVAL",
    "PREDICTION_TARGET",
    "SUMMARY_COLUMNS",
    "TARGETS",
    "ClientSummaries",
    "MetaAnalysis",
    "MetaIntervals",
    "PredictionInterval",
    "SiloEstimates",
    "check_level",
    "check_meta_input",
    "check_target",
    "client_summaries",
    "dl_from_sums",
    "dl_tau2_variance",
    "figure_frame",
    "fixed_effect_from_sums",
    "i2_from_q",
    "i2_from_tau2",
    "meta_analysis",
    "meta_analysis_of_summaries",
    "meta_from_effects",
    "p_traces",
    "prediction_bounds",
    "q_profile",
    "q_profile_solve",
    "summary_frame",
    "typical_variance",
    "weight_traces",
]

TARGETS: Final[tuple[str, ...]] = ("population", "sample")
"""What an interval covers: ``"population"`` -- the population effect (sampling error, and on a
private result the privacy noise too); ``"sample"`` -- the exact value on these records (the
privacy noise only; private results only)."""

NO_POPULATION_INTERVAL: Final = (
    "none: a statistic of these records (a sample statistic), not a population parameter; "
    "target='sample' gives the interval of its exact value on a private result"
)
"""The method line of ``q`` and ``i2_total`` in a population :class:`MetaIntervals`."""

IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class ClientSummaries:
    """Per-client summaries of the records (what each client computes on its own data).

    Attributes
    ----------
    theta : FloatArray
        ``(n, d)`` coordinate means.
    ss : FloatArray
        ``(n, d)`` sums of squared deviations from the client's own mean.
    m : IntArray
        ``(n,)`` record counts (``>= 2``).
    """

    theta: FloatArray
    ss: FloatArray
    m: IntArray

    @property
    def s2(self) -> FloatArray:
        """``(n, d)`` sample variances (``ddof = 1``)."""
        return self.ss / (self.m[:, None] - 1.0)

    @property
    def v(self) -> FloatArray:
        """``(n, d)`` sampling variances of the means, ``s2/m``."""
        return self.s2 / self.m[:, None]


@dataclass(frozen=True)
class MetaIntervals:
    """Intervals of a meta-analysis' figures at ``level``: ``lower[key]``, ``upper[key]``.

    ``target`` says what they cover (:data:`TARGETS`): ``"population"`` -- the population
    effect, sampling error and any privacy noise; ``"sample"`` -- the exact value on these
    records, the privacy noise only. ``methods[key]`` says how each figure's interval was made;
    a figure without an interval (``q`` and ``i2_total`` under ``"population"``) is absent
    from ``lower`` and ``upper`` and its ``methods`` line says why.
    """

    level: float
    lower: dict[str, Any]
    upper: dict[str, Any]
    target: str
    methods: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class PredictionInterval:
    """Where a new silo's true mean is expected to lie, per coordinate, at ``level``."""

    level: float
    lower: FloatArray
    upper: FloatArray
    method: str


def check_target(target: str) -> str:
    """Return ``target`` if it names a kind of interval (:data:`TARGETS`); raise otherwise.

    Raises
    ------
    InputDataError
        Not ``"population"`` or ``"sample"``.
    """
    if target not in TARGETS:
        raise InputDataError(
            f"target must be 'population' (the population effect: sampling error and privacy "
            f"noise) or 'sample' (the exact value on these records: privacy noise only), got "
            f"target={target!r}."
        )
    return target


def check_level(level: float) -> float:
    """Return ``level`` as a float in (0, 1); raise otherwise.

    Raises
    ------
    InputDataError
        ``level`` outside (0, 1).
    """
    if not 0.0 < float(level) < 1.0:
        raise InputDataError(f"level must be in (0, 1), got level={level!r}.")
    return float(level)


def weight_traces(w: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray]:
    """``S1 = sum w``, ``S2 = sum w^2``, ``S3 = sum w^3`` over the silo axis (``-2``)."""
    return np.sum(w, axis=-2), np.sum(w * w, axis=-2), np.sum(w**3, axis=-2)


def p_traces(
    s1: npt.ArrayLike, s2: npt.ArrayLike, s3: npt.ArrayLike
) -> tuple[FloatArray, FloatArray]:
    """``tr P = S1 - S2/S1`` and ``tr P^2 = S2 - 2 S3/S1 + S2^2/S1^2``, ``P = W - w w'/S1``.

    ``S_j = sum w^j`` (:func:`weight_traces`) for any weights ``w`` (``1/v`` or ``1/(v + tau2)``).
    """
    a1, a2, a3 = (np.asarray(x, dtype=np.float64) for x in (s1, s2, s3))
    return np.asarray(a1 - a2 / a1), np.asarray(a2 - 2.0 * a3 / a1 + a2 * a2 / (a1 * a1))


def typical_variance(v: npt.ArrayLike) -> FloatArray:
    """Higgins & Thompson's typical within-study variance of studies' variances ``v`` (n, d).

    ``s^2 = (n - 1) S1/(S1^2 - S2)`` with ``S_j = sum w^j``, ``w = 1/v`` (Higgins & Thompson
    2002, Stat. Med. 21:1539, eq. 9): ``(n - 1)/tr P``, as :func:`i2_from_tau2` takes it.
    """
    w = 1.0 / np.asarray(v, dtype=np.float64)
    s1 = np.sum(w, axis=0)
    return np.asarray((w.shape[0] - 1) * s1 / (s1 * s1 - np.sum(w * w, axis=0)))


def dl_tau2_variance(
    s1: npt.ArrayLike, s2: npt.ArrayLike, s3: npt.ArrayLike, tau2: npt.ArrayLike, n: int
) -> FloatArray:
    """Return the sampling variance of the DerSimonian-Laird ``tau2`` at ``tau2`` (RE model).

    ``Q = y' P y`` with ``P = W - w w'/S1``: ``Var Q = 2 (n - 1) + 4 tau2 tr P + 2 tau2^2
    tr P^2``, ``tr P = S1 - S2/S1``, ``tr P^2 = S2 - 2 S3/S1 + S2^2/S1^2`` (Biggerstaff and
    Tweedie 1997; metafor's ``se.tau2`` for ``method="DL"``), and ``Var tau2 = Var Q/tr P^2``.
    """
    t2 = np.maximum(np.asarray(tau2, dtype=np.float64), 0.0)
    tr_p, tr_p2 = p_traces(s1, s2, s3)
    var_q = 2.0 * (n - 1) + 4.0 * t2 * tr_p + 2.0 * t2 * t2 * tr_p2
    return np.asarray(var_q / (tr_p * tr_p))


def i2_from_tau2(tau2: npt.ArrayLike, tr_p: npt.ArrayLike, n: int) -> FloatArray:
    """``I^2 = tau2/(tau2 + s^2)``, ``s^2 = (n - 1)/tr P`` the typical within-silo variance.

    Higgins and Thompson's ``s^2 = (n - 1) S1/(S1^2 - S2)``; at the DerSimonian-Laird
    ``tau2`` this is ``(Q - (n - 1))/Q``, and metafor maps ``tau2``'s interval through it.
    """
    t2 = np.maximum(np.asarray(tau2, dtype=np.float64), 0.0)
    typical = (n - 1) / np.asarray(tr_p, dtype=np.float64)
    return np.asarray(t2 / (t2 + typical))


def _generalised_q(theta: FloatArray, v: FloatArray, tau2: FloatArray) -> FloatArray:
    """``Q(tau2) = sum w (theta - mu_w)^2``, ``w = 1/(v + tau2)``; ``theta, v`` (n, d)."""
    w = 1.0 / (v + tau2[None, :])
    mu = np.sum(w * theta, axis=0) / np.sum(w, axis=0)
    return np.asarray(np.sum(w * (theta - mu) ** 2, axis=0))


def q_profile_solve(
    theta: FloatArray, v: FloatArray, target: npt.ArrayLike, iterations: int = 80
) -> FloatArray:
    """Return the ``tau2 >= 0`` where the generalised ``Q(tau2)`` equals ``target`` (per column).

    ``Q(tau2)`` decreases in ``tau2``; where ``Q(0) <= target`` the answer is 0. Bisection on
    ``[0, sum (theta - mean)^2/target]`` (``Q(tau2) <= sum (theta - mean)^2/tau2``).
    """
    goal = np.broadcast_to(np.asarray(target, dtype=np.float64), (theta.shape[1],))
    spread = np.sum((theta - theta.mean(axis=0)) ** 2, axis=0)
    lo = np.zeros(theta.shape[1])
    hi = spread / goal + 1e-300
    above = _generalised_q(theta, v, lo) > goal
    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        big = _generalised_q(theta, v, mid) > goal
        lo = np.where(big, mid, lo)
        hi = np.where(big, hi, mid)
    return np.asarray(np.where(above, 0.5 * (lo + hi), 0.0))


def q_profile(theta: FloatArray, v: FloatArray, level: float) -> tuple[FloatArray, FloatArray]:
    """Q-profile interval of ``tau2`` (Viechtbauer 2007) from ``(n, d)`` effects and variances.

    The bounds solve ``Q(tau2) = chi2_{n-1}`` quantiles ``1 - alpha/2`` (lower) and
    ``alpha/2`` (upper), truncated at 0; NaN where some ``v`` is not positive.
    """
    n = theta.shape[0]
    ok = np.all(np.isfinite(v) & (v > 0.0) & np.isfinite(theta), axis=0)
    th = np.where(ok[None, :], theta, 0.0)
    vs = np.where(ok[None, :], v, 1.0)
    from scipy.stats import chi2  # here: scipy.stats costs a Flower ClientApp ~0.4 s to import

    alpha = 1.0 - level
    lower = q_profile_solve(th, vs, chi2.ppf(1.0 - alpha / 2.0, n - 1))
    upper = q_profile_solve(th, vs, chi2.ppf(alpha / 2.0, n - 1))
    nan = np.where(ok, 0.0, np.nan)
    return lower + nan, upper + nan


def prediction_bounds(
    mean: npt.ArrayLike, tau2: npt.ArrayLike, se: npt.ArrayLike, n: int, level: float
) -> tuple[FloatArray, FloatArray]:
    """``mean +- t_{n-2} sqrt(tau2 + se^2)`` (Higgins, Thompson and Spiegelhalter 2009).

    NaN with fewer than 3 silos (no degrees of freedom).
    """
    mu = np.asarray(mean, dtype=np.float64)
    if n < 3:
        nan = np.full(mu.shape, np.nan)
        return nan, nan
    from scipy.stats import t as student_t

    half = float(student_t.ppf(0.5 + level / 2.0, n - 2)) * np.sqrt(
        np.maximum(np.asarray(tau2, dtype=np.float64), 0.0) + np.asarray(se, dtype=np.float64) ** 2
    )
    return np.asarray(mu - half), np.asarray(mu + half)


def _z(level: float) -> float:
    return float(ndtri(0.5 + level / 2.0))


@dataclass(frozen=True)
class MetaAnalysis:
    """The exact meta-analysis of ``n`` clients on ``d`` coordinates (module docstring).

    Attributes
    ----------
    pooled_mean, q, i2, tau2, random_effects_mean, tau2_raw : FloatArray
        ``(d,)`` per coordinate: fixed-effect mean, Cochran's Q, ``I^2`` (truncated at 0),
        DerSimonian-Laird ``tau2`` (truncated at 0), random-effects mean, ``tau2`` before
        truncation. NaN on an undefined coordinate (a client with ``v = 0``).
    i2_total : float
        ``I^2`` of ``sum_j Q_j`` on ``d (n - 1)`` degrees of freedom (defined coordinates).
    i2_average : float
        Coordinate average of ``i2`` (defined coordinates).
    n, d : int
        Clients and coordinates.
    records_per_client : IntArray
        ``(n,)`` the ``m_i``.
    labels : tuple[str, ...]
        Caveats, e.g. the undefined coordinates.
    effects, variances : FloatArray or None
        ``(n, d)`` every silo's mean and its sampling variance ``s2/m`` (the inference's input).
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
    records_per_client: IntArray
    tau2_raw: FloatArray
    labels: tuple[str, ...] = ()
    effects: FloatArray | None = None
    variances: FloatArray | None = None

    def _weights(self) -> tuple[FloatArray, FloatArray]:
        """``(n, d)`` fixed-effect and random-effects weights (NaN on undefined coordinates)."""
        if self.effects is None or self.variances is None:
            raise InputDataError(
                "this MetaAnalysis carries no per-silo effects and variances (build it with "
                "meta_analysis or meta_analysis_of_summaries) to draw inference from"
            )
        ok = np.isfinite(self.q)
        v = np.where(ok[None, :], self.variances, np.nan)
        return 1.0 / v, 1.0 / (v + self.tau2[None, :])

    @cached_property
    def standard_errors(self) -> dict[str, FloatArray]:
        """Population standard errors, ``(d,)`` each (sampling error only: no privacy noise).

        ``"pooled_mean"``: ``1/sqrt(sum w)`` (common-effect model); ``"random_effects_mean"``:
        ``1/sqrt(sum w*)``; ``"tau2"``: the DerSimonian-Laird estimator's at ``tau2``
        (:func:`dl_tau2_variance`), as metafor's ``se``, ``se.tau2``.
        """
        w, w_star = self._weights()
        s1, s2, s3 = weight_traces(w)
        return {
            "pooled_mean": np.asarray(1.0 / np.sqrt(s1)),
            "random_effects_mean": np.asarray(1.0 / np.sqrt(np.sum(w_star, axis=0))),
            "tau2": np.sqrt(dl_tau2_variance(s1, s2, s3, self.tau2, self.n)),
        }

    def confidence_intervals(
        self, level: float = 0.95, target: str = "population"
    ) -> MetaIntervals:
        """Confidence intervals of the population figures (metafor's CI).

        ``pooled_mean``: ``+- z SE`` under the common-effect model (every silo estimating one
        mean); ``random_effects_mean``: the classical DerSimonian-Laird ``+- z SE``;
        ``tau2``: Q-profile (:func:`q_profile`); ``i2``: the image of ``tau2``'s
        (:func:`i2_from_tau2`). ``q`` and ``i2_total`` have none (:data:`NO_POPULATION_INTERVAL`).

        Raises
        ------
        InputDataError
            ``target="sample"``: the exact analysis has no privacy noise, its figures are the
            exact values on these records; or a bad ``level`` or ``target``.
        """
        check_target(target)
        lvl = check_level(level)
        if target == "sample":
            raise InputDataError(
                "the exact meta-analysis has no privacy noise: its figures are the exact values "
                "on these records, so there is no target='sample' interval; "
                "target='population' gives the confidence intervals of the population effect"
            )
        z = _z(lvl)
        se = self.standard_errors
        w, _ = self._weights()
        s1, s2, _ = weight_traces(w)
        tau_lo, tau_hi = q_profile(np.asarray(self.effects), np.asarray(self.variances), lvl)
        nan = np.where(np.isfinite(self.q), 0.0, np.nan)
        tr_p = s1 - s2 / s1
        lower: dict[str, Any] = {
            "pooled_mean": self.pooled_mean - z * se["pooled_mean"],
            "random_effects_mean": self.random_effects_mean - z * se["random_effects_mean"],
            "tau2": tau_lo + nan,
            "i2": i2_from_tau2(tau_lo, tr_p, self.n) + nan,
        }
        upper: dict[str, Any] = {
            "pooled_mean": self.pooled_mean + z * se["pooled_mean"],
            "random_effects_mean": self.random_effects_mean + z * se["random_effects_mean"],
            "tau2": tau_hi + nan,
            "i2": i2_from_tau2(tau_hi, tr_p, self.n) + nan,
        }
        methods = {
            "pooled_mean": "z-interval under the common-effect model (one mean for all silos)",
            "random_effects_mean": "z-interval of the DerSimonian-Laird random-effects mean",
            "tau2": "Q-profile (Viechtbauer 2007)",
            "i2": "the image of tau2's Q-profile interval, tau2/(tau2 + s^2) (as metafor)",
            "q": NO_POPULATION_INTERVAL,
            "i2_total": NO_POPULATION_INTERVAL,
        }
        return MetaIntervals(
            level=lvl, lower=lower, upper=upper, target="population", methods=methods
        )

    def prediction_interval(self, level: float = 0.95) -> PredictionInterval:
        """Where a new silo's true mean is expected to lie: ``mu +- t_{n-2} sqrt(tau2 + SE^2)``.

        Raises
        ------
        InputDataError
            A bad ``level``.
        """
        lvl = check_level(level)
        lo, hi = prediction_bounds(
            self.random_effects_mean,
            self.tau2,
            self.standard_errors["random_effects_mean"],
            self.n,
            lvl,
        )
        return PredictionInterval(
            level=lvl,
            lower=lo,
            upper=hi,
            method="random-effects mean +- t_{n-2} sqrt(tau2 + SE^2) (Higgins et al. 2009)",
        )

    def silo_estimates(self) -> SiloEstimates:
        """Every silo's own mean and its sampling variance ``s2/m``, with the weights used.

        Raises
        ------
        InputDataError
            The result carries no per-silo effects (built without :func:`meta_analysis`).
        """
        w, w_star = self._weights()
        return SiloEstimates(
            effects=np.asarray(self.effects, dtype=np.float64),
            variances=np.asarray(self.variances, dtype=np.float64),
            weights_fixed=w,
            weights_random=w_star,
            method="the silo's mean +- z sqrt(s^2/m): its sampling error",
        )

    def to_frame(self, level: float = 0.95, target: str = "population") -> Any:
        """Return a pandas DataFrame: one row per figure per coordinate (:func:`figure_frame`).

        Index ``(column, figure)`` (``column`` the coordinate ``0..d-1``); columns
        :data:`FRAME_COLUMNS`: ``estimate``, ``se``, ``ci_low``, ``ci_high``, ``statistic`` and
        ``pvalue`` (``Q``'s chi-square test), ``target`` (what the interval covers) and
        ``method``. The figures :data:`FRAME_FIGURES` are those of
        :meth:`MetaAnalysisFromSummaries.rows <fa_hetdp.stats.rma.MetaAnalysisFromSummaries.rows>`;
        ``n``, ``d``, ``level``, ``i2_total``, ``i2_average`` and ``labels`` go into ``attrs``.

        Raises
        ------
        InputDataError
            ``target="sample"`` (the exact analysis has no privacy noise) or a bad ``level``.
        ImportError
            pandas is not installed (it is optional: ``pip install pandas``).
        """
        intervals = self.confidence_intervals(level, target)
        return figure_frame(
            self,
            intervals,
            q_pvalue=self.q_pvalue,
            attrs={"design": "exact"},
            what="MetaAnalysis.to_frame",
        )

    def summary(self, column: int | None = None, level: float = 0.95) -> Any:
        """Return statsmodels' ``summary_frame()`` layout (:func:`summary_frame`).

        One row per silo (its mean, ``sqrt(s^2/m)``, its z-interval and its relative
        fixed-effect and random-effects weights) and the rows ``"fixed effect"`` and
        ``"random effect"``; columns :data:`SUMMARY_COLUMNS`. ``column``: one coordinate (the
        index is then the rows); None: every coordinate (index ``(column, row)`` when ``d > 1``).

        Raises
        ------
        InputDataError
            ``column`` is not a coordinate, or a bad ``level``.
        ImportError
            pandas is not installed.
        """
        return summary_frame(
            self, self.silo_estimates(), level, column=column, what="MetaAnalysis.summary"
        )

    @property
    def h2(self) -> FloatArray:
        """``(d,)`` ``H^2 = 1/(1 - I^2)``: ``Q/(n - 1)`` where ``Q > n - 1``, else 1."""
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.asarray(1.0 / (1.0 - self.i2))

    @property
    def q_pvalue(self) -> FloatArray:
        """``(d,)`` ``P(chi2_{n-1} >= Q)``: Cochran's test of ``tau2 = 0`` (homogeneity)."""
        from scipy.stats import chi2

        return np.asarray(chi2.sf(self.q, self.n - 1))

    def leave_one_out(self, level: float = 0.95) -> Any:
        """Return the DerSimonian-Laird analysis without each silo in turn (a DataFrame).

        :func:`fa_hetdp.stats.silo_analyses.leave_one_out` of :meth:`silo_estimates`.
        """
        from fa_hetdp.stats.silo_analyses import leave_one_out

        silos = self.silo_estimates()
        return leave_one_out(silos.effects, silos.variances, level=level)

    def subgroups(self, moderator: Any, level: float = 0.95) -> Any:
        """Return per-group DerSimonian-Laird analyses of a site-level ``moderator`` and their test.

        :func:`fa_hetdp.stats.silo_analyses.subgroup_analysis` of :meth:`silo_estimates`
        (``moderator`` maps silo ``0..n-1`` to its group).
        """
        from fa_hetdp.stats.silo_analyses import subgroup_analysis

        silos = self.silo_estimates()
        return subgroup_analysis(silos.effects, silos.variances, moderator, level=level)


def check_meta_input(
    records: npt.ArrayLike, client_ids: npt.ArrayLike, *, one_hot: bool = False
) -> tuple[FloatArray, IntArray, int]:
    """Validate records and client ids; return them as arrays and ``n``.

    Raises
    ------
    InputDataError
        Records not a finite 2-D float array in ``[0, 1]``; ids not integers of the same
        length, not covering ``0..n-1``; fewer than 2 clients; a client with fewer than 2
        records; with ``one_hot``, a record that is not one-hot.
    """
    try:
        x = np.asarray(records, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InputDataError(
            f"records must be an (N, d) array of numbers in [0, 1]: {exc}"
        ) from exc
    if x.ndim != 2 or x.shape[0] == 0 or x.shape[1] == 0:
        raise InputDataError(f"records must be a non-empty (N, d) array, got shape {x.shape}.")
    if not np.all(np.isfinite(x)):
        raise InputDataError(
            f"records must be finite; {int(np.sum(~np.isfinite(x)))} values are NaN or inf."
        )
    if np.any(x < 0.0) or np.any(x > 1.0):
        raise InputDataError(
            f"records must lie in [0, 1]; found values in [{x.min():g}, {x.max():g}] "
            "(scale or clip them first)."
        )
    ids_raw = np.asarray(client_ids)
    if ids_raw.ndim != 1 or ids_raw.shape[0] != x.shape[0]:
        raise InputDataError(
            f"client_ids must be a 1-D array with one id per record ({x.shape[0]}), got shape "
            f"{ids_raw.shape}."
        )
    if ids_raw.dtype.kind not in "iu":
        if (
            ids_raw.dtype.kind == "b"
            or not np.all(np.isfinite(ids_raw.astype(float)))
            or np.any(ids_raw.astype(float) != np.round(ids_raw.astype(float)))
        ):
            raise InputDataError(
                f"client_ids must be integers 0..n-1, got dtype {ids_raw.dtype} with "
                "non-integer values."
            )
    ids = ids_raw.astype(np.int64)
    if ids.min() < 0:
        raise InputDataError(f"client_ids must be integers 0..n-1, got {int(ids.min())}.")
    n = int(ids.max()) + 1
    counts = np.bincount(ids, minlength=n)
    missing = np.flatnonzero(counts == 0)
    if missing.size:
        raise InputDataError(
            f"client_ids must cover every id 0..n-1 (n = {n}); missing: "
            f"{missing[:10].tolist()}{' ...' if missing.size > 10 else ''}."
        )
    if n < 2:
        raise InputDataError("a meta-analysis needs at least 2 clients, got n = 1.")
    few = np.flatnonzero(counts < 2)
    if few.size:
        raise InputDataError(
            f"every client needs at least 2 records (a sample variance); clients "
            f"{few[:10].tolist()} have {counts[few[:10]].tolist()}."
        )
    if one_hot and not (np.all((x == 0.0) | (x == 1.0)) and np.all(x.sum(axis=1) == 1.0)):
        raise InputDataError(
            "one_hot=True needs every record to be one-hot (a single 1, zeros elsewhere)."
        )
    return x, ids, n


def client_summaries(records: FloatArray, client_ids: IntArray, n: int) -> ClientSummaries:
    """Per-client means, sums of squared deviations and counts (validated input)."""
    d = records.shape[1]
    m = np.bincount(client_ids, minlength=n).astype(np.int64)
    sums = np.zeros((n, d))
    np.add.at(sums, client_ids, records)
    theta = sums / m[:, None]
    dev = records - theta[client_ids]
    ss = np.zeros((n, d))
    np.add.at(ss, client_ids, dev * dev)
    # a client whose records are all equal (a) leaves SS of rounding only: its summed mean is
    # off by at most (m - 1) u |a| (u = eps/2, sequential summation), so SS <= m (m u a)^2;
    # at or below m (m eps theta)^2 (four times that) SS is rounding, not spread: set to 0
    eps = np.finfo(np.float64).eps
    rounding = m[:, None] * (m[:, None] * eps * theta) ** 2
    ss = np.where(ss <= rounding, 0.0, ss)
    return ClientSummaries(theta=theta, ss=ss, m=m)


def i2_from_q(q: npt.ArrayLike, n: int, d: int = 1) -> FloatArray:
    """:func:`~fa_hetdp.stats.exact.i_squared` (``df = (n - 1) d``), where NaN stays NaN.

    A meta-analysis coordinate without inverse-variance weights has no Q; its I^2 is
    undefined, not 0.
    """
    qa = np.asarray(q, dtype=np.float64)
    out: FloatArray = np.where(np.isnan(qa), np.nan, i_squared(qa, n, d))
    return out


def fixed_effect_from_sums(
    a: npt.ArrayLike, b: npt.ArrayLike, c: npt.ArrayLike, centre: npt.ArrayLike
) -> tuple[FloatArray, FloatArray]:
    """Fixed-effect mean and Q from centred sums: ``mu = centre + B/C``, ``Q = A - B^2/C``.

    ``A = sum w (theta - centre)^2``, ``B = sum w (theta - centre)``, ``C = sum w``; exact for
    any ``centre``.
    """
    aa, bb, cc = (np.asarray(v, dtype=np.float64) for v in (a, b, c))
    return np.asarray(centre, dtype=np.float64) + bb / cc, aa - bb * bb / cc


def dl_from_sums(q: npt.ArrayLike, c: npt.ArrayLike, d2: npt.ArrayLike, n: int) -> FloatArray:
    """DerSimonian-Laird ``tau2`` before truncation: ``(Q - (n - 1))/(C - D/C)``.

    ``C = sum w``, ``D = sum w^2``.
    """
    qa, cc, dd = (np.asarray(v, dtype=np.float64) for v in (q, c, d2))
    return (qa - (n - 1)) / (cc - dd / cc)


def meta_from_effects(
    theta: FloatArray, v: FloatArray
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray, FloatArray, FloatArray]:
    """Per coordinate from ``(n, d)`` effects and variances: FE mean, Q, I^2, tau2, tau2_raw, RE.

    Coordinates where some ``v <= 0`` (or is not finite) come out NaN.
    """
    n = theta.shape[0]
    ok = np.all(np.isfinite(v) & (v > 0.0), axis=0)
    vs = np.where(ok[None, :], v, 1.0)
    w = 1.0 / vs
    sw = w.sum(axis=0)
    mu = (w * theta).sum(axis=0) / sw
    q = (w * (theta - mu) ** 2).sum(axis=0)
    tau2_raw = dl_from_sums(q, sw, (w * w).sum(axis=0), n)
    tau2 = np.maximum(tau2_raw, 0.0)
    ws = 1.0 / (vs + tau2)
    re = (ws * theta).sum(axis=0) / ws.sum(axis=0)
    i2 = i2_from_q(q, n)
    nan = np.where(ok, 0.0, np.nan)
    return mu + nan, q + nan, i2 + nan, tau2 + nan, tau2_raw + nan, re + nan


def _scalars(q: FloatArray, i2: FloatArray, n: int) -> tuple[float, float]:
    """``i2_total`` (summed Q) and ``i2_average`` over the defined coordinates."""
    ok = np.isfinite(q)
    if not ok.any():
        return float("nan"), float("nan")
    total = float(i2_from_q(np.sum(q[ok]), n, int(ok.sum())))
    return total, float(np.mean(i2[ok]))


def undefined_label(undefined: npt.NDArray[np.bool_]) -> tuple[str, ...]:
    """Return the label naming the coordinates without weights (empty if none)."""
    idx = np.flatnonzero(undefined)
    if not idx.size:
        return ()
    return (
        f"coordinates {idx[:20].tolist()}{' ...' if idx.size > 20 else ''} undefined (NaN): "
        "some client's records are constant there (zero variance, no inverse-variance weight)",
    )


def meta_analysis(records: npt.ArrayLike, client_ids: npt.ArrayLike) -> MetaAnalysis:
    """Exact inverse-variance meta-analysis of the clients' coordinate means (no privacy).

    Parameters
    ----------
    records : array_like
        ``(N, d)`` records, finite, in ``[0, 1]``.
    client_ids : array_like
        ``(N,)`` integer ids ``0..n-1``; every id present, each with at least 2 records.

    Returns
    -------
    MetaAnalysis
        The figures of the module docstring (NaN on a coordinate where some client's records
        are constant; its label says which).

    Raises
    ------
    InputDataError
        For malformed input (:func:`check_meta_input`).

    Examples
    --------
    >>> import numpy as np
    >>> x = np.array([[0.0], [1.0], [0.0], [0.5]])
    >>> res = meta_analysis(x, [0, 0, 1, 1])
    >>> round(float(res.pooled_mean[0]), 4), round(float(res.q[0]), 4)
    (0.3, 0.2)
    """
    x, ids, n = check_meta_input(records, client_ids)
    return meta_analysis_of_summaries(client_summaries(x, ids, n))


def meta_analysis_of_summaries(summ: ClientSummaries) -> MetaAnalysis:
    """Return the exact meta-analysis of the silos' summaries (as :func:`meta_analysis`)."""
    n, d = summ.theta.shape
    fe, q, i2, tau2, tau2_raw, re = meta_from_effects(summ.theta, summ.v)
    total, average = _scalars(q, i2, n)
    return MetaAnalysis(
        pooled_mean=fe,
        q=q,
        i2=i2,
        tau2=tau2,
        random_effects_mean=re,
        i2_total=total,
        i2_average=average,
        n=n,
        d=d,
        records_per_client=summ.m,
        tau2_raw=tau2_raw,
        labels=undefined_label(~np.isfinite(q)),
        effects=summ.theta,
        variances=summ.v,
    )


# ------------------------------------------------------------------------------ frames out
FRAME_COLUMNS: Final[tuple[str, ...]] = (
    "estimate",
    "se",
    "ci_low",
    "ci_high",
    "statistic",
    "pvalue",
    "target",
    "method",
)
"""The columns of a meta result's ``to_frame()`` (those of
:meth:`fa_hetdp.stats.rma.MetaAnalysisFromSummaries.to_frame` and ``target``; a private result
adds ``design``)."""

FRAME_FIGURES: Final[tuple[str, ...]] = (
    "random_effects_mean",
    "pooled_mean",
    "tau2",
    "tau",
    "i2",
    "h2",
    "q",
    "prediction",
)
"""The figures of ``to_frame()``, per column, in the order (and with the names) of
:meth:`fa_hetdp.stats.rma.MetaAnalysisFromSummaries.rows`."""

SUMMARY_COLUMNS: Final[tuple[str, ...]] = ("eff", "sd_eff", "ci_low", "ci_upp", "w_fe", "w_re")
"""The columns of ``summary()``: statsmodels' ``CombineResults.summary_frame()``."""

PREDICTION_TARGET: Final = "new silo"
"""The ``target`` of the prediction row: a new silo's true mean."""


@dataclass(frozen=True)
class SiloEstimates:
    """Every silo's own estimate per coordinate, the variance of its interval and its weights.

    Attributes
    ----------
    effects : FloatArray
        ``(n, d)`` each silo's mean (a private result: its noisy released mean).
    variances : FloatArray
        ``(n, d)`` the variance of that estimate around the silo's true mean: its sampling
        variance, plus the privacy noise's variance where the mean was released with noise.
    weights_fixed, weights_random : FloatArray
        ``(n, d)`` the fixed-effect and random-effects weights the pooled estimates used.
    method : str
        How the variances were made.
    """

    effects: FloatArray
    variances: FloatArray
    weights_fixed: FloatArray
    weights_random: FloatArray
    method: str


def import_pandas(what: str) -> Any:
    """Return the pandas module, or raise an ImportError saying ``what`` needs it.

    Raises
    ------
    ImportError
        pandas is not installed (it is optional: ``pip install pandas``).
    """
    try:
        return importlib.import_module("pandas")
    except ImportError as exc:
        raise ImportError(
            f'{what} needs pandas, which is not installed: pip install "fa-hetdp[frames]"'
        ) from exc


def _vector(value: Any, d: int) -> FloatArray:
    return np.asarray(np.broadcast_to(np.asarray(value, dtype=np.float64), (d,)))


def figure_frame(
    result: Any,
    intervals: MetaIntervals,
    *,
    names: Sequence[Any] | None = None,
    q_pvalue: npt.ArrayLike | None = None,
    extra: Mapping[str, Any] | None = None,
    attrs: Mapping[str, Any] | None = None,
    what: str = "to_frame",
) -> Any:
    """Return a meta result's figures as a DataFrame: one row per figure per column.

    ``result`` has the figures (``pooled_mean``, ``random_effects_mean``, ``tau2``, ``i2``,
    ``q``; ``(d,)`` each), ``standard_errors`` and ``prediction_interval(level)``; ``intervals``
    its :meth:`confidence_intervals` at the level and target wanted. Index ``(column, figure)``
    (``names``: the columns' names, default ``0..d-1``); columns :data:`FRAME_COLUMNS` and
    ``extra``'s (one value for every row). ``se`` is the population standard error (NaN for a
    ``target="sample"`` frame, whose intervals cover the noise only); ``tau`` is ``sqrt(tau2)``
    with the square roots of ``tau2``'s bounds; ``h2 = 1/(1 - I^2)`` with the image of ``I^2``'s
    bounds (``Q/(n - 1)`` where ``Q > n - 1``); ``q`` has no interval, its ``statistic`` is
    ``Q`` and ``pvalue`` is ``q_pvalue`` (NaN when None); ``prediction`` is the random-effects
    mean with :meth:`prediction_interval` and ``se = sqrt(SE^2 + tau2)``, target
    :data:`PREDICTION_TARGET`. ``attrs`` joins ``n``, ``d``, ``level``, ``target``,
    ``i2_total``, ``i2_average`` and ``labels`` in the frame's ``attrs``.

    Raises
    ------
    ImportError
        pandas is not installed (``what`` names the caller).
    """
    pd = import_pandas(what)
    d = int(result.d)
    cols = list(range(d)) if names is None else list(names)
    nan = np.full(d, np.nan)
    target = intervals.target
    population = target == "population"
    se = result.standard_errors
    prediction = result.prediction_interval(intervals.level)

    def bounds(key: str) -> tuple[FloatArray, FloatArray]:
        return (
            _vector(intervals.lower.get(key, nan), d),
            _vector(intervals.upper.get(key, nan), d),
        )

    def se_of(key: str) -> FloatArray:
        return _vector(se.get(key, nan), d) if population else nan

    tau2 = _vector(result.tau2, d)
    i2 = _vector(result.i2, d)
    q = _vector(result.q, d)
    re = _vector(result.random_effects_mean, d)
    tau_lo, tau_hi = bounds("tau2")
    i2_lo, i2_hi = bounds("i2")
    pvalue = nan if q_pvalue is None else _vector(q_pvalue, d)
    methods = intervals.methods
    with np.errstate(divide="ignore", invalid="ignore"):
        h2, h2_lo, h2_hi = 1.0 / (1.0 - i2), 1.0 / (1.0 - i2_lo), 1.0 / (1.0 - i2_hi)
        se_prediction = np.sqrt(_vector(se.get("random_effects_mean", nan), d) ** 2 + tau2)
    q_method = methods.get("q", "")
    if q_pvalue is not None:
        q_method = f"chi2({int(result.n) - 1}) test of Q; interval: {q_method}"
    figures: dict[str, tuple[Any, ...]] = {
        "random_effects_mean": (
            re,
            se_of("random_effects_mean"),
            bounds("random_effects_mean"),
            nan,
            nan,
            target,
            methods.get("random_effects_mean", ""),
        ),
        "pooled_mean": (
            _vector(result.pooled_mean, d),
            se_of("pooled_mean"),
            bounds("pooled_mean"),
            nan,
            nan,
            target,
            methods.get("pooled_mean", ""),
        ),
        "tau2": (tau2, se_of("tau2"), (tau_lo, tau_hi), nan, nan, target, methods.get("tau2", "")),
        "tau": (
            np.sqrt(tau2),
            nan,
            (np.sqrt(tau_lo), np.sqrt(tau_hi)),
            nan,
            nan,
            target,
            "sqrt(tau2), the square roots of tau2's bounds",
        ),
        "i2": (i2, nan, (i2_lo, i2_hi), nan, nan, target, methods.get("i2", "")),
        "h2": (h2, nan, (h2_lo, h2_hi), nan, nan, target, "1/(1 - I^2), the image of I^2's bounds"),
        "q": (q, nan, (nan, nan), q, pvalue, target, q_method),
        "prediction": (
            re,
            se_prediction,
            (_vector(prediction.lower, d), _vector(prediction.upper, d)),
            nan,
            nan,
            PREDICTION_TARGET,
            prediction.method,
        ),
    }
    rows: list[dict[str, Any]] = []
    for j in range(d):
        for key in FRAME_FIGURES:
            est, err, (lo, hi), stat, pval, covers, method = figures[key]
            rows.append(
                {
                    "column": cols[j],
                    "figure": key,
                    "estimate": float(est[j]),
                    "se": float(err[j]),
                    "ci_low": float(lo[j]),
                    "ci_high": float(hi[j]),
                    "statistic": float(stat[j]),
                    "pvalue": float(pval[j]),
                    "target": covers,
                    "method": method,
                    **dict(extra or {}),
                }
            )
    frame = pd.DataFrame(rows).set_index(["column", "figure"])
    frame.attrs.update(
        {
            "n": int(result.n),
            "d": d,
            "level": float(intervals.level),
            "target": target,
            "i2_total": float(result.i2_total),
            "i2_average": float(result.i2_average),
            "labels": [str(label) for label in result.labels],
            **dict(attrs or {}),
        }
    )
    return frame


def summary_frame(
    result: Any,
    silos: SiloEstimates | None,
    level: float = 0.95,
    *,
    column: Any = None,
    names: Sequence[Any] | None = None,
    silo_names: Sequence[Any] | None = None,
    what: str = "summary",
) -> Any:
    """Return a meta result as statsmodels' ``summary_frame()`` lays it out.

    Per column: one row per silo where ``silos`` is given (``eff`` its estimate, ``sd_eff`` the
    square root of its variance, ``ci_low``/``ci_upp`` ``eff +- z sd_eff``, ``w_fe``/``w_re`` its
    share of the fixed-effect and random-effects weights), then ``"fixed effect"`` and
    ``"random effect"``: the pooled means with their population standard errors and
    confidence intervals (``w_fe`` 1 and ``w_re`` NaN on the first, the other way round on the
    second, as statsmodels). Columns :data:`SUMMARY_COLUMNS`. ``column`` (a name of ``names``,
    default ``0..d-1``): that column only, index the rows; None: every column, index
    ``(column, row)`` when there are several (the rows alone for one). ``silo_names``: the
    silos' row labels (default ``0..n-1``).

    Raises
    ------
    InputDataError
        ``column`` is not one of the columns.
    ImportError
        pandas is not installed (``what`` names the caller).
    """
    pd = import_pandas(what)
    lvl = check_level(level)
    d = int(result.d)
    cols = list(range(d)) if names is None else list(names)
    if column is not None and column not in cols:
        raise InputDataError(f"unknown column {column!r}; the result's columns: {cols}.")
    wanted = range(d) if column is None else [cols.index(column)]
    rows_of = list(range(int(result.n))) if silo_names is None else list(silo_names)
    intervals = result.confidence_intervals(lvl, "population")
    se = result.standard_errors
    z = _z(lvl)
    nan = float("nan")
    rows: list[dict[str, Any]] = []
    for j in wanted:
        if silos is not None:
            eff = silos.effects[:, j]
            sd = np.sqrt(silos.variances[:, j])
            w_fe = silos.weights_fixed[:, j] / np.sum(silos.weights_fixed[:, j])
            w_re = silos.weights_random[:, j] / np.sum(silos.weights_random[:, j])
            for i, name in enumerate(rows_of):
                values = (eff[i], sd[i], eff[i] - z * sd[i], eff[i] + z * sd[i], w_fe[i], w_re[i])
                rows.append({"column": cols[j], "row": name, **_summary_row(values)})
        for label, key, weights in (
            ("fixed effect", "pooled_mean", (1.0, nan)),
            ("random effect", "random_effects_mean", (nan, 1.0)),
        ):
            values = (
                _vector(getattr(result, key), d)[j],
                _vector(se[key], d)[j],
                _vector(intervals.lower[key], d)[j],
                _vector(intervals.upper[key], d)[j],
                *weights,
            )
            rows.append({"column": cols[j], "row": label, **_summary_row(values)})
    frame = pd.DataFrame(rows)
    if column is not None or d == 1:
        frame = frame.drop(columns="column").set_index("row")
    else:
        frame = frame.set_index(["column", "row"])
    frame.attrs.update({"level": lvl, "silo_rows": silos is not None})
    return frame


def _summary_row(values: Sequence[Any]) -> dict[str, float]:
    return {key: float(v) for key, v in zip(SUMMARY_COLUMNS, values, strict=True)}
