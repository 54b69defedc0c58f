"""`fa-hetdp reproduce` and `bench-noise`: output folders checked before any work."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

import fa_hetdp.cli.bench_noise as bench_noise
import fa_hetdp.cli.reproduce as reproduce
from fa_hetdp.cli.main import main
from fa_hetdp.cli.paths import check_command_paths
from fa_hetdp.config.rules import ConfigError


def _no_work(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Replace both commands' handlers by a recorder: any call means work started."""
    called: list[str] = []

    def handler(args: argparse.Namespace) -> int:
        called.append(str(args.command))
        return 0

    monkeypatch.setattr(reproduce, "run_command", handler)
    monkeypatch.setattr(bench_noise, "run_command", handler)
    return called


@pytest.mark.parametrize(
    "argv", [["reproduce", "--quick"], ["bench-noise", "quickstart", "--quick"]]
)
def test_an_unwritable_out_is_one_line_before_any_work(
    argv: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    called = _no_work(monkeypatch)
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")  # refused also for root (permissions would not be)
    assert main([*argv, "--out", str(blocked / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"fa-hetdp {argv[0]}: error: --out: cannot write in {blocked}"), err
    assert called == []  # the handler never ran


def test_an_out_that_is_a_file_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    called = _no_work(monkeypatch)
    target = tmp_path / "report.md"
    target.write_text("")
    assert main(["reproduce", "--out", str(target)]) == 2
    assert "exists and is not a folder" in capsys.readouterr().err
    assert called == []


def test_a_writable_out_reaches_the_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    called = _no_work(monkeypatch)
    out = tmp_path / "new" / "folder"
    assert main(["bench-noise", "quickstart", "--out", str(out)]) == 0
    assert called == ["bench-noise"]
    assert not (tmp_path / "new").exists()  # checked without a trace: the command creates it


def test_the_default_folder_is_checked_when_out_is_not_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "results").write_text("a file where the default folder goes")
    args = argparse.Namespace(command="reproduce", out=None)
    with pytest.raises(ConfigError, match="results exists and is not a folder"):
        check_command_paths(args)
    check_command_paths(argparse.Namespace(command="plan"))  # other commands: nothing to check
