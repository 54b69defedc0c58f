"""Client summaries: what a client that holds several records reports, in [0, 1]^k.

A client with ``r`` records (images, rows of a table) reports one vector ``x_i``. Three
summaries are built in (``docs/summaries.md`` says what each measures and when to use it):

``"mean"``
    The mean of its records, ``x_i = (1/r) sum_m z_im`` (the data model of ``docs/design.md``;
    the paper's setting is ``r = 1``). k = d.
``"pooled"``
    Block-mean pooling of that mean: each image (``channels x height x width``, as the
    dataset stores it) is cut into ``b x b`` blocks per channel and each block is replaced by
    its average, so ``k = channels x (height / b) x (width / b)`` (digits with ``b = 2``:
    k = 16; CIFAR with ``b = 4``: k = 192). A vector without an image shape (synthetic data)
    is pooled in runs of ``b`` consecutive coordinates. Pooling is linear, so pooling the
    mean equals the mean of the pooled records.
``"label-histogram"``
    The fraction of its records with each label, ``x_il = #{m : y_im = l} / r`` for the
    ``L`` labels used; k = L. It measures label skew only.

Every summary is an average of values in [0, 1], so it lies in [0, 1]^k, and it is a function of
the client's own records only: changing one client's records moves that client's summary and
nothing else, and the summary is still one vector in [0, 1]^k. The sensitivities of
``docs/design.md`` (section 4) hold with d replaced by k (``docs/privacy.md``).

:func:`summarise` is the one implementation: the partition of a scenario applies it to every
client (:mod:`fa_hetdp.config.partition`), and a Flower client applies it to its own records.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal, get_args

import numpy as np
import numpy.typing as npt

from fa_hetdp._types import FloatArray
from fa_hetdp.data.catalog import record_shape
from fa_hetdp.errors import DatasetError, InputDataError

__all__ = [
    "SUMMARIES",
    "ClientSummary",
    "SummaryKind",
    "label_histogram",
    "pool_block_problem",
    "pool_blocks",
    "pooled_shape",
    "summarise",
    "summarise_mean",
]

SummaryKind = Literal["mean", "pooled", "label-histogram"]
"""What a client reports: the mean of its records, their block-mean pooled mean, or their
label histogram."""

SUMMARIES: Final[tuple[str, ...]] = get_args(SummaryKind)

ImageShape = tuple[int, int, int]
"""``(channels, height, width)`` of one record, in the order the dataset flattens it."""


def pooled_shape(image_shape: ImageShape, block: int) -> ImageShape:
    """Return the shape after ``block x block`` mean pooling (a side of length 1 stays 1).

    Parameters
    ----------
    image_shape : (int, int, int)
        ``(channels, height, width)``.
    block : int
        Block side ``b >= 1``; it must divide ``height`` (unless ``height == 1``) and ``width``.

    Returns
    -------
    (int, int, int)
        ``(channels, height / b, width / b)``.

    Raises
    ------
    DatasetError
        ``block < 1`` or a side it does not divide (the message lists the blocks that fit).
    """
    channels, height, width = image_shape
    if block < 1:
        raise DatasetError(f"pool block must be >= 1, got {block}")
    sides = [s for s in (height, width) if s > 1]
    if any(s % block for s in sides):
        fits = [b for b in range(1, max(sides, default=1) + 1) if all(s % b == 0 for s in sides)]
        raise DatasetError(
            f"pool block {block} does not divide the record's shape {height} x {width}; "
            f"allowed: {', '.join(map(str, fits))}"
        )
    return (
        channels,
        height // block if height > 1 else 1,
        width // block if width > 1 else 1,
    )


def pool_block_problem(dataset: str, dim: int, block: int) -> str | None:
    """Say why ``block`` cannot pool records of ``dataset`` (dimension ``dim``), or None.

    The rule ``pool-block-fits`` of :data:`fa_hetdp.config.rules.CROSS_RULES` calls this.
    """
    try:
        shape = record_shape(dataset, dim)
        pooled_shape(shape, block)
    except DatasetError as exc:
        return str(exc)
    return None


def pool_blocks(x: npt.ArrayLike, image_shape: ImageShape, block: int) -> FloatArray:
    """Block-mean pool flattened records: each ``b x b`` block per channel becomes its average.

    Parameters
    ----------
    x : array_like
        Shape ``(..., d)`` with ``d = channels * height * width`` (flattened channel-major, as
        :meth:`fa_hetdp.data.dataset.Dataset.rows` returns them).
    image_shape : (int, int, int)
        ``(channels, height, width)``.
    block : int
        Block side (see :func:`pooled_shape`).

    Returns
    -------
    FloatArray
        Shape ``(..., k)``, ``k = channels * (height / b) * (width / b)``, flattened in the same
        order. Averages of values in [0, 1] stay in [0, 1].

    Raises
    ------
    DatasetError
        ``d`` does not match ``image_shape``, or ``block`` does not fit it.
    """
    arr = np.asarray(x, dtype=np.float64)
    channels, height, width = image_shape
    if arr.shape[-1] != channels * height * width:
        raise DatasetError(
            f"records of dimension {arr.shape[-1]} do not have the image shape "
            f"{channels} x {height} x {width}"
        )
    _, out_h, out_w = pooled_shape(image_shape, block)
    lead = arr.shape[:-1]
    blocks = arr.reshape(*lead, channels, out_h, height // out_h, out_w, width // out_w)
    pooled: FloatArray = blocks.mean(axis=(-3, -1)).reshape(*lead, channels * out_h * out_w)
    return pooled


def label_histogram(labels: npt.ArrayLike, num_labels: int) -> FloatArray:
    """Return the fraction of records with each label, per client.

    Parameters
    ----------
    labels : array_like of int
        Shape ``(..., r)``: the labels of each client's ``r >= 1`` records, in
        ``0 .. num_labels - 1``.
    num_labels : int
        Number of labels L (the length of the histogram).

    Returns
    -------
    FloatArray
        Shape ``(..., L)``; each row is non-negative and sums to 1.

    Raises
    ------
    DatasetError
        No records, ``num_labels < 1`` or a label outside ``0 .. num_labels - 1``.
    """
    y = np.asarray(labels, dtype=np.int64)
    if num_labels < 1:
        raise DatasetError(f"num_labels must be >= 1, got {num_labels}")
    if y.ndim < 1 or y.shape[-1] < 1:
        raise DatasetError(f"a label histogram needs at least one record, got shape {y.shape}")
    if y.min() < 0 or y.max() >= num_labels:
        raise DatasetError(
            f"labels must lie in 0..{num_labels - 1}, got {int(y.min())}..{int(y.max())}"
        )
    one_hot = y[..., None] == np.arange(num_labels)
    histogram: FloatArray = one_hot.mean(axis=-2, dtype=np.float64)
    return histogram


@dataclass(frozen=True)
class ClientSummary:
    """A resolved summary: what to compute and the shapes it needs.

    Parameters
    ----------
    kind : {"mean", "pooled", "label-histogram"}
        The summary (module docstring).
    image_shape : (int, int, int)
        ``(channels, height, width)`` of one record; ``(1, 1, d)`` when it has none.
    num_labels : int
        Labels used, L (the histogram's length).
    pool_block : int
        Block side b of ``"pooled"`` (ignored otherwise).
    """

    kind: SummaryKind = "mean"
    image_shape: ImageShape = (1, 1, 1)
    num_labels: int = 1
    pool_block: int = 2

    def __post_init__(self) -> None:
        if self.kind not in SUMMARIES:
            raise DatasetError(f"unknown summary {self.kind!r}; allowed: {', '.join(SUMMARIES)}")
        if self.kind == "pooled":
            pooled_shape(self.image_shape, self.pool_block)  # raises if the block does not fit

    @property
    def record_dim(self) -> int:
        """Dimension d of one record."""
        channels, height, width = self.image_shape
        return channels * height * width

    @property
    def dim(self) -> int:
        """Dimension k of the summary the client reports."""
        if self.kind == "label-histogram":
            return self.num_labels
        if self.kind == "pooled":
            channels, height, width = pooled_shape(self.image_shape, self.pool_block)
            return channels * height * width
        return self.record_dim


def summarise_mean(mean: npt.ArrayLike, summary: ClientSummary) -> FloatArray:
    """Return the summary of clients given the mean of their records (``"mean"``, ``"pooled"``).

    Parameters
    ----------
    mean : array_like
        Shape ``(..., d)``: each client's mean record.
    summary : ClientSummary
        ``"mean"`` or ``"pooled"`` (pooling is linear: pooling the mean is the mean of the
        pooled records).

    Returns
    -------
    FloatArray
        Shape ``(..., k)``.

    Raises
    ------
    InputDataError
        ``"label-histogram"``, which needs the records' labels (:func:`summarise`).
    """
    arr = np.asarray(mean, dtype=np.float64)
    if summary.kind == "label-histogram":
        raise InputDataError(
            "the label-histogram summary needs each record's label, which a mean does not carry"
        )
    if summary.kind == "pooled":
        return pool_blocks(arr, summary.image_shape, summary.pool_block)
    return arr


def summarise(records: npt.ArrayLike, labels: npt.ArrayLike, summary: ClientSummary) -> FloatArray:
    """Return what clients report for their records: the one implementation of the summaries.

    Parameters
    ----------
    records : array_like
        Shape ``(..., r, d)``: each client's ``r`` records in [0, 1]^d.
    labels : array_like of int
        Shape ``(..., r)``: their labels (read by ``"label-histogram"`` only).
    summary : ClientSummary
        What to report.

    Returns
    -------
    FloatArray
        Shape ``(..., k)`` in [0, 1]^k (``k = summary.dim``).

    Raises
    ------
    DatasetError
        Records without at least one row, or whose dimension is not ``summary.record_dim``.
    """
    z = np.asarray(records, dtype=np.float64)
    if z.ndim < 2 or z.shape[-2] < 1 or z.shape[-1] != summary.record_dim:
        raise DatasetError(
            f"records must have shape (..., r, {summary.record_dim}) with r >= 1, got {z.shape}"
        )
    if summary.kind == "label-histogram":
        return label_histogram(labels, summary.num_labels)
    mean = z[..., 0, :] if z.shape[-2] == 1 else z.mean(axis=-2)
    return summarise_mean(mean, summary)
