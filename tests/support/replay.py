"""The in-process twin of a seeded Flower run, for checking simulations and test deployments.

Test support code (``tests/support``): the Flower tests compare a run with it; it is not part
of the library or its wheel.

A run with ``mode = "simulation"`` is reproducible: client ``i`` draws from
``SeedSequence(seed, spawn_key=(i,))`` (its noise share, then the stochastic rounding of the
fixed-point encoding, first in stage 1 then in stage 2) and the server from
``spawn_key=(SERVER_STREAM,)``. :func:`reference_statistics` replays the same protocol with
the :mod:`fa_hetdp.protocol` functions and the same generators, but with plain float sums
instead of secure aggregation. A Flower run and its twin agree up to the fixed-point
encoding error (``encoding_error_bound`` in the result file: at most ``n / scale`` per
coordinate of each sum).

Which clients are in each sum is an input (from the run's result file), so runs with
dropouts can be replayed: ``stage1`` lists the partition ids whose stage-1 input entered the
sum, ``stage2`` those of stage 2. With ``adaptive_floor`` the stage-0 histogram comes first
(every stage-1 client is taken to be in it), and stages 1-2 use the floor chosen from it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from fa_hetdp._types import FloatArray
from fa_hetdp.config.protocol import ProtocolConfig
from fa_hetdp.dp.rng import simulation_generator
from fa_hetdp.errors import InputDataError
from fa_hetdp.flowerkit.settings import SERVER_STREAM
from fa_hetdp.protocol.client import (
    local_values,
    stage1_contribution,
    stage2_contribution,
    stage_lattice,
)
from fa_hetdp.protocol.floor import floor_contribution
from fa_hetdp.protocol.plan import plan_protocol
from fa_hetdp.protocol.server import (
    PrivateStatistics,
    assemble_floor,
    assemble_stage1,
    assemble_stage2,
)

__all__ = ["reference_statistics"]


def reference_statistics(
    x: FloatArray,
    config: ProtocolConfig,
    *,
    seed: int,
    session_size: int | None = None,
    stage0: Sequence[int] | None = None,
    stage1: Sequence[int] | None = None,
    stage2: Sequence[int] | None = None,
    modulus_bits: int = 64,
    broadcast: tuple[FloatArray, FloatArray] | None = None,
) -> PrivateStatistics:
    """Replay a seeded run in process (plain sums instead of secure aggregation).

    Parameters
    ----------
    x : FloatArray, shape (num_partitions, d)
        Every partition's vector (row ``i`` is partition ``i``).
    config : ProtocolConfig
        The run's privacy settings.
    seed : int
        The run's seed.
    session_size : int or None
        ``n`` of the plan (clients invited to the session); default: all rows.
    stage0 : sequence of int or None
        ``adaptive_floor``: partition ids in the stage-0 histogram's sum (a client that drops
        out in stage 1 is in it); default: the stage-1 set.
    stage1, stage2 : sequence of int or None
        Partition ids in the stage-1 / stage-2 sums; default: all rows / the stage-1 set.
    modulus_bits : {64, 32}
        The run's ring ``Z_2^m`` (``secagg.modulus_bits`` of its result): a ``ddg``/``skellam``
        client's lattice, hence its draws, depend on it.
    broadcast : (mu_prime_broadcast, weighted_mu_prime) or None
        The run's own stage-1 broadcast: stage 2 is replayed from it instead of from the
        twin's stage 1 (compare stage 1 on its own). The stage-2 noise scales follow the
        broadcast, and a ``ddg``/``skellam`` sampler's draws are not continuous in their
        scale: the encoding error of the run's stage-1 sum (below 1e-8) can change every
        draw after one coordinate. Default: the twin's own stage 1.

    Returns
    -------
    PrivateStatistics
        What the Flower run computes, without the encoding error.
    """
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2:
        raise InputDataError(f"x must have shape (n, d), got shape {x.shape}.")
    n_rows, d = x.shape
    in1 = sorted(range(n_rows) if stage1 is None else {int(i) for i in stage1})
    in2 = sorted(in1 if stage2 is None else {int(i) for i in stage2})
    in0 = in1 if stage0 is None else sorted({int(i) for i in stage0})
    if not set(in2) <= set(in1) <= set(in0):
        raise InputDataError(
            "stage-2 clients must be a subset of stage 1's, and those of stage 0's."
        )
    n = n_rows if session_size is None else int(session_size)
    plan = plan_protocol(config, n=n, d=d)
    server_rng = np.random.Generator(
        np.random.PCG64(np.random.SeedSequence(seed, spawn_key=(SERVER_STREAM,)))
    )
    rngs = {i: simulation_generator(seed, i) for i in in0}
    floor_fraction = 1.0
    if plan.adaptive:  # stage 0: the histogram of the s_i^2, then the plan at its floor
        size = plan.floor_edges.size + 1
        total0 = np.zeros(size)
        lattice0 = stage_lattice(plan, 0, modulus_bits=modulus_bits)
        for i in in0:
            valid = local_values(x[i], variance_floor=config.variance_floor).x
            total0 += floor_contribution(
                valid,
                plan.floor_edges,
                plan.floor_share_std,
                mechanism=plan.mechanism,
                rng=rngs[i],
                lattice=lattice0,
            )
            rngs[i].random(size)  # the stochastic rounding draws of the encoding
        floor_fraction = plan.noise_fraction(len(in0))
        _, plan = assemble_floor(total0, plan, noise_shares=len(in0), rng=server_rng, n=len(in0))
    local = {i: local_values(x[i], variance_floor=plan.variance_floor) for i in in1}

    total1 = np.zeros(plan.stage1_length)
    for i in in1:
        total1 += stage1_contribution(local[i], plan, rng=rngs[i], modulus_bits=modulus_bits)
        rngs[i].random(plan.stage1_length)  # the stochastic rounding draws of the encoding
    release1 = assemble_stage1(total1, plan, n=len(in1), noise_shares=len(in1), rng=server_rng)
    if broadcast is not None:
        release1 = dataclasses.replace(
            release1,
            mu_prime_broadcast=np.asarray(broadcast[0], dtype=np.float64),
            weighted_mu_prime=np.asarray(broadcast[1], dtype=np.float64),
        )

    total2 = np.zeros(plan.stage2_length)
    for i in in2:
        total2 += stage2_contribution(
            local[i],
            plan,
            release1.mu_prime_broadcast,
            release1.weighted_mu_prime,
            rng=rngs[i],
            modulus_bits=modulus_bits,
        )
    return assemble_stage2(
        total2,
        plan,
        release1,
        n=len(in2),
        noise_shares=len(in2),
        rng=server_rng,
        floor_fraction=floor_fraction,
    )
