"""``fa-hetdp reproduce``: the paper's Tables 1–5 and Figure 1, plus our additional checks.

The paper (Section 4) measures dispersion, Q and I² on a 2 % sample of CIFAR-10, CIFAR-100 and
Fashion-MNIST at six levels of label skew, with ε from 0.25 to 5, δ = 1e-5 (the text says
δ = 0.1; the published numbers were computed with 1e-5), AGM against CGM and distributed
against central noise. This command runs the same grid with the :mod:`fa_hetdp` estimators
(:mod:`fa_hetdp.experiments.engine`) on the six skew scenarios of a dataset and writes:

- ``table1_dispersion``, ``table2_q``, ``table3_i2``: EMSE, TMSE, CMSE and their standard
  deviations for AGM and CGM at ε = 0.25 (1 : … : 1 over 10 labels, as the paper);
- ``table4_minimum_values``: the true statistics, per skew and their minimum;
- ``table5a_sh_vs_nonsh``, ``table5b_label_counts``: percentage change of EMSE between skew
  levels, averaged over ε, with the sign convention stated in the table note;
- ``ratio_emse_tmse``, ``ratio_agm_cgm``: the paper's ratio tables (EMSE / TMSE and
  AGM / CGM, the table after Table 4 in the paper's source);
- ``figure1.png``: EMSE against ε per skew level, log y, one panel per statistic
  (``figure1_extra.png``: the same for μ', μ̄' and I²'');
- our additions: ``emse_overview`` (EMSE of every release beside its true value),
  ``ratio_emse_expected`` (EMSE / analytic expected MSE),
  ``ratio_distributed_central`` (with 95 % delta-method intervals), ``composition_basic_gdp``
  (σ and EMSE under basic and exact composition) and ``ci_coverage`` (empirical coverage of the
  paper's Thm 3.6 / 3.9 / 3.14 intervals and of ours);
- ``REPORT.md`` (all tables), ``reproduce.json`` (every cell of every skew) and, per skew,
  ``<slug>/results.json``, ``cells.csv`` and EMSE tables.

The six runs of a dataset use the scenarios' seed, so they share their noise draws cell by cell
(:func:`fa_hetdp.experiments.engine.cell_seed`):
differences between skew levels are differences of the
data, not Monte-Carlo scatter.

``I²`` in the paper's tables is the paper's I²''' (Thm 3.13, with its third noise stage); I²''
(no third stage) is reported beside it in our additions.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np

from fa_hetdp._types import FloatArray, Profile
from fa_hetdp.experiments.engine import (
    STATISTIC_LABELS,
    ExperimentResult,
)
from fa_hetdp.report.files import write_json_atomic
from fa_hetdp.report.tables import (
    Table,
    mean_percentage_change,
    plot_emse_vs_epsilon,
    ratio_confidence_interval,
    write_table,
)

__all__ = [
    "DATASETS",
    "PAPER_DELTA",
    "PAPER_EPSILONS",
    "PAPER_FIXED_EPSILON",
    "PAPER_SKEWS",
    "SkewLevel",
    "add_arguments",
    "build_tables",
    "run_command",
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

PAPER_STATISTICS: Final[tuple[tuple[str, str], ...]] = (
    ("dispersion", "Dispersion"),
    ("q", "Q"),
    ("i2_extra", "I²"),
)
"""The paper's three statistics and the private estimate its tables report (D'', Q'', I²''')."""


TABLE5_STATISTICS: Final[tuple[tuple[str, str], ...]] = (
    *PAPER_STATISTICS,
    ("i2", "I²'' (no 3rd noise)"),
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


def _skew(num_labels: int, heterogeneous: bool) -> SkewLevel:
    for skew in PAPER_SKEWS:
        if skew.num_labels == num_labels and skew.heterogeneous == heterogeneous:
            return skew
    raise KeyError((num_labels, heterogeneous))  # pragma: no cover - fixed table


# --------------------------------------------------------------------------------------------
# Table builders (pure functions of ExperimentResults; tested on hand-made results)
# --------------------------------------------------------------------------------------------


def _get(mapping: Mapping[str, float], key: str) -> float:
    return float(mapping.get(key, math.nan))


def _cell_or_none(
    result: ExperimentResult, epsilon: float, mechanism: str, placement: str, composition: str
) -> Any:
    try:
        cell = result.cell(epsilon, mechanism, placement, composition)
    except KeyError:
        return None
    return cell if cell.skipped is None else None


def statistic_table(
    result: ExperimentResult, statistic: str, title: str, name: str, *, epsilon: float
) -> Table:
    """Tables 1–3: EMSE, TMSE, CMSE (rows) × AGM, CGM, SD AGM, SD CGM (columns).

    Parameters
    ----------
    result
        The 1:…:1, 10-label run.
    statistic
        Statistic key (``"dispersion"``, ``"q"``, ``"i2_extra"``).
    title, name
        Table title and file stem.
    epsilon
        The fixed ε (the paper: 0.25).

    Returns
    -------
    Table
        SD columns are standard deviations over repeats of the per-repeat MSE; the CMSE is the
        EMSE of the central-placement cell.
    """
    values = np.full((3, 4), np.nan)
    for j, mechanism in enumerate(("agm", "cgm")):
        dist = _cell_or_none(result, epsilon, mechanism, "distributed", "basic")
        central = _cell_or_none(result, epsilon, mechanism, "central", "basic")
        if dist is not None:
            values[0, j], values[0, j + 2] = (
                _get(dist.emse, statistic),
                _get(dist.emse_sd, statistic),
            )
            values[1, j], values[1, j + 2] = (
                _get(dist.tmse, statistic),
                _get(dist.tmse_sd, statistic),
            )
        if central is not None:
            values[2, j], values[2, j + 2] = (
                _get(central.emse, statistic),
                _get(central.emse_sd, statistic),
            )
    return Table.from_array(
        name,
        title,
        ("EMSE", "TMSE", "CMSE"),
        ("AGM", "CGM", "SD AGM", "SD CGM"),
        values,
        row_header=f"ε = {epsilon:g}",
        note=(
            f"{result.name}: n = {result.n}, d = {result.d}, δ = {result.grid.delta:g}, "
            f"{result.grid.repeats} repeats, basic composition. EMSE/TMSE: distributed noise; "
            "TMSE = the paper's corollary evaluated on the realised noise; CMSE = EMSE with "
            "central noise. SD = standard deviation over repeats."
        ),
    )


def minimum_values_table(results: Mapping[SkewLevel, ExperimentResult]) -> Table:
    """Table 4: the true statistics per skew level and their minimum over the skews.

    Columns: coordinate average and coordinate minimum of D, Q and I² (true values, no noise).
    The last row is the minimum over the skew levels (the paper's one row per dataset).
    """
    keys = (("dispersion", "D"), ("q", "Q"), ("i2", "I²"))
    columns = [f"{label} (coord. mean)" for _, label in keys] + [
        f"{label} (coord. min)" for _, label in keys
    ]
    rows: list[list[float]] = []
    labels: list[str] = []
    for skew, result in results.items():
        labels.append(skew.label)
        rows.append(
            [_get(result.truth, k) for k, _ in keys]
            + [_get(result.truth, f"min_{k}") for k, _ in keys]
        )
    array = np.asarray(rows, dtype=np.float64).reshape(len(rows), len(columns))
    labels.append("minimum over skews")
    array = np.vstack([array, np.nanmin(array, axis=0, keepdims=True)]) if rows else array
    return Table.from_array(
        "table4_minimum_values",
        "Table 4: true values of the statistics (no noise)",
        labels,
        columns,
        array,
        row_header="sample",
        note=(
            "Coordinate mean / minimum over the d coordinates of the true statistic of each "
            "sample; Q is a sum over clients (Cochran's Q), I² = max(0, 1 − (n−1)/Q)."
        ),
    )


def _emse_series(result: ExperimentResult, statistic: str) -> FloatArray:
    return result.series("emse", statistic, mechanism="agm", placement="distributed")[1]


def _common_epsilons(a: ExperimentResult, b: ExperimentResult) -> None:
    if tuple(a.grid.epsilons) != tuple(b.grid.epsilons):
        raise ValueError(
            f"runs {a.name!r} and {b.name!r} have different ε grids; Table 5 needs the same grid"
        )


def _percentage_change_row(
    changed: ExperimentResult | None, reference: ExperimentResult | None
) -> list[float]:
    # One Table 5 row: mean over ε of the % change changed vs reference, per statistic;
    # NaN throughout when either experiment is missing.
    if changed is None or reference is None:
        return [math.nan] * len(TABLE5_STATISTICS)
    _common_epsilons(changed, reference)
    return [
        mean_percentage_change(_emse_series(changed, s), _emse_series(reference, s))
        for s, _ in TABLE5_STATISTICS
    ]


def percentage_change_tables(results: Mapping[SkewLevel, ExperimentResult]) -> tuple[Table, Table]:
    """Table 5(a) and 5(b): mean over ε of the percentage change of the AGM EMSE.

    (a) rows 10 / 5 / 2 labels: ``(EMSE_SH − EMSE_nonSH) / EMSE_nonSH · 100``;
    (b) rows "SH: 10v5", "SH: 5v2", "Non-SH: 10v5", "Non-SH: 5v2":
    ``(EMSE_fewer labels − EMSE_more labels) / EMSE_more labels · 100``.
    Each is computed per ε and then averaged over the ε grid (distributed noise, AGM, basic).
    Columns: the paper's D'', Q'', I²''' and our addition I²''.
    """
    columns = [label for _, label in TABLE5_STATISTICS]
    rows_a: list[list[float]] = []
    labels_a: list[str] = []
    for k in (10, 5, 2):
        labels_a.append(f"{k} labels")
        rows_a.append(
            _percentage_change_row(results.get(_skew(k, True)), results.get(_skew(k, False)))
        )
    rows_b: list[list[float]] = []
    labels_b: list[str] = []
    for heterogeneous in (True, False):
        for more, fewer in ((10, 5), (5, 2)):
            prefix = "SH" if heterogeneous else "Non-SH"
            labels_b.append(f"{prefix}: {more}v{fewer}")
            rows_b.append(
                _percentage_change_row(
                    results.get(_skew(fewer, heterogeneous)),
                    results.get(_skew(more, heterogeneous)),
                )
            )
    table_a = Table.from_array(
        "table5a_sh_vs_nonsh",
        "Table 5(a): % change of EMSE, non-SH sample → SH sample, averaged over ε",
        labels_a,
        columns,
        rows_a,
        row_header="labels",
        note=(
            "Sign convention: (EMSE_SH − EMSE_nonSH) / EMSE_nonSH × 100 at each ε, then the "
            "mean over the ε grid; negative = the heterogeneous sample has the smaller error. "
            "AGM, distributed noise, basic composition; I² = I²'''."
        ),
    )
    table_b = Table.from_array(
        "table5b_label_counts",
        "Table 5(b): % change of EMSE when the number of labels decreases, averaged over ε",
        labels_b,
        columns,
        rows_b,
        row_header="comparison",
        note=(
            'Sign convention: "10v5" = (EMSE_5 labels − EMSE_10 labels) / EMSE_10 labels × '
            "100 (likewise 5v2) at each ε, then the mean over the ε grid; negative = fewer "
            "labels, smaller error. AGM, distributed noise, basic composition."
        ),
    )
    return table_a, table_b


def ratio_tables(result: ExperimentResult, *, epsilon: float) -> tuple[Table, Table]:
    """Build the paper's ratio tables: (a) EMSE / TMSE per mechanism, (b) AGM / CGM."""
    columns = [label for _, label in PAPER_STATISTICS]
    emse_tmse = np.full((2, 3), np.nan)
    for i, mechanism in enumerate(("agm", "cgm")):
        cell = _cell_or_none(result, epsilon, mechanism, "distributed", "basic")
        if cell is not None:
            for j, (s, _) in enumerate(PAPER_STATISTICS):
                emse_tmse[i, j] = _get(cell.emse, s) / _get(cell.tmse, s)
    agm_cgm = np.full((4, 3), np.nan)
    agm_d = _cell_or_none(result, epsilon, "agm", "distributed", "basic")
    cgm_d = _cell_or_none(result, epsilon, "cgm", "distributed", "basic")
    agm_c = _cell_or_none(result, epsilon, "agm", "central", "basic")
    cgm_c = _cell_or_none(result, epsilon, "cgm", "central", "basic")
    for j, (s, _) in enumerate(PAPER_STATISTICS):
        if agm_d is not None and cgm_d is not None:
            agm_cgm[0, j] = _get(agm_d.emse, s) / _get(cgm_d.emse, s)
            agm_cgm[1, j] = _get(agm_d.tmse, s) / _get(cgm_d.tmse, s)
            agm_cgm[3, j] = _get(agm_d.expected_mse, s) / _get(cgm_d.expected_mse, s)
        if agm_c is not None and cgm_c is not None:
            agm_cgm[2, j] = _get(agm_c.emse, s) / _get(cgm_c.emse, s)
    note = f"{result.name}, ε = {epsilon:g}, δ = {result.grid.delta:g}; I² = I²'''."
    return (
        Table.from_array(
            "ratio_emse_tmse",
            "Ratio EMSE / TMSE (paper's TMSE on the realised noise)",
            ("AGM", "CGM"),
            columns,
            emse_tmse,
            row_header="mechanism",
            note=note
            + " TMSE = Cor. 3.5 (D), Cor. 3.11 (Q) and the paper's I² corollary as written, "
            "evaluated on the noise actually drawn (fa_hetdp.stats.metrics.paper_tmse); "
            "1 would mean "
            "the corollary predicts the error.",
        ),
        Table.from_array(
            "ratio_agm_cgm",
            "Ratio AGM / CGM",
            ("EMSE", "TMSE", "CMSE", "expected MSE"),
            columns,
            agm_cgm,
            row_header="metric",
            note=note
            + " 'expected MSE' = the ratio of the analytic expected MSEs (our addition), what "
            "the EMSE ratio should be.",
        ),
    )


def emse_overview_table(result: ExperimentResult) -> Table:
    """Our addition: EMSE of every release (AGM, distributed) at a few ε, beside the truth."""
    grid_eps = result.grid.epsilons
    picks = sorted({grid_eps[0], grid_eps[len(grid_eps) // 2], grid_eps[-1]})
    rows: list[list[float]] = []
    for s in result.statistics:
        truth_key = "i2" if s == "i2_extra" else s
        row = [_get(result.truth, truth_key)]
        for eps in picks:
            cell = _cell_or_none(result, eps, "agm", "distributed", "basic")
            row.append(_get(cell.emse, s) if cell is not None else math.nan)
        rows.append(row)
    return Table.from_array(
        "emse_overview",
        "EMSE of every release against the size of the true value (AGM, distributed)",
        [STATISTIC_LABELS[s] for s in result.statistics],
        ["true value (coord. mean)", *(f"EMSE ε={e:g}" for e in picks)],
        rows,
        row_header="statistic",
        note=(
            f"{result.name}: n = {result.n}, d = {result.d}, δ = {result.grid.delta:g}, "
            f"profile {result.grid.profile}. An EMSE above the squared true value means the "
            "release is dominated by noise."
        ),
    )


def _finite_min_max(values: Sequence[float]) -> tuple[float, float]:
    finite = [v for v in values if math.isfinite(v)]
    return (min(finite), max(finite)) if finite else (math.nan, math.nan)


def expected_ratio_table(result: ExperimentResult, *, epsilon: float) -> Table:
    """Our addition: EMSE / analytic expected MSE per statistic, at ``epsilon`` and over ε.

    Columns: each mechanism × placement at ``epsilon``, then the minimum and maximum of the
    AGM distributed ratio over the whole ε grid.
    """
    columns: list[str] = []
    data: list[list[float]] = []
    for mechanism in ("agm", "cgm"):
        for placement in ("distributed", "central"):
            cell = _cell_or_none(result, epsilon, mechanism, placement, "basic")
            if cell is None:
                continue
            columns.append(f"{mechanism.upper()} {placement}")
            data.append([_get(cell.ratio("emse", "expected_mse"), s) for s in result.statistics])
    lows: list[float] = []
    highs: list[float] = []
    for s in result.statistics:
        per_eps = []
        for eps in result.grid.epsilons:
            cell = _cell_or_none(result, eps, "agm", "distributed", "basic")
            if cell is not None:
                per_eps.append(_get(cell.ratio("emse", "expected_mse"), s))
        lo, hi = _finite_min_max(per_eps)
        lows.append(lo)
        highs.append(hi)
    columns.extend(["AGM distributed, min over ε", "AGM distributed, max over ε"])
    data.extend([lows, highs])
    values = np.asarray(data, dtype=np.float64).T
    return Table.from_array(
        "ratio_emse_expected",
        f"EMSE / analytic expected MSE at ε = {epsilon:g} (≈ 1 when the error model is right)",
        [STATISTIC_LABELS[s] for s in result.statistics],
        columns,
        values,
        row_header="statistic",
        note=(
            f"{result.name}: expected MSE from fa_hetdp.stats.metrics.expected_mse "
            "(exact for μ' and "
            "D''; delta method for μ̄', Q'', I²). Monte-Carlo relative standard error of a ratio "
            f"≈ SD / (EMSE · √{result.grid.repeats}). The last two columns give the range of the "
            "AGM distributed ratio over the ε grid."
        ),
    )


def distributed_central_table(result: ExperimentResult, *, epsilon: float) -> Table:
    """Our addition: distributed / central EMSE with a 95 % delta-method interval."""
    rows: list[list[float]] = []
    labels: list[str] = []
    for s in result.statistics:
        row: list[float] = []
        for mechanism in ("agm", "cgm"):
            dist = _cell_or_none(result, epsilon, mechanism, "distributed", "basic")
            central = _cell_or_none(result, epsilon, mechanism, "central", "basic")
            if dist is None or central is None:
                row.extend([math.nan] * 4)
                continue
            iv = ratio_confidence_interval(
                _get(dist.emse, s),
                _get(dist.emse_sd, s),
                dist.repeats,
                _get(central.emse, s),
                _get(central.emse_sd, s),
                central.repeats,
            )
            pooled = []
            for eps in result.grid.epsilons:
                d2 = _cell_or_none(result, eps, mechanism, "distributed", "basic")
                c2 = _cell_or_none(result, eps, mechanism, "central", "basic")
                if d2 is not None and c2 is not None:
                    pooled.append(_get(d2.emse, s) / _get(c2.emse, s))
            row.extend(
                [iv.ratio, iv.low, iv.high, float(np.nanmean(pooled)) if pooled else math.nan]
            )
        rows.append(row)
        labels.append(STATISTIC_LABELS[s])
    columns = []
    for mechanism in ("AGM", "CGM"):
        columns.extend(
            [
                f"{mechanism} ratio (ε={epsilon:g})",
                f"{mechanism} 95% low",
                f"{mechanism} 95% high",
                f"{mechanism} mean over ε",
            ]
        )
    return Table.from_array(
        "ratio_distributed_central",
        "Distributed / central noise: EMSE ratio (1 = same accuracy)",
        labels,
        columns,
        rows,
        row_header="statistic",
        note=(
            "Delta-method 95 % interval on the log ratio of two independent Monte-Carlo means. "
            "The summed distributed noise has the same distribution as the central noise, so "
            "the ratio should be 1 up to Monte-Carlo error."
        ),
    )


def composition_table(result: ExperimentResult) -> Table:
    """Our addition: basic against exact (gdp) composition, AGM, distributed noise, per ε."""
    rows: list[list[float]] = []
    labels: list[str] = []
    for eps in result.grid.epsilons:
        basic = _cell_or_none(result, eps, "agm", "distributed", "basic")
        gdp = _cell_or_none(result, eps, "agm", "distributed", "gdp")
        if basic is None or gdp is None:
            continue
        labels.append(f"{eps:g}")
        row = [
            _get(basic.sigmas, "dispersion"),
            _get(gdp.sigmas, "dispersion"),
            _get(basic.sigmas, "dispersion") / _get(gdp.sigmas, "dispersion"),
        ]
        for s in ("dispersion", "q", "i2"):
            row.append(_get(basic.emse, s) / _get(gdp.emse, s))
        row.extend([basic.spent_epsilon, gdp.spent_epsilon])
        rows.append(row)
    columns = (
        "σ_D basic",
        "σ_D gdp",
        "σ ratio basic/gdp",
        "EMSE D'' basic/gdp",
        "EMSE Q'' basic/gdp",
        "EMSE I²'' basic/gdp",
        "ε spent basic (exact)",
        "ε spent gdp (exact)",
    )
    return Table.from_array(
        "composition_basic_gdp",
        "Basic (Σε_k, Σδ_k) against exact Gaussian-DP composition (AGM, distributed)",
        labels,
        columns,
        np.asarray(rows, dtype=np.float64).reshape(len(rows), len(columns)),
        row_header="ε",
        note=(
            "Same total (ε, δ); σ of the D'' release. 'ε spent' is the total privacy of the "
            "whole run under exact composition (Dong-Roth-Su Cor. 3.3) at the target δ: basic "
            "composition spends less than its nominal ε, i.e. it over-noises."
        ),
    )


def coverage_table(result: ExperimentResult, *, epsilon: float) -> Table:
    """Our addition: empirical coverage of the paper's and of our 95 % intervals."""
    stats = [s for s in result.statistics]
    columns: list[str] = []
    data: list[list[float]] = []
    for mechanism in ("agm", "cgm"):
        cell = _cell_or_none(result, epsilon, mechanism, "distributed", "basic")
        if cell is None:
            continue
        for attr, who in (("coverage_paper", "paper"), ("coverage_noise", "ours")):
            columns.append(f"{who} {mechanism.upper()} (ε={epsilon:g})")
            data.append([_get(getattr(cell, attr), s) for s in stats])
            per_eps = []
            for eps in result.grid.epsilons:
                c2 = _cell_or_none(result, eps, mechanism, "distributed", "basic")
                if c2 is not None:
                    per_eps.append([_get(getattr(c2, attr), s) for s in stats])
            columns.append(f"{who} {mechanism.upper()} (min over ε)")
            arr = np.asarray(per_eps, dtype=np.float64)
            with np.errstate(all="ignore"):
                mins = (
                    np.nanmin(np.where(np.isnan(arr), np.inf, arr), axis=0)
                    if arr.size
                    else np.full(len(stats), np.nan)
                )
            data.append([float(v) if np.isfinite(v) else math.nan for v in mins])
    values = np.asarray(data, dtype=np.float64).T if data else np.zeros((len(stats), 0))
    return Table.from_array(
        "ci_coverage",
        "Empirical coverage of nominal 95 % confidence intervals",
        [STATISTIC_LABELS[s] for s in stats],
        columns,
        values,
        row_header="statistic",
        note=(
            "Fraction of (repeat, coordinate) pairs whose interval contains the true value. "
            "'paper' = Thm 3.6 (D), 3.9 (Q), 3.14 (I²) as written; 'ours' = intervals from the "
            "public noise distribution (fa_hetdp.stats.metrics.noise_confidence_intervals). — = no "
            "interval defined for that statistic."
        ),
    )


def figure1_panels(
    results: Mapping[SkewLevel, ExperimentResult], statistics: Sequence[tuple[str, str]]
) -> dict[str, dict[str, tuple[FloatArray, FloatArray]]]:
    """Figure 1 data: ``{statistic: {skew label: (ε, EMSE)}}`` for AGM, distributed, basic."""
    panels: dict[str, dict[str, tuple[FloatArray, FloatArray]]] = {}
    for s, label in statistics:
        panels[label] = {
            skew.label: result.series("emse", s, mechanism="agm", placement="distributed")
            for skew, result in results.items()
        }
    return panels


def build_tables(
    results: Mapping[SkewLevel, ExperimentResult], *, epsilon: float = PAPER_FIXED_EPSILON
) -> list[Table]:
    """Every table of the reproduction, in report order.

    Parameters
    ----------
    results
        One run per skew level; the 10-label 1:…:1 run (the paper's Tables 1–3 setting) must be
        present.
    epsilon
        The fixed ε of Tables 1–3 and the ratio tables.

    Returns
    -------
    list of Table
    """
    base = results.get(PAPER_SKEWS[0])
    if base is None:
        raise ValueError("the 10-label 1:…:1 run is required (the setting of Tables 1–3)")
    tables = [
        statistic_table(
            base, "dispersion", "Table 1: dispersion D''", "table1_dispersion", epsilon=epsilon
        ),
        statistic_table(base, "q", "Table 2: Q''", "table2_q", epsilon=epsilon),
        statistic_table(base, "i2_extra", "Table 3: I²'''", "table3_i2", epsilon=epsilon),
        minimum_values_table(results),
        *percentage_change_tables(results),
        *ratio_tables(base, epsilon=epsilon),
        emse_overview_table(base),
        expected_ratio_table(base, epsilon=epsilon),
        distributed_central_table(base, epsilon=epsilon),
        composition_table(base),
        coverage_table(base, epsilon=epsilon),
    ]
    return tables


# --------------------------------------------------------------------------------------------
# Running the reproduction
# --------------------------------------------------------------------------------------------


def _normalised(ratios: Sequence[float]) -> tuple[float, ...]:
    total = float(sum(ratios))
    return tuple(round(float(r) / total, 9) for r in ratios)


def find_skew_scenarios(dataset: str) -> dict[SkewLevel, Any]:
    """Find the shipped scenarios of ``dataset`` for the paper's six skew levels.

    The scenario of a skew level is the shipped file named ``<dataset>-iid<k>.toml`` (1:…:1 over
    ``k`` labels) or ``<dataset>-skew<k>.toml`` (91:1:…:1, 96:1:1:1:1, 99:1), in any folder of
    ``scenarios/``; its ``data.dataset`` and ``data.label_ratios`` must match the skew level.

    Parameters
    ----------
    dataset
        ``"digits"``, ``"cifar10"``, ``"cifar100"`` or ``"fashion-mnist"``.

    Returns
    -------
    dict
        ``{SkewLevel: Scenario}`` for all six levels, in the paper's order.

    Raises
    ------
    ScenarioError
        A skew level has no shipped scenario, or one that does not match (the message says
        which).
    """
    from fa_hetdp.config.scenario import available_scenarios, load_scenario
    from fa_hetdp.errors import ScenarioError

    names = {name.rsplit("/", 1)[-1]: name for name in available_scenarios()}
    found: dict[SkewLevel, Any] = {}
    problems: list[str] = []
    for skew in PAPER_SKEWS:
        stem = f"{dataset}-{'skew' if skew.heterogeneous else 'iid'}{skew.num_labels}"
        if stem not in names:
            problems.append(f"{skew.label}: no shipped scenario named {stem}.toml")
            continue
        scenario = load_scenario(names[stem])
        ratios = scenario.data.label_ratios
        if (
            scenario.data.dataset != dataset
            or ratios is None
            or (_normalised(ratios) != _normalised(skew.ratios))
        ):
            problems.append(
                f"{skew.label}: {names[stem]} has dataset {scenario.data.dataset!r} and label "
                f"ratios {ratios}"
            )
            continue
        found[skew] = scenario
    if problems:
        raise ScenarioError(
            f"the reproduction of {dataset!r} needs the six skew scenarios: " + "; ".join(problems)
        )
    return found


def _with_root(scenario: Any, root: str | None) -> Any:
    from dataclasses import replace

    if root is None or scenario.data.dataset == "digits":
        return scenario
    return replace(scenario, data=replace(scenario.data, root=root))


def run_reproduction(
    dataset: str = "digits",
    *,
    root: str | None = None,
    quick: bool = False,
    repeats: int | None = None,
    profile: Profile | None = None,
    progress: bool | None = None,
) -> dict[SkewLevel, ExperimentResult]:
    """Run the six skew scenarios of ``dataset`` on the paper's grid.

    Every skew runs ε ∈ {0.25, …, 5} (``quick``: 0.25, 1, 5) × {AGM, CGM} × {distributed,
    central} with basic composition and δ = 1e-5; the 10-label 1:…:1 run also runs exact (gdp)
    composition for the AGM. The scenarios' seeds, client counts and variance floor are used
    as shipped.

    Parameters
    ----------
    dataset
        Dataset name.
    root
        Data directory for the paper's datasets (torchvision layout).
    quick
        Few repeats and ε values (CI smoke test).
    repeats
        Repeats per cell (default 100, ``quick``: 20).
    profile
        Sensitivity profile (default: the scenarios', ``"bounded"``); ``"paper"`` uses the
        paper's sensitivities (labelled: not DP for the weighted stages).
    progress
        Show progress bars (default: when stderr is a terminal).

    Returns
    -------
    dict
        ``{SkewLevel: ExperimentResult}`` in the paper's order.

    Raises
    ------
    ScenarioError, DatasetError
        Missing scenarios or data files, raised before any measurement.
    """
    from fa_hetdp.data.partition import partition_scenario
    from fa_hetdp.experiments.engine import GridSpec, run_scenario

    if dataset not in DATASETS:
        from fa_hetdp.errors import DatasetError

        raise DatasetError(f"unknown dataset {dataset!r}; allowed: {', '.join(DATASETS)}")
    scenarios = {k: _with_root(v, root) for k, v in find_skew_scenarios(dataset).items()}
    for scenario in scenarios.values():
        partition_scenario(scenario)  # loads the data: missing files fail here, before any work
    eps = QUICK_EPSILONS if quick else PAPER_EPSILONS
    count = repeats if repeats is not None else (QUICK_REPEATS if quick else FULL_REPEATS)
    results: dict[SkewLevel, ExperimentResult] = {}
    for skew, scenario in scenarios.items():
        privacy = scenario.privacy
        grid = GridSpec(
            epsilons=eps,
            delta=PAPER_DELTA,
            mechanisms=("agm", "cgm"),
            placements=("distributed", "central"),
            compositions=("basic", "gdp") if skew == PAPER_SKEWS[0] else ("basic",),
            repeats=count,
            seed=int(scenario.experiment.seed),
            profile=profile if profile is not None else privacy.profile,
            variance_floor=float(privacy.variance_floor),
            extra_i2_noise=True,
            min_honest_clients=privacy.min_honest_clients,
            split=privacy.split_mapping(),
        )
        results[skew] = run_scenario(scenario, progress=progress, grid=grid)
    return results


def write_reproduction(
    results: Mapping[SkewLevel, ExperimentResult],
    out: str | os.PathLike[str],
    *,
    dataset: str,
    quick: bool,
    per_skew_outputs: bool = True,
) -> list[Path]:
    """Write every table (CSV + Markdown), Figure 1, ``REPORT.md`` and ``reproduce.json``.

    Parameters
    ----------
    results
        One run per skew level.
    out
        Output folder.
    dataset
        Dataset name (for titles).
    quick
        Whether this was a ``--quick`` run (stated in the report).
    per_skew_outputs
        Also write each run's ``results.json``, ``cells.csv`` and EMSE tables into
        ``out/<skew slug>/`` (no per-run figures: Figure 1 shows every run).

    Returns
    -------
    list of Path
        The files written.
    """
    from fa_hetdp.experiments.engine import write_outputs

    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    tables = build_tables(results)
    written: list[Path] = []
    for table in tables:
        written.extend(write_table(table, folder))
    base = results[PAPER_SKEWS[0]]
    fig_title = (
        f"Figure 1 ({dataset}): EMSE of the AGM vs ε, distributed noise "
        f"(n = {base.n}, d = {base.d}, δ = {base.grid.delta:g}, {base.grid.repeats} repeats)"
    )
    written.append(
        plot_emse_vs_epsilon(
            figure1_panels(results, PAPER_STATISTICS), folder / "figure1.png", title=fig_title
        )
    )
    written.append(
        plot_emse_vs_epsilon(
            figure1_panels(
                results, (("mean", "μ'"), ("weighted_mean", "μ̄'"), ("i2", "I²'' (no 3rd noise)"))
            ),
            folder / "figure1_extra.png",
            title=f"EMSE of the other releases ({dataset}), AGM, distributed noise",
        )
    )
    if per_skew_outputs:
        for skew, result in results.items():
            written.extend(write_outputs(result, folder / skew.slug, figures=False))
    lines = [
        f"# fa-hetdp reproduction: {dataset}{' (--quick)' if quick else ''}",
        "",
        f"Six label-skew samples; n = {base.n} clients, d = {base.d}; δ = {base.grid.delta:g} "
        "(the δ of the published numbers; Section 4's text says 0.1); ε grid "
        f"{', '.join(f'{e:g}' for e in base.grid.epsilons)}; {base.grid.repeats} repeats per "
        f"cell; tables at ε = {PAPER_FIXED_EPSILON:g}; sensitivity profile "
        f"{base.grid.profile!r}. I² = I²''' (the paper's third noise stage) in the paper's "
        "tables.",
        "",
        "Clients per label: "
        + "; ".join(
            f"{skew.label}: {r.metadata.get('clients_per_label', '?')}"
            for skew, r in results.items()
        ),
        "",
        "![Figure 1](figure1.png)",
        "",
    ]
    for table in tables:
        lines.append(table.to_markdown())
    report = folder / "REPORT.md"
    report.write_text("\n".join(lines), encoding="utf-8")
    written.append(report)
    payload = {
        "dataset": dataset,
        "quick": quick,
        "fixed_epsilon": PAPER_FIXED_EPSILON,
        "runs": {skew.slug: r.to_dict() for skew, r in results.items()},
        "tables": {
            t.name: {
                "title": t.title,
                "rows": list(t.row_labels),
                "columns": list(t.column_labels),
                "values": [list(row) for row in t.values],
                "note": t.note,
            }
            for t in tables
        },
    }
    written.append(write_json_atomic(folder / "reproduce.json", payload))
    return written


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``fa-hetdp reproduce [--dataset D] [--root DIR] [--quick] [--out DIR]``."""
    parser.add_argument(
        "--dataset",
        choices=DATASETS,
        default="digits",
        help="dataset (default: the embedded digits; the paper's need their files under --root)",
    )
    parser.add_argument(
        "--root",
        default=None,
        help="data directory in torchvision's layout (default: $FA_HETDP_DATA or ./data)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"{QUICK_REPEATS} repeats and ε in {{0.25, 1, 5}} (smoke test)",
    )
    parser.add_argument(
        "--repeats", type=int, default=None, help=f"repeats per cell (default {FULL_REPEATS})"
    )
    parser.add_argument(
        "--out",
        default=None,
        help="output folder (default: results/reproduce-<dataset>[-paper-profile][-quick])",
    )
    parser.add_argument(
        "--profile",
        choices=("bounded", "paper"),
        default=None,
        help="sensitivity profile (default: the scenarios' 'bounded'; 'paper' = the paper's "
        "sensitivities, a labelled baseline that is not DP for the weighted stages)",
    )
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bars")


def run_command(args: argparse.Namespace) -> int:
    """Run ``fa-hetdp reproduce``; prints Tables 1–3 and where everything was written."""
    from fa_hetdp.errors import ScenarioError

    if args.repeats is not None and args.repeats < 2:
        raise ScenarioError(f"--repeats must be >= 2 (standard deviations), got {args.repeats}")
    started = time.perf_counter()
    results = run_reproduction(
        args.dataset,
        root=args.root,
        quick=args.quick,
        repeats=args.repeats,
        profile=args.profile,
        progress=False if args.no_progress else None,
    )
    suffix = ("-paper-profile" if args.profile == "paper" else "") + (
        "-quick" if args.quick else ""
    )
    out = Path(args.out) if args.out else Path("results") / f"reproduce-{args.dataset}{suffix}"
    written = write_reproduction(results, out, dataset=args.dataset, quick=args.quick)
    for table in build_tables(results)[:3]:
        print(table.to_markdown())
    print(
        f"{len(written)} files written to {out} in {time.perf_counter() - started:.1f} s "
        f"(see {out / 'REPORT.md'})",
        file=sys.stdout,
    )
    return 0
