"""The silo-summaries design of the private meta-analysis: each silo releases its own summaries.

Under the record unit with public record counts ``m_i``, silos hold disjoint records, so the
releases of different silos compose in *parallel*: replacing one record changes one silo's
data, and only that silo's release depends on it. So each silo may release its own
record-level-DP summaries at the whole budget (docs/privacy.md, "The silo-summaries design"),
and the server analyses the noisy summaries:

- silo ``i`` releases, per coordinate ``j``, its mean ``theta~_ij = theta_ij + e_ij`` and its
  sample variance ``s2~_ij = s2_ij + g_ij`` (``ddof = 1``), ``e_i ~ N(0, st_i^2 I_d)``,
  ``g_i ~ N(0, ss_i^2 I_d)``, one Gaussian release each: one record moves every coordinate's
  mean by at most ``1/m_i`` and its sum of squared deviations by at most 1, so the
  sensitivities are ``sqrt(d)/m_i`` and ``sqrt(d)/(m_i - 1)`` (``sqrt(2)`` for one-hot
  records, whose replacement moves two coordinates), ``st_i = sqrt(d)/(m_i mu_theta)``,
  ``ss_i = sqrt(d)/((m_i - 1) mu_s2)`` with ``mu_theta^2 + mu_s2^2 = mu^2``, ``mu`` the GDP
  parameter of the budget;
- the server (:func:`silo_figures`) estimates each silo's variance (the noisy ``s2~``, shrunk
  towards the pooled within-variance by how much its noise weighs: a precision-weighted
  empirical-Bayes estimate, so a small silo's noisy variance does not set its weight), its
  inverse-variance weight ``w_i = m_i/s2^_i``, the fixed-effect mean from the noisy means, and
  Cochran's ``Q`` with the known noise taken out: ``E[Q~] = Q + sum w st^2 (1 - w/sum w)``
  given the weights, so ``Q^ = Q~ - sum w st^2 (1 - w/sum w)``; ``I^2``, DerSimonian-Laird
  ``tau2`` and the random-effects mean follow as in the exact analysis.

The server sees every silo's noisy means and variances (per-silo estimates come free); no
secure aggregation is needed and no noise share is shared, so the guarantee holds against the
server and any coalition of the other silos. Everything after the releases is
post-processing. :func:`silo_figures` is the one formula both the estimate and its intervals (a
parametric bootstrap of the known noise) use.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from fa_hetdp._types import FloatArray
from fa_hetdp.dp.accounting import BudgetPlan, ReleaseSpec, plan_budget, privacy_spent
from fa_hetdp.dp.mechanisms import NoiseMechanism, get_mechanism
from fa_hetdp.errors import InputDataError, PrivacyParameterError
from fa_hetdp.protocol.meta_client import ClientSummary
from fa_hetdp.protocol.meta_plan import (
    MAX_WITHIN_VARIANCE,
    SILO_RELEASES,
    SILO_WEIGHTS,
    MetaSettings,
    planned_mu,
)
from fa_hetdp.protocol.meta_server import MetaIntervals, PrivateMetaAnalysis
from fa_hetdp.stats.meta import i2_from_q

__all__ = [
    "SILO_ADVERSARY",
    "SiloPlan",
    "SiloRelease",
    "assemble_silo_result",
    "check_silo_release",
    "noise_bootstrap_errors",
    "plan_silo_summaries",
    "plausible_variances",
    "release_silo",
    "shrink_variances",
    "silo_bounds",
    "silo_figures",
    "silo_intervals",
    "silo_noise_errors",
    "silo_summaries_problem",
    "true_variances",
]

SILO_ADVERSARY: Final = (
    "the server and any coalition of the other silos: each silo's own noise protects its "
    "records (no noise share is shared, no secure aggregation is needed)"
)
WHAT_THE_SERVER_SAW: Final = (
    "every silo's noisy coordinate means and sample variances (its own release, at the whole "
    "budget; record unit, m_i public)"
)
VARIANCE_RESOLUTION: Final = 1e-6
"""The smallest candidate true variance in the intervals' bootstrap: a silo whose variance
release is mostly noise may have a true variance far below it, down to about this."""
UNKNOWN_VARIANCE_CV: Final = 0.5
"""The least coefficient of variation of a noise-swamped silo's true variance in the sample
intervals' bootstrap world (:func:`plausible_variances`). The spread of the variances estimated
from releases that are mostly noise is often 0, and a world in which every such silo's variance
is the pooled one hides how far the exact weights are from the estimator's: 8 silos of
100-1 000 records at epsilon = 1 held the fixed-effect mean in 49 % of runs and Q in 67 % at no
floor, 91 % and 89 % at 0.5, 99.5 % and 99.7 % at 1; real silos (chem97, exam) fall to 60-73 %
at 1, where the gamma's mass near 0 gives the world weights no silo has, and hold 96-98 % at
0.5 (300 and 60 runs, ``tests/test_silo_summaries.py``, ``benchmarks/meta_real_bench.py``)."""
MIN_VARIANCE: Final = 1e-12
"""The smallest variance estimate a silo's weight may use (a constant column's weight is
otherwise infinite)."""


def silo_summaries_problem(settings: MetaSettings) -> str | None:
    """Why the silo-summaries design cannot run under ``settings`` (None: it can)."""
    if settings.privacy_unit != "record":
        return (
            "the silo-summaries design protects a record (each silo's own release at the whole "
            "budget composes in parallel only across disjoint records); under "
            "privacy_unit='client' only the secure sums run"
        )
    if settings.min_records is not None:
        return (
            "the silo-summaries design calibrates each silo to its own public record count; "
            "with min_records (counts not public) only the secure sums run"
        )
    if settings.placement != "distributed":
        return (
            "the silo-summaries design adds each silo's noise on the silo; placement='central' "
            "would show the server a silo's exact summaries"
        )
    return None


def silo_bounds(m: npt.ArrayLike, d: int, one_hot: bool = False) -> tuple[FloatArray, FloatArray]:
    """L2 sensitivities of one silo's mean and variance vectors to one record (record unit).

    ``sqrt(k)/m`` and ``sqrt(k)/(m - 1)`` with ``k = d`` (``k = 2`` for one-hot records):
    one record moves a coordinate's mean by at most ``1/m`` and its sum of squared deviations
    by at most 1 (docs/privacy.md, fact 2), so its sample variance by ``1/(m - 1)``.
    """
    k = math.sqrt(min(2, d) if one_hot else d)
    mm = np.asarray(m, dtype=np.float64)
    return np.asarray(k / mm), np.asarray(k / (mm - 1.0))


@dataclass(frozen=True)
class SiloPlan:
    """The calibrated silo-summaries design for public counts ``m_i`` and ``d`` coordinates.

    Attributes
    ----------
    settings : MetaSettings
    n, d : int
    records_per_client : ndarray
        The public ``m_i``.
    budget : BudgetPlan or None
        Two unit-sensitivity releases, ``theta`` and ``s2`` (``sigma = 1/mu_k``); None
        without noise.
    epsilon, delta : float
    labels : tuple[str, ...]
    """

    settings: MetaSettings
    n: int
    d: int
    records_per_client: npt.NDArray[np.int64]
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
        """What the plan protects: one record."""
        return "record"

    @property
    def m_min(self) -> int:
        """The smallest ``m_i``."""
        return int(self.records_per_client.min())

    @property
    def mechanism(self) -> NoiseMechanism:
        """The noise mechanism (Gaussian)."""
        return get_mechanism(self.settings.mechanism)

    def mu(self, name: str) -> float:
        """Planned GDP ``mu_k`` of release ``name`` (inf without noise)."""
        return planned_mu(self.budget, name)

    @property
    def sigmas(self) -> tuple[FloatArray, FloatArray]:
        """Per-silo noise std ``(st_i, ss_i)`` of every coordinate's mean and variance, (n,)."""
        bt, bs = silo_bounds(self.records_per_client, self.d, self.settings.one_hot)
        if self.budget is None:
            return np.zeros(self.n), np.zeros(self.n)
        return np.asarray(bt / self.mu("theta")), np.asarray(bs / self.mu("s2"))

    @property
    def spent(self) -> Any:
        """The privacy spent by every silo's release (parallel composition: one silo's)."""
        return None if self.budget is None else privacy_spent(self.budget)

    @property
    def unit_of_privacy(self) -> str:
        """The sentence of what the guarantee protects."""
        from fa_hetdp.protocol.guarantee import unit_of_privacy

        return unit_of_privacy("record", self.m_min)


def plan_silo_summaries(
    epsilon: float,
    delta: float,
    records_per_client: Sequence[int] | npt.NDArray[np.integer[Any]],
    d: int,
    settings: MetaSettings | None = None,
) -> SiloPlan:
    """Calibrate every silo's release for the public counts ``m_i`` and ``d``.

    Raises
    ------
    PrivacyParameterError
        The settings do not allow the design (:func:`silo_summaries_problem`) or a bad budget.
    InputDataError
        Fewer than 2 silos, a count below 2, or ``d < 1``.
    """
    # the design exists under the record unit only: no settings means that one
    s = settings or MetaSettings(privacy_unit="record", design="silo-summaries")
    problem = silo_summaries_problem(s)
    if problem is not None:
        raise PrivacyParameterError(problem + ".")
    m = np.asarray(records_per_client, dtype=np.int64)
    if m.ndim != 1 or m.size < 2 or np.any(m < 2):
        raise InputDataError(
            f"records_per_client must list n >= 2 counts, each >= 2, got {m.tolist()[:10]}."
        )
    if int(d) < 1:
        raise InputDataError(f"d must be >= 1, got d={d}.")
    labels = [
        "silo summaries: each silo released its own noisy means and variances at the whole "
        "budget (parallel composition over disjoint records)"
    ]
    budget: BudgetPlan | None = None
    if s.noise:
        weights = dict(SILO_WEIGHTS)
        if s.weights is not None:
            weights.update({k: v for k, v in s.weights.items() if k in SILO_RELEASES})
        specs = [ReleaseSpec(r, 1.0, weights[r]) for r in SILO_RELEASES]
        budget = plan_budget(epsilon, delta, specs, mechanism="agm", composition="gdp")
        labels.extend(budget.labels)
    else:
        labels.append("not private: noise off (a reference run; no epsilon is stated)")
    return SiloPlan(
        settings=s,
        n=int(m.size),
        d=int(d),
        records_per_client=m,
        budget=budget,
        epsilon=float(epsilon),
        delta=float(delta),
        labels=tuple(labels),
    )


@dataclass(frozen=True)
class SiloRelease:
    """What one silo sends: its noisy coordinate means and sample variances, and its count."""

    theta: FloatArray
    s2: FloatArray
    m: int


def release_silo(
    plan: SiloPlan, index: int, summary: ClientSummary, rng: np.random.Generator
) -> SiloRelease:
    """Return silo ``index``'s release: its summary plus its own Gaussian noise.

    ``rng`` is the silo's noise generator (a CSPRNG in a deployment).

    Raises
    ------
    InputDataError
        The summary's count is not the plan's public ``m_index`` or its length is not ``d``.
    """
    m = int(plan.records_per_client[index])
    if summary.m != m or summary.theta.shape != (plan.d,):
        raise InputDataError(
            f"silo {index}: the plan's public count is {m} records on d={plan.d}, its summary "
            f"has {summary.m} records on {summary.theta.shape}"
        )
    st, ss = plan.sigmas
    theta = np.asarray(summary.theta, dtype=np.float64)
    s2 = np.asarray(summary.s2, dtype=np.float64)
    if plan.budget is not None:
        mech = plan.mechanism
        theta = theta + mech.sample(np.full(plan.d, st[index]), (plan.d,), rng=rng)
        s2 = s2 + mech.sample(np.full(plan.d, ss[index]), (plan.d,), rng=rng)
    return SiloRelease(theta=np.asarray(theta), s2=np.asarray(s2), m=m)


def check_silo_release(value: Any, d: int, m: int) -> SiloRelease:
    """Read one silo's release from a message (finite vectors of length ``d``).

    Raises
    ------
    ValueError
        One line: what was wrong (the server drops that silo's message).
    """
    try:
        theta = np.asarray(value["theta"], dtype=np.float64)
        s2 = np.asarray(value["s2"], dtype=np.float64)
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"a silo release must hold 'theta' and 's2' vectors ({exc})") from None
    if theta.shape != (d,) or s2.shape != (d,):
        raise ValueError(f"a silo release must hold two vectors of length d={d}")
    if not (np.all(np.isfinite(theta)) and np.all(np.isfinite(s2))):
        raise ValueError("a silo release must hold finite numbers")
    return SiloRelease(theta=theta, s2=s2, m=int(m))


def _variance_estimates(plan: SiloPlan, s2: FloatArray) -> FloatArray:
    """Each silo's within-variance estimate from the noisy ``s2~`` (..., n, d).

    Clipped to the range a sample variance of values in ``[0, 1]`` can take
    (``[0, m/(4(m - 1))]``), then shrunk towards the pooled variance ``sum (m - 1) s2~ /
    sum (m - 1)`` by ``lambda_i = b/(b + ss_i^2)``, ``b`` the between-silo variance of the
    variances (a moment estimate weighted by each release's noise precision,
    :func:`_spread_of_variances`): a silo whose noise is small keeps its own variance, one
    whose noise swamps it takes the pooled one; then floored at the lesser of its release's
    noise sd and the pooled variance. Post-processing.
    """
    _, ss = plan.sigmas
    return shrink_variances(plan.records_per_client, ss, s2)[0]


def shrink_variances(
    counts: npt.ArrayLike, ss: npt.ArrayLike, s2: FloatArray
) -> tuple[FloatArray, FloatArray]:
    """:func:`_variance_estimates` for groups of ``counts`` records, noise std ``ss``; and lambda.

    ``s2`` ``(..., g, d)`` the groups' noisy sample variances; returns the estimates and the
    shrinkage factors ``lambda_i`` (the weight of the group's own clipped variance). The two-arm
    analysis (:mod:`fa_hetdp.protocol.two_arm`) calls it on the silos' arms as groups.
    """
    ss = np.asarray(ss, dtype=np.float64)
    top = _top(counts)
    clipped = np.clip(s2, 0.0, top)
    pooled, _, lam = variance_prior(counts, ss, s2)
    shrunk = lam * clipped + (1.0 - lam) * pooled
    # not below the release's own noise sd, unless that is above the pooled variance (a silo
    # whose noise exceeds a typical variance is one whose variance nobody knows: typical); a
    # pooled variance below VARIANCE_RESOLUTION (a column all noise) leaves the noise sd
    noise_sd = np.maximum(ss, MIN_VARIANCE)[:, None]
    floor = np.where(pooled > VARIANCE_RESOLUTION, np.minimum(noise_sd, pooled), noise_sd)
    return np.asarray(np.clip(shrunk, floor, top)), np.asarray(lam)


def _top(counts: npt.ArrayLike) -> FloatArray:
    """``(g, 1)``: the largest sample variance of ``m`` values in [0, 1], ``m/(4(m - 1))``."""
    m = np.asarray(counts).astype(np.float64)[:, None]
    return np.asarray(m / (4.0 * (m - 1.0)))


def variance_prior(
    counts: npt.ArrayLike, ss: npt.ArrayLike, s2: FloatArray
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Return what the groups' noisy variances ``s2`` (..., g, d) say about the true ones.

    Returns the pooled variance ``sum (m - 1) s2~ / sum (m - 1)`` and the between-group
    variance of the variances ``b`` (both ``(..., 1, d)``; :func:`_spread_of_variances`), and
    each group's shrinkage factor ``lambda_i = b/(b + ss_i^2)`` (``(..., g, d)``).
    Post-processing.
    """
    m = np.asarray(counts).astype(np.float64)[:, None]
    ss = np.asarray(ss, dtype=np.float64)
    noise_var = (ss * ss)[:, None]
    clipped = np.clip(s2, 0.0, _top(counts))
    dof = m - 1.0
    pooled = np.sum(dof * clipped, axis=-2, keepdims=True) / float(np.sum(dof))
    between = np.maximum(_spread_of_variances(clipped, noise_var), MIN_VARIANCE)
    return np.asarray(pooled), np.asarray(between), np.asarray(between / (between + noise_var))


def _spread_of_variances(s2: FloatArray, noise_var: FloatArray) -> FloatArray:
    """Return the between-group variance of true variances, from releases of known noise.

    DerSimonian and Laird's moment estimator with the released variances as the effects and
    their noise variances as the within-variances (``(..., 1, d)``, may be < 0): each release
    weighs by its noise precision, so one group whose release is mostly noise (a silo of 29
    records beside silos of 50 000) neither sets the spread nor makes the others shrink.
    """
    g = s2.shape[-2]
    w = 1.0 / np.maximum(noise_var, MIN_VARIANCE)
    sw = np.sum(w, axis=-2, keepdims=True)
    centre = np.sum(w * s2, axis=-2, keepdims=True) / sw
    q = np.sum(w * (s2 - centre) ** 2, axis=-2, keepdims=True)
    c = sw - np.sum(w * w, axis=-2, keepdims=True) / sw
    if g < 2 or not np.all(c > 0):  # one group, or every weight on one: no spread to see
        return np.zeros_like(q)
    return np.asarray((q - (g - 1)) / c)


def true_variances(counts: npt.ArrayLike, s2: FloatArray) -> FloatArray:
    """Clip candidate true variances ``(..., g, d)`` of groups of ``counts`` records ``(g,)``.

    To what a sample variance of values in [0, 1] can be, ``[VARIANCE_RESOLUTION, m/(4(m -
    1))]``: the bootstrap world's true variances (:func:`noise_bootstrap_errors`); the two-arm
    analysis calls it on the silos' arms as groups.
    """
    m = np.asarray(counts).astype(np.float64)[:, None]
    return np.asarray(np.clip(s2, VARIANCE_RESOLUTION, m / (4.0 * (m - 1.0))))


def _true_variances(plan: SiloPlan, s2: FloatArray) -> FloatArray:
    """:func:`true_variances` of the plan's silos."""
    return true_variances(plan.records_per_client, s2)


def silo_figures(
    plan: SiloPlan, theta: FloatArray, s2: FloatArray, *, exact: bool = False
) -> dict[str, FloatArray]:
    """Every figure from the silos' noisy summaries (arrays ``(..., n, d)``; module docstring).

    Keys: ``pooled_mean``, ``q_raw`` (the noise-corrected ``Q``, may be < 0), ``q``, ``i2``,
    ``tau2_raw``, ``tau2``, ``random_effects_mean``, ``q_total``, ``i2_total``,
    ``variance`` (the silos' variance estimates). ``exact``: the exact analysis of these
    summaries taken as the silos' true ones (no shrinkage, no noise taken out of ``Q``; the
    truth of the intervals' bootstrap world).
    """
    n = plan.n
    m = plan.records_per_client.astype(np.float64)[:, None]
    st, _ = plan.sigmas
    noise = np.zeros((n, 1)) if exact else (st * st)[:, None]
    if exact:
        var = _true_variances(plan, s2)
    else:
        var = _variance_estimates(plan, s2)
    w = m / var
    big_w = np.sum(w, axis=-2)
    mean = np.sum(w * theta, axis=-2) / big_w
    q_noisy = np.sum(w * (theta - mean[..., None, :]) ** 2, axis=-2)
    expected_noise = np.sum(w * noise * (1.0 - w / big_w[..., None, :]), axis=-2)
    q_raw = q_noisy - expected_noise
    q = np.maximum(q_raw, 0.0)
    denom = big_w - np.sum(w * w, axis=-2) / big_w
    tau2_raw = np.minimum((q - (n - 1)) / denom, MAX_WITHIN_VARIANCE)
    tau2 = np.maximum(tau2_raw, 0.0)
    w_star = 1.0 / (var / m + tau2[..., None, :])
    re = np.sum(w_star * theta, axis=-2) / np.sum(w_star, axis=-2)
    q_total = np.sum(q_raw, axis=-1)
    return {
        "pooled_mean": np.clip(mean, 0.0, 1.0),
        "q_raw": q_raw,
        "q": q,
        "i2": i2_from_q(q, n),
        "tau2_raw": tau2_raw,
        "tau2": tau2,
        "random_effects_mean": np.clip(re, 0.0, 1.0),
        "q_total": q_total,
        "i2_total": i2_from_q(np.maximum(q_total, 0.0), n, plan.d),
        "variance": var,
    }


def assemble_silo_result(plan: SiloPlan, releases: Sequence[SiloRelease]) -> PrivateMetaAnalysis:
    """Return the private meta-analysis of every silo's release (in the plan's silo order).

    Raises
    ------
    InputDataError
        Not one release per silo of the plan, or a release's count is not the silo's.
    """
    if len(releases) != plan.n:
        raise InputDataError(f"{len(releases)} silo releases for a plan of n={plan.n} silos")
    counts = [r.m for r in releases]
    if counts != plan.records_per_client.tolist():
        raise InputDataError("the releases' record counts are not the plan's public counts")
    theta = np.stack([r.theta for r in releases])
    s2 = np.stack([r.s2 for r in releases])
    fig = silo_figures(plan, theta, s2)
    wanted = plan.settings.wanted
    nan = np.full(plan.d, np.nan)

    def get(key: str, stat: str) -> FloatArray:
        return np.asarray(fig[key]) if stat in wanted else nan

    st, ss = plan.sigmas
    labels = list(plan.labels)
    _, ss_noise = plan.sigmas
    shrunk = int(np.sum(np.any(ss_noise[:, None] > 0.5 * fig["variance"], axis=1)))
    if shrunk:
        labels.append(
            f"{shrunk} of {plan.n} silos have a variance release whose noise exceeds half their "
            "variance estimate: their weights lean on the pooled within-variance"
        )
    i2 = get("i2", "i2")
    return PrivateMetaAnalysis(
        pooled_mean=get("pooled_mean", "pooled_mean"),
        q=get("q", "q"),
        i2=i2,
        tau2=get("tau2", "tau2"),
        random_effects_mean=get("random_effects_mean", "random_effects_mean"),
        i2_total=float(fig["i2_total"]) if "i2_total" in wanted else float("nan"),
        i2_average=float(np.mean(i2)) if "i2" in wanted else float("nan"),
        n=plan.n,
        d=plan.d,
        records_per_client=plan.records_per_client,
        tau2_raw=get("tau2_raw", "tau2"),
        spent=plan.spent,
        unit_of_privacy=plan.unit_of_privacy,
        plan=plan,
        labels=tuple(labels),
        sums={"theta": theta, "s2": s2},
        noise_std={
            "theta": np.repeat(st[:, None], plan.d, axis=1),
            "s2": np.repeat(ss[:, None], plan.d, axis=1),
        },
        design="silo-summaries",
        adversary=SILO_ADVERSARY,
        server_saw=WHAT_THE_SERVER_SAW,
        silo_means=theta,
        silo_variances=np.asarray(fig["variance"]),
    )


Figures = Callable[[dict[str, FloatArray]], dict[str, FloatArray]]
"""A design's estimator (or its exact analysis): its releases by name to its figures."""


def noise_bootstrap_errors(
    released: dict[str, FloatArray],
    noise_sd: dict[str, FloatArray],
    estimate: Figures,
    exact: Figures,
    draws: int,
    seed: int,
    truths: dict[str, Callable[[FloatArray], FloatArray]] | None = None,
) -> tuple[dict[str, FloatArray], dict[str, FloatArray]]:
    """Return the point figures and ``draws`` bootstrap errors of per-group releases' noise.

    The one parametric bootstrap of the sample intervals (every design whose server sees each
    group's noisy summaries: :func:`silo_noise_errors`, the two-arm effects' arms). The bootstrap
    world's truth is the releases themselves, except a release named in ``truths``: there the
    release less a noise draw (what it may have been), mapped by ``truths[name]`` into what a
    true value can be, so a group whose true value may be far from its release (a variance
    near 0) is in it. Every release is redrawn with its noise (``noise_sd``, broadcast against
    it) around that truth and ``estimate`` applied (arrays with a leading ``draws`` axis); the
    error is the estimate less ``exact`` of the truth, so the estimator's own bias is in it.
    A generator seeded by ``seed`` draws the truths (in ``released``' order), then the
    redraws (in that order).
    """
    rng = np.random.default_rng(seed)
    fix = truths or {}
    world: dict[str, FloatArray] = {}
    for name, value in released.items():
        shape = (draws, *value.shape)
        if name in fix:
            world[name] = fix[name](value - noise_sd[name] * rng.standard_normal(shape))
        else:
            world[name] = np.broadcast_to(value, shape)
    boot = estimate(
        {
            name: world[name] + noise_sd[name] * rng.standard_normal(world[name].shape)
            for name in released
        }
    )
    truth = exact(world)
    point = estimate(released)
    return point, {key: np.asarray(boot[key] - truth[key]) for key in point}


def silo_noise_errors(
    result: PrivateMetaAnalysis, draws: int, seed: int
) -> tuple[dict[str, FloatArray], dict[str, FloatArray]]:
    """Return the point figures and ``draws`` bootstrap errors of the privacy noise (silos).

    The released summaries are taken as the silos' true ones (the bootstrap world's truth:
    their exact analysis, ``silo_figures(..., exact=True)``), every release is redrawn with its
    noise around them and the estimator applied; the error is the estimate minus that truth, so
    the estimator's own bias (the shrinkage of noisy variances) is in it. The true variances
    are the released ones less a noise draw (what they may have been), so a silo whose true
    variance may be far below its release is in it (:func:`noise_bootstrap_errors`).
    """
    plan = result.plan
    if not isinstance(plan, SiloPlan):
        raise InputDataError("silo intervals need a silo-summaries result")
    silo_plan: SiloPlan = plan
    counts = silo_plan.records_per_client
    plausible = plausible_variances(counts, silo_plan.sigmas[1], result.sums["s2"], seed)
    return noise_bootstrap_errors(
        {"theta": result.sums["theta"], "s2": result.sums["s2"]},
        {"theta": result.noise_std["theta"], "s2": result.noise_std["s2"]},
        lambda r: silo_figures(silo_plan, r["theta"], r["s2"]),
        lambda r: silo_figures(silo_plan, r["theta"], r["s2"], exact=True),
        draws,
        seed,
        truths={"s2": lambda s2: _true_variances(silo_plan, plausible(s2))},
    )


def plausible_variances(
    counts: npt.ArrayLike, ss: npt.ArrayLike, released: FloatArray, seed: int
) -> Callable[[FloatArray], FloatArray]:
    """Return the bootstrap world's true variances, from candidates ``release - noise``.

    A group whose release is precise (``lambda_i`` near 1, :func:`variance_prior`) keeps its
    candidate; one whose release is mostly noise takes a draw from the spread of the groups'
    variances instead (a gamma of the pooled variance's mean and the between-group variance, its
    coefficient of variation at least :data:`UNKNOWN_VARIANCE_CV`):
    ``lambda_i * candidate + (1 - lambda_i) * G``. A candidate alone puts such a group's true
    variance at 0 as often as its noise crosses 0, and its weight, and with it the world's
    exact ``Q``, at 10^4 times a real silo's (measured on nycflights13 by carrier: sample
    intervals of ``Q`` holding the exact value in 32-62 % of runs). ``seed`` seeds ``G``.
    """
    pooled, between, lam = variance_prior(counts, ss, released)
    typical = np.maximum(pooled, VARIANCE_RESOLUTION)  # a column all noise: pooled 0
    between = np.maximum(between, (UNKNOWN_VARIANCE_CV * typical) ** 2)
    shape = typical**2 / between
    scale = between / typical
    rng = np.random.default_rng([seed, 1])

    def world(candidate: FloatArray) -> FloatArray:
        draw = rng.gamma(
            np.broadcast_to(shape, candidate.shape), np.broadcast_to(scale, candidate.shape)
        )
        return np.asarray(lam * candidate + (1.0 - lam) * draw)

    return world


def silo_intervals(
    result: PrivateMetaAnalysis, level: float, draws: int, seed: int
) -> MetaIntervals:
    """Sample intervals (``target="sample"``): the exact figures, from the known noise.

    A seeded parametric bootstrap (:func:`silo_noise_errors`); the interval of an untruncated
    figure (``q_raw``, ``tau2_raw``, the means, the summed ``Q``) is the estimate less the
    quantiles of the bootstrap error (estimate minus truth), ``[x - e_hi, x - e_lo]``; ``q``,
    ``i2``, ``i2_total`` and ``tau2`` are the monotone images of theirs. The population
    intervals are :func:`fa_hetdp.protocol.meta_inference.population_intervals`.
    """
    from fa_hetdp.protocol.meta_inference import intervals_from_errors

    point, err = silo_noise_errors(result, draws, seed)
    return intervals_from_errors(point, err, level, result.n, result.d)
