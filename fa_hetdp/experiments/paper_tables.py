"""The paper's tables (1–5, the ratio tables, Figure 1's data) and our additional tables.

Pure functions of :class:`fa_hetdp.experiments.results.ExperimentResult` objects (tested on
hand-made results); :func:`build_tables` builds them all for ``fa-hetdp reproduce``
(:mod:`fa_hetdp.experiments.reproduce` lists every table).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from fa_hetdp._types import FloatArray
from fa_hetdp.experiments.paper import (
    PAPER_COLUMNS,
    PAPER_FIXED_EPSILON,
    PAPER_SKEWS,
    TABLE5_STATISTICS,
    SkewLevel,
    skew_level,
)
from fa_hetdp.experiments.results import ExperimentResult
from fa_hetdp.registry import paper_label
from fa_hetdp.report.tables import Table, mean_percentage_change, ratio_confidence_interval

__all__ = [
    "build_tables",
    "composition_table",
    "coverage_table",
    "distributed_central_table",
    "emse_overview_table",
    "expected_ratio_table",
    "figure1_panels",
    "minimum_values_table",
    "percentage_change_tables",
    "ratio_tables",
    "statistic_table",
]


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
            _percentage_change_row(
                results.get(skew_level(k, True)), results.get(skew_level(k, False))
            )
        )
    rows_b: list[list[float]] = []
    labels_b: list[str] = []
    for heterogeneous in (True, False):
        for more, fewer in ((10, 5), (5, 2)):
            prefix = "SH" if heterogeneous else "Non-SH"
            labels_b.append(f"{prefix}: {more}v{fewer}")
            rows_b.append(
                _percentage_change_row(
                    results.get(skew_level(fewer, heterogeneous)),
                    results.get(skew_level(more, heterogeneous)),
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
    columns = [label for _, label in PAPER_COLUMNS]
    emse_tmse = np.full((2, 3), np.nan)
    for i, mechanism in enumerate(("agm", "cgm")):
        cell = _cell_or_none(result, epsilon, mechanism, "distributed", "basic")
        if cell is not None:
            for j, (s, _) in enumerate(PAPER_COLUMNS):
                emse_tmse[i, j] = _get(cell.emse, s) / _get(cell.tmse, s)
    agm_cgm = np.full((4, 3), np.nan)
    agm_d = _cell_or_none(result, epsilon, "agm", "distributed", "basic")
    cgm_d = _cell_or_none(result, epsilon, "cgm", "distributed", "basic")
    agm_c = _cell_or_none(result, epsilon, "agm", "central", "basic")
    cgm_c = _cell_or_none(result, epsilon, "cgm", "central", "basic")
    for j, (s, _) in enumerate(PAPER_COLUMNS):
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
            "evaluated on the noise actually drawn (fa_hetdp.accuracy.metrics.paper_tmse); "
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
        [paper_label(s) for s in result.statistics],
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
        [paper_label(s) for s in result.statistics],
        columns,
        values,
        row_header="statistic",
        note=(
            f"{result.name}: expected MSE from fa_hetdp.accuracy.metrics.expected_mse "
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
        labels.append(paper_label(s))
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
        row.extend(  # no ε for a cell that is not DP (the paper profile): NaN prints "—"
            [math.nan if c.spent_epsilon is None else c.spent_epsilon for c in (basic, gdp)]
        )
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
            "composition spends less than its nominal ε, i.e. it over-noises. A dash (—) in "
            "an 'ε spent' column: the setting is not DP (the paper profile), so no ε is stated."
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
        [paper_label(s) for s in stats],
        columns,
        values,
        row_header="statistic",
        note=(
            "Fraction of (repeat, coordinate) pairs whose interval contains the true value. "
            "'paper' = Thm 3.6 (D), 3.9 (Q), 3.14 (I²) as written; 'ours' = intervals from the "
            "public noise distribution (fa_hetdp.accuracy.metrics.noise_confidence_intervals). "
            "— = no interval defined for that statistic."
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
