"""``[data] sites``: a simulation whose clients are the user's own CSV files, one per site.

A newcomer with a CSV file per site states them in the scenario::

    [data]
    sites = ["site_a.csv", "site_b.csv", "site_c.csv"]   # relative to the scenario's folder
    columns = ["dep_delay", "arr_delay"]                  # the header names read, in order
    bounds = {dep_delay = [-60, 240], arr_delay = [-120, 240]}

and ``fa-hetdp run --scenario FILE`` simulates one client per file, in order: client ``i``
reads ``sites[i]`` through the data owner's reader (:func:`fa_hetdp.data.check.
load_checked_records`: the named columns, clipped into their bounds and scaled to ``[0, 1]``),
so the run has ``n = len(sites)`` clients. Each site is labelled by its file's stem
(``site_a``): the silo rows of a meta-analysis' result and forest plot carry those labels
(:func:`site_labels`).

:func:`check_sites` checks the table when the scenario is loaded, before any Flower process
starts: ``columns`` is required (``dataset`` is not: the files are the data), every file exists
and passes the pre-flight check of ``fa-hetdp check-data`` against the columns and bounds
(:func:`fa_hetdp.data.check.inspect`). The files are the simulation user's own, on their own
machine, so each problem is reported with its detail (the file, the line, the column). The
fewest records a site holds is the scenario's ``records_per_client`` (the public count a record
unit's ``min_records`` defaults to). A simulation's run config that sets ``num-clients`` to
another count than the files' is refused with the run config's other problems
(:func:`sites_clients_problem`), before any client reads a file. Every process that loads the
scenario checks the files again (each simulated client's too: a file is read once per check),
so keep them small.

**A two-arm trial** (``[data] arm = "<treatment column>"`` and ``effect = "MD"``, ``"SMD"``,
``"OR"``, ``"RR"`` or ``"RD"``): every file also holds the 0/1 arm column (1 treated, 0
control), read beside ``columns`` as a deployment node reads its ``data-path``
(:func:`fa_hetdp.data.arms.read_arm_file`, :func:`site_arm_records`). The
pre-flight check then reads the arm column too (:func:`_check_arms`): a file without it, a value
other than 0 and 1, or an arm with fewer records than the effect needs (2 for MD and SMD: a
variance; 1 for OR, RR, RD) is refused at load, naming the file. The simulated nodes consent to
their public arm sizes (:func:`fa_hetdp.clients.policy.simulated_node_config`).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, cast

import numpy as np
import numpy.typing as npt

from fa_hetdp._types import FloatArray
from fa_hetdp.config.rules import check_value, type_name
from fa_hetdp.config.schema import DataSpec, Scenario
from fa_hetdp.data.check import inspect, load_checked_records
from fa_hetdp.data.sampling import ClientPartition, PartitionMethod
from fa_hetdp.errors import InputDataError, ScenarioError

__all__ = [
    "SITES_DATASET",
    "SITE_KEYS",
    "check_sites",
    "clear_site_cache",
    "site_arm_records",
    "site_label",
    "site_labels",
    "site_partition",
    "site_records",
    "sites_clients_problem",
]

SITES_DATASET: Final[str] = "sites"
""":attr:`DataSpec.dataset` of a scenario whose clients are its ``sites`` files."""

SITE_KEYS: Final[frozenset[str]] = frozenset(
    {"sites", "columns", "bounds", "arm", "effect", "num_clients", "summary"}
)
"""The ``[data]`` keys allowed with ``sites`` (the files decide the rest)."""

Fail = Callable[[str, str], None]
"""``fail(dotted_key, message)``: records one problem (:meth:`sections.Checker.fail`)."""


def site_label(path: str | Path) -> str:
    """Return a site's label: its file's stem (``data/site_a.csv``: ``site_a``)."""
    return Path(path).stem


def site_labels(sites: Sequence[str] | None, partitions: Sequence[int]) -> list[str] | None:
    """Return the site label of each partition id (None without sites; ``-1``: unknown)."""
    if sites is None:
        return None
    return [site_label(sites[p]) if 0 <= p < len(sites) else f"silo {p}" for p in partitions]


def check_sites(
    fail: Fail,
    t: Mapping[str, Any],
    *,
    base: Path | None,
    columns: tuple[str, ...] | None,
    bounds: tuple[tuple[str, tuple[float, float]], ...],
    known: frozenset[str],
    arm: str | None = None,
    effect: str = "mean",
) -> DataSpec | None:
    """Check a ``[data]`` table with ``sites``; return its :class:`DataSpec`, or None.

    Parameters
    ----------
    fail : callable
        Records a problem (key, message).
    t : mapping
        The ``[data]`` table.
    base : Path or None
        The scenario file's folder (relative paths are relative to it); None: the current
        directory.
    columns, bounds
        ``columns`` and ``bounds`` as checked by the section (None: absent or wrong).
    known : frozenset of str
        Every ``[data]`` key (the others were reported as unknown already).
    arm, effect
        ``arm`` and ``effect`` as checked by the section (None and ``"mean"``: one arm).
    """
    ok = True
    for key in sorted((set(t) & known) - SITE_KEYS):
        fail(
            f"data.{key}",
            "not with data.sites: the files are the data, one client per file (allowed with "
            f"data.sites: {', '.join(sorted(SITE_KEYS))})",
        )
        ok = False
    if "columns" not in t:
        fail("data.columns", "required with data.sites: the header names each file is read by")
        ok = False
    if t.get("summary", "mean") != "mean":
        fail(
            "data.summary",
            f"with data.sites only 'mean' (the files have no labels or images), got "
            f"{t['summary']!r}",
        )
        ok = False
    paths = _paths(fail, t["sites"], base)
    if paths is None:
        return None
    if "num_clients" in t:
        n = t["num_clients"]
        if check_value("num_clients", n) is None and n != len(paths):
            fail(
                "data.num_clients",
                f"is {n} but data.sites lists {len(paths)} files (one client per file); leave "
                "num_clients out or make them agree",
            )
            ok = False
        elif check_value("num_clients", n) is not None:
            fail("data.num_clients", str(check_value("num_clients", n)))
            ok = False
    if not ok or columns is None:
        return None
    counts = _preflight(fail, paths, columns, dict(bounds), arm, effect)
    if counts is None:
        return None
    return DataSpec(
        dataset=SITES_DATASET,
        num_clients=len(paths),
        records_per_client=min(counts),
        columns=columns,
        bounds=bounds,
        arm=arm,
        effect=effect,
        sites=tuple(str(p) for p in paths),
    )


def _paths(fail: Fail, raw: Any, base: Path | None) -> list[Path] | None:
    """Return the sites' absolute paths, or None (each problem reported)."""
    if isinstance(raw, str) or not isinstance(raw, list) or len(raw) < 2:
        shown = type_name(raw) if not isinstance(raw, list) else f"{len(raw)} file(s)"
        fail("data.sites", f"must be an array of at least 2 file paths (one per site), got {shown}")
        return None
    folder = (base if base is not None else Path.cwd()).resolve()
    paths: list[Path] = []
    seen: dict[str, int] = {}
    ok = True
    for i, entry in enumerate(raw):
        key = f"data.sites[{i}]"
        if not isinstance(entry, str) or not entry.strip():
            fail(key, f"must be a file path (a non-empty string), got {entry!r}")
            ok = False
            continue
        path = Path(os.path.expanduser(entry))
        path = (path if path.is_absolute() else folder / path).resolve()
        if not path.is_file():
            where = "" if Path(entry).is_absolute() else f" (relative to {folder})"
            fail(key, f"no file {str(path)!r}{where}")
            ok = False
            continue
        if not os.access(path, os.R_OK):
            fail(key, f"file {str(path)!r} is not readable (permissions)")
            ok = False
            continue
        label = site_label(path)
        if label in seen:
            fail(
                key,
                f"{entry!r} has the same label {label!r} (the file's stem) as data.sites"
                f"[{seen[label]}]: each site is labelled by its file name, so give the files "
                "different names",
            )
            ok = False
            continue
        seen[label] = i
        paths.append(path)
    return paths if ok else None


def _preflight(
    fail: Fail,
    paths: Sequence[Path],
    columns: Sequence[str],
    bounds: dict[str, Any],
    arm: str | None = None,
    effect: str = "mean",
) -> list[int] | None:
    """Run ``fa-hetdp check-data``'s check on every file; return each site's record count.

    With ``arm``, the arm column is read last, as a two-arm node reads its file
    (:func:`fa_hetdp.data.arms.read_arm_file`), and checked (:func:`_check_arms`).
    """
    counts: list[int] = []
    read = (*columns, arm) if arm is not None else tuple(columns)
    for i, path in enumerate(paths):
        found = inspect(path, columns=read, bounds=bounds)
        for problem in found.problems:
            fail(f"data.sites[{i}]", f"{problem.detail} (fa-hetdp check-data's check)")
        if found.records is None or found.problems:
            continue
        if arm is not None:
            why = _check_arms(path, found.records, arm, effect)
            if why is not None:
                fail(f"data.sites[{i}]", why)
                continue
        counts.append(int(found.records.shape[0]))
    return counts if len(counts) == len(paths) else None


def _check_arms(path: Path, records: FloatArray, arm: str, effect: str) -> str | None:
    """Why a site's file cannot be a two-arm silo (None: it can); its arm column read last.

    The arm values are checked by the node's own check (:func:`fa_hetdp.data.arms.split_arm`),
    then each arm's size against the effect's least
    (:func:`fa_hetdp.data.arms.min_arm_size`).
    """
    from fa_hetdp.data.arms import arm_sizes, min_arm_size, split_arm

    try:
        _, arms = split_arm(records, arm)
    except InputDataError as exc:
        return f"{path}: {exc}"
    treated, control = arm_sizes(arms)
    least = min_arm_size(effect)
    if min(treated, control) < least:
        return (
            f"{path}: the arm column {arm!r} gives {treated} treated (1) and {control} control "
            f"(0) records; effect = {effect!r} needs at least {least} in each arm"
        )
    return None


def sites_clients_problem(data: DataSpec, num_clients: int) -> str | None:
    """Why a simulation of ``num_clients`` clients cannot run on ``data``'s sites (None: it can).

    A scenario of site files simulates one client per file: the run's ``num-clients``, when
    set, must be ``len(sites)``. The run config's checks call it
    (:meth:`fa_hetdp.flowerkit.settings.RunSettings.from_run_config`), so that such a run is
    refused with every other setting, before any client reads a file; None without sites.
    """
    sites = data.sites
    if sites is None or num_clients == len(sites):
        return None
    return (
        f"is {num_clients} but data.sites lists {len(sites)} files, one client per file: leave "
        f"num-clients unset (0: the scenario's {len(sites)}) or set it to {len(sites)}"
    )


def _check_clients(data: DataSpec, num_clients: int) -> tuple[str, ...]:
    sites = data.sites
    if sites is None:  # pragma: no cover - callers branch on data.sites
        raise ScenarioError("data.sites: not a scenario of site files")
    if sites_clients_problem(data, num_clients) is not None:
        raise ScenarioError(
            f"data.sites: {len(sites)} files, one client per file, but the run has "
            f"{num_clients} clients (num-clients): leave num-clients unset, or list that many "
            "files"
        )
    return sites


def site_records(scenario: Scenario, partition_id: int, num_partitions: int) -> FloatArray:
    """Return client ``partition_id``'s records: ``sites[partition_id]`` in ``[0, 1]``.

    Read by the data owner's reader (:func:`fa_hetdp.data.check.load_checked_records`) with
    the scenario's ``columns`` and ``bounds``.

    Raises
    ------
    ScenarioError
        ``num_partitions`` is not the number of sites, or ``partition_id`` is out of range.
    DataCheckError
        The file changed since the scenario was loaded and fails the check now.
    """
    sites = _check_clients(scenario.data, num_partitions)
    if not 0 <= partition_id < len(sites):
        raise ScenarioError(f"partition_id must be in 0..{len(sites) - 1}, got {partition_id}")
    data = scenario.data
    if data.arm is not None:  # the outcomes of the two-arm file
        return site_arm_records(scenario, partition_id, num_partitions)[0]
    return load_checked_records(
        sites[partition_id], columns=data.columns, bounds=data.column_bounds()
    )


def site_arm_records(
    scenario: Scenario, partition_id: int, num_partitions: int
) -> tuple[FloatArray, npt.NDArray[np.int64]]:
    """Return a two-arm client's ``(outcomes, arms)``: ``sites[partition_id]`` read as a node.

    The file read as a deployment node reads its ``data-path`` in a two-arm run
    (:func:`fa_hetdp.data.arms.read_arm_file`): ``columns`` scaled into ``[0, 1]``
    by the ``bounds``, and the ``arm`` column's 0/1 flags (1 treated).

    Raises
    ------
    ScenarioError
        ``num_partitions`` is not the number of sites, ``partition_id`` is out of range, or
        the scenario has no ``[data] arm``.
    DataCheckError, InputDataError
        The file changed since the scenario was loaded and fails the check now.
    """
    from fa_hetdp.data.arms import read_arm_file

    sites = _check_clients(scenario.data, num_partitions)
    if not 0 <= partition_id < len(sites):
        raise ScenarioError(f"partition_id must be in 0..{len(sites) - 1}, got {partition_id}")
    data = scenario.data
    if data.arm is None or data.columns is None:
        raise ScenarioError("data.arm: this scenario of site files has one arm")
    return read_arm_file(
        sites[partition_id], columns=data.columns, arm=data.arm, bounds=data.column_bounds()
    )


@functools.lru_cache(maxsize=2)
def _all_records(scenario: Scenario) -> tuple[FloatArray, ...]:
    n = scenario.num_clients
    return tuple(site_records(scenario, i, n) for i in range(n))


def site_partition(scenario: Scenario, num_clients: int) -> ClientPartition:
    """Return the clients of a scenario of site files: client ``i`` holds ``sites[i]``.

    Each client's vector is the mean of its records (``summary = "mean"``); the records are
    numbered one file after the other (:attr:`ClientPartition.offsets`), without labels.

    Raises
    ------
    ScenarioError
        ``num_clients`` is not the number of sites.
    """
    sites = _check_clients(scenario.data, num_clients)
    records = _all_records(scenario)
    sizes = np.array([r.shape[0] for r in records], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    total = int(offsets[-1])
    vectors = np.stack([r.mean(axis=0) for r in records]).astype(np.float64)
    return ClientPartition(
        vectors=vectors,
        indices=np.arange(total, dtype=np.int64),
        record_labels=np.zeros(total, dtype=np.int64),
        labels=np.zeros(len(sites), dtype=np.int64),
        num_labels=1,
        method=cast(PartitionMethod, SITES_DATASET),
        dataset=f"{len(sites)} site files: " + ", ".join(site_label(s) for s in sites),
        offsets=offsets,
    )


def clear_site_cache() -> None:
    """Forget the site records read in this process."""
    _all_records.cache_clear()
