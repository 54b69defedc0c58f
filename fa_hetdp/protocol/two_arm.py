"""Two-arm effects across silos: the exact analysis and the private silo-summaries one.

Every silo holds records of two arms (treated, control: a treatment-indicator column). The
effect ``effect`` -- ``"MD"``, ``"SMD"`` (Hedges' g), ``"OR"``, ``"RR"`` (log scale) or ``"RD"``
-- is formed per silo and per column as metafor's ``escalc()`` forms it
(:mod:`fa_hetdp.stats.effect_sizes`), and the silos' effects are pooled by the
DerSimonian-Laird random-effects analysis of :func:`fa_hetdp.stats.rma.
meta_analysis_from_summaries`. No second copy of that math lives here.

**Exact** (:func:`exact_two_arm`): each silo's arm sizes, means, sample standard deviations
(``ddof = 1``) or event counts, then ``escalc`` and ``rma``.

**Private** (:func:`plan_two_arm`, :func:`release_arm`, :func:`assemble_two_arm`): the
silo-summaries design applied to every arm of every silo as its own group of records.

- *Neighbours*: one record replaced by another record **of the same arm** (each silo's arm
  sizes are public, as its record count is; a replacement keeps them). A record then changes
  one arm's summaries only, so a silo's two arm releases are on disjoint records and compose
  in parallel, as the silos do: each arm's release gets the whole budget
  (docs/privacy.md, "Two-arm effects in the silo-summaries design").
- *Releases*: per arm ``a`` of silo ``i`` (size ``m_ia``, public), the noisy column means
  ``theta~ = theta + N(0, st^2 I_d)``, ``st = sqrt(d)/(m_ia mu_theta)``, and, for MD and SMD,
  the noisy sample variances ``s2~ = s2 + N(0, ss^2 I_d)``, ``ss = sqrt(d)/((m_ia - 1)
  mu_s)`` (:func:`~fa_hetdp.protocol.silo_summaries.silo_bounds`; the default split
  ``mu_theta^2 = 0.6 mu^2``, ``mu_s^2 = 0.4 mu^2``). A binary outcome's variance
  ``p (1 - p)`` follows from its proportion, so for OR, RR and RD only the noisy proportions
  ``p~ = theta~`` are released, at the whole ``mu``.
- *The server* (post-processing) forms each silo's effect and its variance from the noisy arm
  summaries, the known noise added to the variance:

  * MD: ``y = theta~_T - theta~_C``, ``v = s^_T^2/m_T + s^_C^2/m_C + st_T^2 + st_C^2``, with
    ``s^2`` the arm's variance estimate from its noisy ``s2~`` (clipped and shrunk towards the
    pooled variance of all arms: :func:`~fa_hetdp.protocol.silo_summaries.shrink_variances`,
    the silo-summaries design's estimate);
  * SMD: Hedges' ``g = J (theta~_T - theta~_C)/s^_p`` from the noisy means and the pooled
    ``s^_p^2 = ((m_T - 1) s^_T^2 + (m_C - 1) s^_C^2)/M``, ``M = m_T + m_C - 2``, metafor's
    variance ``1/m_T + 1/m_C + g^2/(2 (m_T + m_C))`` plus the noise's by the delta method:
    ``J^2 (st_T^2 + st_C^2)/s^_p^2`` (the means' noise through ``dg/d(diff) = J/s_p``) plus
    ``g^2 Var(s^_p^2)/(4 s^_p^4)`` (the variances' noise through ``dg/d(s_p^2) =
    -g/(2 s_p^2)``), ``Var(s^_p^2)`` the noise variance of the linear combination of all arms'
    variance releases that ``s^_p^2`` is (its own arms' through the shrinkage factor, every
    arm's through the pooled variance it is shrunk towards; :func:`_pooled_noise`);
  * OR, RR, RD: the noisy proportions clipped into ``[0, 1]``, the noisy counts ``a = m_T p~_T``
    and ``c = m_C p~_C`` (real numbers), ``escalc``'s effect and variance of those counts
    with metafor's correction: 1/2 added to the four cells of a silo where a noisy cell is at 0
    (a proportion clipped to 0 or 1), and the noise's variance by the delta method at the
    corrected cells ``a', b', c', d'`` (``n' = a' + b'``): ``st_T^2 (m_T/a' + m_T/b')^2 +
    st_C^2 (m_C/c' + m_C/d')^2`` (log OR), ``st_T^2 (m_T/a')^2 + st_C^2 (m_C/c')^2`` (log RR),
    ``st_T^2 (m_T/n1')^2 + st_C^2 (m_C/n2')^2`` (RD: exact, the noise is additive).

  Then the random-effects analysis of those effects with the noise in their variances
  (:func:`~fa_hetdp.stats.rma.meta_analysis_from_summaries`, DerSimonian-Laird, z): a noisy
  effect is the silo's true effect plus independent noise of known variance, so
  ``y~_i ~ N(mu, tau2 + v_i + noise_i)`` is the random-effects model with the noise in the
  within-silo variance; ``tau2``, the means and their intervals are those of that model (the
  population intervals: sampling error and noise), Q's p-value tests ``tau2 = 0`` with the
  noise accounted. ``I^2`` is ``tau2/(tau2 + s^2)`` with ``s^2`` the typical *sampling*
  variance (from the variances without the noise): the share of the effects' spread that is
  heterogeneity, not noise.

  The sample intervals (``target="sample"``, :func:`two_arm_intervals`): the exact analysis'
  figures on these records given the privacy noise only, by the one-arm silo summaries' seeded
  parametric bootstrap of the known noise
  (:func:`~fa_hetdp.protocol.silo_summaries.noise_bootstrap_errors`) with every arm as a group.

The secure sums release sums over all silos of one summary vector: an MD or RD enters them as
one summary per silo (:mod:`fa_hetdp.protocol.two_arm_sums`); SMD, OR and RR are refused there
(:func:`secure_sums_refusal`): one record moves Hedges' g without bound, and a log odds or risk
ratio by a constant, not by ``1/m`` (:data:`NOT_IN_THE_SECURE_SUMS`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from fa_hetdp._types import FloatArray
from fa_hetdp.data.arms import min_arm_size
from fa_hetdp.dp.accounting import (
    BudgetPlan,
    PrivacySpent,
    ReleaseSpec,
    plan_budget,
    privacy_spent,
)
from fa_hetdp.dp.mechanisms import NoiseMechanism, get_mechanism
from fa_hetdp.errors import InputDataError, PrivacyParameterError
from fa_hetdp.protocol.meta_plan import SILO_RELEASES, SILO_WEIGHTS, MetaSettings, planned_mu
from fa_hetdp.protocol.silo_summaries import (
    SILO_ADVERSARY,
    noise_bootstrap_errors,
    plausible_variances,
    shrink_variances,
    silo_bounds,
    silo_summaries_problem,
    true_variances,
)
from fa_hetdp.stats.effect_sizes import (
    BINARY_MEASURES,
    MEASURES,
    binary_cells,
    binary_effects,
    continuous_effects,
    effect_sizes,
    hedges_correction,
)
from fa_hetdp.stats.meta import (
    NO_POPULATION_INTERVAL,
    MetaIntervals,
    PredictionInterval,
    SiloEstimates,
    check_level,
    check_target,
    i2_from_tau2,
    meta_from_effects,
)
from fa_hetdp.stats.rma import MetaAnalysisFromSummaries, meta_analysis_from_summaries
from fa_hetdp.stats.silo_analyses import PerColumnAnalyses

__all__ = [
    "ARMS",
    "EFFECTS",
    "NOT_IN_THE_SECURE_SUMS",
    "TWO_ARM_UNIT_OF_PRIVACY",
    "ArmRelease",
    "ArmSummaries",
    "TwoArmMetaAnalysis",
    "TwoArmPlan",
    "arm_summaries",
    "assemble_two_arm",
    "check_effect",
    "exact_two_arm",
    "min_arm_size",
    "noisy_effects",
    "plan_two_arm",
    "release_arm",
    "release_silo_arms",
    "run_two_arm",
    "secure_sums_refusal",
    "stack_arm_releases",
    "two_arm_intervals",
    "two_arm_noise_errors",
    "why_not_in_the_secure_sums",
]

EFFECTS: Final[tuple[str, ...]] = ("mean", "MD", "SMD", "OR", "RR", "RD")
"""``effect=``: one arm's mean per column (no ``arm``), or a two-arm effect (with ``arm``)."""

ARMS: Final[tuple[str, str]] = ("treated", "control")
"""The arms in the order every ``(n, 2, ...)`` array holds them (metafor's group 1, group 2)."""

NOT_IN_THE_SECURE_SUMS: Final[dict[str, str]] = {
    "SMD": (
        "one record can move Hedges' g without bound (a pooled sd near 0 makes g as large as "
        "you like), and the secure sums pool only a summary that one record moves by at most "
        "1/m"
    ),
    "OR": (
        "one record can move a log odds ratio by up to about 2 whatever the arm sizes (a cell "
        "near 0) on a range of only 4 log(2m + 1), so a silo's summary could count as at most "
        "about 4 log(2m + 1) records, not the RD's 4m - 3"
    ),
    "RR": (
        "one record can move a log risk ratio by up to about 1.5 whatever the arm sizes (a cell "
        "near 0) on a range of only 2 log(2m + 1), so a silo's summary could count as at most "
        "about 2.7 log(2m + 1) records, not the RD's 4m - 3"
    ),
}
"""Why the secure sums do not build SMD, OR and RR (docs/privacy.md, "Why the secure sums stop
at MD and RD"; the bounds checked by brute force in ``tests/test_two_arm_sums.py``)."""


def why_not_in_the_secure_sums(effect: str) -> str:
    """Why the secure sums do not build ``effect``: :data:`NOT_IN_THE_SECURE_SUMS`' line.

    A name that is no effect (its own check names it) gets what the secure sums do build.
    """
    return NOT_IN_THE_SECURE_SUMS.get(
        effect, "they build 'MD' and 'RD' only (a difference of the arms' means)"
    )


def secure_sums_refusal(effect: str) -> str:
    """Return the one line refusing ``effect`` in the secure sums, no full stop.

    SMD, OR and RR with :func:`why_not_in_the_secure_sums` and what runs there instead.
    """
    why = why_not_in_the_secure_sums(effect)
    if effect not in NOT_IN_THE_SECURE_SUMS:
        return f"effect={effect!r} does not run in the secure sums: {why}"
    instead = "effect='RD' (the same binary outcome)" if effect in ("OR", "RR") else "effect='MD'"
    return (
        f"effect={effect!r} does not run in the secure sums: {why}; use {instead} there, or "
        "design='silo-summaries' (or 'auto')"
    )


TWO_ARM_UNIT_OF_PRIVACY: Final = (
    "one record of one client, replaced by another record of the same arm (within-arm "
    "neighbours; values in [0, 1]^d after the public scaling); n and every client's arm sizes "
    "public (the smallest arm: {m} records), so a record's arm is not protected; k records "
    "of one client together are protected only as a group (k times the GDP mu)"
)
"""What the private two-arm analysis protects (``{m}``: the smallest arm's size)."""

WHAT_THE_SERVER_SAW: Final = (
    "every silo's noisy per-arm column means and sample variances (binary measures: its noisy "
    "proportions), each arm's own release at the whole budget; record unit, within-arm "
    "neighbours, arm sizes public"
)

EFFECT_RANGES: Final[dict[str, tuple[float, float]]] = {
    "MD": (-1.0, 1.0),
    "RD": (-1.0, 1.0),
    "SMD": (-np.inf, np.inf),
    "OR": (-np.inf, np.inf),
    "RR": (-np.inf, np.inf),
}
"""Where an effect of columns in ``[0, 1]`` lies (its sample interval is clipped into it)."""

IntArray = npt.NDArray[np.int64]


def check_effect(effect: Any, arm_given: bool) -> str:
    """Return ``effect`` normalised (``"mean"`` or a measure in upper case); raise otherwise.

    Raises
    ------
    InputDataError
        An unknown effect; a two-arm effect without ``arm=``; ``arm=`` with ``effect="mean"``.
    """
    name = effect.strip() if isinstance(effect, str) else effect
    if isinstance(name, str) and name.lower() == "mean":
        name = "mean"
    elif isinstance(name, str) and name.upper() in MEASURES:
        name = name.upper()
    if name not in EFFECTS:
        raise InputDataError(
            f"effect must be one of {', '.join(repr(e) for e in EFFECTS)} ('mean': each "
            f"column's mean; the others compare two arms, with arm=), got effect={effect!r}."
        )
    if name == "mean" and arm_given:
        raise InputDataError(
            "arm= names the two arms to compare: give effect= one of 'MD', 'SMD', 'OR', 'RR', "
            "'RD' with it (effect='mean' pools one mean per column, with no arms)."
        )
    if name != "mean" and not arm_given:
        raise InputDataError(
            f"effect={name!r} compares two arms: name the treatment-indicator column with "
            "arm= (a DataFrame's column, or for the array form an array of 0/1, 1 = treated)."
        )
    return str(name)


@dataclass(frozen=True)
class ArmSummaries:
    """Every silo's per-arm summaries (what each silo computes on its own records).

    Attributes
    ----------
    m : IntArray
        ``(n, 2)`` arm sizes, :data:`ARMS` order.
    theta : FloatArray
        ``(n, 2, d)`` arm means (a binary column: the proportion).
    s2 : FloatArray
        ``(n, 2, d)`` sample variances (``ddof = 1``; NaN for an arm of one record).
    """

    m: IntArray
    theta: FloatArray
    s2: FloatArray

    @property
    def n(self) -> int:
        """Silos."""
        return int(self.m.shape[0])

    @property
    def d(self) -> int:
        """Columns."""
        return int(self.theta.shape[2])


def arm_summaries(
    records: npt.ArrayLike,
    client_ids: npt.ArrayLike,
    arms: npt.ArrayLike,
    *,
    minimum: int = 2,
    site_labels: Sequence[Any] | None = None,
) -> ArmSummaries:
    """Per silo and arm: size, means, sample variances; ``arms`` 1 = treated, 0 = control.

    Raises
    ------
    InputDataError
        Records not ``(N, d)``, ids not ``0..n-1`` integers or arms not 0/1 of length ``N``;
        a silo with an arm below ``minimum`` records (named by ``site_labels``, with the sizes).
    """
    x = np.asarray(records, dtype=np.float64)
    ids = np.asarray(client_ids)
    a = np.asarray(arms)
    if x.ndim != 2 or ids.shape != (x.shape[0],) or a.shape != (x.shape[0],):
        raise InputDataError(
            f"records (N, d), client_ids (N,) and arms (N,) must agree, got {x.shape}, "
            f"{ids.shape}, {a.shape}."
        )
    if ids.dtype.kind not in "iu" or (ids.size and ids.min() < 0):
        raise InputDataError("client_ids must be integers 0..n-1.")
    if not np.all((a == 0) | (a == 1)):
        raise InputDataError("arms must be 0 (control) or 1 (treated), one per record.")
    n = int(ids.max()) + 1 if ids.size else 0
    d = x.shape[1]
    group = 2 * ids.astype(np.int64) + (1 - a.astype(np.int64))  # treated 0, control 1
    counts = np.bincount(group, minlength=2 * n)
    labels = list(range(n)) if site_labels is None else list(site_labels)
    small = [
        f"{labels[g // 2]!r} ({ARMS[g % 2]}: {int(counts[g])})"
        for g in np.flatnonzero(counts < minimum)
    ]
    if small:
        raise InputDataError(
            f"every site needs at least {minimum} record{'s' if minimum > 1 else ''} in each arm"
            f"{' (a sample variance)' if minimum > 1 else ''}: {', '.join(small[:10])}"
            f"{' ...' if len(small) > 10 else ''}; drop those sites or merge them."
        )
    sums = np.zeros((2 * n, d))
    np.add.at(sums, group, x)
    theta = sums / counts[:, None]
    dev = np.zeros((2 * n, d))
    np.add.at(dev, group, (x - theta[group]) ** 2)
    with np.errstate(divide="ignore", invalid="ignore"):
        s2 = np.where(counts[:, None] > 1, dev / (counts[:, None] - 1.0), np.nan)
    return ArmSummaries(
        m=np.asarray(counts.reshape(n, 2), dtype=np.int64),
        theta=np.asarray(theta.reshape(n, 2, d)),
        s2=np.asarray(s2.reshape(n, 2, d)),
    )


# ---------------------------------------------------------------------------- the result
@dataclass(frozen=True)
class TwoArmMetaAnalysis(PerColumnAnalyses):
    """The random-effects analysis of every silo's two-arm effect, per column.

    Figures are ``(d,)`` arrays, one per column, named as those of
    :class:`~fa_hetdp.stats.meta.MetaAnalysis` (``pooled_mean`` the common-effect estimate,
    ``random_effects_mean`` the random-effects one: of the effect, not of a mean). On the scale
    the analysis ran on (:class:`~fa_hetdp.accuracy.columns.ColumnMetaAnalysis` maps an MD back
    into the column's units; the other measures are unit-free).

    Attributes
    ----------
    effect : str
        ``"MD"``, ``"SMD"``, ``"OR"``, ``"RR"`` or ``"RD"`` (OR and RR on the log scale).
    effects : FloatArray
        ``(n, d)`` every silo's effect (private: formed from the noisy arm releases).
    variances : FloatArray
        ``(n, d)`` the variance each effect carries: sampling, plus the privacy noise's.
    sampling_variances : FloatArray
        ``(n, d)`` the sampling part (``escalc``'s variance; private: at the noisy summaries).
    arm_counts : IntArray
        ``(n, 2)`` every silo's arm sizes (treated, control; public for the private analysis).
    analyses : tuple of MetaAnalysisFromSummaries
        One per column: :func:`~fa_hetdp.stats.rma.meta_analysis_from_summaries` of
        ``(effects[:, j], variances[:, j])`` (DerSimonian-Laird, z, level 0.95). Other
        estimators and intervals are post-processing of ``effects`` and ``variances``.
    design : str
        ``"exact"`` or ``"silo-summaries"``.
    spent, unit_of_privacy, adversary, server_saw, plan
        The private analysis' guarantee (None and empty for the exact one).
    labels : tuple of str
        What ran, the budget, what was clipped or corrected.
    releases : dict
        Private: the noisy arm summaries, ``"theta"`` (and ``"s2"``) ``(n, 2, d)``.
    noise_std : dict
        Private: their noise std per arm, ``"theta"`` (and ``"s2"``) ``(n, 2)``.
    """

    effect: str
    effects: FloatArray
    variances: FloatArray
    sampling_variances: FloatArray
    arm_counts: IntArray
    analyses: tuple[MetaAnalysisFromSummaries, ...]
    design: str = "exact"
    spent: PrivacySpent | None = None
    unit_of_privacy: str = ""
    adversary: str = ""
    server_saw: str = ""
    plan: Any = None
    labels: tuple[str, ...] = ()
    releases: dict[str, FloatArray] = field(default_factory=dict)
    noise_std: dict[str, FloatArray] = field(default_factory=dict)

    # ---------------------------------------------------------------- shape
    @property
    def records_per_client(self) -> IntArray:
        """``(n,)`` every silo's record count (both arms)."""
        return np.asarray(self.arm_counts.sum(axis=1), dtype=np.int64)

    # ---------------------------------------------------------------- figures
    @property
    def tau2_raw(self) -> FloatArray:
        """``(d,)`` ``(Q - (n - 1))/tr P``, ``tau2`` before its truncation at 0."""
        k = self.n
        q, typical = self._figure("q"), self._figure("typical_variance")
        return np.asarray((q - (k - 1)) * typical / (k - 1))

    @cached_property
    def _tr_p_sampling(self) -> FloatArray:
        w = 1.0 / self.sampling_variances
        s1 = np.sum(w, axis=0)
        return np.asarray(s1 - np.sum(w * w, axis=0) / s1)

    def _i2(self, tau2: npt.ArrayLike) -> FloatArray:
        """``tau2/(tau2 + s^2)``, ``s^2`` the typical sampling variance (private: no noise)."""
        return i2_from_tau2(tau2, self._tr_p_sampling, self.n)

    @property
    def i2(self) -> FloatArray:
        """``(d,)`` ``I^2 = tau2/(tau2 + s^2)``, ``s^2`` the typical sampling variance.

        The exact analysis: metafor's ``I^2``. The private one: ``s^2`` from the sampling
        variances without the noise, so that ``I^2`` is the share of heterogeneity in the
        effects' spread without the noise (module docstring).
        """
        return self._figure("i2") if not self.private else self._i2(self.tau2)

    # ---------------------------------------------------------------- inference
    def _analyses_at(self, level: float) -> tuple[MetaAnalysisFromSummaries, ...]:
        lvl = check_level(level)
        if self.analyses and lvl == self.analyses[0].level:
            return self.analyses
        return tuple(
            meta_analysis_from_summaries(self.effects[:, j], self.variances[:, j], level=lvl)
            for j in range(self.d)
        )

    def confidence_intervals(
        self,
        level: float = 0.95,
        target: str = "population",
        *,
        draws: int = 2000,
        seed: int = 0,
        **options: Any,
    ) -> MetaIntervals:
        """Return population intervals (sampling error; a private result's privacy noise too).

        ``target="population"``, metafor's: z-intervals of the common-effect and random-effects
        estimates, the Q-profile interval of ``tau2`` and its image for ``I^2``, from the
        effects and the variances they carry (nothing is drawn). ``target="sample"`` (a private
        result): the intervals of the exact analysis' figures on these records, the privacy
        noise only, by a parametric bootstrap of ``draws`` redraws of the known noise seeded by
        ``seed`` (:func:`two_arm_intervals`). Other ``options`` are accepted and unused.

        Raises
        ------
        InputDataError
            A bad ``level`` or ``target``; ``target="sample"`` of the exact analysis (it has no
            privacy noise: its figures are the sample values).
        """
        check_target(target)
        if target == "sample":
            if not self.private:
                raise InputDataError(
                    "target='sample' (the privacy noise only) needs a private result: the exact "
                    "analysis has no privacy noise; target='population' gives the intervals of "
                    "the population effect."
                )
            return two_arm_intervals(self, check_level(level), draws, seed)
        analyses = self._analyses_at(level)
        lower: dict[str, Any] = {}
        upper: dict[str, Any] = {}
        for key, name in (("pooled_mean", "fixed_ci"), ("random_effects_mean", "mu_ci")):
            lower[key] = np.array([getattr(a, name)[0] for a in analyses])
            upper[key] = np.array([getattr(a, name)[1] for a in analyses])
        tau_lo = np.array([a.tau2_ci[0] for a in analyses])
        tau_hi = np.array([a.tau2_ci[1] for a in analyses])
        lower["tau2"], upper["tau2"] = tau_lo, tau_hi
        if self.private:
            lower["i2"], upper["i2"] = self._i2(tau_lo), self._i2(tau_hi)
        else:
            lower["i2"] = np.array([a.i2_ci[0] for a in analyses])
            upper["i2"] = np.array([a.i2_ci[1] for a in analyses])
        noise = (
            ", each effect's variance its sampling variance plus its privacy noise's"
            if self.private
            else ""
        )
        methods = {
            "pooled_mean": f"common effect of the {self.effect}s, z-interval{noise}",
            "random_effects_mean": (
                f"DerSimonian-Laird random-effects {self.effect}, z-interval (metafor's rma){noise}"
            ),
            "tau2": f"Q-profile (Viechtbauer 2007) of the silos' {self.effect}s{noise}",
            "i2": "the image of tau2's interval, tau2/(tau2 + s^2), s^2 the typical sampling "
            "variance",
            "q": NO_POPULATION_INTERVAL,
            "i2_total": NO_POPULATION_INTERVAL,
        }
        return MetaIntervals(
            level=float(level), lower=lower, upper=upper, target="population", methods=methods
        )

    def prediction_interval(self, level: float = 0.95) -> PredictionInterval:
        """Where a new silo's true effect lies: metafor's ``mu +- z sqrt(SE^2 + tau2)``."""
        analyses = self._analyses_at(level)
        return PredictionInterval(
            level=float(level),
            lower=np.array([a.prediction_interval[0] for a in analyses]),
            upper=np.array([a.prediction_interval[1] for a in analyses]),
            method=(
                "random-effects estimate +- z sqrt(SE^2 + tau2) (metafor's predict())"
                + (", SE and tau2 with the privacy noise" if self.private else "")
            ),
        )

    def silo_estimates(self) -> SiloEstimates:
        """Every silo's effect, the variance it carries and its weights (``1/v``, ``1/(v+tau2)``).

        Private: the effect formed from the noisy arm releases, its variance with the noise.
        """
        v = self.variances
        return SiloEstimates(
            effects=self.effects,
            variances=v,
            weights_fixed=np.asarray(1.0 / v),
            weights_random=np.asarray(1.0 / (v + self.tau2[None, :])),
            method=(
                f"the silo's {self.effect} +- z sqrt(v)"
                + (
                    ": formed from its noisy arm releases, v its sampling variance plus its "
                    "privacy noise's"
                    if self.private
                    else ": escalc's effect and sampling variance"
                )
            ),
        )

    @property
    def h2(self) -> FloatArray:
        """``(d,)`` ``H^2 = 1/(1 - I^2)`` (:attr:`i2`)."""
        return np.asarray(1.0 / (1.0 - self.i2))

    def leave_one_out(self, level: float = 0.95) -> Any:
        """Return the analysis without each silo in turn (post-processing: no extra budget).

        :func:`fa_hetdp.stats.silo_analyses.leave_one_out` of the effects and their variances.
        """
        from fa_hetdp.stats.silo_analyses import leave_one_out

        return leave_one_out(self.effects, self.variances, level=level)

    def subgroups(self, moderator: Any, level: float = 0.95) -> Any:
        """Return per-group analyses of a site-level ``moderator`` (post-processing, no budget).

        :func:`fa_hetdp.stats.silo_analyses.subgroup_analysis` of the effects and variances.
        """
        from fa_hetdp.stats.silo_analyses import subgroup_analysis

        return subgroup_analysis(self.effects, self.variances, moderator, level=level)


def _analyse(
    effect: str,
    y: FloatArray,
    v: FloatArray,
    v_sampling: FloatArray,
    m: IntArray,
    **private: Any,
) -> TwoArmMetaAnalysis:
    analyses = tuple(meta_analysis_from_summaries(y[:, j], v[:, j]) for j in range(y.shape[1]))
    return TwoArmMetaAnalysis(
        effect=effect,
        effects=np.asarray(y),
        variances=np.asarray(v),
        sampling_variances=np.asarray(v_sampling),
        arm_counts=np.asarray(m, dtype=np.int64),
        analyses=analyses,
        **private,
    )


def _effect_inputs(effect: str, s: ArmSummaries, j: int) -> dict[str, FloatArray]:
    m = s.m.astype(np.float64)
    if effect in BINARY_MEASURES:
        return {
            "events_treated": np.round(m[:, 0] * s.theta[:, 0, j]),
            "n_treated": m[:, 0],
            "events_control": np.round(m[:, 1] * s.theta[:, 1, j]),
            "n_control": m[:, 1],
        }
    return {
        "mean_treated": s.theta[:, 0, j],
        "sd_treated": np.sqrt(s.s2[:, 0, j]),
        "n_treated": m[:, 0],
        "mean_control": s.theta[:, 1, j],
        "sd_control": np.sqrt(s.s2[:, 1, j]),
        "n_control": m[:, 1],
    }


def exact_two_arm(summaries: ArmSummaries, effect: str) -> TwoArmMetaAnalysis:
    """Run the exact analysis: ``escalc`` per silo and column, then ``rma`` (module docstring).

    Raises
    ------
    InputDataError
        An arm whose column is constant (MD, SMD: ``sd = 0``), named by
        :func:`~fa_hetdp.stats.effect_sizes.effect_sizes` (studies are the silos ``0..n-1``).
    """
    cols = [
        effect_sizes(effect, **_effect_inputs(effect, summaries, j)) for j in range(summaries.d)
    ]
    y = np.column_stack([c[0] for c in cols])
    v = np.column_stack([c[1] for c in cols])
    return _analyse(effect, y, v, v, summaries.m, labels=(f"exact {effect} per silo (escalc)",))


# ---------------------------------------------------------------------------- the private plan
@dataclass(frozen=True)
class TwoArmPlan:
    """The calibrated two-arm silo-summaries design for public arm sizes and ``d`` columns.

    Attributes
    ----------
    settings : MetaSettings
    effect : str
    n, d : int
    arm_counts : IntArray
        ``(n, 2)`` the public arm sizes (:data:`ARMS` order).
    budget : BudgetPlan or None
        Unit-sensitivity releases: ``theta`` (and ``s2`` for MD and SMD); None without noise.
    epsilon, delta : float
    labels : tuple of str
    """

    settings: MetaSettings
    effect: str
    n: int
    d: int
    arm_counts: IntArray
    budget: BudgetPlan | None
    epsilon: float
    delta: float
    labels: tuple[str, ...] = ()

    @property
    def design(self) -> str:
        """The design this plan runs."""
        return "silo-summaries"

    @property
    def privacy_unit(self) -> str:
        """What the plan protects: one record (within its arm)."""
        return "record"

    @property
    def binary(self) -> bool:
        """Whether the effect compares proportions (only the means are released)."""
        return self.effect in BINARY_MEASURES

    @property
    def releases(self) -> tuple[str, ...]:
        """Every arm's releases: ``("theta",)`` for OR, RR, RD; ``("theta", "s2")`` else."""
        return ("theta",) if self.binary else SILO_RELEASES

    @property
    def m_min(self) -> int:
        """The smallest arm's size."""
        return int(self.arm_counts.min())

    @property
    def mechanism(self) -> NoiseMechanism:
        """The noise mechanism (Gaussian)."""
        return get_mechanism(self.settings.mechanism)

    def mu(self, name: str) -> float:
        """Planned GDP ``mu_k`` of release ``name`` (inf without noise)."""
        return planned_mu(self.budget, name)

    @property
    def sigmas(self) -> tuple[FloatArray, FloatArray]:
        """Noise std ``(st, ss)`` of every arm's means and variances, ``(n, 2)`` each.

        ``st = sqrt(d)/(m mu_theta)``, ``ss = sqrt(d)/((m - 1) mu_s)``
        (:func:`~fa_hetdp.protocol.silo_summaries.silo_bounds` of the arm's size); ``ss`` is 0
        where no variance is released (binary measures) and both are 0 without noise.
        """
        zero = np.zeros(self.arm_counts.shape)
        if self.budget is None:
            return zero, zero.copy()
        with np.errstate(divide="ignore"):  # an arm of one record has no variance bound
            bt, bs = silo_bounds(self.arm_counts, self.d, self.settings.one_hot)
        st = np.asarray(bt / self.mu("theta"))
        if self.binary:
            return st, zero
        return st, np.asarray(bs / self.mu("s2"))

    @property
    def spent(self) -> PrivacySpent | None:
        """The privacy spent (parallel composition over arms and silos: one arm's release)."""
        return None if self.budget is None else privacy_spent(self.budget)

    @property
    def unit_of_privacy(self) -> str:
        """The sentence of what the guarantee protects (:data:`TWO_ARM_UNIT_OF_PRIVACY`)."""
        return TWO_ARM_UNIT_OF_PRIVACY.format(m=self.m_min)


def plan_two_arm(
    epsilon: float,
    delta: float,
    arm_counts: npt.ArrayLike,
    d: int,
    effect: str,
    settings: MetaSettings | None = None,
) -> TwoArmPlan:
    """Calibrate every arm's release for the public arm sizes and ``d`` columns.

    Raises
    ------
    PrivacyParameterError
        ``design="secure-sums"`` (this is the silo summaries' plan; the secure sums plan in
        :func:`~fa_hetdp.protocol.two_arm_sums.run_two_arm_sums`), or the settings do not allow
        the silo summaries (:func:`~fa_hetdp.protocol.silo_summaries.silo_summaries_problem`), or a
        bad budget.
    InputDataError
        An unknown effect, fewer than 2 silos, an arm below :func:`min_arm_size`, ``d < 1``.
    """
    name = check_effect(effect, True)
    s = settings or MetaSettings(privacy_unit="record", design="silo-summaries")
    if s.design == "secure-sums":
        raise PrivacyParameterError(
            (
                secure_sums_refusal(name)
                if name in NOT_IN_THE_SECURE_SUMS
                else f"plan_two_arm plans the silo summaries; an {name} in the secure sums runs "
                "in fa_hetdp.protocol.two_arm_sums.run_two_arm_sums"
            )
            + "."
        )
    problem = silo_summaries_problem(s)
    if problem is not None:
        where = (
            f"the secure sums do not build it: {why_not_in_the_secure_sums(name)}"
            if name in NOT_IN_THE_SECURE_SUMS
            else "or in the secure sums, named: design='secure-sums'"
        )
        raise PrivacyParameterError(
            f"effect={name!r} runs in the silo-summaries design ({where}), and {problem}."
        )
    m = np.asarray(arm_counts, dtype=np.int64)
    least = min_arm_size(name)
    if m.ndim != 2 or m.shape[1] != 2 or m.shape[0] < 2 or np.any(m < least):
        raise InputDataError(
            f"arm_counts must list n >= 2 silos' (treated, control) sizes, each >= {least}, got "
            f"{m.tolist()[:10]}."
        )
    if int(d) < 1:
        raise InputDataError(f"d must be >= 1, got d={d}.")
    what = "proportions" if name in BINARY_MEASURES else "means and variances"
    labels = [
        f"two-arm silo summaries ({name}): each silo released, per arm, its noisy {what} at the "
        "whole budget (within-arm neighbours: arms and silos hold disjoint records, parallel "
        "composition)"
    ]
    budget: BudgetPlan | None = None
    if s.noise:
        if name in BINARY_MEASURES:
            specs = [ReleaseSpec("theta", 1.0, 1.0)]
        else:
            weights = dict(SILO_WEIGHTS)
            if s.weights is not None:
                weights.update({k: v for k, v in s.weights.items() if k in SILO_RELEASES})
            specs = [ReleaseSpec(r, 1.0, weights[r]) for r in SILO_RELEASES]
        budget = plan_budget(epsilon, delta, specs, mechanism="agm", composition="gdp")
        labels.extend(budget.labels)
    else:
        labels.append("not private: noise off (a reference run; no epsilon is stated)")
    return TwoArmPlan(
        settings=s,
        effect=name,
        n=int(m.shape[0]),
        d=int(d),
        arm_counts=m,
        budget=budget,
        epsilon=float(epsilon),
        delta=float(delta),
        labels=tuple(labels),
    )


@dataclass(frozen=True)
class ArmRelease:
    """What one arm of one silo sends: its noisy means (and variances, for MD and SMD)."""

    theta: FloatArray
    s2: FloatArray | None
    m: int


def release_arm(
    plan: TwoArmPlan,
    silo: int,
    arm: int,
    theta: npt.ArrayLike,
    s2: npt.ArrayLike | None,
    m: int,
    rng: np.random.Generator,
) -> ArmRelease:
    """Return arm ``arm`` (0 treated, 1 control) of silo ``silo``: its summaries plus its noise.

    ``rng`` is the silo's noise generator (a CSPRNG in a deployment). The means get
    ``N(0, st^2 I_d)``, then (MD, SMD) the variances ``N(0, ss^2 I_d)``, in that order.

    Raises
    ------
    InputDataError
        ``m`` is not the plan's public size of that arm, or a summary's length is not ``d``.
    """
    size = int(plan.arm_counts[silo, arm])
    t = np.asarray(theta, dtype=np.float64)
    if int(m) != size or t.shape != (plan.d,):
        raise InputDataError(
            f"silo {silo}, {ARMS[arm]} arm: the plan's public size is {size} records on "
            f"d={plan.d}, its summary has {m} records on {t.shape}"
        )
    st, ss = plan.sigmas
    var: FloatArray | None = None
    if not plan.binary:
        if s2 is None:
            raise InputDataError(f"effect={plan.effect!r} releases each arm's variances too")
        var = np.asarray(s2, dtype=np.float64)
    if plan.budget is not None:
        mech = plan.mechanism
        t = t + mech.sample(np.full(plan.d, st[silo, arm]), (plan.d,), rng=rng)
        if var is not None:
            var = var + mech.sample(np.full(plan.d, ss[silo, arm]), (plan.d,), rng=rng)
    return ArmRelease(theta=np.asarray(t), s2=None if var is None else np.asarray(var), m=size)


def _pooled_noise(plan: TwoArmPlan, lam: FloatArray) -> FloatArray:
    """``Var(s^_p^2)`` from the variance releases' noise, ``(..., n, d)``, for given shrinkage.

    Arm ``h``'s estimate is ``l_h s2~_h + (1 - l_h) sum_g w_g s2~_g`` (``w_g = (m_g - 1)/sum
    (m - 1)``, the pooled variance), so silo ``i``'s ``s^_p^2 = sum_g c_ig s2~_g`` with
    ``c_ig = a_ig + b_i w_g``, ``a_ig = (m_g - 1) l_g/M_i`` for the silo's own arms ``g`` (0
    for the others), ``b_i = sum_{h in i} (m_h - 1)(1 - l_h)/M_i``, and, the releases' noises
    being independent, ``Var = sum_g c_ig^2 ss_g^2 = sum_{g in i} (a_ig^2 + 2 b_i a_ig w_g)
    ss_g^2 + b_i^2 sum_g w_g^2 ss_g^2`` (the shrinkage factors taken as fixed, the clipping
    ignored). ``lam`` ``(..., n, 2, d)``.
    """
    dof = plan.arm_counts.astype(np.float64) - 1.0  # (n, 2)
    w, pooled_var = _pooling(plan)
    ss2 = plan.sigmas[1] ** 2
    total = dof.sum(axis=1, keepdims=True)  # M_i
    a = (dof / total)[:, :, None] * lam  # (..., n, 2, d)
    b = np.sum((dof / total)[:, :, None] * (1.0 - lam), axis=-2)  # (..., n, d)
    own = np.sum((a * a + 2.0 * b[..., None, :] * a * w[:, :, None]) * ss2[:, :, None], axis=-2)
    return np.asarray(own + b * b * pooled_var)


def _pooling(plan: TwoArmPlan) -> tuple[FloatArray, float]:
    """Return the arms' pooling weights and the pooled variance release's noise variance.

    ``w_g = (m_g - 1)/sum (m - 1)`` ``(n, 2)``, and ``sum_g w_g^2 ss_g^2``: the noise variance
    of ``sum_g w_g s2~_g``.
    """
    dof = plan.arm_counts.astype(np.float64) - 1.0
    w = dof / float(np.sum(dof))
    return np.asarray(w), float(np.sum(w * w * plan.sigmas[1] ** 2))


def noisy_effects(
    plan: TwoArmPlan, theta: FloatArray, s2: FloatArray | None
) -> tuple[FloatArray, FloatArray, FloatArray, tuple[str, ...]]:
    """Every silo's effect from the noisy arm releases ``(..., n, 2, d)`` (module docstring).

    Returns the effects, their sampling variances and their noise variances, ``(..., n, d)``
    each, and notes (what was clipped or corrected). Post-processing. Leading axes: many
    releases at once (the sample intervals' bootstrap, :func:`two_arm_noise_errors`).
    """
    m = plan.arm_counts.astype(np.float64)[:, :, None]  # (n, 2, 1)
    st, ss = plan.sigmas
    st_t, st_c = st[:, 0, None], st[:, 1, None]
    m_t, m_c = m[:, 0], m[:, 1]
    notes: list[str] = []
    if plan.binary:
        clipped = int(np.sum((theta < 0.0) | (theta > 1.0)))
        p = np.clip(theta, 0.0, 1.0)
        a, c = m_t * p[..., 0, :], m_c * p[..., 1, :]
        y, v_s = binary_effects(plan.effect, a, m_t, c, m_c)
        ca, cb, cc, cd = binary_cells(a, m_t, c, m_c)
        if plan.effect == "OR":
            g_t, g_c = m_t * (1.0 / ca + 1.0 / cb), m_c * (1.0 / cc + 1.0 / cd)
        elif plan.effect == "RR":
            g_t, g_c = m_t / ca, m_c / cc
        else:
            g_t, g_c = m_t / (ca + cb), m_c / (cc + cd)
        v_n = (st_t * g_t) ** 2 + (st_c * g_c) ** 2
        corrected = int(np.sum(ca != a))
        if clipped:
            notes.append(
                f"{clipped} noisy proportions fell outside [0, 1] and were clipped into it"
            )
        if corrected:
            notes.append(
                f"{corrected} silo-columns had a noisy count at 0 (a proportion clipped to 0 or "
                "1): 1/2 added to their four cells (metafor's correction)"
            )
        return np.asarray(y), np.asarray(v_s), np.asarray(v_n), tuple(notes)
    if s2 is None:
        raise InputDataError(f"effect={plan.effect!r} needs each arm's variance release")
    n, d = plan.n, plan.d
    lead = s2.shape[:-3]
    var, lam = shrink_variances(
        plan.arm_counts.reshape(2 * n), ss.reshape(2 * n), s2.reshape(*lead, 2 * n, d)
    )
    lam = np.broadcast_to(lam, var.shape).reshape(*lead, n, 2, d)
    var = var.reshape(*lead, n, 2, d)
    sd = np.sqrt(var)
    y, v_s = continuous_effects(
        plan.effect,
        theta[..., 0, :],
        sd[..., 0, :],
        m_t,
        theta[..., 1, :],
        sd[..., 1, :],
        m_c,
    )
    if plan.effect == "MD":
        v_n = st_t**2 + st_c**2 + np.zeros_like(y)
    else:
        dof = m_t + m_c - 2.0
        sp2 = ((m_t - 1.0) * var[..., 0, :] + (m_c - 1.0) * var[..., 1, :]) / dof
        j = hedges_correction(dof)
        v_n = j * j * (st_t**2 + st_c**2) / sp2 + y * y * _pooled_noise(plan, lam) / (
            4.0 * sp2 * sp2
        )
    noisy = int(np.sum(np.any(ss[:, :, None] > 0.5 * var, axis=-1)))
    if noisy:
        notes.append(
            f"{noisy} of {2 * n} arms have a variance release whose noise exceeds half their "
            "variance estimate: their variances lean on the pooled one"
            + (
                ", which the noise inflates where it swamps the variances (clipped at 0 before "
                "pooling): then g is biased towards 0 and its interval may miss (a narrower "
                "public range, a larger epsilon or effect='MD' avoid it)"
                if plan.effect == "SMD"
                else ""
            )
        )
    if plan.effect == "SMD" and s2.ndim == 3:  # one release (not the bootstrap's many)
        unresolved = _unresolved_scale(plan, s2)
        if unresolved:
            notes.append(
                f"the SMD's scale is not resolved at this budget in column(s) {unresolved}: "
                f"the arms' variance releases pooled (unclipped, unbiased) are within {SCALE_SD:g} "
                "noise sd of 0, so every site's g divides by a pooled sd that is mostly noise: "
                "read g and its interval there as noise (effect='MD' is not affected)"
            )
    return np.asarray(y), np.asarray(v_s), np.asarray(v_n), tuple(notes)


SCALE_SD: Final = 2.0
"""An SMD's scale counts as resolved where the pooled variance release exceeds this many of its
noise sd (:func:`_unresolved_scale`)."""


def _unresolved_scale(plan: TwoArmPlan, s2: FloatArray) -> list[int]:
    """Columns whose pooled within-arm variance is within :data:`SCALE_SD` noise sd of 0.

    ``P = sum_g w_g s2~_g`` over every arm ``g`` of ``s2`` ``(n, 2, d)`` (:func:`_pooling`) is
    unbiased for the pooled variance (no clipping), with noise sd ``sqrt(sum_g w_g^2 ss_g^2)``
    (public). The noise of every arm's variance enters every
    site's ``g`` through the pooled variance the shrinkage leans on, so where ``P`` is within
    a few noise sd of 0 the scale of every ``g`` is noise. Post-processing.
    """
    w, pooled_var = _pooling(plan)
    pooled = np.sum(w[:, :, None] * s2, axis=(0, 1))
    return [int(j) for j in np.flatnonzero(pooled < SCALE_SD * np.sqrt(pooled_var))]


def assemble_two_arm(
    plan: TwoArmPlan, theta: FloatArray, s2: FloatArray | None
) -> TwoArmMetaAnalysis:
    """Return the private analysis of every arm's release ``(n, 2, d)`` (module docstring)."""
    y, v_s, v_n, notes = noisy_effects(plan, theta, s2)
    st, ss = plan.sigmas
    releases = {"theta": np.asarray(theta)}
    noise_std = {"theta": st}
    if s2 is not None:
        releases["s2"] = np.asarray(s2)
        noise_std["s2"] = ss
    return _analyse(
        plan.effect,
        y,
        v_s + v_n,
        v_s,
        plan.arm_counts,
        design="silo-summaries",
        spent=plan.spent,
        unit_of_privacy=plan.unit_of_privacy,
        adversary=SILO_ADVERSARY,
        server_saw=WHAT_THE_SERVER_SAW,
        plan=plan,
        labels=(*plan.labels, *notes),
        releases=releases,
        noise_std=noise_std,
    )


def _dl_figures(y: FloatArray, v: FloatArray) -> dict[str, FloatArray]:
    """Return the DerSimonian-Laird figures of effects ``y``, variances ``v`` ``(..., n, d)``.

    :func:`~fa_hetdp.stats.meta.meta_from_effects` (what ``rma``'s DL is) on every leading
    index and column at once; the keys :func:`~fa_hetdp.protocol.meta_inference.
    intervals_from_errors` reads (``q_raw`` is ``Q``, ``q_total`` its sum over the columns).
    """
    n, d = y.shape[-2], y.shape[-1]
    lead = y.shape[:-2]

    def columns(x: FloatArray) -> FloatArray:
        return np.asarray(np.moveaxis(x, -2, 0).reshape(n, -1))

    mu, q, _, _, tau2_raw, re = meta_from_effects(columns(y), columns(v))
    shape = (*lead, d)
    q = q.reshape(shape)
    return {
        "pooled_mean": mu.reshape(shape),
        "random_effects_mean": re.reshape(shape),
        "q_raw": q,
        "q_total": np.asarray(np.sum(q, axis=-1)),
        "tau2_raw": tau2_raw.reshape(shape),
    }


def _exact_effects(
    plan: TwoArmPlan, theta: FloatArray, s2: FloatArray | None
) -> tuple[FloatArray, FloatArray]:
    """``escalc``'s effects and sampling variances of arm summaries taken as exact, ``(..., n, d)``.

    Proportions (binary measures) give real-valued counts ``m p``; no noise, no shrinkage.
    """
    m = plan.arm_counts.astype(np.float64)
    m_t, m_c = m[:, 0, None], m[:, 1, None]
    t, c = theta[..., 0, :], theta[..., 1, :]
    if plan.binary:
        return binary_effects(plan.effect, m_t * t, m_t, m_c * c, m_c)
    if s2 is None:
        raise InputDataError(f"effect={plan.effect!r} needs each arm's variance release")
    sd = np.sqrt(s2)
    return continuous_effects(plan.effect, t, sd[..., 0, :], m_t, c, sd[..., 1, :], m_c)


def two_arm_noise_errors(
    result: TwoArmMetaAnalysis, draws: int, seed: int
) -> tuple[dict[str, FloatArray], dict[str, FloatArray]]:
    """Return the point figures and ``draws`` bootstrap errors of the privacy noise (two arms).

    :func:`~fa_hetdp.protocol.silo_summaries.noise_bootstrap_errors` with every arm as a
    group: the bootstrap world's true arm summaries are the released ones (proportions clipped
    into ``[0, 1]``; variances the released ones less a noise draw, a noise-swamped arm's a
    typical one instead, clipped into what a sample variance can be:
    :func:`~fa_hetdp.protocol.silo_summaries.plausible_variances` and
    :func:`~fa_hetdp.protocol.silo_summaries.true_variances`, as the one-arm silo summaries),
    their exact analysis (``escalc`` then DerSimonian-Laird) the truth; every
    arm's means (and variances) are redrawn with their known noise and the private estimator
    (:func:`noisy_effects`, then DerSimonian-Laird with the noise in the variances) applied.
    """
    plan = result.plan
    if not isinstance(plan, TwoArmPlan):
        raise InputDataError("two-arm sample intervals need a private two-arm result")
    arm_plan: TwoArmPlan = plan
    n, d = arm_plan.n, arm_plan.d
    st, ss = arm_plan.sigmas
    theta = np.asarray(result.releases["theta"])
    released = {"theta": np.asarray(np.clip(theta, 0.0, 1.0)) if arm_plan.binary else theta}
    noise_sd = {"theta": np.asarray(st[:, :, None])}
    truths: dict[str, Callable[[FloatArray], FloatArray]] = {}
    if not arm_plan.binary:
        released["s2"] = np.asarray(result.releases["s2"])
        noise_sd["s2"] = np.asarray(ss[:, :, None])
        counts = arm_plan.arm_counts.reshape(2 * n)
        plausible = plausible_variances(
            counts, ss.reshape(2 * n), released["s2"].reshape(2 * n, d), seed
        )

        def true_s2(s2: FloatArray) -> FloatArray:
            lead = s2.shape[:-3]
            out = true_variances(counts, plausible(s2.reshape(*lead, 2 * n, d)))
            return np.asarray(out.reshape(*lead, n, 2, d))

        truths["s2"] = true_s2

    def estimate(r: dict[str, FloatArray]) -> dict[str, FloatArray]:
        y, v_s, v_n, _ = noisy_effects(arm_plan, r["theta"], r.get("s2"))
        return _dl_figures(y, v_s + v_n)

    def exact(r: dict[str, FloatArray]) -> dict[str, FloatArray]:
        return _dl_figures(*_exact_effects(arm_plan, r["theta"], r.get("s2")))

    return noise_bootstrap_errors(released, noise_sd, estimate, exact, draws, seed, truths)


def two_arm_intervals(
    result: TwoArmMetaAnalysis, level: float, draws: int, seed: int
) -> MetaIntervals:
    """Sample intervals (``target="sample"``) of a private two-arm result: the exact figures.

    The intervals of the exact analysis' figures on these records (:func:`exact_two_arm`:
    ``escalc`` then DerSimonian-Laird), the privacy noise only: the seeded parametric bootstrap
    :func:`two_arm_noise_errors`, its errors' quantiles turned into intervals as the one-arm
    silo summaries turn theirs
    (:func:`~fa_hetdp.protocol.meta_inference.intervals_from_errors`: the means, ``Q``,
    ``tau2_raw`` and the summed ``Q`` ``[x - e_hi, x - e_lo]``; ``q``, ``tau2``, ``I^2``
    (metafor's, ``(Q - (n - 1))/Q`` of the exact ``Q``) and ``i2_total`` their monotone
    images). On the scale the analysis ran on (an MD of columns in ``[0, 1]``; OR and RR log).
    """
    from fa_hetdp.protocol.meta_inference import intervals_from_errors

    point, err = two_arm_noise_errors(result, draws, seed)
    return intervals_from_errors(
        point, err, level, result.n, result.d, mean_range=EFFECT_RANGES[result.effect]
    )


def release_silo_arms(
    plan: TwoArmPlan, silo: int, summaries: ArmSummaries, rng: np.random.Generator
) -> tuple[ArmRelease, ArmRelease]:
    """Return silo ``silo``'s two arm releases (treated, then control) from its own summaries.

    ``summaries`` holds this silo's arms alone (``n = 1``: what a silo computes on its own
    records, :func:`arm_summaries` with every id 0) or every silo's (row ``silo`` is taken);
    ``rng`` is the silo's noise generator (a CSPRNG in a deployment), drawn treated arm first
    (:func:`release_arm`). What a node of a Flower run releases, and each silo of
    :func:`run_two_arm`.
    """
    row = 0 if summaries.n == 1 else silo
    treated, control = (
        release_arm(
            plan,
            silo,
            a,
            summaries.theta[row, a],
            None if plan.binary else summaries.s2[row, a],
            int(summaries.m[row, a]),
            rng,
        )
        for a in (0, 1)
    )
    return treated, control


def stack_arm_releases(
    plan: TwoArmPlan, releases: Sequence[tuple[ArmRelease, ArmRelease]]
) -> tuple[FloatArray, FloatArray | None]:
    """Every silo's two arm releases as the ``(n, 2, d)`` ``theta`` (and ``s2``) arrays."""
    theta = np.stack([np.stack([t.theta, c.theta]) for t, c in releases])
    s2 = None
    if not plan.binary:
        s2 = np.stack([np.stack([np.asarray(t.s2), np.asarray(c.s2)]) for t, c in releases])
    return np.asarray(theta.reshape(plan.n, 2, plan.d)), (
        None if s2 is None else np.asarray(s2.reshape(plan.n, 2, plan.d))
    )


def run_two_arm(
    plan: TwoArmPlan, summaries: ArmSummaries, rng: np.random.Generator
) -> TwoArmMetaAnalysis:
    """Every arm of every silo releases its noisy summaries (silo by silo, treated first)."""
    out = [release_silo_arms(plan, i, summaries, rng) for i in range(summaries.n)]
    theta, s2 = stack_arm_releases(plan, out)
    return assemble_two_arm(plan, theta, s2)
