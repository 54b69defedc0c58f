"""A scenario's clients: its dataset, its partition, and one client's vector.

:func:`partition_scenario` samples a scenario's clients with the samplers of
:mod:`fa_hetdp.data.sampling` and a generator derived from the scenario's seed
(:func:`partition_rng`), so the engine, the Flower server and every Flower client process get
the same partition. Each client's vector is the scenario's summary of its records
(:mod:`fa_hetdp.data.summaries`, :func:`client_summary`); a Flower client takes its own
records (:func:`client_records`) and computes that summary itself.

It lives in ``config``, not ``data``, because it reads a :class:`Scenario`: ``config`` builds on
``data`` and ``data`` imports nothing of ``config`` (the layers of docs/design.md).
"""

from __future__ import annotations

import functools
from typing import Final

import numpy as np

from fa_hetdp._types import FloatArray, IntArray
from fa_hetdp.config.schema import Scenario
from fa_hetdp.config.sites import clear_site_cache, site_partition, site_records
from fa_hetdp.data.catalog import dataset_info, load_dataset, record_shape
from fa_hetdp.data.dataset import Dataset
from fa_hetdp.data.partitioners import partition_with_flwr
from fa_hetdp.data.sampling import (
    ClientPartition,
    sample_dirichlet,
    sample_label_skew,
    sample_uniform,
)
from fa_hetdp.data.summaries import ClientSummary
from fa_hetdp.data.synthetic import synthetic_dataset
from fa_hetdp.errors import ScenarioError

__all__ = [
    "NO_DATASET",
    "PARTITION_STREAM",
    "SYNTHETIC_STREAM",
    "clear_partition_cache",
    "client_records",
    "client_summary",
    "client_vector",
    "partition_rng",
    "partition_scenario",
    "partitioner_seed",
    "require_dataset",
    "scenario_dataset",
]

NO_DATASET: Final[str] = (
    "[data] names no dataset: each node must give its own data-path (a deployment), or state "
    "data.sites for a simulation"
)
"""The one line everything that needs a scenario's partitions refuses a scenario without a
dataset with (``[data] columns`` and no ``dataset``: :func:`require_dataset`). Public: it
travels from a node to the coordinator, so it holds no path and no value."""

PARTITION_STREAM: Final[int] = 0x5041_5254
"""Second entropy word of the partition's seed: ``SeedSequence([seed, PARTITION_STREAM])``.

Noise streams derived from the same scenario seed (e.g. ``SeedSequence(seed).spawn(k)``) have
different entropy, so they never coincide with the partition's stream.
"""

SYNTHETIC_STREAM: Final[int] = 0x5359_4E54
"""Second entropy word of a synthetic dataset's seed: ``SeedSequence([seed, SYNTHETIC_STREAM])``."""


def require_dataset(scenario: Scenario) -> str:
    """Return the scenario's dataset; refuse a scenario without one (:data:`NO_DATASET`).

    Raises
    ------
    ScenarioError
        ``[data]`` names no dataset (its nodes read their own files, node config
        ``data-path``), so it has no partitions to sample.
    """
    dataset = scenario.data.dataset
    if dataset is None:
        raise ScenarioError(NO_DATASET)
    return dataset


def partition_rng(seed: int) -> np.random.Generator:
    """Return the partition generator, ``SeedSequence([seed, PARTITION_STREAM])``."""
    return np.random.default_rng(np.random.SeedSequence([seed, PARTITION_STREAM]))


def partitioner_seed(seed: int) -> int:
    """Seed of a flwr-datasets partitioner: ``SeedSequence([seed, PARTITION_STREAM, 1])``.

    flwr-datasets seeds its own ``numpy`` generator with an integer; this one is derived from
    the scenario's seed on the partition's stream, so it differs from every noise stream.
    """
    state = np.random.SeedSequence([seed, PARTITION_STREAM, 1]).generate_state(1)
    return int(state[0])


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
    ScenarioError
        The scenario names no dataset (:data:`NO_DATASET`).
    """
    data = scenario.data
    dataset = require_dataset(scenario)
    if dataset == "synthetic":
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
    return load_dataset(dataset, root=data.root, split=data.split)


def client_summary(scenario: Scenario) -> ClientSummary:
    """Return what each client of ``scenario`` reports (``data.summary``, resolved).

    The record shape comes from the catalog (:func:`fa_hetdp.data.catalog.record_shape`;
    ``1 x 1 x d`` for synthetic data) and the histogram has one entry per label used:
    ``data.num_labels``, else ``len(data.label_ratios)``, else all the dataset's labels.
    Files (``data.sites``, or no dataset: each node's ``data-path``): the mean of the
    ``columns``, ``1 x 1 x len(columns)``.
    """
    data = scenario.data
    if data.sites is not None or data.dataset is None:  # files: the mean of the named columns
        return ClientSummary(kind="mean", image_shape=(1, 1, len(data.columns or ())))
    dim = None if data.synthetic is None else data.synthetic.dim
    if data.num_labels is not None:
        labels = data.num_labels
    elif data.label_ratios is not None:
        labels = len(data.label_ratios)
    elif data.synthetic is not None:
        labels = data.synthetic.num_labels
    else:
        labels = dataset_info(data.dataset).num_labels or 1
    return ClientSummary(
        kind=data.summary,
        image_shape=record_shape(data.dataset, dim),
        num_labels=labels,
        pool_block=2 if data.pool_block is None else data.pool_block,
    )


def partition_scenario(scenario: Scenario, num_clients: int | None = None) -> ClientPartition:
    """Sample a scenario's clients; deterministic given the scenario (cached per process).

    Uses :func:`partition_rng` of ``experiment.seed``, so the engine, the Flower server and
    every Flower client process get the same partition.

    Parameters
    ----------
    scenario : Scenario
        Label skew (``data.label_ratios``), Dirichlet (``data.dirichlet_alpha``), a
        flwr-datasets partitioner (``data.partitioner``,
        :func:`fa_hetdp.data.partitioners.partition_with_flwr`) or a uniform sample (none).
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
        ``num_clients < 1``, or the scenario names no dataset (:data:`NO_DATASET`).
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
    if data.sites is not None:  # client i holds the file sites[i] (fa_hetdp.config.sites)
        return site_partition(scenario, num_clients)
    dataset = scenario_dataset(scenario)  # refuses a scenario without a dataset
    rng = partition_rng(scenario.experiment.seed)
    summary = client_summary(scenario)
    if data.partitioner is not None:
        return partition_with_flwr(
            dataset,
            data.partitioner,
            num_clients=num_clients,
            num_labels=data.num_labels,
            summary=summary,
            seed=partitioner_seed(scenario.experiment.seed),
        )
    if data.label_ratios is not None:
        return sample_label_skew(
            dataset,
            num_clients=num_clients,
            label_ratios=data.label_ratios,
            records_per_client=data.records_per_client,
            summary=summary,
            rng=rng,
        )
    if data.dirichlet_alpha is not None:
        return sample_dirichlet(
            dataset,
            num_clients=num_clients,
            alpha=data.dirichlet_alpha,
            num_labels=data.num_labels,
            records_per_client=data.records_per_client,
            summary=summary,
            rng=rng,
        )
    return sample_uniform(
        dataset,
        num_clients=num_clients,
        num_labels=data.num_labels,
        records_per_client=data.records_per_client,
        summary=summary,
        rng=rng,
    )


def clear_partition_cache() -> None:
    """Forget the partitions and synthetic datasets cached in this process."""
    _partition_cached.cache_clear()
    scenario_dataset.cache_clear()
    clear_site_cache()


def client_records(
    scenario: Scenario, partition_id: int, num_partitions: int
) -> tuple[FloatArray, IntArray]:
    """Return client ``partition_id``'s own records and their labels (for the ``ClientApp``).

    The Flower client computes its summary from these
    (:func:`fa_hetdp.data.summaries.summarise` with :func:`client_summary`), which equals its
    row of :attr:`ClientPartition.vectors`.
    A scenario of site files (``data.sites``): the file ``sites[partition_id]``
    (:func:`fa_hetdp.config.sites.site_records`), every label 0.

    Returns
    -------
    records : FloatArray
        Shape (r, d), values in [0, 1].
    labels : IntArray
        Shape (r,).

    Raises
    ------
    ScenarioError
        ``partition_id`` out of range or ``num_partitions < 1``.
    DatasetError
        Missing files, or more clients than the data can supply.
    """
    _check_partition_id(partition_id, num_partitions)
    if scenario.data.sites is not None:  # its own file, without labels
        records = site_records(scenario, partition_id, num_partitions)
        return records, np.zeros(records.shape[0], dtype=np.int64)
    rows = partition_scenario(scenario, num_partitions).client_rows(partition_id)
    dataset = scenario_dataset(scenario)
    labels: IntArray = dataset.labels[rows].copy()
    return dataset.rows(rows), labels


def _check_partition_id(partition_id: int, num_partitions: int) -> None:
    if num_partitions < 1:
        raise ScenarioError(f"num_partitions must be >= 1, got {num_partitions}")
    if not 0 <= partition_id < num_partitions:
        raise ScenarioError(f"partition_id must be in 0..{num_partitions - 1}, got {partition_id}")


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
    _check_partition_id(partition_id, num_partitions)
    row: FloatArray = partition_scenario(scenario, num_partitions).vectors[partition_id].copy()
    return row
