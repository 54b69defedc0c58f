"""SIGTERM to ``fa-hetdp run`` (what ``timeout``, systemd and CI send) unwinds like Ctrl-C.

Before: the process died of the signal (exit 143, no message) and left the SuperLink, ``flwr
run``, the simulation and Ray running; the result file stayed ``"running"``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_launch import processes_with_home

from fa_hetdp.cli.cluster import _descendants

#: The longest the run may go without progress (no new progress event or result file) before
#: the test gives up; the whole wait follows progress, not a fixed wall clock.
QUIET_LIMIT_S = 300.0


def start_time(pid: int) -> str | None:
    """The start time of ``pid`` (``/proc/<pid>/stat`` field 22), None if it is gone or a zombie.

    A pid with the same start time is the same process (a reused pid has another).
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()
    return None if fields[0] == "Z" else fields[19]


def _cmdline(pid: int) -> bytes:
    """The whole command line of ``pid`` (empty if it is gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def running_result(results: Path) -> Path | None:
    """The run's result file once it records a release (``"running"``: the run goes on)."""
    for path in results.glob("quickstart-*.json"):
        try:
            document = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if document.get("status") == "running" and document["privacy"].get("released"):
            return path
    return None


def test_sigterm_inside_the_command_unwinds_with_a_message(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # the signal arrives while the run goes on: the handler raises, the command says so
    import fa_hetdp.cli.run as run_module
    from fa_hetdp.cli.main import main

    def terminated(*args: object, **kwargs: object) -> object:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(30)  # the signal's exception ends this sleep
        raise AssertionError("SIGTERM did not unwind the run")

    def unhandled(signum: int, frame: object) -> None:  # before: this one took the signal
        raise AssertionError("fa-hetdp run left SIGTERM to the default action (death)")

    monkeypatch.setattr(run_module, "run_simulation", terminated)
    before = signal.signal(signal.SIGTERM, unhandled)
    try:
        assert main(["run", "quickstart"]) == 128 + signal.SIGTERM
        assert signal.getsignal(signal.SIGTERM) is unhandled  # restored after the command
    finally:
        signal.signal(signal.SIGTERM, before)
    err = capsys.readouterr().err
    assert "stopped by SIGTERM; every process it started was stopped" in err


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads the process table from /proc")
def test_sigterm_stops_every_process_and_marks_the_result_aborted(tmp_path: Path) -> None:
    work = tmp_path / "work"
    env = dict(os.environ)
    env.update({"FLWR_HOME": str(tmp_path / "flwr-home"), "FLWR_TELEMETRY_ENABLED": "0"})
    out, err = (tmp_path / "out.log").open("wb"), (tmp_path / "err.log").open("wb")
    command = [sys.executable, "-m", "fa_hetdp.cli.main", "run", "quickstart"]
    proc = subprocess.Popen(
        [*command, "--workdir", str(work)], cwd=tmp_path, env=env, stdout=out, stderr=err
    )
    seen: dict[int, str] = {}  # every process of the run seen while it ran: pid -> start time
    try:
        # Wait until the run is well under way: a release recorded in the result file (still
        # "running"), so the simulation, its ClientApps and Ray are all up.
        last, progress, result = time.monotonic(), -1, None
        while result is None:
            assert proc.poll() is None, (tmp_path / "err.log").read_text()
            for pid in [*_descendants(proc.pid), *processes_with_home(work / "flwr-home")]:
                started = start_time(pid)
                if started is not None:
                    seen.setdefault(pid, started)
            try:
                size = (work / "progress.jsonl").stat().st_size
            except OSError:
                size = -1
            if size != progress:
                last, progress = time.monotonic(), size
            assert time.monotonic() - last < QUIET_LIMIT_S, "the run made no progress"
            result = running_result(tmp_path / "results")
            time.sleep(0.1)
        # the whole command line: a long interpreter path (a CI checkout's venv) pushes the
        # program's name far past any fixed prefix
        names = {_cmdline(pid) for pid in seen if start_time(pid)}
        assert any(b"superlink" in n for n in names), names
        assert any(b"ray" in n.lower() for n in names), names
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        out.close()
        err.close()
        left = {pid for pid, started in seen.items() if start_time(pid) == started}
        for pid in left:  # a failed check leaves no orphan behind either
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
    stderr = (tmp_path / "err.log").read_text()
    assert code != 0 and code > 0, (code, stderr)  # exited by itself, not killed by the signal
    assert "SIGTERM" in stderr and "every process it started was stopped" in stderr, stderr
    assert "Traceback" not in stderr, stderr
    assert not left, [Path(f"/proc/{pid}/cmdline").read_bytes() for pid in left]
    assert processes_with_home(work / "flwr-home") == []
    # the result file: marked aborted, with what was released, and named in the message
    document = json.loads(result.read_text())
    assert document["status"] == "aborted"
    assert document["privacy"]["released"], document["privacy"]
    assert result.name in stderr
