"""Files of a grid run: ``results.json``, ``cells.csv``, EMSE tables and figures.

:func:`write_outputs` writes into ``results/<scenario>/``: ``results.json`` (everything, written
atomically by :func:`fa_hetdp.report.files.write_json_atomic`), ``cells.csv`` (one row per
cell), ``emse_<placement>.csv/.md`` (EMSE tables) and PNG figures (EMSE against ε,
EMSE / expected MSE against ε).

When a result file cannot be written after all (the disk filled up, a permission changed during
the run), :func:`keep_result` saves the computed result elsewhere and says where, so that
``fa-hetdp reproduce`` and ``fa-hetdp bench-noise`` lose nothing.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import numpy as np

from fa_hetdp._types import FloatArray
from fa_hetdp.experiments.results import ExperimentResult
from fa_hetdp.registry import statistic
from fa_hetdp.report.files import json_ready, write_json_atomic, write_text_atomic
from fa_hetdp.report.tables import Table, plot_emse_vs_epsilon, write_table

__all__ = [
    "CELL_CSV_FIXED_COLUMNS",
    "cells_csv",
    "emse_tables",
    "keep_result",
    "table_payload",
    "write_outputs",
]


CELL_CSV_FIXED_COLUMNS: Final[tuple[str, ...]] = (
    "epsilon",
    "mechanism",
    "placement",
    "composition",
    "repeats",
    "skipped",
    "is_baseline",
    "spent_epsilon",
    "spent_delta",
)
_CELL_CSV_METRICS: Final[tuple[str, ...]] = (
    "emse",
    "emse_sd",
    "expected_mse",
    "tmse",
    "tmse_sd",
    "cmse",
    "coverage_paper",
    "coverage_noise",
)


def cells_csv(result: ExperimentResult) -> str:
    """One CSV row per cell: settings, per-statistic metrics, σ per release, labels."""
    import csv
    import io

    releases = sorted({k for c in result.cells for k in c.sigmas})
    metric_columns = [f"{m}_{s}" for m in _CELL_CSV_METRICS for s in result.statistics]
    ratio_columns = [
        f"{r}_{s}"
        for r in ("emse_over_expected", "emse_over_tmse", "emse_over_cmse")
        for s in result.statistics
    ]
    header = [
        *CELL_CSV_FIXED_COLUMNS,
        *metric_columns,
        *ratio_columns,
        *(f"sigma_{r}" for r in releases),
        "labels",
    ]
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    for c in result.cells:
        row: list[Any] = [
            c.epsilon,
            c.mechanism,
            c.placement,
            c.composition,
            c.repeats,
            c.skipped or "",
            int(c.is_baseline),
            "" if c.spent_epsilon is None else repr(c.spent_epsilon),  # empty: not DP
            "" if c.spent_delta is None else repr(c.spent_delta),
        ]
        for metric in _CELL_CSV_METRICS:
            mapping: Mapping[str, float] = getattr(c, metric)
            row.extend(repr(float(mapping.get(s, math.nan))) for s in result.statistics)
        for num, den in (("emse", "expected_mse"), ("emse", "tmse"), ("emse", "cmse")):
            ratios = c.ratio(num, den)
            row.extend(repr(ratios.get(s, math.nan)) for s in result.statistics)
        row.extend(repr(float(c.sigmas.get(r, math.nan))) for r in releases)
        row.append("; ".join(c.labels))
        writer.writerow(row)
    return buffer.getvalue()


def _line_label(mechanism: str, placement: str, composition: str, result: ExperimentResult) -> str:
    parts = [mechanism.upper()]
    if len(result.grid.placements) > 1:
        parts.append(placement)
    if len(result.grid.compositions) > 1:
        parts.append(composition)
    return " ".join(parts)


def emse_tables(result: ExperimentResult) -> list[Table]:
    """EMSE per ε (rows) and statistic × mechanism × composition (columns), per placement."""
    tables: list[Table] = []
    for placement in result.grid.placements:
        columns: list[str] = []
        data: list[FloatArray] = []
        for mechanism in result.grid.mechanisms:
            for composition in result.grid.compositions:
                for s in result.statistics:
                    _, values = result.series(
                        "emse", s, mechanism=mechanism, placement=placement, composition=composition
                    )
                    columns.append(
                        f"{statistic(s).label} {mechanism.upper()}"
                        + (f" {composition}" if len(result.grid.compositions) > 1 else "")
                    )
                    data.append(values)
        eps = [f"{e:g}" for e in result.grid.epsilons]
        tables.append(
            Table.from_array(
                f"emse_{placement}",
                f"{result.name}: EMSE, {placement} noise (n={result.n}, d={result.d}, "
                f"δ={result.grid.delta:g}, {result.grid.repeats} repeats)",
                eps,
                columns,
                np.column_stack(data),
                row_header="ε",
                note="EMSE = mean over repeats of the coordinate-mean squared error (Section 4).",
            )
        )
    return tables


def write_outputs(
    result: ExperimentResult,
    directory: str | os.PathLike[str] | None = None,
    *,
    figures: bool = True,
) -> list[Path]:
    """Write ``results.json``, ``cells.csv``, EMSE tables and figures into ``directory``.

    Parameters
    ----------
    result
        The run.
    directory
        Output folder; default ``results/<result.name>`` under the working directory. Created
        if missing.
    figures
        Also draw ``emse_vs_epsilon.png`` and ``emse_over_expected.png`` (about a second
        each).

    Returns
    -------
    list of Path
        Every file written.
    """
    folder = Path(directory) if directory is not None else Path("results") / result.name
    folder.mkdir(parents=True, exist_ok=True)
    written = [write_json_atomic(folder / "results.json", result.to_dict())]
    written.append(write_text_atomic(folder / "cells.csv", cells_csv(result)))
    for table in emse_tables(result):
        written.extend(write_table(table, folder))
    if not figures:
        return written
    plotted = [s for s in ("dispersion", "q", "i2", "i2_extra") if s in result.statistics]
    lines = [
        (m, p, c)
        for m in result.grid.mechanisms
        for p in result.grid.placements
        for c in result.grid.compositions
        if result.grid.skip_reason(m, c) is None
    ]
    for metric, stem, ylabel in (
        ("emse", "emse_vs_epsilon", "EMSE"),
        ("emse_over_expected", "emse_over_expected", "EMSE / expected MSE"),
    ):
        panels: dict[str, dict[str, tuple[FloatArray, FloatArray]]] = {}
        for s in plotted:
            panel: dict[str, tuple[FloatArray, FloatArray]] = {}
            for m, p, c in lines:
                if metric == "emse":
                    eps, values = result.series("emse", s, mechanism=m, placement=p, composition=c)
                else:
                    eps, top = result.series("emse", s, mechanism=m, placement=p, composition=c)
                    _, bottom = result.series(
                        "expected_mse", s, mechanism=m, placement=p, composition=c
                    )
                    with np.errstate(divide="ignore", invalid="ignore"):
                        values = top / bottom
                panel[_line_label(m, p, c, result)] = (eps, values)
            panels[statistic(s).label] = panel
        written.append(
            plot_emse_vs_epsilon(
                panels,
                folder / f"{stem}.png",
                title=f"{result.name}: {ylabel} vs ε (n={result.n}, d={result.d})",
                ylabel=ylabel,
            )
        )
    return written


def table_payload(table: Table) -> dict[str, Any]:
    """Return a table as a JSON-ready dict: title, row and column labels, values, note."""
    return {
        "title": table.title,
        "rows": list(table.row_labels),
        "columns": list(table.column_labels),
        "values": [list(row) for row in table.values],
        "note": table.note,
    }


def keep_result(
    payload: Mapping[str, Any], *, command: str, error: OSError, target: str | os.PathLike[str]
) -> int:
    """Keep a computed result whose files could not be written; say where on one line.

    ``payload`` goes to a new ``fa-hetdp-<command>-*.json`` in the temporary directory (else in
    the current directory); if neither can be written, it is printed on stdout as JSON. One
    line on stderr names the file that failed, the operating system's reason and where the
    result is.

    Parameters
    ----------
    payload
        The whole result (what the command's JSON file holds).
    command
        The subcommand, e.g. ``"reproduce"``.
    error
        The failed write.
    target
        The folder the command was writing to (named when ``error`` names no file).

    Returns
    -------
    int
        The exit code, 1: the command did not write what it was asked to.
    """
    where = error.filename2 or error.filename or target  # filename2: os.replace's target
    failed = f"cannot write {where} ({error.strerror or error})"
    for folder in (Path(tempfile.gettempdir()), Path.cwd()):
        name = ""
        try:
            handle, name = tempfile.mkstemp(
                prefix=f"fa-hetdp-{command}-", suffix=".json", dir=folder
            )
            os.close(handle)
            kept = write_json_atomic(name, payload)
        except OSError:
            if name:
                with contextlib.suppress(OSError):
                    os.unlink(name)
            continue
        print(f"fa-hetdp {command}: {failed}; the result is in {kept}", file=sys.stderr)
        return 1
    print(f"fa-hetdp {command}: {failed}; no fallback file either, the result is on stdout",
          file=sys.stderr)  # fmt: skip
    print(json.dumps(json_ready(payload), ensure_ascii=False, allow_nan=False))
    return 1
