"""The server's part of the protocol: from the unmasked sums to the private statistics.

Every formula of the server is written once, in :func:`estimate_stage1` and
:func:`estimate_stage2`, vectorised over an optional leading repeat axis: the Flower server
and :func:`~fa_hetdp.protocol.simulate.private_statistics` call them through
:func:`assemble_stage1` / :func:`assemble_stage2` on one sum, and
:func:`~fa_hetdp.protocol.simulate.private_statistics_batch` calls them on ``repeats`` sums.

- Stage 1: ``mu' = (sum x_i + noise)/n`` (Thm 3.3 / Lemma 3.1; the paper adds noise of scale
  ``sqrt(d)/n`` to the mean, which is the same thing); ``(A', B') = (sum w_i x_i, sum w_i)``
  plus noise, ``mu_bar' = clip(A'/max(B', n w_min), 0, 1)`` (Lemma 3.7, with the weighted
  mean of Def. 2.5 fixed).
- Stage 2: ``D'' = (sum (x_i - mu')^2 + noise)/n`` (Thm 3.3; centred at a public ``a``,
  ``(sum (x_i - a)^2 + noise)/n - (clip(mu') - a)^2``, :mod:`fa_hetdp.protocol.center`);
  ``Q'' = sum w_i (x_i - mu_bar')^2 + noise`` (Thm 3.8; Q is a sum);
  ``I2'' = max(0, 1 - (n-1)/Q'')`` (Thm 3.13; post-processing, no budget);
  ``I2''' = I2'' + noise of scale sigma_5`` (Thm 3.13's third noise stage; buys no privacy).

All noise (central placement, ``I2'''``) is drawn through the plan's mechanism.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from fa_hetdp._types import FloatArray, Placement
from fa_hetdp.dp.accounting import PrivacySpent, privacy_spent
from fa_hetdp.errors import AggregationError, InputDataError
from fa_hetdp.protocol.center import center_correction, dispersion_center
from fa_hetdp.protocol.floor import FLOOR_RELEASE, FloorChoice, choose_floor
from fa_hetdp.protocol.guarantee import Guarantee, guarantee_of
from fa_hetdp.protocol.layout import Stage
from fa_hetdp.protocol.plan import Broadcast, ProtocolPlan, _count, plan_protocol
from fa_hetdp.stats.exact import coordinate_averages, i_squared

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from fa_hetdp.protocol.intervals import Intervals

__all__ = [
    "PrivateStatistics",
    "Stage1Estimates",
    "Stage1Release",
    "Stage2Estimates",
    "assemble_floor",
    "assemble_stage1",
    "assemble_stage2",
    "estimate_stage1",
    "estimate_stage2",
    "extra_i2_noise",
    "privacy_spent_of",
    "result_labels",
    "scalar_summaries",
    "server_noise",
]


@dataclass(frozen=True)
class Stage1Release:
    """The server's stage-1 result (all values are DP releases or post-processing).

    Attributes
    ----------
    mu_prime : FloatArray, shape (d,)
        ``mu' = (sum x_i + noise)/n`` (Thm 3.3), unclipped (unbiased).
    mu_prime_broadcast : FloatArray, shape (d,)
        The dispersion centre broadcast to the clients for stage 2: ``clip(mu', 0, 1)``, or
        the public optimal centre (:func:`~fa_hetdp.protocol.center.dispersion_center`).
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
        ``I2''' = I2'' + noise of scale sigma_5``, or None when disabled.
    sigmas : Mapping[str, float]
        Calibrated sigma of every release; a stage-2 one at the broadcast, as the root mean
        square over coordinates of ``stage2_sigmas``.
    spent : PrivacySpent
        Privacy actually spent under exact composition (counts missing noise shares).
    labels : tuple[str, ...]
        Caveats: baseline mechanism, paper profile, degraded noise, clamping, placement.
    n, d : int
        Clients (in the stage-2 sum) and coordinates.
    placement : {"distributed", "central"}
        Where the noise was added.
    mu_prime_broadcast : FloatArray, shape (d,)
        The broadcast dispersion centre (``clip(mu', 0, 1)`` or the optimal centre).
    weighted_denominator_clamped : bool
        Whether ``B'`` was clamped to its public lower bound.
    noise_shares : tuple[int, int]
        Noise shares in the stage-1 and stage-2 sums.
    weighted_denominator : float
        ``max(B', n w_min)``, the denominator used for ``mu_bar'`` (a DP release).
    n_clipped, n_at_floor : int
        Input values clipped and clients at the variance floor (when known to the caller).
    total_dispersion : float
        ``sum_j D''_j``, the total dispersion (one number).
    i2_total : float
        ``max(0, 1 - (n - 1) d / sum_j Q''_j)``: the ``I^2`` of the summed ``Q''`` -- one
        number for "how heterogeneous are my clients" (post-processing).
    plan : ProtocolPlan or None
        The plan the result was computed under (the source of its intervals).
    floor_choice : FloorChoice or None
        The adaptive floor and the noisy histogram it came from (``adaptive_floor``).
    stage2_sigmas : Mapping[str, FloatArray]
        Per-coordinate sigma (shape ``(d,)``) of each stage-2 release made (``"dispersion"``,
        ``"q"``) at the public broadcast (:meth:`ProtocolPlan.stage2_sigmas`; they differ
        between coordinates with ``noise_shape = "per_coordinate"``).

    Every value says what it is worth: :meth:`confidence_intervals` gives the intervals from
    the known noise, and :func:`fa_hetdp.report.results.statistics_section` the noise on each
    statistic's own scale and the noise-dominated flags.
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
    total_dispersion: float = math.nan
    i2_total: float = math.nan
    plan: ProtocolPlan | None = None
    floor_choice: FloorChoice | None = None
    stage2_sigmas: Mapping[str, FloatArray] = field(default_factory=dict)

    def confidence_intervals(self, level: float = 0.95) -> Intervals:
        """Intervals of every statistic and scalar from the known noise (coverage ``>= level``).

        See :func:`fa_hetdp.protocol.intervals.noise_confidence_intervals`.

        Raises
        ------
        InputDataError
            If the result does not carry its plan.
        """
        from fa_hetdp.protocol.intervals import noise_confidence_intervals  # it reads this module

        if self.plan is None:
            raise InputDataError("this result carries no plan; its intervals need the plan.")
        return noise_confidence_intervals(self, self.plan, level=level)

    def plot(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        level: float = 0.95,
        names: Sequence[str] | None = None,
        quantity: str = "label share",
    ) -> Figure:
        """Draw the federation's label shares, per-label dispersion and I^2 with intervals.

        The picture of :mod:`fa_hetdp.protocol.label_picture` (made for a label-histogram
        summary; with another summary the first panel shows the coordinate means: pass
        ``quantity``). Needs matplotlib (``pip install "fa-hetdp[plots]"``).

        Parameters
        ----------
        path : path, optional
            Also write the figure there (PNG, SVG or PDF from the suffix), atomically.
        level : float, default 0.95
            Coverage of the intervals.
        names : sequence of str, optional
            One name per label (default ``0 .. d-1``).
        quantity : str, default "label share"
            What the first panel's values are.

        Returns
        -------
        matplotlib.figure.Figure

        Raises
        ------
        InputDataError
            If the result carries no plan (no intervals) or lacks a statistic it shows.
        ImportError
            If matplotlib is not installed.
        """
        from fa_hetdp.protocol.label_picture import (  # it reads this module
            draw_picture,
            label_picture,
            save_figure_atomic,
        )

        figure = draw_picture(label_picture(self, level=level, names=names, quantity=quantity))
        if path is not None:
            save_figure_atomic(figure, path)
        return figure

    @property
    def guarantee(self) -> Guarantee:
        """What this result guarantees: dp, (epsilon, delta), unit of privacy, adversary.

        :func:`fa_hetdp.protocol.guarantee.guarantee_of` of the plan and the privacy spent
        (no ``epsilon`` for a setting that is not DP).

        Raises
        ------
        InputDataError
            If the result does not carry its plan.
        """
        if self.plan is None:
            raise InputDataError("this result carries no plan; its guarantee needs the plan.")
        return guarantee_of(self.plan, self.spent)

    def summary(self) -> dict[str, float]:
        """Coordinate averages of the statistics and the privacy spent.

        Returns
        -------
        dict[str, float]
            ``mean, dispersion, weighted_mean, q, i2`` (and ``i2_extra``), ``epsilon_spent``
            and ``delta_spent`` (one valid pair; left out when the setting is not DP), ``n``,
            ``d``.
        """
        out = coordinate_averages(self)
        if self.spent.epsilon is not None and self.spent.delta is not None:
            out["epsilon_spent"] = float(self.spent.epsilon)
            out["delta_spent"] = float(self.spent.delta)
        out["n"] = float(self.n)
        out["d"] = float(self.d)
        out["total_dispersion"] = float(self.total_dispersion)
        out["i2_total"] = float(self.i2_total)
        return out


def scalar_summaries(
    dispersion: FloatArray, q: FloatArray, n: int
) -> tuple[FloatArray, FloatArray]:
    """Return ``sum_j D''_j`` and ``max(0, 1 - (n - 1) d / sum_j Q''_j)`` over the last axis.

    The second is ``I^2`` (Def. 3.12) of the coordinate-averaged ``Q''`` (post-processing).
    """
    total = np.asarray(np.sum(dispersion, axis=-1), dtype=np.float64)
    q_mean = np.mean(q, axis=-1)
    i2 = np.where(np.isnan(q_mean), np.nan, i_squared(q_mean, n))  # NaN when Q'' not released
    return total, np.asarray(i2, dtype=np.float64)


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


@dataclass(frozen=True)
class Stage1Estimates:
    """Stage-1 post-processing of one or many noisy sums (leading axes ``...``).

    Attributes
    ----------
    mu_prime, mu_prime_broadcast, weighted_mu_prime, a : FloatArray, shape (..., d)
        ``mu'``, the dispersion centre (``clip(mu', 0, 1)`` or the optimal one), ``mu_bar'``
        and ``A'``.
    b, b_used : FloatArray, shape (...)
        ``B'`` and ``max(B', n w_min)``.
    b_clamped : numpy.ndarray of bool, shape (...)
        Whether ``B' < n w_min``.
    """

    mu_prime: FloatArray
    mu_prime_broadcast: FloatArray
    weighted_mu_prime: FloatArray
    a: FloatArray
    b: FloatArray
    b_used: FloatArray
    b_clamped: npt.NDArray[np.bool_]


@dataclass(frozen=True)
class Stage2Estimates:
    """Stage-2 post-processing of one or many noisy sums (leading axes ``...``).

    Attributes
    ----------
    dispersion, q, i2 : FloatArray, shape (..., d)
        ``D''``, ``Q''`` and ``I2''``.
    """

    dispersion: FloatArray
    q: FloatArray
    i2: FloatArray


def estimate_stage1(noisy_sum: FloatArray, plan: ProtocolPlan, *, n: int) -> Stage1Estimates:
    """``mu'`` and ``mu_bar'`` from noisy stage-1 sums of shape ``(..., 2d + 1)``.

    Parameters
    ----------
    noisy_sum : FloatArray, shape (..., 2d + 1)
        Noisy sums ``sum_i [x_i, w_i x_i, w_i] + noise`` (any leading repeat axes).
    plan : ProtocolPlan
        The plan (layout, ``w_min``).
    n : int
        Clients whose values are in the sums.

    Returns
    -------
    Stage1Estimates
    """
    layout = plan.layout(1)
    d = plan.d
    mu_prime = layout.take(noisy_sum, "mean") / n  # Thm 3.3 (fixed): (sum x_i + noise) / n
    weighted = layout.take(noisy_sum, "weighted")
    a = weighted[..., :d]
    b = np.asarray(weighted[..., d], dtype=np.float64)
    b_low = n * plan.min_weight  # public: every w_i >= w_min
    b_used = np.asarray(np.maximum(b, b_low), dtype=np.float64)
    weighted_mu = np.clip(a / b_used[..., None], 0.0, 1.0)  # Lemma 3.7: A'/B', clipped
    return Stage1Estimates(
        mu_prime=mu_prime,
        mu_prime_broadcast=dispersion_center(np.clip(mu_prime, 0.0, 1.0), plan),
        weighted_mu_prime=weighted_mu,
        a=a,
        b=b,
        b_used=b_used,
        b_clamped=np.asarray(b < b_low),
    )


def estimate_stage2(
    noisy_sum: FloatArray,
    plan: ProtocolPlan,
    *,
    n: int,
    stage1: Stage1Estimates | Stage1Release | None = None,
) -> Stage2Estimates:
    """``D''``, ``Q''`` and ``I2''`` from noisy stage-2 sums of shape ``(..., 2d)``.

    Parameters
    ----------
    noisy_sum : FloatArray, shape (..., 2d)
        Noisy sums ``sum_i [(x_i - mu')^2, w_i (x_i - mu_bar')^2] + noise``.
    plan : ProtocolPlan
        The plan (layout).
    n : int
        Clients whose values are in the sums.
    stage1 : Stage1Estimates or Stage1Release, optional
        ``mu'`` and the centre ``a`` the sums used; needed with ``dispersion_center =
        "optimal"`` (``D''`` subtracts ``(clip(mu') - a)^2``).

    Returns
    -------
    Stage2Estimates
    """
    layout = plan.layout(2)
    dispersion = layout.take(noisy_sum, "dispersion") / n  # Thm 3.3: D''
    if plan.config.dispersion_center == "optimal":  # sum (x - a)^2/n = D + (mu - a)^2
        if stage1 is None:
            raise InputDataError("dispersion_center='optimal' needs the stage-1 estimates.")
        dispersion = dispersion - center_correction(stage1.mu_prime, stage1.mu_prime_broadcast)
    q = layout.take(noisy_sum, "q").copy()  # Thm 3.8: Q'' (a sum)
    i2 = i_squared(q, n)  # Thm 3.13: I2'' = max(0, 1 - (n-1)/Q''); Q'' <= 0 gives 0
    return Stage2Estimates(dispersion=dispersion, q=q, i2=i2)


def server_noise(
    plan: ProtocolPlan,
    stage: Stage,
    shape: int | tuple[int, ...],
    *,
    rng: np.random.Generator,
    broadcast: Broadcast | None = None,
) -> FloatArray:
    """Draw the server's central noise for stage ``stage`` (scale ``sigma`` per block).

    ``shape`` ends with the stage length; leading axes are repeats. Stage 2 takes the public
    ``broadcast`` (:meth:`ProtocolPlan.stage2_sigmas`).
    """
    return plan.mechanism.sample(plan.sigma_vector(stage, broadcast), shape, rng=rng)


def extra_i2_noise(i2: FloatArray, plan: ProtocolPlan, *, rng: np.random.Generator) -> FloatArray:
    """``I2''' = I2'' + noise of scale sigma_5`` (Thm 3.13's option; buys no privacy)."""
    out: FloatArray = i2 + plan.mechanism.sample(plan.sigma_i2, i2.shape, rng=rng)
    return out


def privacy_spent_of(
    plan: ProtocolPlan, fraction1: float, fraction2: float, fraction0: float = 1.0
) -> PrivacySpent:
    """Privacy spent when fractions ``fraction1``/``fraction2`` of the noise arrived.

    ``fraction0`` is the stage-0 histogram's (``adaptive_floor``); it counts like the others.
    """
    fractions = {"mean": fraction1, "weighted": fraction1, "dispersion": fraction2, "q": fraction2}
    made = {k: v for k, v in fractions.items() if k in plan.releases}  # needed releases only
    if plan.adaptive:
        made[FLOOR_RELEASE] = fraction0
    return privacy_spent(plan.budget, made)


def assemble_floor(
    noisy_histogram: npt.ArrayLike,
    plan: ProtocolPlan,
    *,
    noise_shares: int,
    rng: np.random.Generator,
    n: int | None = None,
) -> tuple[FloorChoice, ProtocolPlan]:
    """Choose the adaptive floor from the unmasked stage-0 histogram and plan stages 1-2.

    Parameters
    ----------
    noisy_histogram : array_like, shape (K + 1,)
        ``sum_i onehot(bucket(s_i^2))`` plus the arrived noise shares (distributed), or the
        noiseless sum (central: the server adds ``sigma_0`` noise here).
    plan : ProtocolPlan
        The stage-0 plan (``adaptive_floor``, no floor yet).
    noise_shares : int
        Noise shares in the sum (distributed placement).
    rng : numpy.random.Generator
        Server noise (central placement only).
    n : int, optional
        Clients whose one-hot vectors are in the sum (default ``plan.n``; fewer after
        dropouts). The plan of stages 1-2 keeps ``plan.n``.

    Returns
    -------
    tuple of (FloorChoice, ProtocolPlan)
        The choice (:func:`~fa_hetdp.protocol.floor.choose_floor`, public) and the plan of
        stages 1 and 2 with ``W = 1/floor``.
    """
    if not plan.adaptive:
        raise InputDataError("the plan has no adaptive floor (ProtocolConfig.adaptive_floor).")
    edges = plan.floor_edges
    h = _check_sum("floor histogram", noisy_histogram, len(edges) + 1)
    in_sum, shares = _check_arrivals(plan, plan.n if n is None else n, noise_shares)
    if plan.config.placement == "central":
        h = h + plan.mechanism.sample(plan.floor_sigma, h.shape, rng=rng)
        sigma = plan.floor_sigma
    else:  # the noise that arrived: shares of scale sigma_0/sqrt(t)
        sigma = plan.floor_share_std * math.sqrt(shares)
    choice = choose_floor(
        h,
        n=in_sum,
        edges=edges,
        sigma=sigma,
        quantile=plan.config.floor_quantile,
    )
    after = plan_protocol(plan.config, n=plan.n, d=plan.d, floor=float(choice.floor))
    return choice, after


def result_labels(
    plan: ProtocolPlan, spent: PrivacySpent, clamped: bool, extra: tuple[str, ...] = ()
) -> tuple[str, ...]:
    """Return the plan's labels plus the run's caveats (degraded noise, clamped ``B'``)."""
    labels = list(plan.labels)
    if spent.degraded and spent.epsilon is not None and spent.delta is not None:
        full = privacy_spent(plan.budget).epsilon
        than = "" if full is None else f", more than eps={full:.4g} with all shares"
        labels.append(
            f"degraded: noise shares missing; privacy spent eps={spent.epsilon:.4g} at "
            f"delta={spent.delta:.3g}{than}"
        )
    if clamped and "weighted" in plan.releases:
        labels.append("weighted mean: B' fell below its public lower bound n*w_min and was clamped")
    labels.extend(extra)
    return tuple(labels)


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
        noiseless sum (central: the server adds the plan's noise of scale ``sigma`` here,
        drawn from ``rng``).
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
    if plan.config.placement == "central":
        s = s + server_noise(plan, 1, plan.stage1_length, rng=rng)
    est = estimate_stage1(s, plan, n=n)
    return Stage1Release(
        mu_prime=est.mu_prime,
        mu_prime_broadcast=est.mu_prime_broadcast,
        weighted_mu_prime=est.weighted_mu_prime,
        a=est.a,
        b=float(est.b),
        b_used=float(est.b_used),
        b_clamped=bool(est.b_clamped),
        n=n,
        noise_shares=shares,
        noise_fraction=plan.noise_fraction(shares),
    )


def assemble_stage2(
    noisy_sum: npt.ArrayLike,
    plan: ProtocolPlan,
    stage1: Stage1Release,
    *,
    n: int,
    noise_shares: int,
    rng: np.random.Generator,
    floor_fraction: float = 1.0,
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
    floor_fraction : float, default 1.0
        Noise fraction of the stage-0 histogram that arrived (``adaptive_floor``).

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
    broadcast = (stage1.mu_prime_broadcast, stage1.weighted_mu_prime)
    if plan.config.placement == "central":
        s = s + server_noise(plan, 2, plan.stage2_length, rng=rng, broadcast=broadcast)
    est = estimate_stage2(s, plan, n=n, stage1=stage1)
    i2_extra: FloatArray | None = None
    if "i2_extra" in plan.releases:
        i2_extra = extra_i2_noise(est.i2, plan, rng=rng)
    spent = privacy_spent_of(
        plan, stage1.noise_fraction, plan.noise_fraction(shares), floor_fraction
    )
    total, i2_total = scalar_summaries(
        plan.released("dispersion", est.dispersion), plan.released("q", est.q), n
    )
    return PrivateStatistics(
        mean=plan.released("mean", stage1.mu_prime),
        dispersion=plan.released("dispersion", est.dispersion),
        weighted_mean=plan.released("weighted_mean", stage1.weighted_mu_prime),
        q=plan.released("q", est.q),
        i2=plan.released("i2", est.i2),
        i2_extra=i2_extra,
        sigmas=plan.sigmas_at(broadcast),
        stage2_sigmas={
            k: v for k, v in plan.stage2_sigmas(*broadcast).items() if k in plan.releases
        },
        spent=spent,
        labels=result_labels(plan, spent, stage1.b_clamped),
        n=n,
        d=plan.d,
        placement=plan.config.placement,
        mu_prime_broadcast=stage1.mu_prime_broadcast,
        weighted_denominator_clamped=stage1.b_clamped,
        noise_shares=(stage1.noise_shares, shares),
        weighted_denominator=stage1.b_used,
        total_dispersion=float(total),
        i2_total=float(i2_total),
        plan=plan,
    )
