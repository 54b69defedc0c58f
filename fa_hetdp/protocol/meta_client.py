"""A client's side of the private meta-analysis: its round vectors and its noise share.

A client summarises its own records once (:func:`summarise`: mean, sum of squared deviations,
count per coordinate) and answers each round with a vector of ``len(ROUNDS[r]) * d`` values,
one ``d``-block per release in the order of :data:`~fa_hetdp.protocol.meta_plan.ROUNDS`
(blocks of releases the plan does not make are 0), plus, with the distributed placement, its
noise share (:func:`noise_share`). The formulas are those of :mod:`fa_hetdp.protocol.meta_plan`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from fa_hetdp._types import FloatArray
from fa_hetdp.errors import InputDataError
from fa_hetdp.protocol.meta_plan import ROUNDS, MetaPlan, own_variance, silo_kappa

__all__ = [
    "BroadcastB",
    "BroadcastC",
    "ClientSummary",
    "client_round",
    "noise_share",
    "round_a_values",
    "round_b_values",
    "round_c_values",
    "summarise",
]


@dataclass(frozen=True)
class ClientSummary:
    """One client's summary of its records (kept by the client)."""

    theta: FloatArray  # (d,) mean
    ss: FloatArray  # (d,) sum of squared deviations from the mean
    sq: FloatArray  # (d,) sum of squares
    m: int

    @property
    def s2(self) -> FloatArray:
        """Sample variance (``ddof = 1``)."""
        return np.asarray(self.ss / (self.m - 1))


@dataclass(frozen=True)
class BroadcastB:
    """What the server broadcasts after round A: centre, floor, clip and pilot ratio.

    Centre ``c``, floor ``f``, clip ``kappa`` and the pilot ratio ``rho`` (None: 0): client
    ``i`` clips at :func:`~fa_hetdp.protocol.meta_plan.silo_kappa` ``(kappa, rho, m_i, f)``.

    ``spread`` (the pooled within-variance ``sigma^2``, server side only; clients ignore it)
    gives the plug-in weights of :func:`fa_hetdp.protocol.meta_server.figures_from_sums`.
    """

    centre: FloatArray
    floor: FloatArray
    kappa: FloatArray
    spread: FloatArray | None = None
    rho: FloatArray | None = None


@dataclass(frozen=True)
class BroadcastC:
    """What the server broadcasts after round B: also ``tau2`` and the clip ``kappa*``."""

    centre: FloatArray
    floor: FloatArray
    tau2: FloatArray
    kappa_star: FloatArray
    spread: FloatArray | None = None


def summarise(records: npt.ArrayLike) -> ClientSummary:
    """Summarise one client's ``(m, d)`` records in ``[0, 1]`` (``m >= 2``)."""
    x = np.asarray(records, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] < 2 or not np.all(np.isfinite(x)):
        raise InputDataError(
            f"a client's records must be a finite (m, d) array with m >= 2, got shape {x.shape}."
        )
    if np.any(x < 0.0) or np.any(x > 1.0):
        raise InputDataError("a client's records must lie in [0, 1].")
    theta = x.mean(axis=0)
    dev = x - theta
    return ClientSummary(
        theta=theta, ss=(dev * dev).sum(axis=0), sq=(x * x).sum(axis=0), m=int(x.shape[0])
    )


def _blocks(plan: MetaPlan, rnd: str, values: dict[str, FloatArray]) -> FloatArray:
    made = plan.releases
    return np.concatenate(
        [values[r] if r in made else np.zeros(plan.d) for r in ROUNDS[rnd]]
    ).astype(np.float64)


def pooled_variance(broadcast: BroadcastB | BroadcastC) -> FloatArray:
    """Return the variance a pooled weight ``m_i/v`` divides by: ``v = max(sigma^2, f)``.

    ``sigma^2`` round A's pooled within-variance as broadcast (``spread``; the floor where none
    was kept), ``f`` the floor: the weight of a silo that weighs by the pooled variance
    (:func:`variance_used`), and the server's plug-in weights.
    """
    spread = broadcast.floor if broadcast.spread is None else broadcast.spread
    return np.asarray(np.maximum(spread, broadcast.floor))


def variance_used(
    plan: MetaPlan, summary: ClientSummary, broadcast: BroadcastB | BroadcastC
) -> FloatArray:
    """Return the within-variance a silo weighs by in rounds B and C, per coordinate.

    Its own, floored (``max(s^2, f)``), where :func:`~fa_hetdp.protocol.meta_plan.own_variance`
    allows (always without public counts or without ``public_small_silo_weights``); elsewhere
    round A's pooled within-variance ``max(sigma^2, f)`` (the broadcast ``spread``), a public
    weight.

    Raises
    ------
    InputDataError
        A silo weighs by the pooled variance and the broadcast carries none.
    """
    floor = broadcast.floor
    own = np.maximum(summary.s2, floor)
    if not plan.settings.pooled_small_silos:
        return np.asarray(own)
    mine = own_variance(summary.m, floor)
    if np.all(mine):  # a large silo: its own variance, whatever the broadcast
        return np.asarray(own)
    if broadcast.spread is None:
        raise InputDataError(
            "the broadcast carries no pooled within-variance (spread), which a silo of "
            f"{summary.m} records weighs by"
        )
    return np.asarray(np.where(mine, own, pooled_variance(broadcast)))


def round_a_values(plan: MetaPlan, summary: ClientSummary) -> FloatArray:
    """Round A: ``[T | U | W]`` summands: ``sum_k x``, ``sum_k x^2``, ``SS``."""
    t = summary.theta * summary.m
    return _blocks(plan, "A", {"T": t, "U": summary.sq, "W": summary.ss})


def round_b_values(plan: MetaPlan, summary: ClientSummary, broadcast: BroadcastB) -> FloatArray:
    """Round B: ``[A | B | C | D]`` summands ``z^2``, ``sqrt(w) z``, ``w``, ``w^2``.

    ``z`` is clipped at the client's own ``kappa_i`` (:func:`silo_kappa` of the broadcast).
    """
    s2 = variance_used(plan, summary, broadcast)
    w = summary.m / s2
    root = np.sqrt(w)
    kappa = silo_kappa(broadcast.kappa, broadcast.rho, summary.m, broadcast.floor)
    z = np.clip((summary.theta - broadcast.centre) * root, -kappa, kappa)
    return _blocks(plan, "B", {"A": z * z, "B": root * z, "C": w, "D": w * w})


def round_c_values(plan: MetaPlan, summary: ClientSummary, broadcast: BroadcastC) -> FloatArray:
    """Round C: ``[E | F]`` summands ``sqrt(w*) u`` and ``w*`` (clipped ``u``)."""
    s2 = variance_used(plan, summary, broadcast)
    w = 1.0 / (s2 / summary.m + broadcast.tau2)
    root = np.sqrt(w)
    u = np.clip(
        (summary.theta - broadcast.centre) * root, -broadcast.kappa_star, broadcast.kappa_star
    )
    return _blocks(plan, "C", {"E": root * u, "F": w})


def noise_share(
    plan: MetaPlan, rnd: str, sigmas: FloatArray, rng: np.random.Generator
) -> FloatArray:
    """One client's noise share for round ``rnd`` given the round's per-release sigmas.

    ``sigmas`` is the round vector of the releases' calibrated ``sigma`` (the server's
    :func:`~fa_hetdp.protocol.meta_server.round_sigmas`); each of the ``n`` clients adds
    ``sigma/sqrt(t)`` (the total over ``t`` honest shares is ``sigma``). Zeros for the
    central placement.
    """
    share = plan.share_std(np.asarray(sigmas, dtype=np.float64))
    if not np.any(share > 0):
        return np.zeros(share.shape)
    return plan.mechanism.sample(share, share.shape, rng=rng)


def client_round(
    plan: MetaPlan,
    summary: ClientSummary,
    rnd: str,
    broadcast: BroadcastB | BroadcastC | None,
    sigmas: FloatArray,
    rng: np.random.Generator,
) -> FloatArray:
    """Return a client's message of round ``rnd``: its values plus its noise share."""
    if rnd == "A":
        values = round_a_values(plan, summary)
    elif rnd == "B" and isinstance(broadcast, BroadcastB):
        values = round_b_values(plan, summary, broadcast)
    elif rnd == "C" and isinstance(broadcast, BroadcastC):
        values = round_c_values(plan, summary, broadcast)
    else:
        raise InputDataError(f"round {rnd!r} with broadcast {type(broadcast).__name__}")
    return values + noise_share(plan, rnd, sigmas, rng)
