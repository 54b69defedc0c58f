"""Flower: what the two apps share, and the drop-in for a user's own Flower app.

The ``ClientApp`` (``clients/``) and the ``ServerApp`` (``server/``) meet only through the
shared definitions here: the run settings (:mod:`.settings`), the step names and message keys
(:mod:`.steps`), the message codec (:mod:`.wire`) and its limits (:mod:`.limits`), and the
settings a drop-in measurement sends (:mod:`.measurement`). The two apps import these modules,
never each other.

The drop-in sits above both apps: :func:`register` (:mod:`.dropin_client`) adds the protocol's
steps to any ``ClientApp``, :func:`measure` (:mod:`.dropin_server`) runs one measurement from
any ``ServerApp``. They are loaded on first use (PEP 562): the client app imports
``fa_hetdp.flower.steps``, so importing them here would be a cycle.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fa_hetdp.flower.dropin_client import register
    from fa_hetdp.flower.dropin_server import measure

__all__ = ["measure", "register"]


def __getattr__(name: str) -> Any:
    if name == "register":
        from fa_hetdp.flower.dropin_client import register

        return register
    if name == "measure":
        from fa_hetdp.flower.dropin_server import measure

        return measure
    raise AttributeError(f"module 'fa_hetdp.flower' has no attribute {name!r}")
