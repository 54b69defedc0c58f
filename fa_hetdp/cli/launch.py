"""``fa-hetdp run``: run the Flower apps (``clients/``, ``server/``) on one machine.

``fa-hetdp run [SCENARIO]`` starts a SuperLink in simulation mode on a free port with its own
``FLWR_HOME`` in a temporary directory, submits the app with ``flwr run``, follows the
server's progress file, reads the result file the ServerApp writes, and prints each private
statistic against its true value (known in simulation) with the error and the privacy spent.
Every process it started (SuperLink, SuperNodes, their SuperExec/app children, Ray) is
stopped when it returns, also on errors and Ctrl-C.

The same process management (:class:`FlowerCluster`) serves the deployment tests and the
benchmark: a SuperLink without ``--simulation`` plus one ``flower-superlink`` per data owner,
optionally with TLS. It always passes ``--disable-runtime-dependency-installation`` (the
app's dependencies are the installed ``fa-hetdp``; ``uv`` would need the network).

This is the only module of :mod:`fa_hetdp` that talks to Flower, and it does so through
Flower's command-line programs only.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from fa_hetdp.errors import FaHetdpError

__all__ = [
    "APP_DIR",
    "ClusterError",
    "FlowerCluster",
    "ManagedProcess",
    "RunOutcome",
    "TlsSettings",
    "add_arguments",
    "free_port",
    "read_progress",
    "run_command",
    "run_simulation",
    "toml_value",
]

#: The Flower app: the repository (or installed source tree) that holds ``pyproject.toml``
#: with ``[tool.flwr.app]`` and the ``clients``/``server`` packages.
APP_DIR = Path(__file__).resolve().parents[2]

CONNECTION_NAME = "fa-hetdp"
DEFAULT_SCENARIO = "digits-quickstart"


class ClusterError(FaHetdpError, RuntimeError):
    """A Flower process failed to start, or a run failed or timed out."""


@dataclass(frozen=True)
class TlsSettings:
    """TLS files for a SuperLink (server side) and its clients (the CA certificate)."""

    ca_certificate: Path
    server_certificate: Path
    server_key: Path


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


def _children_by_parent() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    proc = Path("/proc")
    if not proc.is_dir():
        return children
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # Field 4 (ppid) follows the parenthesised command name, which may contain spaces.
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 1:
            children.setdefault(int(fields[1]), []).append(int(entry.name))
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
    tls: TlsSettings | None = None
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
                "PYTHONUNBUFFERED": "1",
            }
        )
        python_path = env.get("PYTHONPATH", "")
        env["PYTHONPATH"] = str(APP_DIR) + (os.pathsep + python_path if python_path else "")
        return env

    # -- processes -------------------------------------------------------------------------
    def start(self, name: str, argv: Sequence[str]) -> ManagedProcess:
        """Start ``argv`` in a new session, logging to ``logs/<name>.log``."""
        executable = shutil.which(argv[0])
        if executable is None:
            raise ClusterError(f"{argv[0]!r} is not on PATH; install flwr (pip install flwr).")
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
        """Stop every process started here, newest first."""
        for process in reversed(self.processes):
            self.stop(process)

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
    def start_superlink(
        self, *, simulation: bool, node_auth: bool = False, timeout: float = 60.0
    ) -> str:
        """Start a SuperLink on a free port, write the ``flwr`` connection, return its address.

        ``node_auth`` adds ``--enable-supernode-auth``: only SuperNodes whose public keys were
        registered (:meth:`register_supernode`) may connect.
        """
        port = free_port()
        argv = [
            "flower-superlink",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--disable-runtime-dependency-installation",
        ]
        if simulation:
            argv.append("--simulation")
        if node_auth:
            argv.append("--enable-supernode-auth")
        if self.tls is None:
            argv.append("--insecure")
        else:
            argv += [
                "--ssl-ca-certfile",
                str(self.tls.ca_certificate),
                "--ssl-certfile",
                str(self.tls.server_certificate),
                "--ssl-keyfile",
                str(self.tls.server_key),
            ]
        process = self.start("superlink", argv)
        address = f"127.0.0.1:{port}"
        self._wait_listening(process, port, timeout)
        self.superlink_address = address
        self._write_connection(address)
        return address

    def register_supernode(self, public_key: Path, *, timeout: float = 60.0) -> str:
        """Register a SuperNode's public key (``flwr supernode register``); return the output."""
        if self.superlink_address is None:
            raise ClusterError("start the SuperLink before registering SuperNodes.")
        executable = shutil.which("flwr")
        if executable is None:
            raise ClusterError("'flwr' is not on PATH; install flwr (pip install flwr).")
        completed = subprocess.run(
            [executable, "supernode", "register", str(public_key), CONNECTION_NAME],
            env=self.env,
            cwd=self.workdir,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if completed.returncode != 0:
            raise ClusterError(
                f"flwr supernode register {public_key} failed ({completed.returncode}):\n"
                + completed.stdout[-2000:]
                + completed.stderr[-2000:]
            )
        return completed.stdout

    def start_supernode(
        self,
        node_config: Mapping[str, object],
        *,
        name: str | None = None,
        auth_private_key: Path | None = None,
    ) -> ManagedProcess:
        """Start a SuperNode connected to this cluster's SuperLink with ``node_config``.

        ``auth_private_key``: the SuperNode's private key (OpenSSH format) when the SuperLink
        authenticates SuperNodes.
        """
        if self.superlink_address is None:
            raise ClusterError("start the SuperLink before any SuperNode.")
        config = " ".join(f"{key}={toml_value(value)}" for key, value in node_config.items())
        argv = [
            "flower-supernode",
            "--superlink",
            self.superlink_address,
            "--port",
            str(free_port()),
            "--node-config",
            config,
        ]
        if self.tls is None:
            argv.append("--insecure")
        else:
            argv += ["--root-certificates", str(self.tls.ca_certificate)]
        if auth_private_key is not None:
            argv += ["--auth-supernode-private-key", str(auth_private_key)]
        index = sum(1 for p in self.processes if p.name.startswith("supernode"))
        return self.start(name or f"supernode-{index}", argv)

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
        ]
        if self.tls is None:
            lines.append("insecure = true")
        else:
            lines.append(f"root-certificates = {toml_value(str(self.tls.ca_certificate))}")
        (self.home / "config.toml").write_text("\n".join(lines) + "\n")

    # -- runs ------------------------------------------------------------------------------
    def submit(
        self,
        run_config: Mapping[str, object],
        *,
        app_dir: Path = APP_DIR,
        num_supernodes: int | None = None,
        name: str = "flwr-run",
    ) -> ManagedProcess:
        """Start ``flwr run APP <connection> --stream`` with ``run_config`` overrides."""
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


# ------------------------------------------------------------------------------------------
# fa-hetdp run
# ------------------------------------------------------------------------------------------


@contextlib.contextmanager
def _workdir(keep: Path | None) -> Iterator[Path]:
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        yield keep
        return
    with tempfile.TemporaryDirectory(prefix="fa-hetdp-run-") as tmp:
        yield Path(tmp)


def run_simulation(
    run_config: Mapping[str, object],
    *,
    num_supernodes: int,
    workdir: Path,
    timeout: float = 3600.0,
    progress: Callable[[list[dict[str, Any]]], None] | None = None,
) -> RunOutcome:
    """Run the app in a fresh local simulation SuperLink and return the outcome.

    ``run_config`` overrides ``[tool.flwr.app.config]``; ``result-path`` and
    ``progress-path`` are set here (inside ``workdir``). All processes are stopped on return.
    """
    result_path = workdir / "result.json"
    progress_path = workdir / "progress.jsonl"
    result_path.unlink(missing_ok=True)
    progress_path.unlink(missing_ok=True)
    config = dict(run_config)
    config["result-path"] = str(result_path)
    config["progress-path"] = str(progress_path)
    with FlowerCluster(workdir) as cluster:
        cluster.start_superlink(simulation=True)
        run = cluster.submit(config, num_supernodes=num_supernodes)

        def poll() -> None:
            if progress is not None:
                progress(read_progress(progress_path))

        outcome = cluster.wait_run(run, result_path, timeout=timeout, on_poll=poll)
        poll()
    return outcome


STEP_LABELS: tuple[tuple[str, str], ...] = (
    ("advertise_keys", "secagg: advertise keys"),
    ("share_keys", "secagg: share keys"),
    ("stage1_input", "stage 1: masked [x, w x, w] + noise"),
    ("stage1_unmask", "stage 1: unmask"),
    ("stage2_input", "stage 2: masked squared deviations + noise"),
    ("stage2_unmask", "stage 2: unmask"),
)

STATISTIC_LABELS: tuple[tuple[str, str], ...] = (
    ("mean", "mean μ'"),
    ("dispersion", "dispersion D''"),
    ("weighted_mean", "weighted mean μ̄'"),
    ("q", "Cochran's Q''"),
    ("i2", "I²''"),
    ("i2_extra", "I²''' (extra noise)"),
)


@dataclass(frozen=True)
class RunSetup:
    """What ``fa-hetdp run`` submits and what it compares against."""

    scenario_name: str
    num_clients: int
    run_config: dict[str, object]
    truth: dict[str, float]


def prepare(args: argparse.Namespace) -> RunSetup:
    """Load the scenario, build the run-config overrides and the true statistics."""
    from fa_hetdp.config.scenario import default_scenario, load_scenario
    from fa_hetdp.data.partition import partition_scenario
    from fa_hetdp.stats.exact import true_statistics

    name = str(args.scenario)
    if name in (DEFAULT_SCENARIO, "quickstart"):
        scenario = default_scenario()
        scenario_arg = "quickstart"
    else:
        scenario = load_scenario(name)
        path = Path(name)
        scenario_arg = str(path.resolve()) if path.is_file() else name
    run_config: dict[str, object] = {"scenario": scenario_arg, "mode": "simulation"}
    overrides = {
        "epsilon": args.epsilon,
        "delta": args.delta,
        "mechanism": args.mechanism,
        "placement": args.placement,
        "composition": args.composition,
        "seed": args.seed,
    }
    run_config.update({k: v for k, v in overrides.items() if v is not None})
    truth = true_statistics(
        partition_scenario(scenario).vectors, variance_floor=scenario.privacy.variance_floor
    ).summary()
    return RunSetup(
        scenario_name=scenario.name,
        num_clients=scenario.num_clients,
        run_config=run_config,
        truth={k: float(v) for k, v in truth.items()},
    )


@contextlib.contextmanager
def progress_display(
    setup: RunSetup,
) -> Iterator[Callable[[list[dict[str, Any]]], None]]:
    """Show a rich progress display fed with the server's progress events."""
    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    with Progress(
        SpinnerColumn(),
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
    ) as bar:
        task = bar.add_task(
            f"{setup.scenario_name}: starting Flower ({setup.num_clients} clients)",
            total=len(STEP_LABELS) + 1,
        )
        labels = dict(STEP_LABELS)

        def update(events: list[dict[str, Any]]) -> None:
            done = 0
            description = f"{setup.scenario_name}: waiting for {setup.num_clients} clients"
            for event in events:
                kind = event.get("event")
                if kind == "nodes":
                    done = max(done, 1)
                    description = f"{setup.scenario_name}: {event.get('connected')} clients"
                elif kind == "step":
                    done += 1
                    step = str(event.get("step"))
                    replied, sent = event.get("replied"), event.get("sent")
                    description = f"{labels.get(step, step)}: {replied}/{sent} replied"
                elif kind in ("done", "aborted"):
                    description = f"{setup.scenario_name}: {kind}"
            bar.update(task, completed=done, description=description)

        yield update


def _fmt(value: object) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"{float(value):.4g}"
    return str(value)


def print_result(setup: RunSetup, result: Mapping[str, Any]) -> None:
    """Print the private statistics against the truth, and the privacy spent."""
    from rich.console import Console
    from rich.table import Table

    console = Console()
    summary = result.get("summary", {})
    table = Table(
        title=(
            f"{setup.scenario_name}: n={result.get('n')} clients, d={result.get('d')} "
            "(coordinate averages)"
        )
    )
    for column in ("statistic", "private", "true", "error", "σ of release"):
        table.add_column(column, justify="left" if column == "statistic" else "right")
    release_of = {
        "mean": "mean",
        "dispersion": "dispersion",
        "weighted_mean": "weighted",
        "q": "q",
        "i2_extra": "i2_extra",
    }
    sigmas = result.get("sigmas", {})
    for key, label in STATISTIC_LABELS:
        if key not in summary:
            continue
        private = float(summary[key])
        true = setup.truth.get("i2" if key == "i2_extra" else key)
        table.add_row(
            label,
            _fmt(private),
            "" if true is None else _fmt(true),
            "" if true is None else _fmt(private - true),
            _fmt(sigmas.get(release_of.get(key, ""), "")),
        )
    console.print(table)
    privacy = result.get("privacy", {})
    degraded = "  [DEGRADED: noise shares missing]" if privacy.get("degraded") else ""
    console.print(
        f"privacy spent (exact composition): ε = {_fmt(privacy.get('epsilon_spent'))} at "
        f"δ = {_fmt(privacy.get('delta'))}  (target ε = {_fmt(privacy.get('target_epsilon'))},"
        f" δ = {_fmt(privacy.get('target_delta'))}){degraded}"
    )
    survivors = result.get("survivors", {})
    console.print("clients per step: " + ", ".join(f"{k}={v}" for k, v in survivors.items()))
    timings = result.get("timings", {})
    if "protocol" in timings:
        console.print(f"protocol time: {float(timings['protocol']):.2f} s")
    for label in result.get("labels", []):
        console.print(f"  note: {label}")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the arguments of ``fa-hetdp run``."""
    parser.add_argument(
        "scenario",
        nargs="?",
        default=DEFAULT_SCENARIO,
        help=f"scenario name or TOML file (default: {DEFAULT_SCENARIO})",
    )
    parser.add_argument("--epsilon", type=float, help="total privacy budget ε (overrides)")
    parser.add_argument("--delta", type=float, help="total δ (overrides the scenario)")
    parser.add_argument("--mechanism", choices=("agm", "cgm"))
    parser.add_argument("--placement", choices=("distributed", "central"))
    parser.add_argument("--composition", choices=("basic", "gdp"))
    parser.add_argument("--seed", type=int, help="simulation seed (overrides the scenario)")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds (default 3600)")
    parser.add_argument("--output", type=Path, help="also copy the result JSON to this path")
    parser.add_argument(
        "--workdir", type=Path, help="keep logs and Flower's home here instead of a temp dir"
    )


def run_command(args: argparse.Namespace) -> int:
    """Run ``fa-hetdp run``; return the process exit code."""
    setup = prepare(args)
    with _workdir(args.workdir) as workdir:
        with progress_display(setup) as on_progress:
            outcome = run_simulation(
                setup.run_config,
                num_supernodes=setup.num_clients,
                workdir=workdir,
                timeout=float(args.timeout),
                progress=on_progress,
            )
        if outcome.result is None or outcome.result.get("status") != "success":
            reason = "no result file was written"
            if outcome.result is not None:
                reason = str(outcome.result.get("reason", reason))
            print(f"fa-hetdp run: the run failed: {reason}", file=sys.stderr)
            print(outcome.output[-3000:], file=sys.stderr)
            return 1
        if args.output is not None:
            args.output.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(outcome.result_path, args.output)
        print_result(setup, outcome.result)
    return 0
