"""``fa-hetdp data download NAME [--root DIR]``: fetch a dataset in the layout fa-hetdp reads.

Downloads with torchvision (the optional ``datasets`` extra) when it is installed, and
otherwise prints what to download by hand and where to unpack it (from the dataset's record,
:data:`fa_hetdp.data.catalog.DATASETS`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fa_hetdp.data.catalog import (
    DATA_ROOT_ENV,
    DOWNLOADABLE,
    dataset_info,
    default_data_root,
    load_dataset,
)
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


def _manual_instructions(name: str, root: Path) -> str:
    manual = dataset_info(name).manual
    if manual is None:
        raise DatasetError(f"dataset {name!r} cannot be downloaded; allowed: {DOWNLOADABLE}")
    what, where = manual.what, manual.where
    return (
        f"torchvision is not installed, so fa-hetdp cannot download {name!r}.\n"
        "Either install the optional extra and run this command again:\n"
        "    pip install 'fa-hetdp[datasets]'\n"
        f"or download {what}\n"
        "and unpack it so that these files exist:\n"
        f"    {where.replace('<root>', str(root))}"
    )


def _download_with_torchvision(name: str, root: Path) -> None:
    import torchvision.datasets as tvd  # optional extra `datasets`

    dataset_class = getattr(tvd, str(dataset_info(name).torchvision))
    for train in (True, False):
        dataset_class(str(root), train=train, download=True)


def run_command(args: argparse.Namespace) -> int:
    """Run ``fa-hetdp data ...``; returns the exit code (0 ok, 1 torchvision missing)."""
    if args.data_command != "download":  # pragma: no cover - argparse restricts the choices
        raise DatasetError(f"unknown data action {args.data_command!r}; allowed: download")
    name: str = args.name
    if name == "digits":
        print("digits is embedded in scikit-learn; nothing to download.")
        return 0
    root = Path(args.root) if args.root is not None else default_data_root()
    try:
        _download_with_torchvision(name, root)
    except ImportError:
        print(_manual_instructions(name, root), file=sys.stderr)
        return 1
    dataset = load_dataset(name, root=root, split="all")
    print(f"{name}: {dataset.size} images of dimension {dataset.dim} in {root.resolve()}")
    return 0
