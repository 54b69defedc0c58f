"""The ``noise_shape`` setting: how the stage-2 noise is spread over coordinates (lever c).

Declared in :data:`fa_hetdp.config.rules.FIELDS` and :data:`~fa_hetdp.config.rules.CROSS_RULES`
so that every entry point checks it the same way; what it does is
:meth:`fa_hetdp.protocol.plan.ProtocolPlan.stage2_factors` (``docs/privacy.md``, lever c).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal, get_args

__all__ = [
    "NOISE_SHAPES",
    "NOISE_SHAPE_FIELDS",
    "NoiseShape",
    "noise_shape_supported",
    "resolve_noise_shape",
]

NoiseShape = Literal["uniform", "per_coordinate", "auto"]
"""``"uniform"``: one stage-2 sigma for every coordinate; ``"per_coordinate"``: ``sigma_j``
proportional to ``max(c_j, 1 - c_j)`` (``sqrt`` of the coordinate's broadcast bound);
``"auto"`` (the default): ``"per_coordinate"`` where the other settings allow it, else
``"uniform"`` (:func:`resolve_noise_shape`, once, when the config is made)."""

NOISE_SHAPES: Final[tuple[str, ...]] = get_args(NoiseShape)

GAUSSIAN_MECHANISMS: Final = ("agm", "cgm")
"""The mechanisms whose privacy depends on the noise only through ``Delta/sigma`` (the
per-coordinate argument is made for them)."""

NOISE_SHAPE_FIELDS: Final = ("noise_shape", "broadcast_bounds", "mechanism")
"""The settings the cross rule :func:`noise_shape_supported` reads."""


def noise_shape_supported(v: Mapping[str, Any]) -> str | None:
    """Return why ``noise_shape = "per_coordinate"`` is refused with these settings, or None.

    It needs ``broadcast_bounds`` (the per-coordinate bounds come from the public broadcast)
    and a Gaussian mechanism (the argument in ``docs/privacy.md`` is for Gaussian noise).
    """
    if v["noise_shape"] != "per_coordinate":
        return None
    if v["broadcast_bounds"] is not True:
        return (
            "noise_shape='per_coordinate' needs broadcast_bounds=true (the per-coordinate "
            "bounds come from the public broadcast); set noise_shape='uniform' or turn it on"
        )
    if v["mechanism"] not in GAUSSIAN_MECHANISMS:
        return (
            "noise_shape='per_coordinate' is argued for Gaussian noise only (agm, cgm), got "
            f"mechanism={v['mechanism']!r}; use noise_shape='uniform'"
        )
    return None


def resolve_noise_shape(v: Mapping[str, Any]) -> str:
    """Return the noise shape ``v`` asks for, ``"auto"`` resolved.

    ``"auto"`` is ``"per_coordinate"`` where :func:`noise_shape_supported` allows it (a
    Gaussian mechanism with ``broadcast_bounds``), else ``"uniform"``; a stated value is kept.
    """
    if v["noise_shape"] != "auto":
        return str(v["noise_shape"])
    wanted = {**v, "noise_shape": "per_coordinate"}
    return "per_coordinate" if noise_shape_supported(wanted) is None else "uniform"
