"""The table of statistics: one record per private statistic, used everywhere.

Every list of statistics in the project (the engine's columns, the reports, the run's printed
table, the metrics, the result files, the ``summary`` of the results) is read from
:data:`STATISTICS`. Adding a statistic (say ``H^2 = Q/(n - 1)``) means: one
:class:`StatisticSpec` here; its exact value in :mod:`fa_hetdp.stats.exact`
(:class:`~fa_hetdp.stats.exact.TrueStatistics`); its private formula in
:mod:`fa_hetdp.protocol.server` (``estimate_stage2``, vectorised, and a field of the result)
plus the same field on :class:`~fa_hetdp.protocol.simulate.BatchResult`; and its expected
error in :mod:`fa_hetdp.accuracy.metrics`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal

__all__ = [
    "PAPER_STATISTICS",
    "STATISTICS",
    "STATISTIC_KEYS",
    "StatisticSpec",
    "paper_label",
    "statistic",
]

Scale = Literal["mean", "sum", "fraction"]
"""How a statistic is scaled: a per-client mean, a sum over clients, or a fraction in [0, 1]."""


@dataclass(frozen=True)
class StatisticSpec:
    """One private statistic.

    Attributes
    ----------
    key : str
        Identifier used in results, tables and result files (``"dispersion"``).
    label : str
        The paper's notation for the private estimate (``"D''"``).
    name : str
        Words for people (``"dispersion"``).
    release : str
        The noisy release it is computed from (see :data:`fa_hetdp._types.RELEASE_NAMES`).
    post_processing : str
        How the server turns the release into the statistic (the formula, for docs and labels).
    truth : str
        Key of the exact statistic it estimates (``"i2"`` for both I2 estimates).
    scale : {"mean", "sum", "fraction"}
        A per-client mean, a sum over clients, or a fraction in ``[0, 1]``.
    optional : bool
        Released only when its setting is on (``I2'''``: ``extra_i2_noise``).
    paper_name : str or None
        The name the paper's tables give it, when they report it.
    display : str
        Words and notation for printed tables (default ``"<name> <label>"``).
    """

    key: str
    label: str
    name: str
    release: str
    post_processing: str
    truth: str
    scale: Scale
    optional: bool = False
    paper_name: str | None = None
    display: str = ""

    def __post_init__(self) -> None:
        if not self.display:
            object.__setattr__(self, "display", f"{self.name} {self.label}")


STATISTICS: Final[tuple[StatisticSpec, ...]] = (
    StatisticSpec(
        key="mean",
        label="μ'",
        name="mean",
        release="mean",
        post_processing="mu' = (sum x_i + noise) / n  (Thm 3.3)",
        truth="mean",
        scale="mean",
    ),
    StatisticSpec(
        key="dispersion",
        label="D''",
        name="dispersion",
        release="dispersion",
        post_processing="D'' = (sum (x_i - mu')^2 + noise) / n  (Thm 3.3)",
        truth="dispersion",
        scale="mean",
        paper_name="Dispersion",
    ),
    StatisticSpec(
        key="weighted_mean",
        label="μ̄'",
        name="weighted mean",
        release="weighted",
        post_processing="mu_bar' = clip(A' / max(B', n w_min), 0, 1)  (Lemma 3.7)",
        truth="weighted_mean",
        scale="fraction",
    ),
    StatisticSpec(
        key="q",
        label="Q''",
        name="Cochran's Q",
        display="Cochran's Q''",
        release="q",
        post_processing="Q'' = sum w_i (x_i - mu_bar')^2 + noise  (Thm 3.8)",
        truth="q",
        scale="sum",
        paper_name="Q",
    ),
    StatisticSpec(
        key="i2",
        label="I²''",
        name="I²",
        display="I²''",
        release="q",
        post_processing="I2'' = max(0, 1 - (n - 1) / Q'')  (Thm 3.13, post-processing)",
        truth="i2",
        scale="fraction",
    ),
    StatisticSpec(
        key="i2_extra",
        label="I²'''",
        name="I² (extra noise)",
        display="I²''' (extra noise)",
        release="i2_extra",
        post_processing="I2''' = I2'' + N(0, sigma_5^2)  (Thm 3.13 option; no privacy gained)",
        truth="i2",
        scale="fraction",
        optional=True,
        paper_name="I²",
    ),
)
"""Every private statistic, in protocol order: μ', D'', μ̄', Q'', I²'', I²'''."""

STATISTIC_KEYS: Final[tuple[str, ...]] = tuple(s.key for s in STATISTICS)
"""The keys of :data:`STATISTICS`, in order."""

_BY_KEY: Final[Mapping[str, StatisticSpec]] = {s.key: s for s in STATISTICS}

PAPER_STATISTICS: Final[tuple[StatisticSpec, ...]] = tuple(
    s for s in STATISTICS if s.paper_name is not None
)
"""The paper's three statistics, as the private estimates its tables report (D'', Q'', I²''')."""


def statistic(key: str) -> StatisticSpec:
    """Return the record of statistic ``key``.

    Raises
    ------
    KeyError
        With the allowed keys, if ``key`` is not a statistic.
    """
    try:
        return _BY_KEY[key]
    except KeyError:
        raise KeyError(f"unknown statistic {key!r}; allowed: {STATISTIC_KEYS}") from None


def paper_label(key: str) -> str:
    """Return the paper's notation of statistic ``key`` (``"Q''"``)."""
    return statistic(key).label
