"""`fa-hetdp supernode`: the SuperNode's whole process group ends with it.

A stand-in for ``flower-supernode`` leaves a child that ignores SIGTERM (as the ClientApps
of a lost run do, ``tests/test_deployment_operator.py``) and exits; the supervisor must end
that child too (SIGTERM, then SIGKILL after the grace period) and return the exit code.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from fa_hetdp.cli.cluster import _pid_alive
from fa_hetdp.cli.main import main
from fa_hetdp.cli.supernode import supervise


def stand_in(tmp_path: Path, code: int) -> tuple[list[str], Path]:
    pidfile = tmp_path / "child.pid"
    script = tmp_path / "supernode.sh"
    script.write_text(
        "#!/bin/sh\n"
        f"(trap '' TERM; exec sleep 300) &\necho $! > {pidfile}\nsleep 0.2\nexit {code}\n"
    )
    return ["/bin/sh", str(script)], pidfile


def test_a_child_that_ignores_sigterm_is_killed_after_the_grace(tmp_path: Path) -> None:
    argv, pidfile = stand_in(tmp_path, 3)
    started = time.monotonic()
    assert supervise(argv, grace=0.5) == 3
    child = int(pidfile.read_text())
    assert not _pid_alive(child)
    assert time.monotonic() - started < 30


def test_without_the_supervisor_the_child_would_stay(tmp_path: Path) -> None:
    """The stand-in really leaves an orphan (so the test above can fail)."""
    import os
    import signal
    import subprocess

    argv, pidfile = stand_in(tmp_path, 0)
    subprocess.run(argv, check=True, start_new_session=True)
    child = int(pidfile.read_text())
    try:
        time.sleep(0.3)
        assert _pid_alive(child)
    finally:
        os.kill(child, signal.SIGKILL)


def test_the_command_needs_the_supernode_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["supernode"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "after '--'" in err
