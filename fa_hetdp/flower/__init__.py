"""The drop-in for a user's own Flower app: :func:`register` and :func:`measure`.

:func:`register` (:mod:`.dropin_client`) adds the protocol's steps to any ``ClientApp``;
:func:`measure` (:mod:`.dropin_server`) runs one measurement from any ``ServerApp``. This
package sits above both of our apps (``clients/``, ``server/``), which share only
:mod:`fa_hetdp.flowerkit`. Both names load on first use (PEP 562), so ``import fa_hetdp.flower``
stays cheap until one is called.
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
