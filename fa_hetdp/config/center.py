"""The ``dispersion_center`` setting: where the dispersion release is centred (lever c).

Declared in :data:`fa_hetdp.config.rules.FIELDS` and :data:`~fa_hetdp.config.rules.CROSS_RULES`
so that every entry point checks it the same way; what it does is
:func:`fa_hetdp.protocol.center.dispersion_center` (``docs/privacy.md``, lever c).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal, get_args

__all__ = ["CENTER_FIELDS", "DISPERSION_CENTERS", "DispersionCenter", "dispersion_center_supported"]

DispersionCenter = Literal["broadcast", "optimal"]
"""``"broadcast"``: clients send ``(x - c)^2``, ``c = clip(mu', 0, 1)``; ``"optimal"``: they
send ``(x - a)^2`` for a public centre ``a`` chosen from ``c`` and the plan's sigmas, and the
server subtracts ``(c - a)^2``."""

DISPERSION_CENTERS: Final[tuple[str, ...]] = get_args(DispersionCenter)

CENTER_FIELDS: Final = ("dispersion_center", "broadcast_bounds")
"""The settings the cross rule :func:`dispersion_center_supported` reads."""


def dispersion_center_supported(v: Mapping[str, Any]) -> str | None:
    """Return why ``dispersion_center = "optimal"`` is refused with these settings, or None.

    It needs ``broadcast_bounds``: the centre only pays through the bounds of the broadcast.
    Any mechanism is allowed, since the centre replaces ``c`` everywhere stage 2 uses it (the
    clients' summands, the sigmas and a lattice's scales all come from the same broadcast).
    """
    if v["dispersion_center"] != "optimal" or v["broadcast_bounds"] is True:
        return None
    return (
        "dispersion_center='optimal' needs broadcast_bounds=true (the centre only lowers the "
        "broadcast-based stage-2 bounds); set dispersion_center='broadcast' or turn it on"
    )
