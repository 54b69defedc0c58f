"""Privacy budget: split a total ``(epsilon, delta)`` over releases and account what was spent.

Planning (:func:`plan_budget`) turns a total budget and a list of Gaussian releases
(:class:`ReleaseSpec`) into per-release noise (:class:`BudgetPlan`):

* ``composition="basic"`` (the paper's way, Thm 3.3 and the theorems built like it):
  release ``k`` gets ``epsilon_k = epsilon w_k/sum(w)`` and ``delta_k = delta w_k/sum(w)``
  and ``sigma_k = calibrate_sigma(epsilon_k, delta_k, Delta_k, mechanism)``; the total is
  ``(sum epsilon_k, sum delta_k)``.
* ``composition="gdp"``: exact composition of Gaussian mechanisms (Dong, Roth & Su, Gaussian
  differential privacy, Cor. 3.3: releases with ``mu_k = Delta_k/sigma_k`` compose to
  ``mu = sqrt(sum mu_k**2)``-GDP, and ``mu``-GDP is ``(epsilon, delta)``-DP exactly when a
  single Gaussian with ``sigma/Delta = 1/mu`` is, i.e. Thm 2.10). So
  ``mu = 1/calibrate_sigma(epsilon, delta, 1, "agm")``, ``mu_k = mu sqrt(w_k/sum(w))`` and
  ``sigma_k = Delta_k/mu_k``. The per-release noise is smaller than under basic
  composition for the same total (about 2.2x for 4 equal releases at ``epsilon = 1``,
  ``delta = 1e-5``; see the tests).

Releases with ``counts_for_privacy=False`` (the paper's extra noise on ``I^2'''``, which is
post-processing of already private releases) are calibrated by the same rule as the others
(their weight times the per-unit share) but take nothing from the budget: the shares are
normalised over the counted releases only, so the counted releases spend the whole total.
The paper gives that noise a share of the budget; that would only waste it (with one
uncounted release of five, gdp would spend ``sqrt(4/5)`` of mu). They are left out of the
privacy actually spent (:func:`privacy_spent`).

Accounting (:func:`privacy_spent`) composes the counted releases exactly (Dong-Roth-Su
Cor. 3.3) with the noise that actually arrived (dropouts in the distributed placement leave
a fraction ``m/t`` of the planned noise variance) and reports the total ``(epsilon, delta)``.

The discrete mechanisms (``"ddg"``, ``"skellam"``) take the same path with zCDP in place of
Gaussian DP: a release with ``rho_k = mu_k**2/2`` composes by adding ``rho``, ``"gdp"`` splits
the largest ``rho`` that converts to ``(epsilon, delta)``, and the conversion is the
mechanism's (:meth:`~fa_hetdp.dp.mechanisms.NoiseMechanism.guarantee`; docs/privacy.md).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from numbers import Real
from typing import Final

from fa_hetdp._types import Composition
from fa_hetdp.dp.calibration import (
    EPSILON_WARNING_THRESHOLD,
    Mechanism,
    WeakPrivacyWarning,
    _check_delta,
    _check_positive,
    weak_privacy_label,
)
from fa_hetdp.dp.mechanisms import DiscreteMechanism, PrivacyEvent, get_mechanism
from fa_hetdp.errors import BaselineWarning, PrivacyParameterError

__all__ = [
    "BudgetPlan",
    "CalibratedRelease",
    "Composition",
    "PrivacySpent",
    "ReleaseSpec",
    "ReleaseSpent",
    "optimal_weights",
    "plan_budget",
    "privacy_spent",
]


CGM_BASELINE_LABEL: Final = "CGM at epsilon_k >= 1 is not a DP guarantee (baseline)"
"""Label carried by a :class:`BudgetPlan` whose CGM releases include ``epsilon_k >= 1``."""


def _baseline_label(mechanism: str) -> str:
    """Label of a plan with releases outside the mechanism's guarantee."""
    if mechanism == "cgm":
        return CGM_BASELINE_LABEL
    return f"{mechanism} outside its DP guarantee for some epsilon_k (baseline)"


def _check_composition(composition: object) -> Composition:
    """Validate the composition rule."""
    if composition == "basic":
        return "basic"
    if composition == "gdp":
        return "gdp"
    raise PrivacyParameterError(
        f"composition must be one of 'basic', 'gdp', got composition={composition!r}"
    )


@dataclass(frozen=True)
class ReleaseSpec:
    """One Gaussian release to be planned: its name, L2 sensitivity and budget weight.

    Parameters
    ----------
    name : str
        Unique, non-empty name (e.g. ``"mean"``, ``"dispersion"``).
    sensitivity : float
        L2 sensitivity ``Delta_k`` of the released sum or vector, finite and ``> 0``.
    weight : float, optional
        Relative share of the budget, finite and ``> 0``. Default 1.
    counts_for_privacy : bool, optional
        ``False`` for noise added to post-processed output (the paper's ``I^2'''``): it is
        calibrated like the others but takes no budget and is left out of
        :func:`privacy_spent`.

    Raises
    ------
    PrivacyParameterError
        If the name is empty, or the sensitivity or weight is not a finite number ``> 0``.
    """

    name: str
    sensitivity: float
    weight: float = 1.0
    counts_for_privacy: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise PrivacyParameterError(
                f"release name must be a non-empty string, got name={self.name!r}"
            )
        object.__setattr__(
            self, "sensitivity", _check_positive(f"sensitivity of {self.name!r}", self.sensitivity)
        )
        object.__setattr__(self, "weight", _check_positive(f"weight of {self.name!r}", self.weight))
        if not isinstance(self.counts_for_privacy, bool):
            raise PrivacyParameterError(
                f"counts_for_privacy must be a bool, got counts_for_privacy="
                f"{self.counts_for_privacy!r}"
            )


@dataclass(frozen=True)
class CalibratedRelease:
    """A planned release: its noise and its share of the budget.

    Attributes
    ----------
    name : str
        Release name.
    sensitivity : float
        L2 sensitivity ``Delta_k``.
    sigma : float
        Standard deviation of the (total) Gaussian noise of this release.
    epsilon_share, delta_share : float or None
        ``(epsilon_k, delta_k)`` under basic composition; ``None`` under ``"gdp"``, where a
        release has no separate ``(epsilon, delta)`` of its own (only ``mu_share``).
    counts_for_privacy : bool
        Whether the release enters :func:`privacy_spent`.
    mu_share : float or None
        Gaussian-DP parameter ``mu_k`` of the release (Dong-Roth-Su): the planned
        ``mu sqrt(w_k/sum(w))`` under ``"gdp"``, ``Delta_k/sigma_k`` under ``"basic"``.
    """

    name: str
    sensitivity: float
    sigma: float
    epsilon_share: float | None
    delta_share: float | None
    counts_for_privacy: bool
    mu_share: float | None = None


@dataclass(frozen=True)
class BudgetPlan:
    """Per-release noise for a total budget ``(epsilon, delta)``.

    Attributes
    ----------
    epsilon, delta : float
        The total budget.
    mechanism : {"agm", "cgm", "ddg", "skellam"}
        Calibration rule (paper Thm 2.10 / Alg. 1, Thm 2.9, or the discrete mechanisms' zCDP).
    composition : {"basic", "gdp"}
        How the total was split (see the module docstring).
    releases : tuple of CalibratedRelease
        The planned releases, in the order given.
    labels : tuple of str
        Human-readable caveats (e.g. :data:`CGM_BASELINE_LABEL`).
    not_dp : tuple of str
        Why the plan is not a differential-privacy guarantee (empty when it is one): CGM at
        some ``epsilon_k >= 1`` (set by :func:`plan_budget`), or a caller's reason such as a
        sensitivity that ignores the weights (the protocol's ``"paper"`` profile). Such a
        plan states no ``(epsilon, delta)``: :func:`privacy_spent` returns None for them.
    """

    epsilon: float
    delta: float
    mechanism: Mechanism
    composition: Composition
    releases: tuple[CalibratedRelease, ...]
    labels: tuple[str, ...] = ()
    not_dp: tuple[str, ...] = ()

    @property
    def dp(self) -> bool:
        """Whether the plan is a differential-privacy guarantee (:attr:`not_dp` is empty)."""
        return not self.not_dp

    def release(self, name: str) -> CalibratedRelease:
        """Return the planned release called ``name``.

        Raises
        ------
        PrivacyParameterError
            If no release has that name.
        """
        for rel in self.releases:
            if rel.name == name:
                return rel
        known = ", ".join(repr(r.name) for r in self.releases)
        raise PrivacyParameterError(f"no release named {name!r} in the plan; known: {known}")

    def sigma(self, name: str) -> float:
        """Noise standard deviation of the release called ``name``."""
        return self.release(name).sigma

    @property
    def is_baseline(self) -> bool:
        """``True`` if some ``epsilon_k`` is outside the mechanism's guarantee (CGM: ``>= 1``)."""
        mech = get_mechanism(self.mechanism)
        return any(
            r.epsilon_share is not None and mech.is_baseline(r.epsilon_share) for r in self.releases
        )


@dataclass(frozen=True)
class ReleaseSpent:
    """Noise that one release actually received, and its Gaussian-DP parameter.

    Attributes
    ----------
    name : str
        Release name.
    planned_sigma : float
        Planned noise standard deviation.
    noise_variance_fraction : float
        Arrived noise variance / planned, in ``[0, 1]``.
    effective_sigma : float
        ``planned_sigma sqrt(noise_variance_fraction)``.
    mu : float
        ``Delta_k/effective_sigma`` (``inf`` if no noise arrived).
    counts_for_privacy : bool
        Whether the release enters the total.
    """

    name: str
    planned_sigma: float
    noise_variance_fraction: float
    effective_sigma: float
    mu: float
    counts_for_privacy: bool


@dataclass(frozen=True)
class PrivacySpent:
    """Total privacy spent under exact composition (Dong, Roth & Su, Cor. 3.3).

    Two valid pairs: ``(epsilon, delta)`` and ``(plan epsilon, delta_at_target_epsilon)``;
    never ``epsilon`` beside ``delta_at_target_epsilon``. For a plan that is not a DP
    guarantee (:attr:`BudgetPlan.not_dp`) every one of them is None and ``mu`` is NaN: no
    number is stated for what does not hold.

    Attributes
    ----------
    epsilon : float or None
        Smallest ``epsilon`` at ``delta`` (``inf`` if a counted release got no noise).
    delta : float or None
        The plan's ``delta``, at which ``epsilon`` is stated.
    mu : float
        ``sqrt(sum_k (Delta_k/sigma_eff_k)**2)`` over counted releases (NaN when not DP).
    delta_at_target_epsilon : float or None
        Exact ``delta`` at the plan's ``epsilon``.
    degraded : bool
        ``True`` if some counted release received less noise than planned.
    per_release : tuple of ReleaseSpent
        Per-release detail, including releases that do not count.
    accounting : str
        How the releases were composed and converted (the mechanism's
        :attr:`~fa_hetdp.dp.mechanisms.NoiseMechanism.accounting`); for the discrete
        mechanisms ``mu`` is ``sqrt(2 rho)`` of the composed zCDP ``rho``.
    not_dp : tuple of str
        Why this is not a DP guarantee (the plan's :attr:`BudgetPlan.not_dp`); empty if it is.
    """

    epsilon: float | None
    delta: float | None
    mu: float
    delta_at_target_epsilon: float | None
    degraded: bool
    per_release: tuple[ReleaseSpent, ...]
    accounting: str = "Gaussian DP (Dong-Roth-Su Cor. 3.3), exact for Gaussian noise"
    not_dp: tuple[str, ...] = ()

    @property
    def dp(self) -> bool:
        """Whether this is a differential-privacy guarantee (then epsilon and delta are set)."""
        return not self.not_dp


def _validate_releases(releases: Sequence[ReleaseSpec]) -> tuple[ReleaseSpec, ...]:
    """Check the release list: non-empty, ReleaseSpec items, unique names."""
    items = tuple(releases)
    if not items:
        raise PrivacyParameterError("releases must contain at least one ReleaseSpec, got []")
    seen: set[str] = set()
    for item in items:
        if not isinstance(item, ReleaseSpec):
            raise PrivacyParameterError(
                f"releases must be ReleaseSpec instances, got {item!r} ({type(item).__name__})"
            )
        if item.name in seen:
            raise PrivacyParameterError(
                f"release names must be unique, got duplicate name={item.name!r}"
            )
        seen.add(item.name)
    return items


def plan_budget(
    epsilon: float,
    delta: float,
    releases: Sequence[ReleaseSpec],
    *,
    mechanism: Mechanism = "agm",
    composition: Composition = "gdp",
) -> BudgetPlan:
    """Split a total ``(epsilon, delta)`` over Gaussian releases and calibrate their noise.

    ``"basic"`` composition (the paper's: ``epsilon = sum epsilon_k``, ``delta = sum
    delta_k``): ``epsilon_k = epsilon w_k/sum(w)``, ``delta_k = delta w_k/sum(w)``,
    ``sigma_k = calibrate_sigma(epsilon_k, delta_k, Delta_k, mechanism)``.

    ``"gdp"`` composition (Dong, Roth & Su, Cor. 3.3; AGM only):
    ``mu = 1/calibrate_sigma(epsilon, delta, 1, "agm")``, ``mu_k = mu sqrt(w_k/sum(w))``,
    ``sigma_k = Delta_k/mu_k``; the composition of all releases is exactly
    ``(epsilon, delta)``-DP.

    Releases with ``counts_for_privacy=False`` (post-processing noise such as the paper's
    ``I^2'''``) are calibrated with the same per-unit share, but ``sum(w)`` runs over the
    counted releases only: they take nothing from the budget (departure from the paper, whose
    split wastes budget on post-processing), and :func:`privacy_spent` does not count them.

    Parameters
    ----------
    epsilon : float
        Total epsilon, finite and ``> 0``.
    delta : float
        Total delta in ``(0, 1)``.
    releases : sequence of ReleaseSpec
        At least one, unique names.
    mechanism : {"agm", "cgm", "ddg", "skellam"}, optional
        Calibration rule (paper Thm 2.10 / Alg. 1, Thm 2.9, or the discrete mechanisms'
        zCDP, :class:`~fa_hetdp.dp.mechanisms.DiscreteMechanism`). Default ``"agm"``.
    composition : {"basic", "gdp"}, optional
        Budget split. Default ``"gdp"`` (``"cgm"`` needs ``"basic"``).

    Returns
    -------
    BudgetPlan
        The per-release noise, with caveat labels.

    Raises
    ------
    PrivacyParameterError
        For invalid parameters, an empty or duplicated release list, or ``"gdp"`` with
        ``"cgm"`` (CGM is a basic-composition baseline of the paper; exact composition needs
        the exact Gaussian calibration of the AGM).

        Also when the calibration cannot converge (``epsilon`` so large that the noise
        underflows, or the calibrated noise does not give back the target): the message says
        why, and no plan is returned.

    Warns
    -----
    BaselineWarning
        Once, for CGM with some ``epsilon_k >= 1`` (not a DP guarantee).
    WeakPrivacyWarning
        For a total ``epsilon`` above
        :data:`~fa_hetdp.dp.calibration.EPSILON_WARNING_THRESHOLD` (the plan carries the
        label too).
    """
    epsilon_f = _check_positive("epsilon", epsilon)
    delta_f = _check_delta(delta)
    mech = get_mechanism(mechanism)
    comp = _check_composition(composition)
    items = _validate_releases(releases)
    if not mech.supports(comp):
        raise PrivacyParameterError(
            f"composition={comp!r} is not available with mechanism={mech.name!r} "
            f"({mech.description}); it supports composition in {mech.compositions}"
        )
    labels: list[str] = []
    weak = weak_privacy_label(epsilon_f)
    if weak is not None:
        labels.append(weak)
        warnings.warn(weak, WeakPrivacyWarning, stacklevel=2)
    try:
        planned, not_dp = _calibrate(epsilon_f, delta_f, items, mech.name, comp, labels)
    except (ArithmeticError, ValueError) as exc:  # underflow, divergence, no bracket
        raise _not_calibrated(epsilon_f, delta_f, f"{type(exc).__name__}: {exc}") from exc
    budget = BudgetPlan(
        epsilon=epsilon_f,
        delta=delta_f,
        mechanism=mechanism,
        composition=comp,
        releases=tuple(planned),
        labels=tuple(labels),
        not_dp=tuple(not_dp),
    )
    _check_converged(budget)
    return budget


def _not_calibrated(epsilon: float, delta: float, reason: str) -> PrivacyParameterError:
    return PrivacyParameterError(
        f"epsilon={epsilon:g} (delta={delta:g}) cannot be calibrated: {reason}. Use a smaller "
        f"epsilon (above {EPSILON_WARNING_THRESHOLD:g} the guarantee hardly protects a client)."
    )


def _check_converged(budget: BudgetPlan) -> None:
    """Refuse a plan whose noise is not finite and positive or does not give its target back.

    The exact composition of the calibrated releases (:func:`privacy_spent`) must spend the
    target ``epsilon`` (``"gdp"``, to 1e-6) or at most it (``"basic"``); a calibration that
    lost precision (a huge ``epsilon``) fails this instead of stating a false guarantee.
    """
    eps, delta = budget.epsilon, budget.delta
    for r in budget.releases:
        if not (math.isfinite(r.sigma) and r.sigma > 0.0):
            raise _not_calibrated(eps, delta, f"the noise of {r.name!r} is sigma={r.sigma!r}")
    if not budget.dp or not any(r.counts_for_privacy for r in budget.releases):
        return  # nothing stated (not DP), or nothing spent (post-processing only)
    try:
        spent = privacy_spent(budget).epsilon
    except (ArithmeticError, ValueError) as exc:
        raise _not_calibrated(eps, delta, f"{type(exc).__name__}: {exc}") from exc
    low = eps * (1.0 - 1e-6) if budget.composition == "gdp" else 0.0
    if spent is None or not low <= spent <= eps * (1.0 + 1e-6):
        raise _not_calibrated(
            eps, delta, f"the calibrated noise gives epsilon={spent!r} back, not {eps:g}"
        )


def _calibrate(
    epsilon_f: float,
    delta_f: float,
    items: tuple[ReleaseSpec, ...],
    mechanism: str,
    comp: Composition,
    labels: list[str],
) -> tuple[list[CalibratedRelease], list[str]]:
    """Calibrate every release (see :func:`plan_budget`); appends caveats to ``labels``."""
    mech = get_mechanism(mechanism)
    counted_weight = math.fsum(r.weight for r in items if r.counts_for_privacy)
    # Shares are normalised over the counted releases; post-processing noise takes none.
    total_weight = counted_weight if counted_weight > 0 else math.fsum(r.weight for r in items)
    planned: list[CalibratedRelease] = []
    not_dp: list[str] = []  # why the plan is not a DP guarantee (CGM at epsilon_k >= 1)
    if comp == "basic":
        baseline: list[str] = []
        for r in items:
            share = r.weight / total_weight
            eps_k = epsilon_f * share
            delta_k = delta_f * share
            sigma_k = mech.calibrate(eps_k, delta_k, r.sensitivity)  # Thm 2.9 / 2.10
            if mech.is_baseline(eps_k):
                baseline.append(f"{r.name} (epsilon_k={eps_k:.6g})")
            planned.append(
                CalibratedRelease(
                    name=r.name,
                    sensitivity=r.sensitivity,
                    sigma=sigma_k,
                    epsilon_share=eps_k,
                    delta_share=delta_k,
                    counts_for_privacy=r.counts_for_privacy,
                    mu_share=r.sensitivity / sigma_k,
                )
            )
        if baseline:
            label = f"{_baseline_label(mech.name)}: {', '.join(baseline)}"
            labels.append(label)
            not_dp.append(label)
            warnings.warn(label, BaselineWarning, stacklevel=3)
    else:
        mu_total = mech.total_mu(epsilon_f, delta_f)  # Thm 2.10 (discrete: zCDP, CKS Prop. 12)
        for r in items:
            mu_k = mu_total * math.sqrt(r.weight / total_weight)  # Dong-Roth-Su Cor. 3.3
            planned.append(
                CalibratedRelease(
                    name=r.name,
                    sensitivity=r.sensitivity,
                    sigma=mech.calibrate_gdp(mu_k, r.sensitivity),
                    epsilon_share=None,
                    delta_share=None,
                    counts_for_privacy=r.counts_for_privacy,
                    mu_share=mu_k,
                )
            )
    if isinstance(mech, DiscreteMechanism):
        labels.append(f"{mech.description}; accounting: {mech.accounting}")
    uncounted = [r.name for r in items if not r.counts_for_privacy]
    if uncounted:
        labels.append(
            "post-processing noise (calibrated like a release, takes no budget, "
            "not counted in the privacy spent): " + ", ".join(uncounted)
        )
    return planned, not_dp


def optimal_weights(
    sensitivities: Mapping[str, float], error_weights: Mapping[str, float]
) -> dict[str, float]:
    """Gaussian-DP budget weights that minimise ``sum_k a_k sigma_k**2`` at a fixed total ``mu``.

    With ``u_k = (Delta_k/sigma_k)**2`` and ``sum_k u_k = mu**2`` (Dong, Roth & Su, Cor. 3.3),
    ``sigma_k**2 = Delta_k**2/u_k``; the Lagrange condition ``a_k Delta_k**2/u_k**2 = lambda``
    gives ``u_k`` proportional to ``Delta_k sqrt(a_k)`` (derivation in ``docs/privacy.md``).
    The weights are returned normalised to mean 1, ready for :class:`ReleaseSpec` (under
    ``"gdp"`` a weight is the release's share of ``mu**2``).

    Parameters
    ----------
    sensitivities : mapping of str to float
        ``Delta_k > 0`` of each release.
    error_weights : mapping of str to float
        ``a_k > 0``: how much one unit of release ``k``'s noise variance costs (same keys).

    Returns
    -------
    dict[str, float]
        ``u_k``, normalised so that their mean is 1.

    Raises
    ------
    PrivacyParameterError
        If the keys differ or a value is not a finite number ``> 0``.
    """
    if set(sensitivities) != set(error_weights) or not sensitivities:
        raise PrivacyParameterError(
            f"sensitivities and error_weights must name the same non-empty releases, got "
            f"{sorted(sensitivities)} and {sorted(error_weights)}"
        )
    raw = {
        k: _check_positive(f"sensitivity of {k!r}", sensitivities[k])
        * math.sqrt(_check_positive(f"error weight of {k!r}", error_weights[k]))
        for k in sensitivities
    }
    mean = math.fsum(raw.values()) / len(raw)
    return {k: v / mean for k, v in raw.items()}


def _event_mu(event: PrivacyEvent) -> float:
    """Gaussian-DP ``mu`` of one privacy event (Dong, Roth & Su: ``Delta/sigma``)."""
    return event.mu


def _check_fraction(name: str, value: object) -> float:
    """Validate a noise-variance fraction: a number >= 0 (values above 1 are capped at 1)."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise PrivacyParameterError(
            f"noise_variance_fraction[{name!r}] must be a number in [0, 1], got {value!r}"
        )
    x = float(value)
    if math.isnan(x) or x < 0.0 or math.isinf(x):
        raise PrivacyParameterError(
            f"noise_variance_fraction[{name!r}] must be a finite number in [0, 1], got {x!r}"
        )
    # Contract: arrived/planned is capped at 1 (more noise than planned is not credited).
    return min(x, 1.0)


def privacy_spent(
    plan: BudgetPlan,
    noise_variance_fraction: Mapping[str, float] | None = None,
) -> PrivacySpent:
    """Total ``(epsilon, delta)`` spent under exact composition, given the noise that arrived.

    For each release with ``counts_for_privacy`` the effective noise is
    ``sigma_eff_k = sigma_k sqrt(f_k)`` (``f_k`` = arrived noise variance / planned; with the
    distributed placement ``m`` of the ``t`` planned noise shares give ``m/t``). The releases
    compose exactly (Dong, Roth & Su, Cor. 3.3) to ``mu = sqrt(sum_k (Delta_k/sigma_eff_k)**2)``
    -GDP, which is ``(epsilon, delta)``-DP for ``epsilon = achieved_epsilon(1, delta, mu)``
    (Thm 2.10). Releases with ``counts_for_privacy=False`` are post-processing and are
    left out, although :func:`plan_budget` gave them a share.

    With all noise arrived, a ``"gdp"`` plan spends exactly its ``epsilon`` and a ``"basic"``
    plan spends at most its ``epsilon`` (exact composition is tighter than the sum).

    Parameters
    ----------
    plan : BudgetPlan
        The plan the noise was drawn from.
    noise_variance_fraction : mapping of str to float, optional
        Per release name, arrived/planned noise variance; missing names mean 1. Values
        above 1 are capped at 1 (extra noise is not credited); negative, NaN or infinite
        values, and unknown names, raise.

    Returns
    -------
    PrivacySpent
        ``epsilon`` at the plan's ``delta`` (``inf`` if a counted release got no noise),
        ``delta`` at the plan's ``epsilon``, ``mu``, and whether the guarantee degraded.

    Raises
    ------
    PrivacyParameterError
        For an unknown release name or an invalid fraction.
    """
    fractions: dict[str, float] = {}
    if noise_variance_fraction is not None:
        known = {r.name for r in plan.releases}
        for name, value in noise_variance_fraction.items():
            if name not in known:
                raise PrivacyParameterError(
                    f"noise_variance_fraction names unknown release {name!r}; known: "
                    + ", ".join(sorted(repr(k) for k in known))
                )
            fractions[name] = _check_fraction(name, value)
    mech = get_mechanism(plan.mechanism)
    per_release: list[ReleaseSpent] = []
    mu_sq_terms: list[float] = []
    degraded = False
    infinite = False
    for r in plan.releases:
        frac = fractions.get(r.name, 1.0)
        sigma_eff = r.sigma * math.sqrt(frac)
        mu_k = _event_mu(mech.event(sigma_eff, r.sensitivity))
        per_release.append(
            ReleaseSpent(
                name=r.name,
                planned_sigma=r.sigma,
                noise_variance_fraction=frac,
                effective_sigma=sigma_eff,
                mu=mu_k,
                counts_for_privacy=r.counts_for_privacy,
            )
        )
        if r.counts_for_privacy:
            degraded = degraded or frac < 1.0
            if math.isinf(mu_k):
                infinite = True
            else:
                mu_sq_terms.append(mu_k * mu_k)
    if plan.not_dp:  # no number for a guarantee that does not hold
        return PrivacySpent(
            epsilon=None,
            delta=None,
            mu=math.nan,
            delta_at_target_epsilon=None,
            degraded=degraded,
            per_release=tuple(per_release),
            accounting=mech.accounting,
            not_dp=plan.not_dp,
        )
    eps: float
    delta_at_eps: float
    if infinite:
        mu, eps, delta_at_eps = math.inf, math.inf, 1.0
    else:
        mu = math.sqrt(math.fsum(mu_sq_terms))  # Dong-Roth-Su Cor. 3.3
        if mu == 0.0:
            eps, delta_at_eps = 0.0, 0.0
        else:  # Gaussian: Thm 2.10 with sigma/Delta = 1/mu; discrete: zCDP rho = mu^2/2
            eps, delta_at_eps = mech.guarantee(mu, delta=plan.delta, epsilon=plan.epsilon)
    return PrivacySpent(
        epsilon=eps,
        delta=plan.delta,
        mu=mu,
        delta_at_target_epsilon=delta_at_eps,
        degraded=degraded,
        per_release=tuple(per_release),
        accounting=mech.accounting,
    )
