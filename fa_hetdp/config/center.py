"""The ``dispersion_center`` setting: where the dispersion release is centred (lever c).

Declared in :data:`fa_hetdp.config.rules.FIELDS` and :data:`~fa_hetdp.config.rules.CROSS_RULES`
so that every entry point checks it the same way; what it does is
:func:`fa_hetdp.protocol.center.dispersion_center` (``docs/privacy.md``, lever c).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal, get_args

__all__ = [
    "CENTER_FIELDS",
    "DISPERSION_CENTERS",
    "DispersionCenter",
    "dispersion_center_supported",
    "resolve_dispersion_center",
]

DispersionCenter = Literal["broadcast", "optimal", "auto"]
"""``"broadcast"``: clients send ``(x - c)^2``, ``c = clip(mu', 0, 1)``; ``"optimal"``: they
send ``(x - a)^2`` for a public centre ``a`` chosen from ``c`` and the plan's sigmas, and the
server subtracts ``(c - a)^2``; ``"auto"`` (the default): ``"optimal"`` where the other
settings allow it, else ``"broadcast"`` (:func:`resolve_dispersion_center`, once, when the
config is made)."""

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


def resolve_dispersion_center(v: Mapping[str, Any]) -> str:
    """Return the centre ``v`` asks for, ``"auto"`` resolved.

    ``"auto"`` is ``"optimal"`` where :func:`dispersion_center_supported` allows it (with
    ``broadcast_bounds``), else ``"broadcast"``; a stated value is kept.
    """
    if v["dispersion_center"] != "auto":
        return str(v["dispersion_center"])
    wanted = {**v, "dispersion_center": "optimal"}
    return "optimal" if dispersion_center_supported(wanted) is None else "broadcast"
