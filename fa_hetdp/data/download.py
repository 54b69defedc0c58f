"""Fetch a dataset in the layout fa-hetdp reads (the work of ``fa-hetdp data download``).

Downloads with torchvision (the optional ``datasets`` extra) when it is installed, and
otherwise prints what to download by hand and where to unpack it (from the dataset's record,
:data:`fa_hetdp.data.catalog.DATASETS`).
"""

from __future__ import annotations

import sys
from pathlib import Path

from fa_hetdp.data.catalog import (
    DOWNLOADABLE,
    dataset_info,
    default_data_root,
    load_dataset,
)
from fa_hetdp.errors import DatasetError

__all__ = ["download"]


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


def download(name: str, root: str | Path | None = None) -> int:
    """Fetch dataset ``name`` into ``root`` (default: ``$FA_HETDP_DATA`` or ``./data``).

    What ``fa-hetdp data download`` runs (:mod:`fa_hetdp.cli.data`); returns the exit code
    (0 ok, 1 torchvision missing: the manual steps are printed to stderr).
    """
    if name == "digits":
        print("digits is embedded in scikit-learn; nothing to download.")
        return 0
    folder = Path(root) if root is not None else default_data_root()
    try:
        _download_with_torchvision(name, folder)
    except ImportError:
        print(_manual_instructions(name, folder), file=sys.stderr)
        return 1
    dataset = load_dataset(name, root=folder, split="all")
    print(f"{name}: {dataset.size} images of dimension {dataset.dim} in {folder.resolve()}")
    return 0
