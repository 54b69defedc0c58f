"""The private meta-analysis in process, in either design.

Secure sums: every client runs :mod:`fa_hetdp.protocol.meta_client` on its own records, the
secure sum is the plain sum of their messages (what secure aggregation reveals), and the server
runs :mod:`fa_hetdp.protocol.meta_server`. Silo summaries: every silo releases its own noisy
summaries (:func:`fa_hetdp.protocol.silo_summaries.release_silo`) and the server analyses them.
The Flower app drives the same functions over the wire. ``design = "auto"`` is chosen above
this layer, by the planner (:func:`fa_hetdp.accuracy.meta_design.choose_design`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from fa_hetdp.errors import PrivacyParameterError
from fa_hetdp.protocol.meta_client import (
    BroadcastB,
    BroadcastC,
    ClientSummary,
    client_round,
)
from fa_hetdp.protocol.meta_plan import (
    UNIT_REQUIRED,
    MetaPlan,
    MetaSettings,
    plan_meta,
    settings_from,
)
from fa_hetdp.protocol.meta_server import (
    PrivateMetaAnalysis,
    add_central_noise,
    assemble_result,
    assemble_round_a,
    assemble_round_b,
    round_sigmas,
    split_round,
)
from fa_hetdp.protocol.silo_summaries import (
    SiloPlan,
    assemble_silo_result,
    plan_silo_summaries,
    release_silo,
)
from fa_hetdp.protocol.simulate import as_generator
from fa_hetdp.stats.meta import check_meta_input, client_summaries

__all__ = [
    "clients_of",
    "plan_design",
    "private_meta_analysis",
    "run_design",
    "run_rounds",
    "run_silo_summaries",
]


def plan_design(
    epsilon: float,
    delta: float,
    records_per_client: Any,
    d: int,
    settings: MetaSettings,
) -> MetaPlan | SiloPlan:
    """Calibrate the design ``settings.design`` names (``"auto"`` must be chosen before).

    Raises
    ------
    PrivacyParameterError
        ``design = "auto"`` (the planner chooses it, a layer above), or what the design's own
        planner refuses.
    """
    if settings.design == "auto":
        raise PrivacyParameterError(
            "design='auto' is chosen by the planner (fa_hetdp.private_meta_analysis, "
            "fa_hetdp.accuracy.meta_design.choose_design); here name 'silo-summaries' or "
            "'secure-sums'."
        )
    if settings.design == "silo-summaries":
        return plan_silo_summaries(epsilon, delta, records_per_client, d, settings)
    return plan_meta(epsilon, delta, records_per_client, d, settings)


def run_silo_summaries(
    plan: SiloPlan, clients: list[ClientSummary], rng: np.random.Generator
) -> PrivateMetaAnalysis:
    """Every silo releases its own noisy summaries; the server analyses them."""
    releases = [release_silo(plan, i, c, rng) for i, c in enumerate(clients)]
    return assemble_silo_result(plan, releases)


def run_design(
    plan: MetaPlan | SiloPlan, clients: list[ClientSummary], rng: np.random.Generator
) -> PrivateMetaAnalysis:
    """Run the plan's design for the clients' summaries."""
    if isinstance(plan, SiloPlan):
        return run_silo_summaries(plan, clients, rng)
    return run_rounds(plan, clients, rng)


def clients_of(
    records: npt.ArrayLike, client_ids: npt.ArrayLike, *, one_hot: bool = False
) -> list[ClientSummary]:
    """Every client's summary of its own records (checked as the exact analysis checks them)."""
    x, ids, n = check_meta_input(records, client_ids, one_hot=one_hot)
    summ = client_summaries(x, ids, n)
    sq = np.zeros((n, x.shape[1]))
    np.add.at(sq, ids, x * x)
    return [
        ClientSummary(theta=summ.theta[i], ss=summ.ss[i], sq=sq[i], m=int(summ.m[i]))
        for i in range(n)
    ]


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
    tau2, random-effects mean, the scalar I^2), ``(epsilon, delta)``-DP under exact Gaussian
    composition, in the design ``settings["design"]`` names: ``"secure-sums"`` (three rounds of
    noisy secure sums, :mod:`fa_hetdp.protocol.meta_plan`) or ``"silo-summaries"``
    (:mod:`fa_hetdp.protocol.silo_summaries`). ``"auto"`` is chosen by the planner:
    :func:`fa_hetdp.private_meta_analysis` (the public function) does that, this one refuses it.

    Parameters
    ----------
    records, client_ids : array_like
        As :func:`fa_hetdp.meta_analysis`. The record counts ``m_i`` are public.
    epsilon, delta : float
        The budget of the whole analysis.
    rng : numpy.random.Generator, int or None
        The noise generator (None: a CSPRNG; an int: a seeded generator, for tests).
    **settings
        :class:`~fa_hetdp.protocol.meta_plan.MetaSettings`: ``privacy_unit`` (required:
        :data:`~fa_hetdp.protocol.meta_plan.UNIT_REQUIRED`), ``min_records``, ``kappa``,
        ``kappa_star``, ``adaptive_kappa``,
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
    if "privacy_unit" not in settings:
        raise PrivacyParameterError(UNIT_REQUIRED)
    s = settings_from(**settings)
    clients = clients_of(records, client_ids, one_hot=s.one_hot)
    counts = [c.m for c in clients]
    plan = plan_design(epsilon, delta, counts, clients[0].theta.shape[0], s)
    return run_design(plan, clients, as_generator(rng))
