"""A data owner's table with named columns: a CSV with a header row, or Parquet (optional).

The run states its columns and their public bounds (the scenario's ``[data] columns`` and
``bounds``, or ``fa-hetdp check-data --columns/--bounds``); a data owner's node reads the named
columns of its own file here, and :mod:`fa_hetdp.data.check` checks and scales them. Nothing
here needs pandas: CSV is read with the standard library's :mod:`csv`, Parquet with pyarrow
only when it is installed (the ``frames`` extra: ``pip install "fa-hetdp[frames]"``).

A data file is hostile input until read, so the CSV reader

- reads bytes incrementally, one line at a time and never more than :data:`MAX_LINE_BYTES`
  (plus one) of a line: a longer line is refused before it is read whole, and a file over
  :data:`MAX_FILE_BYTES` is refused at the first byte past the cap (and at once when its size
  on disk says so);
- accepts UTF-8 only (a UTF-8 byte-order mark is dropped): a UTF-16 or UTF-32 byte-order mark,
  a NUL byte (binary data, or UTF-16 without a mark) and any byte sequence that is not UTF-8
  (Latin-1, cp1252) are refused, naming the encoding problem;
- takes the first row as the header (names stripped of surrounding blanks) and needs every
  run column in it, once; the file's other columns are read past, never parsed;
- parses numbers strictly: decimal notation only (``12``, ``-0.5``, ``3e-2``); ``nan``,
  ``inf``, ``Infinity`` and numbers that overflow a float (``1e999``) are the "NaN or
  infinite values" problem, an empty cell or ``NA``/``N/A``/``null``/``None`` the "missing
  values" one, and any other text (``1,5``, ``1_000``, ``yes``) the "non-numeric" one.

Each problem is a :class:`DataProblem` with two texts: ``detail``, for the data owner (line
and column of the first case, the file's own header names), and ``public``, the only text that
may leave the node: the kind of problem and, for a header that does not match, the names of
the *run's* columns (public: the analyst's schema), never a name the owner's file adds, a
value, a line or a record number.
"""

from __future__ import annotations

import csv
import math
import re
from array import array
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Final

import numpy as np

from fa_hetdp._types import FloatArray

__all__ = [
    "MAX_FILE_BYTES",
    "MAX_LINE_BYTES",
    "PARQUET_EXTRA",
    "DataProblem",
    "Table",
    "TableError",
    "check_schema",
    "parse_bounds",
    "parse_columns",
    "read_csv_table",
    "read_parquet_table",
    "read_table",
    "scale_columns",
    "scan_text",
]

MAX_LINE_BYTES: Final[int] = 1 << 20
"""The longest line read (1 MiB): a record of thousands of numbers fits many times over."""
MAX_FILE_BYTES: Final[int] = 256 << 20
"""The largest file read (256 MiB of text: tens of millions of numbers)."""
MAX_PARQUET_VALUES: Final[int] = 64 << 20
"""The most values (records x columns) read from a Parquet file (512 MiB as float64)."""
PARQUET_EXTRA: Final[str] = "frames"
"""The optional extra that brings pyarrow (``pip install "fa-hetdp[frames]"``)."""

_NUMBER: Final = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_NON_FINITE: Final = re.compile(r"[+-]?(?:nan|inf|infinity)", re.IGNORECASE)
_MISSING: Final[frozenset[str]] = frozenset({"", "na", "n/a", "null", "none"})
_BOMS: Final[tuple[tuple[bytes, str], ...]] = (
    (b"\xff\xfe\x00\x00", "UTF-32"),
    (b"\x00\x00\xfe\xff", "UTF-32"),
    (b"\xff\xfe", "UTF-16"),
    (b"\xfe\xff", "UTF-16"),
)
_UTF8_BOM: Final[bytes] = b"\xef\xbb\xbf"
_NUL: Final[bytes] = b"\x00"


@dataclass(frozen=True)
class DataProblem:
    """One problem of a data file: ``public`` may leave the node, ``detail`` may not."""

    kind: str
    public: str
    detail: str


class TableError(Exception):
    """A problem that stops the reading (encoding, size, header, format): one problem."""

    def __init__(self, problem: DataProblem) -> None:
        self.problem = problem
        super().__init__(problem.public)


@dataclass(frozen=True)
class Table:
    """The run's columns of a data owner's file, in the file's units (not yet scaled).

    ``values`` is ``(records, len(columns))``, None when a problem of the values (NaN,
    missing, non-numeric) was found; ``problems`` lists those (each kind once, with counts).
    """

    columns: tuple[str, ...]
    values: FloatArray | None
    problems: tuple[DataProblem, ...] = field(default=())


# ------------------------------------------------------------------------------ the run's schema
def check_schema(
    columns: Sequence[Any], bounds: Mapping[Any, Any] | None = None
) -> list[tuple[str, str]]:
    """Return the problems of a run's columns and bounds, each as ``(key, message)``.

    ``key`` is ``"columns"``, ``"bounds"`` or ``"bounds.<column>"`` (the scenario prefixes
    ``data.``). Columns: a non-empty list of distinct non-empty strings without surrounding
    blanks; bounds: for columns of that list only, each ``[low, high]`` finite with
    ``low < high``.
    """
    problems: list[tuple[str, str]] = []
    if isinstance(columns, str) or not isinstance(columns, Sequence) or not columns:
        return [("columns", f"must be a non-empty array of column names, got {columns!r}")]
    seen: set[str] = set()
    for name in columns:
        if not isinstance(name, str) or not name or name != name.strip():
            problems.append(
                ("columns", f"a column name must be a non-empty string without surrounding "
                            f"blanks, got {name!r}")
            )  # fmt: skip
        elif name in seen:
            problems.append(("columns", f"lists the column {name!r} twice"))
        else:
            seen.add(name)
    if bounds is None:
        return problems
    if not isinstance(bounds, Mapping):
        return [*problems, ("bounds", f"must be a table {{column = [low, high]}}, got {bounds!r}")]
    for name, pair in bounds.items():
        key = f"bounds.{name}"
        if name not in seen:
            listed = ", ".join(repr(c) for c in columns if isinstance(c, str))
            problems.append((key, f"names no column of columns ({listed})"))
            continue
        message = _bounds_problem(pair)
        if message is not None:
            problems.append((key, message))
    return problems


def _bounds_problem(pair: Any) -> str | None:
    if (
        isinstance(pair, str | bytes)
        or not isinstance(pair, Sequence)
        or len(pair) != 2
        or not all(isinstance(v, int | float) and not isinstance(v, bool) for v in pair)
    ):
        return f"must be a pair [low, high] of numbers, got {pair!r}"
    low, high = float(pair[0]), float(pair[1])
    if not (math.isfinite(low) and math.isfinite(high)):
        return f"must be finite, got [{low!r}, {high!r}]"
    if low >= high:
        return f"needs low < high, got [{low!r}, {high!r}]"
    return None


def parse_columns(text: str) -> tuple[str, ...]:
    """Parse ``"score,age"`` (``--columns``) into names; raise ValueError naming the problem."""
    names = tuple(part.strip() for part in text.split(","))
    problems = check_schema(names)
    if problems:
        raise ValueError("; ".join(message for _, message in problems))
    return names


def parse_bounds(text: str) -> dict[str, tuple[float, float]]:
    """Parse ``"score=0:100,age=18:90"`` (``--bounds``); raise ValueError naming the problem."""
    out: dict[str, tuple[float, float]] = {}
    for part in text.split(","):
        name, sep, pair = part.partition("=")
        low, colon, high = pair.partition(":")
        name = name.strip()
        if not sep or not colon or not name:
            raise ValueError(f"expected column=low:high, got {part.strip()!r}")
        if name in out:
            raise ValueError(f"bounds of {name!r} given twice")
        try:
            values = (float(low), float(high))
        except ValueError:
            raise ValueError(f"bounds of {name!r}: not numbers: {pair!r}") from None
        message = _bounds_problem(values)
        if message is not None:
            raise ValueError(f"bounds of {name!r} {message}")
        out[name] = values
    return out


# ------------------------------------------------------------------------------ bytes -> lines
def _refuse(kind: str, public: str, detail: str) -> TableError:
    return TableError(DataProblem(kind, public, detail))


def _lines(
    stream: BinaryIO, where: str, *, max_line_bytes: int, max_file_bytes: int
) -> Iterator[str]:
    """Yield the decoded lines of ``stream`` (line ends kept); raise :class:`TableError`.

    Never holds more than ``max_line_bytes + 1`` bytes of one line.
    """
    total = 0
    number = 0
    while True:
        raw = stream.readline(max_line_bytes + 1)
        if not raw:
            return
        number += 1
        total += len(raw)
        if number == 1:
            for bom, name in _BOMS:
                if raw.startswith(bom):
                    raise _refuse(
                        "encoding", f"{name} text, not UTF-8 (save the file as UTF-8)",
                        f"{where}: starts with a {name} byte-order mark; save it as UTF-8",
                    )  # fmt: skip
            if raw.startswith(_UTF8_BOM):
                raw = raw[len(_UTF8_BOM) :]
        if len(raw) > max_line_bytes and not raw.endswith(b"\n"):
            raise _refuse(
                "line-too-long", f"a line longer than the reader's cap of {max_line_bytes} bytes",
                f"{where}: line {number} is longer than {max_line_bytes} bytes (read no further)",
            )  # fmt: skip
        if total > max_file_bytes:
            raise _refuse(
                "too-large", f"file larger than the reader's cap of {max_file_bytes} bytes",
                f"{where}: more than {max_file_bytes} bytes (read no further than line {number})",
            )  # fmt: skip
        if _NUL in raw:
            raise _refuse(
                "binary", "NUL bytes: a binary file, or UTF-16 without a byte-order mark "
                          "(save it as UTF-8 text)",
                f"{where}: line {number} holds a NUL byte at byte {raw.index(_NUL)}",
            )  # fmt: skip
        try:
            yield raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _refuse(
                "encoding",
                "not UTF-8 text (Latin-1, cp1252 or binary?): save the file as UTF-8",
                f"{where}: line {number} is not UTF-8 ({exc.reason} at byte {exc.start}); "
                "save the file as UTF-8",
            ) from None


def _open_checked(path: Path, max_file_bytes: int) -> BinaryIO:
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise _refuse("unreadable", "unreadable file", f"{path}: cannot read it: {exc}") from None
    if size > max_file_bytes:
        raise _refuse(
            "too-large", f"file larger than the reader's cap of {max_file_bytes} bytes",
            f"{path}: {size} bytes, more than the cap of {max_file_bytes}",
        )  # fmt: skip
    try:
        return path.open("rb")
    except OSError as exc:
        raise _refuse("unreadable", "unreadable file", f"{path}: cannot read it: {exc}") from None


def scan_text(
    path: str | Path,
    *,
    max_line_bytes: int = MAX_LINE_BYTES,
    max_file_bytes: int = MAX_FILE_BYTES,
) -> None:
    """Read ``path`` line by line under the caps and the UTF-8 rule; raise :class:`TableError`.

    The pre-scan of a headerless numeric CSV before :func:`numpy.loadtxt` reads it.
    """
    path = Path(path)
    with _open_checked(path, max_file_bytes) as stream:
        for _ in _lines(
            stream, str(path), max_line_bytes=max_line_bytes, max_file_bytes=max_file_bytes
        ):
            pass


# ------------------------------------------------------------------------------ CSV
class _Found:
    """Counts of one kind of value problem and where the first one is (detail only)."""

    def __init__(self) -> None:
        self.count = 0
        self.first = ""

    def add(self, where: str) -> None:
        if not self.count:
            self.first = where
        self.count += 1


def _number(text: str) -> tuple[str, float]:
    """Return ``(kind, value)``: kind ``""`` (a finite number), nan, missing or non-numeric."""
    cell = text.strip()
    if _NUMBER.fullmatch(cell):
        value = float(cell)
        return ("", value) if math.isfinite(value) else ("overflow", math.nan)
    if _NON_FINITE.fullmatch(cell):
        return "nan", math.nan
    if cell.lower() in _MISSING:
        return "missing", math.nan
    return "non-numeric", math.nan


_VALUE_PROBLEMS: Final[dict[str, tuple[str, str]]] = {
    # kind -> (problem kind, public text)
    "nan": ("nan", "NaN or infinite values"),
    "overflow": ("nan", "NaN or infinite values"),
    "missing": ("missing", "missing values (empty cells or NA) in the run's columns"),
    "non-numeric": ("non-numeric", "non-numeric values in the run's columns"),
    "ragged": ("ragged", "rows whose number of fields differs from the header's"),
}


def _header(header: list[str], columns: Sequence[str], where: str) -> dict[str, int]:
    """Return each run column's index in ``header``; raise :class:`TableError` otherwise."""
    names = [name.strip() for name in header]
    wanted = list(columns)
    twice = [c for c in wanted if names.count(c) > 1]
    missing = [c for c in wanted if c not in names]
    shown = ", ".join(repr(n) for n in names[:50]) + (" ..." if len(names) > 50 else "")
    if missing:
        raise _refuse(
            "header", "the header lacks the run's column(s) " + ", ".join(map(repr, missing)),
            f"{where}: the header lacks the run's column(s) {', '.join(map(repr, missing))}; "
            f"it has {shown or '(nothing)'}",
        )  # fmt: skip
    if twice:
        raise _refuse(
            "header", "the header names the run's column(s) " + ", ".join(map(repr, twice))
            + " more than once",
            f"{where}: the header names {', '.join(map(repr, twice))} more than once; it has "
            f"{shown}",
        )  # fmt: skip
    return {c: names.index(c) for c in wanted}


def read_csv_table(
    source: str | Path | BinaryIO,
    columns: Sequence[str],
    *,
    max_line_bytes: int = MAX_LINE_BYTES,
    max_file_bytes: int = MAX_FILE_BYTES,
    name: str | None = None,
) -> Table:
    """Read the run's ``columns`` of a CSV file with a header row.

    Parameters
    ----------
    source : str, Path or binary stream
        The file (or an open binary stream: it is read incrementally, never closed here).
    columns : sequence of str
        The run's columns, in the order of the result's coordinates.
    max_line_bytes, max_file_bytes : int
        The caps (:data:`MAX_LINE_BYTES`, :data:`MAX_FILE_BYTES`).
    name : str, optional
        How the details name a stream (default: the path, or ``"<stream>"``).

    Raises
    ------
    TableError
        A problem that stops the reading: encoding, NUL bytes, a line or file over its cap,
        malformed CSV, an empty file, a header that does not match the run's columns, a header
        but no records. Problems of the values come back in :attr:`Table.problems`.
    """
    if isinstance(source, str | Path):
        path = Path(source)
        with _open_checked(path, max_file_bytes) as stream:
            return read_csv_table(
                stream, columns, max_line_bytes=max_line_bytes,
                max_file_bytes=max_file_bytes, name=name or str(path),
            )  # fmt: skip
    where = name or "<stream>"
    lines = _lines(source, where, max_line_bytes=max_line_bytes, max_file_bytes=max_file_bytes)
    reader = csv.reader(lines, strict=True)
    found = {kind: _Found() for kind in _VALUE_PROBLEMS}
    flat = array("d")  # 8 bytes a value, not a Python float each
    records = 0
    index: dict[str, int] | None = None
    width = 0
    try:
        for row in reader:
            if not row or (len(row) == 1 and not row[0].strip()):
                continue  # a blank line
            if index is None:
                index = _header(row, columns, where)
                width = len(row)
                continue
            record = records
            records += 1
            if len(row) != width:
                found["ragged"].add(
                    f"line {reader.line_num} has {len(row)} field(s), the header {width}"
                )
                flat.extend([math.nan] * len(columns))
                continue
            values: list[float] = []
            for column, j in index.items():
                kind, value = _number(row[j])
                if kind:
                    found[kind].add(
                        f"record {record} (line {reader.line_num}), column {column!r}: "
                        f"{row[j][:40]!r}"
                    )
                values.append(value)
            flat.extend(values)
    except csv.Error as exc:
        raise _refuse(
            "malformed", "malformed CSV (quotes or field sizes)",
            f"{where}: malformed CSV at line {reader.line_num}: {exc}",
        ) from None  # fmt: skip
    if index is None:
        raise _refuse("empty", "empty file (no header)", f"{where}: empty file: no header row")
    if not records:
        raise _refuse("empty", "a header but no records", f"{where}: a header row but no records")
    problems: list[DataProblem] = []
    merged: dict[str, tuple[str, int, list[str]]] = {}
    for kind, seen in found.items():
        if seen.count:
            problem_kind, public = _VALUE_PROBLEMS[kind]
            count, firsts = merged.get(problem_kind, (public, 0, []))[1:]
            merged[problem_kind] = (public, count + seen.count, [*firsts, seen.first])
    labels = {"nan": "NaN or infinite", "missing": "missing", "non-numeric": "non-numeric",
              "ragged": "ragged"}  # fmt: skip
    for problem_kind, (public, count, firsts) in merged.items():
        noun = "row(s)" if problem_kind == "ragged" else "value(s)"
        problems.append(
            DataProblem(problem_kind, public,
                        f"{where}: {count} {labels[problem_kind]} {noun}, the first at "
                        + "; ".join(firsts))
        )  # fmt: skip
    if problems:
        return Table(tuple(columns), None, tuple(problems))
    table = np.frombuffer(flat, dtype=np.float64).reshape(records, len(columns)).copy()
    return Table(tuple(columns), table)


# ------------------------------------------------------------------------------ Parquet
def read_parquet_table(
    path: str | Path, columns: Sequence[str], *, max_file_bytes: int = MAX_FILE_BYTES
) -> Table:
    """Read the run's ``columns`` of a Parquet file (pyarrow: the ``frames`` extra).

    Raises
    ------
    TableError
        pyarrow missing (naming the extra), an unreadable file, a file over the cap, a schema
        without a run column (or with it twice), a column that is not numeric or boolean,
        more values than :data:`MAX_PARQUET_VALUES`, no records.
    """
    path = Path(path)
    try:
        import pyarrow as pa  # an optional extra (frames)
        import pyarrow.parquet as pq
    except ImportError:
        raise _refuse(
            "extra", f'reading .parquet needs pyarrow: pip install "fa-hetdp[{PARQUET_EXTRA}]"',
            f'{path}: reading .parquet needs pyarrow: pip install "fa-hetdp[{PARQUET_EXTRA}]" '
            "(or save the table as a CSV file with a header row)",
        ) from None  # fmt: skip
    _open_checked(path, max_file_bytes).close()
    try:
        parquet = pq.ParquetFile(path)
        schema = parquet.schema_arrow
        rows = parquet.metadata.num_rows
    except (OSError, ValueError, pa.ArrowException) as exc:
        raise _refuse(
            "unreadable", "unreadable file (not Parquet)", f"{path}: cannot read it: {exc}"
        ) from None
    _header(list(schema.names), columns, str(path))  # every run column, once
    for column in columns:
        kind = schema.field(column).type
        if not (pa.types.is_integer(kind) or pa.types.is_floating(kind)
                or pa.types.is_boolean(kind)):  # fmt: skip
            raise _refuse(
                "non-numeric", "non-numeric values in the run's columns",
                f"{path}: column {column!r} is of type {kind}, not numbers",
            )  # fmt: skip
    if rows < 1:
        raise _refuse("empty", "a header but no records", f"{path}: no records")
    if rows * len(columns) > MAX_PARQUET_VALUES:
        raise _refuse(
            "too-large", f"more than the reader's cap of {MAX_PARQUET_VALUES} values",
            f"{path}: {rows} records x {len(columns)} columns, more than {MAX_PARQUET_VALUES}",
        )  # fmt: skip
    try:
        table = parquet.read(columns=list(columns))
    except (OSError, ValueError, pa.ArrowException) as exc:
        raise _refuse(
            "unreadable", "unreadable file (not Parquet)", f"{path}: cannot read it: {exc}"
        ) from None
    problems: list[DataProblem] = []
    nulls = {c: int(table.column(c).null_count) for c in columns}
    if any(nulls.values()):
        counts = ", ".join(f"{c!r}: {n}" for c, n in nulls.items() if n)
        problems.append(
            DataProblem("missing", _VALUE_PROBLEMS["missing"][1],
                        f"{path}: missing (null) values in {counts}")
        )  # fmt: skip
        return Table(tuple(columns), None, tuple(problems))
    values = np.column_stack(
        [np.asarray(table.column(c).to_numpy(), dtype=np.float64) for c in columns]
    ).reshape(rows, len(columns))
    bad = ~np.isfinite(values)
    if bad.any():
        row, col = (int(i) for i in np.argwhere(bad)[0])
        problems.append(
            DataProblem("nan", "NaN or infinite values",
                        f"{path}: {int(bad.sum())} NaN or infinite value(s), the first at "
                        f"record {row}, column {columns[col]!r}")
        )  # fmt: skip
        return Table(tuple(columns), None, tuple(problems))
    return Table(tuple(columns), values)


def read_table(path: str | Path, columns: Sequence[str]) -> Table:
    """Read the run's ``columns`` of ``path``: ``.parquet``, else a CSV with a header row."""
    path = Path(path)
    if path.suffix.lower() == ".parquet":
        return read_parquet_table(path, columns)
    return read_csv_table(path, columns)


# ------------------------------------------------------------------------------ scaling
def scale_columns(
    values: FloatArray, columns: Sequence[str], bounds: Mapping[str, tuple[float, float]]
) -> tuple[FloatArray, dict[str, int]]:
    """Clip each bounded column into ``[low, high]`` and scale it to ``(value - low)/(high - low)``.

    Columns without bounds are returned unchanged (they must already lie in ``[0, 1]``).
    Returns the scaled ``(records, d)`` table and the clipped count per bounded column (exact
    counts about the records: they stay on the node).
    """
    out = np.array(values, dtype=np.float64, copy=True)
    clipped: dict[str, int] = {}
    for j, column in enumerate(columns):
        if column not in bounds:
            continue
        low, high = (float(v) for v in bounds[column])
        col = out[:, j]
        clipped[column] = int(np.sum(col < low) + np.sum(col > high))
        out[:, j] = np.clip((np.clip(col, low, high) - low) / (high - low), 0.0, 1.0)
    return out, clipped
