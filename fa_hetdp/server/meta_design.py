"""Which design a meta-analysis runs over Flower, chosen once the public counts are known.

The ``design`` setting (``"auto"``, ``"silo-summaries"``, ``"secure-sums"``) is resolved after
the key advertisement, where every node states its record count ``m_i`` (public in a
meta-analysis) and whether it releases its own summaries (node config
``release-silo-summaries``, default true), and before anything is released:

1. a node that refuses to release its own summaries makes the run use the secure sums (whatever
   the setting: the silo summaries need every silo's release, and each silo decides for itself);
2. ``"silo-summaries"`` or ``"secure-sums"``: that design;
3. ``"auto"``: the secure sums where the settings rule the silo summaries out (the client
   unit, central placement), else the planner's choice for the public counts, ``d`` and the
   budget (:func:`fa_hetdp.accuracy.meta_design.choose_design`, the one the in-process
   :func:`fa_hetdp.private_meta_analysis` makes; nothing of the records enters it).

Then :class:`MetaAnalysis` (the ``"meta"`` :class:`~fa_hetdp.server.analysis.Analysis`) runs
it: the secure sums' rounds A, B, C (:class:`fa_hetdp.server.meta.SecureSums`) or one plain
step of every silo's own release (:class:`fa_hetdp.server.silo_summaries.SiloSummaries`). The
result states the design and why.

A two-arm effect (the scenario's ``[data] arm`` and ``effect``) runs as in process
(:func:`fa_hetdp.private_meta_analysis`), once every node's first reply has stated its arm sizes:
``"silo-summaries"`` runs the silo summaries (:class:`fa_hetdp.server.silo_summaries.
TwoArmSummaries`), and a node that does not release its own summaries then aborts the run
before anything is released; ``"secure-sums"``, named, runs an MD or RD as one summary per silo
in the secure sums' rounds (:func:`fa_hetdp.server.meta.meta_rounds`,
:mod:`fa_hetdp.protocol.two_arm_sums`), whatever the nodes' ``release-silo-summaries``;
``"auto"`` weighs both for an MD or RD at the public arm sizes (the in-process planner,
:func:`fa_hetdp.accuracy.two_arm_planner.choose_two_arm_design`), and runs the secure sums where
a node does not release its own summaries; SMD, OR and RR, and an MD or RD with a silo's arm
below 2 records, run the silo summaries. SMD, OR and RR under the secure sums, and the secure
sums at the client unit or with ``min_records``, are refused before Flower starts
(:func:`fa_hetdp.flowerkit.settings.two_arm_problem`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fa_hetdp.accuracy.meta_design import choose_design
from fa_hetdp.config.protocol import ProtocolConfig
from fa_hetdp.flowerkit.settings import RunSettings, public_count_settings
from fa_hetdp.flowerkit.steps import Event, Key, NodeConfig
from fa_hetdp.protocol.silo_summaries import silo_summaries_problem
from fa_hetdp.server.analysis import Analysis
from fa_hetdp.server.meta import SecureSums, check_count, session_counts
from fa_hetdp.server.session import AnalysisSession
from fa_hetdp.server.silo_summaries import SiloSummaries, TwoArmSummaries, check_arm_counts

__all__ = ["DesignChoice", "MetaAnalysis", "resolve_design", "two_arm_design"]


@dataclass(frozen=True)
class DesignChoice:
    """The design a run makes, and why (one sentence, stated in the result)."""

    design: str
    reason: str


def resolve_design(
    settings: RunSettings, counts: list[int], d: int, *, refusing: int = 0
) -> DesignChoice:
    """Resolve the run's ``design`` setting for the public ``counts`` (module docstring).

    ``refusing``: the nodes of the session whose first reply says they do not release their
    own summaries.
    """
    asked = str(settings.protocol.setting("design"))
    if refusing:
        return DesignChoice(
            "secure-sums",
            f"secure sums: {refusing} of {len(counts)} silos do not release their own summaries "
            f"(node config {NodeConfig.RELEASE_SILO_SUMMARIES} = false)"
            + ("; the run asked for silo-summaries" if asked == "silo-summaries" else ""),
        )
    if asked != "auto":
        return DesignChoice(asked, f"design {asked!r} set by the run")
    p = settings.protocol
    public = public_count_settings(settings, "auto")
    problem = silo_summaries_problem(public)
    if problem is not None:  # as the planner says it, without planning a design that cannot run
        return DesignChoice("secure-sums", f"secure sums only: {problem}")
    chosen = choose_design(counts, d, epsilon=p.epsilon, delta=p.delta, settings=public)
    return DesignChoice(chosen.design, chosen.reason)


def two_arm_design(
    settings: RunSettings,
    effect: str,
    refusing: int,
    arm_sizes: Sequence[Sequence[int]],
    d: int,
) -> DesignChoice | None:
    """Return the design of a two-arm run, or None where the silo summaries cannot run.

    ``"secure-sums"`` (named: an MD or RD, checked before the run by :func:`fa_hetdp.flowerkit.
    settings.two_arm_problem`) runs whatever the nodes' ``release-silo-summaries``. ``"auto"``
    for an MD or RD that both designs can run (:func:`~fa_hetdp.protocol.two_arm_sums.
    both_designs_problem` at the public ``arm_sizes``) runs the secure sums where ``refusing``
    nodes do not release their own summaries, else the in-process choice
    (:func:`fa_hetdp.accuracy.two_arm_planner.auto_two_arm_design`, public inputs only).
    Otherwise the silo summaries, which need every silo's own release (None: ``refusing``
    nodes do not make it).
    """
    from fa_hetdp.accuracy.two_arm_planner import auto_two_arm_design
    from fa_hetdp.protocol.two_arm_sums import both_designs_problem

    asked = str(settings.protocol.setting("design"))
    if asked == "secure-sums":
        return DesignChoice(asked, f"design {asked!r} set by the run")
    if asked != "auto":
        return None if refusing else DesignChoice(asked, f"design {asked!r} set by the run")
    public = public_count_settings(settings, "auto")  # a session's counts are public
    if refusing:
        if both_designs_problem(effect, public.privacy_unit, public.min_records, arm_sizes):
            return None
        return DesignChoice(
            "secure-sums",
            f"secure sums: {refusing} of {len(arm_sizes)} silos do not release their own "
            f"summaries (node config {NodeConfig.RELEASE_SILO_SUMMARIES} = false)",
        )
    p = settings.protocol
    chosen = auto_two_arm_design(
        arm_sizes, d, effect, epsilon=p.epsilon, delta=p.delta, settings=public
    )
    return DesignChoice(chosen.design, chosen.reason)


class MetaAnalysis(Analysis):
    """The meta-analysis (``analysis = "meta"``): the design resolved, then its analysis.

    The session carries the secure sums' three summations whichever design runs (the design
    is chosen after the keys are advertised); the silo summaries share no key.
    """

    def summations(self, protocol: ProtocolConfig) -> int:
        """Return those of the secure sums (rounds A, B, C)."""
        return SecureSums().summations(protocol)

    def check_reply(self, reply: Mapping[str, Any]) -> str | None:
        """Refuse a reply without a usable record count, or with unusable arm sizes.

        :func:`~.meta.check_count`; a two-arm run's: :func:`~.silo_summaries.check_arm_counts`.
        """
        return check_count(reply) or check_arm_counts(reply)

    def run(self, session: AnalysisSession) -> dict[str, Any]:
        """Resolve the design for the public counts; run it; return the result document."""
        counts = session_counts(session)
        refusing = sum(
            1 for r in session.first_replies.values() if r.get(Key.RELEASES_SILO_SUMMARIES) is False
        )
        effect = session.settings.scenario.data.effect
        if effect != "mean":  # two-arm effects (module docstring)
            arms = []
            for client, reply in sorted(session.first_replies.items()):
                stated = reply.get(Key.ARM_COUNTS)
                if not isinstance(stated, list) or check_arm_counts(reply) is not None:
                    raise session.abort(
                        f"effect={effect!r}: silo {client} stated no usable arm sizes in its "
                        "first reply; nothing was released"
                    )
                arms.append(stated)
            choice = two_arm_design(session.settings, effect, refusing, arms, session.d)
            if choice is None:
                raise session.abort(
                    f"effect={effect!r} needs every silo's own per-arm release: {refusing} of "
                    f"{len(counts)} silos do not release their own summaries (node config "
                    f"{NodeConfig.RELEASE_SILO_SUMMARIES} = false), and the secure sums build no "
                    "per-arm sums (an MD or RD runs in them when design='secure-sums' is named); "
                    "nothing was released"
                )
            session.progress(Event.DESIGN, design=choice.design, reason=choice.reason)
            if choice.design == "secure-sums":  # an MD or RD, one summary per silo
                return SecureSums(choice.reason).run(session)
            return TwoArmSummaries(choice.reason).run(session)
        choice = resolve_design(
            session.settings, [m for _, m in counts], session.d, refusing=refusing
        )
        session.progress(Event.DESIGN, design=choice.design, reason=choice.reason)
        design: Analysis = (
            SiloSummaries(choice.reason)
            if choice.design == "silo-summaries"
            else SecureSums(choice.reason)
        )
        return design.run(session)
