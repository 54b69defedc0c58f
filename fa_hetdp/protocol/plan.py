"""The protocol's plan: the calibrated releases of a run (Thm 3.3, 3.8, 3.13; Alg. 3.1).

Release names and L2 sensitivities (replace-one neighbours, ``x in [0,1]^d``, ``W = 1/v_min``):
``"mean"`` ``sqrt(d)``; ``"weighted"`` ``W sqrt(d+1)``; ``"dispersion"`` ``sqrt(d)``;
``"q"`` ``W sqrt(d)``; ``"i2_extra"`` ``sqrt(d)/n`` (does not count for privacy). The ``"paper"``
profile drops ``W`` from the weighted sensitivities, as the paper's lemmas do: it is not DP for
the weighted stages and is flagged so.

Utility levers (their privacy argument: ``docs/privacy.md``):

- ``statistics``: only the releases a needed statistic depends on are made
  (:data:`RELEASE_DEPENDENCIES`); the others contribute exact zeros (no data, no noise, no
  budget) and the statistics they would feed are NaN, labelled.
- the split: under ``"gdp"`` with no ``split`` given, the budget is split by
  :func:`release_weights` (``u_k`` proportional to ``Delta_k sqrt(a_k)``).
- ``adaptive_floor``: a stage-0 release ``"floor"`` (a noisy histogram of the ``s_i^2``,
  :mod:`fa_hetdp.protocol.floor`) takes :data:`~fa_hetdp.protocol.floor.FLOOR_BUDGET_SHARE`
  of the budget; once the floor is chosen, ``plan_protocol(config, n=n, d=d, floor=...)``
  plans stages 1 and 2 with ``W = 1/floor`` (the floor release keeps the same sigma).
- ``broadcast_bounds``: the stage-2 sensitivities follow from the public broadcast ``c``
  (``||max(c, 1 - c)^2||_2``, ``W`` times that for ``Q''``); the planned sigma is the worst
  case ``c`` and :meth:`ProtocolPlan.stage2_factors` scales it down once ``c`` is known
  (:mod:`fa_hetdp.protocol.bounds`; with ``noise_shape = "per_coordinate"`` per coordinate,
  ``sigma_j`` proportional to ``sqrt(b_j)``). The encoding keeps the worst case (an upper
  bound on every share).

Noise placement: ``"distributed"`` -- each client adds noise of scale ``sigma/sqrt(t)`` to its
contribution before masking, so the ``t`` honest shares alone carry ``sigma^2``:
``t = min_honest_clients`` if given, else ``n - ceil(gamma n)`` when the run states a
``corrupt_fraction`` ``gamma`` (the colluders' shares are not counted: they know and subtract
them), else ``n`` (no colluding clients assumed; the labels say which); ``"central"`` -- the
server adds noise of scale ``sigma`` after unmasking. The noise distribution and its
calibration are the plan's :attr:`ProtocolPlan.mechanism` (:mod:`fa_hetdp.dp.mechanisms`); the
per-coordinate layout of the two stage vectors is :mod:`fa_hetdp.protocol.layout`.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Final, Literal

import numpy as np
import numpy.typing as npt
from scipy.special import ndtr

from fa_hetdp._types import RELEASE_NAMES, FloatArray
from fa_hetdp.config.protocol import ProtocolConfig
from fa_hetdp.dp.accounting import BudgetPlan, ReleaseSpec, optimal_weights, plan_budget
from fa_hetdp.dp.mechanisms import DiscreteMechanism, NoiseMechanism, get_mechanism
from fa_hetdp.errors import BaselineWarning, InputDataError, PrivacyParameterError
from fa_hetdp.protocol.bounds import shape_factor, stage2_factor
from fa_hetdp.protocol.floor import (
    FLOOR_BUDGET_SHARE,
    FLOOR_RELEASE,
    FLOOR_SENSITIVITY,
    check_floor,
    floor_edges,
    uses_adaptive_floor,
)
from fa_hetdp.protocol.layout import Stage, StageLayout, stage_layout
from fa_hetdp.protocol.record_bounds import record_sensitivities, record_stage2_bounds
from fa_hetdp.registry import RELEASES_NEEDED, STATISTIC_KEYS
from fa_hetdp.secagg.encoding import choose_encoding
from fa_hetdp.secagg.errors import EncodingError
from fa_hetdp.stats.exact import MAX_WITHIN_VARIANCE

__all__ = [
    "ENCODING_FAILURE_PROBABILITY",
    "LABEL_PAPER_PROFILE",
    "RELEASE_DEPENDENCIES",
    "TYPICAL_WITHIN_VARIANCE",
    "Broadcast",
    "ProtocolPlan",
    "plan_protocol",
    "release_weights",
]

RELEASE_DEPENDENCIES: Final[Mapping[str, tuple[str, ...]]] = RELEASES_NEEDED
"""The releases each statistic needs (keys of :data:`~fa_hetdp.registry.STATISTICS`;
read from each record's ``needs``)."""

TYPICAL_WITHIN_VARIANCE: Final = 1.0 / 12.0
"""Public assumption of the default split: a typical within-vector variance ``s_i^2`` (that of
values spread uniformly over [0, 1]), so a typical weight is ``min(W, 12)``."""

SumStage = Literal[0, 1, 2]
"""A secure sum of the run: stage 0 (the floor histogram, ``adaptive_floor`` only), 1 or 2."""

Broadcast = tuple[npt.ArrayLike, npt.ArrayLike]
"""The stage-2 broadcast ``(clip(mu', 0, 1), mu_bar')``, shape ``(..., d)`` each."""


def release_weights(sensitivities: Mapping[str, float], *, max_weight: float) -> dict[str, float]:
    """Return the default Gaussian-DP split: least noise relative to the typical sums.

    Error weights ``a_k = 1/m_k^2``, ``m_k`` the typical size of one client's contribution to
    release ``k`` per coordinate: 1 for ``"mean"`` and ``"dispersion"`` (same unit as their
    bound 1) and the typical weight ``w_typ = min(W, 1/TYPICAL_WITHIN_VARIANCE)`` for
    ``"weighted"`` and ``"q"``. The minimiser of ``sum_k a_k sigma_k^2`` is
    ``u_k`` proportional to ``Delta_k sqrt(a_k) = Delta_k / m_k``
    (:func:`~fa_hetdp.dp.accounting.optimal_weights`): the weighted releases, calibrated
    for ``W`` but typically of size ``w_typ``, get ``W/w_typ`` times the share.
    """
    typical = min(max_weight, 1.0 / TYPICAL_WITHIN_VARIANCE)
    a = {k: 1.0 / typical**2 if k in ("weighted", "q") else 1.0 for k in sensitivities}
    return optimal_weights(sensitivities, a)


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
        Honest clients whose shares must suffice: ``min_honest_clients``, else
        ``n - ceil(gamma n)`` for a stated ``corrupt_fraction`` ``gamma``, else ``n``.
    budget : BudgetPlan
        Calibrated releases (sigma of each, its epsilon/delta share).
    labels : tuple[str, ...]
        Human-readable caveats (baseline mechanism, paper profile, placement).
    floor : float or None
        The adaptive floor chosen from the stage-0 histogram (public); None before it is
        chosen or without ``adaptive_floor`` (then ``v_min`` applies).
    """

    config: ProtocolConfig
    n: int
    d: int
    t: int
    budget: BudgetPlan
    labels: tuple[str, ...] = ()
    floor: float | None = None

    @property
    def colluders(self) -> int:
        """``n - t``: clients whose noise shares are not counted (they may collude)."""
        return self.n - self.t

    @property
    def not_dp_because(self) -> tuple[str, ...]:
        """Why this plan is not a DP guarantee (empty when it is one).

        The ``"paper"`` profile (its weighted sensitivities ignore the weights) and a
        mechanism outside its guarantee (CGM at a per-release ``epsilon >= 1``): the budget's
        :attr:`~fa_hetdp.dp.accounting.BudgetPlan.not_dp`.
        """
        return self.budget.not_dp

    @property
    def dp(self) -> bool:
        """Whether the plan is a differential-privacy guarantee."""
        return not self.not_dp_because

    @property
    def variance_floor(self) -> float:
        """The floor the weights use: the chosen adaptive floor, else ``v_min``."""
        return self.config.variance_floor if self.floor is None else self.floor

    @property
    def privacy_unit(self) -> str:
        """``"client"`` or ``"record"``: what neighbouring federations differ in."""
        return str(self.config.setting("privacy_unit"))

    @property
    def min_records(self) -> int:
        """``m``, the public lower bound on every client's record count (record unit).

        Raises
        ------
        PrivacyParameterError
            Under the client unit (no record count is used).
        """
        m = self.config.setting("min_records")
        if self.privacy_unit != "record" or m is None:
            raise PrivacyParameterError("min_records is used only with privacy_unit='record'.")
        return int(m)

    @property
    def max_weight(self) -> float:
        """``W = 1/v_floor``, the largest weight."""
        return 1.0 / self.variance_floor

    @property
    def min_weight(self) -> float:
        """Smallest possible weight ``1/max(1/4, v_floor)`` (``s_i^2 <= 1/4`` always)."""
        return 1.0 / max(MAX_WITHIN_VARIANCE, self.variance_floor)

    @property
    def releases(self) -> tuple[str, ...]:
        """Names of the noisy releases of stages 1 and 2 (the needed ones)."""
        return tuple(r.name for r in self.budget.releases if r.name != FLOOR_RELEASE)

    @property
    def adaptive(self) -> bool:
        """Whether the run releases the stage-0 floor histogram."""
        return any(r.name == FLOOR_RELEASE for r in self.budget.releases)

    @property
    def floor_sigma(self) -> float:
        """Sigma of the stage-0 histogram per bucket (0.0 without ``adaptive_floor``)."""
        return float(self.budget.sigma(FLOOR_RELEASE)) if self.adaptive else 0.0

    @property
    def floor_noise_std(self) -> float:
        """Std of the total histogram noise per bucket when every share arrives."""
        if self.config.placement == "central":
            return self.floor_sigma
        return self.floor_sigma * math.sqrt(self.n / self.t)

    @property
    def floor_share_std(self) -> float:
        """Std of one client's histogram noise share (0.0 for central placement)."""
        if self.config.placement == "central":
            return 0.0
        return self.floor_sigma / math.sqrt(self.t)

    @property
    def floor_edges(self) -> FloatArray:
        """The public grid of candidate floors (from the user's ``v_min``)."""
        return floor_edges(self.config.variance_floor)

    @property
    def statistics(self) -> tuple[str, ...]:
        """Keys of the statistics this plan can compute (all their releases are made)."""
        made = set(self.releases)
        return tuple(k for k, deps in RELEASE_DEPENDENCIES.items() if set(deps) <= made)

    def released(self, key: str, values: FloatArray) -> FloatArray:
        """``values`` if statistic ``key`` is computed by this plan, else NaN of its shape."""
        if key in self.statistics:
            return values
        return np.full(np.shape(values), np.nan)

    def zero_unmade(self, stage: Stage, values: FloatArray) -> FloatArray:
        """``values`` with the blocks of releases not made set to exactly 0 (a copy)."""
        out = np.array(values, dtype=np.float64)
        for b in self.layout(stage).blocks:
            if b.release not in self.releases:
                out[..., b.slice] = 0.0
        return out

    def sigma(self, name: str) -> float:
        """Calibrated sigma of release ``name`` (0.0 for a release the plan does not make).

        For ``"dispersion"`` and ``"q"`` with ``broadcast_bounds`` this is the worst case
        (``sqrt(d)`` resp. ``W sqrt(d)``); :meth:`stage2_sigmas` gives the one used.

        Raises
        ------
        PrivacyParameterError
            If ``name`` is not a release name (:data:`~fa_hetdp._types.RELEASE_NAMES`).
        """
        if name not in RELEASE_NAMES:
            raise PrivacyParameterError(
                f"unknown release {name!r}; allowed: {', '.join(RELEASE_NAMES)}."
            )
        if name not in self.releases:
            return 0.0
        return float(self.budget.sigma(name))

    def stage2_factors(self, broadcast: Broadcast) -> dict[str, FloatArray]:
        """Per-coordinate ratio of the stage-2 sigmas to the planned worst case.

        :func:`~fa_hetdp.protocol.bounds.stage2_factor` of ``c = mu'`` for ``"dispersion"``
        and ``c = mu_bar'`` for ``"q"`` (shape ``(..., d)``, in ``[1/4, 1]``): the same
        ``||max(c, 1 - c)^2||_2 / sqrt(d)`` on every coordinate (``noise_shape="uniform"``)
        or ``sqrt(b_j sum_i b_i / d)`` (``"per_coordinate"``); 1 when ``broadcast_bounds`` is
        off. Either keeps every release's ``mu_k`` as planned (``docs/privacy.md``, lever c).
        """
        mu_b, weighted_b = (np.asarray(b, dtype=np.float64) for b in broadcast)
        if not self.config.broadcast_bounds:
            one = np.ones(mu_b.shape)
            return {"dispersion": one, "q": one.copy()}
        shape = self.config.noise_shape
        if self.privacy_unit == "record":  # the record-level box (docs/privacy.md, unit)
            m, v = self.min_records, self.variance_floor
            return {
                k: shape_factor(
                    record_stage2_bounds(c, k, variance_floor=v, min_records=m), shape=shape
                )
                for k, c in (("dispersion", mu_b), ("q", weighted_b))
            }
        return {
            "dispersion": stage2_factor(mu_b, shape=shape),
            "q": stage2_factor(weighted_b, shape=shape),
        }

    def stage2_sigmas(
        self, mu_prime_broadcast: npt.ArrayLike, weighted_broadcast: npt.ArrayLike
    ) -> dict[str, FloatArray]:
        """Per-coordinate sigma of ``"dispersion"`` and ``"q"`` at the public broadcast.

        Shape ``(..., d)`` each (the broadcast's shape).
        """
        f = self.stage2_factors((mu_prime_broadcast, weighted_broadcast))
        return {k: self.sigma(k) * v for k, v in f.items()}

    def sigmas_at(self, broadcast: Broadcast | None = None) -> dict[str, float]:
        """Sigma of every release made; the stage-2 ones at one ``broadcast`` when given.

        A stage-2 sigma at a broadcast is summarised by its root mean square over the
        coordinates (the sigma itself for ``noise_shape="uniform"``); the per-coordinate values
        are :meth:`stage2_sigmas`.
        """
        out = self.sigmas
        if broadcast is not None:
            for k, v in self.stage2_sigmas(*broadcast).items():
                if k in out:
                    out[k] = float(np.sqrt(np.mean(np.square(v))))
        return out

    def _scaled(self, stage: Stage, base: FloatArray, broadcast: Broadcast | None) -> FloatArray:
        if stage == 1 or broadcast is None:
            return base
        factors = self.stage2_factors(broadcast)
        layout = self.layout(2)
        shape = next(iter(factors.values())).shape[:-1]
        scale = np.ones((*shape, layout.length))
        for b in layout.blocks:
            scale[..., b.slice] = factors[b.release]  # both stage-2 blocks have length d
        out: FloatArray = base * scale
        return out

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

    def share_std_vector(self, stage: Stage, broadcast: Broadcast | None = None) -> FloatArray:
        """Per-coordinate scale of one client's noise share in stage ``stage``.

        Stage 2 with ``broadcast``: scaled by :meth:`stage2_factors` (shape ``(..., 2d)``);
        without it, the worst case (what the encoding bounds use).
        """
        return self._scaled(stage, self.layout(stage).expand(self.share_std), broadcast)

    def noise_std_vector(self, stage: Stage, broadcast: Broadcast | None = None) -> FloatArray:
        """Per-coordinate scale of the total noise of stage ``stage`` (all shares arrive)."""
        return self._scaled(stage, self.layout(stage).expand(self.noise_std), broadcast)

    def sigma_vector(self, stage: Stage, broadcast: Broadcast | None = None) -> FloatArray:
        """Per-coordinate calibrated ``sigma`` of stage ``stage`` (the server's central noise)."""
        return self._scaled(stage, self.layout(stage).expand(self.sigma), broadcast)

    def contribution_bounds(self, stage: SumStage) -> FloatArray:
        """Per-coordinate bound on ``|noiseless contribution|`` (for the fixed-point scale).

        Stage 1 ``[x, w x, w]``: ``[1]*d + [W]*(d + 1)``; stage 2: ``[1]*d + [W]*d``;
        stage 0 (one-hot histogram bucket): 1 per bucket.
        """
        if stage == 0:
            return np.ones(self.floor_edges.size + 1)
        return self.layout(stage).bounds

    def share_tail_bounds(
        self, stage: SumStage, failure_probability: float = ENCODING_FAILURE_PROBABILITY
    ) -> FloatArray:
        """Per-coordinate bound on one client's noise share (the mechanism's tail bound).

        ``P(|share_j| > bound_j) <= failure_probability`` per coordinate; zero for central
        placement (the clients add no noise).
        """
        if stage == 0:
            scale = np.full(self.floor_edges.size + 1, self.floor_share_std)
            return self.mechanism.tail_bound(scale, failure_probability)
        return self.mechanism.tail_bound(self.share_std_vector(stage), failure_probability)

    def encoding_problem(self, modulus_bits: int) -> str | None:
        """Why a noise share would round to 0 in the fixed-point encoding, or None.

        A distributed Gaussian run encodes each client's noisy contribution at the scales of
        :func:`~fa_hetdp.secagg.encoding.choose_encoding` in ``Z_2^modulus_bits`` (as the
        clients do); a share whose standard deviation is below one step ``1/scale`` of its
        coordinate is mostly rounding, not the planned Gaussian noise, so the run must not
        start. Stage 2 is checked at its smallest share (a quarter of the worst case, the
        least that :meth:`stage2_factors` allows). The discrete mechanisms calibrate on their
        lattice (None here); central placement has no shares (None).
        """
        if self.config.placement == "central" or isinstance(self.mechanism, DiscreteMechanism):
            return None
        stages: tuple[SumStage, ...] = (0, 1, 2) if self.adaptive else (1, 2)
        for stage in stages:
            try:
                encoding = choose_encoding(
                    self.n,
                    self.contribution_bounds(stage),
                    noise_std=self.share_tail_bounds(stage),
                    noise_tail=1.0,
                    modulus_bits=modulus_bits,
                )
            except EncodingError:
                return None  # the ring is too small: the encoding refuses with its own reason
            if stage == 0:
                share = np.full(self.floor_edges.size + 1, self.floor_share_std)
            else:
                share = self.share_std_vector(stage) * (0.25 if stage == 2 else 1.0)
            step = 1.0 / np.asarray(encoding.scales, dtype=np.float64)
            low = (share > 0.0) & (share < step)
            if low.any():
                j = int(np.argmax(low))
                return (
                    f"the noise share of stage {stage} (sd {share[j]:.3g} at coordinate {j}) "
                    f"rounds to 0 in the encoding of Z_2^{modulus_bits} (step {step[j]:.3g} for "
                    f"n={self.n}): epsilon={self.config.epsilon:g} leaves too little noise to "
                    "encode; lower epsilon, or use a 64-bit ring"
                )
        return None


def needed_releases(config: ProtocolConfig) -> tuple[str, ...]:
    """Return the releases the needed statistics depend on (:data:`RELEASE_DEPENDENCIES`)."""
    keys = STATISTIC_KEYS if config.statistics is None else config.statistics
    needed = {r for k in keys for r in RELEASE_DEPENDENCIES[k]}
    if not config.extra_i2_noise:
        needed.discard("i2_extra")
    return tuple(r for r in ("mean", "weighted", "dispersion", "q", "i2_extra") if r in needed)


def _release_specs(
    config: ProtocolConfig, n: int, d: int, floor: float | None = None
) -> list[ReleaseSpec]:
    v_floor = config.variance_floor if floor is None else floor
    w = 1.0 if config.profile == "paper" else 1.0 / v_floor
    # Replace-one L2 sensitivities of the sums; x_i in [0,1]^d and w_i in [4, W]. The stage-2
    # ones are the worst case over the broadcast (c = 0 or 1); see ProtocolPlan.stage2_factors.
    sensitivity = {
        "mean": math.sqrt(d),  # Thm 3.3: sum x_i
        "weighted": w * math.sqrt(d + 1),  # Lemma 3.7 (lem:noisybarmu)
        "dispersion": math.sqrt(d),  # Thm 3.3
        "q": w * math.sqrt(d),  # Thm 3.8: Q''
    }
    if config.setting("privacy_unit") == "record":
        # One record of one client replaced (docs/privacy.md, "Unit of privacy");
        # plan_protocol has checked min_records and refused the paper profile.
        m = int(config.setting("min_records"))
        sensitivity = record_sensitivities(d, variance_floor=v_floor, min_records=m)
    needed = needed_releases(config)
    counted = {k: v for k, v in sensitivity.items() if k in needed}
    optimal = config.split is None and config.composition == "gdp"
    if optimal and config.profile == "bounded":
        weights = release_weights(counted, max_weight=w)
    else:
        weights = {k: config.weight(k) for k in counted}
    specs = [ReleaseSpec(k, counted[k], weights[k]) for k in counted]
    if uses_adaptive_floor(config):
        # Stage 0 takes a fixed share of the counted weight, the same before and after the
        # floor is chosen, so its sigma does not depend on the data (docs/privacy.md).
        total = math.fsum(weights.values())
        share = FLOOR_BUDGET_SHARE / (1.0 - FLOOR_BUDGET_SHARE) * total
        specs.insert(0, ReleaseSpec(FLOOR_RELEASE, FLOOR_SENSITIVITY, share))
    if "i2_extra" in needed:
        # Thm 3.13: eta_3 with Delta = sqrt(d)/n; I2'' is already private, so it does not count.
        specs.append(
            ReleaseSpec(
                "i2_extra", math.sqrt(d) / n, config.weight("i2_extra"), counts_for_privacy=False
            )
        )
    return specs


def _unit_labels(config: ProtocolConfig) -> tuple[str, ...]:
    """Check the unit's settings; the plan line of the record unit (none for the client).

    Raises
    ------
    PrivacyParameterError
        The record unit without ``min_records``, or with the ``"paper"`` profile.
    """
    if config.setting("privacy_unit") != "record":
        return ()
    m = config.setting("min_records")
    if m is None:
        raise PrivacyParameterError(
            "privacy_unit='record' needs min_records, a public lower bound (an integer >= 2) "
            "on every client's record count: one record moves a client's mean by at most "
            "1/min_records per coordinate, which the record-level noise is calibrated to."
        )
    if config.profile == "paper":
        raise PrivacyParameterError(
            "privacy_unit='record' needs profile='bounded': the paper profile is not DP "
            "at any unit."
        )
    return (
        f"record-level privacy: sensitivities for one record of one client replaced, every "
        f"client holding at least min_records = {int(m)} records (docs/privacy.md)",
    )


def colluding_clients(corrupt_fraction: float | None, n: int) -> int:
    """``ceil(gamma n)``: the clients a stated ``corrupt_fraction`` lets collude (0 if None)."""
    if not corrupt_fraction:
        return 0
    return math.ceil(float(corrupt_fraction) * n - 1e-9)  # 0.07 * 100 is 7, not 8


def honest_shares(config: ProtocolConfig, n: int) -> int:
    """Return ``t``, the honest noise shares a distributed plan is calibrated to.

    ``min_honest_clients`` if given (at most ``n - ceil(gamma n)`` when ``gamma`` is stated),
    else ``n - ceil(gamma n)`` for a stated ``corrupt_fraction`` ``gamma``, else ``n``.

    Raises
    ------
    PrivacyParameterError
        If the stated values leave no honest share or count a colluder's share as honest.
    """
    colluders = colluding_clients(config.corrupt_fraction, n)
    most = n - colluders
    if most < 1:
        raise PrivacyParameterError(
            f"corrupt_fraction={config.corrupt_fraction:g} lets ceil(gamma n) = {colluders} "
            f"of n={n} clients collude: no honest noise share is left (gamma must leave at "
            "least one client honest)."
        )
    if config.min_honest_clients is None:
        return most
    t = int(config.min_honest_clients)
    if not 1 <= t <= most:
        why = (
            f"n - ceil(gamma n) = {n} - {colluders}: corrupt_fraction={config.corrupt_fraction:g}"
            " says the other clients may collude, and their shares cannot count as honest"
            if colluders
            else f"n = {n}"
        )
        raise PrivacyParameterError(
            f"min_honest_clients={t} must be in [1, {most}] (at most {most}, {why})."
        )
    return t


def honest_shares_label(config: ProtocolConfig, n: int, t: int) -> str:
    """Say which noise shares the plan counts as honest (the plan line and the result)."""
    colluders = colluding_clients(config.corrupt_fraction, n)
    if config.min_honest_clients is None and colluders:
        return (
            f"noise calibrated to n - ceil(gamma n) = {t} honest shares (gamma = "
            f"{config.corrupt_fraction:g}: up to {colluders} clients may collude with the "
            "server; their shares are not counted)"
        )
    if t < n:
        return (
            f"noise calibrated to t = {t} honest shares of n = {n} (min_honest_clients: the "
            f"shares of up to n - t = {n - t} clients are not counted)"
        )
    return f"all n = {n} noise shares counted as honest (no colluding clients assumed)"


def budget_names(budget: BudgetPlan) -> tuple[str, ...]:
    """Names of the releases in ``budget``."""
    return tuple(r.name for r in budget.releases)


def plan_protocol(
    config: ProtocolConfig, *, n: int, d: int, floor: float | None = None
) -> ProtocolPlan:
    """Calibrate every release of the protocol for ``n`` clients and ``d`` coordinates.

    Parameters
    ----------
    config : ProtocolConfig
        Privacy settings.
    n : int
        Number of participating clients (public), ``n >= 2``.
    d : int
        Number of coordinates, ``d >= 1``.
    floor : float, optional
        With ``adaptive_floor``: the floor chosen from the stage-0 histogram (an edge of
        :func:`~fa_hetdp.protocol.floor.floor_edges`); stages 1 and 2 are planned with
        ``W = 1/floor``. Left out, ``v_min`` (the plan of stage 0).

    Returns
    -------
    ProtocolPlan
        The calibrated plan; ``t = min_honest_clients`` or ``n``.

    Raises
    ------
    InputDataError
        If ``n < 2`` or ``d < 1``.
    PrivacyParameterError
        If ``min_honest_clients`` exceeds ``n`` or ``n - ceil(gamma n)`` (it would count a
        colluder's share), the stated ``corrupt_fraction`` leaves no honest client, the
        budget cannot be calibrated (the reason is in the message), or the ``analysis``
        setting is ``"meta"`` (its plan is :func:`fa_hetdp.protocol.meta_plan.plan_meta`).

    Warns
    -----
    BaselineWarning
        For the ``"paper"`` profile (not DP for the weighted stages) and, from the
        calibration, for CGM at a per-release epsilon >= 1.
    WeakPrivacyWarning
        For ``epsilon`` above :data:`~fa_hetdp.dp.calibration.EPSILON_WARNING_THRESHOLD`.
    """
    if config.setting("analysis") != "heterogeneity":  # the meta-analysis has its own plan
        raise PrivacyParameterError(
            f"analysis={config.setting('analysis')!r} is a meta-analysis of the clients' "
            "records: fa_hetdp.private_meta_analysis(records, client_ids, ...) in process, or "
            "the Flower app (fa-hetdp run); the paper's protocol needs analysis='heterogeneity'"
        )
    n = _count("n", n, 2)
    d = _count("d", d, 1)
    t = honest_shares(config, n)
    labels: list[str] = [*_unit_labels(config)]
    if config.profile == "paper":
        warnings.warn(LABEL_PAPER_PROFILE, BaselineWarning, stacklevel=2)
        labels.append(LABEL_PAPER_PROFILE)
    if floor is not None:
        floor = check_floor(config, floor)
    budget = plan_budget(
        config.epsilon,
        config.delta,
        _release_specs(config, n, d, floor),
        mechanism=config.mechanism,
        composition=config.composition,
    )
    if config.profile == "paper":  # the weighted sensitivities ignore W: no guarantee holds
        budget = replace(budget, not_dp=(LABEL_PAPER_PROFILE, *budget.not_dp))
    labels.extend(budget.labels)
    noise = get_mechanism(config.mechanism)
    if config.placement == "distributed":
        labels.append(
            f"distributed noise: each client adds {noise.noise_label('sigma^2/t', share=True)} "
            f"before masking, t={t} of n={n}; {honest_shares_label(config, n, t)}"
        )
    else:
        labels.append(
            f"central noise: the server adds {noise.noise_label('sigma^2')} after unmasking "
            "(trusted)"
        )
    if config.extra_i2_noise and "i2_extra" in budget_names(budget):
        labels.append(LABEL_I2_EXTRA)
    absent = [k for k in STATISTIC_KEYS if k != "i2_extra" or config.extra_i2_noise]
    absent = [k for k in absent if not set(RELEASE_DEPENDENCIES[k]) <= set(budget_names(budget))]
    if absent:
        labels.append(
            "not released (statistics = "
            + ", ".join(config.statistics or ())
            + "): "
            + ", ".join(absent)
            + " are not computed (NaN; I2''' None): their releases were not made"
            + " (no noise, no budget)"
        )
    if not config.broadcast_bounds:
        labels.append("stage-2 noise calibrated to the worst-case bounds sqrt(d), W sqrt(d)")
    if uses_adaptive_floor(config):
        chosen = "not chosen yet" if floor is None else f"v_floor={floor:.4g}, W={1 / floor:.4g}"
        labels.append(
            f"adaptive variance floor ({chosen}): a noisy histogram of the s_i^2 (release "
            f"'floor', {FLOOR_BUDGET_SHARE:.0%} of the budget) picks the floor, never below "
            f"v_min={config.variance_floor:g}"
        )
    elif config.adaptive_floor:
        labels.append(
            "adaptive variance floor off: the paper profile, v_min = 1/4, or no weighted "
            "statistic released (no budget is spent on a floor nothing uses)"
        )
    return ProtocolPlan(
        config=config, n=n, d=d, t=t, budget=budget, labels=tuple(labels), floor=floor
    )
