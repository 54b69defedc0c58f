"""``fa-hetdp check-data PATH``: a data owner's pre-flight check of the file its node will read.

The checks live in :mod:`fa_hetdp.data.check` (the ClientApp runs the same ones through
:func:`~fa_hetdp.data.check.load_checked_records`); this module is the command: its arguments
and what it prints. ``--dim`` is the dimension ``d`` the run expects. The run's columns and
their public bounds come from ``--columns``/``--bounds`` or from a scenario file's ``[data]
columns`` and ``bounds`` (``--scenario``; the flags win); with columns, the file is a CSV with
a header row (or ``.parquet``, with pyarrow), read by name, clipped into the bounds and scaled
to ``[0, 1]``. Everything printed here stays with the data owner (the details: values,
positions, the file's own header); only the public texts ever leave a node.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fa_hetdp.data.check import (
    DataCheckError,
    DataProblem,
    inspect,
    inspect_data,
    load_checked,
)
from fa_hetdp.data.tables import parse_bounds, parse_columns
from fa_hetdp.errors import ScenarioError

__all__ = [
    "DataCheckError",
    "DataProblem",
    "add_arguments",
    "inspect_data",
    "load_checked",
    "run_command",
]


def _columns(text: str) -> tuple[str, ...]:
    try:
        return parse_columns(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _bounds(text: str) -> dict[str, tuple[float, float]]:
    try:
        return parse_bounds(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the arguments of ``fa-hetdp check-data``."""
    parser.add_argument(
        "path",
        type=Path,
        help="the data file the node will read (.npy or headerless .csv; with the run's "
        "columns: a .csv with a header row, or .parquet)",
    )
    parser.add_argument(
        "--dim", type=int, default=None, help="the dimension d the run expects (default: any)"
    )
    parser.add_argument(
        "--columns",
        type=_columns,
        default=None,
        metavar="A,B",
        help="the run's columns, read by name from the file's header (default: the "
        "scenario's [data] columns, else none: a file without header)",
    )
    parser.add_argument(
        "--bounds",
        type=_bounds,
        default=None,
        metavar="A=LOW:HIGH,...",
        help="public bounds of columns: values are clipped into them and scaled to [0, 1] "
        "(default: the scenario's [data] bounds; a column without bounds must lie in [0, 1])",
    )
    parser.add_argument(
        "--scenario",
        default=None,
        metavar="FILE",
        help="a scenario (name or TOML file) whose [data] columns and bounds the run uses",
    )


def run_command(args: argparse.Namespace) -> int:
    """Run ``fa-hetdp check-data``; 0 if the file passes, 1 with every problem otherwise."""
    columns: tuple[str, ...] | None = args.columns
    bounds: dict[str, tuple[float, float]] | None = args.bounds
    if args.scenario is not None:
        from fa_hetdp.config.scenario import load_scenario

        try:
            data = load_scenario(args.scenario).data
        except (ScenarioError, OSError) as exc:
            print(f"fa-hetdp check-data: {exc}", file=sys.stderr)
            return 2
        if columns is None:
            columns = data.columns
        if bounds is None and data.bounds:  # for the columns checked (--columns may pick)
            keep = columns or ()
            bounds = {c: pair for c, pair in data.column_bounds().items() if c in keep}
    if bounds and columns is None:
        print("fa-hetdp check-data: --bounds needs the run's columns (--columns)", file=sys.stderr)
        return 2
    try:
        found = inspect(args.path, expected_d=args.dim, columns=columns, bounds=bounds)
    except ValueError as exc:  # the columns and bounds themselves (a column not listed, ...)
        print(f"fa-hetdp check-data: {exc}", file=sys.stderr)
        return 2
    if found.problems or found.records is None:
        for problem in found.problems:
            print(f"fa-hetdp check-data: {problem.detail}", file=sys.stderr)
        return 1
    records, d = found.records.shape
    if found.columns is None:
        print(
            f"{args.path}: ok: {records} record(s), d={d}, values in "
            f"[{float(found.records.min()):.4g}, {float(found.records.max()):.4g}]"
        )
        return 0
    line = f"{args.path}: ok: {records} record(s), d={d}, columns {', '.join(found.columns)}"
    scaled = [c for c in found.columns if c in (bounds or {})]
    if scaled:
        line += f"; scaled to [0, 1] from their bounds: {', '.join(scaled)}"
    clipped = ", ".join(f"{c} {n}" for c, n in found.clipped.items() if n)
    if clipped:
        line += f"; value(s) clipped into the bounds: {clipped}"
    print(line)
    return 0
