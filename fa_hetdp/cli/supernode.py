"""``fa-hetdp supernode -- ARGS``: ``flower-supernode ARGS`` that leaves no process behind.

A SuperNode starts a SuperExec, which starts one ``flwr-clientapp`` process per message, all
in the SuperNode's process group. flwr 1.42's children watch their parent and exit when it is
gone, but not always: after a SuperLink restart with a run in flight, a ClientApp started for
the lost run's next message waits for it and survives its SuperNode's SIGTERM
(``tests/test_deployment_operator.py``). This supervisor runs ``flower-supernode`` in a
process group of its own, passes SIGTERM, SIGINT and SIGHUP on to it, and when the SuperNode
has exited -- stopped, crashed or killed -- sends SIGTERM to the whole group, then SIGKILL to
what is still there after ``--grace`` seconds. It exits with the SuperNode's exit code
(128 + the signal's number for a SuperNode ended by a signal).

A supervisor killed with SIGKILL cannot clean up: under systemd keep the default
``KillMode=control-group`` (docs/deployment.md).

The SuperNode starts its SuperExec by name (``flower-superexec``, looked up on ``PATH``).
Started by an absolute path, from pipx or under systemd, the venv's programs are not on
``PATH``: the SuperExec fails to start and the SuperNode never comes online and never exits.
So the SuperNode gets the ``PATH`` that ``fa-hetdp run`` gives its children (the folder of
the running interpreter's programs first, :func:`fa_hetdp.cli.cluster.programs_path`); a
``flower-superexec`` found nowhere is refused before the SuperNode starts, and a SuperNode
that has had no SuperExec for :data:`SUPEREXEC_WAIT` seconds (it could not start one, or it
exited) is stopped with the reason and exit code 1. ``--isolation process`` (ClientApps
started by someone else) needs no SuperExec and is not checked.

The node's privacy ledger (issue 27, :mod:`fa_hetdp.flowerkit.ledger`): before the SuperNode
starts, the supervisor reads the node policy of its ``--node-config``
(:func:`node_ledger`; a bad key or a file that is not a ledger is refused there, with the
reason) and prints what the ledger has spent and what is left; it prints that again each time
it changes (a measurement was charged by a ClientApp; a session's nonce recorded, which
changes the file but not the summary, prints nothing), :class:`LedgerWatch`.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from fa_hetdp.cli.cluster import _descendants, process_stats, programs_path

if TYPE_CHECKING:
    from fa_hetdp.flowerkit.ledger import NodeLedger

__all__ = [
    "SUPEREXEC",
    "SUPEREXEC_WAIT",
    "LedgerWatch",
    "add_arguments",
    "group_alive",
    "node_config_of",
    "node_ledger",
    "run_command",
    "superexec_running",
    "supervise",
]

#: The program a SuperNode starts for its ClientApps (``--isolation subprocess``, the default).
SUPEREXEC = "flower-superexec"
#: Seconds a SuperNode may be without a running SuperExec before it is stopped as broken.
SUPEREXEC_WAIT = 60.0

_FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def group_alive(pgid: int) -> bool:
    """Whether a live (not zombie) process of the process group ``pgid`` is still there.

    Reads ``/proc`` on Linux (a zombie waiting for a non-reaping init does not count);
    elsewhere asks the kernel (``killpg(pgid, 0)``).
    """
    if not Path("/proc").is_dir():
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    return any(
        len(fields) > 2 and fields[2] == str(pgid) and fields[0] != "Z"
        for _, fields in process_stats()
    )


def _end_group(pgid: int, grace: float) -> None:
    """SIGTERM to the group; SIGKILL to what is left after ``grace`` seconds."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
    deadline = time.monotonic() + 5.0  # SIGKILL is delivered asynchronously
    while group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)


def superexec_running(pid: int) -> bool:
    """Whether a live descendant of ``pid`` runs ``flower-superexec`` (Linux ``/proc``).

    A console script shows as ``python .../flower-superexec ...``: the first two words of
    its command line are looked at.
    """
    for child in _descendants(pid):
        try:
            words = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")[:2]
        except OSError:
            continue
        if any(Path(os.fsdecode(w)).name == SUPEREXEC for w in words):
            return True
    return False


def supervise(
    argv: Sequence[str],
    *,
    grace: float = 10.0,
    superexec_wait: float | None = None,
    env: Mapping[str, str] | None = None,
    on_poll: Callable[[], None] | None = None,
) -> int:
    """Run ``argv`` in a new process group; end the group when it exits; return its code.

    With ``superexec_wait`` (seconds; Linux), a child that has had no running
    ``flower-superexec`` below it for that long -- it could not start one, or it exited --
    is stopped, with the reason on stderr, and the code is 1. ``on_poll`` is called at each
    poll (every 0.2 s; the node's ledger summary after each measurement).
    """
    child = subprocess.Popen(list(argv), start_new_session=True, env=env)
    stopping = False

    def forward(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.pid, signum)

    previous = {sig: signal.signal(sig, forward) for sig in _FORWARDED}
    watch = superexec_wait is not None and Path("/proc").is_dir()
    seen = time.monotonic()
    broken = False
    try:
        while (code := child.poll()) is None:
            time.sleep(0.2)
            if on_poll is not None:
                on_poll()
            if not watch or stopping or broken:
                continue
            if superexec_running(child.pid):
                seen = time.monotonic()
            elif time.monotonic() - seen > float(superexec_wait or 0.0):
                broken = True
                print(
                    f"fa-hetdp supernode: no {SUPEREXEC} has been running under the SuperNode "
                    f"for {superexec_wait:.0f} s (it could not be started, or it exited), so "
                    "it cannot run ClientApps; stopping it (its output above says why)",
                    file=sys.stderr,
                )
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child.pid, signal.SIGTERM)
    finally:
        _end_group(child.pid, grace)  # the SuperNode's pid is its group's id
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if broken:
        return 1
    return 128 - code if code < 0 else code


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``fa-hetdp supernode [--grace S] -- FLOWER_SUPERNODE_ARGS...``."""
    parser.add_argument(
        "--grace",
        type=float,
        default=10.0,
        help="seconds between SIGTERM and SIGKILL to the SuperNode's processes (default: 10.0)",
    )
    parser.add_argument(
        "supernode_args",
        nargs=argparse.REMAINDER,
        help="after '--': the arguments of flower-supernode (--superlink HOST:PORT ...)",
    )


def run_command(args: argparse.Namespace) -> int:
    """Run ``fa-hetdp supernode``; returns the SuperNode's exit code."""
    from fa_hetdp.cli.cluster import find_program
    from fa_hetdp.config.rules import ConfigError

    rest = [a for a in args.supernode_args]
    if rest and rest[0] == "--":
        rest = rest[1:]
    if not rest:
        raise ConfigError(
            "command line", [("supernode_args", "give flower-supernode's arguments after '--'")]
        )
    if not args.grace >= 0:
        raise ConfigError("command line", [("--grace", f"must be >= 0, got {args.grace}")])
    program = find_program("flower-supernode")
    if program is None:
        raise ConfigError(
            "command line",
            [
                (
                    "flower-supernode",
                    f'not on PATH nor beside {sys.executable}; pip install "fa-hetdp[flower]"',
                )
            ],
        )
    env = dict(os.environ)
    env["PATH"] = programs_path(env.get("PATH", ""))  # as fa-hetdp run gives its children
    needs_superexec = _isolation(rest) != "process"
    if needs_superexec and shutil.which(SUPEREXEC, path=env["PATH"]) is None:
        raise ConfigError(
            "command line",
            [
                (
                    SUPEREXEC,
                    f"not beside {sys.executable} nor on PATH: the SuperNode starts it for "
                    "its ClientApps and would never come online; pip install flwr there",
                )
            ],
        )
    watch = LedgerWatch(node_ledger(rest, env))  # bad node config or ledger: refused here
    watch.show()
    code = supervise(
        [program, *rest],
        grace=float(args.grace),
        superexec_wait=SUPEREXEC_WAIT if needs_superexec else None,
        env=env,
        on_poll=watch.poll,
    )
    if code != 0:
        print(f"fa-hetdp supernode: flower-supernode ended with code {code}", file=sys.stderr)
    return code


def _isolation(argv: Sequence[str]) -> str:
    """Return flower-supernode's ``--isolation`` value in ``argv`` (default ``subprocess``)."""
    value = "subprocess"
    for i, word in enumerate(argv):
        if word == "--isolation" and i + 1 < len(argv):
            value = argv[i + 1]
        elif word.startswith("--isolation="):
            value = word.partition("=")[2]
    return value


def node_config_of(argv: Sequence[str]) -> dict[str, Any]:
    """Return the ``--node-config`` of flower-supernode's arguments (``{}`` without one)."""
    from flwr.common.config import parse_config_args

    values: list[str] = []
    for i, word in enumerate(argv):
        if word == "--node-config" and i + 1 < len(argv):
            values.append(argv[i + 1])
        elif word.startswith("--node-config="):
            values.append(word.partition("=")[2])
    return dict(parse_config_args(values)) if values else {}


def node_ledger(argv: Sequence[str], env: Mapping[str, str]) -> NodeLedger:
    """Return the node's privacy ledger, as its ClientApps will read it (issue 27).

    The node policy of the ``--node-config`` (:mod:`fa_hetdp.flowerkit.node_policy`), its
    default ledger path under ``FLWR_HOME`` of ``env`` (the ClientApps' environment).

    Raises
    ------
    ConfigError
        A node config the policy refuses, or a ledger file that is not a ledger (one line).
    """
    from fa_hetdp.config.rules import ConfigError
    from fa_hetdp.flowerkit.ledger import LedgerError
    from fa_hetdp.flowerkit.node_policy import NodePolicy, NodePolicyError

    try:
        config = node_config_of(argv)
    except ValueError as exc:
        raise ConfigError("command line", [("--node-config", str(exc))]) from None
    home = env.get("FLWR_HOME")
    try:
        policy = NodePolicy.from_node_config(config, home=Path(home) if home else None)
        return policy.ledger()
    except (NodePolicyError, LedgerError) as exc:
        raise ConfigError("command line", [("--node-config", str(exc))]) from None


class LedgerWatch:
    """Print the node's ledger summary at the start and after each measurement.

    The file also changes when nothing was spent: a ClientApp records its session's nonce
    before it replies (:meth:`~fa_hetdp.flowerkit.ledger.NodeLedger.begin`). :meth:`poll`
    prints only a summary that differs from the one printed last, so the starting lines are
    not printed twice.
    """

    def __init__(self, ledger: NodeLedger) -> None:
        self.ledger = ledger
        self._seen = self._stamp()
        self._shown: list[str] | None = None

    def _stamp(self) -> tuple[int, int] | None:
        try:
            stat = self.ledger.path.stat()
        except OSError:
            return None
        return stat.st_mtime_ns, stat.st_size

    def _lines(self) -> list[str]:
        try:
            return self.ledger.summary()
        except Exception as exc:  # a ledger broken under a running node: say so, go on
            return [f"privacy ledger {self.ledger.path}: {exc}"]

    def _print(self, lines: list[str]) -> None:
        self._shown = lines
        for line in lines:
            print(f"fa-hetdp supernode: {line}", flush=True)

    def show(self) -> None:
        """Print what is spent and what is left."""
        self._print(self._lines())

    def poll(self) -> None:
        """Print the summary again when the ledger file changed and the summary with it."""
        stamp = self._stamp()
        if stamp == self._seen:
            return
        self._seen = stamp
        lines = self._lines()
        if lines != self._shown:
            self._print(lines)
