"""``fa-hetdp reproduce``: the command's arguments.

The work is :func:`fa_hetdp.experiments.reproduce.reproduce`.
"""

from __future__ import annotations

import argparse

from fa_hetdp.experiments import reproduce as experiment
from fa_hetdp.experiments.paper import DATASETS, FULL_REPEATS, QUICK_REPEATS

__all__ = ["add_arguments", "run_command"]


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
    parser.add_argument(
        "--no-frontier",
        action="store_true",
        help="skip the utility frontier (frontier.png: clients needed for 10 %% error vs ε)",
    )


def run_command(args: argparse.Namespace) -> int:
    """Run ``fa-hetdp reproduce`` (see :func:`fa_hetdp.experiments.reproduce.reproduce`)."""
    return experiment.reproduce(
        args.dataset,
        root=args.root,
        quick=args.quick,
        repeats=args.repeats,
        profile=args.profile,
        progress=False if args.no_progress else None,
        out=args.out,
        frontier=not getattr(args, "no_frontier", False),
    )
