"""Client sampling: the paper's label skew, Dirichlet partitions, uniform samples.

The paper (section 4) samples 2 % of each dataset's images so that the labels follow given
ratios (1:...:1 and 91:1:...:1 over 10 labels, 1:1:1:1:1 and 96:1:1:1:1, 1:1 and 99:1), and each
client holds one image. Here the images of each label are drawn **at random, without
replacement**, with the caller's generator: the authors' code took the first images in file
order and, through a bug, gave every client the same image. Every client gets distinct records.

A client may hold several records (``records_per_client = r``); then its vector is a summary of
them (:mod:`fa_hetdp.data.summaries`): by default their mean (the data model of
``docs/design.md``), else their block-mean pooled mean or their label histogram.

Rounding rule (largest remainder, Hamilton's method): with ``n`` clients and ratios
``r_0 .. r_{k-1}``, label ``j`` first gets ``floor(n r_j / sum(r))`` clients; the clients left
over go one each to the labels with the largest fractional parts ``n r_j / sum(r) - floor(.)``,
ties broken by the lower label. The counts always sum to ``n`` and differ from the exact
quotas by less than one.

Every sampler takes a keyword-only ``rng``; :mod:`fa_hetdp.config.partition` samples a scenario's
clients with them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

import numpy as np

from fa_hetdp._types import FloatArray, IntArray
from fa_hetdp.data.dataset import Dataset
from fa_hetdp.data.summaries import ClientSummary, summarise
from fa_hetdp.errors import DatasetError, ScenarioError

__all__ = [
    "ClientPartition",
    "PartitionMethod",
    "clients_per_label",
    "sample_dirichlet",
    "sample_label_skew",
    "sample_uniform",
]

PartitionMethod = Literal[
    "label-skew",
    "dirichlet",
    "uniform",
    "flwr-iid",
    "flwr-dirichlet",
    "flwr-pathological",
    "flwr-shard",
    "flwr-inner_dirichlet",
]
"""How the clients were sampled: ours, or a flwr-datasets partitioner (:mod:`.partitioners`)."""

_CHUNK_ROWS: Final[int] = 2048


@dataclass(frozen=True, eq=False)
class ClientPartition:
    """The clients of one scenario: one vector each, with the records it came from.

    Parameters
    ----------
    vectors : FloatArray
        Client vectors ``x_i`` in [0, 1]^k, shape (n, k): each client's summary of its records
        (their mean unless ``summary`` says otherwise).
    indices : IntArray
        Dataset row of each record, shape (n, r); all distinct. With ``offsets`` (clients of
        different sizes, a flwr-datasets partitioner) the rows of every client one after the
        other, shape (N,): use :meth:`client_rows`.
    record_labels : IntArray
        Label of each record, shape (n, r), or (N,) with ``offsets``.
    labels : IntArray
        Each client's label, shape (n,): the label of its records under label skew, the most
        frequent label of its records (ties: the lower label) under a Dirichlet partition.
    num_labels : int
        Number of labels of the dataset.
    method : {"label-skew", "dirichlet", "uniform"}
        How the clients were sampled.
    dataset : str
        The dataset's source description.
    summary : str
        What ``vectors`` hold (:data:`fa_hetdp.data.summaries.SUMMARIES`).
    offsets : IntArray or None
        Clients of different sizes: client ``i`` holds ``indices[offsets[i]:offsets[i + 1]]``,
        shape (n + 1,); None when every client holds ``r`` records.
    """

    vectors: FloatArray
    indices: IntArray
    record_labels: IntArray
    labels: IntArray
    num_labels: int
    method: PartitionMethod
    dataset: str
    summary: str = "mean"
    offsets: IntArray | None = None

    def __post_init__(self) -> None:
        for array in (self.vectors, self.indices, self.record_labels, self.labels):
            array.setflags(write=False)
        if self.offsets is not None:
            self.offsets.setflags(write=False)

    @property
    def num_clients(self) -> int:
        """Number of clients n."""
        return int(self.vectors.shape[0])

    @property
    def dim(self) -> int:
        """Dimension d of each client vector."""
        return int(self.vectors.shape[1])

    @property
    def records_per_client(self) -> int:
        """Number of records r behind each client vector (the fewest, when sizes differ)."""
        if self.offsets is not None:
            return int(np.diff(self.offsets).min())
        return int(self.indices.shape[1])

    @property
    def sizes(self) -> IntArray:
        """Number of records of each client, shape (n,)."""
        if self.offsets is not None:
            return np.diff(self.offsets).astype(np.int64)
        return np.full(self.num_clients, self.indices.shape[1], dtype=np.int64)

    def client_rows(self, client: int) -> IntArray:
        """Dataset rows of client ``client``'s records."""
        if self.offsets is not None:
            rows: IntArray = self.indices[self.offsets[client] : self.offsets[client + 1]]
            return rows
        rect: IntArray = self.indices[client]
        return rect

    def label_counts(self) -> IntArray:
        """Count the clients of each label (``labels``); shape (num_labels,)."""
        counts: IntArray = np.bincount(self.labels, minlength=self.num_labels).astype(np.int64)
        return counts


def clients_per_label(num_clients: int, ratios: Sequence[float]) -> IntArray:
    """Split ``num_clients`` over labels in proportion to ``ratios`` (largest remainder).

    Parameters
    ----------
    num_clients : int
        Number of clients n >= 0.
    ratios : sequence of float
        Non-negative ratios with a positive sum, one per label used (labels 0 .. k-1).

    Returns
    -------
    IntArray
        Counts, shape (k,), summing to ``num_clients``; ``|count_j - n r_j / sum(r)| < 1``.

    Raises
    ------
    ScenarioError
        Negative or non-finite ratios, a zero sum, or a negative count.

    Examples
    --------
    >>> clients_per_label(1000, [91] + [1] * 9).tolist()
    [910, 10, 10, 10, 10, 10, 10, 10, 10, 10]
    >>> clients_per_label(7, [1, 1, 1]).tolist()
    [3, 2, 2]
    """
    r = np.asarray(ratios, dtype=np.float64)
    if r.ndim != 1 or r.size == 0 or not np.all(np.isfinite(r)) or np.any(r < 0) or r.sum() <= 0:
        raise ScenarioError(
            f"label ratios must be a non-empty list of non-negative numbers with a positive "
            f"sum, got {list(ratios)}"
        )
    if num_clients < 0:
        raise ScenarioError(f"number of clients must be >= 0, got {num_clients}")
    quotas = num_clients * r / r.sum()
    counts: IntArray = np.floor(quotas).astype(np.int64)
    left = num_clients - int(counts.sum())
    # Largest remainder; a stable sort on -remainder breaks ties by the lower label.
    order = np.argsort(-(quotas - counts), kind="stable")
    counts[order[:left]] += 1
    return counts


def _vectors(dataset: Dataset, indices: IntArray, summary: ClientSummary | None) -> FloatArray:
    """Each client's summary of its records, built in chunks to bound temporary memory."""
    n, r = indices.shape
    if summary is None:
        summary = ClientSummary(image_shape=(1, 1, dataset.dim), num_labels=dataset.num_labels)
    out = np.empty((n, summary.dim), dtype=np.float64)
    chunk = max(1, _CHUNK_ROWS // r)  # at most _CHUNK_ROWS records in float64 at a time
    for start in range(0, n, chunk):
        stop = min(start + chunk, n)
        rows = indices[start:stop]
        out[start:stop] = summarise(dataset.rows(rows), dataset.labels[rows], summary)
    return out


def _check_common(num_clients: int, records_per_client: int) -> None:
    if num_clients < 1:
        raise ScenarioError(f"num_clients must be >= 1, got {num_clients}")
    if records_per_client < 1:
        raise ScenarioError(f"records_per_client must be >= 1, got {records_per_client}")


def _labels_used(dataset: Dataset, num_labels: int | None) -> int:
    k = dataset.num_labels if num_labels is None else num_labels
    if not 1 <= k <= dataset.num_labels:
        raise ScenarioError(
            f"num_labels must be in 1..{dataset.num_labels} for dataset {dataset.name!r}, got {k}"
        )
    return k


def _finish(
    dataset: Dataset,
    indices: IntArray,
    client_labels: IntArray,
    method: PartitionMethod,
    *,
    summary: ClientSummary | None,
    rng: np.random.Generator,
) -> ClientPartition:
    """Shuffle the client order and build the partition."""
    order = rng.permutation(indices.shape[0])
    indices = indices[order]
    return ClientPartition(
        vectors=_vectors(dataset, indices, summary),
        indices=indices,
        record_labels=dataset.labels[indices],
        labels=client_labels[order],
        num_labels=dataset.num_labels,
        method=method,
        dataset=dataset.source,
        summary="mean" if summary is None else summary.kind,
    )


def sample_label_skew(
    dataset: Dataset,
    *,
    num_clients: int,
    label_ratios: Sequence[float],
    records_per_client: int = 1,
    summary: ClientSummary | None = None,
    rng: np.random.Generator,
) -> ClientPartition:
    """Sample clients whose labels follow ``label_ratios`` (the paper's label skew, section 4.2).

    Label ``j`` (``j < len(label_ratios)``) gets ``clients_per_label(num_clients, ratios)[j]``
    clients; each of them holds ``records_per_client`` images of label ``j``, drawn at random
    without replacement, so no image is used twice. Client order is shuffled.

    Parameters
    ----------
    dataset : Dataset
        The data to sample from.
    num_clients : int
        Number of clients n >= 1.
    label_ratios : sequence of float
        Ratios over labels ``0 .. k-1`` (e.g. ``[91, 1, 1, 1, 1, 1, 1, 1, 1, 1]``);
        ``k <= dataset.num_labels``.
    records_per_client : int, optional
        Records behind each client vector (their mean); default 1 (the paper).
    summary : ClientSummary, optional
        What each client reports (:mod:`fa_hetdp.data.summaries`); default the mean of its
        records.
    rng : numpy.random.Generator
        Source of randomness.

    Returns
    -------
    ClientPartition

    Raises
    ------
    ScenarioError
        Bad ratios or counts.
    DatasetError
        A label has fewer images than its clients need (the message gives both numbers).
    """
    _check_common(num_clients, records_per_client)
    if len(label_ratios) > dataset.num_labels:
        raise ScenarioError(
            f"label_ratios has {len(label_ratios)} entries but dataset {dataset.name!r} has "
            f"{dataset.num_labels} labels"
        )
    counts = clients_per_label(num_clients, label_ratios)
    available = dataset.label_counts()
    for label, count in enumerate(counts):
        need = int(count) * records_per_client
        if need > available[label]:
            raise DatasetError(
                f"label {label} needs {need} images ({int(count)} clients x {records_per_client} "
                f"records) but {dataset.source} has {int(available[label])}"
            )
    blocks: list[IntArray] = []
    client_labels: list[IntArray] = []
    for label, count in enumerate(counts):
        if count == 0:
            continue
        pool = dataset.indices_of(label)
        chosen = rng.choice(pool, size=int(count) * records_per_client, replace=False)
        blocks.append(chosen.reshape(int(count), records_per_client))
        client_labels.append(np.full(int(count), label, dtype=np.int64))
    return _finish(
        dataset,
        np.concatenate(blocks),
        np.concatenate(client_labels),
        "label-skew",
        summary=summary,
        rng=rng,
    )


def sample_uniform(
    dataset: Dataset,
    *,
    num_clients: int,
    num_labels: int | None = None,
    records_per_client: int = 1,
    summary: ClientSummary | None = None,
    rng: np.random.Generator,
) -> ClientPartition:
    """Sample clients uniformly at random (without replacement) from labels ``0 .. k-1``.

    Parameters
    ----------
    dataset : Dataset
        The data to sample from.
    num_clients : int
        Number of clients n >= 1.
    num_labels : int, optional
        Use only records with labels ``0 .. num_labels - 1``; default all labels.
    records_per_client : int, optional
        Records behind each client vector; default 1.
    summary : ClientSummary, optional
        What each client reports (:mod:`fa_hetdp.data.summaries`); default the mean of its
        records.
    rng : numpy.random.Generator
        Source of randomness.

    Returns
    -------
    ClientPartition
        ``labels`` is the most frequent label of each client's records.

    Raises
    ------
    DatasetError
        Fewer usable records than ``num_clients * records_per_client``.
    """
    _check_common(num_clients, records_per_client)
    k = _labels_used(dataset, num_labels)
    pool = np.flatnonzero(dataset.labels < k).astype(np.int64)
    need = num_clients * records_per_client
    if need > pool.size:
        raise DatasetError(
            f"{num_clients} clients x {records_per_client} records need {need} images but "
            f"{dataset.source} has {pool.size} with labels 0..{k - 1}"
        )
    indices = rng.choice(pool, size=need, replace=False).reshape(num_clients, records_per_client)
    return _finish(
        dataset, indices, _majority(dataset.labels[indices], k), "uniform", summary=summary, rng=rng
    )


def _majority(record_labels: IntArray, num_labels: int) -> IntArray:
    """Most frequent label per row (ties: the lower label)."""
    counts = np.zeros((record_labels.shape[0], num_labels), dtype=np.int64)
    np.add.at(counts, (np.arange(record_labels.shape[0])[:, None], record_labels), 1)
    majority: IntArray = counts.argmax(axis=1).astype(np.int64)
    return majority


def sample_dirichlet(
    dataset: Dataset,
    *,
    num_clients: int,
    alpha: float,
    num_labels: int | None = None,
    records_per_client: int = 1,
    summary: ClientSummary | None = None,
    rng: np.random.Generator,
) -> ClientPartition:
    """Sample clients whose label mixtures are drawn from a symmetric Dirichlet(alpha).

    Client ``i`` draws label proportions ``p_i ~ Dir(alpha 1_k)`` over labels ``0 .. k-1`` and
    then the labels of its ``records_per_client`` records from ``Multinomial(r, p_i)``; the
    records of each label are drawn at random without replacement. Small ``alpha`` gives clients
    dominated by one label, large ``alpha`` IID clients. With ``records_per_client = 1`` each
    client's single label is marginally uniform, so the skew only shows with ``r > 1``.

    Parameters
    ----------
    dataset : Dataset
        The data to sample from.
    num_clients : int
        Number of clients n >= 1.
    alpha : float
        Concentration > 0.
    num_labels : int, optional
        Labels used, ``0 .. num_labels - 1``; default all.
    records_per_client : int, optional
        Records per client; default 1.
    summary : ClientSummary, optional
        What each client reports (:mod:`fa_hetdp.data.summaries`); default the mean of its
        records.
    rng : numpy.random.Generator
        Source of randomness.

    Returns
    -------
    ClientPartition
        ``labels`` is the most frequent label of each client's records.

    Raises
    ------
    ScenarioError
        ``alpha <= 0``.
    DatasetError
        The drawn mixtures ask for more images of a label than the dataset has.
    """
    _check_common(num_clients, records_per_client)
    if not (alpha > 0 and np.isfinite(alpha)):
        raise ScenarioError(f"dirichlet alpha must be > 0, got {alpha}")
    k = _labels_used(dataset, num_labels)
    proportions = rng.dirichlet(np.full(k, alpha), size=num_clients)
    per_client = np.stack([rng.multinomial(records_per_client, p) for p in proportions])
    demand = per_client.sum(axis=0)
    available = dataset.label_counts()[:k]
    for label in range(k):
        if demand[label] > available[label]:
            raise DatasetError(
                f"the Dirichlet({alpha}) draw needs {int(demand[label])} images of label {label} "
                f"but {dataset.source} has {int(available[label])}"
            )
    # Record labels per client, in label order, then fill each label's slots with a random draw.
    record_labels = np.repeat(
        np.tile(np.arange(k, dtype=np.int64), num_clients), per_client.reshape(-1)
    ).reshape(num_clients, records_per_client)
    indices = np.empty_like(record_labels)
    for label in range(k):
        slots = record_labels == label
        pool = dataset.indices_of(label)
        indices[slots] = rng.choice(pool, size=int(demand[label]), replace=False)
    return _finish(
        dataset, indices, _majority(record_labels, k), "dirichlet", summary=summary, rng=rng
    )
