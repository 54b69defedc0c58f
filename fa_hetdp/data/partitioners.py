"""Flower's partitioners on the local datasets: flwr-datasets itself, built from local arrays.

A scenario may name one of flwr-datasets' label partitioners (``[data] partitioner = ...``,
``scenarios/README.md``) instead of the paper's skews (:mod:`fa_hetdp.data.sampling`):

* ``"iid"``: ``IidPartitioner`` (no parameters);
* ``"dirichlet"``: ``DirichletPartitioner`` (``alpha``; ``min_partition_size``, default 10;
  ``self_balancing``);
* ``"pathological"``: ``PathologicalPartitioner`` (``num_classes_per_partition``;
  ``class_assignment_mode``);
* ``"shard"``: ``ShardPartitioner`` (``num_shards_per_partition`` and/or ``shard_size``;
  ``keep_incomplete_shard``);
* ``"inner_dirichlet"``: ``InnerDirichletPartitioner`` (``alpha``; ``partition_sizes``, default
  equal sizes).

The records (those with labels ``0 .. num_labels - 1``) become a ``datasets.Dataset`` built
with ``Dataset.from_dict`` from two local columns, ``label`` and the dataset ``row``: nothing
is downloaded (flwr-datasets makes no network call at import or when partitioning; the tests
run with ``HF_DATASETS_OFFLINE=1`` and the socket refusing). Partition ``i`` is client ``i``
(the ``partition_id`` a Flower ``ClientApp`` gets), clients hold different numbers of records,
and each client's vector is its summary (:func:`fa_hetdp.data.summaries.summarise`) of them.
Shuffling is on and the partitioner's seed is derived from the scenario's seed, so every
process gets the same partition.

flwr-datasets is the optional extra ``[partitioners]`` (it pulls in Hugging Face ``datasets``,
``pyarrow`` and ``pandas``, about 330 MB, and takes about 2.5 s to import): it is imported
here only when a partition is made.
"""

from __future__ import annotations

import importlib.util
import warnings
from dataclasses import dataclass
from typing import Any, Final, Literal, get_args

import numpy as np

from fa_hetdp._types import FloatArray, IntArray
from fa_hetdp.data.dataset import Dataset
from fa_hetdp.data.sampling import ClientPartition, PartitionMethod
from fa_hetdp.data.summaries import ClientSummary, summarise
from fa_hetdp.errors import DatasetError, ScenarioError

__all__ = [
    "ASSIGNMENT_MODES",
    "PARTITIONERS",
    "PARTITIONER_EXTRA",
    "PartitionerName",
    "PartitionerSpec",
    "equal_sizes",
    "flwr_datasets_missing",
    "partition_with_flwr",
]

PartitionerName = Literal["iid", "dirichlet", "pathological", "shard", "inner_dirichlet"]
PARTITIONERS: Final[tuple[str, ...]] = get_args(PartitionerName)

ASSIGNMENT_MODES: Final[tuple[str, ...]] = ("random", "deterministic", "first-deterministic")
"""``class_assignment_mode`` of the pathological partitioner (flwr-datasets' values)."""

PARTITIONER_EXTRA: Final = 'pip install "fa-hetdp[partitioners]"'

DEFAULT_MIN_PARTITION_SIZE: Final = 10
"""flwr-datasets' default ``min_partition_size`` of the Dirichlet partitioner."""


@dataclass(frozen=True)
class PartitionerSpec:
    """A flwr-datasets partitioner and its parameters (module docstring; None: not given).

    Parameters
    ----------
    name : {"iid", "dirichlet", "pathological", "shard", "inner_dirichlet"}
        The partitioner.
    alpha : float or None
        Dirichlet concentration (``dirichlet``, ``inner_dirichlet``).
    min_partition_size : int or None
        ``dirichlet``: resample until every client holds this many records (default 10).
    self_balancing : bool
        ``dirichlet``: stop giving records to clients above the average size.
    num_classes_per_partition : int or None
        ``pathological``: labels per client.
    class_assignment_mode : str
        ``pathological``: ``"random"``, ``"deterministic"`` or ``"first-deterministic"``.
    num_shards_per_partition, shard_size : int or None
        ``shard``: shards per client and records per shard (at least one of them).
    keep_incomplete_shard : bool
        ``shard``: keep the last, smaller shard.
    partition_sizes : tuple of int or None
        ``inner_dirichlet``: each client's number of records (default: equal sizes).
    """

    name: PartitionerName
    alpha: float | None = None
    min_partition_size: int | None = None
    self_balancing: bool = False
    num_classes_per_partition: int | None = None
    class_assignment_mode: str = "random"
    num_shards_per_partition: int | None = None
    shard_size: int | None = None
    keep_incomplete_shard: bool = False
    partition_sizes: tuple[int, ...] | None = None

    @property
    def method(self) -> PartitionMethod:
        """The :attr:`ClientPartition.method` of partitions it makes."""
        method: PartitionMethod = f"flwr-{self.name}"  # type: ignore[assignment]
        return method

    def parameters(self) -> dict[str, Any]:
        """Return the parameters given (the scenario's keys), for messages and results files."""
        names = {
            "iid": (),
            "dirichlet": ("alpha", "min_partition_size", "self_balancing"),
            "pathological": ("num_classes_per_partition", "class_assignment_mode"),
            "shard": ("num_shards_per_partition", "shard_size", "keep_incomplete_shard"),
            "inner_dirichlet": ("alpha", "partition_sizes"),
        }[self.name]
        out: dict[str, Any] = {}
        for key in names:
            value = getattr(self, key)
            if value is not None:
                out[key] = list(value) if isinstance(value, tuple) else value
        return out


def flwr_datasets_missing() -> str | None:
    """Why a partitioner cannot run here (flwr-datasets absent), or None; imports nothing."""
    if importlib.util.find_spec("flwr_datasets") is None:
        return f"needs flwr-datasets, which is not installed: {PARTITIONER_EXTRA}"
    return None


def equal_sizes(total: int, parts: int) -> tuple[int, ...]:
    """``total`` records in ``parts`` sizes differing by at most one (the first ones larger)."""
    q, rem = divmod(total, parts)
    return tuple(q + (1 if i < rem else 0) for i in range(parts))


def _partitioner(spec: PartitionerSpec, n: int, pool: int, seed: int) -> Any:
    """Return the flwr-datasets partitioner for ``spec`` (imported here: an optional extra)."""
    try:
        from flwr_datasets import partitioner as fp  # type: ignore[import-untyped]
    except ImportError as exc:
        raise ScenarioError(f"data.partitioner: {flwr_datasets_missing()}") from exc
    by = "label"
    if spec.name == "iid":
        return fp.IidPartitioner(num_partitions=n)
    if spec.name == "dirichlet":
        min_size = spec.min_partition_size
        return fp.DirichletPartitioner(
            num_partitions=n,
            partition_by=by,
            alpha=spec.alpha,
            min_partition_size=DEFAULT_MIN_PARTITION_SIZE if min_size is None else min_size,
            self_balancing=spec.self_balancing,
            shuffle=True,
            seed=seed,
        )
    if spec.name == "pathological":
        return fp.PathologicalPartitioner(
            num_partitions=n,
            partition_by=by,
            num_classes_per_partition=spec.num_classes_per_partition,
            class_assignment_mode=spec.class_assignment_mode,
            shuffle=True,
            seed=seed,
        )
    if spec.name == "shard":
        return fp.ShardPartitioner(
            num_partitions=n,
            partition_by=by,
            num_shards_per_partition=spec.num_shards_per_partition,
            shard_size=spec.shard_size,
            keep_incomplete_shard=spec.keep_incomplete_shard,
            shuffle=True,
            seed=seed,
        )
    sizes = spec.partition_sizes if spec.partition_sizes is not None else equal_sizes(pool, n)
    return fp.InnerDirichletPartitioner(
        partition_sizes=list(sizes), partition_by=by, alpha=spec.alpha, shuffle=True, seed=seed
    )


def partition_with_flwr(
    dataset: Dataset,
    spec: PartitionerSpec,
    *,
    num_clients: int,
    num_labels: int | None = None,
    summary: ClientSummary | None = None,
    seed: int,
) -> ClientPartition:
    """Partition ``dataset``'s records over ``num_clients`` clients with flwr-datasets.

    Parameters
    ----------
    dataset : Dataset
        The records and their labels (nothing is downloaded).
    spec : PartitionerSpec
        The partitioner and its parameters.
    num_clients : int
        Number of partitions (clients), ``>= 1``.
    num_labels : int, optional
        Use only the records with labels ``0 .. num_labels - 1`` (default: all).
    summary : ClientSummary, optional
        What each client reports (default: the mean of its records).
    seed : int
        The partitioner's seed (``0 <= seed < 2**32``).

    Returns
    -------
    ClientPartition
        Client ``i`` is partition ``i``; clients of different sizes (``offsets``).

    Raises
    ------
    ScenarioError
        flwr-datasets is not installed, or the parameters do not fit (more clients than
        records, a label count out of range).
    DatasetError
        The partitioner gave up or left a client without records (its reason, one line).
    """
    if num_clients < 1:
        raise ScenarioError(f"num_clients must be >= 1, got {num_clients}")
    k = dataset.num_labels if num_labels is None else num_labels
    if not 1 <= k <= dataset.num_labels:
        raise ScenarioError(
            f"num_labels must be in 1..{dataset.num_labels} for dataset {dataset.name!r}, got {k}"
        )
    pool: IntArray = np.flatnonzero(dataset.labels < k).astype(np.int64)
    if num_clients > pool.size:
        raise ScenarioError(
            f"data.partitioner = {spec.name!r}: {num_clients} clients but only {pool.size} "
            f"records with labels 0..{k - 1}; every client needs at least one"
        )
    part = _partitioner(spec, num_clients, int(pool.size), seed)
    import datasets  # type: ignore[import-untyped]  # installed with flwr-datasets

    part.dataset = datasets.Dataset.from_dict(
        {"label": dataset.labels[pool].tolist(), "row": pool.tolist()}
    )
    where = f"data.partitioner = {spec.name!r} {spec.parameters()}"
    chunks: list[IntArray] = []
    try:
        with warnings.catch_warnings():  # the Dirichlet partitioner warns before each resample
            warnings.filterwarnings("ignore", message="The specified min_partition_size")
            for i in range(num_clients):
                rows = np.asarray(part.load_partition(i)["row"], dtype=np.int64)
                if rows.size == 0:
                    raise DatasetError(
                        f"{where} left client {i} of {num_clients} without records; use fewer "
                        "clients or other parameters"
                    )
                chunks.append(rows)
    except (ValueError, KeyError) as exc:
        first = str(exc).strip().split("\n")[0]
        raise DatasetError(
            f"{where} on {pool.size} records, {num_clients} clients: {first}"
        ) from exc
    offsets: IntArray = np.zeros(num_clients + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([c.size for c in chunks])
    indices: IntArray = np.concatenate(chunks)
    if np.unique(indices).size != indices.size:  # pragma: no cover - flwr-datasets contract
        raise DatasetError(f"{where} gave a record to two clients")
    if summary is None:
        summary = ClientSummary(image_shape=(1, 1, dataset.dim), num_labels=dataset.num_labels)
    vectors: FloatArray = np.empty((num_clients, summary.dim), dtype=np.float64)
    majority: IntArray = np.empty(num_clients, dtype=np.int64)
    for i, rows in enumerate(chunks):
        vectors[i] = summarise(dataset.rows(rows), dataset.labels[rows], summary)
        majority[i] = int(np.argmax(np.bincount(dataset.labels[rows], minlength=k)))
    return ClientPartition(
        vectors=vectors,
        indices=indices,
        record_labels=dataset.labels[indices],
        labels=majority,
        num_labels=dataset.num_labels,
        method=spec.method,
        dataset=dataset.source,
        summary=summary.kind,
        offsets=offsets,
    )
