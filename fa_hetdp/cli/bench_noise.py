"""``fa-hetdp bench-noise``: the command's arguments.

The work is :func:`fa_hetdp.experiments.bench_noise.bench_noise`.
"""

from __future__ import annotations

import argparse

from fa_hetdp.experiments import bench_noise as experiment
from fa_hetdp.experiments.bench_noise import QUICK_REPEATS

__all__ = ["add_arguments", "run_command"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``fa-hetdp bench-noise SCENARIO [--repeats N] [--quick] [--out DIR]``."""
    parser.add_argument(
        "scenario",
        help="scenario file, or the name of a shipped scenario (e.g. quickstart)",
    )
    parser.add_argument(
        "--repeats", type=int, default=None, help="repeats per cell (default: the scenario's)"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"{QUICK_REPEATS} repeats and at most 3 values of ε (smoke test)",
    )
    parser.add_argument(
        "--out",
        default=None,
        help="output folder (default: results/<scenario>/bench-noise)",
    )
    parser.add_argument("--no-progress", action="store_true", help="do not show the progress bar")


def run_command(args: argparse.Namespace) -> int:
    """Run ``fa-hetdp bench-noise`` (see :func:`fa_hetdp.experiments.bench_noise.bench_noise`)."""
    return experiment.bench_noise(
        args.scenario,
        repeats=args.repeats,
        quick=args.quick,
        out=args.out,
        progress=False if args.no_progress else None,
    )
