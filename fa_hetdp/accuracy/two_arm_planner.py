"""The design a two-arm MD or RD runs under ``design = "auto"``: both planned from public inputs.

A two-arm mean difference (MD) or risk difference (RD) runs in either design: the silo
summaries (every arm of every silo releases its own noisy summaries,
:mod:`fa_hetdp.protocol.two_arm`) or the secure sums (every silo's effect reduced to one
summary, :mod:`fa_hetdp.protocol.two_arm_sums`). Which is the more accurate depends on the
federation: with a few large sites each site's own noisy effect is close to its sampling
error, with many small ones one noise draw on a sum beats one per arm and site (measured on
public trials, ``benchmarks/README.md``: the OPT trial's 4 clinics of 81-124 patients an arm,
the silo summaries' interval 1.6 times the classical one's against 4.5; Project STAR's 78
schools of 9-70 pupils an arm, 8.6 against 4.2).

:func:`choose_two_arm_design` plans both as the one-arm planner does
(:mod:`fa_hetdp.accuracy.meta_planner`): a seeded Monte Carlo over model federations at the
public arm sizes (:class:`TwoArmModel`), each run through both designs' own code with their
calibrated noise and compared with the exact two-arm analysis of the same summaries. The design
with the smaller planned error of the random-effects effect runs (ties: of ``I^2``), as for one
arm. Nothing of the records enters the choice: it costs no privacy.

The model: every site's true effect is ``N(effect_size, tau^2)`` with ``tau^2`` set by the stated
``I^2`` at the typical sampling variance of the sites' effects (Higgins & Thompson 2002); the
control arm's mean (a proportion for an RD) is ``coordinate_mean``; an MD's records have the
within-arm variance ``within_variance`` in both arms, an RD's the binomial one. Each draw takes
the arms' sample means and variances with their sampling spread (an RD's from binomial counts).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from fa_hetdp._types import FloatArray, IntArray
from fa_hetdp.accuracy.meta_planner import (
    DEFAULT_COORDINATE_MEAN,
    DEFAULT_WITHIN_VARIANCE,
    per_coordinate,
)
from fa_hetdp.errors import InputDataError
from fa_hetdp.protocol.meta_plan import MetaSettings
from fa_hetdp.protocol.meta_simulate import run_rounds
from fa_hetdp.protocol.two_arm import ArmSummaries, exact_two_arm, plan_two_arm, run_two_arm
from fa_hetdp.protocol.two_arm_sums import (
    REDUCED_EFFECTS,
    REDUCTION,
    auto_reason,
    both_designs_problem,
    reduced_counts,
    reduced_summaries,
    two_arm_sums_plan,
)
from fa_hetdp.stats.meta import typical_variance

__all__ = [
    "DEFAULT_TWO_ARM_I2",
    "TWO_ARM_ASSUMPTIONS",
    "TwoArmChoice",
    "TwoArmModel",
    "TwoArmPlannedError",
    "auto_two_arm_design",
    "choose_for_model",
    "choose_two_arm_design",
    "plan_two_arm_errors",
    "two_arm_model",
]

TWO_ARM_ASSUMPTIONS: Final = ("i2", "within_variance", "coordinate_mean", "effect_size")
"""What may be said publicly about a two-arm trial for the choice (all on the columns' [0, 1]
scale): the effect's ``I^2``, an MD's within-arm variance of a record, the control arm's mean
(an RD: its proportion), the mean effect."""
DEFAULT_TWO_ARM_I2: Final = 0.25
"""Default ``I^2`` of a two-arm effect: treatment effects vary across centres far less than the
centres' own means do (the one-arm default is near 1); on the benchmark's trials 0-0.75 (OPT
0.07 and 0.32, Project STAR 0.75), and the choice there is the same from 0 to 0.5."""
DEFAULT_EFFECT_SIZE: Final = 0.0
"""Default mean effect (on the [0, 1] scale): none."""
CHOICE_DRAWS: Final = 60
"""Model federations per design behind a choice (seeded: the choice is deterministic)."""


@dataclass(frozen=True)
class TwoArmModel:
    """The model trial the choice plans on (public assumptions; per column where arrays).

    Attributes
    ----------
    arm_sizes : IntArray
        ``(n, 2)`` every site's (treated, control) sizes, public.
    effect : str
        ``"MD"`` or ``"RD"``.
    i2, within_variance, coordinate_mean, effect_size : FloatArray
        ``(d,)`` each (module docstring; ``within_variance`` unused for an RD).
    """

    arm_sizes: IntArray
    effect: str
    i2: FloatArray
    within_variance: FloatArray
    coordinate_mean: FloatArray
    effect_size: FloatArray

    @property
    def d(self) -> int:
        """Columns."""
        return int(self.i2.size)

    def variances(self) -> tuple[FloatArray, FloatArray]:
        """Return the treated and control arms' within-arm record variances, ``(d,)`` each."""
        if self.effect == "RD":
            p_c = self.coordinate_mean
            p_t = np.clip(p_c + self.effect_size, 0.0, 1.0)
            return p_t * (1.0 - p_t), p_c * (1.0 - p_c)
        return self.within_variance, self.within_variance

    @cached_property
    def tau2(self) -> FloatArray:
        """``tau^2_j = I^2_j/(1 - I^2_j) s^2_j``, ``s^2_j`` the typical sampling variance."""
        m = self.arm_sizes.astype(np.float64)
        var_t, var_c = self.variances()
        v = var_t[None, :] / m[:, :1] + var_c[None, :] / m[:, 1:]
        out: FloatArray = self.i2 / (1.0 - self.i2) * typical_variance(np.maximum(v, 1e-300))
        return out

    def draw(self, rng: np.random.Generator) -> ArmSummaries:
        """One model trial: every site's arms' sample means and variances (``(n, 2, d)``)."""
        m = self.arm_sizes.astype(np.float64)
        n, d = m.shape[0], self.d
        y = self.effect_size + np.sqrt(self.tau2) * rng.standard_normal((n, d))
        p_c = np.broadcast_to(self.coordinate_mean, (n, d))
        p_t = np.clip(p_c + y, 0.0, 1.0)
        m_t, m_c = m[:, :1], m[:, 1:]
        if self.effect == "RD":
            theta_t = rng.binomial(self.arm_sizes[:, :1], p_t) / m_t
            theta_c = rng.binomial(self.arm_sizes[:, 1:], p_c) / m_c
            s2_t = theta_t * (1.0 - theta_t) * m_t / (m_t - 1.0)  # every arm >= 2 records
            s2_c = theta_c * (1.0 - theta_c) * m_c / (m_c - 1.0)
        else:
            var = self.within_variance
            theta_t = np.clip(p_t + np.sqrt(var / m_t) * rng.standard_normal((n, d)), 0, 1)
            theta_c = np.clip(p_c + np.sqrt(var / m_c) * rng.standard_normal((n, d)), 0, 1)
            # a sample variance of values in [0, 1] is at most m/(4(m - 1))
            s2_t = np.minimum(
                var * rng.chisquare(m_t - 1.0, (n, d)) / (m_t - 1.0), m_t / (4 * (m_t - 1.0))
            )
            s2_c = np.minimum(
                var * rng.chisquare(m_c - 1.0, (n, d)) / (m_c - 1.0), m_c / (4 * (m_c - 1.0))
            )
        return ArmSummaries(
            m=self.arm_sizes,
            theta=np.stack([theta_t, theta_c], axis=1),
            s2=np.stack([s2_t, s2_c], axis=1),
        )


def two_arm_model(
    arm_sizes: npt.ArrayLike,
    d: int,
    effect: str,
    *,
    i2: float | npt.ArrayLike | None = None,
    within_variance: float | npt.ArrayLike | None = None,
    coordinate_mean: float | npt.ArrayLike | None = None,
    effect_size: float | npt.ArrayLike | None = None,
) -> TwoArmModel:
    """Build the model trial from the public arm sizes and the stated assumptions.

    Raises
    ------
    InputDataError
        An effect the secure sums do not build (:data:`REDUCED_EFFECTS`), arm sizes not
        ``(n, 2)`` with ``n >= 2`` and every arm ``>= 2``, or an assumption out of its range
        (one value or one per column).
    """
    if effect not in REDUCED_EFFECTS:
        raise InputDataError(
            f"the two-arm design choice plans {' and '.join(REDUCED_EFFECTS)} (the effects both "
            f"designs build), got effect={effect!r}."
        )
    m = np.asarray(arm_sizes, dtype=np.int64)
    if m.ndim != 2 or m.shape[1] != 2 or m.shape[0] < 2 or bool(np.any(m < 2)):
        raise InputDataError(
            "the two-arm design choice needs n >= 2 sites' (treated, control) sizes, each >= 2, "
            f"got {m.tolist()[:10]}."
        )
    return TwoArmModel(
        arm_sizes=m,
        effect=effect,
        i2=per_coordinate("i2", DEFAULT_TWO_ARM_I2 if i2 is None else i2, d, 0.0, 0.99),
        within_variance=per_coordinate(
            "within_variance",
            DEFAULT_WITHIN_VARIANCE if within_variance is None else within_variance,
            d,
            1e-8,
            0.25,
        ),
        coordinate_mean=per_coordinate(
            "coordinate_mean",
            DEFAULT_COORDINATE_MEAN if coordinate_mean is None else coordinate_mean,
            d,
            1e-6,
            1.0 - 1e-6,
        ),
        effect_size=per_coordinate(
            "effect_size",
            DEFAULT_EFFECT_SIZE if effect_size is None else effect_size,
            d,
            -1.0,
            1.0,
        ),
    )


@dataclass(frozen=True)
class TwoArmPlannedError:
    """One design's planned errors of a two-arm effect (medians over the model's draws).

    Attributes
    ----------
    design : str
        ``"silo-summaries"`` or ``"secure-sums"``.
    random_effects_mean : float
        The absolute error of the random-effects effect, on the columns' [0, 1] scale,
        averaged over the columns.
    i2 : float
        The absolute error of ``I^2``, averaged over the columns.
    """

    design: str
    random_effects_mean: float
    i2: float

    @property
    def key(self) -> tuple[float, float]:
        """What the choice compares: the random-effects effect, then ``I^2``."""
        return (self.random_effects_mean, self.i2)


def plan_two_arm_errors(
    model: TwoArmModel,
    epsilon: float,
    delta: float,
    settings: MetaSettings,
    *,
    draws: int = CHOICE_DRAWS,
    seed: int = 0,
) -> tuple[TwoArmPlannedError, TwoArmPlannedError]:
    """Return the planned errors of the silo summaries and of the secure sums, in that order.

    Both designs see the same model trials and noise seeds (paired draws); each runs its own
    code at its own calibration (:func:`~fa_hetdp.protocol.two_arm.plan_two_arm`,
    :func:`~fa_hetdp.protocol.two_arm_sums.two_arm_sums_plan`).
    """
    m, d = model.arm_sizes, model.d
    silo_plan = plan_two_arm(
        epsilon, delta, m, d, model.effect, replace(settings, design="silo-summaries")
    )
    sums_plan = two_arm_sums_plan(epsilon, delta, reduced_counts(m.min(axis=1)), d, settings)
    scale, shift = REDUCTION
    rng = np.random.default_rng(seed)
    errors: dict[str, list[tuple[float, float]]] = {"silo-summaries": [], "secure-sums": []}
    for _ in range(draws):
        arms = model.draw(rng)
        exact = exact_two_arm(arms, model.effect)
        silo = run_two_arm(silo_plan, arms, rng)
        sums = run_rounds(sums_plan, reduced_summaries(arms, model.effect), rng)
        for design, re, i2 in (
            ("silo-summaries", silo.random_effects_mean, silo.i2),
            ("secure-sums", scale * sums.random_effects_mean + shift, sums.i2),
        ):
            errors[design].append(
                (
                    float(np.mean(np.abs(re - exact.random_effects_mean))),
                    float(np.mean(np.abs(i2 - exact.i2))),
                )
            )
    silo_err, sums_err = (
        TwoArmPlannedError(
            design,
            float(np.median([e[0] for e in errors[design]])),
            float(np.median([e[1] for e in errors[design]])),
        )
        for design in ("silo-summaries", "secure-sums")
    )
    return silo_err, sums_err


@dataclass(frozen=True)
class TwoArmChoice:
    """The design ``"auto"`` runs for a two-arm MD or RD, why, and both plans.

    Attributes
    ----------
    design : str
        The design that runs.
    reason : str
        One sentence (the result's label).
    planned : tuple[TwoArmPlannedError, ...]
        The silo summaries' and the secure sums' planned errors (empty: not planned, only the
        silo summaries can run).
    """

    design: str
    reason: str
    planned: tuple[TwoArmPlannedError, ...] = ()


def choose_two_arm_design(
    arm_sizes: npt.ArrayLike,
    d: int,
    effect: str,
    *,
    epsilon: float,
    delta: float,
    settings: MetaSettings,
    assumptions: Mapping[str, Any] | None = None,
    draws: int = CHOICE_DRAWS,
) -> TwoArmChoice:
    """Return the design with the smaller planned error of the random-effects effect.

    Ties go to the smaller planned ``I^2`` error; where the two figures disagree the reason says
    so, as the one-arm choice (:func:`fa_hetdp.accuracy.meta_planner.choose_plan`) does.

    Raises
    ------
    InputDataError
        An assumption not in :data:`TWO_ARM_ASSUMPTIONS`, or what :func:`two_arm_model` raises.
    """
    stated = dict(assumptions or {})
    bad = [k for k in stated if k not in TWO_ARM_ASSUMPTIONS]
    if bad:
        raise InputDataError(
            f"unknown assumptions {bad} for a two-arm effect; allowed: {TWO_ARM_ASSUMPTIONS}."
        )
    model = two_arm_model(arm_sizes, d, effect, **stated)
    return choose_for_model(model, epsilon, delta, settings, draws=draws)


def choose_for_model(
    model: TwoArmModel,
    epsilon: float,
    delta: float,
    settings: MetaSettings,
    *,
    draws: int = CHOICE_DRAWS,
) -> TwoArmChoice:
    """:func:`choose_two_arm_design` for a model trial already built (:func:`two_arm_model`)."""
    effect = model.effect
    silo, sums = plan_two_arm_errors(model, epsilon, delta, settings, draws=draws)
    winner, other = (silo, sums) if silo.key <= sums.key else (sums, silo)
    reason = (
        f"auto: planned error of the random-effects {effect} {winner.random_effects_mean:.3g} "
        f"against {other.random_effects_mean:.3g} for the {other.design} (the columns' [0, 1] "
        f"scale; {model.arm_sizes.shape[0]} sites, arms of {int(model.arm_sizes.min())}-"
        f"{int(model.arm_sizes.max())})"
    )
    if other.i2 < winner.i2:
        reason += (
            f"; the {other.design} plan the smaller |I^2| error ({other.i2:.3g} against "
            f"{winner.i2:.3g}): design={other.design!r} where I^2 matters more"
        )
    return TwoArmChoice(winner.design, reason, (silo, sums))


def auto_two_arm_design(
    arm_sizes: npt.ArrayLike,
    d: int,
    effect: str,
    *,
    epsilon: float,
    delta: float,
    settings: MetaSettings,
    assumptions: Mapping[str, Any] | None = None,
) -> TwoArmChoice:
    """Return what ``design = "auto"`` runs for a two-arm ``effect`` at the public arm sizes.

    Where both designs can run an MD or RD (:func:`~fa_hetdp.protocol.two_arm_sums.
    both_designs_problem`), :func:`choose_two_arm_design`; otherwise the silo summaries, the
    reason said (:func:`~fa_hetdp.protocol.two_arm_sums.auto_reason`). The one decision of the
    in-process :func:`fa_hetdp.private_meta_analysis` and the server's
    (:func:`fa_hetdp.server.meta_design.two_arm_design`).

    Raises
    ------
    InputDataError
        ``assumptions`` where no choice is made, or what :func:`choose_two_arm_design` raises.
    """
    problem = both_designs_problem(effect, settings.privacy_unit, settings.min_records, arm_sizes)
    if problem is None:
        return choose_two_arm_design(
            arm_sizes, d, effect, epsilon=epsilon, delta=delta, settings=settings,
            assumptions=assumptions,
        )  # fmt: skip
    if assumptions is not None:
        raise InputDataError(
            f"assumptions are for the planner's choice between the designs; for "
            f"effect={effect!r} 'auto' runs the silo summaries only here: {problem}."
        )
    return TwoArmChoice("silo-summaries", auto_reason(effect, problem))
