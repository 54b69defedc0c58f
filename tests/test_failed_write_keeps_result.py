"""A write that fails after the up-front path check keeps the result (issue 11).

``fa-hetdp reproduce`` and ``fa-hetdp bench-noise`` check ``--out`` before any work; if a write
still fails later (disk full, permission changed mid-run), the computed result goes to a
fallback file named on one line of stderr, and the exit code is 1, with no traceback.
"""

from __future__ import annotations

import errno
import json
import re
import tempfile
from pathlib import Path
from typing import Any

import pytest
from test_bench_noise import _write
from test_reproduce import _six

from fa_hetdp.cli.main import main
from fa_hetdp.experiments import bench_noise, outputs, reproduce
from fa_hetdp.experiments.paper import PAPER_SKEWS
from fa_hetdp.report.files import json_ready

SCALES = {(skew.num_labels, skew.heterogeneous): 1.0 + k / 10 for k, skew in enumerate(PAPER_SKEWS)}


def _disk_full(*args: Any, **kwargs: Any) -> Any:
    raise OSError(errno.ENOSPC, "No space left on device", "/full/reproduce.json")


def _kept_file(err: str, command: str) -> Path:
    """The fallback file named on the command's one stderr line."""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    match = re.fullmatch(
        rf"fa-hetdp {command}: cannot write (.+) \((.+)\); the result is in (.+)", lines[0]
    )
    assert match is not None, lines[0]
    return Path(match.group(3))


@pytest.fixture
def fake_reproduction(monkeypatch: pytest.MonkeyPatch) -> dict[Any, Any]:
    """Hand-made results instead of the six measured runs (the writing is what is tested)."""
    results = _six(SCALES)
    monkeypatch.setattr(reproduce, "run_reproduction", lambda *a, **k: results)
    # the per-skew folders need measured runs (hand-made ones lack some cells)
    monkeypatch.setattr(outputs, "write_outputs", lambda *a, **k: [])
    return results


@pytest.fixture
def temp_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def test_reproduce_keeps_the_result_when_the_last_write_fails(
    tmp_path: Path,
    temp_dir: Path,
    fake_reproduction: dict[Any, Any],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(reproduce, "write_json_atomic", _disk_full)  # reproduce.json
    out = tmp_path / "out"
    code = main(["reproduce", "--out", str(out), "--no-progress", "--no-frontier"])
    assert code == 1
    captured = capsys.readouterr()
    kept = _kept_file(captured.err, "reproduce")
    assert "/full/reproduce.json (No space left on device)" in captured.err
    assert kept.parent == temp_dir and kept.name.startswith("fa-hetdp-reproduce-")
    data = json.loads(kept.read_text())
    assert set(data["runs"]) == {skew.slug for skew in PAPER_SKEWS}
    expected = reproduce.reproduction_payload(fake_reproduction, dataset="digits", quick=False)
    assert data == json.loads(json.dumps(json_ready(expected)))
    assert data["tables"]["table1_dispersion"]["values"]  # the tables went with it
    assert not (out / "reproduce.json").exists()


def test_reproduce_keeps_the_result_when_the_first_write_fails(
    tmp_path: Path,
    temp_dir: Path,
    fake_reproduction: dict[Any, Any],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    def denied(*args: Any, **kwargs: Any) -> Any:
        raise PermissionError(errno.EACCES, "Permission denied", str(tmp_path / "out"))

    monkeypatch.setattr(reproduce, "write_table", denied)
    code = main(["reproduce", "--out", str(tmp_path / "out"), "--no-progress", "--no-frontier"])
    assert code == 1
    err = capsys.readouterr().err
    assert "(Permission denied)" in err
    data = json.loads(_kept_file(err, "reproduce").read_text())
    slug = PAPER_SKEWS[1].slug
    assert data["runs"][slug] == json.loads(
        json.dumps(json_ready(fake_reproduction[PAPER_SKEWS[1]].to_dict()))
    )


def test_reproduce_prints_the_result_when_no_fallback_can_be_written(
    tmp_path: Path,
    temp_dir: Path,
    fake_reproduction: dict[Any, Any],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(reproduce, "write_json_atomic", _disk_full)
    monkeypatch.setattr(outputs, "write_json_atomic", _disk_full)  # the fallback fails too
    monkeypatch.chdir(tmp_path)
    code = main(["reproduce", "--out", str(tmp_path / "out"), "--no-progress", "--no-frontier"])
    assert code == 1
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and "Traceback" not in captured.err
    assert "no fallback file either, the result is on stdout" in captured.err
    data = json.loads(captured.out)
    assert set(data["runs"]) == {skew.slug for skew in PAPER_SKEWS}
    assert list(temp_dir.iterdir()) == []  # no empty fallback left behind
    assert not list(tmp_path.glob("fa-hetdp-reproduce-*"))


def test_bench_noise_keeps_the_result_when_a_write_fails(
    tmp_path: Path,
    temp_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "out"

    def disk_full(*args: Any, **kwargs: Any) -> Any:
        raise OSError(errno.ENOSPC, "No space left on device", str(out / "bench_noise.csv"))

    monkeypatch.setattr(bench_noise, "write_table", disk_full)
    code = main(["bench-noise", str(_write(tmp_path)), "--out", str(out), "--no-progress"])
    assert code == 1
    captured = capsys.readouterr()
    assert "tiny-bench: D'' EMSE ratios" in captured.out  # the table was shown first
    kept = _kept_file(captured.err, "bench-noise")
    assert f"cannot write {out / 'bench_noise.csv'} (No space left on device)" in captured.err
    data = json.loads(kept.read_text())
    assert data["results"]["name"] == "tiny-bench"
    assert len(data["results"]["cells"]) == 3 * 2 * 2  # eps x mechanisms x placements
    table = data["bench_noise"]
    assert table["columns"] == ["epsilon", "ratio", "low", "high", "expected"]
    assert len(table["rows"]) == len(table["values"]) == 3 * 3 * len(bench_noise.BENCH_STATISTICS)
    assert not (out / "bench_noise.csv").exists()


def test_bench_noise_real_failed_write_names_the_file(
    tmp_path: Path, temp_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    (out / "bench_noise.csv").mkdir(parents=True)  # passes the folder check; the write fails
    code = main(["bench-noise", str(_write(tmp_path)), "--out", str(out), "--no-progress"])
    assert code == 1
    err = capsys.readouterr().err
    kept = _kept_file(err, "bench-noise")
    assert f"cannot write {out / 'bench_noise.csv'} (" in err  # the target, not the temp file
    assert len(json.loads(kept.read_text())["bench_noise"]["rows"]) == 27
