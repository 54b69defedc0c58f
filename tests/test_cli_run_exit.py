"""`fa-hetdp run`'s exit status when the result cannot go where --output asked."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import fa_hetdp.cli.run as run_module
import fa_hetdp.report.files as files
from fa_hetdp.cli.cluster import RunOutcome
from fa_hetdp.cli.main import main


def _succeeded(tmp_path: Path) -> RunOutcome:
    result = {"status": "success", "run_id": 3, "summary": {}}
    return RunOutcome(returncode=0, output="", result=result, result_path=tmp_path / "r.json")


@pytest.fixture
def quiet_success(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(run_module, "run_simulation", lambda *a, **k: _succeeded(tmp_path))
    monkeypatch.setattr(run_module, "print_result", lambda *a, **k: None)


@pytest.mark.usefixtures("quiet_success")
def test_a_written_result_exits_0(tmp_path: Path) -> None:
    output = tmp_path / "out" / "result.json"
    assert main(["run", "quickstart", "--output", str(output)]) == 0
    assert json.loads(output.read_text())["status"] == "success"


@pytest.mark.usefixtures("quiet_success")
def test_a_result_kept_elsewhere_exits_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / "out" / "result.json"
    real = files.write_json_atomic

    def disk_full_at_output(path: Path, data: Any, **kwargs: Any) -> None:
        if Path(path) == output:
            raise OSError(28, "No space left on device")
        real(path, data, **kwargs)

    monkeypatch.setattr(files, "write_json_atomic", disk_full_at_output)
    assert main(["run", "quickstart", "--output", str(output)]) == 1
    kept = tmp_path / "fa-hetdp-result-3.json"
    assert json.loads(kept.read_text())["status"] == "success"
    assert str(kept) in capsys.readouterr().err
    assert not output.exists()
