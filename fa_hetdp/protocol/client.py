"""The client's part of the protocol: local values and the two stage contributions.

Stage 1: ``[x_i, w_i x_i, w_i]`` (Thm 3.3, Lemma 3.7); stage 2:
``[(x_i - mu')^2, w_i (x_i - mu_bar')^2]`` (Thm 3.3, Thm 3.8), each plus the client's noise
share (distributed placement) drawn through the plan's mechanism. The block layout is
:mod:`fa_hetdp.protocol.layout`.

Discrete mechanisms (``"ddg"``, ``"skellam"``): :func:`stage_lattice` chooses the public
lattice of a stage's contributions from the plan, the ring and (stage 2) the broadcast, the
same at both ends; a client's contribution is ``gamma (R(v/gamma) + Z)``
(:meth:`~fa_hetdp.dp.mechanisms.NoiseMechanism.add_share`) and
:func:`contribution_encoding` encodes it at scale ``1/gamma``, so the masked words are the
integers ``R + Z mod 2^m`` (:mod:`fa_hetdp.dp.lattice`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from fa_hetdp._types import FloatArray
from fa_hetdp.dp.lattice import Lattice
from fa_hetdp.errors import InputDataError, PrivacyParameterError
from fa_hetdp.protocol.plan import (
    ENCODING_FAILURE_PROBABILITY,
    Broadcast,
    ProtocolPlan,
    SumStage,
)
from fa_hetdp.secagg.encoding import FixedPointEncoding, choose_encoding
from fa_hetdp.stats.exact import client_weights, validate_client_vector

__all__ = [
    "LocalValues",
    "contribution_encoding",
    "local_values",
    "stage1_contribution",
    "stage2_contribution",
    "stage_lattice",
]


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


def stage_lattice(
    plan: ProtocolPlan,
    stage: SumStage,
    *,
    modulus_bits: int = 64,
    broadcast: Broadcast | None = None,
) -> Lattice | None:
    """Return the stage's lattice (``None``: not a distributed discrete run).

    From public values only: the share scales (stage 2 at the ``broadcast``; stage 0, the
    floor histogram, at :attr:`~ProtocolPlan.floor_share_std` per bucket), the
    contributions' bounds, the session size ``plan.n`` and the ring ``Z_2^modulus_bits``;
    the ring holds the sum of ``plan.n`` contributions except with probability
    :data:`~fa_hetdp.dp.lattice.DEFAULT_WRAP_PROBABILITY`
    (:attr:`~fa_hetdp.dp.lattice.Lattice.wrap_probability`). The accounting's move bound
    ``beta`` is the contribution bound (1 for the ``"paper"`` profile, whose sensitivities
    drop ``W``; the histogram's 0/1).

    Raises
    ------
    PrivacyParameterError
        If the ring cannot hold the sum at an admissible step
        (:func:`~fa_hetdp.dp.lattice.choose_lattice`).
    """
    if plan.config.placement != "distributed" or (stage == 0 and not plan.adaptive):
        return None
    bounds = plan.contribution_bounds(stage)
    move = np.minimum(bounds, 1.0) if plan.config.profile == "paper" else bounds
    if stage == 0:
        scale = np.full(bounds.size, plan.floor_share_std)
    else:
        scale = plan.share_std_vector(stage, broadcast)
    return plan.mechanism.choose_lattice(
        scale,
        bounds,
        n=plan.n,
        modulus_bits=modulus_bits,
        failure_probability=ENCODING_FAILURE_PROBABILITY,
        move_bound=move,
    )


def contribution_encoding(
    plan: ProtocolPlan,
    stage: SumStage,
    n: int,
    *,
    modulus_bits: int = 64,
    broadcast: Broadcast | None = None,
) -> FixedPointEncoding:
    """Return the fixed-point encoding of the stage's contributions in ``Z_2^modulus_bits``.

    On a :func:`stage_lattice`: scales ``1/gamma``, each client's stated bounds and the
    bound on the sum of ``n`` (``lattice=True``: exact; the ring is sized by the sum's noise
    tail, not by ``n`` clients' tails); stage 1 also checks stage 2's lattice at the broadcast
    ``c = 1/2`` (the smallest share scales), so a ring too small refuses before any value
    is sent. Otherwise the stated bound is the contribution's bound plus the
    share's tail bound of the plan's mechanism, at the largest safe power-of-two scales
    (:func:`~fa_hetdp.secagg.encoding.choose_encoding`).
    """
    lattice = stage_lattice(plan, stage, modulus_bits=modulus_bits, broadcast=broadcast)
    if lattice is not None and stage == 1:  # refuse before anything is sent: stage 2 at the
        half = np.full(plan.d, 0.5)  # broadcast c = 1/2, its smallest share scales
        stage_lattice(plan, 2, modulus_bits=modulus_bits, broadcast=(half, half))
    if lattice is None:
        return choose_encoding(
            n,
            plan.contribution_bounds(stage),
            noise_std=plan.share_tail_bounds(stage),
            noise_tail=1.0,  # the tail is already in the bound
            modulus_bits=modulus_bits,
        )
    if n > lattice.n:
        raise PrivacyParameterError(
            f"an encoding for n={n} summands exceeds the lattice's n={lattice.n} (plan.n): "
            "its sum bound holds for at most plan.n shares."
        )
    return FixedPointEncoding(
        scales=1.0 / lattice.gamma,
        bounds=lattice.bounds,
        max_clients=n,
        modulus_bits=modulus_bits,
        lattice=True,
        sum_bounds=lattice.sum_bounds,
    )


def stage1_contribution(
    local: LocalValues,
    plan: ProtocolPlan,
    *,
    rng: np.random.Generator,
    modulus_bits: int = 64,
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
    modulus_bits : int
        The ring of the sum (sets a discrete mechanism's lattice, :func:`stage_lattice`).

    Returns
    -------
    FloatArray, shape (2d + 1,)
        ``[x_i, w_i x_i, w_i]`` (Thm 3.3, Lemma 3.7) plus the plan's noise share (scale
        ``sigma_k/sqrt(t)`` per block) for distributed placement (no noise for central placement).
        Blocks of releases the plan does not make are exactly 0 (no data, no noise).
    """
    _check_local(local, plan)
    out = plan.zero_unmade(1, np.concatenate([local.x, local.weight * local.x, [local.weight]]))
    if plan.config.placement == "distributed":
        lattice = stage_lattice(plan, 1, modulus_bits=modulus_bits)
        out = plan.mechanism.add_share(out, plan.share_std_vector(1), rng=rng, lattice=lattice)
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
    modulus_bits: int = 64,
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
    modulus_bits : int
        The ring of the sum (sets a discrete mechanism's lattice, :func:`stage_lattice`).

    Returns
    -------
    FloatArray, shape (2d,)
        Thm 3.3 / Thm 3.8 summands plus the plan's noise share (scale ``sigma_k/sqrt(t)``
        per block, ``sigma_k`` from :meth:`ProtocolPlan.stage2_sigmas` at the broadcast;
        distributed only). Blocks of releases the plan does not make are exactly 0.

    Raises
    ------
    InputDataError
        If a broadcast value has the wrong shape or lies outside ``[0, 1]``.
    """
    _check_local(local, plan)
    m = _check_broadcast("mu_prime", mu_prime, plan.d)
    mb = _check_broadcast("weighted_mu_prime", weighted_mu_prime, plan.d)
    out = plan.zero_unmade(
        2, np.concatenate([(local.x - m) ** 2, local.weight * (local.x - mb) ** 2])
    )
    if plan.config.placement == "distributed":
        # The share's scale follows the public broadcast (ProtocolPlan.stage2_factors).
        share = plan.share_std_vector(2, (m, mb))
        lattice = stage_lattice(plan, 2, modulus_bits=modulus_bits, broadcast=(m, mb))
        out = plan.mechanism.add_share(out, share, rng=rng, lattice=lattice)
    return out
