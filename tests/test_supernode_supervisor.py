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
from fa_hetdp.cli.supernode import SUPEREXEC, supervise


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


# ---------------------------------------------------------------------------- PATH, start-up
# flower-supernode starts its SuperExec by name (``subprocess.Popen(["flower-superexec",
# ...])``, flwr 1.42 ``start_client_internal.py``). Run by an absolute path, from pipx or
# under systemd, the venv's programs are not on PATH: the Popen fails, the SuperNode's gRPC
# threads keep it alive, and it never comes online and never exits. The stand-ins below live
# in a folder that plays the venv's ``bin`` (``sys.executable``'s folder).


def fake_venv(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, supernode: str, *, superexec: bool
) -> Path:
    import os
    import sys

    bin_dir = tmp_path / "venv-bin"
    bin_dir.mkdir()
    programs = {"flower-supernode": supernode}
    if superexec:
        programs["flower-superexec"] = f'#!/bin/sh\necho "$PATH" > {tmp_path}/superexec-ran\n'
    for name, text in programs.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(bin_dir / "python"))
    monkeypatch.setenv("PATH", os.pathsep.join(["/usr/bin", "/bin"]))  # no venv on it
    return bin_dir


def test_without_the_venv_on_path_the_supernode_still_finds_its_superexec(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As flwr does: start flower-superexec by name, then run (here: exit after a moment).
    supernode = "#!/bin/sh\nflower-superexec --parent-pid $$\nsleep 0.5\nexit 0\n"
    bin_dir = fake_venv(tmp_path, monkeypatch, supernode, superexec=True)
    assert main(["supernode", "--grace", "0.5", "--", "--superlink", "127.0.0.1:1"]) == 0
    ran = tmp_path / "superexec-ran"
    assert ran.exists(), "flower-superexec was not found by the SuperNode"
    assert ran.read_text().split(":")[0] == str(bin_dir)  # the venv's programs first


def test_a_missing_superexec_is_refused_before_the_supernode_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    started = tmp_path / "supernode-started"
    supernode = f"#!/bin/sh\ntouch {started}\nsleep 2\nexit 0\n"
    fake_venv(tmp_path, monkeypatch, supernode, superexec=False)
    code = main(["supernode", "--", "--superlink", "127.0.0.1:1"])
    err = capsys.readouterr().err
    assert code != 0 and not started.exists()
    assert err.count("\n") == 1 and "flower-superexec" in err


def test_a_supernode_whose_superexec_never_runs_is_stopped_with_the_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The real hang: alive, no SuperExec (its start failed), never exits by itself.
    script = tmp_path / "supernode.sh"
    script.write_text("#!/bin/sh\nexec sleep 300\n")
    started = time.monotonic()
    code = supervise(["/bin/sh", str(script)], grace=0.5, superexec_wait=1.0)
    assert code != 0
    assert time.monotonic() - started < 60  # stopped by the check, not by the sleep
    err = capsys.readouterr().err
    assert f"no {SUPEREXEC} has been running" in err and "stopping it" in err


def test_the_isolation_process_mode_needs_no_superexec(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    supernode = "#!/bin/sh\nsleep 0.2\nexit 0\n"
    fake_venv(tmp_path, monkeypatch, supernode, superexec=False)
    argv = ["supernode", "--", "--superlink", "127.0.0.1:1", "--isolation", "process"]
    assert main(argv) == 0


@pytest.mark.slow
def test_a_real_supernode_started_without_its_venv_on_path_starts_its_superexec(
    tmp_path: Path,
) -> None:
    """The real programs: ``fa-hetdp`` by absolute path, PATH without the venv.

    flower-supernode starts its SuperExec before it connects, so no SuperLink is needed: a
    SuperNode retrying an unused port must have a ``flower-superexec`` below it.
    """
    import os
    import signal
    import subprocess
    import sys

    from fa_hetdp.cli.cluster import free_port
    from fa_hetdp.cli.supernode import superexec_running

    program = Path(sys.executable).parent / "fa-hetdp"
    if not program.is_file():
        pytest.skip(f"no fa-hetdp program beside {sys.executable}")
    env = {
        "PATH": os.pathsep.join(["/usr/bin", "/bin"]),
        "HOME": str(tmp_path),
        "FLWR_HOME": str(tmp_path / "flwr-home"),
        "FLWR_TELEMETRY_ENABLED": "0",
        "FLWR_DISABLE_UPDATE_CHECK": "1",
    }
    argv = [str(program), "supernode", "--grace", "2", "--", "--insecure"]
    argv += ["--superlink", f"127.0.0.1:{free_port()}", "--port", str(free_port())]
    log = (tmp_path / "supernode.log").open("wb")
    supervisor = subprocess.Popen(
        argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        found = False
        deadline = time.monotonic() + 120  # start-up on a loaded machine; ends on success
        while time.monotonic() < deadline and supervisor.poll() is None and not found:
            found = superexec_running(supervisor.pid)
            time.sleep(0.5)
        assert found, (tmp_path / "supernode.log").read_text()[-3000:]
    finally:
        os.killpg(supervisor.pid, signal.SIGTERM)
        try:
            supervisor.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(supervisor.pid, signal.SIGKILL)
            supervisor.wait()
        log.close()
