"""The protocol run in process: one measurement and many, vectorised (Alg. 3.1).

:func:`private_statistics` runs both stages once; :func:`private_statistics_batch` repeats
them ``repeats`` times on the same data for the experiment engine. Both compute the noiseless
sums from one pass over the data (:class:`~fa_hetdp.stats.exact.TrueStatistics`), draw the
noise through the plan's mechanism and post-process with the server's own functions
(:func:`~fa_hetdp.protocol.server.estimate_stage1`,
:func:`~fa_hetdp.protocol.server.estimate_stage2`, vectorised over the repeat axis), so every
formula has one implementation.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from fa_hetdp._types import Composition, FloatArray, Mechanism, Placement, Profile
from fa_hetdp.config.center import DispersionCenter
from fa_hetdp.config.noise import NoiseShape
from fa_hetdp.config.protocol import ProtocolConfig
from fa_hetdp.dp.accounting import PrivacySpent
from fa_hetdp.errors import PrivacyParameterError
from fa_hetdp.protocol.floor import FloorChoice, choose_floor, histogram_of
from fa_hetdp.protocol.layout import Stage
from fa_hetdp.protocol.plan import Broadcast, ProtocolPlan, _choice, _count, plan_protocol
from fa_hetdp.protocol.recommended import recommended_config
from fa_hetdp.protocol.server import (
    PrivateStatistics,
    assemble_floor,
    assemble_stage1,
    assemble_stage2,
    estimate_stage1,
    estimate_stage2,
    extra_i2_noise,
    privacy_spent_of,
    result_labels,
    scalar_summaries,
)
from fa_hetdp.stats.exact import (
    TrueStatistics,
    coordinate_averages,
    statistics_of_validated,
    validate_clients,
)

__all__ = [
    "BatchResult",
    "NoiseDraw",
    "as_generator",
    "noiseless_stage1",
    "noiseless_stage2",
    "private_statistics",
    "private_statistics_batch",
]

NoiseDraw = Literal["summed", "per_client"]
"""How the batch path draws distributed noise: one summed draw or ``n`` shares summed."""


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
        ],
        axis=-1,
    )


def _run_protocol(
    truth: TrueStatistics,
    plan: ProtocolPlan,
    *,
    stage1_noise: FloatArray | None,
    stage2_noise: FloatArray | Callable[[Broadcast], FloatArray] | None,
    rng: np.random.Generator,
) -> PrivateStatistics:
    """Both stages in process with given summed client noise (None: central placement).

    ``stage2_noise`` may be a function of the public broadcast: the stage-2 noise scale
    follows it (:meth:`ProtocolPlan.stage2_sigmas`), so it is drawn after stage 1.

    The noiseless sums come from one pass over the data (:class:`TrueStatistics`) and the
    identities of :func:`_stage2_sums`; the server functions are the ones the Flower server
    calls.
    """
    n = truth.n
    shares = n if plan.config.placement == "distributed" else 0
    s1 = plan.zero_unmade(1, _stage1_sums(truth))
    if stage1_noise is not None:
        s1 = s1 + stage1_noise
    st1 = assemble_stage1(s1, plan, n=n, noise_shares=shares, rng=rng)
    broadcast = (st1.mu_prime_broadcast, st1.weighted_mu_prime)
    s2 = plan.zero_unmade(2, _stage2_sums(truth, *broadcast))
    if stage2_noise is not None:
        s2 = s2 + (stage2_noise(broadcast) if callable(stage2_noise) else stage2_noise)
    result = assemble_stage2(s2, plan, st1, n=n, noise_shares=shares, rng=rng)
    return replace(result, n_clipped=truth.n_clipped, n_at_floor=truth.n_at_floor)


def as_generator(rng: np.random.Generator | int | None) -> np.random.Generator:
    """Return the noise generator the Python API was given (see :func:`private_statistics`).

    A Generator as it is; an int ``>= 0`` as ``numpy.random.default_rng(rng)``; None as a
    fresh CSPRNG-backed generator (:func:`fa_hetdp.dp.rng.csprng_generator`).

    Raises
    ------
    PrivacyParameterError
        Anything else (a negative int, a bool, a float, a legacy ``RandomState``).
    """
    if isinstance(rng, np.random.Generator):
        return rng
    if rng is None:
        from fa_hetdp.dp.rng import csprng_generator

        return csprng_generator()
    if isinstance(rng, (int, np.integer)) and not isinstance(rng, bool) and rng >= 0:
        return np.random.default_rng(int(rng))
    raise PrivacyParameterError(
        f"rng must be a numpy.random.Generator, an int seed >= 0, or None (a CSPRNG), got {rng!r}"
    )


def private_statistics(
    x: npt.ArrayLike,
    *,
    epsilon: float,
    delta: float,
    mechanism: Mechanism | None = None,
    placement: Placement | None = None,
    composition: Composition | None = None,
    profile: Profile | None = None,
    variance_floor: float | None = None,
    extra_i2_noise: bool | None = None,
    min_honest_clients: int | None = None,
    corrupt_fraction: float | None = None,
    statistics: tuple[str, ...] | None = None,
    broadcast_bounds: bool | None = None,
    adaptive_floor: bool | None = None,
    floor_quantile: float | None = None,
    noise_shape: NoiseShape | None = None,
    dispersion_center: DispersionCenter | None = None,
    rng: np.random.Generator | int | None = None,
    records_per_client: npt.ArrayLike | None = None,
    **extra: Any,
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
extra_i2_noise, min_honest_clients, corrupt_fraction, statistics, broadcast_bounds, \
floor_quantile, noise_shape, dispersion_center
        See :class:`ProtocolConfig` (``corrupt_fraction``: the fraction ``gamma`` of clients
        that may collude with the server; the noise is then calibrated to the
        ``n - ceil(gamma n)`` honest shares, and the result's
        :attr:`~PrivateStatistics.guarantee` names that adversary); left out (None), the
        recommended settings apply (:func:`fa_hetdp.protocol.recommended.recommended_config`),
        so ``private_statistics(x, epsilon=..., delta=..., rng=...)`` runs what the project
        recommends, and what :func:`fa_hetdp.plan_accuracy` plans when given nothing else.
    adaptive_floor : bool, optional
        The adaptive variance floor (:mod:`fa_hetdp.protocol.floor`). Left out (None): on --
        part of the recommended settings, :class:`ProtocolConfig`'s defaults
        (``benchmarks/README.md``: on all 1797 digits clients it cuts the error of ``mu_bar'``
        and ``Q''`` several-fold). The same holds for
        ``noise_shape = "per_coordinate"`` (on unless ``broadcast_bounds`` is off or the
        mechanism is discrete) and ``dispersion_center = "optimal"`` (on unless
        ``broadcast_bounds`` is off).
    rng : numpy.random.Generator, int or None
        Source of all noise: a Generator, or an int seed (``numpy.random.default_rng(seed)``,
        for reproducible simulations); left out, a CSPRNG-backed generator
        (:func:`fa_hetdp.dp.rng.csprng_generator`: AES-256-CTR keyed from ``os.urandom``), as
        a real release needs.
    records_per_client : array_like of int, optional
        ``(n,)``: how many records each client's vector averages. Required under
        ``privacy_unit = "record"`` (the record-level bounds assume every client holds at
        least ``min_records``; a vector alone cannot show it, so it is checked here and a
        shortfall refused); not used under the client unit.
    **extra
        Any other declared setting (:data:`fa_hetdp.config.settings.SETTINGS`) without a
        :class:`ProtocolConfig` field; it reaches :meth:`ProtocolConfig.setting`. An
        undeclared name is refused (:class:`~fa_hetdp.config.rules.ConfigError`).

    Returns
    -------
    PrivateStatistics
        ``mu', D'', mu_bar', Q'', I2'', I2'''`` and the scalars ``total_dispersion``,
        ``i2_total``, with sigmas, privacy spent, labels and the plan (for
        :meth:`~PrivateStatistics.confidence_intervals`).
    """
    config = recommended_config(
        epsilon=epsilon,
        delta=delta,
        mechanism=mechanism,
        placement=placement,
        composition=composition,
        profile=profile,
        variance_floor=variance_floor,
        extra_i2_noise=extra_i2_noise,
        min_honest_clients=min_honest_clients,
        corrupt_fraction=corrupt_fraction,
        statistics=statistics,
        broadcast_bounds=broadcast_bounds,
        adaptive_floor=adaptive_floor,
        floor_quantile=floor_quantile,
        noise_shape=noise_shape,
        dispersion_center=dispersion_center,
        **extra,
    )
    rng = as_generator(rng)
    values, n_clipped = validate_clients(x)
    n, d = values.shape
    check_record_counts(config, records_per_client, n)
    plan = plan_protocol(config, n=n, d=d)
    choice: FloorChoice | None = None
    if plan.adaptive:  # stage 0: the noisy histogram of the s_i^2 picks the floor
        hist = histogram_of(values, plan.floor_edges)
        if config.placement == "distributed":
            hist = hist + plan.mechanism.sample(plan.floor_noise_std, hist.shape, rng=rng)
        choice, plan = assemble_floor(hist, plan, noise_shares=n, rng=rng)
    truth = statistics_of_validated(values, n_clipped=n_clipped, variance_floor=plan.variance_floor)
    del values
    result = _private_run(truth, plan, rng=rng)
    return replace(result, floor_choice=choice)


def check_record_counts(config: ProtocolConfig, counts: npt.ArrayLike | None, n: int) -> None:
    """Refuse a record-level run whose clients' record counts are not shown to meet the bound.

    Raises
    ------
    PrivacyParameterError
        ``privacy_unit = "record"`` without ``records_per_client``, with counts of the wrong
        shape or kind, or with a client below ``min_records``.
    """
    if config.setting("privacy_unit") != "record":
        return
    floor = config.setting("min_records")
    if counts is None:
        raise PrivacyParameterError(
            "private_statistics(privacy_unit='record') needs records_per_client=: each client's "
            f"record count, checked against min_records={floor} (a client's vector alone cannot "
            "show how many records it averages, and the record-level bound assumes it)"
        )
    m = np.asarray(counts)
    if m.shape != (n,) or not np.issubdtype(m.dtype, np.integer):
        raise PrivacyParameterError(
            f"records_per_client must be {n} integers (one per client), got shape {m.shape} "
            f"of {m.dtype}"
        )
    short = int(np.sum(m < floor))
    if short:
        raise PrivacyParameterError(
            f"{short} of {n} clients hold fewer than min_records={floor} records (smallest: "
            f"{int(m.min())}): the record-level guarantee does not hold for them; lower "
            "min_records or leave them out"
        )


def _private_run(
    truth: TrueStatistics, plan: ProtocolPlan, *, rng: np.random.Generator
) -> PrivateStatistics:
    """Stages 1 and 2 in process under ``plan`` (summed noise for the distributed placement)."""
    if plan.config.placement == "central":
        return _run_protocol(truth, plan, stage1_noise=None, stage2_noise=None, rng=rng)
    # One draw of the summed shares per stage (same distribution; KS-tested); the stage-2
    # scale follows the broadcast, so that draw waits for stage 1.
    noise1 = plan.mechanism.sample(plan.noise_std_vector(1), plan.stage1_length, rng=rng)

    def noise2(broadcast: Broadcast) -> FloatArray:
        scale = plan.noise_std_vector(2, broadcast)
        return plan.mechanism.sample(scale, plan.stage2_length, rng=rng)

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
    total_dispersion, i2_total : FloatArray, shape (repeats,)
        ``sum_j D''_j`` and ``max(0, 1 - (n - 1) d / sum_j Q''_j)`` of each repeat.
    floor_choice : FloorChoice or None
        With ``adaptive_floor``: each repeat's floor and noisy histogram (shape
        ``(repeats, ...)``). ``plan`` and ``sigmas`` are then those of the most frequent
        floor, and ``truth`` is the exact statistics at ``v_min`` (what the user asked about).
    center : FloatArray or None, shape (repeats, d)
        Each repeat's dispersion centre (``dispersion_center = "optimal"``), else None.
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
    total_dispersion: FloatArray
    i2_total: FloatArray
    floor_choice: FloorChoice | None = None
    center: FloatArray | None = None

    @property
    def n(self) -> int:
        """Number of clients (of the data measured)."""
        return self.truth.n

    @property
    def repeats(self) -> int:
        """Number of repeats (the leading axis)."""
        return int(self.mean.shape[0])

    @property
    def mu_prime_broadcast(self) -> FloatArray:
        """Each repeat's dispersion centre, shape ``(repeats, d)``.

        ``clip(mu', 0, 1)`` or the optimal centre
        (:func:`~fa_hetdp.protocol.center.dispersion_center`).
        """
        return np.clip(self.mean, 0.0, 1.0) if self.center is None else self.center

    def summary(self) -> dict[str, float]:
        """Averages over repeats and coordinates of every private statistic.

        Returns
        -------
        dict[str, float]
            ``mean, dispersion, weighted_mean, q, i2`` (and ``i2_extra``), ``repeats``,
            ``epsilon_spent`` and ``delta_spent`` (one valid pair, left out when the setting
            is not DP), ``fraction_clamped``.
        """
        out = coordinate_averages(self)
        out["repeats"] = float(self.repeats)
        if self.spent.epsilon is not None and self.spent.delta is not None:
            out["epsilon_spent"] = float(self.spent.epsilon)
            out["delta_spent"] = float(self.spent.delta)
        out["fraction_clamped"] = float(np.mean(self.weighted_denominator_clamped))
        return out


def _summed_noise(
    plan: ProtocolPlan,
    stage: Stage,
    repeats: int,
    noise_draw: NoiseDraw,
    rng: np.random.Generator,
    broadcast: Broadcast | None = None,
) -> FloatArray:
    """Total noise of stage ``stage`` per repeat, shape ``(repeats, stage length)``.

    Stage 2 takes each repeat's public ``broadcast`` (shape ``(repeats, d)`` each).
    """
    total = plan.layout(stage).length
    if noise_draw == "per_client" and plan.config.placement == "distributed":
        share = np.broadcast_to(plan.share_std_vector(stage, broadcast), (repeats, total))
        out = np.empty((repeats, total))
        for r in range(repeats):
            out[r] = plan.mechanism.sample(share[r], (plan.n, total), rng=rng).sum(axis=0)
        return out
    scale = plan.noise_std_vector(stage, broadcast)
    return plan.mechanism.sample(scale, (repeats, total), rng=rng)


def private_statistics_batch(
    x: npt.ArrayLike,
    config: ProtocolConfig,
    *,
    repeats: int,
    rng: np.random.Generator | int | None = None,
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
    rng : numpy.random.Generator, int or None
        Source of all noise, as in :func:`private_statistics` (left out: a CSPRNG).
    noise_draw : {"summed", "per_client"}
        How distributed noise is drawn (same distribution).

    Returns
    -------
    BatchResult
        Arrays with a leading repeat axis, the truth, sigmas, privacy spent and labels.
    """
    repeats = _count("repeats", repeats, 1)
    _choice("noise_draw", noise_draw, ("summed", "per_client"))
    rng = as_generator(rng)
    values, n_clipped = validate_clients(x)
    n, d = values.shape
    plan = plan_protocol(config, n=n, d=d)
    truth = statistics_of_validated(
        values, n_clipped=n_clipped, variance_floor=config.variance_floor
    )
    if not plan.adaptive:
        del values
        return _batch(truth, plan, repeats, noise_draw, rng)
    # Stage 0 per repeat, then stages 1-2 grouped by the chosen floor (few distinct edges).
    edges = plan.floor_edges
    hist = histogram_of(values, edges)
    if config.placement == "central" or noise_draw == "summed":
        hist = hist + plan.mechanism.sample(plan.floor_noise_std, (repeats, hist.size), rng=rng)
    else:
        share = plan.floor_share_std
        for_each = [plan.mechanism.sample(share, (n, hist.size), rng=rng) for _ in range(repeats)]
        hist = hist + np.stack([z.sum(axis=0) for z in for_each])
    choice = choose_floor(
        hist, n=n, edges=edges, sigma=plan.floor_noise_std, quantile=config.floor_quantile
    )
    parts: list[tuple[npt.NDArray[np.intp], BatchResult]] = []
    for index in np.unique(choice.index):
        rows = np.flatnonzero(choice.index == index)
        floor = float(edges[index])
        sub_plan = plan_protocol(config, n=n, d=d, floor=floor)
        sub_truth = statistics_of_validated(values, n_clipped=n_clipped, variance_floor=floor)
        parts.append((rows, _batch(sub_truth, sub_plan, rows.size, noise_draw, rng)))
    return _merge(parts, repeats, truth, choice)


def _merge(
    parts: list[tuple[npt.NDArray[np.intp], BatchResult]],
    repeats: int,
    truth: TrueStatistics,
    choice: FloorChoice,
) -> BatchResult:
    """One :class:`BatchResult` from per-floor groups of repeats (rows in repeat order)."""
    _, main = max(parts, key=lambda p: p[0].size)
    arrays: dict[str, Any] = {}
    for name in (
        "mean", "dispersion", "weighted_mean", "q", "i2", "i2_extra",
        "weighted_denominator_clamped", "weighted_denominator", "total_dispersion", "i2_total",
        "center",
    ):  # fmt: skip
        first = getattr(main, name)
        if first is None:
            arrays[name] = None
            continue
        out = np.empty((repeats, *np.shape(first)[1:]), dtype=np.asarray(first).dtype)
        for rows, part in parts:
            out[rows] = getattr(part, name)
        arrays[name] = out
    floors = ", ".join(f"{float(p.plan.variance_floor):.4g} ({rows.size})" for rows, p in parts)
    labels = (*main.labels, f"adaptive floor per repeat: v_floor (repeats) = {floors}")
    return replace(main, truth=truth, labels=labels, floor_choice=choice, **arrays)


def _batch(
    truth: TrueStatistics,
    plan: ProtocolPlan,
    repeats: int,
    noise_draw: NoiseDraw,
    rng: np.random.Generator,
) -> BatchResult:
    """Stages 1 and 2, ``repeats`` times, on the noiseless sums of ``truth`` under ``plan``."""
    n = truth.n
    config = plan.config
    z1 = _summed_noise(plan, 1, repeats, noise_draw, rng)
    st1 = estimate_stage1(plan.zero_unmade(1, _stage1_sums(truth)) + z1, plan, n=n)
    broadcast = (st1.mu_prime_broadcast, st1.weighted_mu_prime)
    z2 = _summed_noise(plan, 2, repeats, noise_draw, rng, broadcast)  # after stage 1
    s2 = plan.zero_unmade(2, _stage2_sums(truth, *broadcast)) + z2
    st2 = estimate_stage2(s2, plan, n=n, stage1=st1)
    i2_extra: FloatArray | None = None
    if "i2_extra" in plan.releases:
        i2_extra = extra_i2_noise(st2.i2, plan, rng=rng)  # Thm 3.13
    spent = privacy_spent_of(plan, 1.0, 1.0)
    dispersion = plan.released("dispersion", st2.dispersion)
    q = plan.released("q", st2.q)
    total, i2_total = scalar_summaries(dispersion, q, n)
    return BatchResult(
        config=config,
        plan=plan,
        truth=truth,
        mean=plan.released("mean", st1.mu_prime),
        dispersion=dispersion,
        weighted_mean=plan.released("weighted_mean", st1.weighted_mu_prime),
        q=q,
        i2=plan.released("i2", st2.i2),
        i2_extra=i2_extra,
        weighted_denominator_clamped=st1.b_clamped,
        weighted_denominator=st1.b_used,
        sigmas=plan.sigmas,
        spent=spent,
        labels=result_labels(plan, spent, bool(st1.b_clamped.any())),
        total_dispersion=total,
        i2_total=i2_total,
        center=st1.mu_prime_broadcast if config.dispersion_center == "optimal" else None,
    )
