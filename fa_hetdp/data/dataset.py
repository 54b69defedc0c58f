"""The :class:`Dataset` type: labelled vectors in [0, 1]^d stored compactly.

A :class:`Dataset` keeps the pixels in their stored type (``uint8`` for images) and a scale, so
a CIFAR training set costs 150 MB rather than 1.2 GB of float64; :meth:`Dataset.rows` turns the
rows a partition needs into float64 vectors in [0, 1].
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal, get_args

import numpy as np
import numpy.typing as npt

from fa_hetdp._types import FloatArray, IntArray
from fa_hetdp.errors import DatasetError

__all__ = ["SPLITS", "Dataset", "DatasetName", "Split"]

DatasetName = Literal["digits", "cifar10", "cifar100", "fashion-mnist", "synthetic"]
"""The dataset names a scenario's ``data.dataset`` may take (one record each in
:data:`fa_hetdp.data.catalog.DATASETS`)."""

Split = Literal["train", "test", "all"]
"""Which part of a dataset to load; ``"all"`` is train followed by test."""

SPLITS: Final[tuple[str, ...]] = get_args(Split)


@dataclass(frozen=True, eq=False)
class Dataset:
    """A labelled dataset of vectors in [0, 1]^d, one row per record.

    Parameters
    ----------
    name : str
        Dataset name (``"cifar10"``, ``"digits"``, ...).
    raw : numpy.ndarray
        Stored values, shape (N, d): ``uint8`` pixels for images, or float64. The vectors are
        ``raw / scale``. Read-only.
    scale : float
        Divisor that maps ``raw`` into [0, 1] (255 for 8-bit pixels, 16 for digits, 1 for float).
    labels : IntArray
        Labels in ``0 .. num_labels - 1``, shape (N,). Read-only.
    num_labels : int
        Number of distinct labels the dataset defines (10 for every dataset here).
    source : str
        Where the data came from (paths, or a generator with its parameters).

    Notes
    -----
    The data model (``docs/design.md``): client ``i`` holds ``x_i`` in [0, 1]^d, the paper's
    one image with pixels / 255, flattened (d = 3072 for CIFAR, 784 for Fashion-MNIST, 64 for
    digits).
    """

    name: str
    raw: npt.NDArray[np.uint8] | FloatArray
    scale: float
    labels: IntArray
    num_labels: int
    source: str

    def __post_init__(self) -> None:
        if self.raw.ndim != 2 or self.raw.shape[0] == 0 or self.raw.shape[1] == 0:
            raise DatasetError(
                f"dataset {self.name!r}: raw must have shape (N, d) with N, d >= 1, "
                f"got {self.raw.shape}"
            )
        if self.labels.shape != (self.raw.shape[0],):
            raise DatasetError(
                f"dataset {self.name!r}: labels must have shape ({self.raw.shape[0]},), "
                f"got {self.labels.shape}"
            )
        if not (self.scale > 0 and np.isfinite(self.scale)):
            raise DatasetError(f"dataset {self.name!r}: scale must be > 0, got {self.scale}")
        if self.num_labels < 1:
            raise DatasetError(
                f"dataset {self.name!r}: num_labels must be >= 1, got {self.num_labels}"
            )
        if self.labels.min() < 0 or self.labels.max() >= self.num_labels:
            raise DatasetError(
                f"dataset {self.name!r}: labels must lie in 0..{self.num_labels - 1}, got "
                f"{int(self.labels.min())}..{int(self.labels.max())} ({self.source})"
            )
        self.raw.setflags(write=False)
        self.labels.setflags(write=False)

    @property
    def size(self) -> int:
        """Number of records N."""
        return int(self.raw.shape[0])

    @property
    def dim(self) -> int:
        """Dimension d of each vector."""
        return int(self.raw.shape[1])

    @property
    def features(self) -> FloatArray:
        """All records as float64 vectors in [0, 1], shape (N, d).

        Materialises the whole dataset in float64 (1.2 GB for the CIFAR-10 training set);
        prefer :meth:`rows` for a sample.
        """
        return self.rows(np.arange(self.size))

    def rows(self, indices: npt.ArrayLike) -> FloatArray:
        """Return records ``indices`` as float64 vectors in [0, 1] (pixels / scale, flattened).

        Parameters
        ----------
        indices : array_like of int
            Row indices, any shape ``S``; the result has shape ``S + (d,)``.

        Returns
        -------
        FloatArray
            ``raw[indices] / scale``.
        """
        idx = np.asarray(indices, dtype=np.int64)
        out: FloatArray = self.raw[idx].astype(np.float64)
        out /= self.scale
        return out

    def label_counts(self) -> IntArray:
        """Count the records of each label; shape (num_labels,)."""
        counts: IntArray = np.bincount(self.labels, minlength=self.num_labels).astype(np.int64)
        return counts

    def indices_of(self, label: int) -> IntArray:
        """Row indices of the records with ``label``, in file order."""
        found: IntArray = np.flatnonzero(self.labels == label).astype(np.int64)
        return found
