"""A data owner's pre-flight check of the file its node will read (no argparse here).

``fa-hetdp check-data PATH`` (:mod:`fa_hetdp.cli.check_data`) prints :func:`inspect_data`'s
findings; the ClientApp of a data owner (``--node-config 'data-path="..."'``) reads its
records with :func:`load_checked`, which runs the same checks before the first round. Each
problem has two texts:

- ``detail``, for the data owner only (printed by ``fa-hetdp check-data``, written to the
  node's own log): names the file and, e.g., where the first NaN is;
- ``public``, the only text that leaves the node (the error the coordinator sees): the kind
  of problem and the file's *shape*, never a value of the data nor a position in it.

Checks: readable (``.npy`` without pickles, or ``.csv``), one vector or a ``(records, d)``
table with at least one record, every value finite (no NaN or infinity), every value in
``[0, 1]`` (scale pixels by 1/255 first), and ``d`` equal to the expected dimension when one
is given (``--dim``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fa_hetdp._types import FloatArray
from fa_hetdp.errors import InputDataError

__all__ = [
    "DataCheckError",
    "DataProblem",
    "inspect_data",
    "load_checked",
    "load_checked_records",
]

log = logging.getLogger("fa_hetdp.data_owner")


@dataclass(frozen=True)
class DataProblem:
    """One problem of a data file: ``public`` may leave the node, ``detail`` may not."""

    kind: str
    public: str
    detail: str


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


def inspect_data(
    path: str | Path, *, expected_d: int | None = None
) -> tuple[FloatArray | None, tuple[DataProblem, ...]]:
    """Read ``path`` and check it; return the ``(records, d)`` table (or None) and the problems.

    Parameters
    ----------
    path : str or Path
        ``.npy`` (no pickles) or ``.csv`` (comma-separated, one record a row).
    expected_d : int, optional
        The dimension the run expects.
    """
    path = Path(path)
    try:
        data = _read(path)
    except (OSError, ValueError) as exc:
        kind = "unreadable"
        return None, (
            DataProblem(kind, "unreadable file (not .npy without pickles or numeric .csv)",
                        f"{path}: cannot read it: {exc}"),
        )  # fmt: skip
    problems: list[DataProblem] = []
    if data.ndim == 1:
        data = data[np.newaxis, :]
    if data.ndim != 2 or data.shape[0] < 1 or data.shape[1] < 1:
        shape = "x".join(str(s) for s in data.shape)
        problems.append(
            DataProblem("shape", f"shape {shape}, expected (records, d) with records, d >= 1",
                        f"{path}: shape {data.shape}; expected one vector or a (records, d) table")
        )  # fmt: skip
        return None, tuple(problems)
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
    return data, tuple(problems)


def load_checked(path: str | Path, *, expected_d: int | None = None) -> FloatArray:
    """Return the data owner's vector ``x_i`` (the mean of its records) after the checks.

    Raises
    ------
    DataCheckError
        With the public text only; each problem's detail goes to this node's log.
    """
    out: FloatArray = np.asarray(load_checked_records(path, expected_d=expected_d).mean(axis=0))
    return out


def load_checked_records(path: str | Path, *, expected_d: int | None = None) -> FloatArray:
    """Return the data owner's records ``(m, d)`` (rows are records) after the checks.

    Raises
    ------
    DataCheckError
        As :func:`load_checked`.
    """
    data, problems = inspect_data(path, expected_d=expected_d)
    if problems or data is None:
        for problem in problems:
            log.error("fa-hetdp data check: %s", problem.detail)
        raise DataCheckError(problems)
    return data
