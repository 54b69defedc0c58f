"""The protocol's plan: the calibrated releases of a run (Thm 3.3, 3.8, 3.13; Alg. 3.1).

Release names and L2 sensitivities (replace-one neighbours, ``x in [0,1]^d``, ``W = 1/v_min``):
``"mean"`` ``sqrt(d)``; ``"weighted"`` ``W sqrt(d+1)``; ``"dispersion"`` ``sqrt(d)``;
``"q"`` ``W sqrt(d)``; ``"i2_extra"`` ``sqrt(d)/n`` (does not count for privacy). The ``"paper"``
profile drops ``W`` from the weighted sensitivities, as the paper's lemmas do: it is not DP for
the weighted stages and is flagged so.

Noise placement: ``"distributed"`` -- each client adds noise of scale ``sigma/sqrt(t)`` to its
contribution before masking, ``t = min_honest_clients`` (default ``n``); ``"central"`` -- the
server adds noise of scale ``sigma`` after unmasking. The noise distribution and its
calibration are the plan's :attr:`ProtocolPlan.mechanism` (:mod:`fa_hetdp.dp.mechanisms`); the
per-coordinate layout of the two stage vectors is :mod:`fa_hetdp.protocol.layout`.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Final

import numpy as np
from scipy.special import ndtr

from fa_hetdp._types import FloatArray
from fa_hetdp.config.protocol import ProtocolConfig
from fa_hetdp.dp.accounting import BudgetPlan, ReleaseSpec, plan_budget
from fa_hetdp.dp.mechanisms import NoiseMechanism, get_mechanism
from fa_hetdp.errors import BaselineWarning, InputDataError, PrivacyParameterError
from fa_hetdp.protocol.layout import Stage, StageLayout, stage_layout
from fa_hetdp.stats.exact import MAX_WITHIN_VARIANCE

__all__ = [
    "ENCODING_FAILURE_PROBABILITY",
    "ProtocolPlan",
    "plan_protocol",
]

ENCODING_FAILURE_PROBABILITY: Final = float(2.0 * ndtr(-12.0))
"""Per-coordinate probability that a noise share exceeds the encoding's stated bound
(``2 Phi(-12) < 4e-33``: twelve standard deviations for Gaussian noise)."""

LABEL_PAPER_PROFILE: Final = (
    "paper profile: not DP for the weighted stages (their sensitivity ignores the weights "
    "w_i <= 1/v_min)"
)
LABEL_I2_EXTRA: Final = (
    "I2''' = I2'' + N(0, sigma_5^2) (Thm 3.13 option): the extra noise buys no privacy, "
    "I2'' is already private"
)


def _choice(name: str, value: object, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise PrivacyParameterError(f"{name} must be one of {allowed}, got {name}={value!r}.")


def _count(name: str, value: object, low: int, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise InputDataError(f"{name} must be an integer, got {name}={value!r}.")
    out = int(value)
    if out < low or (high is not None and out > high):
        allowed = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise InputDataError(f"{name} must be {allowed}, got {name}={out}.")
    return out


@dataclass(frozen=True)
class ProtocolPlan:
    """A calibrated protocol for ``n`` clients and ``d`` coordinates.

    Attributes
    ----------
    config : ProtocolConfig
        The settings it was planned from.
    n, d : int
        Number of clients (public) and coordinates.
    t : int
        Honest clients whose shares must suffice (``min_honest_clients``, default ``n``).
    budget : BudgetPlan
        Calibrated releases (sigma of each, its epsilon/delta share).
    labels : tuple[str, ...]
        Human-readable caveats (baseline mechanism, paper profile, placement).
    """

    config: ProtocolConfig
    n: int
    d: int
    t: int
    budget: BudgetPlan
    labels: tuple[str, ...] = ()

    @property
    def max_weight(self) -> float:
        """``W = 1/v_min``, the largest weight."""
        return 1.0 / self.config.variance_floor

    @property
    def min_weight(self) -> float:
        """Smallest possible weight ``1/max(1/4, v_min)`` (``s_i^2 <= 1/4`` always)."""
        return 1.0 / max(MAX_WITHIN_VARIANCE, self.config.variance_floor)

    @property
    def releases(self) -> tuple[str, ...]:
        """Names of the noisy releases of this plan."""
        return tuple(r.name for r in self.budget.releases)

    def sigma(self, name: str) -> float:
        """Calibrated sigma of release ``name`` (0.0 for ``"i2_extra"`` when disabled)."""
        if name == "i2_extra" and not self.config.extra_i2_noise:
            return 0.0
        return float(self.budget.sigma(name))

    @property
    def sigma_mean(self) -> float:
        """sigma_1 of the sum ``sum x_i`` (release ``"mean"``)."""
        return self.sigma("mean")

    @property
    def sigma_weighted(self) -> float:
        """sigma_2 of ``(A, B)`` (release ``"weighted"``)."""
        return self.sigma("weighted")

    @property
    def sigma_dispersion(self) -> float:
        """sigma_3 of ``sum (x_i - mu')^2`` (release ``"dispersion"``)."""
        return self.sigma("dispersion")

    @property
    def sigma_q(self) -> float:
        """sigma_4 of ``Q''`` (release ``"q"``)."""
        return self.sigma("q")

    @property
    def sigma_i2(self) -> float:
        """sigma_5 of the extra ``I2'''`` noise (0.0 when ``extra_i2_noise`` is False)."""
        return self.sigma("i2_extra")

    @property
    def sigmas(self) -> dict[str, float]:
        """Calibrated sigma of every release of the plan."""
        return {name: self.sigma(name) for name in self.releases}

    def share_std(self, name: str) -> float:
        """Std of one client's noise share ``sigma/sqrt(t)`` (0.0 for central placement)."""
        if self.config.placement == "central":
            return 0.0
        return self.sigma(name) / math.sqrt(self.t)

    def noise_std(self, name: str) -> float:
        """Std of the total noise in release ``name`` when every share arrives.

        Central: ``sigma``. Distributed: ``n`` shares of variance ``sigma^2/t`` sum to
        ``sigma sqrt(n/t)`` (equal to ``sigma`` for the default ``t = n``).
        """
        if self.config.placement == "central" or name == "i2_extra":
            return self.sigma(name)
        return self.sigma(name) * math.sqrt(self.n / self.t)

    def noise_fraction(self, noise_shares: int) -> float:
        """Fraction of the planned noise variance guaranteed by honest clients.

        Of ``noise_shares`` shares that reached the sum, at least
        ``noise_shares - (n - t)`` come from honest clients (the other ``n - t`` may be
        dishonest and add none), so the fraction is ``max(0, noise_shares - (n - t)) / t``
        capped at 1 (equal to ``noise_shares / n`` for the default ``t = n``). This is
        more conservative than ``noise_shares / t`` when ``t < n``: counting every arrived share
        as honest would overstate the guarantee. Central placement: 1.
        """
        if self.config.placement == "central":
            return 1.0
        honest = max(0, noise_shares - (self.n - self.t))
        return min(1.0, honest / self.t)

    @property
    def mechanism(self) -> NoiseMechanism:
        """The noise distribution and calibration rule of every release."""
        return get_mechanism(self.config.mechanism)

    def layout(self, stage: Stage) -> StageLayout:
        """Blocks (release, length, bound) of the stage-``stage`` vector."""
        return stage_layout(stage, d=self.d, max_weight=self.max_weight)

    @property
    def stage1_length(self) -> int:
        """Length ``2d + 1`` of a stage-1 contribution ``[x, w x, w]``."""
        return self.layout(1).length

    @property
    def stage2_length(self) -> int:
        """Length ``2d`` of a stage-2 contribution ``[(x - mu')^2, w (x - mu_bar')^2]``."""
        return self.layout(2).length

    def share_std_vector(self, stage: Stage) -> FloatArray:
        """Per-coordinate scale of one client's noise share in stage ``stage``."""
        return self.layout(stage).expand(self.share_std)

    def noise_std_vector(self, stage: Stage) -> FloatArray:
        """Per-coordinate scale of the total noise of stage ``stage`` (all shares arrive)."""
        return self.layout(stage).expand(self.noise_std)

    def sigma_vector(self, stage: Stage) -> FloatArray:
        """Per-coordinate calibrated ``sigma`` of stage ``stage`` (the server's central noise)."""
        return self.layout(stage).expand(self.sigma)

    def contribution_bounds(self, stage: Stage) -> FloatArray:
        """Per-coordinate bound on ``|noiseless contribution|`` (for the fixed-point scale).

        Stage 1 ``[x, w x, w]``: ``[1]*d + [W]*(d + 1)``; stage 2: ``[1]*d + [W]*d``.
        """
        return self.layout(stage).bounds

    def share_tail_bounds(
        self, stage: Stage, failure_probability: float = ENCODING_FAILURE_PROBABILITY
    ) -> FloatArray:
        """Per-coordinate bound on one client's noise share (the mechanism's tail bound).

        ``P(|share_j| > bound_j) <= failure_probability`` per coordinate; zero for central
        placement (the clients add no noise).
        """
        return self.mechanism.tail_bound(self.share_std_vector(stage), failure_probability)


def _release_specs(config: ProtocolConfig, n: int, d: int) -> list[ReleaseSpec]:
    w = 1.0 if config.profile == "paper" else 1.0 / config.variance_floor
    # Replace-one L2 sensitivities of the sums; x_i in [0,1]^d and w_i in [4, W].
    specs = [
        ReleaseSpec("mean", math.sqrt(d), config.weight("mean")),  # Thm 3.3: sum x_i
        ReleaseSpec(
            "weighted", w * math.sqrt(d + 1), config.weight("weighted")
        ),  # Lemma 3.7 (lem:noisybarmu)
        ReleaseSpec("dispersion", math.sqrt(d), config.weight("dispersion")),  # Thm 3.3
        ReleaseSpec("q", w * math.sqrt(d), config.weight("q")),  # Thm 3.8: Q''
    ]
    if config.extra_i2_noise:
        # Thm 3.13: eta_3 with Delta = sqrt(d)/n; I2'' is already private, so it does not count.
        specs.append(
            ReleaseSpec(
                "i2_extra", math.sqrt(d) / n, config.weight("i2_extra"), counts_for_privacy=False
            )
        )
    return specs


def plan_protocol(config: ProtocolConfig, *, n: int, d: int) -> ProtocolPlan:
    """Calibrate every release of the protocol for ``n`` clients and ``d`` coordinates.

    Parameters
    ----------
    config : ProtocolConfig
        Privacy settings.
    n : int
        Number of participating clients (public), ``n >= 2``.
    d : int
        Number of coordinates, ``d >= 1``.

    Returns
    -------
    ProtocolPlan
        The calibrated plan; ``t = min_honest_clients`` or ``n``.

    Raises
    ------
    InputDataError
        If ``n < 2`` or ``d < 1``.
    PrivacyParameterError
        If ``min_honest_clients`` exceeds ``n``, or the budget cannot be calibrated.

    Warns
    -----
    BaselineWarning
        For the ``"paper"`` profile (not DP for the weighted stages) and, from the
        calibration, for CGM at a per-release epsilon >= 1.
    """
    n = _count("n", n, 2)
    d = _count("d", d, 1)
    t = n if config.min_honest_clients is None else int(config.min_honest_clients)
    if not 1 <= t <= n:
        raise PrivacyParameterError(
            f"min_honest_clients must be in [1, n] = [1, {n}], got min_honest_clients={t}."
        )
    labels: list[str] = []
    if config.profile == "paper":
        warnings.warn(LABEL_PAPER_PROFILE, BaselineWarning, stacklevel=2)
        labels.append(LABEL_PAPER_PROFILE)
    budget = plan_budget(
        config.epsilon,
        config.delta,
        _release_specs(config, n, d),
        mechanism=config.mechanism,
        composition=config.composition,
    )
    labels.extend(budget.labels)
    if config.placement == "distributed":
        labels.append(
            f"distributed noise: each client adds N(0, sigma^2/t) before masking, t={t} of n={n}"
        )
    else:
        labels.append("central noise: the server adds N(0, sigma^2) after unmasking (trusted)")
    if config.extra_i2_noise:
        labels.append(LABEL_I2_EXTRA)
    return ProtocolPlan(config=config, n=n, d=d, t=t, budget=budget, labels=tuple(labels))
