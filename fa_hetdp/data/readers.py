"""Readers of the paper's image files in torchvision's layout, and the embedded digits.

The paper (section 4) studies CIFAR-10, CIFAR-100 (its 20 coarse labels merged into 10 buckets,
labels 0 and 1, 2 and 3, ...) and Fashion-MNIST, each image flattened to one vector of
pixels / 255 (the data model of ``docs/design.md``). The readers take the files in exactly the
layout that torchvision writes, so ``fa-hetdp data download NAME --root DIR`` (torchvision, the
optional ``datasets`` extra) or a manual download both work::

    <root>/cifar-10-batches-py/data_batch_1 .. data_batch_5, test_batch   (python pickle)
    <root>/cifar-100-python/train, test                                    (python pickle)
    <root>/FashionMNIST/raw/train-images-idx3-ubyte[.gz], train-labels-idx1-ubyte[.gz],
                            t10k-images-idx3-ubyte[.gz],  t10k-labels-idx1-ubyte[.gz]   (IDX)

The pickle reader is restricted: it rebuilds numpy arrays and plain Python containers only and
refuses any other class, so a tampered CIFAR file cannot run code. The IDX reader checks the
header against the payload.
"""

from __future__ import annotations

import gzip
import io
import os
import pickle
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from fa_hetdp._types import IntArray
from fa_hetdp.data.dataset import SPLITS, Dataset, Split
from fa_hetdp.errors import DatasetError

__all__ = [
    "CIFAR10_DIR",
    "CIFAR10_LAYOUT",
    "CIFAR100_DIR",
    "CIFAR100_LAYOUT",
    "CIFAR_URL",
    "FASHION_MNIST_DIR",
    "FASHION_MNIST_LAYOUT",
    "FASHION_MNIST_URL",
    "read_cifar10",
    "read_cifar100",
    "read_digits",
    "read_fashion_mnist",
    "read_idx",
]

CIFAR10_DIR: Final[str] = "cifar-10-batches-py"
CIFAR100_DIR: Final[str] = "cifar-100-python"
FASHION_MNIST_DIR: Final[str] = "FashionMNIST/raw"
CIFAR_URL: Final[str] = "https://www.cs.toronto.edu/~kriz/cifar.html"
FASHION_MNIST_URL: Final[str] = "https://github.com/zalandoresearch/fashion-mnist"
_IDX_IMAGES_MAGIC: Final[int] = 2051
_IDX_LABELS_MAGIC: Final[int] = 2049

CIFAR10_LAYOUT: Final[str] = (
    f"expected <root>/{CIFAR10_DIR}/data_batch_1 .. data_batch_5 and test_batch "
    f"(python pickle, from {CIFAR_URL} or `fa-hetdp data download cifar10 --root <root>`)"
)
CIFAR100_LAYOUT: Final[str] = (
    f"expected <root>/{CIFAR100_DIR}/train and test "
    f"(python pickle, from {CIFAR_URL} or `fa-hetdp data download cifar100 --root <root>`)"
)
FASHION_MNIST_LAYOUT: Final[str] = (
    f"expected <root>/{FASHION_MNIST_DIR}/train-images-idx3-ubyte, train-labels-idx1-ubyte, "
    "t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte (IDX files, each may end in .gz; from "
    f"{FASHION_MNIST_URL} or `fa-hetdp data download fashion-mnist --root <root>`)"
)


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
    folder = Path(root) / CIFAR10_DIR
    names = _split_parts(split, [f"data_batch_{k}" for k in range(1, 6)], ["test_batch"])
    parts = [_cifar_arrays(folder / n, CIFAR10_LAYOUT, b"labels", 10) for n in names]
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
    folder = Path(root) / CIFAR100_DIR
    names = _split_parts(split, ["train"], ["test"])
    parts = [_cifar_arrays(folder / n, CIFAR100_LAYOUT, b"coarse_labels", 20) for n in names]
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
    folder = Path(root) / FASHION_MNIST_DIR
    layout = FASHION_MNIST_LAYOUT
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
# Embedded digits (scikit-learn)
# --------------------------------------------------------------------------------------------


def read_digits(root: str | os.PathLike[str] | None = None, *, split: Split = "train") -> Dataset:
    """Load scikit-learn's embedded digits (1797 8x8 images, d = 64, pixels / 16).

    ``root`` is ignored (nothing is read from disk); ``split`` ``"train"`` and ``"all"`` both
    give all 1797 images, there is no test split.
    """
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
