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
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from fa_hetdp.cli.cluster import process_stats

__all__ = ["add_arguments", "group_alive", "run_command", "supervise"]

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


def supervise(argv: Sequence[str], *, grace: float = 10.0) -> int:
    """Run ``argv`` in a new process group; end the group when it exits; return its code."""
    child = subprocess.Popen(list(argv), start_new_session=True)

    def forward(signum: int, frame: FrameType | None) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.pid, signum)

    previous = {sig: signal.signal(sig, forward) for sig in _FORWARDED}
    try:
        code = child.wait()
    finally:
        _end_group(child.pid, grace)  # the SuperNode's pid is its group's id
        for sig, handler in previous.items():
            signal.signal(sig, handler)
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
            [("flower-supernode", f"not on PATH nor beside {sys.executable}; pip install flwr")],
        )
    return supervise([program, *rest], grace=float(args.grace))
