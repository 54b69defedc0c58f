"""``fa-hetdp data download NAME [--root DIR]``: the command's arguments.

The work is :func:`fa_hetdp.data.download.download`.
"""

from __future__ import annotations

import argparse

from fa_hetdp.data import download as fetch
from fa_hetdp.data.catalog import DATA_ROOT_ENV, DOWNLOADABLE
from fa_hetdp.errors import DatasetError

__all__ = ["add_arguments", "run_command"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``fa-hetdp data download NAME [--root DIR]``."""
    sub = parser.add_subparsers(dest="data_command", required=True, metavar="ACTION")
    download = sub.add_parser(
        "download",
        help="download a dataset with torchvision (the `datasets` extra)",
        description=(
            "Download CIFAR-10, CIFAR-100 or Fashion-MNIST into DIR in the layout fa-hetdp "
            "reads. Needs torchvision: pip install 'fa-hetdp[datasets]'."
        ),
    )
    download.add_argument("name", choices=[*DOWNLOADABLE, "digits"], help="dataset to download")
    download.add_argument(
        "--root",
        default=None,
        help=f"data directory (default: ${DATA_ROOT_ENV} or ./data)",
    )


def run_command(args: argparse.Namespace) -> int:
    """Run ``fa-hetdp data ...``; returns the exit code (0 ok, 1 torchvision missing)."""
    if args.data_command != "download":  # pragma: no cover - argparse restricts the choices
        raise DatasetError(f"unknown data action {args.data_command!r}; allowed: download")
    return fetch.download(args.name, args.root)
