"""The figures of the meta-analysis, declared once: :data:`META_FIGURES`.

One :class:`MetaFigure` per figure of :func:`fa_hetdp.meta_analysis` and
:func:`fa_hetdp.private_meta_analysis`: its key (the attribute of the result), its name, whether
its error is stated relative to the figure (the planner, the benchmarks), whether it is one
number or one per coordinate, whether the accuracy planner plans it, and the secure-sums
releases it needs (:mod:`fa_hetdp.protocol.meta_plan`, whose ``ROUNDS`` name them). Every other
table reads this one: the plan's ``META_STATISTICS`` (figure -> releases, the ``statistics``
setting's choices), the planner's (key -> display name) and the report's (the per-coordinate
rows and the scalars).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

__all__ = [
    "META_FIGURES",
    "MetaFigure",
    "figure",
    "planned_figures",
    "releases_needed",
]


@dataclass(frozen=True)
class MetaFigure:
    """One figure of the meta-analysis.

    Attributes
    ----------
    key : str
        Its name in results, ``statistics`` and the result JSON (``"pooled_mean"``).
    name : str
        How tables name it (``"pooled mean"``).
    relative : bool
        Its error is stated relative to ``|value|`` (the means, ``tau2``); False: absolute.
    scalar : bool
        One number for the analysis (``i2_total``); False: one per coordinate.
    planned : bool
        The accuracy planner plans its error (:mod:`fa_hetdp.accuracy.meta_planner`).
    releases : tuple of str
        The secure-sums releases it needs; a ``statistics`` subset makes only those its figures
        need.
    derived : str or None
        The figure it is computed from (``i2_average`` from ``i2``): asked for with that one,
        not on its own (None: its own).
    """

    key: str
    name: str
    relative: bool
    scalar: bool = False
    planned: bool = False
    releases: tuple[str, ...] = ()
    derived: str | None = None

    @property
    def display(self) -> str:
        """Its name with how its error is scaled, e.g. ``"τ² (rel.)"``."""
        return f"{self.name} ({'rel.' if self.relative else 'abs.'})"


_ROUND_B: Final = ("T", "W", "A", "B", "C")

META_FIGURES: Final[tuple[MetaFigure, ...]] = (
    MetaFigure("pooled_mean", "pooled mean", True, planned=True, releases=("T", "W", "B", "C")),
    MetaFigure(
        "random_effects_mean",
        "RE mean",
        True,
        planned=True,
        releases=(*_ROUND_B, "D", "E", "F"),
    ),
    MetaFigure("q", "Q", False, releases=_ROUND_B),
    MetaFigure("i2", "I²", False, planned=True, releases=_ROUND_B),
    MetaFigure("tau2", "τ²", True, planned=True, releases=(*_ROUND_B, "D")),
    MetaFigure("i2_total", "I² of the summed Q", False, scalar=True, releases=_ROUND_B),
    MetaFigure("i2_average", "average I²", False, scalar=True, derived="i2"),
)
"""The figures, in the order the report's table lists them."""


def figure(key: str) -> MetaFigure:
    """Return the figure called ``key``.

    Raises
    ------
    KeyError
        ``key`` is not a figure (the allowed ones listed).
    """
    for f in META_FIGURES:
        if f.key == key:
            return f
    raise KeyError(
        f"unknown meta-analysis figure {key!r}; allowed: {[f.key for f in META_FIGURES]}"
    )


def releases_needed() -> Mapping[str, tuple[str, ...]]:
    """Figure -> the releases it needs, for the figures one may ask for (not the derived)."""
    return MappingProxyType({f.key: f.releases for f in META_FIGURES if f.derived is None})


def planned_figures() -> Mapping[str, str]:
    """Figure -> display name, for the figures the planner plans (in the table's order)."""
    return MappingProxyType({f.key: f.display for f in META_FIGURES if f.planned})
