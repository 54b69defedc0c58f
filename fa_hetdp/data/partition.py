"""Client sampling: the paper's label skew, Dirichlet partitions, and one vector per client.

The paper (section 4) samples 2 % of each dataset's images so that the labels follow given
ratios (1:...:1 and 91:1:...:1 over 10 labels, 1:1:1:1:1 and 96:1:1:1:1, 1:1 and 99:1), and each
client holds one image. Here the images of each label are drawn **at random, without
replacement**, with the scenario's seed: the authors' code took the first images in file order
and, through a bug, gave every client the same image. Every client gets distinct records.

A client may hold several records (``records_per_client = r``); then its vector is the mean of
its records (the data model of ``docs/design.md``).

Rounding rule (largest remainder, Hamilton's method): with ``n`` clients and ratios
``r_0 .. r_{k-1}``, label ``j`` first gets ``floor(n r_j / sum(r))`` clients; the clients left
over go one each to the labels with the largest fractional parts ``n r_j / sum(r) - floor(.)``,
ties broken by the lower label. The counts always sum to ``n`` and differ from the exact
quotas by less than one.

Every sampler takes a keyword-only ``rng``; :func:`partition_scenario` derives it from the
scenario's seed (:func:`partition_rng`), so every Flower client process computes the same
partition and takes its own row (:func:`client_vector`).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

import numpy as np

from fa_hetdp._types import FloatArray, IntArray
from fa_hetdp.config.schema import Scenario
from fa_hetdp.data.catalog import load_dataset
from fa_hetdp.data.dataset import Dataset
from fa_hetdp.data.synthetic import synthetic_dataset
from fa_hetdp.errors import DatasetError, ScenarioError

__all__ = [
    "PARTITION_STREAM",
    "SYNTHETIC_STREAM",
    "ClientPartition",
    "PartitionMethod",
    "clear_partition_cache",
    "client_vector",
    "clients_per_label",
    "partition_rng",
    "partition_scenario",
    "sample_dirichlet",
    "sample_label_skew",
    "sample_uniform",
    "scenario_dataset",
]

PartitionMethod = Literal["label-skew", "dirichlet", "uniform"]

PARTITION_STREAM: Final[int] = 0x5041_5254
"""Second entropy word of the partition's seed: ``SeedSequence([seed, PARTITION_STREAM])``.

Noise streams derived from the same scenario seed (e.g. ``SeedSequence(seed).spawn(k)``) have
different entropy, so they never coincide with the partition's stream.
"""

SYNTHETIC_STREAM: Final[int] = 0x5359_4E54
"""Second entropy word of a synthetic dataset's seed: ``SeedSequence([seed, SYNTHETIC_STREAM])``."""

_CHUNK_ROWS: Final[int] = 2048


@dataclass(frozen=True, eq=False)
class ClientPartition:
    """The clients of one scenario: one vector each, with the records it came from.

    Parameters
    ----------
    vectors : FloatArray
        Client vectors ``x_i`` in [0, 1]^d, shape (n, d): the mean of each client's records.
    indices : IntArray
        Dataset row of each record, shape (n, r); all distinct.
    record_labels : IntArray
        Label of each record, shape (n, r).
    labels : IntArray
        Each client's label, shape (n,): the label of its records under label skew, the most
        frequent label of its records (ties: the lower label) under a Dirichlet partition.
    num_labels : int
        Number of labels of the dataset.
    method : {"label-skew", "dirichlet", "uniform"}
        How the clients were sampled.
    dataset : str
        The dataset's source description.
    """

    vectors: FloatArray
    indices: IntArray
    record_labels: IntArray
    labels: IntArray
    num_labels: int
    method: PartitionMethod
    dataset: str

    def __post_init__(self) -> None:
        for array in (self.vectors, self.indices, self.record_labels, self.labels):
            array.setflags(write=False)

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
        """Number of records r behind each client vector."""
        return int(self.indices.shape[1])

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


def _vectors(dataset: Dataset, indices: IntArray) -> FloatArray:
    """Mean of each client's records, built in chunks to bound temporary memory."""
    n, r = indices.shape
    out = np.empty((n, dataset.dim), dtype=np.float64)
    for start in range(0, n, _CHUNK_ROWS):
        stop = min(start + _CHUNK_ROWS, n)
        block = dataset.rows(indices[start:stop])  # (rows, r, d)
        out[start:stop] = block[:, 0, :] if r == 1 else block.mean(axis=1)
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
    rng: np.random.Generator,
) -> ClientPartition:
    """Shuffle the client order and build the partition."""
    order = rng.permutation(indices.shape[0])
    indices = indices[order]
    return ClientPartition(
        vectors=_vectors(dataset, indices),
        indices=indices,
        record_labels=dataset.labels[indices],
        labels=client_labels[order],
        num_labels=dataset.num_labels,
        method=method,
        dataset=dataset.source,
    )


def sample_label_skew(
    dataset: Dataset,
    *,
    num_clients: int,
    label_ratios: Sequence[float],
    records_per_client: int = 1,
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
        dataset, np.concatenate(blocks), np.concatenate(client_labels), "label-skew", rng=rng
    )


def sample_uniform(
    dataset: Dataset,
    *,
    num_clients: int,
    num_labels: int | None = None,
    records_per_client: int = 1,
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
    return _finish(dataset, indices, _majority(dataset.labels[indices], k), "uniform", rng=rng)


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
    return _finish(dataset, indices, _majority(record_labels, k), "dirichlet", rng=rng)


# --------------------------------------------------------------------------------------------
# Scenarios
# --------------------------------------------------------------------------------------------


def partition_rng(seed: int) -> np.random.Generator:
    """Return the partition generator, ``SeedSequence([seed, PARTITION_STREAM])``."""
    return np.random.default_rng(np.random.SeedSequence([seed, PARTITION_STREAM]))


@functools.lru_cache(maxsize=2)
def scenario_dataset(scenario: Scenario) -> Dataset:
    """Load (or generate) a scenario's dataset; cached per process.

    Parameters
    ----------
    scenario : Scenario
        Its ``data`` section names the dataset, root and split; a synthetic dataset is generated
        from ``data.synthetic`` with ``SeedSequence([experiment.seed, SYNTHETIC_STREAM])``.

    Returns
    -------
    Dataset

    Raises
    ------
    DatasetError
        Missing or corrupt files.
    """
    data = scenario.data
    if data.dataset == "synthetic":
        spec = data.synthetic
        if spec is None:  # pragma: no cover - validation requires the table
            raise ScenarioError("data.synthetic: required when data.dataset = 'synthetic'")
        rng = np.random.default_rng(
            np.random.SeedSequence([scenario.experiment.seed, SYNTHETIC_STREAM])
        )
        return synthetic_dataset(
            spec.size,
            spec.dim,
            spec.num_labels,
            spec.heterogeneity,
            noise_std=spec.noise_std,
            rng=rng,
        )
    return load_dataset(data.dataset, root=data.root, split=data.split)


def partition_scenario(scenario: Scenario, num_clients: int | None = None) -> ClientPartition:
    """Sample a scenario's clients; deterministic given the scenario (cached per process).

    Uses :func:`partition_rng` of ``experiment.seed``, so the engine, the Flower server and
    every Flower client process get the same partition.

    Parameters
    ----------
    scenario : Scenario
        Label skew (``data.label_ratios``), Dirichlet (``data.dirichlet_alpha``) or a uniform
        sample (neither).
    num_clients : int, optional
        Override of ``scenario.num_clients`` (a Flower run config's ``num-clients``); the same
        sampling rule then draws this many clients (checked against the data when sampling).

    Returns
    -------
    ClientPartition
        Read-only arrays (shared by every caller in the process).

    Raises
    ------
    ScenarioError
        ``num_clients < 1``.
    DatasetError
        Missing or corrupt files, or a sample larger than the data.
    """
    n = scenario.num_clients if num_clients is None else num_clients
    if n < 1:
        raise ScenarioError(f"num_clients must be >= 1, got {n}")
    return _partition_cached(scenario, n)


@functools.lru_cache(maxsize=4)
def _partition_cached(scenario: Scenario, num_clients: int) -> ClientPartition:
    data = scenario.data
    dataset = scenario_dataset(scenario)
    rng = partition_rng(scenario.experiment.seed)
    if data.label_ratios is not None:
        return sample_label_skew(
            dataset,
            num_clients=num_clients,
            label_ratios=data.label_ratios,
            records_per_client=data.records_per_client,
            rng=rng,
        )
    if data.dirichlet_alpha is not None:
        return sample_dirichlet(
            dataset,
            num_clients=num_clients,
            alpha=data.dirichlet_alpha,
            num_labels=data.num_labels,
            records_per_client=data.records_per_client,
            rng=rng,
        )
    return sample_uniform(
        dataset,
        num_clients=num_clients,
        num_labels=data.num_labels,
        records_per_client=data.records_per_client,
        rng=rng,
    )


def clear_partition_cache() -> None:
    """Forget the partitions and synthetic datasets cached in this process."""
    _partition_cached.cache_clear()
    scenario_dataset.cache_clear()


def client_vector(scenario: Scenario, partition_id: int, num_partitions: int) -> FloatArray:
    """Return client ``partition_id``'s vector ``x_i`` (for the Flower ``ClientApp``).

    Every client process computes the same partition (:func:`partition_scenario` with
    ``num_clients = num_partitions``, cached per process) and takes its own row.

    Parameters
    ----------
    scenario : Scenario
        The scenario being run.
    partition_id : int
        This client's index, ``0 <= partition_id < num_partitions``.
    num_partitions : int
        Number of clients in the federation: normally ``scenario.num_clients``; another value
        samples that many clients with the scenario's rule (a run-config override).

    Returns
    -------
    FloatArray
        A fresh (writable) copy of shape (d,), values in [0, 1].

    Raises
    ------
    ScenarioError
        ``partition_id`` out of range or ``num_partitions < 1``.
    DatasetError
        Missing files, or more clients than the data can supply.
    """
    if num_partitions < 1:
        raise ScenarioError(f"num_partitions must be >= 1, got {num_partitions}")
    if not 0 <= partition_id < num_partitions:
        raise ScenarioError(f"partition_id must be in 0..{num_partitions - 1}, got {partition_id}")
    row: FloatArray = partition_scenario(scenario, num_partitions).vectors[partition_id].copy()
    return row
