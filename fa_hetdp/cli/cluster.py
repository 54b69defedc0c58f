"""The Flower process supervisor: Flower's command-line programs on this machine.

:class:`FlowerCluster` starts a simulation SuperLink on a free port with its own
``FLWR_HOME`` in a working directory and ``flwr run`` submissions, and stops every process it
started (SuperLink, SuperExec/app children, Ray) when it is closed, also on errors and Ctrl-C
(and SIGTERM or SIGHUP inside :func:`signals_unwind`, which ``fa-hetdp run`` uses).
The deployment tests extend it (SuperNodes, TLS, SuperNode authentication) through
:meth:`FlowerCluster.superlink_options` and :meth:`FlowerCluster.connection_options`.
:func:`run_simulation` is the simulation run behind ``fa-hetdp run`` (:mod:`fa_hetdp.cli.run`).
It always passes
``--disable-runtime-dependency-installation`` (the app's dependencies are the installed
``fa-hetdp``; ``uv`` would need the network).

This is the only module of :mod:`fa_hetdp` that talks to Flower, and it does so through
Flower's command-line programs only.
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import importlib.util
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from fa_hetdp.errors import FaHetdpError

__all__ = [
    "APP_DIR",
    "APP_PACKAGES",
    "ClusterError",
    "FlowerCluster",
    "Interrupted",
    "ManagedProcess",
    "RunOutcome",
    "find_program",
    "flower_app_dir",
    "free_port",
    "is_app_dir",
    "process_stats",
    "programs_path",
    "read_progress",
    "run_simulation",
    "signals_unwind",
    "toml_value",
]

#: The source tree (a clone or an editable install): the Flower app when it holds
#: ``pyproject.toml`` with ``[tool.flwr.app]`` and the app's packages (see :func:`flower_app_dir`).
APP_DIR = Path(__file__).resolve().parents[2]

#: The packages a Flower app of fa-hetdp is made of (the ServerApp and ClientApp components
#: and everything they import from this project).
APP_PACKAGES: tuple[str, ...] = ("fa_hetdp",)


def is_app_dir(path: Path) -> bool:
    """Whether ``path`` holds the Flower app: ``[tool.flwr.app]`` and the app's packages."""
    pyproject = path / "pyproject.toml"
    try:
        text = pyproject.read_text()
    except OSError:
        return False
    return "[tool.flwr.app]" in text and all(
        (path / name / "__init__.py").is_file() for name in APP_PACKAGES
    )


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    locations = None if spec is None else spec.submodule_search_locations
    if not locations:
        raise ClusterError(f"the package {name!r} of the Flower app is not installed.")
    return Path(next(iter(locations)))


def flower_app_dir(workdir: Path) -> Path:
    """Return the directory ``flwr run`` builds the Flower app (FAB) from.

    The source tree when it is one (:data:`APP_DIR`: a clone or an editable install);
    otherwise (a wheel, ``pip install .``) an app directory assembled in ``workdir/app`` from
    the installed packages (:data:`APP_PACKAGES`, Python sources only), the shipped
    scenarios (``fa_hetdp/_scenarios``) and the app's ``pyproject.toml``
    (``fa_hetdp/_app/pyproject.toml``). The FAB is the code that runs on the SuperLink and
    on every SuperNode (docs/deployment.md).

    Raises
    ------
    ClusterError
        The installed package carries no app configuration.
    """
    if is_app_dir(APP_DIR):
        return APP_DIR
    package = _package_dir("fa_hetdp")
    pyproject = package / "_app" / "pyproject.toml"
    if not pyproject.is_file():
        raise ClusterError(
            f"this installation of fa-hetdp has no Flower app configuration ({pyproject}); "
            "reinstall it from a wheel or the source tree (pip install fa-hetdp)."
        )
    target = workdir / "app"
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    shutil.copyfile(pyproject, target / "pyproject.toml")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "_app", "_scenarios")
    for name in APP_PACKAGES:
        shutil.copytree(_package_dir(name), target / name, ignore=ignore)
    scenarios = package / "_scenarios"
    if scenarios.is_dir():
        shutil.copytree(scenarios, target / "scenarios")
    return target


def find_program(name: str) -> str | None:
    """Return the path of a Flower program: beside ``sys.executable`` first, then ``PATH``.

    A venv's programs are found even when the venv is not activated (``fa-hetdp`` run by its
    absolute path).
    """
    beside = Path(sys.executable).parent / name
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which(name)


def programs_path(path: str) -> str:
    """Return ``path`` (a ``PATH`` value) with the running interpreter's folder first.

    Flower starts its helpers (``flower-superexec``, ``flwr-serverapp``, ...) by name: the
    venv's own programs are found first, also when the venv is not activated (a program run
    by its absolute path, from pipx, under systemd).
    """
    return str(Path(sys.executable).parent) + (os.pathsep + path if path else "")


CONNECTION_NAME = "fa-hetdp"


class ClusterError(FaHetdpError, RuntimeError):
    """A Flower process failed to start, or a run failed or timed out."""


class Interrupted(KeyboardInterrupt):
    """A signal stopped the run: Ctrl-C (SIGINT), or SIGTERM or SIGHUP (:func:`signals_unwind`).

    A ``KeyboardInterrupt``, so it unwinds every ``with`` on the way out as Ctrl-C does (each
    :class:`FlowerCluster` stops what it started). :func:`run_simulation` raises it with the
    run's result file, marked aborted with what was released.

    Attributes
    ----------
    signum : int
        The signal.
    result_path : Path or None
        The run's result file (None: the signal came before the run started).
    result : dict or None
        Its document (None: no file was written: nothing had been released).
    """

    def __init__(
        self,
        signum: int = signal.SIGINT,
        *,
        result_path: Path | None = None,
        result: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = int(signum)
        self.result_path = result_path
        self.result = result

    @property
    def signal_name(self) -> str:
        """Return the signal's name (``"SIGTERM"``)."""
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        """Return the shell's code for a process ended by this signal: 128 + its number."""
        return 128 + self.signum


@contextlib.contextmanager
def signals_unwind(signals: Sequence[str] = ("SIGTERM", "SIGHUP")) -> Iterator[None]:
    """Make ``signals`` (by name) unwind like Ctrl-C while inside: raise :class:`Interrupted`.

    SIGTERM (what ``timeout``, systemd and CI send) would otherwise end the process at once
    and leave every Flower process it started running. The first signal raises in the main
    thread; a repeated one is ignored while the ``with`` blocks on the way out stop the
    processes (their stop ends in SIGKILL). A signal the process ignores (SIGHUP under
    ``nohup``) stays ignored, and one the platform lacks is skipped. Outside the main thread
    (where Python cannot take signals) this does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    raised = False

    def unwind(signum: int, frame: object) -> None:
        nonlocal raised
        if raised:
            return
        raised = True
        raise Interrupted(signum)

    previous: dict[signal.Signals, Any] = {}
    for name in signals:
        sig = getattr(signal, name, None)
        if isinstance(sig, signal.Signals) and signal.getsignal(sig) is not signal.SIG_IGN:
            previous[sig] = signal.signal(sig, unwind)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@dataclass
class ManagedProcess:
    """A process started by :class:`FlowerCluster` in its own session (process group)."""

    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path

    @property
    def pid(self) -> int:
        """Return the process id (also its process-group id)."""
        return self.popen.pid

    def alive(self) -> bool:
        """Whether the process is still running."""
        return self.popen.poll() is None

    def log_tail(self, chars: int = 4000) -> str:
        """Return the end of the process's log file."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return text[-chars:]


@dataclass(frozen=True)
class RunOutcome:
    """What ``flwr run`` left: its exit code, its output, and the result file if any."""

    returncode: int
    output: str
    result: dict[str, Any] | None
    result_path: Path


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def toml_value(value: object) -> str:
    """Render ``value`` (bool, int, float, str) as a TOML value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ClusterError(f"run-config values must be finite, got {value!r}.")
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    raise ClusterError(
        f"run-config values must be bool, int, float or str, got {type(value).__name__}."
    )


def process_stats() -> Iterator[tuple[int, list[str]]]:
    """Yield ``(pid, fields)`` of every process: ``/proc/<pid>/stat`` after the command name.

    ``fields`` starts with the state, the parent's pid and the process group (``stat``'s fields
    3, 4, 5; the parenthesised command name before them may contain spaces). Nothing where
    there is no ``/proc`` (not Linux); a process gone while it is read is skipped.
    """
    proc = Path("/proc")
    if not proc.is_dir():
        return
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        yield int(entry.name), stat[stat.rfind(")") + 2 :].split()


def _children_by_parent() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for pid, fields in process_stats():
        if len(fields) > 1:
            children.setdefault(int(fields[1]), []).append(pid)
    return children


def _descendants(pid: int) -> list[int]:
    """Every descendant of ``pid`` (Linux ``/proc``; empty elsewhere)."""
    children = _children_by_parent()
    found: list[int] = []
    stack = [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in found:
                found.append(child)
                stack.append(child)
    return found


def _signal_pid(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _pid_alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2 :].split()[0] != "Z"


@dataclass
class FlowerCluster:
    """Flower processes on this machine with a private ``FLWR_HOME``; stops them all on exit.

    Use as a context manager. Every process is started in a new session; stopping one sends
    SIGTERM to it, its process group and every descendant found at that moment (Ray and
    SuperExec children may start sessions of their own), then SIGKILL to what is left.
    """

    workdir: Path
    processes: list[ManagedProcess] = field(default_factory=list)
    superlink_address: str | None = None

    def __post_init__(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.home = self.workdir / "flwr-home"
        self.home.mkdir(exist_ok=True)
        self.logs = self.workdir / "logs"
        self.logs.mkdir(exist_ok=True)

    # -- environment -----------------------------------------------------------------------
    @property
    def env(self) -> dict[str, str]:
        """Environment for every Flower process: private home, no telemetry, no update check."""
        env = dict(os.environ)
        env.update(
            {
                "FLWR_HOME": str(self.home),
                "FLWR_TELEMETRY_ENABLED": "0",
                "FLWR_DISABLE_UPDATE_CHECK": "1",
                "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
                "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "0",
                "RAY_DEDUP_LOGS": "0",
                # flwr 1.42 gives ray.init no node address: Ray would take the host's outward
                # one and listen on every interface. 0: a one-machine Ray on 127.0.0.1 (Ray
                # reads this on every platform; tests/test_ray_loopback.py).
                "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
                "PYTHONUNBUFFERED": "1",
            }
        )
        python_path = env.get("PYTHONPATH", "")
        if is_app_dir(APP_DIR):
            env["PYTHONPATH"] = str(APP_DIR) + (os.pathsep + python_path if python_path else "")
        env["PATH"] = programs_path(env.get("PATH", ""))
        return env

    # -- processes -------------------------------------------------------------------------
    def start(self, name: str, argv: Sequence[str]) -> ManagedProcess:
        """Start ``argv`` in a new session, logging to ``logs/<name>.log``."""
        executable = find_program(argv[0])
        if executable is None:
            raise ClusterError(
                f"{argv[0]!r} is not on PATH (nor beside {sys.executable}); "
                'install flwr in this environment (pip install "fa-hetdp[flower]").'
            )
        log_path = self.logs / f"{name}.log"
        with log_path.open("wb") as log:
            popen = subprocess.Popen(
                [executable, *argv[1:]],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                cwd=self.workdir,
                start_new_session=True,
            )
        process = ManagedProcess(name=name, popen=popen, log_path=log_path)
        self.processes.append(process)
        return process

    def stop(self, process: ManagedProcess, *, grace: float = 5.0) -> None:
        """Stop ``process``, its process group and all its descendants."""
        pids = [process.pid, *_descendants(process.pid)]
        _signal_group(process.pid, signal.SIGTERM)
        for pid in pids:
            _signal_pid(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            process.popen.poll()
            if not any(_pid_alive(pid) for pid in pids):
                break
            time.sleep(0.1)
        pids += [p for p in _descendants(process.pid) if p not in pids]
        _signal_group(process.pid, signal.SIGKILL)
        for pid in pids:
            if _pid_alive(pid):
                _signal_pid(pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.popen.wait(timeout=grace)

    def kill(self, process: ManagedProcess) -> None:
        """Kill ``process`` and its descendants at once (SIGKILL): a node that dies."""
        pids = [process.pid, *_descendants(process.pid)]
        _signal_group(process.pid, signal.SIGKILL)
        for pid in pids:
            _signal_pid(pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.popen.wait(timeout=10)

    def close(self) -> None:
        """Stop every process started here, newest first.

        A signal that interrupts one stop (a Ctrl-C, or a SIGTERM under
        :func:`signals_unwind`) kills that process at once (SIGKILL), and the others are
        stopped all the same before it is raised again.
        """
        interrupted: BaseException | None = None
        for process in reversed(self.processes):
            try:
                self.stop(process)
            except BaseException as exc:  # re-raised below, after the others are stopped
                interrupted = interrupted or exc
                self.kill(process)
        if interrupted is not None:
            raise interrupted

    def __enter__(self) -> FlowerCluster:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- SuperLink / SuperNodes ------------------------------------------------------------
    def start_superlink(self, *, timeout: float = 60.0) -> str:
        """Start a SuperLink on a free port, write the ``flwr`` connection, return its address.

        Its mode and transport flags come from :meth:`superlink_options`.
        """
        port = free_port()
        argv = [
            "flower-superlink",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--disable-runtime-dependency-installation",
            *self.superlink_options(),
        ]
        process = self.start("superlink", argv)
        address = f"127.0.0.1:{port}"
        self._wait_listening(process, port, timeout)
        self.superlink_address = address
        self._write_connection(address)
        return address

    def superlink_options(self) -> list[str]:
        """Mode and transport flags of the SuperLink: simulation, without TLS.

        The deployment tests override this (and :meth:`connection_options`) for a SuperLink
        with SuperNodes, TLS and SuperNode authentication.
        """
        return ["--simulation", "--insecure"]

    def connection_options(self) -> list[str]:
        """Transport lines of the ``flwr`` connection in ``config.toml`` (no TLS here)."""
        return ["insecure = true"]

    def _wait_listening(self, process: ManagedProcess, port: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not process.alive():
                raise ClusterError(
                    f"{process.name} exited with code {process.popen.returncode}:\n"
                    + process.log_tail()
                )
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.settimeout(0.5)
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    # Uvicorn accepts before the app is up; its log says when it is.
                    if "Uvicorn running" in process.log_tail(100_000):
                        return
            time.sleep(0.2)
        raise ClusterError(
            f"{process.name} did not listen on port {port} within {timeout:.0f} s:\n"
            + process.log_tail()
        )

    def _write_connection(self, address: str) -> None:
        lines = [
            "[superlink]",
            f'default = "{CONNECTION_NAME}"',
            "",
            f'[superlink."{CONNECTION_NAME}"]',
            f"address = {toml_value(address)}",
            *self.connection_options(),
        ]
        (self.home / "config.toml").write_text("\n".join(lines) + "\n")

    # -- runs ------------------------------------------------------------------------------
    def submit(
        self,
        run_config: Mapping[str, object],
        *,
        app_dir: Path | None = None,
        num_supernodes: int | None = None,
        name: str = "flwr-run",
    ) -> ManagedProcess:
        """Start ``flwr run APP <connection> --stream`` with ``run_config`` overrides.

        ``app_dir`` defaults to :func:`flower_app_dir` (the source tree or an assembled copy).
        """
        if app_dir is None:
            app_dir = flower_app_dir(self.workdir)
        if self.superlink_address is None:
            raise ClusterError("start the SuperLink before submitting a run.")
        config_path = self.workdir / f"{name}-config.toml"
        config_path.write_text(
            "".join(f"{key} = {toml_value(value)}\n" for key, value in run_config.items())
        )
        argv = [
            "flwr",
            "run",
            str(app_dir),
            CONNECTION_NAME,
            "--stream",
            "--run-config",
            str(config_path),
        ]
        if num_supernodes is not None:
            argv += [
                "--federation-config",
                f"num-supernodes={num_supernodes} client-resources-num-cpus=1",
            ]
        return self.start(name, argv)

    def wait_run(
        self,
        run: ManagedProcess,
        result_path: Path,
        *,
        timeout: float,
        on_poll: Callable[[], None] | None = None,
    ) -> RunOutcome:
        """Wait for ``flwr run`` to exit and read the result file (``None`` if absent)."""
        deadline = time.monotonic() + timeout
        while run.alive():
            if time.monotonic() > deadline:
                self.stop(run)
                raise ClusterError(
                    f"the run did not finish within {timeout:.0f} s; flwr run output:\n"
                    + run.log_tail()
                )
            if on_poll is not None:
                on_poll()
            time.sleep(0.25)
        result: dict[str, Any] | None = None
        if result_path.exists():
            loaded = json.loads(result_path.read_text())
            if isinstance(loaded, dict):
                result = loaded
        return RunOutcome(
            returncode=run.popen.returncode,
            output=run.log_tail(200_000),
            result=result,
            result_path=result_path,
        )


def read_progress(path: Path) -> list[dict[str, Any]]:
    """Read the ServerApp's progress file (one JSON object a line); [] if absent."""
    try:
        text = path.read_text()
    except OSError:
        return []
    events: list[dict[str, Any]] = []
    for line in text.splitlines():
        with contextlib.suppress(json.JSONDecodeError):
            event = json.loads(line)
            if isinstance(event, dict):
                events.append(event)
    return events


def run_simulation(
    run_config: Mapping[str, object],
    *,
    num_supernodes: int,
    workdir: Path,
    timeout: float = 3600.0,
    progress: Callable[[list[dict[str, Any]]], None] | None = None,
    result_path: Path | None = None,
) -> RunOutcome:
    """Run the app in a fresh local simulation SuperLink and return the outcome.

    ``run_config`` overrides ``[tool.flwr.app.config]``; ``result-path`` and
    ``progress-path`` are set here: the progress file inside ``workdir``, the result at
    ``result_path`` (``{run_id}`` in it becomes Flower's run id, found in the progress
    events; default ``workdir/result.json``). All processes are stopped on return; the run is
    then over, so a result file still ``"running"`` (the ServerApp stopped before its end) is
    marked aborted, with the releases it records (:func:`fa_hetdp.server.results.read_result`),
    also when the run is stopped by its time-out or a signal (a time-out's error names the
    file; Ctrl-C, and SIGTERM under :func:`signals_unwind`, raise :class:`Interrupted` with it).
    """
    from fa_hetdp.server.results import read_result

    template = workdir / "result.json" if result_path is None else result_path
    progress_path = workdir / "progress.jsonl"
    if "{run_id}" not in str(template):
        template.unlink(missing_ok=True)
    progress_path.unlink(missing_ok=True)
    config = dict(run_config)
    config["result-path"] = str(template)
    config["progress-path"] = str(progress_path)
    started = time.time()
    try:
        with FlowerCluster(workdir) as cluster:
            cluster.start_superlink()
            run = cluster.submit(config, num_supernodes=num_supernodes)

            def poll() -> None:
                if progress is not None:
                    progress(read_progress(progress_path))

            outcome = cluster.wait_run(
                run, _result_file(template, progress_path, started), timeout=timeout, on_poll=poll
            )
            poll()
    except BaseException as exc:  # a time-out, Ctrl-C, SIGTERM: every process stopped, run over
        path = _result_file(template, progress_path, started)
        document = read_result(path)
        if isinstance(exc, KeyboardInterrupt):
            signum = exc.signum if isinstance(exc, Interrupted) else signal.SIGINT
            found = None if document is None else path
            raise Interrupted(signum, result_path=found, result=document) from exc
        if document is None or not isinstance(exc, ClusterError):
            raise
        first, _, rest = str(exc).partition("\n")
        where = f"; result file ({document.get('status')}): {path}"
        raise ClusterError(first + where + ("\n" + rest if rest else "")) from exc
    path = _result_file(template, progress_path, started)
    return dataclasses.replace(outcome, result=read_result(path), result_path=path)


def _result_file(template: Path, progress_path: Path, since: float) -> Path:
    """Return the result file of the run: ``{run_id}`` in ``template`` from the progress.

    The ServerApp records its run id in every progress event. Before the first one (or a
    ServerApp that stopped on its settings), the newest file matching the template written
    since ``since``; else the template with ``{run_id}`` as the ServerApp writes it unknown.
    """
    text = str(template)
    if "{run_id}" not in text:
        return template
    for event in read_progress(progress_path):
        if event.get("run_id") is not None:
            return Path(text.replace("{run_id}", str(event["run_id"])))
    prefix, _, suffix = template.name.partition("{run_id}")
    found = [
        p
        for p in template.parent.glob(f"{glob.escape(prefix)}*{glob.escape(suffix)}")
        if p.stat().st_mtime >= since
    ]
    if found:
        return max(found, key=lambda p: p.stat().st_mtime)
    return Path(text.replace("{run_id}", "local"))
