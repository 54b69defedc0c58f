"""What a run measures, as one interface: :class:`Analysis` (as Flower's ``Strategy`` is).

Every run starts the same way (the nodes, the sample, the key advertisement and its checks:
:class:`fa_hetdp.server.strategy.HeterogeneityStrategy`); what follows is the analysis', chosen
by the ``analysis`` setting and run on an :class:`~fa_hetdp.server.session.AnalysisSession`:

==============================================  ===============================================
:class:`~fa_hetdp.server.heterogeneity.          the paper's statistics: stages (0,) 1, 2
PaperProtocol` (``"heterogeneity"``)
:class:`~fa_hetdp.server.meta_design.            the meta-analysis: the design chosen for the
MetaAnalysis` (``"meta"``)                       public counts, then one of the two below
:class:`~fa_hetdp.server.meta.SecureSums`        the meta-analysis' rounds A, B, C (secure sums)
:class:`~fa_hetdp.server.silo_summaries.         every silo's own noisy summaries (one plain
SiloSummaries`                                   step)
==============================================  ===============================================

Each server file holds one analysis, and each has its client part in ``fa_hetdp/clients``
(:mod:`fa_hetdp.clients.app`, :mod:`fa_hetdp.clients.meta`,
:mod:`fa_hetdp.clients.silo_summaries`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any

from fa_hetdp.config.protocol import ProtocolConfig
from fa_hetdp.server.session import AnalysisSession

__all__ = ["Analysis"]


class Analysis(ABC):
    """One analysis of a run: what it needs of the session's setup, and its rounds.

    A new analysis is a subclass with :meth:`run` (and, where it differs from the defaults,
    :meth:`summations` and :meth:`check_reply`), registered by its ``analysis`` setting in
    :data:`fa_hetdp.server.strategy.ANALYSES`; it uses the session's public methods only.
    """

    def summations(self, protocol: ProtocolConfig) -> int:
        """Return the masked summations the session must carry (the secagg keys; default 0)."""
        del protocol
        return 0

    def check_reply(self, reply: Mapping[str, Any]) -> str | None:
        """Return why a client's ``advertise_keys`` reply is unusable here (None: usable).

        Such a client is dropped before the key directory is fixed.
        """
        del reply
        return None

    @abstractmethod
    def run(self, session: AnalysisSession) -> dict[str, Any]:
        """Run the analysis' rounds after the key advertisement; return the result document.

        The document is written by :meth:`AnalysisSession.finish
        <fa_hetdp.server.session.AnalysisSession.finish>`; an abort raises
        :class:`~fa_hetdp.server.session.ProtocolAbortError` (``raise session.abort(...)``).
        """
