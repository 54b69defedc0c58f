"""``fa-hetdp check-data PATH``: a data owner's pre-flight check of the file its node will read.

The checks live in :mod:`fa_hetdp.data.check` (the ClientApp runs the same ones through
:func:`~fa_hetdp.data.check.load_checked`); this module is the command: its arguments and what
it prints. ``--dim`` is the dimension ``d`` the run expects.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fa_hetdp.data.check import DataCheckError, DataProblem, inspect_data, load_checked

__all__ = [
    "DataCheckError",
    "DataProblem",
    "add_arguments",
    "inspect_data",
    "load_checked",
    "run_command",
]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the arguments of ``fa-hetdp check-data``."""
    parser.add_argument("path", type=Path, help="the data file the node will read (.npy or .csv)")
    parser.add_argument(
        "--dim", type=int, default=None, help="the dimension d the run expects (default: any)"
    )


def run_command(args: argparse.Namespace) -> int:
    """Run ``fa-hetdp check-data``; 0 if the file passes, 1 with every problem otherwise."""
    data, problems = inspect_data(args.path, expected_d=args.dim)
    if problems or data is None:
        for problem in problems:
            print(f"fa-hetdp check-data: {problem.detail}", file=sys.stderr)
        return 1
    records, d = data.shape
    print(
        f"{args.path}: ok: {records} record(s), d={d}, values in "
        f"[{float(data.min()):.4g}, {float(data.max()):.4g}]"
    )
    return 0
