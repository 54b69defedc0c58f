"""``private_meta_analysis``: the three rounds of the private meta-analysis, in process.

Every client runs :mod:`fa_hetdp.protocol.meta_client` on its own records, the secure sum is
the plain sum of their messages (what secure aggregation reveals), and the server runs
:mod:`fa_hetdp.protocol.meta_server`; the Flower app drives the same functions over the wire.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from fa_hetdp.protocol.meta_client import (
    BroadcastB,
    BroadcastC,
    ClientSummary,
    client_round,
)
from fa_hetdp.protocol.meta_plan import MetaPlan, plan_meta, settings_from
from fa_hetdp.protocol.meta_server import (
    PrivateMetaAnalysis,
    add_central_noise,
    assemble_result,
    assemble_round_a,
    assemble_round_b,
    round_sigmas,
    split_round,
)
from fa_hetdp.protocol.simulate import as_generator
from fa_hetdp.stats.meta import check_meta_input, client_summaries

__all__ = ["private_meta_analysis", "run_rounds"]


def run_rounds(
    plan: MetaPlan, clients: list[ClientSummary], rng: np.random.Generator
) -> PrivateMetaAnalysis:
    """Run rounds A, B (and C when the plan needs it) for the clients' summaries."""

    def secure_sum(rnd: str, broadcast: BroadcastB | BroadcastC | None) -> dict[str, Any]:
        sigmas = round_sigmas(plan, rnd, broadcast)
        total = np.sum(
            [client_round(plan, c, rnd, broadcast, sigmas, rng) for c in clients], axis=0
        )
        return split_round(plan, rnd, add_central_noise(plan, sigmas, total, rng))

    sums_a = secure_sum("A", None)
    broadcast_b = assemble_round_a(plan, np.concatenate(list(sums_a.values())))
    sums_b_all = secure_sum("B", broadcast_b)
    sums_b, broadcast_c = assemble_round_b(
        plan, broadcast_b, np.concatenate(list(sums_b_all.values()))
    )
    if "E" not in plan.releases:
        return assemble_result(plan, broadcast_b, sums_a, sums_b, None, None)
    sums_c = secure_sum("C", broadcast_c)
    return assemble_result(plan, broadcast_b, sums_a, sums_b, broadcast_c, sums_c)


def private_meta_analysis(
    records: npt.ArrayLike,
    client_ids: npt.ArrayLike,
    *,
    epsilon: float,
    delta: float,
    rng: np.random.Generator | int | None = None,
    **settings: Any,
) -> PrivateMetaAnalysis:
    """Differentially private inverse-variance meta-analysis of the clients' coordinate means.

    The figures of :func:`fa_hetdp.meta_analysis` (fixed-effect mean, Q, I^2, DerSimonian-Laird
    tau2, random-effects mean, the scalar I^2) from three rounds of noisy secure sums
    (:mod:`fa_hetdp.protocol.meta_plan`), ``(epsilon, delta)``-DP under exact Gaussian
    composition.

    Parameters
    ----------
    records, client_ids : array_like
        As :func:`fa_hetdp.meta_analysis`. The record counts ``m_i`` are public.
    epsilon, delta : float
        The budget of the whole analysis.
    rng : numpy.random.Generator, int or None
        The noise generator (None: a CSPRNG; an int: a seeded generator, for tests).
    **settings
        :class:`~fa_hetdp.protocol.meta_plan.MetaSettings`: ``privacy_unit`` (default
        ``"record"`` here -- one record of one client; the project-wide default elsewhere is
        ``"client"``), ``min_records``, ``kappa``, ``kappa_star``, ``adaptive_kappa``,
        ``floor_fraction``, ``min_floor``, ``placement``, ``corrupt_fraction``,
        ``mechanism``, ``statistics``, ``noise_shape``, ``one_hot``, ``weights``, ``noise``
        (False: no noise, a reference run that states no epsilon).

    Returns
    -------
    PrivateMetaAnalysis

    Raises
    ------
    InputDataError
        Malformed records or ids (one line, what is wrong and what is allowed).
    PrivacyParameterError
        A bad budget or setting.
    """
    s = settings_from(**settings)
    x, ids, n = check_meta_input(records, client_ids, one_hot=s.one_hot)
    summ = client_summaries(x, ids, n)
    sq = np.zeros((n, x.shape[1]))
    np.add.at(sq, ids, x * x)
    clients = [
        ClientSummary(theta=summ.theta[i], ss=summ.ss[i], sq=sq[i], m=int(summ.m[i]))
        for i in range(n)
    ]
    plan = plan_meta(epsilon, delta, summ.m, x.shape[1], s)
    return run_rounds(plan, clients, as_generator(rng))
