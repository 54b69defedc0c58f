"""A data owner's pre-flight check of the file its node will read (no argparse here).

``fa-hetdp check-data PATH`` (:mod:`fa_hetdp.cli.check_data`) prints :func:`inspect`'s
findings; the ClientApp of a data owner (``--node-config 'data-path="..."'``) reads its
records with :func:`load_checked_records`, which runs the same checks before the first round.
Each problem has two texts:

- ``detail``, for the data owner only (printed by ``fa-hetdp check-data``, written to the
  node's own log): names the file and, e.g., where the first NaN is;
- ``public``, the only text that leaves the node (the error the coordinator sees): the kind
  of problem and the file's *shape*, never a value of the data nor a position in it. The
  run's column names are public (the analyst's schema) and may appear in it (a header that
  lacks one); the other names of the owner's header stay in ``detail``.

Two kinds of file:

- **without the run's columns** (today's form): ``.npy`` without pickles, or a headerless
  numeric ``.csv``; one vector or a ``(records, d)`` table with at least one record, every
  value finite and in ``[0, 1]`` (scale pixels by 1/255 first), and ``d`` equal to the
  expected dimension when one is given (``--dim``). A ``.csv`` is first scanned under the
  reader's caps and the UTF-8 rule (:func:`fa_hetdp.data.tables.scan_text`).
- **with the run's columns** (``columns``; the scenario's ``[data] columns``): a CSV with a
  header row, or ``.parquet`` with pyarrow (:mod:`fa_hetdp.data.tables`). The named columns
  are read, in the run's order; a column with public ``bounds`` ``(low, high)`` is clipped into
  them and scaled to ``(value - low)/(high - low)`` in ``[0, 1]`` (the count clipped goes to the
  node's log and never leaves the node), a column without bounds must already lie in
  ``[0, 1]``. The records that come out are the protocol's ``(records, d)`` in ``[0, 1]``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from fa_hetdp._types import FloatArray
from fa_hetdp.data.tables import (
    DataProblem,
    TableError,
    check_schema,
    read_table,
    scale_columns,
    scan_text,
)
from fa_hetdp.errors import InputDataError

__all__ = [
    "DataCheckError",
    "DataProblem",
    "Inspection",
    "inspect",
    "inspect_data",
    "load_checked",
    "load_checked_records",
]

Bounds = Mapping[str, tuple[float, float]]

log = logging.getLogger("fa_hetdp.data_owner")


@dataclass(frozen=True)
class Inspection:
    """What :func:`inspect` found: the records in ``[0, 1]`` (None on problems) and more.

    ``clipped``: per bounded column, how many values lay outside the run's bounds and were
    clipped (exact counts about the records: for the data owner only).
    """

    records: FloatArray | None
    problems: tuple[DataProblem, ...]
    columns: tuple[str, ...] | None = None
    clipped: Mapping[str, int] = field(default_factory=dict)


class DataCheckError(InputDataError):
    """A data owner's file failed the pre-flight check; ``str()`` is the public text only.

    Attributes
    ----------
    problems : tuple of DataProblem
        Every problem found (their ``detail`` stays on the node).
    """

    def __init__(self, problems: tuple[DataProblem, ...]) -> None:
        self.problems = problems
        kinds = "; ".join(p.public for p in problems)
        super().__init__(f"the data owner's file failed the pre-flight check: {kinds}")


def _read(path: Path) -> FloatArray:
    if path.suffix == ".npy":
        data = np.load(path, allow_pickle=False)
    else:
        data = np.loadtxt(path, delimiter=",", ndmin=2)
    return np.asarray(data, dtype=np.float64)


_UNREADABLE = "unreadable file (not .npy without pickles or numeric .csv)"
_HEADER_HINT = (
    " (a CSV with a header row needs the run's columns: --columns, or the scenario's "
    "[data] columns)"
)


def inspect(
    path: str | Path,
    *,
    expected_d: int | None = None,
    columns: Sequence[str] | None = None,
    bounds: Bounds | None = None,
) -> Inspection:
    """Read ``path`` and check it (the module's docstring says how).

    Parameters
    ----------
    path : str or Path
        ``.npy`` (no pickles) or ``.csv`` (comma-separated, one record a row); with
        ``columns``: a CSV with a header row, or ``.parquet``.
    expected_d : int, optional
        The dimension the run expects.
    columns : sequence of str, optional
        The run's columns (public): read them by name, in this order.
    bounds : mapping, optional
        ``{column: (low, high)}``, public bounds of some of ``columns``.

    Raises
    ------
    ValueError
        ``columns`` or ``bounds`` themselves are wrong (a column twice, ``low >= high``, bounds
        without columns): the run's schema, not the owner's file.
    """
    path = Path(path)
    if columns is None:
        if bounds:
            raise ValueError("bounds need the run's columns (the columns they bound)")
        return _inspect_plain(path, expected_d)
    schema = check_schema(list(columns), dict(bounds) if bounds is not None else None)
    if schema:
        raise ValueError("; ".join(f"{key}: {message}" for key, message in schema))
    names = tuple(columns)
    if path.suffix.lower() == ".npy":
        return Inspection(None, (
            DataProblem("format", "a .npy file has no column names; the run names its columns "
                        "(give a CSV with a header row)",
                        f"{path}: a .npy file has no column names; the run reads columns "
                        f"{', '.join(map(repr, names))}: save them as a CSV with a header row"),
        ), names)  # fmt: skip
    try:
        table = read_table(path, names)
    except TableError as exc:
        return Inspection(None, (exc.problem,), names)
    if table.values is None:
        return Inspection(None, table.problems, names)
    records, clipped = scale_columns(table.values, names, bounds or {})
    problems: list[DataProblem] = []
    unbounded = [j for j, c in enumerate(names) if c not in (bounds or {})]
    outside = (records[:, unbounded] < 0.0) | (records[:, unbounded] > 1.0)
    if outside.any():
        row, col = (int(i) for i in np.argwhere(outside)[0])
        name = names[unbounded[col]]
        problems.append(
            DataProblem("range", "values outside [0, 1] in a column without bounds (state "
                        "the column's bounds, or scale it first)",
                        f"{path}: {int(outside.sum())} value(s) outside [0, 1] in column(s) "
                        f"without bounds, the first {float(records[row, unbounded[col]])!r} at "
                        f"record {row}, column {name!r}")
        )  # fmt: skip
    if expected_d is not None and len(names) != expected_d:
        problems.append(
            DataProblem("dimension", f"d={len(names)}, the run expects d={expected_d}",
                        f"{path}: {len(names)} column(s), the run expects d={expected_d}")
        )  # fmt: skip
    if problems:
        return Inspection(None, tuple(problems), names, clipped)
    return Inspection(records, (), names, clipped)


def _inspect_plain(path: Path, expected_d: int | None) -> Inspection:
    """Today's form: ``.npy`` or a headerless numeric ``.csv``, values already in [0, 1]."""
    if path.suffix.lower() == ".parquet":
        return Inspection(None, (
            DataProblem("columns", "a .parquet file is read by the run's column names, and "
                        "none were given",
                        f"{path}: give the run's columns (--columns, or the scenario's [data] "
                        "columns) to read a .parquet file"),
        ))  # fmt: skip
    if path.suffix.lower() != ".npy":
        try:
            scan_text(path)
        except TableError as exc:
            return Inspection(None, (exc.problem,))
    try:
        data = _read(path)
    except (OSError, ValueError) as exc:
        hint = _HEADER_HINT if path.suffix.lower() != ".npy" else ""
        return Inspection(None, (
            DataProblem("unreadable", _UNREADABLE, f"{path}: cannot read it: {exc}{hint}"),
        ))  # fmt: skip
    problems: list[DataProblem] = []
    if data.ndim == 1:
        data = data[np.newaxis, :]
    if data.ndim != 2 or data.shape[0] < 1 or data.shape[1] < 1:
        shape = "x".join(str(s) for s in data.shape)
        problems.append(
            DataProblem("shape", f"shape {shape}, expected (records, d) with records, d >= 1",
                        f"{path}: shape {data.shape}; expected one vector or a (records, d) table")
        )  # fmt: skip
        return Inspection(None, tuple(problems))
    d = data.shape[1]
    finite = np.isfinite(data)
    if not finite.all():
        row, col = (int(i) for i in np.argwhere(~finite)[0])
        count = int((~finite).sum())
        problems.append(
            DataProblem("nan", "NaN or infinite values",
                        f"{path}: {count} NaN/infinite value(s), the first at record {row}, "
                        f"coordinate {col}")
        )  # fmt: skip
    outside = finite & ((data < 0.0) | (data > 1.0))
    if outside.any():
        row, col = (int(i) for i in np.argwhere(outside)[0])
        problems.append(
            DataProblem("range", "values outside [0, 1] (scale them first, e.g. pixels / 255)",
                        f"{path}: {int(outside.sum())} value(s) outside [0, 1], the first "
                        f"{float(data[row, col])!r} at record {row}, coordinate {col}")
        )  # fmt: skip
    if expected_d is not None and d != expected_d:
        problems.append(
            DataProblem("dimension", f"d={d}, the run expects d={expected_d}",
                        f"{path}: d={d} per record, the run expects d={expected_d}")
        )  # fmt: skip
    return Inspection(data, tuple(problems))


def inspect_data(
    path: str | Path,
    *,
    expected_d: int | None = None,
    columns: Sequence[str] | None = None,
    bounds: Bounds | None = None,
) -> tuple[FloatArray | None, tuple[DataProblem, ...]]:
    """Read ``path`` and check it; return the ``(records, d)`` table (or None) and the problems.

    :func:`inspect` without the clipped counts (the same parameters).
    """
    found = inspect(path, expected_d=expected_d, columns=columns, bounds=bounds)
    return found.records, found.problems


def load_checked(
    path: str | Path,
    *,
    expected_d: int | None = None,
    columns: Sequence[str] | None = None,
    bounds: Bounds | None = None,
) -> FloatArray:
    """Return the data owner's vector ``x_i`` (the mean of its records) after the checks.

    Raises
    ------
    DataCheckError
        With the public text only; each problem's detail goes to this node's log.
    """
    records = load_checked_records(path, expected_d=expected_d, columns=columns, bounds=bounds)
    out: FloatArray = np.asarray(records.mean(axis=0))
    return out


def load_checked_records(
    path: str | Path,
    *,
    expected_d: int | None = None,
    columns: Sequence[str] | None = None,
    bounds: Bounds | None = None,
) -> FloatArray:
    """Return the data owner's records ``(m, d)`` in ``[0, 1]`` (rows are records) after the checks.

    With ``columns``, the run's named columns, each bounded one clipped and scaled; the counts
    clipped go to this node's log (``INFO``), never further.

    Raises
    ------
    DataCheckError
        As :func:`load_checked`.
    """
    found = inspect(path, expected_d=expected_d, columns=columns, bounds=bounds)
    if found.problems or found.records is None:
        for problem in found.problems:
            log.error("fa-hetdp data check: %s", problem.detail)
        raise DataCheckError(found.problems)
    clipped = {c: n for c, n in found.clipped.items() if n}
    if clipped:
        log.info(
            "fa-hetdp data check: %s: value(s) clipped into the run's bounds: %s",
            path,
            ", ".join(f"{c} {n}" for c, n in clipped.items()),
        )
    return found.records
