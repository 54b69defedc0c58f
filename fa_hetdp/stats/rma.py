"""The exact meta-analysis from per-study summaries, as metafor's ``rma()`` computes it.

:func:`meta_analysis_from_summaries` takes ``k`` studies' (or silos') effects ``y_i`` and their
sampling variances ``v_i`` -- what multi-site results are usually shared as -- and returns the
common-effect and random-effects analysis of the intercept-only model ``y_i = mu + u_i + e_i``,
``u_i ~ N(0, tau2)``, ``e_i ~ N(0, v_i)``. With ``w_i = 1/v_i`` and ``w*_i = 1/(v_i + tau2)``:

- common effect: ``mu_FE = sum w y/sum w``, ``SE = 1/sqrt(sum w)``, z-interval and z-test;
- Cochran's ``Q = sum w (y - mu_FE)^2`` on ``k - 1`` df and its chi-square p-value;
- ``tau2`` by DerSimonian-Laird (``"dl"``: ``max(0, (Q - (k-1))/(sum w - sum w^2/sum w))``),
  Paule-Mandel (``"pm"``: the ``tau2 >= 0`` where the generalised ``Q(tau2) = sum w*
  (y - mu(tau2))^2`` equals ``k - 1``; 0 where ``Q(0) <= k - 1``) or REML (``"reml"``: the
  maximiser over ``tau2 >= 0`` of the restricted likelihood, by Fisher scoring as metafor);
- random effects: ``mu = sum w* y/sum w*``, ``SE = 1/sqrt(sum w*)``; ``ci_method="z"``: normal
  quantiles; ``ci_method="hksj"`` (metafor's ``test="knha"``): ``SE^2`` times the Knapp-Hartung
  factor ``s2w = sum w* (y - mu)^2/(k - 1)``, t quantiles on ``k - 1`` df, the factor used as
  it is (no truncation at 1; metafor's ``test="adhoc"`` truncates, this does not);
- ``I^2 = tau2/(tau2 + s2)`` and ``H^2 = 1 + tau2/s2``, ``s2 = (k - 1)/tr P`` the typical
  within-study variance (``tr P = sum w - sum w^2/sum w``; metafor's ``vt``), at the estimated
  ``tau2`` (for DL that is ``(Q - (k-1))/Q`` and ``Q/(k-1)``);
- the Q-profile interval of ``tau2`` (Viechtbauer 2007, metafor's ``confint()``: the ``tau2``
  where ``Q(tau2)`` equals the chi-square quantiles ``1 - alpha/2`` and ``alpha/2`` on ``k - 1``
  df, each bound 0 where ``Q(0)`` is below its quantile), and ``I^2``'s and ``H^2``'s as its
  image;
- the prediction interval ``mu +- c sqrt(SE^2 + tau2)`` of metafor's ``predict()``: ``c`` the
  same quantile as the interval of ``mu`` (normal with ``"z"``, t on ``k - 1`` df with
  ``"hksj"``, where ``SE`` is the Knapp-Hartung one).

The math shared with the silos' meta-analysis (:mod:`fa_hetdp.stats.meta`) is called from there:
the DerSimonian-Laird formula and its sampling variance, the generalised-Q root finder (the
Paule-Mandel estimate and the Q-profile bounds), ``I^2`` from ``tau2``.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Final

import numpy as np
import numpy.typing as npt
from scipy.stats import chi2, norm
from scipy.stats import t as student_t

from fa_hetdp._types import FloatArray
from fa_hetdp.errors import InputDataError
from fa_hetdp.stats.meta import (
    check_level,
    dl_tau2_variance,
    i2_from_tau2,
    meta_from_effects,
    p_traces,
    q_profile,
    q_profile_solve,
    weight_traces,
)

__all__ = [
    "CI_METHODS",
    "REML_MAX_ITERATIONS",
    "TAU2_METHODS",
    "MetaAnalysisFromSummaries",
    "check_summaries",
    "meta_analysis_from_summaries",
    "tau2_dl",
    "tau2_pm",
    "tau2_reml",
]

TAU2_METHODS: Final[tuple[str, ...]] = ("dl", "pm", "reml")
"""The estimators of ``tau2``: DerSimonian-Laird, Paule-Mandel, restricted maximum likelihood."""

CI_METHODS: Final[tuple[str, ...]] = ("z", "hksj")
"""The intervals of the random-effects mean: normal (``"z"``) or Knapp-Hartung (``"hksj"``)."""

REML_MAX_ITERATIONS: Final = 1000
"""Fisher-scoring iterations before REML gives up (metafor: 100 at a looser threshold)."""

_REML_REL_TOL: Final = 1e-13
"""REML stops when a step changes ``tau2`` by less than this times ``tau2 + min(v)``."""

_TAU2_METHOD_NAMES: Final = {
    "dl": "DerSimonian-Laird",
    "pm": "Paule-Mandel",
    "reml": "REML (Fisher scoring)",
}


def check_summaries(
    effects: npt.ArrayLike, variances: npt.ArrayLike
) -> tuple[FloatArray, FloatArray]:
    """Return ``effects`` and ``variances`` as float arrays after checking them.

    Raises
    ------
    InputDataError
        Not numbers; not 1-D; not the same length; fewer than 2 studies; a value NaN or
        infinite; a variance ``<= 0``. The message says which and what is allowed.
    """
    arrays = []
    for name, value in (("effects", effects), ("variances", variances)):
        try:
            arr = np.array(value, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise InputDataError(
                f"{name} must be a 1-D array of numbers (one per study): {exc}"
            ) from exc
        if arr.ndim != 1:
            raise InputDataError(
                f"{name} must be a 1-D array (one value per study), got shape {arr.shape}."
            )
        arrays.append(arr)
    y, v = arrays
    if y.shape != v.shape:
        raise InputDataError(
            f"effects and variances must have the same length (one of each per study), got "
            f"{y.shape[0]} effects and {v.shape[0]} variances."
        )
    if y.shape[0] < 2:
        raise InputDataError(f"a meta-analysis needs at least k = 2 studies, got k = {y.shape[0]}.")
    for name, arr in (("effects", y), ("variances", v)):
        bad = np.flatnonzero(~np.isfinite(arr))
        if bad.size:
            raise InputDataError(
                f"{name} must be finite; studies {bad[:10].tolist()}"
                f"{' ...' if bad.size > 10 else ''} are NaN or infinite."
            )
    bad = np.flatnonzero(v <= 0.0)
    if bad.size:
        raise InputDataError(
            f"variances must be > 0 (a study's sampling variance); studies "
            f"{bad[:10].tolist()}{' ...' if bad.size > 10 else ''} have "
            f"{v[bad[:10]].tolist()}."
        )
    y.setflags(write=False)
    v.setflags(write=False)
    return y, v


def _column(x: FloatArray) -> FloatArray:
    """``(k,)`` as the ``(k, 1)`` the silo functions of :mod:`fa_hetdp.stats.meta` take."""
    return x[:, None]


def _random_effects(y: FloatArray, v: FloatArray, tau2: float) -> tuple[float, float, float]:
    """``mu = sum w* y/sum w*``, ``sum w*`` and ``sum w* (y - mu)^2`` at ``tau2``."""
    w = 1.0 / (v + tau2)
    sw = float(np.sum(w))
    mu = float(np.sum(w * y) / sw)
    return mu, sw, float(np.sum(w * (y - mu) ** 2))


def tau2_dl(effects: npt.ArrayLike, variances: npt.ArrayLike) -> float:
    """DerSimonian-Laird ``tau2`` (truncated at 0): :func:`~fa_hetdp.stats.meta.dl_from_sums`.

    Raises
    ------
    InputDataError
        Bad effects or variances (:func:`check_summaries`).
    """
    y, v = check_summaries(effects, variances)
    return float(meta_from_effects(_column(y), _column(v))[3][0])


def tau2_pm(effects: npt.ArrayLike, variances: npt.ArrayLike) -> float:
    """Paule-Mandel ``tau2``: the root of ``Q(tau2) = k - 1``, 0 where ``Q(0) <= k - 1``.

    ``Q(tau2)`` decreases in ``tau2``, so the root is unique; it is found by bisection to the
    last bit (:func:`~fa_hetdp.stats.meta.q_profile_solve`, the Q-profile's solver).

    Raises
    ------
    InputDataError
        Bad effects or variances (:func:`check_summaries`).
    """
    y, v = check_summaries(effects, variances)
    return float(q_profile_solve(_column(y), _column(v), float(y.shape[0] - 1))[0])


def _reml_loglik(y: FloatArray, v: FloatArray, tau2: float) -> float:
    """Return the restricted log-likelihood at ``tau2`` (without its constant)."""
    _, sw, rss = _random_effects(y, v, tau2)
    return float(-0.5 * np.sum(np.log(v + tau2)) - 0.5 * math.log(sw) - 0.5 * rss)


def _reml_step(y: FloatArray, v: FloatArray, tau2: float) -> tuple[float, float]:
    """Fisher-scoring step ``(y'PPy - tr P)/tr(PP)`` at ``tau2``, and ``tr(PP)``."""
    w = 1.0 / (v + tau2)
    s1, s2, s3 = weight_traces(_column(w))
    tr_p, tr_pp = (float(t[0]) for t in p_traces(s1, s2, s3))
    mu = float(np.sum(w * y) / s1[0])
    ypy = float(np.sum((w * (y - mu)) ** 2))
    return (ypy - tr_p) / tr_pp, tr_pp


def tau2_reml(effects: npt.ArrayLike, variances: npt.ArrayLike) -> tuple[float, tuple[str, ...]]:
    """REML ``tau2`` by Fisher scoring, as metafor's ``rma(method="REML")``; and any notes.

    From Hedges' estimate (``max(0, (sum (y - ybar)^2 - (k-1)/k sum v)/(k - 1))``), steps
    ``(y'PPy - tr P)/tr(PP)`` (``P = W - w w'/sum w``, ``w = 1/(v + tau2)``), halved while they
    would take ``tau2`` below 0, until a step moves ``tau2`` by less than ``1e-13 (tau2 + min v)``
    (metafor stops at an absolute ``1e-5``). As metafor, where the restricted likelihood at
    ``tau2 = 0`` exceeds the one at the end point (a local maximum), ``tau2`` is set to 0 and a
    note says so.

    Raises
    ------
    InputDataError
        Bad effects or variances; or no convergence in :data:`REML_MAX_ITERATIONS` steps (the
        message suggests ``"pm"`` or ``"dl"``).
    """
    y, v = check_summaries(effects, variances)
    k = y.shape[0]
    spread = float(np.sum((y - y.mean()) ** 2))
    tau2 = max(0.0, (spread - (k - 1) / k * float(np.sum(v))) / (k - 1))
    floor = float(np.min(v))
    change = math.inf
    for _ in range(REML_MAX_ITERATIONS):
        adj, _ = _reml_step(y, v, tau2)
        if tau2 == 0.0 and adj <= 0.0:
            change = 0.0
            break
        while tau2 + adj < 0.0:
            adj /= 2.0
        new = tau2 + adj
        change = abs(new - tau2)
        tau2 = new
        if change <= _REML_REL_TOL * (tau2 + floor):
            break
    else:
        raise InputDataError(
            f"tau2_method='reml': Fisher scoring did not converge in {REML_MAX_ITERATIONS} "
            f"iterations (last tau2 = {tau2:.6g}, last step {change:.3g}); the restricted "
            "likelihood of these effects may be flat or have several maxima: use "
            "tau2_method='pm' or 'dl'."
        )
    notes: tuple[str, ...] = ()
    if tau2 > 0.0 and _reml_loglik(y, v, 0.0) > _reml_loglik(y, v, tau2):
        notes = (
            f"REML: Fisher scoring stopped at a local maximum (tau2 = {tau2:.6g}); the "
            "restricted likelihood is larger at tau2 = 0, so tau2 = 0 (as metafor does)",
        )
        tau2 = 0.0
    return tau2, notes


@dataclass(frozen=True)
class MetaAnalysisFromSummaries:
    """The meta-analysis of ``k`` studies' effects and sampling variances (module docstring).

    Every interval is at ``level``; ``I^2`` is a fraction (metafor prints percent).

    Attributes
    ----------
    k : int
        Studies.
    level : float
        The intervals' coverage.
    tau2_method : str
        ``"dl"``, ``"pm"`` or ``"reml"``.
    ci_method : str
        ``"z"`` or ``"hksj"``: the interval, test and prediction interval of ``mu``.
    effects, variances : FloatArray
        ``(k,)`` the input.
    mu, mu_se : float
        Random-effects estimate and its standard error (the Knapp-Hartung one under
        ``"hksj"``: ``sqrt(hksj_factor/sum w*)``).
    mu_ci : tuple of float
        Its interval: ``mu +- c mu_se``, ``c`` normal (``"z"``) or t on ``df`` (``"hksj"``).
    mu_statistic, mu_pvalue : float
        ``mu/mu_se`` and its two-sided p-value (normal, or t on ``df``).
    df : int or None
        ``k - 1`` under ``"hksj"``; None under ``"z"``.
    hksj_factor : float
        Knapp-Hartung ``s2w = sum w* (y - mu)^2/(k - 1)`` (0 where that sum is at most machine
        epsilon, as metafor); used only under ``"hksj"``, shown under both.
    fixed_mu, fixed_se : float
        Common-effect estimate ``sum w y/sum w`` and ``1/sqrt(sum w)``.
    fixed_ci : tuple of float
        Its z-interval (z under ``"hksj"`` too: Knapp-Hartung is for the random-effects model;
        metafor warns when asked for it with ``method="FE"`` and R's meta leaves it unadjusted).
    fixed_statistic, fixed_pvalue : float
        Its z-statistic and two-sided normal p-value.
    q, q_df, q_pvalue : float, int, float
        Cochran's ``Q`` (inverse-variance weights ``1/v``), ``k - 1``, ``P(chi2_{k-1} >= Q)``.
    tau2, tau2_se : float
        ``tau2`` by ``tau2_method`` and metafor's ``se.tau2`` for it (DL: ``sqrt(Var Q)/tr P``
        at ``tau2``; PM: ``sqrt(2 k^2/(k-1))/sum w*``; REML: ``sqrt(2/tr(PP))``).
    tau2_ci : tuple of float
        Q-profile interval (Viechtbauer 2007; metafor's ``confint()``, ``type="QP"``): computed
        on first read (a root search per end; a caller that reads only the point figures, as
        ``design="auto"``'s planning trials do, does not pay for it).
    typical_variance : float
        ``s2 = (k - 1)/tr P`` (metafor's ``vt``).
    i2, h2 : float
        ``tau2/(tau2 + s2)`` and ``1 + tau2/s2``.
    i2_ci, h2_ci : tuple of float
        The images of ``tau2_ci`` (on first read, as it).
    prediction_interval : tuple of float
        Where a new study's true effect lies: ``mu +- c sqrt(mu_se^2 + tau2)``, ``c`` as in
        ``mu_ci`` (metafor's ``predict()`` default).
    notes : tuple of str
        Caveats (a REML end point replaced by 0).
    study_labels : tuple
        The studies' labels (``labels=`` of :func:`meta_analysis_from_summaries`; default
        ``1..k``): the rows of :func:`fa_hetdp.report.forest.forest_plot`.
    """

    k: int
    level: float
    tau2_method: str
    ci_method: str
    effects: FloatArray
    variances: FloatArray
    mu: float
    mu_se: float
    mu_ci: tuple[float, float]
    mu_statistic: float
    mu_pvalue: float
    df: int | None
    hksj_factor: float
    fixed_mu: float
    fixed_se: float
    fixed_ci: tuple[float, float]
    fixed_statistic: float
    fixed_pvalue: float
    q: float
    q_df: int
    q_pvalue: float
    tau2: float
    tau2_se: float
    typical_variance: float
    i2: float
    h2: float
    prediction_interval: tuple[float, float]
    notes: tuple[str, ...] = ()
    study_labels: tuple[Any, ...] = ()

    @property
    def tau(self) -> float:
        """``sqrt(tau2)``."""
        return math.sqrt(self.tau2)

    @cached_property
    def tau2_ci(self) -> tuple[float, float]:
        """The Q-profile interval of ``tau2`` at ``level`` (class docstring)."""
        lo, hi = q_profile(_column(self.effects), _column(self.variances), self.level)
        return (float(lo[0]), float(hi[0]))

    @property
    def _tr_p(self) -> float:
        return (self.k - 1) / self.typical_variance

    @cached_property
    def i2_ci(self) -> tuple[float, float]:
        """``tau2_ci``'s image ``tau2/(tau2 + s2)``."""
        lo, hi = self.tau2_ci
        return (
            float(i2_from_tau2(lo, self._tr_p, self.k)),
            float(i2_from_tau2(hi, self._tr_p, self.k)),
        )

    @cached_property
    def h2_ci(self) -> tuple[float, float]:
        """``tau2_ci``'s image ``1 + tau2/s2``."""
        lo, hi = self.tau2_ci
        return (1.0 + lo / self.typical_variance, 1.0 + hi / self.typical_variance)

    def rows(self) -> dict[str, dict[str, Any]]:
        """Return one row per figure, keyed by the figure's name.

        A row: ``estimate``, ``se``, ``ci_low``, ``ci_high``, ``statistic``, ``pvalue``,
        ``method`` (NaN where a figure has none). The figures: ``random_effects_mean``,
        ``pooled_mean`` (the common-effect estimate, as
        :class:`~fa_hetdp.stats.meta.MetaAnalysis` names it), ``tau2``, ``tau``, ``i2``,
        ``h2``, ``q`` (its statistic and p-value; no interval) and ``prediction`` (the
        prediction interval around ``mu``, ``se`` the ``sqrt(mu_se^2 + tau2)`` it uses).
        """
        nan = math.nan
        quantile = "t(k-1)" if self.ci_method == "hksj" else "normal"
        pi_se = math.sqrt(self.mu_se**2 + self.tau2)
        qp = "Q-profile (Viechtbauer 2007)"
        return {
            "random_effects_mean": _row(
                self.mu,
                self.mu_se,
                self.mu_ci,
                self.mu_statistic,
                self.mu_pvalue,
                f"{_TAU2_METHOD_NAMES[self.tau2_method]} tau2; "
                + ("Knapp-Hartung SE, t(k-1)" if self.ci_method == "hksj" else "normal"),
            ),
            "pooled_mean": _row(
                self.fixed_mu,
                self.fixed_se,
                self.fixed_ci,
                self.fixed_statistic,
                self.fixed_pvalue,
                "common effect, normal",
            ),
            "tau2": _row(self.tau2, self.tau2_se, self.tau2_ci, nan, nan, qp),
            "tau": _row(
                self.tau,
                nan,
                (math.sqrt(self.tau2_ci[0]), math.sqrt(self.tau2_ci[1])),
                nan,
                nan,
                qp,
            ),
            "i2": _row(self.i2, nan, self.i2_ci, nan, nan, f"{qp}, tau2/(tau2 + s2)"),
            "h2": _row(self.h2, nan, self.h2_ci, nan, nan, f"{qp}, 1 + tau2/s2"),
            "q": _row(self.q, nan, (nan, nan), self.q, self.q_pvalue, f"chi2({self.q_df})"),
            "prediction": _row(
                self.mu,
                pi_se,
                self.prediction_interval,
                nan,
                nan,
                f"mu +- {quantile} sqrt(SE^2 + tau2)",
            ),
        }

    def to_frame(self) -> Any:
        """Return :meth:`rows` as a pandas DataFrame (index ``figure``), the settings in ``attrs``.

        Raises
        ------
        ImportError
            pandas is not installed (it is optional: ``pip install pandas``).
        """
        try:
            pd = importlib.import_module("pandas")
        except ImportError as exc:
            raise ImportError(
                "MetaAnalysisFromSummaries.to_frame needs pandas, which is not installed: "
                "pip install pandas (rows() gives the same figures as a dict)"
            ) from exc
        frame = pd.DataFrame.from_dict(self.rows(), orient="index")
        frame.index.name = "figure"
        frame.attrs.update(
            {
                "k": self.k,
                "level": self.level,
                "tau2_method": self.tau2_method,
                "ci_method": self.ci_method,
                "q_df": self.q_df,
                "notes": list(self.notes),
            }
        )
        return frame


def _row(
    estimate: float,
    se: float,
    ci: tuple[float, float],
    statistic: float,
    pvalue: float,
    method: str,
) -> dict[str, Any]:
    return {
        "estimate": estimate,
        "se": se,
        "ci_low": ci[0],
        "ci_high": ci[1],
        "statistic": statistic,
        "pvalue": pvalue,
        "method": method,
    }


def _choice(value: str, name: str, allowed: tuple[str, ...], hint: str) -> str:
    if not isinstance(value, str) or value.lower() not in allowed:
        raise InputDataError(
            f"{name} must be one of {', '.join(repr(a) for a in allowed)} ({hint}), got "
            f"{name}={value!r}."
        )
    return value.lower()


def meta_analysis_from_summaries(
    effects: npt.ArrayLike,
    variances: npt.ArrayLike,
    *,
    tau2_method: str = "dl",
    ci_method: str = "z",
    level: float = 0.95,
    labels: Sequence[Any] | None = None,
) -> MetaAnalysisFromSummaries:
    """Return the exact common- and random-effects meta-analysis of per-study effects.

    No privacy: what metafor's ``rma(yi, vi, method=..., test=...)``, ``confint()`` and
    ``predict()`` print, from the studies' (or silos') effects and their sampling variances (module
    docstring for the formulas).

    Parameters
    ----------
    effects : array_like
        ``(k,)`` the studies' effects (e.g. :func:`fa_hetdp.stats.effect_sizes.effect_sizes`).
    variances : array_like
        ``(k,)`` their sampling variances, ``> 0``.
    tau2_method : {"dl", "pm", "reml"}
        DerSimonian-Laird, Paule-Mandel, REML (case-insensitive).
    ci_method : {"z", "hksj"}
        The random-effects mean's interval, test and prediction interval: normal, or
        Knapp-Hartung (metafor's ``test="knha"``; t on ``k - 1`` df, the factor untruncated).
    level : float
        Coverage of every interval, in (0, 1).
    labels : sequence, optional
        The studies' labels, one per study (default ``1..k``); kept as ``study_labels``.

    Returns
    -------
    MetaAnalysisFromSummaries

    Raises
    ------
    InputDataError
        Effects or variances not 1-D numbers of the same length, ``k < 2``, a non-finite
        value, a variance ``<= 0``; an unknown method; a ``level`` outside (0, 1); REML not
        converging (:func:`tau2_reml`). Every method works from ``k = 2`` (with one degree of
        freedom: the t(1) quantile under ``"hksj"`` is 12.7 at 95 %); none needs ``k >= 3``,
        since the prediction interval uses metafor's quantile, not Higgins' ``t_{k-2}``.

    Examples
    --------
    >>> res = meta_analysis_from_summaries([0.1, 0.3, 0.35, 0.65], [0.01, 0.02, 0.015, 0.03])
    >>> round(res.mu, 4), round(res.tau2, 4), round(res.q, 3)
    (0.3226, 0.029, 8.15)
    """
    y, v = check_summaries(effects, variances)
    method = _choice(
        tau2_method, "tau2_method", TAU2_METHODS, "DerSimonian-Laird, Paule-Mandel, REML"
    )
    interval = _choice(
        ci_method, "ci_method", CI_METHODS, "normal, or Knapp-Hartung: metafor's test='knha'"
    )
    lvl = check_level(level)
    k = int(y.shape[0])
    names = tuple(range(1, k + 1)) if labels is None else tuple(labels)
    if len(names) != k:
        raise InputDataError(f"labels must name every study: {len(names)} labels for k = {k}.")
    yc, vc = _column(y), _column(v)

    fe, q_arr, _, dl, _, _ = meta_from_effects(yc, vc)
    fixed_mu, q = float(fe[0]), max(0.0, float(q_arr[0]))
    s1, s2, s3 = (float(s[0]) for s in weight_traces(1.0 / vc))
    tr_p = float(p_traces(s1, s2, s3)[0])

    notes: tuple[str, ...] = ()
    if method == "dl":
        tau2 = float(dl[0])
    elif method == "pm":
        tau2 = tau2_pm(y, v)
    else:
        tau2, notes = tau2_reml(y, v)

    mu, sw_star, rss = _random_effects(y, v, tau2)
    if method == "dl":
        tau2_se = float(np.sqrt(dl_tau2_variance(s1, s2, s3, tau2, k)))
    elif method == "pm":
        tau2_se = math.sqrt(2.0 * k * k / (k - 1)) / sw_star
    else:
        tau2_se = math.sqrt(2.0 / _reml_step(y, v, tau2)[1])

    hksj = 0.0 if rss <= np.finfo(np.float64).eps else rss / (k - 1)
    alpha = 1.0 - lvl
    if interval == "hksj":
        df: int | None = k - 1
        mu_se = math.sqrt(hksj / sw_star)
        crit = float(student_t.ppf(1.0 - alpha / 2.0, k - 1))
        if mu_se > 0.0:
            stat = mu / mu_se
        else:  # every effect equal: metafor's zero factor, a zero SE
            stat = math.nan if mu == 0.0 else math.copysign(math.inf, mu)
        pvalue = float(2.0 * student_t.sf(abs(stat), k - 1))
    else:
        df = None
        mu_se = 1.0 / math.sqrt(sw_star)
        crit = float(norm.ppf(1.0 - alpha / 2.0))
        stat = mu / mu_se
        pvalue = float(2.0 * norm.sf(abs(stat)))
    z = float(norm.ppf(1.0 - alpha / 2.0))
    fixed_se = 1.0 / math.sqrt(s1)
    fixed_stat = fixed_mu / fixed_se

    typical = (k - 1) / tr_p
    i2 = float(i2_from_tau2(tau2, tr_p, k))
    pi_half = crit * math.sqrt(mu_se**2 + tau2)

    return MetaAnalysisFromSummaries(
        k=k,
        level=lvl,
        tau2_method=method,
        ci_method=interval,
        effects=y,
        variances=v,
        mu=mu,
        mu_se=mu_se,
        mu_ci=(mu - crit * mu_se, mu + crit * mu_se),
        mu_statistic=stat,
        mu_pvalue=pvalue,
        df=df,
        hksj_factor=hksj,
        fixed_mu=fixed_mu,
        fixed_se=fixed_se,
        fixed_ci=(fixed_mu - z * fixed_se, fixed_mu + z * fixed_se),
        fixed_statistic=fixed_stat,
        fixed_pvalue=float(2.0 * norm.sf(abs(fixed_stat))),
        q=q,
        q_df=k - 1,
        q_pvalue=float(chi2.sf(q, k - 1)),
        tau2=tau2,
        tau2_se=tau2_se,
        typical_variance=typical,
        i2=i2,
        h2=1.0 + tau2 / typical,
        prediction_interval=(mu - pi_half, mu + pi_half),
        notes=notes,
        study_labels=names,
    )
