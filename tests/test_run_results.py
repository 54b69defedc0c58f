"""`fa-hetdp run` keeps what it made: the result file, under ``results/``, named at the end.

- without ``--output`` the result is kept at ``results/<scenario>-<run id>.json`` (it used to
  live in the temporary working directory and vanish with it), and the path is printed;
- a failed run names the file it wrote, and exits 1;
- the ``results/`` folder is checked before Flower starts (as ``reproduce`` and
  ``bench-noise`` check theirs): one line, exit 2, Flower never started;
- :func:`fa_hetdp.cli.cluster.run_simulation` passes the ServerApp a result path under the
  folder it is given, finds the file by the run id in the progress events, and marks a file
  left ``"running"`` aborted once every process is stopped (the run is over).

Flower is replaced by stand-ins (the real runs are in ``test_flower_simulation.py``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

import fa_hetdp.cli.cluster as cluster_module
import fa_hetdp.cli.run as run_module
from fa_hetdp.cli.cluster import RunOutcome, run_simulation
from fa_hetdp.cli.main import main
from fa_hetdp.report.files import write_json_atomic

RUN_ID = 3


def fake_flower(document: dict[str, Any], calls: list[Mapping[str, Any]]) -> Any:
    """A stand-in for run_simulation that writes ``document`` where the ServerApp would."""

    def run(run_config: Mapping[str, Any], **kwargs: Any) -> RunOutcome:
        calls.append(kwargs)
        template = kwargs.get("result_path") or Path(kwargs["workdir"]) / "result.json"
        path = Path(str(template).replace("{run_id}", str(RUN_ID)))
        write_json_atomic(path, document)
        return RunOutcome(returncode=0, output="", result=dict(document), result_path=path)

    return run


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(run_module, "print_result", lambda *a, **k: None)
    return tmp_path


def test_the_result_is_kept_under_results_and_named(
    in_tmp: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls: list[Mapping[str, Any]] = []
    document = {"status": "success", "run_id": RUN_ID, "summary": {}}
    monkeypatch.setattr(run_module, "run_simulation", fake_flower(document, calls))
    assert main(["run", "quickstart"]) == 0
    kept = in_tmp / "results" / f"quickstart-{RUN_ID}.json"
    assert json.loads(kept.read_text())["status"] == "success"
    assert f"result: {Path('results') / kept.name}" in capsys.readouterr().out


def test_a_failed_run_names_the_file_it_wrote(
    in_tmp: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls: list[Mapping[str, Any]] = []
    document = {"status": "aborted", "run_id": RUN_ID, "reason": "too few clients"}
    monkeypatch.setattr(run_module, "run_simulation", fake_flower(document, calls))
    assert main(["run", "quickstart"]) == 1
    kept = in_tmp / "results" / f"quickstart-{RUN_ID}.json"
    assert json.loads(kept.read_text())["status"] == "aborted"
    err = capsys.readouterr().err
    assert "too few clients" in err and str(Path("results") / kept.name) in err


def test_an_unwritable_results_folder_is_refused_before_flower_starts(
    in_tmp: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls: list[Mapping[str, Any]] = []
    monkeypatch.setattr(run_module, "run_simulation", fake_flower({}, calls))
    (in_tmp / "results").write_text("a file where the folder should be")
    assert main(["run", "quickstart"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "results" in err and "not a folder" in err
    assert calls == []


class StoppedMidRun:
    """A stand-in FlowerCluster: the ServerApp logs stage 1, then its SuperLink stops."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)

    def __enter__(self) -> StoppedMidRun:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def start_superlink(self) -> str:
        return "127.0.0.1:1"

    def submit(self, config: Mapping[str, Any], **kwargs: Any) -> object:
        path = Path(str(config["result-path"]).replace("{run_id}", str(RUN_ID)))
        write_json_atomic(
            path,
            {"status": "running", "run_id": RUN_ID, "privacy": {"released": ["stage 1: ..."]}},
        )
        progress = Path(str(config["progress-path"]))
        progress.write_text(json.dumps({"event": "stage1", "run_id": RUN_ID}) + "\n")
        return object()

    def wait_run(self, run: object, result_path: Path, **kwargs: Any) -> RunOutcome:
        return RunOutcome(returncode=0, output="", result=None, result_path=result_path)


def test_run_simulation_finds_the_file_by_run_id_and_marks_a_stopped_run_aborted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cluster_module, "FlowerCluster", StoppedMidRun)
    template = tmp_path / "results" / "quickstart-{run_id}.json"
    outcome = run_simulation(
        {"scenario": "quickstart"},
        num_supernodes=2,
        workdir=tmp_path / "work",
        result_path=template,
    )
    path = tmp_path / "results" / f"quickstart-{RUN_ID}.json"
    assert outcome.result_path == path
    assert outcome.result is not None and outcome.result["status"] == "aborted"
    assert outcome.result["privacy"]["released"] == ["stage 1: ..."]
    assert json.loads(path.read_text())["status"] == "aborted"


class TimedOut(StoppedMidRun):
    """The run outlives ``--timeout``: the supervisor stops it (a ClusterError)."""

    def wait_run(self, run: object, result_path: Path, **kwargs: Any) -> RunOutcome:
        raise cluster_module.ClusterError("the run did not finish within 1 s; flwr run output:\n")


def test_a_timed_out_run_names_its_result_file_marked_aborted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cluster_module, "FlowerCluster", TimedOut)
    template = tmp_path / "results" / "quickstart-{run_id}.json"
    with pytest.raises(cluster_module.ClusterError) as info:
        run_simulation(
            {"scenario": "quickstart"},
            num_supernodes=2,
            workdir=tmp_path / "work",
            result_path=template,
        )
    path = tmp_path / "results" / f"quickstart-{RUN_ID}.json"
    first = str(info.value).splitlines()[0]
    assert "did not finish" in first and str(path) in first and "aborted" in first
    assert json.loads(path.read_text())["status"] == "aborted"
