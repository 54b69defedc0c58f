"""A data owner's file with a header, as people hold it, and a corpus of hostile ones (issue 29).

Every hostile file is refused with a problem naming its kind; the public text (the only one
that leaves a node: ``str(DataCheckError)``) holds no value of the file, no name the owner's
header adds, no line or record number and not the path.
"""

from __future__ import annotations

import io
import logging
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from fa_hetdp.data import tables
from fa_hetdp.data.check import DataCheckError, inspect, load_checked_records
from fa_hetdp.data.tables import (
    MAX_LINE_BYTES,
    TableError,
    parse_bounds,
    parse_columns,
    read_csv_table,
    scan_text,
)

COLUMNS = ("score", "age")
BOUNDS = {"score": (0.0, 100.0), "age": (18.0, 90.0)}
#: Values and header names of the owner's files: found in no public text.
LEAKS = ("73.125", "41.5", "patient_secret", "café", "1e999", "nan", "abc", "Smith")


def _public(path: Path, columns: tuple[str, ...] = COLUMNS) -> tuple[str, list[str], str]:
    """Return the public text, the problems' kinds and their details (joined)."""
    with pytest.raises(DataCheckError) as info:
        load_checked_records(path, columns=columns, bounds=BOUNDS)
    problems = info.value.problems
    return str(info.value), [p.kind for p in problems], " | ".join(p.detail for p in problems)


def _assert_no_leak(public: str, path: Path) -> None:
    for leak in LEAKS:
        assert leak not in public, (leak, public)
    assert str(path) not in public and path.name not in public
    assert not re.search(r"(line|record|row|column) \d", public), public


def _write(tmp_path: Path, content: bytes, name: str = "owner.csv") -> Path:
    path = tmp_path / name
    path.write_bytes(content)
    return path


GOOD = "patient_secret,score,age\nA7,73.125,41.5\nB2,50,18\nC9,120,90\n"


# ------------------------------------------------------------------------------ good files
def _expected() -> np.ndarray:
    return np.array([[0.73125, (41.5 - 18) / 72], [0.5, 0.0], [1.0, 1.0]])


def test_a_csv_with_a_header_is_read_by_name_clipped_and_scaled(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = _write(tmp_path, GOOD.encode())
    with caplog.at_level(logging.INFO, logger="fa_hetdp.data_owner"):
        records = load_checked_records(path, columns=COLUMNS, bounds=BOUNDS)
    np.testing.assert_allclose(records, _expected())
    # The clipped count is logged on the node (score 120 > 100), and that is all.
    assert "clipped" in caplog.text and "score 1" in caplog.text
    found = inspect(path, columns=COLUMNS, bounds=BOUNDS)
    assert dict(found.clipped) == {"score": 1, "age": 0}
    # The run's order, not the file's.
    flipped = load_checked_records(path, columns=("age", "score"), bounds=BOUNDS)
    np.testing.assert_allclose(flipped, _expected()[:, ::-1])


@pytest.mark.parametrize(
    "content",
    [
        b"\xef\xbb\xbf" + GOOD.encode(),  # a UTF-8 byte-order mark (Excel's "CSV UTF-8")
        GOOD.replace("\n", "\r\n").encode(),  # CRLF line ends
        GOOD.replace("A7", '"Smith, J"').encode(),  # a quoted field with a comma
        (" patient_secret , score , age \n" + GOOD.split("\n", 1)[1]).encode(),  # blanks
        (GOOD + "\n\n").encode(),  # trailing blank lines
        GOOD.replace("A7", '"A\n7"').encode(),  # a quoted field over two lines
    ],
    ids=["utf8-bom", "crlf", "quoted-comma", "blank-header-names", "blank-lines", "quoted-newline"],
)
def test_ordinary_variants_read_the_same(tmp_path: Path, content: bytes) -> None:
    path = _write(tmp_path, content)
    np.testing.assert_allclose(
        load_checked_records(path, columns=COLUMNS, bounds=BOUNDS), _expected()
    )


def test_a_column_without_bounds_must_lie_in_zero_one(tmp_path: Path) -> None:
    path = _write(tmp_path, b"flag,score\n1,73.125\n0,41.5\n")
    records = load_checked_records(path, columns=("flag", "score"), bounds={"score": (0, 100)})
    np.testing.assert_allclose(records, [[1.0, 0.73125], [0.0, 0.415]])
    bad = _write(tmp_path, b"flag,score\n3,73.125\n", "bad.csv")
    with pytest.raises(DataCheckError) as info:
        load_checked_records(bad, columns=("flag", "score"), bounds={"score": (0, 100)})
    assert [p.kind for p in info.value.problems] == ["range"]
    assert "'flag'" in info.value.problems[0].detail
    assert "flag" not in str(info.value) and "3" not in str(info.value).replace("[0, 1]", "")


# ------------------------------------------------------------------------------ the corpus
CORPUS: list[tuple[str, bytes, str]] = [
    ("utf16-bom", GOOD.encode("utf-16"), "encoding"),
    ("utf32-bom", GOOD.encode("utf-32"), "encoding"),
    ("utf16-no-bom", GOOD.encode("utf-16-le"), "binary"),
    ("latin1", GOOD.replace("A7", "café").encode("latin-1"), "encoding"),
    (
        "cp1252-in-value",
        "patient_secret,score,age\nx,73.125,41.5\u20ac\n".encode("cp1252"),
        "encoding",
    ),
    ("binary-garbage", bytes(range(256)) * 64, "binary"),
    ("binary-no-nul", b"\x89PNG\r\n\x1a\n" + bytes(range(1, 256)) * 8, "encoding"),
    ("nul-in-text", GOOD.replace("73.125", "73.1\x0025").encode(), "binary"),
    ("missing-column", b"patient_secret,score,weight\nA7,73.125,41.5\n", "header"),
    ("duplicated-column", b"score,age,score\n73.125,41.5,1\n", "header"),
    ("no-header", b"73.125,41.5\n50,18\n", "header"),
    ("empty", b"", "empty"),
    ("blank-only", b"\n\r\n\n", "empty"),
    ("header-only", b"patient_secret,score,age\n", "empty"),
    ("ragged-short", b"patient_secret,score,age\nA7,73.125\n", "ragged"),
    ("ragged-long", b"patient_secret,score,age\nA7,73.125,41.5,9\n", "ragged"),
    ("nan-string", b"patient_secret,score,age\nA7,nan,41.5\n", "nan"),
    ("NaN-string", b"patient_secret,score,age\nA7,NaN,41.5\n", "nan"),
    ("inf-string", b"patient_secret,score,age\nA7,73.125,inf\n", "nan"),
    ("minus-infinity", b"patient_secret,score,age\nA7,-Infinity,41.5\n", "nan"),
    ("overflow", b"patient_secret,score,age\nA7,1e999,41.5\n", "nan"),
    ("empty-cell", b"patient_secret,score,age\nA7,,41.5\n", "missing"),
    ("NA-cell", b"patient_secret,score,age\nA7,NA,41.5\n", "missing"),
    ("text", b"patient_secret,score,age\nA7,abc,41.5\n", "non-numeric"),
    ("decimal-comma", b'patient_secret,score,age\nA7,"73,125",41.5\n', "non-numeric"),
    ("underscore", b"patient_secret,score,age\nA7,73_125,41.5\n", "non-numeric"),
    ("hex", b"patient_secret,score,age\nA7,0x49,41.5\n", "non-numeric"),
    ("unterminated-quote", b'patient_secret,score,age\n"A7,73.125,41.5\n', "malformed"),
    ("quote-in-value", b'patient_secret,score,age\nA7,7"3.125",41.5\n', "non-numeric"),
]


@pytest.mark.parametrize(("content", "kind"), [c[1:] for c in CORPUS], ids=[c[0] for c in CORPUS])
def test_every_hostile_file_is_refused_naming_its_kind_and_no_value(
    tmp_path: Path, content: bytes, kind: str
) -> None:
    path = _write(tmp_path, content)
    public, kinds, detail = _public(path)
    assert kind in kinds, (kinds, detail)
    assert "pre-flight check" in public
    _assert_no_leak(public, path)
    assert str(path) in detail  # the owner is told which file


def test_the_kinds_are_named_in_words(tmp_path: Path) -> None:
    words = {
        "utf16-bom": "UTF-16",
        "latin1": "not UTF-8",
        "binary-garbage": "NUL bytes",
        "empty": "empty file",
        "header-only": "no records",
        "ragged-short": "number of fields",
        "nan-string": "NaN or infinite",
        "overflow": "NaN or infinite",
        "empty-cell": "missing values",
        "text": "non-numeric",
        "unterminated-quote": "malformed CSV",
    }
    by_id = {c[0]: c[1] for c in CORPUS}
    for case, word in words.items():
        public, _, _ = _public(_write(tmp_path, by_id[case], f"{case}.csv"))
        assert word in public, (case, public)


def test_a_header_that_does_not_match_names_the_run_columns_only(tmp_path: Path) -> None:
    path = _write(tmp_path, b"patient_secret,score,weight\nA7,73.125,41.5\n")
    public, _, detail = _public(path)
    assert "'age'" in public  # the run's column: public schema
    assert "weight" not in public and "patient_secret" not in public
    assert "'weight'" in detail and "'patient_secret'" in detail  # the owner sees its header
    twice = _write(tmp_path, b"score,age,score\n73.125,41.5,1\n", "twice.csv")
    public, _, _ = _public(twice)
    assert "'score'" in public and "more than once" in public
    # A headerless numeric file read by name: its first row (data) is not echoed.
    plain = _write(tmp_path, b"73.125,41.5\n", "plain.csv")
    public, _, detail = _public(plain)
    assert "73.125" in detail and "73.125" not in public


def test_every_value_problem_is_counted_in_one_pass(tmp_path: Path) -> None:
    path = _write(tmp_path, b"patient_secret,score,age\nA7,nan,41.5\nB2,abc,\nC9,1e999,20\nD1,5\n")
    public, kinds, detail = _public(path)
    assert sorted(kinds) == ["missing", "nan", "non-numeric", "ragged"]
    assert "2 NaN or infinite value(s)" in detail and "line 2" in detail
    _assert_no_leak(public, path)


# ------------------------------------------------------------------------------ huge input
class _CountingRaw(io.RawIOBase):
    """A file's raw stream that counts the bytes handed out (what the reader read)."""

    def __init__(self, path: Path) -> None:
        self._file = path.open("rb", buffering=0)
        self.read_bytes = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        n = self._file.readinto(buffer)
        self.read_bytes += n or 0
        return n or 0

    def close(self) -> None:
        self._file.close()
        super().close()


def test_a_50_mb_line_is_refused_before_it_is_read_whole(tmp_path: Path) -> None:
    path = tmp_path / "huge.csv"
    with path.open("wb") as f:
        f.write(b"score,age\n")
        chunk = b"73.125," * (1 << 16)
        for _ in range((50 << 20) // len(chunk) + 1):
            f.write(chunk)
        f.write(b"41.5\n")
    assert path.stat().st_size > 50 << 20
    raw = _CountingRaw(path)
    stream = io.BufferedReader(raw, buffer_size=1 << 16)
    with pytest.raises(TableError) as info:
        read_csv_table(stream, COLUMNS, name=str(path))
    stream.close()
    assert info.value.problem.kind == "line-too-long"
    # The reader stopped one cap (plus a buffer) into the line, not 50 MB in.
    assert raw.read_bytes <= MAX_LINE_BYTES + (1 << 17), raw.read_bytes
    # Through the node's path: the same refusal, the public text without a value.
    public, kinds, detail = _public(path)
    assert kinds == ["line-too-long"] and "line 2" in detail
    _assert_no_leak(public, path)
    # A headerless .csv gets the same pre-scan before numpy reads it.
    with pytest.raises(TableError) as info:
        scan_text(path)
    assert info.value.problem.kind == "line-too-long"
    with pytest.raises(DataCheckError, match="longer than"):
        load_checked_records(path)


def test_a_file_over_the_cap_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path, GOOD.encode() * 50)
    with pytest.raises(TableError) as info:  # by its size on disk, before reading
        read_csv_table(path, COLUMNS, max_file_bytes=1000)
    assert info.value.problem.kind == "too-large"
    with path.open("rb") as stream:  # a stream (no size on disk): refused as it reads
        with pytest.raises(TableError) as info:
            read_csv_table(stream, COLUMNS, max_file_bytes=1000)
        assert stream.tell() <= 1000 + 100  # stopped at the line that crossed the cap
    assert info.value.problem.kind == "too-large"


# ------------------------------------------------------------------------------ other formats
def test_a_npy_file_cannot_name_columns(tmp_path: Path) -> None:
    path = tmp_path / "owner.npy"
    np.save(path, np.full((2, 2), 0.5))
    public, kinds, _ = _public(path)
    assert kinds == ["format"] and "header row" in public
    # Without the run's columns it reads as before.
    np.testing.assert_allclose(load_checked_records(path), np.full((2, 2), 0.5))


def test_a_headerless_csv_reads_as_before_and_hints_at_columns(tmp_path: Path) -> None:
    plain = _write(tmp_path, b"0.25,0.5\n0.75,1\n", "plain.csv")
    np.testing.assert_allclose(load_checked_records(plain), [[0.25, 0.5], [0.75, 1.0]])
    with_header = _write(tmp_path, GOOD.encode(), "header.csv")
    with pytest.raises(DataCheckError) as info:
        load_checked_records(with_header)
    (problem,) = info.value.problems
    assert problem.kind == "unreadable" and "--columns" in problem.detail
    latin = _write(tmp_path, "0.25,0.5 é\n".encode("latin-1"), "latin.csv")
    with pytest.raises(DataCheckError, match="not UTF-8"):
        load_checked_records(latin)


def test_parquet_is_read_by_name(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    path = tmp_path / "owner.parquet"
    table = pa.table(
        {"patient_secret": ["A7", "B2", "C9"], "age": [41.5, 18, 90], "score": [73.125, 50, 120]}
    )
    pq.write_table(table, path)
    np.testing.assert_allclose(
        load_checked_records(path, columns=COLUMNS, bounds=BOUNDS), _expected()
    )
    cases = {
        "nulls.parquet": (pa.table({"score": [73.125, None], "age": [41.5, 20]}), "missing"),
        "nan.parquet": (pa.table({"score": [float("nan"), 1.0], "age": [41.5, 20]}), "nan"),
        "text.parquet": (pa.table({"score": ["abc", "1"], "age": [41.5, 20]}), "non-numeric"),
        "lacks.parquet": (pa.table({"score": [73.125], "weight": [41.5]}), "header"),
        "empty.parquet": (
            pa.table({"score": pa.array([], pa.float64()), "age": pa.array([], pa.float64())}),
            "empty",
        ),
    }
    for name, (content, kind) in cases.items():
        pq.write_table(content, tmp_path / name)
        public, kinds, _ = _public(tmp_path / name)
        assert kinds == [kind], (name, kinds)
        _assert_no_leak(public, tmp_path / name)
    garbage = _write(tmp_path, b"PAR1 not really", "garbage.parquet")
    _, kinds, _ = _public(garbage)
    assert kinds == ["unreadable"]


def test_parquet_without_pyarrow_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _write(tmp_path, b"PAR1", "owner.parquet")
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    public, kinds, _ = _public(path)
    assert kinds == ["extra"] and f"fa-hetdp[{tables.PARQUET_EXTRA}]" in public


# ------------------------------------------------------------------------------ flags
def test_the_flags_parse_strictly() -> None:
    assert parse_columns("score, age") == ("score", "age")
    assert parse_bounds("score=0:100,age=18:90") == BOUNDS
    for bad in ("score,score", "score,,age"):
        with pytest.raises(ValueError):
            parse_columns(bad)
    for bad in ("score=100:0", "score=0:nan", "score=0:inf", "score", "score=0:1,score=0:2"):
        with pytest.raises(ValueError):
            parse_bounds(bad)


# ------------------------------------------------------------------------------ lean install
LEAN = """
import importlib.abc, json, sys

class _Blocked(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in {"pandas", "pyarrow", "flwr", "ray", "matplotlib"}:
            raise ModuleNotFoundError(f"No module named {name!r} (lean install)", name=name)
        return None

sys.meta_path.insert(0, _Blocked())
from fa_hetdp.cli.main import main
codes = [main(args) for args in json.loads(sys.argv[1])]
loaded = sorted(m for m in sys.modules if m.partition(".")[0] in {"pandas", "pyarrow"})
print("codes:", codes, "loaded:", loaded)
"""


def test_check_data_reads_a_csv_without_pandas_or_pyarrow(tmp_path: Path) -> None:
    import json
    import os
    import subprocess

    script = tmp_path / "lean.py"
    script.write_text(LEAN)
    csv_path = _write(tmp_path, GOOD.encode())
    parquet_path = _write(tmp_path, b"PAR1", "owner.parquet")
    env = {**os.environ, "FLWR_HOME": str(tmp_path / "flwr"), "FLWR_TELEMETRY_ENABLED": "0"}
    flags = ["--columns", "score,age", "--bounds", "score=0:100,age=18:90"]
    runs = [["check-data", str(csv_path), *flags], ["check-data", str(parquet_path), *flags]]
    done = subprocess.run(
        [sys.executable, str(script), json.dumps(runs)],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "ok: 3 record(s), d=2" in done.stdout
    assert "codes: [0, 1] loaded: []" in done.stdout
    assert 'pip install "fa-hetdp[frames]"' in done.stderr
