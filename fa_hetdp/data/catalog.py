"""The datasets: one record per dataset, and loading a dataset by name.

:data:`DATASETS` holds one :class:`DatasetInfo` per name a scenario may use: its dimension,
its images per label in each split of the standard files, its number of labels, the on-disk
layout, its reader, and how to download it. Every other list of datasets is a view of it
(:data:`DATASET_NAMES`, :data:`LABEL_COUNTS`, :data:`DOWNLOADABLE`). Adding a dataset means
adding its reader (:mod:`fa_hetdp.data.readers`), its record here and its name to
:data:`fa_hetdp.data.dataset.DatasetName`.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, get_args

from fa_hetdp.data.dataset import SPLITS, Dataset, DatasetName, Split
from fa_hetdp.data.readers import (
    CIFAR10_DIR,
    CIFAR10_LAYOUT,
    CIFAR100_DIR,
    CIFAR100_LAYOUT,
    CIFAR_URL,
    FASHION_MNIST_DIR,
    FASHION_MNIST_LAYOUT,
    FASHION_MNIST_URL,
    read_cifar10,
    read_cifar100,
    read_digits,
    read_fashion_mnist,
)
from fa_hetdp.errors import DatasetError

__all__ = [
    "DATASETS",
    "DATASET_NAMES",
    "DATA_ROOT_ENV",
    "DOWNLOADABLE",
    "LABEL_COUNTS",
    "DatasetInfo",
    "ManualDownload",
    "clear_dataset_cache",
    "dataset_info",
    "default_data_root",
    "load_dataset",
    "record_shape",
]

DATA_ROOT_ENV: Final[str] = "FA_HETDP_DATA"
"""Environment variable naming the default data directory (else ``./data``)."""

Reader = Callable[..., Dataset]
"""``reader(root, *, split) -> Dataset``."""


@dataclass(frozen=True)
class ManualDownload:
    """How to fetch a dataset by hand: what to download, and the files it must yield."""

    what: str
    where: str
    """The files, with ``<root>`` for the data directory."""


@dataclass(frozen=True)
class DatasetInfo:
    """One dataset a scenario may name.

    Attributes
    ----------
    name : str
        The scenario's ``data.dataset`` value.
    dim : int or None
        Dimension d of a record (``None``: chosen by the scenario, for synthetic data).
    num_labels : int or None
        Labels the dataset defines (``None``: chosen by the scenario).
    label_counts : mapping of split to tuple of int
        Records per label of each split of the standard files; a split that is missing here
        does not exist. Scenario validation uses it to reject a sample larger than the data
        before any file is read.
    layout : str
        The files the reader expects (shown in error messages); empty if nothing is read.
    reader : callable or None
        ``reader(root, *, split) -> Dataset``; ``None`` for generated data.
    torchvision : str or None
        The ``torchvision.datasets`` class that downloads it (``fa-hetdp data download``).
    manual : ManualDownload or None
        How to download it without torchvision.
    image_shape : (int, int, int) or None
        ``(channels, height, width)`` of one record, in the order it is flattened (``None``:
        no image shape; pooled as a ``1 x 1 x d`` row, see :mod:`fa_hetdp.data.summaries`).
    """

    name: str
    dim: int | None
    num_labels: int | None
    label_counts: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    layout: str = ""
    reader: Reader | None = None
    torchvision: str | None = None
    manual: ManualDownload | None = None
    image_shape: tuple[int, int, int] | None = None


def _train_test(train: tuple[int, ...], test: tuple[int, ...]) -> dict[str, tuple[int, ...]]:
    """Return the counts of train, test and all (train followed by test)."""
    both = tuple(a + b for a, b in zip(train, test, strict=True))
    return {"train": train, "test": test, "all": both}


_DIGITS_PER_LABEL: Final[tuple[int, ...]] = (178, 182, 177, 183, 181, 182, 181, 179, 174, 180)

DATASETS: Final[tuple[DatasetInfo, ...]] = (
    DatasetInfo(
        name="digits",
        dim=64,
        num_labels=10,
        # sklearn.datasets.load_digits: one set of 1797 images, "train" and "all" alike.
        label_counts={"train": _DIGITS_PER_LABEL, "all": _DIGITS_PER_LABEL},
        reader=read_digits,
        image_shape=(1, 8, 8),
    ),
    DatasetInfo(
        name="cifar10",
        dim=3072,
        num_labels=10,
        # Images per label (train, test) in the standard files (Krizhevsky 2009).
        label_counts=_train_test((5000,) * 10, (1000,) * 10),
        layout=CIFAR10_LAYOUT,
        reader=read_cifar10,
        torchvision="CIFAR10",
        manual=ManualDownload(
            f"the CIFAR-10 python version (cifar-10-python.tar.gz) from {CIFAR_URL}",
            f"<root>/{CIFAR10_DIR}/data_batch_1 .. data_batch_5, test_batch",
        ),
        image_shape=(3, 32, 32),
    ),
    DatasetInfo(
        name="cifar100",
        dim=3072,
        num_labels=10,
        # Per merged bucket: 2 coarse labels x 2500 train / 500 test images.
        label_counts=_train_test((5000,) * 10, (1000,) * 10),
        layout=CIFAR100_LAYOUT,
        reader=read_cifar100,
        torchvision="CIFAR100",
        manual=ManualDownload(
            f"the CIFAR-100 python version (cifar-100-python.tar.gz) from {CIFAR_URL}",
            f"<root>/{CIFAR100_DIR}/train, test",
        ),
        image_shape=(3, 32, 32),
    ),
    DatasetInfo(
        name="fashion-mnist",
        dim=784,
        num_labels=10,
        # Xiao et al. 2017.
        label_counts=_train_test((6000,) * 10, (1000,) * 10),
        layout=FASHION_MNIST_LAYOUT,
        reader=read_fashion_mnist,
        torchvision="FashionMNIST",
        manual=ManualDownload(
            f"the four files data/fashion/*-ubyte.gz from {FASHION_MNIST_URL}",
            f"<root>/{FASHION_MNIST_DIR}/train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz, "
            "t10k-images-idx3-ubyte.gz, t10k-labels-idx1-ubyte.gz (gzipped or not)",
        ),
        image_shape=(1, 28, 28),
    ),
    DatasetInfo(name="synthetic", dim=None, num_labels=None),
)
"""Every dataset, in the order of :data:`fa_hetdp.data.dataset.DatasetName`."""

_BY_NAME: Final[Mapping[str, DatasetInfo]] = {info.name: info for info in DATASETS}
if tuple(_BY_NAME) != get_args(DatasetName):  # pragma: no cover - a registration mistake
    raise RuntimeError(f"DATASETS {tuple(_BY_NAME)} must follow {get_args(DatasetName)}")

DATASET_NAMES: Final[tuple[str, ...]] = tuple(_BY_NAME)
"""The names of :data:`DATASETS` (view)."""

DOWNLOADABLE: Final[tuple[str, ...]] = tuple(i.name for i in DATASETS if i.torchvision)
"""Datasets ``fa-hetdp data download`` fetches with torchvision (view of :data:`DATASETS`)."""

LABEL_COUNTS: Final[Mapping[tuple[str, str], tuple[int, ...]]] = {
    (info.name, split): counts for info in DATASETS for split, counts in info.label_counts.items()
}
"""Images per label of each (dataset, split) of the standard files (view of :data:`DATASETS`).

Scenario validation uses it to reject a sample larger than the data before any file is read.
"""


def dataset_info(name: str) -> DatasetInfo:
    """Return the record of dataset ``name``.

    Raises
    ------
    DatasetError
        With the allowed names, if ``name`` is not a dataset.
    """
    try:
        return _BY_NAME[name]
    except KeyError:
        raise DatasetError(
            f"unknown dataset {name!r}; allowed: {', '.join(DATASET_NAMES)}"
        ) from None


def record_shape(name: str, dim: int | None = None) -> tuple[int, int, int]:
    """Return ``(channels, height, width)`` of a record of dataset ``name``.

    Datasets without an image shape (synthetic) give ``(1, 1, dim)``; ``dim`` is then required.

    Raises
    ------
    DatasetError
        Unknown name, or no image shape and no ``dim``.
    """
    info = dataset_info(name)
    if info.image_shape is not None:
        return info.image_shape
    if dim is None:
        raise DatasetError(f"dataset {name!r} has no image shape; give its dimension")
    return (1, 1, dim)


def default_data_root() -> Path:
    """Return the data directory used when none is given: ``$FA_HETDP_DATA``, else ``./data``."""
    return Path(os.environ.get(DATA_ROOT_ENV, "data"))


@functools.lru_cache(maxsize=4)
def _load_cached(name: str, root: str, split: str) -> Dataset:
    reader = dataset_info(name).reader
    if reader is None:
        raise DatasetError(f"dataset {name!r} is generated, not read from files")
    return reader(Path(root), split=split)


def clear_dataset_cache() -> None:
    """Forget the datasets :func:`load_dataset` has cached in this process."""
    _load_cached.cache_clear()


def load_dataset(
    name: str, *, root: str | os.PathLike[str] | None = None, split: Split = "train"
) -> Dataset:
    """Load a dataset by name; the result is cached per process (arrays are read-only).

    Parameters
    ----------
    name : {"digits", "cifar10", "cifar100", "fashion-mnist"}
        ``"digits"`` is embedded (scikit-learn) and ignores ``root``. ``"synthetic"`` is not
        loaded by name: call :func:`fa_hetdp.data.synthetic.synthetic_dataset` (scenarios do
        this from their ``[data.synthetic]`` table).
    root : path, optional
        Data directory holding the files in torchvision's layout; default
        :func:`default_data_root`.
    split : {"train", "test", "all"}
        Which files to read.

    Returns
    -------
    Dataset

    Raises
    ------
    DatasetError
        Unknown name or split, or missing / corrupt files (the message names the path and the
        expected layout).
    """
    if dataset_info(name).reader is None:
        raise DatasetError(
            f"dataset {name!r} is generated, not loaded: call "
            "fa_hetdp.data.synthetic.synthetic_dataset(n, d, num_labels, heterogeneity, rng=...) "
            "or give a scenario a [data.synthetic] table"
        )
    if split not in SPLITS:
        raise DatasetError(f"unknown split {split!r}; allowed: {', '.join(SPLITS)}")
    resolved = Path(root) if root is not None else default_data_root()
    return _load_cached(name, str(resolved.expanduser().resolve()), split)
