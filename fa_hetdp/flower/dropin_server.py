"""The drop-in server side: one private heterogeneity measurement from any ``ServerApp``.

::

    @app.main()
    def main(grid, context):
        budget = fa_hetdp.PrivacyBudget(epsilon=4.0, delta=1e-5)
        before = fa_hetdp.flower.measure(grid, context, epsilon=1.0, delta=1e-6,
                                         summary="label-histogram", num_labels=10,
                                         budget=budget)
        FedAvg(...).start(grid=grid, ...)           # the user's training, unchanged
        after = fa_hetdp.flower.measure(grid, context, epsilon=1.0, delta=1e-6, budget=budget)

:func:`measure` runs the whole protocol of fa-hetdp's own ``ServerApp`` (secure aggregation
included: :class:`fa_hetdp.server.strategy.HeterogeneityStrategy` over
:class:`fa_hetdp.server.app.GridTransport`) over the grid's connected nodes, whose
``ClientApp`` called :func:`fa_hetdp.flower.register`, and returns the
:class:`~fa_hetdp.protocol.server.PrivateStatistics` (its ``guarantee`` says what the
release protects and against whom). Its messages are ``query.<step>`` messages in their own
groups, so it can run before training, between a strategy's rounds or after them on the same
grid. It writes nothing unless ``result_path`` is given.

A two-arm effect across the nodes (a trial's centres)::

        res = fa_hetdp.flower.measure(grid, context, epsilon=1.0, delta=1e-6,
                                      analysis="meta", privacy_unit="record",
                                      effect="MD", arm="treated")

with every node's ``records(context)`` returning ``(outcomes, arms)`` (:func:`fa_hetdp.flower.
register`), returns the :class:`~fa_hetdp.accuracy.columns.ColumnMetaAnalysis` that
:func:`fa_hetdp.private_meta_analysis` returns for ``arm=`` and ``effect=`` (in the silo
summaries; with ``design="secure-sums"`` an MD or RD runs in the secure sums' rounds, each
node's effect entered as one summary, as in process).
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import fa_hetdp
from fa_hetdp.errors import PrivacyParameterError
from fa_hetdp.flowerkit.measurement import SummarySpec, read_settings, settings_document
from fa_hetdp.flowerkit.settings import meta_plan, two_arm_sums, two_arm_sums_plan
from fa_hetdp.protocol.meta_plan import MetaPlan
from fa_hetdp.protocol.meta_server import PrivateMetaAnalysis
from fa_hetdp.protocol.plan import ProtocolPlan, plan_protocol
from fa_hetdp.protocol.server import PrivateStatistics

if TYPE_CHECKING:  # flwr and the ServerApp load when measure() is called (lean install)
    from flwr.app import Context
    from flwr.serverapp import Grid

    from fa_hetdp.accuracy.columns import ColumnMetaAnalysis
    from fa_hetdp.protocol.two_arm import TwoArmPlan

__all__ = ["Budget", "measure"]

log = logging.getLogger("flwr.fa_hetdp.server")


class Budget(Protocol):
    """What :func:`measure` needs of a budget (:class:`fa_hetdp.PrivacyBudget`)."""

    def charge(self, plan: ProtocolPlan | MetaPlan | TwoArmPlan) -> Any:
        """Charge one measurement's plan; raise ``PrivacyParameterError`` on an overrun."""
        ...


def measure(
    grid: Grid,
    context: Context,
    *,
    epsilon: float,
    delta: float,
    statistics: tuple[str, ...] | None = None,
    summary: str = "mean",
    budget: Budget | None = None,
    num_labels: int | None = None,
    image_shape: tuple[int, int, int] | None = None,
    num_clients: int | None = None,
    seed: int | None = None,
    result_path: str | Path | None = None,
    effect: str = "mean",
    arm: str | None = None,
    **settings: Any,
) -> PrivateStatistics | PrivateMetaAnalysis | ColumnMetaAnalysis:
    """Measure the heterogeneity of the grid's clients privately; return the result.

    Parameters
    ----------
    grid, context : flwr.serverapp.Grid, flwr.app.Context
        The ``ServerApp``'s (``@app.main()`` receives them).
    epsilon, delta : float
        This measurement's privacy budget (every release of it together).
    statistics : tuple of str, optional
        The statistics needed (``"mean"``, ``"dispersion"``, ``"weighted_mean"``, ``"q"``,
        ``"i2"``, ``"i2_extra"``); releases none of them needs are not made. Default: all.
    summary : {"mean", "label-histogram", "pooled"}
        What each client reports of its records (:mod:`fa_hetdp.data.summaries`): the mean
        of its features (feature heterogeneity), its label shares (label heterogeneity:
        needs ``num_labels`` and labels from ``records``), or the block-pooled mean (needs
        ``image_shape``).
    budget : PrivacyBudget, optional
        A budget across measurements (:class:`fa_hetdp.PrivacyBudget`): charged with this
        measurement's plan before any message is sent; an overrun raises
        :class:`~fa_hetdp.errors.PrivacyParameterError` and no client computes anything.
    num_labels, image_shape : optional
        The summary's parameters (above).
    num_clients : int, optional
        Clients to sample; default: every node connected now.
    seed : int, optional
        Simulation only: seeds every client's and the server's noise (reproducible, not
        private against whoever knows it). Left out: deployment mode, noise from a CSPRNG
        on every client and the server.
    result_path : str or Path, optional
        Also write the result file there (the JSON document of ``fa-hetdp run``).
    effect : {"mean", "MD", "SMD", "OR", "RR", "RD"}
        With ``analysis="meta"``: ``"mean"`` (default) pools each column's mean; the others
        pool a two-arm effect per node (``docs/meta-analysis.md``, "Two-arm effects"): the
        mean difference, Hedges' g, the log odds ratio, the log risk ratio or the risk
        difference of treated against control (OR, RR, RD: 0/1 outcome columns). Every node's
        ``records(context)`` then returns ``(features, arms)``, ``arms`` its records' arms,
        one 0/1 integer or boolean each (1 or ``True`` = treated); its two arm sizes are
        public, as in process. A node whose loader returns no arms, or arms other than 0/1,
        refuses at its first step and is dropped; the others go on.
        A two-arm effect needs ``analysis="meta"`` and ``privacy_unit="record"``; it runs in
        the silo-summaries design (per-arm releases; ``"auto"`` runs them and says why), or,
        for an MD or RD with ``design="secure-sums"`` named, in the secure sums' rounds with
        every node's effect entered as one summary (no ``min_records``; SMD, OR and RR are
        refused there, as in process). Either way every node's arm sizes are public and a node
        takes part only on its own consent (node config ``allow-public-arm-sizes = true``).
    arm : str, optional
        The arm indicator's name (``"treated"``): given exactly when ``effect`` compares two
        arms; the result's ``arm``.
    **settings
        Any other setting by its canonical name (``mechanism``, ``adaptive_floor``,
        ``threshold``, ``neighbours``, ``corrupt_fraction``, ``threat_model``,
        ``stage_timeout``, ``node_wait_timeout``, ``max_epsilon``, ``on_degraded``,
        ``broadcast_bounds``, ``design``, ...), checked by the same validator as a run
        config. With ``analysis="meta"``, ``design`` picks the meta-analysis' design:
        ``"auto"`` (default: the planner's choice once the nodes' public record counts are
        known), ``"silo-summaries"`` (every silo releases its own noisy summaries, one plain
        step) or ``"secure-sums"`` (rounds A, B, C); a node whose config says
        ``release-silo-summaries = false`` makes it the secure sums. The result's ``design``
        and ``labels`` say which ran and why. ``privacy_unit="record"`` with the paper's
        statistics needs ``min_records`` (the public lower bound on every node's record count
        that their noise is calibrated to); a meta-analysis publishes every node's count and
        needs none (a stated one is a bound every node checks).

    Returns
    -------
    PrivateStatistics or PrivateMetaAnalysis or ColumnMetaAnalysis
        The private statistics with their ``guarantee`` and ``spent`` privacy; with
        ``analysis="meta"`` the private meta-analysis of every client's records
        (:func:`fa_hetdp.private_meta_analysis` over Flower, in the design chosen); with a
        two-arm ``effect`` the :class:`~fa_hetdp.accuracy.columns.ColumnMetaAnalysis` whose
        ``result`` is a :class:`~fa_hetdp.protocol.two_arm.TwoArmMetaAnalysis` (the secure
        sums: the :class:`~fa_hetdp.protocol.meta_server.PrivateMetaAnalysis` of the reduced
        summaries, read through its ``reduction``; columns ``x0``, ``x1``, ...: the records'
        own ``[0, 1]`` scale), as in process.

    Raises
    ------
    ConfigError
        Bad settings (every problem, one error), before anything is sent: among them an
        unknown ``effect`` (with the allowed ones), ``arm`` without a two-arm effect or a
        two-arm effect without ``arm``, and a two-arm effect with ``design="secure-sums"``
        (SMD, OR, RR; an MD or RD with ``min_records``), the client unit or another analysis;
        ``privacy_unit="record"`` without
        ``min_records`` for the paper's statistics.
    PrivacyParameterError
        ``budget`` cannot afford the measurement (nothing sent).
    ProtocolAbortError
        Too few clients at some step, or the protocol could not be completed.
    """
    from fa_hetdp.server.app import GridTransport
    from fa_hetdp.server.strategy import HeterogeneityStrategy

    del context  # the measurement's settings are its arguments, not the user's run config
    count = len(list(grid.get_node_ids())) if num_clients is None else num_clients
    spec = SummarySpec(kind=summary, num_labels=num_labels, image_shape=image_shape)
    document = settings_document(
        epsilon=epsilon,
        delta=delta,
        num_clients=count,
        seed=seed,
        statistics=statistics,
        summary=spec,
        settings=settings,
        effect=effect,
        arm=arm,
    )
    run = read_settings(document).run
    meta = run.protocol.setting("analysis") == "meta"
    two_arm = run.scenario.data.effect != "mean"  # checked: a meta-analysis of its design
    if meta and spec.kind != "mean":
        raise PrivacyParameterError(
            f"analysis='meta' analyses every record of a client; summary={summary!r} does not "
            "apply (leave it at 'mean')"
        )
    write = result_path is not None
    if result_path is not None:
        run = dataclasses.replace(run, result_path=Path(result_path).expanduser())
    if budget is not None:
        # Charged before any message. The composed cost of a plan is its target whatever d
        # (only its split over the releases depends on d): the summary's d where the server
        # knows it (label histogram, pooled), else 1. A meta-analysis' releases have unit
        # sensitivity, so its charge does not depend on the record counts it will learn
        # either: planned here at min_records (or 2) records each. Nor on its design: both
        # spend the whole (epsilon, delta) under Gaussian composition (the silo summaries by
        # parallel composition over disjoint records), so the charge is the same. A two-arm
        # effect's is its own plan, at its least arm sizes: the silo summaries per arm, or
        # the secure sums on every silo's reduced summary (an MD or RD, design="secure-sums").
        if two_arm and two_arm_sums(run):
            budget.charge(two_arm_sums_plan(run, [[2, 2]] * count, 1))
        elif two_arm:
            from fa_hetdp.flowerkit.settings import two_arm_plan
            from fa_hetdp.protocol.two_arm import min_arm_size

            least = min_arm_size(run.scenario.data.effect)
            budget.charge(two_arm_plan(run, [[least, least]] * count, 1))
        elif meta:
            floor = run.protocol.setting("min_records")
            counts = [floor if isinstance(floor, int) else 2] * count
            budget.charge(meta_plan(run, counts, 1))
        else:
            d = spec.resolve(1).dim if spec.kind != "mean" else 1
            budget.charge(plan_protocol(run.protocol, n=count, d=d))
    strategy = HeterogeneityStrategy(run, version=fa_hetdp.__version__, write_results=write)
    transport = GridTransport(grid, limits=strategy.message_limits, settings=document)
    strategy.run(transport)
    result: PrivateStatistics | PrivateMetaAnalysis | ColumnMetaAnalysis | None
    if two_arm:
        from fa_hetdp.accuracy.columns import ColumnMetaAnalysis

        outcome = strategy.outcome
        result = outcome if isinstance(outcome, ColumnMetaAnalysis) else None
    else:
        result = strategy.meta_result if meta else strategy.result
    if result is None:  # pragma: no cover - run() returns only after its last round
        raise PrivacyParameterError("the measurement ended without a result")
    return result
