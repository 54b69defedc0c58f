"""Datasets: readers for the paper's image files, the embedded digits, and a synthetic generator.

The paper (section 4) studies CIFAR-10, CIFAR-100 (its 20 coarse labels merged into 10 buckets,
labels 0 and 1, 2 and 3, ...) and Fashion-MNIST, each image flattened to one vector of pixels / 255
(DESIGN.md, "Data model"). This module reads the files in exactly the layout that torchvision
writes, so ``fa-hetdp data download NAME --root DIR`` (torchvision, the optional ``datasets``
extra) or a manual download both work::

    <root>/cifar-10-batches-py/data_batch_1 .. data_batch_5, test_batch   (python pickle)
    <root>/cifar-100-python/train, test                                    (python pickle)
    <root>/FashionMNIST/raw/train-images-idx3-ubyte[.gz], train-labels-idx1-ubyte[.gz],
                            t10k-images-idx3-ubyte[.gz],  t10k-labels-idx1-ubyte[.gz]   (IDX)

The default dataset needs no download: scikit-learn's ``load_digits`` (1797 real 8x8 digit
images, d = 64, 10 labels, pixels / 16). :func:`synthetic_dataset` generates data with a
controllable amount of label-dependent heterogeneity, for tests and for scale (n = 10 000,
d = 3072).

A :class:`Dataset` keeps the pixels in their stored type (``uint8`` for images) and a scale, so
a CIFAR training set costs 150 MB rather than 1.2 GB of float64; :meth:`Dataset.rows` turns the
rows a partition needs into float64 vectors in [0, 1].

The pickle reader is restricted: it rebuilds numpy arrays and plain Python containers only and
refuses any other class, so a tampered CIFAR file cannot run code.
"""

from __future__ import annotations

import argparse
import functools
import gzip
import io
import os
import pickle
import struct
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal, get_args

import numpy as np
import numpy.typing as npt

from fa_hetdp._types import FloatArray, IntArray
from fa_hetdp.errors import DatasetError

__all__ = [
    "DATASET_NAMES",
    "DOWNLOADABLE",
    "LABEL_COUNTS",
    "Dataset",
    "DatasetName",
    "Split",
    "add_arguments",
    "clear_dataset_cache",
    "default_data_root",
    "load_dataset",
    "read_cifar10",
    "read_cifar100",
    "read_fashion_mnist",
    "read_idx",
    "run_command",
    "synthetic_dataset",
]

DatasetName = Literal["digits", "cifar10", "cifar100", "fashion-mnist", "synthetic"]
"""The dataset names a scenario's ``data.dataset`` may take."""

Split = Literal["train", "test", "all"]
"""Which part of a dataset to load; ``"all"`` is train followed by test."""

DATASET_NAMES: Final[tuple[str, ...]] = get_args(DatasetName)
SPLITS: Final[tuple[str, ...]] = get_args(Split)
DOWNLOADABLE: Final[tuple[str, ...]] = ("cifar10", "cifar100", "fashion-mnist")

DATA_ROOT_ENV: Final[str] = "FA_HETDP_DATA"
"""Environment variable naming the default data directory (else ``./data``)."""

_PER_LABEL: Final[dict[str, tuple[tuple[int, ...], tuple[int, ...]]]] = {
    # Images per label (train, test) in the standard files (CIFAR: Krizhevsky 2009;
    # Fashion-MNIST: Xiao et al. 2017). CIFAR-100 counts are per merged bucket
    # (2 coarse labels x 2500 train / 500 test images).
    "cifar10": ((5000,) * 10, (1000,) * 10),
    "cifar100": ((5000,) * 10, (1000,) * 10),
    "fashion-mnist": ((6000,) * 10, (1000,) * 10),
}
_DIGITS_PER_LABEL: Final[tuple[int, ...]] = (178, 182, 177, 183, 181, 182, 181, 179, 174, 180)

LABEL_COUNTS: Final[dict[tuple[str, str], tuple[int, ...]]] = {
    **{(name, "train"): train for name, (train, _) in _PER_LABEL.items()},
    **{(name, "test"): test for name, (_, test) in _PER_LABEL.items()},
    **{
        (name, "all"): tuple(a + b for a, b in zip(train, test, strict=True))
        for name, (train, test) in _PER_LABEL.items()
    },
    ("digits", "train"): _DIGITS_PER_LABEL,  # sklearn.datasets.load_digits
    ("digits", "all"): _DIGITS_PER_LABEL,
}
"""Images per label of each (dataset, split) of the standard files.

Scenario validation uses it to reject a sample larger than the data before any file is read.
"""

_CIFAR10_DIR: Final[str] = "cifar-10-batches-py"
_CIFAR100_DIR: Final[str] = "cifar-100-python"
_FASHION_DIR: Final[str] = "FashionMNIST/raw"
_CIFAR_URL: Final[str] = "https://www.cs.toronto.edu/~kriz/cifar.html"
_FASHION_URL: Final[str] = "https://github.com/zalandoresearch/fashion-mnist"
_IDX_IMAGES_MAGIC: Final[int] = 2051
_IDX_LABELS_MAGIC: Final[int] = 2049

_LAYOUTS: Final[dict[str, str]] = {
    "cifar10": (
        f"expected <root>/{_CIFAR10_DIR}/data_batch_1 .. data_batch_5 and test_batch "
        f"(python pickle, from {_CIFAR_URL} or `fa-hetdp data download cifar10 --root <root>`)"
    ),
    "cifar100": (
        f"expected <root>/{_CIFAR100_DIR}/train and test "
        f"(python pickle, from {_CIFAR_URL} or `fa-hetdp data download cifar100 --root <root>`)"
    ),
    "fashion-mnist": (
        f"expected <root>/{_FASHION_DIR}/train-images-idx3-ubyte, train-labels-idx1-ubyte, "
        "t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte (IDX files, each may end in .gz; from "
        f"{_FASHION_URL} or `fa-hetdp data download fashion-mnist --root <root>`)"
    ),
}


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
    DESIGN.md, "Data model": client ``i`` holds ``x_i`` in [0, 1]^d, the paper's one image with
    pixels / 255, flattened (d = 3072 for CIFAR, 784 for Fashion-MNIST, 64 for digits).
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


# --------------------------------------------------------------------------------------------
# Restricted pickle reader (CIFAR)
# --------------------------------------------------------------------------------------------

_SAFE_DTYPES: Final[frozenset[str]] = frozenset(
    {"b1", "u1", "i1", "u2", "i2", "u4", "i4", "u8", "i8", "f4", "f8"}
)
_MAX_DEPTH: Final[int] = 8


def _text(value: object, what: str) -> str:
    if isinstance(value, bytes):
        return value.decode("latin-1")
    if isinstance(value, str):
        return value
    raise pickle.UnpicklingError(f"{what} must be text, got {type(value).__name__}")


class _DtypeStub:
    """Stands in for ``numpy.dtype(name, align, copy)`` + ``__setstate__``; plain numbers only."""

    def __init__(self, name: object, *_: object) -> None:
        self.name = _text(name, "dtype name")
        self.byteorder = "|"

    def __setstate__(self, state: object) -> None:
        if not isinstance(state, tuple) or len(state) < 2:
            raise pickle.UnpicklingError("malformed dtype state")
        self.byteorder = _text(state[1], "dtype byte order")

    def resolve(self) -> np.dtype[Any]:
        if self.name not in _SAFE_DTYPES:
            raise pickle.UnpicklingError(f"refusing dtype {self.name!r}")
        dtype = np.dtype(self.name)
        if self.byteorder == "<":
            dtype = dtype.newbyteorder("<")
        elif self.byteorder == ">":
            dtype = dtype.newbyteorder(">")
        return dtype


def _as_dtype(value: object) -> np.dtype[Any]:
    if isinstance(value, _DtypeStub):
        return value.resolve()
    raise pickle.UnpicklingError(f"expected a dtype, got {type(value).__name__}")


def _build_array(raw: object, dtype: object, shape: object, fortran: bool) -> npt.NDArray[Any]:
    """Check sizes and build an array from its raw bytes (never numpy's ``__setstate__``)."""
    dt = _as_dtype(dtype)
    if isinstance(raw, str):  # Python-2 pickles loaded with encoding="latin1"
        raw = raw.encode("latin-1")
    if not isinstance(raw, bytes | bytearray):
        raise pickle.UnpicklingError(f"array data must be bytes, got {type(raw).__name__}")
    if (
        not isinstance(shape, tuple)
        or len(shape) > 32
        or not all(isinstance(k, int) and not isinstance(k, bool) and k >= 0 for k in shape)
    ):
        raise pickle.UnpicklingError(f"malformed array shape {shape!r}")
    count = 1
    for k in shape:
        count *= k
    if count * dt.itemsize != len(raw):
        raise pickle.UnpicklingError(
            f"array of shape {shape} and dtype {dt} needs {count * dt.itemsize} bytes, "
            f"has {len(raw)}"
        )
    flat = np.frombuffer(bytes(raw), dtype=dt)
    return flat.reshape(shape, order="F" if fortran else "C").copy()


class _ArrayStub:
    """Stands in for ``numpy._core.multiarray._reconstruct(ndarray, ...)`` + ``__setstate__``."""

    def __init__(self) -> None:
        self.array: npt.NDArray[Any] | None = None

    def __setstate__(self, state: object) -> None:
        # numpy's ndarray state: (version, shape, dtype, is_fortran, rawdata), version optional.
        if not isinstance(state, tuple) or len(state) not in (4, 5):
            raise pickle.UnpicklingError("malformed array state")
        shape, dtype, fortran, raw = state[-4:]
        self.array = _build_array(raw, dtype, shape, bool(fortran))


_NDARRAY: Final[object] = object()


def _safe_reconstruct(cls: object, *_: object) -> _ArrayStub:
    if cls is not _NDARRAY:
        raise pickle.UnpicklingError("_reconstruct of something other than numpy.ndarray")
    return _ArrayStub()


def _safe_frombuffer(buf: object, dtype: object, shape: object, order: object) -> Any:
    """Protocol-5 form of an array (``numpy._core.numeric._frombuffer``)."""
    return _build_array(buf, dtype, shape, _text(order, "order") == "F")


def _safe_scalar(dtype: object, raw: object = b"") -> Any:
    return _build_array(raw, dtype, (), False)[()]


def _safe_encode(text: object, encoding: object = "utf-8") -> bytes:
    """``_codecs.encode`` as Python-3 pickles of bytes use it (text -> bytes)."""
    return _text(text, "encoded text").encode(_text(encoding, "encoding"))


_PICKLE_GLOBALS: Final[dict[tuple[str, str], object]] = {
    ("numpy._core.multiarray", "_reconstruct"): _safe_reconstruct,
    ("numpy._core.multiarray", "scalar"): _safe_scalar,
    ("numpy._core.numeric", "_frombuffer"): _safe_frombuffer,
    ("numpy", "ndarray"): _NDARRAY,
    ("numpy", "dtype"): _DtypeStub,
    ("_codecs", "encode"): _safe_encode,
}


class _ArrayUnpickler(pickle.Unpickler):
    """An unpickler for numpy arrays and builtin containers that runs no foreign code.

    Every global a CIFAR batch needs is replaced by a stand-in defined here that checks its
    input and builds the array with :func:`numpy.frombuffer`; numpy's own ``__setstate__`` is
    never called (it can crash the interpreter on malformed state). Any other global is refused.
    """

    def find_class(self, module: str, name: str) -> Any:
        if module.startswith("numpy.core"):  # pickles written by numpy < 2 (the CIFAR files)
            module = "numpy._core" + module[len("numpy.core") :]
        if (module, name) not in _PICKLE_GLOBALS:
            raise pickle.UnpicklingError(f"refusing to load global {module}.{name}")
        return _PICKLE_GLOBALS[(module, name)]


def _resolve_stubs(obj: Any, depth: int = 0) -> Any:
    """Replace array stand-ins by their arrays in nested dicts / lists / tuples."""
    if depth > _MAX_DEPTH:
        raise pickle.UnpicklingError("nesting too deep")
    if isinstance(obj, _ArrayStub):
        if obj.array is None:
            raise pickle.UnpicklingError("array without state")
        return obj.array
    if isinstance(obj, _DtypeStub):
        return obj.resolve()
    if isinstance(obj, dict):
        return {k: _resolve_stubs(v, depth + 1) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_resolve_stubs(v, depth + 1) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_resolve_stubs(v, depth + 1) for v in obj)
    return obj


def _read_pickle(path: Path, layout: str) -> dict[bytes, Any]:
    """Load one CIFAR batch (a dict with bytes keys) with the restricted unpickler."""
    if not path.is_file():
        raise DatasetError(f"missing dataset file {path}; {layout}")
    try:
        # Read the whole file first: lengths in a corrupt pickle are then checked against the
        # bytes present instead of being allocated.
        blob = path.read_bytes()
        obj = _resolve_stubs(_ArrayUnpickler(io.BytesIO(blob), encoding="bytes").load())
    except OSError as exc:
        raise DatasetError(f"cannot read dataset file {path} ({exc}); {layout}") from exc
    except Exception as exc:  # any failure to parse means a corrupt file
        raise DatasetError(
            f"corrupt dataset file {path} ({type(exc).__name__}: {exc}); {layout}"
        ) from exc
    if not isinstance(obj, dict):
        raise DatasetError(
            f"corrupt dataset file {path}: expected a pickled dict, got {type(obj).__name__}; "
            f"{layout}"
        )
    return obj


def _cifar_arrays(
    path: Path, layout: str, label_key: bytes, num_labels: int
) -> tuple[npt.NDArray[np.uint8], IntArray]:
    """Pixels (N, 3072) uint8 and labels of one CIFAR batch, checked."""
    batch = _read_pickle(path, layout)
    if b"data" not in batch or label_key not in batch:
        raise DatasetError(
            f"corrupt dataset file {path}: needs keys b'data' and {label_key!r}, has "
            f"{sorted(k for k in batch if isinstance(k, bytes))}; {layout}"
        )
    data = np.asarray(batch[b"data"])
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072:
        raise DatasetError(
            f"corrupt dataset file {path}: b'data' must be uint8 of shape (N, 3072), got "
            f"{data.dtype} {data.shape}; {layout}"
        )
    try:
        labels = np.asarray(batch[label_key], dtype=np.int64)
    except (TypeError, ValueError) as exc:
        raise DatasetError(f"corrupt dataset file {path}: bad {label_key!r} ({exc})") from exc
    if labels.shape != (data.shape[0],):
        raise DatasetError(
            f"corrupt dataset file {path}: {data.shape[0]} images but {labels.shape} labels; "
            f"{layout}"
        )
    if labels.size and (labels.min() < 0 or labels.max() >= num_labels):
        raise DatasetError(
            f"corrupt dataset file {path}: labels must lie in 0..{num_labels - 1}, got "
            f"{int(labels.min())}..{int(labels.max())}"
        )
    return data, labels


def _split_parts(split: str, train: Sequence[str], test: Sequence[str]) -> list[str]:
    if split == "train":
        return list(train)
    if split == "test":
        return list(test)
    if split == "all":
        return [*train, *test]
    raise DatasetError(f"unknown split {split!r}; allowed: {', '.join(SPLITS)}")


def read_cifar10(root: str | os.PathLike[str], *, split: Split = "train") -> Dataset:
    """Read CIFAR-10 from ``<root>/cifar-10-batches-py`` (the layout torchvision writes).

    Parameters
    ----------
    root : path
        Data directory that contains ``cifar-10-batches-py/``.
    split : {"train", "test", "all"}
        ``data_batch_1`` .. ``data_batch_5`` (50 000 images), ``test_batch`` (10 000), or both.

    Returns
    -------
    Dataset
        d = 3072 (3 x 32 x 32, channel-major as stored), pixels / 255, labels 0..9.

    Raises
    ------
    DatasetError
        A file is missing or corrupt; the message names the path and the expected layout.
    """
    folder = Path(root) / _CIFAR10_DIR
    names = _split_parts(split, [f"data_batch_{k}" for k in range(1, 6)], ["test_batch"])
    parts = [_cifar_arrays(folder / n, _LAYOUTS["cifar10"], b"labels", 10) for n in names]
    return Dataset(
        name="cifar10",
        raw=np.concatenate([p[0] for p in parts]),
        scale=255.0,
        labels=np.concatenate([p[1] for p in parts]),
        num_labels=10,
        source=f"CIFAR-10 {split} from {folder}",
    )


def read_cifar100(root: str | os.PathLike[str], *, split: Split = "train") -> Dataset:
    """Read CIFAR-100 from ``<root>/cifar-100-python`` with coarse labels merged into 10 buckets.

    The paper (section 4.1) combines the 20 coarse labels into 10 buckets "consisting of labels
    0 and 1, 2 and 3, etc.", i.e. bucket = coarse label // 2.

    Parameters
    ----------
    root : path
        Data directory that contains ``cifar-100-python/``.
    split : {"train", "test", "all"}
        ``train`` (50 000 images), ``test`` (10 000), or both.

    Returns
    -------
    Dataset
        d = 3072, pixels / 255, labels 0..9 (merged coarse buckets).

    Raises
    ------
    DatasetError
        A file is missing or corrupt; the message names the path and the expected layout.
    """
    folder = Path(root) / _CIFAR100_DIR
    names = _split_parts(split, ["train"], ["test"])
    parts = [_cifar_arrays(folder / n, _LAYOUTS["cifar100"], b"coarse_labels", 20) for n in names]
    return Dataset(
        name="cifar100",
        raw=np.concatenate([p[0] for p in parts]),
        scale=255.0,
        labels=np.concatenate([p[1] for p in parts]) // 2,  # the paper's 20 -> 10 buckets
        num_labels=10,
        source=f"CIFAR-100 {split} (coarse labels // 2) from {folder}",
    )


# --------------------------------------------------------------------------------------------
# IDX reader (Fashion-MNIST)
# --------------------------------------------------------------------------------------------


def _find_idx(folder: Path, stem: str, layout: str) -> Path:
    for candidate in (folder / stem, folder / f"{stem}.gz"):
        if candidate.is_file():
            return candidate
    raise DatasetError(f"missing dataset file {folder / stem} (or {stem}.gz); {layout}")


def read_idx(
    path: str | os.PathLike[str], *, magic: int, layout: str = ""
) -> npt.NDArray[np.uint8]:
    """Read one unsigned-byte IDX file (plain or gzip-compressed).

    The IDX header is big-endian: a 4-byte magic number (``0x00000803`` = 2051 for 3-d image
    arrays, ``0x00000801`` = 2049 for 1-d label arrays; byte 3 is the type, 0x08 = unsigned
    byte, byte 4 the number of dimensions) followed by one 4-byte size per dimension.

    Parameters
    ----------
    path : path
        The file; a name ending in ``.gz`` is decompressed.
    magic : int
        The expected magic number (2051 or 2049).
    layout : str
        Text appended to error messages (the expected directory layout).

    Returns
    -------
    numpy.ndarray of uint8
        Shape given by the header: (N, rows, cols) for images, (N,) for labels.

    Raises
    ------
    DatasetError
        Wrong magic number, truncated or over-long payload, or an unreadable gzip stream.
    """
    p = Path(path)
    suffix = f"; {layout}" if layout else ""
    try:
        if p.suffix == ".gz":
            with gzip.open(p, "rb") as fh:
                blob = fh.read()
        else:
            blob = p.read_bytes()
    except FileNotFoundError as exc:
        raise DatasetError(f"missing dataset file {p}{suffix}") from exc
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise DatasetError(f"corrupt dataset file {p} ({exc}){suffix}") from exc
    if len(blob) < 4:
        raise DatasetError(f"corrupt dataset file {p}: {len(blob)} bytes, no IDX header{suffix}")
    (found_magic,) = struct.unpack(">i", blob[:4])
    if found_magic != magic:
        raise DatasetError(
            f"corrupt dataset file {p}: IDX magic number {found_magic}, expected {magic}{suffix}"
        )
    ndim = magic & 0xFF
    header = 4 + 4 * ndim
    if len(blob) < header:
        raise DatasetError(f"corrupt dataset file {p}: truncated IDX header{suffix}")
    shape = struct.unpack(f">{ndim}i", blob[4:header])
    expected = header + int(np.prod(shape, dtype=np.int64))
    if len(blob) != expected:
        raise DatasetError(
            f"corrupt dataset file {p}: header says shape {tuple(shape)} ({expected} bytes), "
            f"file has {len(blob)} bytes{suffix}"
        )
    return np.frombuffer(blob, dtype=np.uint8, offset=header).reshape(shape).copy()


def read_fashion_mnist(root: str | os.PathLike[str], *, split: Split = "train") -> Dataset:
    """Read Fashion-MNIST from ``<root>/FashionMNIST/raw`` (the layout torchvision writes).

    Parameters
    ----------
    root : path
        Data directory that contains ``FashionMNIST/raw/``.
    split : {"train", "test", "all"}
        ``train-*`` (60 000 images), ``t10k-*`` (10 000), or both. Each file may be plain or
        ``.gz``.

    Returns
    -------
    Dataset
        d = 784 (28 x 28), pixels / 255, labels 0..9.

    Raises
    ------
    DatasetError
        A file is missing or corrupt (magic number, sizes, images/labels count mismatch).
    """
    folder = Path(root) / _FASHION_DIR
    layout = _LAYOUTS["fashion-mnist"]
    images: list[npt.NDArray[np.uint8]] = []
    labels: list[IntArray] = []
    for prefix in _split_parts(split, ["train"], ["t10k"]):
        img_path = _find_idx(folder, f"{prefix}-images-idx3-ubyte", layout)
        lab_path = _find_idx(folder, f"{prefix}-labels-idx1-ubyte", layout)
        img = read_idx(img_path, magic=_IDX_IMAGES_MAGIC, layout=layout)
        lab = read_idx(lab_path, magic=_IDX_LABELS_MAGIC, layout=layout).astype(np.int64)
        if img.shape[0] != lab.shape[0]:
            raise DatasetError(
                f"corrupt dataset: {img_path} has {img.shape[0]} images but {lab_path} has "
                f"{lab.shape[0]} labels; {layout}"
            )
        if lab.size and lab.max() >= 10:
            raise DatasetError(
                f"corrupt dataset file {lab_path}: labels must lie in 0..9, got max "
                f"{int(lab.max())}"
            )
        images.append(img.reshape(img.shape[0], -1))
        labels.append(lab)
    return Dataset(
        name="fashion-mnist",
        raw=np.concatenate(images),
        scale=255.0,
        labels=np.concatenate(labels),
        num_labels=10,
        source=f"Fashion-MNIST {split} from {folder}",
    )


# --------------------------------------------------------------------------------------------
# Embedded and synthetic data
# --------------------------------------------------------------------------------------------


def _load_digits(split: str) -> Dataset:
    if split == "test":
        raise DatasetError(
            "dataset 'digits' (sklearn load_digits) has no test split; use split 'train' or "
            "'all' (both give all 1797 images)"
        )
    if split not in SPLITS:
        raise DatasetError(f"unknown split {split!r}; allowed: {', '.join(SPLITS)}")
    from sklearn.datasets import load_digits

    bunch = load_digits()
    return Dataset(
        name="digits",
        raw=np.asarray(bunch.data, dtype=np.float64),
        scale=16.0,  # load_digits pixels are integers 0..16
        labels=np.asarray(bunch.target, dtype=np.int64),
        num_labels=10,
        source="scikit-learn load_digits (1797 8x8 images, pixels / 16)",
    )


def synthetic_dataset(
    n: int,
    d: int,
    num_labels: int,
    heterogeneity: float,
    *,
    noise_std: float = 0.1,
    rng: np.random.Generator,
) -> Dataset:
    """Generate a labelled dataset whose labels differ by a controllable amount.

    Each label ``k`` has a centre ``m_k = (1 - h) b + h c_k`` where ``b`` and ``c_k`` are drawn
    uniformly from [0.1, 0.9]^d and ``h = heterogeneity``; a record of label ``k`` is
    ``clip(m_k + N(0, noise_std^2 I_d), 0, 1)``, stored as 8-bit values like an image. With
    ``h = 0`` every label has the same distribution (IID clients whatever the label skew); with
    ``h = 1`` the labels' centres are independent, so label skew makes the clients
    heterogeneous. Labels are balanced: label ``k`` has ``n // num_labels`` records, plus one for
    ``k < n % num_labels``, in random order.

    Parameters
    ----------
    n, d : int
        Number of records and dimension (>= 1).
    num_labels : int
        Number of labels (1 <= num_labels <= n).
    heterogeneity : float
        Mixing parameter ``h`` in [0, 1].
    noise_std : float, optional
        Standard deviation of each record around its label's centre (>= 0).
    rng : numpy.random.Generator
        Source of randomness.

    Returns
    -------
    Dataset
        ``uint8`` storage (n * d bytes: 30 MB at n = 10 000, d = 3072), generated in chunks so
        that no float64 array larger than 1024 x d is built.

    Raises
    ------
    DatasetError
        A parameter outside its range.
    """
    if n < 1 or d < 1:
        raise DatasetError(f"synthetic dataset needs n >= 1 and d >= 1, got n={n}, d={d}")
    if not 1 <= num_labels <= n:
        raise DatasetError(f"synthetic num_labels must be in 1..n={n}, got {num_labels}")
    if not 0.0 <= heterogeneity <= 1.0:
        raise DatasetError(f"synthetic heterogeneity must be in [0, 1], got {heterogeneity}")
    if not (noise_std >= 0.0 and np.isfinite(noise_std)):
        raise DatasetError(f"synthetic noise_std must be >= 0, got {noise_std}")
    base = rng.uniform(0.1, 0.9, size=d)
    centres = (1.0 - heterogeneity) * base + heterogeneity * rng.uniform(
        0.1, 0.9, size=(num_labels, d)
    )
    labels = rng.permutation(np.arange(n, dtype=np.int64) % num_labels)
    raw = np.empty((n, d), dtype=np.uint8)
    chunk = 1024
    for start in range(0, n, chunk):
        stop = min(start + chunk, n)
        block = centres[labels[start:stop]] + rng.normal(0.0, noise_std, size=(stop - start, d))
        np.clip(block, 0.0, 1.0, out=block)
        raw[start:stop] = np.rint(block * 255.0).astype(np.uint8)
    return Dataset(
        name="synthetic",
        raw=raw,
        scale=255.0,
        labels=labels,
        num_labels=num_labels,
        source=(
            f"synthetic n={n} d={d} num_labels={num_labels} heterogeneity={heterogeneity} "
            f"noise_std={noise_std}"
        ),
    )


# --------------------------------------------------------------------------------------------
# Loading by name
# --------------------------------------------------------------------------------------------


def default_data_root() -> Path:
    """Return the data directory used when none is given: ``$FA_HETDP_DATA``, else ``./data``."""
    return Path(os.environ.get(DATA_ROOT_ENV, "data"))


_READERS: Final[dict[str, Callable[..., Dataset]]] = {
    "cifar10": read_cifar10,
    "cifar100": read_cifar100,
    "fashion-mnist": read_fashion_mnist,
}


@functools.lru_cache(maxsize=4)
def _load_cached(name: str, root: str, split: str) -> Dataset:
    if name == "digits":
        return _load_digits(split)
    return _READERS[name](Path(root), split=split)


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
        loaded by name: call :func:`synthetic_dataset` (scenarios do this from their
        ``[data.synthetic]`` table).
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
    if name == "synthetic":
        raise DatasetError(
            "dataset 'synthetic' is generated, not loaded: call "
            "fa_hetdp.data.datasets.synthetic_dataset(n, d, num_labels, heterogeneity, rng=...) "
            "or give "
            "a scenario a [data.synthetic] table"
        )
    if name not in DATASET_NAMES:
        raise DatasetError(f"unknown dataset {name!r}; allowed: {', '.join(DATASET_NAMES)}")
    if split not in SPLITS:
        raise DatasetError(f"unknown split {split!r}; allowed: {', '.join(SPLITS)}")
    resolved = Path(root) if root is not None else default_data_root()
    return _load_cached(name, str(resolved.expanduser().resolve()), split)


# --------------------------------------------------------------------------------------------
# `fa-hetdp data download NAME --root DIR`
# --------------------------------------------------------------------------------------------


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


_MANUAL: Final[dict[str, tuple[str, str]]] = {
    "cifar10": (
        f"the CIFAR-10 python version (cifar-10-python.tar.gz) from {_CIFAR_URL}",
        f"<root>/{_CIFAR10_DIR}/data_batch_1 .. data_batch_5, test_batch",
    ),
    "cifar100": (
        f"the CIFAR-100 python version (cifar-100-python.tar.gz) from {_CIFAR_URL}",
        f"<root>/{_CIFAR100_DIR}/train, test",
    ),
    "fashion-mnist": (
        f"the four files data/fashion/*-ubyte.gz from {_FASHION_URL}",
        f"<root>/{_FASHION_DIR}/train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz, "
        "t10k-images-idx3-ubyte.gz, t10k-labels-idx1-ubyte.gz (gzipped or not)",
    ),
}


def _manual_instructions(name: str, root: Path) -> str:
    what, where = _MANUAL[name]
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

    classes = {"cifar10": tvd.CIFAR10, "cifar100": tvd.CIFAR100, "fashion-mnist": tvd.FashionMNIST}
    for train in (True, False):
        classes[name](str(root), train=train, download=True)


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
