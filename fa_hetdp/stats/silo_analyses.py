"""Analyses of the silos' own estimates: other estimators, leave-one-out, subgroups.

Every function here takes per-silo effects ``y`` ``(n, d)`` and the variances they carry ``v``
``(n, d)`` -- the exact analysis' means and ``s^2/m``, the silo-summaries design's noisy released
means and ``s^2^/m + sigma_noise^2``, a two-arm analysis' effects -- and runs metafor's
``rma()`` (:func:`~fa_hetdp.stats.rma.meta_analysis_from_summaries`) on them, per column. On a
private result that is post-processing of what was released: it spends no privacy budget.

- :class:`SummariesMetaAnalysis`: the random-effects analysis with ``tau2_method`` (``"dl"``,
  ``"pm"``, ``"reml"``) and ``ci_method`` (``"z"``, ``"hksj"``), the figures named as
  :class:`~fa_hetdp.stats.meta.MetaAnalysis` names them. For the silo-summaries design it
  estimates the population random-effects model with the privacy noise as extra within-silo
  variance: ``y~_i ~ N(mu, tau2 + v_i + sigma_i^2)``, the noise independent with known variance.
- :func:`leave_one_out`: the analysis without each silo in turn (metafor's ``leave1out()``).
- :func:`subgroup_analysis`: per level of a public site-level moderator, the analysis of that
  level's silos (its own ``tau2``), and the test of their difference: ``Q_between = sum_g w_g
  (mu_g - mu_bar)^2``, ``w_g = 1/SE_g^2``, ``mu_bar = sum w_g mu_g/sum w_g``, chi-square on
  ``G - 1`` df -- metafor's subgroup meta-analysis with a fixed-effects model across subgroups
  (``rma(mu_g, sei=SE_g, mods=~group, method="FE")``'s ``QM``; R meta's ``Q.b.random`` with
  ``tau.common=FALSE``).

Where only sums over all silos were released (the secure sums) no silo's estimate exists:
these are refused there (:data:`NO_SILO_ESTIMATES`).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Final

import numpy as np
import numpy.typing as npt
from scipy.stats import chi2

from fa_hetdp._types import FloatArray
from fa_hetdp.errors import InputDataError
from fa_hetdp.stats.meta import (
    MetaIntervals,
    PredictionInterval,
    SiloEstimates,
    check_level,
    check_target,
    figure_frame,
    i2_from_q,
    import_pandas,
    summary_frame,
)
from fa_hetdp.stats.rma import (
    CI_METHODS,
    TAU2_METHODS,
    MetaAnalysisFromSummaries,
    meta_analysis_from_summaries,
)

__all__ = [
    "LOO_COLUMNS",
    "NO_SILO_ESTIMATES",
    "PerColumnAnalyses",
    "SubgroupAnalysis",
    "SummariesMetaAnalysis",
    "check_methods",
    "leave_one_out",
    "subgroup_analysis",
]

NO_SILO_ESTIMATES: Final = (
    "{what} needs every site's own estimate, and the secure sums released only sums over all "
    "sites (the server holds no per-site estimate): run design='silo-summaries' for it"
)
"""The one-line refusal of an analysis of the sites' estimates under the secure sums."""

LOO_COLUMNS: Final[tuple[str, ...]] = (
    "k",
    "estimate",
    "se",
    "ci_low",
    "ci_high",
    "pvalue",
    "tau2",
    "i2",
    "h2",
    "q",
    "q_pvalue",
)
"""The columns of :func:`leave_one_out`'s frame."""


def check_methods(tau2_method: Any, ci_method: Any) -> tuple[str, str]:
    """Return the two methods lower-cased after checking them.

    Raises
    ------
    InputDataError
        A method not in :data:`~fa_hetdp.stats.rma.TAU2_METHODS` or
        :data:`~fa_hetdp.stats.rma.CI_METHODS`.
    """
    out = []
    for name, value, allowed in (
        ("tau2_method", tau2_method, TAU2_METHODS),
        ("ci_method", ci_method, CI_METHODS),
    ):
        if not isinstance(value, str) or value.lower() not in allowed:
            raise InputDataError(
                f"{name} must be one of {', '.join(repr(a) for a in allowed)}, got "
                f"{name}={value!r}."
            )
        out.append(value.lower())
    return out[0], out[1]


def _analyses(
    y: FloatArray, v: FloatArray, tau2_method: str, ci_method: str, level: float
) -> tuple[MetaAnalysisFromSummaries, ...]:
    return tuple(
        meta_analysis_from_summaries(
            y[:, j], v[:, j], tau2_method=tau2_method, ci_method=ci_method, level=level
        )
        for j in range(y.shape[1])
    )


class PerColumnAnalyses(ABC):
    """The figures of a result made of one meta-analysis of summaries per column.

    :class:`SummariesMetaAnalysis` and the two-arm analysis
    (:class:`fa_hetdp.protocol.two_arm.TwoArmMetaAnalysis`) share them: ``(d,)`` arrays read
    off ``analyses`` (one :class:`MetaAnalysisFromSummaries` per column), the sites from
    ``effects``, the design from ``design``; each result gives its own ``i2``.
    """

    effects: FloatArray
    analyses: tuple[MetaAnalysisFromSummaries, ...]
    design: str

    @property
    @abstractmethod
    def i2(self) -> FloatArray:
        """``(d,)`` I^2 per column (each result says from which variances)."""

    @property
    def n(self) -> int:
        """Silos."""
        return int(self.effects.shape[0])

    @property
    def d(self) -> int:
        """Columns."""
        return int(self.effects.shape[1])

    @property
    def private(self) -> bool:
        """Whether the estimates are private releases."""
        return self.design != "exact"

    def _figure(self, name: str) -> FloatArray:
        return np.array([float(getattr(a, name)) for a in self.analyses])

    @property
    def pooled_mean(self) -> FloatArray:
        """``(d,)`` the common-effect estimate."""
        return self._figure("fixed_mu")

    @property
    def random_effects_mean(self) -> FloatArray:
        """``(d,)`` the random-effects estimate (``tau2_method``)."""
        return self._figure("mu")

    @property
    def tau2(self) -> FloatArray:
        """``(d,)`` ``tau2`` by ``tau2_method``."""
        return self._figure("tau2")

    @property
    def q(self) -> FloatArray:
        """``(d,)`` Cochran's ``Q`` of the estimates with the variances they carry."""
        return self._figure("q")

    @property
    def q_pvalue(self) -> FloatArray:
        """``(d,)`` ``P(chi2_{n-1} >= Q)``: the test of ``tau2 = 0``.

        Valid on a private result too: ``Q`` is a statistic of the released estimates with the
        noise's known variance in their variances, so under ``tau2 = 0`` it is chi-square on
        ``n - 1`` df as in any meta-analysis (the sampling variances estimated, as always).
        """
        return self._figure("q_pvalue")

    @property
    def i2_total(self) -> float:
        """``I^2`` of ``Q`` summed over the columns (``(n - 1) d`` df)."""
        return float(i2_from_q(float(np.sum(self.q)), self.n, self.d))

    @property
    def i2_average(self) -> float:
        """The columns' average ``I^2``."""
        return float(np.mean(self.i2))

    @cached_property
    def standard_errors(self) -> dict[str, FloatArray]:
        """``pooled_mean``, ``random_effects_mean`` (Knapp-Hartung under ``"hksj"``), ``tau2``."""
        return {
            "pooled_mean": self._figure("fixed_se"),
            "random_effects_mean": self._figure("mu_se"),
            "tau2": self._figure("tau2_se"),
        }


@dataclass(frozen=True)
class SummariesMetaAnalysis(PerColumnAnalyses):
    """The random-effects analysis of the silos' estimates by ``tau2_method`` and ``ci_method``.

    Per column ``j``: :func:`~fa_hetdp.stats.rma.meta_analysis_from_summaries` of
    ``(effects[:, j], variances[:, j])`` (module docstring). A private one (``design`` not
    ``"exact"``) is post-processing of the released silo summaries: no extra privacy budget;
    ``base`` is the result whose releases they are (its guarantee: ``spent``,
    ``unit_of_privacy``, ``adversary``, ``server_saw``).

    Attributes
    ----------
    effects, variances : FloatArray
        ``(n, d)`` the silos' estimates and the variances they carry (private: with the noise).
    analyses : tuple of MetaAnalysisFromSummaries
        One per column, at ``level``.
    tau2_method, ci_method : str
        The estimator of ``tau2`` and the interval of the random-effects mean.
    design : str
        ``"exact"``, ``"silo-summaries"``, or a two-arm result's design.
    base : object or None
        The result these estimates came from.
    labels : tuple of str
        What ran.
    effect : str
        ``"mean"`` or the two-arm effect.
    """

    effects: FloatArray
    variances: FloatArray
    analyses: tuple[MetaAnalysisFromSummaries, ...]
    tau2_method: str = "dl"
    ci_method: str = "z"
    design: str = "exact"
    base: Any = None
    labels: tuple[str, ...] = ()
    effect: str = "mean"
    records: Any = field(default=None, repr=False)

    @classmethod
    def of(
        cls,
        effects: npt.ArrayLike,
        variances: npt.ArrayLike,
        *,
        tau2_method: str = "dl",
        ci_method: str = "z",
        design: str = "exact",
        base: Any = None,
        labels: Sequence[str] = (),
        effect: str = "mean",
        records_per_client: Any = None,
    ) -> SummariesMetaAnalysis:
        """Run the analysis of ``(n, d)`` effects and variances (post-processing only).

        Raises
        ------
        InputDataError
            Bad methods, or a column whose effects or variances
            :func:`~fa_hetdp.stats.rma.meta_analysis_from_summaries` refuses (a variance 0:
            a site whose records are constant there).
        """
        method, interval = check_methods(tau2_method, ci_method)
        y = np.array(effects, dtype=np.float64, ndmin=2)
        v = np.array(variances, dtype=np.float64, ndmin=2)
        analyses = _analyses(y, v, method, interval, 0.95)
        what = (
            f"{method.upper()} tau2, "
            + ("Knapp-Hartung t(k-1) interval" if interval == "hksj" else "z-interval")
            + " of the sites' estimates"
            + (
                " (post-processing of the released silo summaries: no extra privacy budget)"
                if design != "exact"
                else ""
            )
        )
        return cls(
            effects=y,
            variances=v,
            analyses=analyses,
            tau2_method=method,
            ci_method=interval,
            design=design,
            base=base,
            labels=(*labels, what),
            effect=effect,
            records=records_per_client,
        )

    # ---------------------------------------------------------------- what ran
    @property
    def records_per_client(self) -> Any:
        """``(n,)`` the sites' record counts (the base result's)."""
        if self.records is not None:
            return self.records
        return getattr(self.base, "records_per_client", None)

    @property
    def spent(self) -> Any:
        """The base result's privacy spent (None for the exact analysis)."""
        return getattr(self.base, "spent", None)

    @property
    def unit_of_privacy(self) -> str:
        """The base result's unit of privacy (empty for the exact analysis)."""
        return str(getattr(self.base, "unit_of_privacy", ""))

    @property
    def adversary(self) -> str:
        """Whom the base result's guarantee holds against."""
        return str(getattr(self.base, "adversary", ""))

    @property
    def server_saw(self) -> str:
        """What the server saw."""
        return str(getattr(self.base, "server_saw", ""))

    # ---------------------------------------------------------------- figures
    @property
    def tau2_raw(self) -> FloatArray:
        """``(d,)`` ``(Q - (n - 1))/tr P``: the DerSimonian-Laird ``tau2`` before truncation."""
        q, typical = self.q, self._figure("typical_variance")
        return np.asarray((q - (self.n - 1)) * typical / (self.n - 1))

    @property
    def i2(self) -> FloatArray:
        """``(d,)`` ``I^2 = tau2/(tau2 + s^2)`` (metafor's; ``s^2`` from the carried variances)."""
        return self._figure("i2")

    @property
    def h2(self) -> FloatArray:
        """``(d,)`` ``H^2 = 1 + tau2/s^2 = 1/(1 - I^2)``."""
        return self._figure("h2")

    # ---------------------------------------------------------------- inference
    def _analyses_at(self, level: float) -> tuple[MetaAnalysisFromSummaries, ...]:
        lvl = check_level(level)
        if lvl == self.analyses[0].level:
            return self.analyses
        return _analyses(self.effects, self.variances, self.tau2_method, self.ci_method, lvl)

    def confidence_intervals(
        self, level: float = 0.95, target: str = "population", **options: Any
    ) -> MetaIntervals:
        """Metafor's intervals at ``level`` (population: sampling error and any noise).

        ``options`` (a private result's ``draws``, ``seed``) are accepted and unused.

        Raises
        ------
        InputDataError
            ``target="sample"`` (not built here), a bad ``level`` or ``target``.
        """
        check_target(target)
        if target == "sample":
            raise InputDataError(
                f"target='sample' is not built for tau2_method={self.tau2_method!r}, "
                f"ci_method={self.ci_method!r}; target='population' gives the intervals of "
                "the population effect."
            )
        analyses = self._analyses_at(level)
        lower: dict[str, Any] = {}
        upper: dict[str, Any] = {}
        for key, name in (
            ("pooled_mean", "fixed_ci"),
            ("random_effects_mean", "mu_ci"),
            ("tau2", "tau2_ci"),
            ("i2", "i2_ci"),
        ):
            lower[key] = np.array([getattr(a, name)[0] for a in analyses])
            upper[key] = np.array([getattr(a, name)[1] for a in analyses])
        rows = analyses[0].rows()
        methods = {key: str(rows[key]["method"]) for key in ("pooled_mean", "tau2", "i2")}
        methods["random_effects_mean"] = str(rows["random_effects_mean"]["method"])
        methods["q"] = "none: a statistic of the sites' estimates"
        methods["i2_total"] = methods["q"]
        return MetaIntervals(
            level=check_level(level), lower=lower, upper=upper, target="population", methods=methods
        )

    def prediction_interval(self, level: float = 0.95) -> PredictionInterval:
        """Metafor's ``predict()``: ``mu +- c sqrt(SE^2 + tau2)`` (``c`` as ``mu``'s interval)."""
        analyses = self._analyses_at(level)
        return PredictionInterval(
            level=check_level(level),
            lower=np.array([a.prediction_interval[0] for a in analyses]),
            upper=np.array([a.prediction_interval[1] for a in analyses]),
            method=str(analyses[0].rows()["prediction"]["method"]) + " (metafor's predict())",
        )

    def silo_estimates(self) -> SiloEstimates:
        """Return the sites' estimates, the variances they carry and the weights used."""
        v = self.variances
        return SiloEstimates(
            effects=self.effects,
            variances=v,
            weights_fixed=np.asarray(1.0 / v),
            weights_random=np.asarray(1.0 / (v + self.tau2[None, :])),
            method="the site's estimate +- z sqrt(v)"
            + (": v its sampling variance plus its privacy noise's" if self.private else ""),
        )

    # ---------------------------------------------------------------- frames and analyses
    def to_frame(self, level: float = 0.95, target: str = "population", **options: Any) -> Any:
        """One row per figure per column (:func:`~fa_hetdp.stats.meta.figure_frame`)."""
        return figure_frame(
            self,
            self.confidence_intervals(level, target),
            q_pvalue=self._figure("q_pvalue"),
            extra={"design": self.design} if self.private else None,
            attrs={
                "design": self.design,
                "tau2_method": self.tau2_method,
                "ci_method": self.ci_method,
            },
            what="SummariesMetaAnalysis.to_frame",
        )

    def summary(self, column: int | None = None, level: float = 0.95) -> Any:
        """Statsmodels' ``summary_frame()`` layout (:func:`~fa_hetdp.stats.meta.summary_frame`)."""
        return summary_frame(
            self, self.silo_estimates(), level, column=column, what="SummariesMetaAnalysis.summary"
        )

    def leave_one_out(self, level: float = 0.95) -> Any:
        """:func:`leave_one_out` of the sites' estimates, with this analysis' methods."""
        return leave_one_out(
            self.effects,
            self.variances,
            tau2_method=self.tau2_method,
            ci_method=self.ci_method,
            level=level,
        )

    def subgroups(self, moderator: Any, level: float = 0.95) -> SubgroupAnalysis:
        """:func:`subgroup_analysis` of the sites' estimates, with this analysis' methods."""
        return subgroup_analysis(
            self.effects,
            self.variances,
            moderator,
            tau2_method=self.tau2_method,
            ci_method=self.ci_method,
            level=level,
        )


def _as_2d(effects: npt.ArrayLike, variances: npt.ArrayLike) -> tuple[FloatArray, FloatArray]:
    y = np.asarray(effects, dtype=np.float64)
    v = np.asarray(variances, dtype=np.float64)
    if y.ndim == 1:
        y, v = y[:, None], v[:, None]
    if y.ndim != 2 or y.shape != v.shape:
        raise InputDataError(
            f"effects and variances must be (n, d) arrays of one shape, got {y.shape} and "
            f"{v.shape}."
        )
    return y, v


def _names(given: Sequence[Any] | None, count: int, what: str) -> list[Any]:
    if given is None:
        return list(range(count))
    out = list(given)
    if len(out) != count:
        raise InputDataError(f"{len(out)} {what} names for {count} {what}s.")
    return out


def leave_one_out(
    effects: npt.ArrayLike,
    variances: npt.ArrayLike,
    *,
    sites: Sequence[Any] | None = None,
    columns: Sequence[Any] | None = None,
    tau2_method: str = "dl",
    ci_method: str = "z",
    level: float = 0.95,
) -> Any:
    """Return the analysis without each site in turn (metafor's ``leave1out()``), as a frame.

    Index ``(column, left_out)``: one row per column per left-out site; columns
    :data:`LOO_COLUMNS` -- ``k`` (``n - 1``), the random-effects ``estimate``, its ``se`` and
    interval (``ci_method``), its ``pvalue``, ``tau2`` (``tau2_method``), ``i2``, ``h2``, ``Q`` and
    its p-value. Post-processing of the sites' estimates: no privacy budget.

    Raises
    ------
    InputDataError
        Fewer than 3 sites; bad methods, names or estimates.
    ImportError
        pandas is not installed.
    """
    pd = import_pandas("leave_one_out")
    method, interval = check_methods(tau2_method, ci_method)
    lvl = check_level(level)
    y, v = _as_2d(effects, variances)
    n, d = y.shape
    if n < 3:
        raise InputDataError(
            f"leave-one-out needs at least 3 sites (2 left after one is out), got {n}."
        )
    site_names = _names(sites, n, "site")
    col_names = _names(columns, d, "column")
    rows = []
    for j in range(d):
        for i in range(n):
            keep = np.arange(n) != i
            a = meta_analysis_from_summaries(
                y[keep, j], v[keep, j], tau2_method=method, ci_method=interval, level=lvl
            )
            rows.append(
                {
                    "column": col_names[j],
                    "left_out": site_names[i],
                    "k": a.k,
                    "estimate": a.mu,
                    "se": a.mu_se,
                    "ci_low": a.mu_ci[0],
                    "ci_high": a.mu_ci[1],
                    "pvalue": a.mu_pvalue,
                    "tau2": a.tau2,
                    "i2": a.i2,
                    "h2": a.h2,
                    "q": a.q,
                    "q_pvalue": a.q_pvalue,
                }
            )
    frame = pd.DataFrame(rows).set_index(["column", "left_out"])
    frame.attrs.update({"level": lvl, "tau2_method": method, "ci_method": interval, "n": n, "d": d})
    return frame


@dataclass(frozen=True)
class SubgroupAnalysis:
    """Per-level analyses of a site-level moderator and the test of their difference.

    Attributes
    ----------
    groups : pandas.DataFrame
        Index ``(column, group)``; columns ``k``, ``estimate``, ``se``, ``ci_low``, ``ci_high``,
        ``tau2``, ``i2`` (each level's own random-effects analysis).
    test : pandas.DataFrame
        Index ``column``; ``q_between``, ``df`` (``G - 1``) and ``pvalue`` (chi-square).
    """

    groups: Any
    test: Any


def _moderator_levels(moderator: Any, sites: Sequence[Any]) -> list[Any]:
    if isinstance(moderator, Mapping):
        mapping: Mapping[Any, Any] = moderator
    elif hasattr(moderator, "to_dict"):  # a pandas Series: site label -> group
        mapping = moderator.to_dict()
    else:
        raise InputDataError(
            "moderator must map every site label to its group: a dict or a pandas Series "
            f"indexed by site, got {type(moderator).__name__}."
        )
    missing = [s for s in sites if s not in mapping]
    if missing:
        raise InputDataError(
            f"moderator has no group for sites {missing[:10]}; it must map every site label "
            f"({list(sites)[:10]}) to a group."
        )
    out = [mapping[s] for s in sites]
    bad = [s for s, g in zip(sites, out, strict=True) if g is None or g != g]  # None or NaN
    if bad:
        raise InputDataError(f"moderator's group is missing (None or NaN) for sites {bad[:10]}.")
    return out


def subgroup_analysis(
    effects: npt.ArrayLike,
    variances: npt.ArrayLike,
    moderator: Any,
    *,
    sites: Sequence[Any] | None = None,
    columns: Sequence[Any] | None = None,
    tau2_method: str = "dl",
    ci_method: str = "z",
    level: float = 0.95,
) -> SubgroupAnalysis:
    """Return the subgroup meta-analysis of a public site-level moderator (module docstring).

    ``moderator`` maps every site label (``sites``; default ``0..n-1``) to its group: a dict or
    a pandas Series. Each group with at least 2 sites is analysed on its own (its own ``tau2``
    by ``tau2_method``, its interval by ``ci_method``); the groups' estimates are compared by
    ``Q_between = sum_g (mu_g - mu_bar)^2/SE_g^2`` on ``G - 1`` df (a fixed-effects model across
    subgroups, metafor's ``QM``). Post-processing of the sites' estimates: no privacy budget.

    Raises
    ------
    InputDataError
        A site without a group, a group of fewer than 2 sites, fewer than 2 groups; bad methods,
        names or estimates.
    ImportError
        pandas is not installed.
    """
    pd = import_pandas("subgroups")
    method, interval = check_methods(tau2_method, ci_method)
    lvl = check_level(level)
    y, v = _as_2d(effects, variances)
    n, d = y.shape
    site_names = _names(sites, n, "site")
    col_names = _names(columns, d, "column")
    groups = _moderator_levels(moderator, site_names)
    levels: list[Any] = []
    for g in groups:
        if g not in levels:
            levels.append(g)
    try:
        levels = sorted(levels)
    except TypeError:
        pass  # unorderable labels: first-seen order
    if len(levels) < 2:
        raise InputDataError(f"subgroups need at least 2 groups, the moderator has {levels}.")
    members = {g: np.array([x == g for x in groups]) for g in levels}
    small = {str(g): int(m.sum()) for g, m in members.items() if m.sum() < 2}
    if small:
        raise InputDataError(
            f"every group needs at least 2 sites for its own meta-analysis; groups {small} "
            "have fewer."
        )
    group_rows = []
    test_rows = []
    for j in range(d):
        mus, ses = [], []
        for g in levels:
            keep = members[g]
            a = meta_analysis_from_summaries(
                y[keep, j], v[keep, j], tau2_method=method, ci_method=interval, level=lvl
            )
            mus.append(a.mu)
            ses.append(a.mu_se)
            group_rows.append(
                {
                    "column": col_names[j],
                    "group": g,
                    "k": a.k,
                    "estimate": a.mu,
                    "se": a.mu_se,
                    "ci_low": a.mu_ci[0],
                    "ci_high": a.mu_ci[1],
                    "tau2": a.tau2,
                    "i2": a.i2,
                }
            )
        w = 1.0 / np.square(ses)
        mu_bar = float(np.sum(w * np.asarray(mus)) / np.sum(w))
        q_between = float(np.sum(w * (np.asarray(mus) - mu_bar) ** 2))
        df = len(levels) - 1
        test_rows.append(
            {
                "column": col_names[j],
                "q_between": q_between,
                "df": df,
                "pvalue": float(chi2.sf(q_between, df)) if math.isfinite(q_between) else math.nan,
            }
        )
    attrs = {"level": lvl, "tau2_method": method, "ci_method": interval, "groups": levels}
    group_frame = pd.DataFrame(group_rows).set_index(["column", "group"])
    test_frame = pd.DataFrame(test_rows).set_index("column")
    group_frame.attrs.update(attrs)
    test_frame.attrs.update(attrs)
    return SubgroupAnalysis(groups=group_frame, test=test_frame)
