"""The paper's experimental setting (Section 4): ε grid, δ, skew levels, reported statistics.

Shared by the table builders (:mod:`fa_hetdp.experiments.paper_tables`) and the
``fa-hetdp reproduce`` command (:mod:`fa_hetdp.experiments.reproduce`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from fa_hetdp.registry import PAPER_STATISTICS, paper_label

__all__ = [
    "DATASETS",
    "FULL_REPEATS",
    "I2_NO_EXTRA_LABEL",
    "PAPER_COLUMNS",
    "PAPER_DELTA",
    "PAPER_EPSILONS",
    "PAPER_FIXED_EPSILON",
    "PAPER_SKEWS",
    "QUICK_EPSILONS",
    "QUICK_REPEATS",
    "TABLE5_STATISTICS",
    "SkewLevel",
    "skew_level",
]

DATASETS: Final[tuple[str, ...]] = ("digits", "cifar10", "cifar100", "fashion-mnist")
PAPER_EPSILONS: Final[tuple[float, ...]] = tuple(0.25 * k for k in range(1, 21))
"""ε ∈ {0.25, 0.5, …, 5} (Section 4.2, "Cost of privacy")."""
PAPER_FIXED_EPSILON: Final = 0.25
"""The ε of Tables 1–4 and the ratio tables (Section 4: "we fix ε = 0.25")."""
PAPER_DELTA: Final = 1e-5
"""δ of the published numbers (Section 4.2); the text of Section 4 says 0.1."""
QUICK_EPSILONS: Final[tuple[float, ...]] = (0.25, 1.0, 5.0)
QUICK_REPEATS: Final = 20
FULL_REPEATS: Final = 100

PAPER_COLUMNS: Final[tuple[tuple[str, str], ...]] = tuple(
    (s.key, s.paper_name or s.label) for s in PAPER_STATISTICS
)
"""``(key, column label)`` of the paper's statistics, read from the statistics registry.

The private estimates the paper's tables report (D'', Q'', I²''') under the paper's names
(Dispersion, Q, I²); see :data:`fa_hetdp.registry.PAPER_STATISTICS`.
"""

I2_NO_EXTRA_LABEL: Final = f"{paper_label('i2')} (no 3rd noise)"
"""Column label of I²'' (Thm 3.13 without its third noise stage), our addition."""

TABLE5_STATISTICS: Final[tuple[tuple[str, str], ...]] = (
    *PAPER_COLUMNS,
    ("i2", I2_NO_EXTRA_LABEL),
)
"""Table 5 adds I²'' (our addition): the error of I²''' is dominated by its extra noise."""


@dataclass(frozen=True)
class SkewLevel:
    """One of the paper's six label-skew levels (Section 4.2).

    Attributes
    ----------
    num_labels
        Labels in the sample (10, 5 or 2).
    heterogeneous
        ``True`` for the statistically heterogeneous (SH) ratios (91:1:…:1, 96:1:1:1:1, 99:1).
    ratios
        The label ratios.
    """

    num_labels: int
    heterogeneous: bool
    ratios: tuple[int, ...]

    @property
    def label(self) -> str:
        """Short label such as ``"10 labels 91:1:…:1"``."""
        if len(self.ratios) > 5:
            ratio = f"{self.ratios[0]}:{self.ratios[1]}:…:{self.ratios[-1]}"
        else:
            ratio = ":".join(str(r) for r in self.ratios)
        return f"{self.num_labels} labels {ratio}"

    @property
    def slug(self) -> str:
        """File-name friendly name such as ``"labels10_sh"``."""
        return f"labels{self.num_labels}_{'sh' if self.heterogeneous else 'iid'}"


PAPER_SKEWS: Final[tuple[SkewLevel, ...]] = (
    SkewLevel(10, False, (1,) * 10),
    SkewLevel(10, True, (91,) + (1,) * 9),
    SkewLevel(5, False, (1,) * 5),
    SkewLevel(5, True, (96, 1, 1, 1, 1)),
    SkewLevel(2, False, (1, 1)),
    SkewLevel(2, True, (99, 1)),
)


def skew_level(num_labels: int, heterogeneous: bool) -> SkewLevel:
    """Return the skew level of :data:`PAPER_SKEWS` with these labels and heterogeneity."""
    for skew in PAPER_SKEWS:
        if skew.num_labels == num_labels and skew.heterogeneous == heterogeneous:
            return skew
    raise KeyError((num_labels, heterogeneous))  # pragma: no cover - fixed table
