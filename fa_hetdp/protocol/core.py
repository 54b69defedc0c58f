"""The two-stage private protocol (Thm 3.3, 3.8, 3.13; Alg. 3.1) as DESIGN.md fixes it.

Stage 1 -- one secure sum of ``[x_i, w_i x_i, w_i]`` (length ``2d + 1``) plus noise:

- ``mu' = (sum x_i + N(0, sigma_1^2 I_d)) / n`` (Thm 3.3 / Lemma 3.1; the paper adds noise of
  scale ``sqrt(d)/n`` to the mean, which is the same thing),
- ``(A', B') = (sum w_i x_i, sum w_i) + N(0, sigma_2^2 I_{d+1})``,
  ``mu_bar' = clip(A'/B', 0, 1)`` (Lemma 3.7, with the weighted mean of Def. 2.5 fixed).

Stage 2 -- the server broadcasts ``mu'`` and ``mu_bar'`` clipped to ``[0, 1]^d``; one secure sum of
``[(x_i - mu')^2, w_i (x_i - mu_bar')^2]`` (length ``2d``) plus noise:

- ``D'' = (sum (x_i - mu')^2 + N(0, sigma_3^2 I_d)) / n`` (Thm 3.3),
- ``Q'' = sum w_i (x_i - mu_bar')^2 + N(0, sigma_4^2 I_d)`` (Thm 3.8; Q is a sum),
- ``I2'' = max(0, 1 - (n-1)/Q'')`` (Thm 3.13; post-processing, no budget),
- ``I2''' = I2'' + N(0, sigma_5^2 I_d)`` (Thm 3.13's third noise stage; buys no privacy).

Release names and L2 sensitivities (replace-one neighbours, ``x in [0,1]^d``, ``W = 1/v_min``):
``"mean"`` ``sqrt(d)``; ``"weighted"`` ``W sqrt(d+1)``; ``"dispersion"`` ``sqrt(d)``;
``"q"`` ``W sqrt(d)``; ``"i2_extra"`` ``sqrt(d)/n`` (does not count for privacy). The ``"paper"``
profile drops ``W`` from the weighted sensitivities, as the paper's lemmas do: it is not DP for
the weighted stages and is flagged so.

Noise placement: ``"distributed"`` -- each client adds ``N(0, sigma^2/t)`` to its contribution
before masking, ``t = min_honest_clients`` (default ``n``); ``"central"`` -- the server adds
``N(0, sigma^2)`` after unmasking. Client parts (:func:`local_values`,
:func:`stage1_contribution`, :func:`stage2_contribution`) and server parts
(:func:`plan_protocol`, :func:`assemble_stage1`, :func:`assemble_stage2`) are separate; the
Flower apps call exactly these. :func:`private_statistics` runs the whole protocol in process and
:func:`private_statistics_batch` repeats it, vectorised, for the experiment engine.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Final, Literal

import numpy as np
import numpy.typing as npt

from fa_hetdp._types import (
    RELEASE_NAMES,
    Composition,
    FloatArray,
    Mechanism,
    Placement,
    Profile,
)
from fa_hetdp.config.protocol import ProtocolConfig
from fa_hetdp.dp.accounting import (
    BudgetPlan,
    PrivacySpent,
    ReleaseSpec,
    plan_budget,
    privacy_spent,
)
from fa_hetdp.errors import (
    AggregationError,
    BaselineWarning,
    InputDataError,
    PrivacyParameterError,
)
from fa_hetdp.stats.exact import (
    MAX_WITHIN_VARIANCE,
    TrueStatistics,
    _coordinate_averages,
    client_weights,
    i_squared,
    statistics_of_validated,
    validate_client_vector,
    validate_clients,
)

__all__ = [
    "RELEASE_NAMES",
    "BatchResult",
    "Composition",
    "LocalValues",
    "Mechanism",
    "Placement",
    "PrivateStatistics",
    "Profile",
    "ProtocolConfig",
    "ProtocolPlan",
    "Stage1Release",
    "assemble_stage1",
    "assemble_stage2",
    "contribution_bounds",
    "local_values",
    "noiseless_stage1",
    "noiseless_stage2",
    "plan_protocol",
    "private_statistics",
    "private_statistics_batch",
    "stage1_contribution",
    "stage2_contribution",
]

NoiseDraw = Literal["summed", "per_client"]
"""How the batch path draws distributed noise: one summed draw or ``n`` shares summed."""


LABEL_PAPER_PROFILE: Final = (
    "paper profile: not DP for the weighted stages (their sensitivity ignores the weights "
    "w_i <= 1/v_min)"
)
LABEL_I2_EXTRA: Final = (
    "I2''' = I2'' + N(0, sigma_5^2) (Thm 3.13 option): the extra noise buys no privacy, "
    "I2'' is already private"
)


# --------------------------------------------------------------------------- configuration


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
    def stage1_length(self) -> int:
        """Length ``2d + 1`` of a stage-1 contribution ``[x, w x, w]``."""
        return 2 * self.d + 1

    @property
    def stage2_length(self) -> int:
        """Length ``2d`` of a stage-2 contribution ``[(x - mu')^2, w (x - mu_bar')^2]``."""
        return 2 * self.d


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


# --------------------------------------------------------------------------- client side


@dataclass(frozen=True)
class LocalValues:
    """One client's local values (computed on the client, never sent in the clear).

    Attributes
    ----------
    x : FloatArray, shape (d,)
        The vector clipped into ``[0, 1]``.
    weight : float
        ``w_i = 1/max(s_i^2, v_min)`` (Def. 2.5, floored).
    n_clipped : int
        Values clipped into ``[0, 1]``.
    at_floor : bool
        Whether ``s_i^2 <= v_min`` (the weight is ``W``).
    """

    x: FloatArray
    weight: float
    n_clipped: int
    at_floor: bool


def local_values(x_i: npt.ArrayLike, *, variance_floor: float) -> LocalValues:
    """Validate and clip one client's vector and compute its weight (client side).

    Parameters
    ----------
    x_i : array_like, shape (d,)
        The client's vector (values outside ``[0, 1]`` are clipped and counted).
    variance_floor : float
        ``v_min`` of the run's :class:`ProtocolConfig`.

    Returns
    -------
    LocalValues
        The clipped vector, its weight and the counts.
    """
    x, n_clipped = validate_client_vector(x_i)
    weights, n_floor = client_weights(x[np.newaxis, :], variance_floor=variance_floor)
    return LocalValues(x=x, weight=float(weights[0]), n_clipped=n_clipped, at_floor=n_floor > 0)


def _check_local(local: LocalValues, plan: ProtocolPlan) -> None:
    if local.x.shape != (plan.d,):
        raise InputDataError(
            f"client vector has shape {local.x.shape}; the plan expects shape ({plan.d},)."
        )
    if not plan.min_weight - 1e-9 <= local.weight <= plan.max_weight + 1e-9:
        raise InputDataError(
            f"client weight {local.weight!r} outside [{plan.min_weight}, {plan.max_weight}]; "
            "compute it with local_values(x, variance_floor=plan.config.variance_floor)."
        )


def _stage1_share_std(plan: ProtocolPlan) -> FloatArray:
    d = plan.d
    std = np.empty(plan.stage1_length)
    std[:d] = plan.share_std("mean")
    std[d:] = plan.share_std("weighted")
    return std


def _stage2_share_std(plan: ProtocolPlan) -> FloatArray:
    d = plan.d
    std = np.empty(plan.stage2_length)
    std[:d] = plan.share_std("dispersion")
    std[d:] = plan.share_std("q")
    return std


def stage1_contribution(
    local: LocalValues, plan: ProtocolPlan, *, rng: np.random.Generator
) -> FloatArray:
    """Build a client's stage-1 vector ``[x, w x, w]`` plus its noise share (client side).

    Parameters
    ----------
    local : LocalValues
        From :func:`local_values`.
    plan : ProtocolPlan
        The broadcast plan (public).
    rng : numpy.random.Generator
        Source of the noise share (a CSPRNG-backed generator in deployments).

    Returns
    -------
    FloatArray, shape (2d + 1,)
        ``[x_i, w_i x_i, w_i]`` (Thm 3.3, Lemma 3.7) plus ``N(0, sigma_k^2/t)`` per block for
        distributed placement (no noise for central placement).
    """
    _check_local(local, plan)
    out = np.concatenate([local.x, local.weight * local.x, [local.weight]])
    if plan.config.placement == "distributed":
        out += rng.standard_normal(plan.stage1_length) * _stage1_share_std(plan)
    return out


def _check_broadcast(name: str, value: npt.ArrayLike, d: int) -> FloatArray:
    arr = np.asarray(value, dtype=np.float64)
    if arr.shape != (d,):
        raise InputDataError(f"{name} must have shape ({d},), got shape {arr.shape}.")
    if not np.all(np.isfinite(arr)) or np.any(arr < 0.0) or np.any(arr > 1.0):
        raise InputDataError(
            f"{name} must be the broadcast value clipped into [0, 1] (finite); got values in "
            f"[{np.nanmin(arr)!r}, {np.nanmax(arr)!r}]. Unclipped values break the sensitivity."
        )
    return arr


def stage2_contribution(
    local: LocalValues,
    plan: ProtocolPlan,
    mu_prime: npt.ArrayLike,
    weighted_mu_prime: npt.ArrayLike,
    *,
    rng: np.random.Generator,
) -> FloatArray:
    """Build a client's stage-2 vector ``[(x - mu')^2, w (x - mu_bar')^2]`` plus noise share.

    Parameters
    ----------
    local : LocalValues
        From :func:`local_values`.
    plan : ProtocolPlan
        The broadcast plan.
    mu_prime, weighted_mu_prime : array_like, shape (d,)
        The broadcast ``mu'`` and ``mu_bar'``, clipped into ``[0, 1]``
        (:attr:`Stage1Release.mu_prime_broadcast`, :attr:`Stage1Release.weighted_mu_prime`).
    rng : numpy.random.Generator
        Source of the noise share.

    Returns
    -------
    FloatArray, shape (2d,)
        Thm 3.3 / Thm 3.8 summands plus ``N(0, sigma_k^2/t)`` per block (distributed only).

    Raises
    ------
    InputDataError
        If a broadcast value has the wrong shape or lies outside ``[0, 1]``.
    """
    _check_local(local, plan)
    m = _check_broadcast("mu_prime", mu_prime, plan.d)
    mb = _check_broadcast("weighted_mu_prime", weighted_mu_prime, plan.d)
    out = np.concatenate([(local.x - m) ** 2, local.weight * (local.x - mb) ** 2])
    if plan.config.placement == "distributed":
        out += rng.standard_normal(plan.stage2_length) * _stage2_share_std(plan)
    return out


def contribution_bounds(plan: ProtocolPlan, stage: Literal[1, 2]) -> FloatArray:
    """Per-coordinate bound on ``|noiseless contribution|`` (for the fixed-point scale).

    Parameters
    ----------
    plan : ProtocolPlan
        The plan.
    stage : {1, 2}
        Stage 1 ``[x, w x, w]``: ``[1]*d + [W]*d + [W]``; stage 2: ``[1]*d + [W]*d``.

    Returns
    -------
    FloatArray
        Shape ``(2d + 1,)`` or ``(2d,)``.
    """
    d, w = plan.d, plan.max_weight
    if stage == 1:
        return np.concatenate([np.ones(d), np.full(d + 1, w)])
    if stage == 2:
        return np.concatenate([np.ones(d), np.full(d, w)])
    raise InputDataError(f"stage must be 1 or 2, got stage={stage!r}.")


# --------------------------------------------------------------------------- server side


@dataclass(frozen=True)
class Stage1Release:
    """The server's stage-1 result (all values are DP releases or post-processing).

    Attributes
    ----------
    mu_prime : FloatArray, shape (d,)
        ``mu' = (sum x_i + noise)/n`` (Thm 3.3), unclipped (unbiased).
    mu_prime_broadcast : FloatArray, shape (d,)
        ``clip(mu', 0, 1)``, broadcast to the clients for stage 2.
    weighted_mu_prime : FloatArray, shape (d,)
        ``mu_bar' = clip(A'/max(B', n w_min), 0, 1)`` (Lemma 3.7), broadcast for stage 2.
    a : FloatArray, shape (d,)
        ``A' = sum w_i x_i + noise``.
    b : float
        ``B' = sum w_i + noise`` as released.
    b_used : float
        ``max(B', n w_min)``: ``B >= n w_min`` is public, so clamping is free post-processing
        and keeps the ratio finite when the noise drives ``B'`` to or below 0.
    b_clamped : bool
        Whether ``B'`` was below ``n w_min`` and was clamped.
    n : int
        Clients whose values are in the sum.
    noise_shares : int
        Noise shares in the sum (distributed placement).
    noise_fraction : float
        Honest noise variance that arrived / planned (see :meth:`ProtocolPlan.noise_fraction`).
    """

    mu_prime: FloatArray
    mu_prime_broadcast: FloatArray
    weighted_mu_prime: FloatArray
    a: FloatArray
    b: float
    b_used: float
    b_clamped: bool
    n: int
    noise_shares: int
    noise_fraction: float


@dataclass(frozen=True)
class PrivateStatistics:
    """The private statistics of one run (Thm 3.3, 3.8, 3.13).

    Attributes
    ----------
    mean : FloatArray, shape (d,)
        ``mu'`` (unclipped).
    dispersion : FloatArray, shape (d,)
        ``D''``.
    weighted_mean : FloatArray, shape (d,)
        ``mu_bar'`` (clipped into [0, 1]).
    q : FloatArray, shape (d,)
        ``Q''`` (a sum).
    i2 : FloatArray, shape (d,)
        ``I2'' = max(0, 1 - (n-1)/Q'')`` (0 where ``Q'' <= n - 1``).
    i2_extra : FloatArray or None
        ``I2''' = I2'' + N(0, sigma_5^2)``, or None when disabled.
    sigmas : Mapping[str, float]
        Calibrated sigma of every release.
    spent : PrivacySpent
        Privacy actually spent under exact composition (counts missing noise shares).
    labels : tuple[str, ...]
        Caveats: baseline mechanism, paper profile, degraded noise, clamping, placement.
    n, d : int
        Clients (in the stage-2 sum) and coordinates.
    placement : {"distributed", "central"}
        Where the noise was added.
    mu_prime_broadcast : FloatArray, shape (d,)
        The broadcast ``clip(mu', 0, 1)``.
    weighted_denominator_clamped : bool
        Whether ``B'`` was clamped to its public lower bound.
    noise_shares : tuple[int, int]
        Noise shares in the stage-1 and stage-2 sums.
    weighted_denominator : float
        ``max(B', n w_min)``, the denominator used for ``mu_bar'`` (a DP release).
    n_clipped, n_at_floor : int
        Input values clipped and clients at the variance floor (when known to the caller).
    """

    mean: FloatArray
    dispersion: FloatArray
    weighted_mean: FloatArray
    q: FloatArray
    i2: FloatArray
    i2_extra: FloatArray | None
    sigmas: Mapping[str, float]
    spent: PrivacySpent
    labels: tuple[str, ...]
    n: int
    d: int
    placement: Placement
    mu_prime_broadcast: FloatArray
    weighted_denominator_clamped: bool
    noise_shares: tuple[int, int]
    weighted_denominator: float = math.nan
    n_clipped: int = 0
    n_at_floor: int = 0

    def summary(self) -> dict[str, float]:
        """Coordinate averages of the statistics and the privacy spent.

        Returns
        -------
        dict[str, float]
            ``mean, dispersion, weighted_mean, q, i2`` (and ``i2_extra``), ``epsilon_spent``,
            ``delta_spent``, ``n``, ``d``.
        """
        out = _coordinate_averages(self, self.i2_extra)
        out["epsilon_spent"] = float(self.spent.epsilon)
        out["delta_spent"] = float(self.spent.delta)
        out["n"] = float(self.n)
        out["d"] = float(self.d)
        return out


def _check_sum(name: str, noisy_sum: npt.ArrayLike, length: int) -> FloatArray:
    arr = np.asarray(noisy_sum, dtype=np.float64)
    if arr.shape != (length,):
        raise InputDataError(f"{name} must have shape ({length},), got shape {arr.shape}.")
    if not np.all(np.isfinite(arr)):
        raise AggregationError(f"{name} holds non-finite values; the aggregation failed.")
    return arr


def _check_arrivals(plan: ProtocolPlan, n: int, noise_shares: int) -> tuple[int, int]:
    n = _count("n", n, 1)
    shares = _count("noise_shares", noise_shares, 0, n)
    return n, shares


def assemble_stage1(
    noisy_sum: npt.ArrayLike,
    plan: ProtocolPlan,
    *,
    n: int,
    noise_shares: int,
    rng: np.random.Generator,
) -> Stage1Release:
    """Turn the unmasked stage-1 sum into ``mu'`` and ``mu_bar'`` (server side).

    Parameters
    ----------
    noisy_sum : array_like, shape (2d + 1,)
        ``sum_i [x_i, w_i x_i, w_i]`` plus the noise shares that arrived (distributed) or the
        noiseless sum (central: the server adds ``N(0, sigma^2)`` here, drawn from ``rng``).
    plan : ProtocolPlan
        The plan the clients used.
    n : int
        Clients whose values are in the sum (divides the mean).
    noise_shares : int
        Noise shares in the sum, ``0 <= noise_shares <= n`` (ignored for central placement).
    rng : numpy.random.Generator
        Server noise (central placement only).

    Returns
    -------
    Stage1Release
        ``mu'`` (Thm 3.3: the sum divided by ``n``, fixing the paper's scale), its clipped
        broadcast, and ``mu_bar' = clip(A'/max(B', n w_min), 0, 1)`` (Lemma 3.7).
    """
    s = _check_sum("stage-1 sum", noisy_sum, plan.stage1_length)
    n, shares = _check_arrivals(plan, n, noise_shares)
    d = plan.d
    if plan.config.placement == "central":
        std = np.empty(plan.stage1_length)
        std[:d] = plan.sigma_mean
        std[d:] = plan.sigma_weighted
        s = s + rng.standard_normal(plan.stage1_length) * std
    mu_prime = s[:d] / n  # Thm 3.3 (fixed): mu' = (sum x_i + N(0, sigma_1^2)) / n
    a = s[d : 2 * d]
    b = float(s[2 * d])
    b_low = n * plan.min_weight  # public: every w_i >= w_min
    b_used = max(b, b_low)
    weighted = np.clip(a / b_used, 0.0, 1.0)  # Lemma 3.7: mu_bar' = A'/B', clipped
    return Stage1Release(
        mu_prime=mu_prime,
        mu_prime_broadcast=np.clip(mu_prime, 0.0, 1.0),
        weighted_mu_prime=weighted,
        a=a,
        b=b,
        b_used=b_used,
        b_clamped=b < b_low,
        n=n,
        noise_shares=shares,
        noise_fraction=plan.noise_fraction(shares),
    )


def _spent(plan: ProtocolPlan, fraction1: float, fraction2: float) -> PrivacySpent:
    fractions = {"mean": fraction1, "weighted": fraction1, "dispersion": fraction2, "q": fraction2}
    return privacy_spent(plan.budget, fractions)


def _labels(
    plan: ProtocolPlan, spent: PrivacySpent, clamped: bool, extra: tuple[str, ...] = ()
) -> tuple[str, ...]:
    labels = list(plan.labels)
    if spent.degraded:
        full = privacy_spent(plan.budget)
        labels.append(
            f"degraded: noise shares missing; privacy spent eps={spent.epsilon:.4g} at "
            f"delta={spent.delta:.3g}, more than eps={full.epsilon:.4g} with all shares"
        )
    if clamped:
        labels.append("weighted mean: B' fell below its public lower bound n*w_min and was clamped")
    labels.extend(extra)
    return tuple(labels)


def assemble_stage2(
    noisy_sum: npt.ArrayLike,
    plan: ProtocolPlan,
    stage1: Stage1Release,
    *,
    n: int,
    noise_shares: int,
    rng: np.random.Generator,
) -> PrivateStatistics:
    """Turn the unmasked stage-2 sum into ``D''``, ``Q''``, ``I2''`` and ``I2'''`` (server).

    Parameters
    ----------
    noisy_sum : array_like, shape (2d,)
        ``sum_i [(x_i - mu')^2, w_i (x_i - mu_bar')^2]`` plus arrived noise shares
        (distributed) or noiseless (central: the server adds the noise here).
    plan : ProtocolPlan
        The plan.
    stage1 : Stage1Release
        The stage-1 result whose clipped values were broadcast.
    n : int
        Clients whose values are in the stage-2 sum.
    noise_shares : int
        Noise shares in the sum, ``0 <= noise_shares <= n`` (ignored for central placement).
    rng : numpy.random.Generator
        Server noise: central noise (central placement) and the ``I2'''`` noise.

    Returns
    -------
    PrivateStatistics
        All private statistics with sigmas, privacy spent (exact composition, from the noise
        that arrived in both stages) and labels.

    Notes
    -----
    ``I2'''`` (Thm 3.13's third noise stage) is drawn here by the server in both placements;
    it buys no privacy -- ``I2''`` is already a post-processing of the private ``Q''``.
    """
    s = _check_sum("stage-2 sum", noisy_sum, plan.stage2_length)
    n, shares = _check_arrivals(plan, n, noise_shares)
    if n < 2:
        raise AggregationError(f"I2 needs n >= 2 clients in the stage-2 sum, got n={n}.")
    d = plan.d
    if plan.config.placement == "central":
        std = np.empty(plan.stage2_length)
        std[:d] = plan.sigma_dispersion
        std[d:] = plan.sigma_q
        s = s + rng.standard_normal(plan.stage2_length) * std
    dispersion = s[:d] / n  # Thm 3.3: D'' = (sum (x_i - mu')^2 + N(0, sigma_3^2)) / n
    q = s[d:].copy()  # Thm 3.8: Q'' = sum w_i (x_i - mu_bar')^2 + N(0, sigma_4^2)
    i2 = i_squared(q, n)  # Thm 3.13: I2'' = max(0, 1 - (n-1)/Q''); Q'' <= 0 gives 0
    i2_extra: FloatArray | None = None
    if plan.config.extra_i2_noise:
        i2_extra = i2 + plan.sigma_i2 * rng.standard_normal(d)  # Thm 3.13: I2''' (no privacy)
    spent = _spent(plan, stage1.noise_fraction, plan.noise_fraction(shares))
    return PrivateStatistics(
        mean=stage1.mu_prime,
        dispersion=dispersion,
        weighted_mean=stage1.weighted_mu_prime,
        q=q,
        i2=i2,
        i2_extra=i2_extra,
        sigmas=plan.sigmas,
        spent=spent,
        labels=_labels(plan, spent, stage1.b_clamped),
        n=n,
        d=d,
        placement=plan.config.placement,
        mu_prime_broadcast=stage1.mu_prime_broadcast,
        weighted_denominator_clamped=stage1.b_clamped,
        noise_shares=(stage1.noise_shares, shares),
        weighted_denominator=stage1.b_used,
    )


# --------------------------------------------------------------------------- in process


def noiseless_stage1(x: FloatArray, weights: FloatArray) -> FloatArray:
    """``sum_i [x_i, w_i x_i, w_i]`` over validated data (the sum secure aggregation unmasks).

    Parameters
    ----------
    x : FloatArray, shape (n, d)
        Validated client data in ``[0, 1]``.
    weights : FloatArray, shape (n,)
        Client weights.

    Returns
    -------
    FloatArray, shape (2d + 1,)
    """
    return np.concatenate([x.sum(axis=0), np.einsum("i,ij->j", weights, x), [weights.sum()]])


def noiseless_stage2(
    x: FloatArray, weights: FloatArray, mu_prime: FloatArray, weighted_mu_prime: FloatArray
) -> FloatArray:
    """``sum_i [(x_i - mu')^2, w_i (x_i - mu_bar')^2]`` over validated data.

    Parameters
    ----------
    x : FloatArray, shape (n, d)
        Validated client data.
    weights : FloatArray, shape (n,)
        Client weights.
    mu_prime, weighted_mu_prime : FloatArray, shape (d,)
        The broadcast (clipped) values.

    Returns
    -------
    FloatArray, shape (2d,)
    """
    return np.concatenate(
        [
            ((x - mu_prime) ** 2).sum(axis=0),
            np.einsum("i,ij->j", weights, (x - weighted_mu_prime) ** 2),
        ]
    )


def _stage1_sums(truth: TrueStatistics) -> FloatArray:
    """``sum_i [x_i, w_i x_i, w_i]`` from the exact statistics (``[n mu, B mu_bar, B]``)."""
    b = truth.weight_sum
    return np.concatenate([truth.n * truth.mean, b * truth.weighted_mean, [b]])


def _stage2_sums(truth: TrueStatistics, mu_prime: FloatArray, weighted: FloatArray) -> FloatArray:
    """:func:`noiseless_stage2` in ``O(d)`` from the exact statistics.

    Exact algebra, since ``sum (x_i - mu) = 0`` and ``sum w_i (x_i - mu_bar) = 0``:
    ``sum (x_i - m)^2 = n D + n (mu - m)^2`` and
    ``sum w_i (x_i - m)^2 = Q + B (mu_bar - m)^2``.
    """
    n, b = truth.n, truth.weight_sum
    return np.concatenate(
        [
            n * truth.dispersion + n * (truth.mean - mu_prime) ** 2,
            truth.q + b * (truth.weighted_mean - weighted) ** 2,
        ]
    )


def _run_protocol(
    truth: TrueStatistics,
    plan: ProtocolPlan,
    *,
    stage1_noise: FloatArray | None,
    stage2_noise: FloatArray | None,
    rng: np.random.Generator,
) -> PrivateStatistics:
    """Both stages in process with given summed client noise (None: central placement).

    The noiseless sums come from one pass over the data (:class:`TrueStatistics`) and the
    identities of :func:`_stage2_sums`; the server functions are the ones the Flower server
    calls.
    """
    n = truth.n
    shares = n if plan.config.placement == "distributed" else 0
    s1 = _stage1_sums(truth)
    if stage1_noise is not None:
        s1 = s1 + stage1_noise
    st1 = assemble_stage1(s1, plan, n=n, noise_shares=shares, rng=rng)
    s2 = _stage2_sums(truth, st1.mu_prime_broadcast, st1.weighted_mu_prime)
    if stage2_noise is not None:
        s2 = s2 + stage2_noise
    result = assemble_stage2(s2, plan, st1, n=n, noise_shares=shares, rng=rng)
    return replace(result, n_clipped=truth.n_clipped, n_at_floor=truth.n_at_floor)


def private_statistics(
    x: npt.ArrayLike,
    *,
    epsilon: float,
    delta: float,
    mechanism: Mechanism = "agm",
    placement: Placement = "distributed",
    composition: Composition = "basic",
    profile: Profile = "bounded",
    variance_floor: float = 0.01,
    extra_i2_noise: bool = True,
    min_honest_clients: int | None = None,
    rng: np.random.Generator,
) -> PrivateStatistics:
    """Run the two-stage protocol in process (Thm 3.3, 3.8, 3.13; Alg. 3.1).

    Distributed noise is drawn as the *sum* of the ``n`` shares in one draw per stage:
    ``n`` independent ``N(0, sigma^2/t)`` shares sum to exactly ``N(0, n sigma^2/t)``, and
    ``tests/test_protocol.py`` checks the equivalence with a KS test against per-client shares
    summed (fixed seed, alpha = 0.01). Everything else goes through the same server functions
    the Flower server calls (:func:`assemble_stage1`, :func:`assemble_stage2`); the noiseless
    sums come from one pass over the data and, for stage 2, the exact identities
    ``sum (x_i - m)^2 = sum (x_i - mu)^2 + n (mu - m)^2`` and
    ``sum w_i (x_i - m)^2 = sum w_i (x_i - mu_bar)^2 + B (mu_bar - m)^2``.

    Parameters
    ----------
    x : array_like, shape (n, d)
        Client data (one row per client); values outside ``[0, 1]`` are clipped and counted.
    epsilon, delta, mechanism, placement, composition, profile, variance_floor, \
extra_i2_noise, min_honest_clients
        See :class:`ProtocolConfig`.
    rng : numpy.random.Generator
        Source of all noise.

    Returns
    -------
    PrivateStatistics
        ``mu', D'', mu_bar', Q'', I2'', I2'''`` with sigmas, privacy spent and labels.
    """
    config = ProtocolConfig(
        epsilon=epsilon,
        delta=delta,
        mechanism=mechanism,
        placement=placement,
        composition=composition,
        profile=profile,
        variance_floor=variance_floor,
        extra_i2_noise=extra_i2_noise,
        min_honest_clients=min_honest_clients,
    )
    values, n_clipped = validate_clients(x)
    n, d = values.shape
    plan = plan_protocol(config, n=n, d=d)
    truth = statistics_of_validated(
        values, n_clipped=n_clipped, variance_floor=config.variance_floor
    )
    noise1: FloatArray | None = None
    noise2: FloatArray | None = None
    if placement == "distributed":
        std1 = np.empty(plan.stage1_length)
        std1[:d] = plan.noise_std("mean")
        std1[d:] = plan.noise_std("weighted")
        std2 = np.empty(plan.stage2_length)
        std2[:d] = plan.noise_std("dispersion")
        std2[d:] = plan.noise_std("q")
        # One draw of the summed shares (same distribution; KS-tested).
        noise1 = rng.standard_normal(plan.stage1_length) * std1
        noise2 = rng.standard_normal(plan.stage2_length) * std2
    return _run_protocol(truth, plan, stage1_noise=noise1, stage2_noise=noise2, rng=rng)


# --------------------------------------------------------------------------- batch


@dataclass(frozen=True)
class BatchResult:
    """Many independent private measurements of the same data (leading repeat axis).

    Attributes
    ----------
    config : ProtocolConfig
        Settings.
    plan : ProtocolPlan
        Calibrated plan.
    truth : TrueStatistics
        The exact statistics of the data.
    mean, dispersion, weighted_mean, q, i2 : FloatArray, shape (repeats, d)
        ``mu', D'', mu_bar', Q'', I2''`` of each repeat.
    i2_extra : FloatArray or None, shape (repeats, d)
        ``I2'''`` of each repeat, or None when disabled.
    weighted_denominator_clamped : numpy.ndarray of bool, shape (repeats,)
        Whether ``B'`` was clamped to ``n w_min`` in each repeat.
    weighted_denominator : FloatArray, shape (repeats,)
        ``max(B', n w_min)`` of each repeat.
    sigmas : Mapping[str, float]
        Calibrated sigma of every release.
    spent : PrivacySpent
        Privacy spent by each measurement (all shares arrive).
    labels : tuple[str, ...]
        Caveats of the plan.
    """

    config: ProtocolConfig
    plan: ProtocolPlan
    truth: TrueStatistics
    mean: FloatArray
    dispersion: FloatArray
    weighted_mean: FloatArray
    q: FloatArray
    i2: FloatArray
    i2_extra: FloatArray | None
    weighted_denominator_clamped: npt.NDArray[np.bool_]
    weighted_denominator: FloatArray
    sigmas: Mapping[str, float]
    spent: PrivacySpent
    labels: tuple[str, ...]

    @property
    def repeats(self) -> int:
        """Number of repeats (the leading axis)."""
        return int(self.mean.shape[0])

    @property
    def mu_prime_broadcast(self) -> FloatArray:
        """``clip(mu', 0, 1)`` of each repeat, shape ``(repeats, d)``."""
        return np.clip(self.mean, 0.0, 1.0)

    def summary(self) -> dict[str, float]:
        """Averages over repeats and coordinates of every private statistic.

        Returns
        -------
        dict[str, float]
            ``mean, dispersion, weighted_mean, q, i2`` (and ``i2_extra``), ``repeats``,
            ``epsilon_spent``, ``delta_spent``, ``fraction_clamped``.
        """
        out = _coordinate_averages(self, self.i2_extra)
        out["repeats"] = float(self.repeats)
        out["epsilon_spent"] = float(self.spent.epsilon)
        out["delta_spent"] = float(self.spent.delta)
        out["fraction_clamped"] = float(np.mean(self.weighted_denominator_clamped))
        return out


def _summed_noise(
    plan: ProtocolPlan,
    names: tuple[str, ...],
    lengths: tuple[int, ...],
    repeats: int,
    noise_draw: NoiseDraw,
    rng: np.random.Generator,
) -> FloatArray:
    """Total noise per repeat, shape (repeats, sum(lengths)), blocks in ``names`` order."""
    total = sum(lengths)
    if noise_draw == "per_client" and plan.config.placement == "distributed":
        share = np.concatenate(
            [np.full(k, plan.share_std(name)) for name, k in zip(names, lengths, strict=True)]
        )
        out = np.empty((repeats, total))
        for r in range(repeats):
            out[r] = (rng.standard_normal((plan.n, total)) * share).sum(axis=0)
        return out
    std = np.concatenate(
        [np.full(k, plan.noise_std(name)) for name, k in zip(names, lengths, strict=True)]
    )
    noise: FloatArray = rng.standard_normal((repeats, total)) * std
    return noise


def private_statistics_batch(
    x: npt.ArrayLike,
    config: ProtocolConfig,
    *,
    repeats: int,
    rng: np.random.Generator,
    noise_draw: NoiseDraw = "summed",
) -> BatchResult:
    """Repeat the in-process protocol ``repeats`` times on the same data, vectorised.

    One ``O(n d)`` pass computes the noiseless sums; each repeat then costs ``O(d)``, using (per
    coordinate; exact since ``sum (x_i - mu) = 0`` and ``sum w_i (x_i - mu_bar) = 0``)::

        sum (x_i - m)^2       = sum (x_i - mu)^2           + n (mu - m)^2
        sum w_i (x_i - m)^2   = sum w_i (x_i - mu_bar)^2   + B (mu_bar - m)^2

    with ``m`` the broadcast (clipped) ``mu'`` resp. ``mu_bar'`` of the repeat. Distributed and
    central placement differ only in the noise scale (``sigma sqrt(n/t)`` vs ``sigma``): the sum of
    ``n`` shares ``N(0, sigma^2/t)`` is drawn in one draw (``noise_draw="summed"``) unless
    ``noise_draw="per_client"`` asks for ``n`` shares per repeat, summed (slow; for tests).

    Parameters
    ----------
    x : array_like, shape (n, d)
        Client data; validated and clipped like :func:`private_statistics`.
    config : ProtocolConfig
        Settings.
    repeats : int
        Number of independent measurements, ``>= 1``.
    rng : numpy.random.Generator
        Source of all noise.
    noise_draw : {"summed", "per_client"}
        How distributed noise is drawn (same distribution).

    Returns
    -------
    BatchResult
        Arrays with a leading repeat axis, the truth, sigmas, privacy spent and labels.
    """
    repeats = _count("repeats", repeats, 1)
    _choice("noise_draw", noise_draw, ("summed", "per_client"))
    values, n_clipped = validate_clients(x)
    n, d = values.shape
    plan = plan_protocol(config, n=n, d=d)
    truth = statistics_of_validated(
        values, n_clipped=n_clipped, variance_floor=config.variance_floor
    )
    del values
    b = truth.weight_sum  # B = sum w_i
    mu = truth.mean
    mu_bar = truth.weighted_mean
    ss = n * truth.dispersion  # sum (x_i - mu)^2
    qq = truth.q  # sum w_i (x_i - mu_bar)^2

    z1 = _summed_noise(plan, ("mean", "weighted"), (d, d + 1), repeats, noise_draw, rng)
    z2 = _summed_noise(plan, ("dispersion", "q"), (d, d), repeats, noise_draw, rng)

    mean = (n * mu + z1[:, :d]) / n  # Thm 3.3 (fixed): mu' = (sum x_i + noise)/n
    m = np.clip(mean, 0.0, 1.0)
    b_noisy = b + z1[:, 2 * d]
    b_low = n * plan.min_weight
    clamped = b_noisy < b_low
    b_used = np.maximum(b_noisy, b_low)
    weighted = np.clip(
        (b * mu_bar + z1[:, d : 2 * d]) / b_used[:, None], 0.0, 1.0
    )  # Lemma 3.7 (lem:noisybarmu)
    # Thm 3.3: D'' = (sum (x_i - mu')^2 + noise)/n via the identity above.
    dispersion = (ss + n * (mu - m) ** 2 + z2[:, :d]) / n
    # Thm 3.8: Q'' = sum w_i (x_i - mu_bar')^2 + noise via the identity above.
    q = qq + b * (mu_bar - weighted) ** 2 + z2[:, d:]
    i2 = i_squared(q, n)  # Thm 3.13
    i2_extra: FloatArray | None = None
    if config.extra_i2_noise:
        i2_extra = i2 + plan.sigma_i2 * rng.standard_normal((repeats, d))  # Thm 3.13
    spent = _spent(plan, 1.0, 1.0)
    return BatchResult(
        config=config,
        plan=plan,
        truth=truth,
        mean=mean,
        dispersion=dispersion,
        weighted_mean=weighted,
        q=q,
        i2=i2,
        i2_extra=i2_extra,
        weighted_denominator_clamped=clamped,
        weighted_denominator=b_used,
        sigmas=plan.sigmas,
        spent=spent,
        labels=_labels(plan, spent, bool(clamped.any())),
    )
