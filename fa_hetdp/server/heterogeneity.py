"""The paper's heterogeneity measurement over Flower: stages (0,) 1 and 2 of a session.

After the key advertisement (:mod:`fa_hetdp.server.strategy`), :class:`HeterogeneityAnalysis`
runs the two-stage protocol (docs/design.md, "The private protocol"; Thm 3.3, 3.8, 3.13) on
the session's secure sums (:meth:`fa_hetdp.server.session.AnalysisSession.secure_sum`), with
the server functions the in-process engine uses (:mod:`fa_hetdp.protocol.server`):

1. (``adaptive_floor`` only) ``stage0_input`` / ``stage0_unmask``: a noisy histogram of the
   ``s_i^2`` picks the floor (:func:`fa_hetdp.protocol.assemble_floor`);
2. ``stage1_input`` / ``stage1_unmask``: masked ``[x, w x, w]`` + noise shares; the server
   assembles ``mu'``, ``mu_bar'`` (:func:`fa_hetdp.protocol.assemble_stage1`);
3. ``stage2_input`` / ``stage2_unmask``: with the broadcast ``clip(mu')``, ``mu_bar'``: masked
   ``[(x - mu')^2, w (x - mu_bar')^2]`` + noise shares; ``D''``, ``Q''``, ``I2''``, ``I2'''``
   (:func:`fa_hetdp.protocol.assemble_stage2`).

A client that drops before sending a masked input loses its noise share: the privacy actually
spent is computed from the shares that reached the sum
(:meth:`fa_hetdp.protocol.ProtocolPlan.noise_fraction`) under exact composition, and a release
that would spend more than ``max-epsilon`` is refused unless ``on-degraded = "release"``. The
decision is taken once the survivor list is fixed and *before* the unmasking is asked for
(``admit`` of :meth:`~fa_hetdp.server.session.AnalysisSession.secure_sum`): a refused sum is
never decoded, so the server never holds a sum worth more than the run charged. The
``privacy`` part (:func:`server.results.privacy_section`) says what was released and what it
cost, also for an abort after stage 1.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from fa_hetdp.accuracy.assumptions import scenario_assumptions
from fa_hetdp.config.protocol import ProtocolConfig
from fa_hetdp.errors import AggregationError, PrivacyParameterError
from fa_hetdp.flowerkit.steps import STAGE_SUMS, Event, Key
from fa_hetdp.protocol.client import contribution_encoding
from fa_hetdp.protocol.floor import FloorChoice, uses_adaptive_floor
from fa_hetdp.protocol.plan import Broadcast, ProtocolPlan, SumStage, plan_protocol
from fa_hetdp.protocol.server import (
    PrivateStatistics,
    Stage1Release,
    assemble_floor,
    assemble_stage1,
    assemble_stage2,
    privacy_spent_of,
)
from fa_hetdp.protocol.sum_range import check_sum_range
from fa_hetdp.registry import STATISTICS, value_of
from fa_hetdp.report.results import sigmas_section, statistics_section
from fa_hetdp.secagg.encoding import FixedPointEncoding
from fa_hetdp.server.analysis import Analysis
from fa_hetdp.server.results import (
    degraded_refusal,
    floor_section,
    privacy_section,
    secagg_section,
    simulation_caveats,
)
from fa_hetdp.server.session import AnalysisSession, SecureSum

__all__ = ["HeterogeneityAnalysis"]

_SPENT_KEYS = frozenset({"epsilon_spent", "delta_spent"})


def _floats(values: np.ndarray) -> list[float]:
    return [float(v) for v in np.asarray(values, dtype=np.float64).ravel()]


class HeterogeneityAnalysis(Analysis):
    """The paper's statistics (``analysis = "heterogeneity"``): stages (0,) 1 and 2."""

    def __init__(self) -> None:
        self.plan: ProtocolPlan | None = None
        """The calibrated plan, once ``n`` and ``d`` are known (after stage 0: its floor)."""
        self._stage1_fraction: float | None = None
        self._floor_fraction: float | None = None  # adaptive_floor: stage 0's noise fraction
        self._floor: FloorChoice | None = None
        self._stage0: list[int] | None = None  # adaptive_floor: partitions in the stage-0 sum

    def summations(self, protocol: ProtocolConfig) -> int:
        """Stages 1 and 2, and stage 0 with the adaptive floor."""
        return 3 if uses_adaptive_floor(protocol) else 2

    def _privacy(self, session: AnalysisSession, released: Sequence[str]) -> dict[str, Any]:
        """Return the ``privacy`` part of an unfinished run: what went out so far, its cost."""
        plan = self.plan
        if plan is None:  # pragma: no cover - recorded only once planned
            raise RuntimeError("no plan yet")
        return privacy_section(
            plan,
            None,
            released=released,
            stage1_fraction=self._stage1_fraction,
            floor_fraction=self._floor_fraction,
            secagg=session.settings.secagg_parameters(),
            caveats=simulation_caveats(session.settings),
        )

    def _encoding(
        self,
        session: AnalysisSession,
        plan: ProtocolPlan,
        stage: SumStage,
        broadcast: Broadcast | None = None,
    ) -> FixedPointEncoding:
        # The contributions in Z_2^m: a ddg/skellam run's lattice integers (protocol.client).
        bits = session.settings.modulus_bits
        return contribution_encoding(plan, stage, session.n, modulus_bits=bits, broadcast=broadcast)

    def _sum(
        self,
        session: AnalysisSession,
        stage: SumStage,
        encoding: FixedPointEncoding,
        request: Mapping[str, Any] | None = None,
        *,
        spent: Callable[[float], float | None],
        what: str,
    ) -> SecureSum:
        """One stage's secure sum, refused outside the range honest inputs reach.

        ``spent(fraction)``: the epsilon of the whole run if this stage's sum holds
        ``fraction`` of its planned noise; the run's degraded-release policy
        (:func:`degraded_refusal`) is applied to it *before* the unmasking, from the number of
        masked inputs that reached the sum, so a sum it refuses is never decoded.
        """
        plan = self.plan
        if plan is None:  # run() plans before the first sum
            raise AggregationError("a secure sum was asked for before the run was planned")

        def admit(survivors: int) -> str | None:
            return degraded_refusal(session.settings, spent(plan.noise_fraction(survivors)), what)

        total = session.secure_sum(STAGE_SUMS[stage], encoding, request, admit=admit)
        # once more on the inputs the decoded sum holds (a client dropped for cause at the
        # unmasking leaves it): the sum stays with the server, nothing of it is released
        if (refused := admit(len(total.survivors))) is not None:
            raise session.abort(refused)
        if self.plan is not None:  # the plan's tighter range (protocol.sum_range)
            check_sum_range(total.sum, self.plan, stage, len(total.survivors), encoding)
        return total

    def run(self, session: AnalysisSession) -> dict[str, Any]:
        """Run stages (0,) 1 and 2 after the key advertisement; write and return the result."""
        s = session.settings
        n, d = session.n, session.d
        plan = plan_protocol(s.protocol, n=n, d=d)
        if (problem := plan.encoding_problem(s.modulus_bits)) is not None:
            raise PrivacyParameterError(problem)  # a share that rounds to 0: abort, nothing sent
        self.plan = plan
        session.record(lambda released: self._privacy(session, released))  # nothing out yet

        # stage 0 (adaptive_floor): a noisy histogram of the s_i^2 picks the floor ----------
        floor: dict[str, float] = {}
        if plan.adaptive:
            plan0 = plan
            sum0 = self._sum(
                session, 0, self._encoding(session, plan, 0),
                spent=lambda f: privacy_spent_of(plan0, 1.0, 1.0, f).epsilon, what="stage 0",
            )  # fmt: skip
            n0 = len(sum0.survivors)
            self._floor_fraction = plan.noise_fraction(n0)
            self._stage0 = list(sum0.partitions)
            self._floor, plan = assemble_floor(
                sum0.sum, plan, noise_shares=n0, rng=session.rng, n=n0
            )
            self.plan, floor = plan, {Key.FLOOR: float(self._floor.floor)}
            v_floor = floor[Key.FLOOR]
            session.release(f"stage 0: noisy s_i^2 histogram; v_floor={v_floor:.4g} sent")
        fraction0 = 1.0 if self._floor_fraction is None else self._floor_fraction

        # stage 1 ---------------------------------------------------------------------------
        plan1 = plan
        sum1 = self._sum(
            session, 1, self._encoding(session, plan, 1), floor,
            spent=lambda f: privacy_spent_of(plan1, f, 1.0, fraction0).epsilon, what="stage 1",
        )  # fmt: skip
        n1 = len(sum1.survivors)
        stage1 = assemble_stage1(sum1.sum, plan, n=n1, noise_shares=n1, rng=session.rng)
        self._stage1_fraction = stage1.noise_fraction
        session.release(
            f"stage 1: mu', mu_bar' broadcast to the {len(session.active)} remaining clients"
        )
        session.progress(Event.STAGE1, clients=n1)

        # stage 2 ---------------------------------------------------------------------------
        broadcast = (stage1.mu_prime_broadcast, stage1.weighted_mu_prime)
        request = {
            Key.MU_PRIME: stage1.mu_prime_broadcast,
            Key.WEIGHTED_MU_PRIME: stage1.weighted_mu_prime,
        }
        fraction1 = stage1.noise_fraction
        sum2 = self._sum(
            session, 2, self._encoding(session, plan, 2, broadcast), request,
            spent=lambda f: privacy_spent_of(plan1, fraction1, f, fraction0).epsilon,
            what="the stage-2 release",
        )  # fmt: skip
        n2 = len(sum2.survivors)
        result = assemble_stage2(
            sum2.sum, plan, stage1, n=n2, noise_shares=n2, rng=session.rng,
            floor_fraction=fraction0,
        )  # fmt: skip
        result = dataclasses.replace(result, floor_choice=self._floor)
        released = [*session.released, "stage 2: every statistic of the result"]
        document = self._document(session, plan, stage1, result, sum1, sum2, released)
        return session.finish(document, result)

    def _document(
        self,
        session: AnalysisSession,
        plan: ProtocolPlan,
        stage1: Stage1Release,
        result: PrivateStatistics,
        sum1: SecureSum,
        sum2: SecureSum,
        released: Sequence[str],
    ) -> dict[str, Any]:
        settings = session.settings
        secagg = settings.secagg_parameters()
        privacy = privacy_section(
            plan,
            result.spent,
            released=released,
            secagg=secagg,
            caveats=simulation_caveats(settings),
        )
        statistics: dict[str, list[float] | None] = {}
        for spec in STATISTICS:  # the table of statistics: key -> per-coordinate values
            values = value_of(result, spec.key)  # a derived one from its source
            statistics[spec.key] = None if values is None else _floats(values)
        return {
            "status": "success",
            "differentially_private": privacy["differentially_private"],
            **session.base_document(),
            "secagg": secagg_section(settings, plan, stage1),  # with the ring's words
            "n": plan.n,
            "d": plan.d,
            "min_honest_clients": plan.t,
            "clients_in_sum": {"stage1": len(sum1.survivors), "stage2": len(sum2.survivors)},
            "partitions_in_sum": {
                **({} if self._stage0 is None else {"stage0": self._stage0}),
                "stage1": list(sum1.partitions),
                "stage2": list(sum2.partitions),
            },
            "noise_shares": {"stage1": result.noise_shares[0], "stage2": result.noise_shares[1]},
            "statistics": statistics,
            "released": statistics_section(  # intervals, noise, flags, the plan before the run
                result, plan, assumptions=scenario_assumptions(settings.scenario)
            ),
            "summary": {  # the privacy spent is in "privacy", stated so that it holds
                k: v for k, v in result.summary().items() if k not in _SPENT_KEYS
            },
            **sigmas_section(result),  # "sigmas" and the per-coordinate "stage2_sigmas"
            "privacy": privacy,
            "labels": list(result.labels),
            "adaptive_floor": floor_section(plan, self._floor),  # cost: privacy.per_release
            "weighted_denominator_clamped": stage1.b_clamped,
            "encoding_error_bound": {
                "stage1": _floats(sum1.max_error),
                "stage2": _floats(sum2.max_error),
            },
        }
