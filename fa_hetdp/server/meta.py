"""The meta-analysis over Flower: rounds A, B and C of a session (``analysis = "meta"``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fa_hetdp.server.strategy import HeterogeneityStrategy, Session

__all__ = ["meta_rounds"]


def meta_rounds(strategy: HeterogeneityStrategy, session: Session) -> dict[str, Any]:
    """Run rounds A, B and C after the key advertisement; return the result document."""
    raise NotImplementedError("the meta-analysis over Flower is not wired yet")
