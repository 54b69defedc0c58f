"""The result file records every release as it goes out, and a run that stops says so.

A ServerApp that is stopped mid-run (its SuperLink stopped with SIGTERM, the process killed)
cannot write an abort result; before this file's rules, a stage-1 release already broadcast
to the clients was then recorded nowhere. The strategy now writes the result file atomically
after each release with ``status = "running"`` and what went out with its cost, and a reader
that finds the file still ``"running"`` after the run ended marks it ``"aborted"``
(:func:`fa_hetdp.server.results.read_result`).

Runs the strategy over the in-memory transport of ``test_server_strategy`` (the real ClientApp
handlers, no Flower runtime); "killed" is an exception the strategy does not catch
(``BaseException``, as ``SystemExit`` or a signal's ``KeyboardInterrupt``), raised when the
server sends stage 2, so the strategy never gets to write an abort.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from test_flower_helpers import run_config, scenario_file
from test_server_strategy import InMemoryTransport

from fa_hetdp.flowerkit.settings import RunSettings
from fa_hetdp.flowerkit.steps import INPUT_STEP
from fa_hetdp.server.results import read_result
from fa_hetdp.server.strategy import HeterogeneityStrategy

pytestmark = pytest.mark.filterwarnings("ignore::fa_hetdp.errors.BaselineWarning")


class Killed(BaseException):
    """The ServerApp's process ends here (not an error the strategy could handle)."""


class KilledAt(InMemoryTransport):
    """Stops the server at ``step``, after reading the result file as it was then."""

    def __init__(self, step: str, path: Path, n: int, config: Mapping[str, Any]) -> None:
        super().__init__(n, config)
        self.step, self.path = step, path
        self.seen: dict[str, Any] | None = None

    def exchange(
        self, step: str, payloads: Mapping[int, Mapping[str, Any]], timeout: float
    ) -> tuple[dict[int, dict[str, Any]], dict[int, str]]:
        if step == self.step:
            self.seen = json.loads(self.path.read_text())
            raise Killed
        return super().exchange(step, payloads, timeout)


def _settings(tmp_path: Path, n: int = 6) -> tuple[RunSettings, dict[str, Any]]:
    config = run_config(tmp_path, scenario_file(tmp_path, n), composition="gdp")
    return RunSettings.from_run_config(config), config


def test_a_run_killed_after_stage1_leaves_the_stage1_release_recorded(tmp_path: Path) -> None:
    settings, config = _settings(tmp_path)
    path = tmp_path / "result.json"
    transport = KilledAt(INPUT_STEP[2], path, 6, config)
    with pytest.raises(Killed):
        HeterogeneityStrategy(settings, run_id=7).run(transport)
    on_disk = json.loads(path.read_text())
    assert on_disk["status"] == "running" and on_disk["run_id"] == 7
    privacy = on_disk["privacy"]
    assert len(privacy["released"]) == 1 and privacy["released"][0].startswith("stage 1")
    # Its cost: stage 1's share of the budget, more than nothing and less than the target.
    assert 0.0 < privacy["guarantees"][0]["epsilon"] < 1.0
    assert privacy["guarantees"][0]["delta"] == pytest.approx(1e-5)


def test_a_reader_marks_a_run_that_ended_running_as_aborted(tmp_path: Path) -> None:
    settings, config = _settings(tmp_path)
    path = tmp_path / "result.json"
    with pytest.raises(Killed):
        HeterogeneityStrategy(settings, run_id=7).run(KilledAt(INPUT_STEP[2], path, 6, config))
    before = json.loads(path.read_text())["privacy"]
    document = read_result(path)
    assert document is not None and document["status"] == "aborted"
    assert "running" in document["reason"] and "stopped" in document["reason"]
    assert document["privacy"] == before  # the release made, with its cost, is kept
    assert json.loads(path.read_text())["status"] == "aborted"  # and the file says so


def test_a_run_in_progress_is_left_running(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"status": "running", "run_id": 1}))
    document = read_result(path, ended=False)
    assert document is not None and document["status"] == "running"
    assert json.loads(path.read_text())["status"] == "running"
    assert read_result(tmp_path / "absent.json") is None


def test_the_file_says_running_before_stage2_and_success_at_the_end(tmp_path: Path) -> None:
    settings, config = _settings(tmp_path)
    path = tmp_path / "result.json"
    seen: dict[str, dict[str, Any]] = {}

    class Watching(InMemoryTransport):
        def exchange(
            self, step: str, payloads: Mapping[int, Mapping[str, Any]], timeout: float
        ) -> tuple[dict[int, dict[str, Any]], dict[int, str]]:
            if path.exists():
                seen[step] = json.loads(path.read_text())
            return super().exchange(step, payloads, timeout)

    document = HeterogeneityStrategy(settings).run(Watching(6, config))
    assert document["status"] == "success"
    assert json.loads(path.read_text())["status"] == "success"
    assert seen[INPUT_STEP[1]]["status"] == "running"
    assert seen[INPUT_STEP[1]]["privacy"]["released"] == []
    stage2 = seen[INPUT_STEP[2]]
    assert stage2["status"] == "running" and len(stage2["privacy"]["released"]) == 1


@pytest.mark.slow
def test_a_serverapp_cut_off_by_a_superlink_stop_leaves_stage1_on_record(
    tmp_path: Path,
) -> None:
    """A real simulation: the SuperLink gets SIGTERM once stage 1 is out, the run is cut.

    On SIGTERM flwr 1.42's SuperLink stops taking requests, waits about 45 s for its apps,
    then stops its SuperExec, which ends a ServerApp still at work (seen: ``flwr run
    --stream`` exits 0 about 46 s after the SIGTERM). A small run finishes within that
    window, so the process that runs the ServerApp (``flwr-simulation``) is killed right
    after the SIGTERM, as the end of the window would. The result file must still record the
    stage-1 release with its cost, and once every process is stopped the reader calls the
    run aborted.
    """
    import os
    import signal
    import time

    from fa_hetdp.cli.cluster import FlowerCluster, _descendants, read_progress

    scenario = scenario_file(tmp_path, 6, seed=4)
    path = tmp_path / "result.json"
    progress = tmp_path / "progress.jsonl"
    config = {
        "scenario": str(scenario),
        "mode": "simulation",
        "result-path": str(path),
        "progress-path": str(progress),
        "stage-timeout": 60.0,
        "node-wait-timeout": 120.0,
    }

    def serverapp_processes(root: int) -> list[int]:
        found = []
        for pid in _descendants(root):
            try:
                words = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:2]
            except OSError:
                continue
            if any(Path(os.fsdecode(w)).name == "flwr-simulation" for w in words):
                found.append(pid)
        return found

    with FlowerCluster(tmp_path / "cluster") as cluster:
        cluster.start_superlink()
        link = cluster.processes[0]
        run = cluster.submit(config, num_supernodes=6)
        last, count = time.monotonic(), 0
        while not any(e.get("event") == "stage1" for e in read_progress(progress)):
            events = read_progress(progress)
            if len(events) != count:  # patience follows progress: 180 s without an event
                last, count = time.monotonic(), len(events)
            assert run.alive() and time.monotonic() - last < 180, run.log_tail()
            time.sleep(0.05)
        apps = serverapp_processes(link.pid)
        os.kill(link.pid, signal.SIGTERM)  # a graceful stop of the SuperLink alone
        for pid in apps:
            os.kill(pid, signal.SIGKILL)  # the window's end, without waiting for it
        outcome = cluster.wait_run(run, path, timeout=300)
    assert apps, "no flwr-simulation process found: the run was not cut"
    assert outcome.result is not None and outcome.result["status"] == "running"
    document = read_result(path)  # every process stopped: the run is over
    assert document is not None and document["status"] == "aborted", document
    released = document["privacy"]["released"]
    assert len(released) == 1 and released[0].startswith("stage 1"), released
    assert 0.0 < document["privacy"]["guarantees"][0]["epsilon"] < 1.0
    print(f"flwr run --stream exit code {outcome.returncode}")


def test_a_success_replaces_an_earlier_one_and_leaves_no_running_file(tmp_path: Path) -> None:
    """Without ``{run_id}`` in the path: the earlier success is never replaced by a partial
    file (those go beside it), the new success replaces it, and nothing stale stays beside."""
    settings, config = _settings(tmp_path)
    path = tmp_path / "result.json"
    path.write_text(json.dumps({"status": "success", "run_id": 1}))
    seen: list[str] = []

    class Watching(InMemoryTransport):
        def exchange(
            self, step: str, payloads: Mapping[int, Mapping[str, Any]], timeout: float
        ) -> tuple[dict[int, dict[str, Any]], dict[int, str]]:
            seen.append(json.loads(path.read_text())["status"])
            return super().exchange(step, payloads, timeout)

    HeterogeneityStrategy(settings, run_id=2).run(Watching(6, config))
    assert set(seen) == {"success"}  # the earlier success stayed while the run went on
    assert json.loads(path.read_text())["run_id"] == 2
    assert sorted(p.name for p in tmp_path.glob("result*.json")) == ["result.json"]


def test_an_abort_after_an_earlier_success_goes_beside_it_once(tmp_path: Path) -> None:
    settings, config = _settings(tmp_path)
    path = tmp_path / "result.json"
    path.write_text(json.dumps({"status": "success", "run_id": 1}))
    with pytest.raises(Killed):
        HeterogeneityStrategy(settings, run_id=2).run(KilledAt(INPUT_STEP[2], path, 6, config))
    assert json.loads(path.read_text())["run_id"] == 1
    (beside,) = [p for p in tmp_path.glob("result*.json") if p != path]
    assert read_result(beside)["status"] == "aborted"  # type: ignore[index]
