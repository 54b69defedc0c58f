"""Test support (no tests here): the shell commands of the docs, found and run as written.

Used by ``tests/test_docs_execute.py`` (issue 28). Two parts:

- a small parser: every fenced ``bash``/``sh``/``shell``/``console`` block of a Markdown file
  split into its commands (:func:`shell_commands`). A command runs to the end of its line,
  continued by a trailing backslash, an open quote or a here-document; a comment line right
  after it is what the doc says the command prints (:attr:`Command.notes`). In a ``console``
  block, and in a block of any other language with a line starting with ``$ `` (a transcript
  shown as ``text``), a command is a line starting with ``$ `` and the lines after it are its
  output;
- :class:`DocShell`: runs a command's text with ``bash -c`` in a working directory, after the
  substitutions the test states in one place (:meth:`DocShell.substitute`), and keeps every
  process it started, to stop them by PID (their process groups, then whatever still carries
  the run's marker in its environment). Waits follow progress: a command may run as long as
  its output, the logs of the processes started here or their CPU time keep growing
  (:meth:`DocShell.wait`), up to a cap.

Import it by module name (``from docs_shell import DocShell, shell_commands``).
"""

from __future__ import annotations

import math
import os
import re
import shlex
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from fa_hetdp.cli.cluster import _descendants, process_stats, programs_path

SHELL_LANGUAGES = frozenset({"bash", "sh", "shell", "console"})
_FENCE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
_HEREDOC = re.compile(r"<<-?\s*(['\"]?)(\w+)\1")


@dataclass(frozen=True)
class Command:
    """One command of a shell block: where it is, its text as written, what the doc says."""

    doc: str
    line: int
    text: str
    notes: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        """The command on one line: continuations joined, spaces collapsed, comment removed."""
        return " ".join(strip_comment(self.text.replace("\\\n", " ")).split())


def strip_comment(text: str) -> str:
    """``text`` without a trailing ``# comment`` (outside quotes) on each of its lines."""
    out = []
    for line in text.split("\n"):
        quote = ""
        for i, char in enumerate(line):
            if quote:
                quote = "" if char == quote else quote
            elif char in "'\"":
                quote = char
            elif char == "#" and (i == 0 or line[i - 1].isspace()):
                line = line[:i].rstrip()
                break
        out.append(line)
    return "\n".join(out).strip()


def _incomplete(text: str) -> bool:
    """Whether a command needs its next line: a trailing backslash or an open quote."""
    if strip_comment(text).endswith("\\"):
        return True
    try:
        shlex.split(text, comments=True)
    except ValueError:
        return True
    return False


def shell_blocks(path: Path) -> list[tuple[str, int, str]]:
    """``(language, line of the body's first line, body)`` of every shell block.

    A block of another language whose lines include a ``$ `` prompt is a transcript: it is
    returned as ``console``.
    """
    text = path.read_text()
    found = []
    for match in _FENCE.finditer(text):
        language, body = match.group(1), match.group(2)
        if language not in SHELL_LANGUAGES and re.search(r"^\$ ", body, re.MULTILINE):
            language = "console"
        if language in SHELL_LANGUAGES:
            line = text.count("\n", 0, match.start(2)) + 1
            found.append((language, line, body))
    return found


def shell_commands(root: Path, doc: str) -> list[Command]:
    """Every command of every shell block of ``root/doc``, in order."""
    commands: list[Command] = []
    for language, first, body in shell_blocks(root / doc):
        lines = body.split("\n")
        i = 0
        while i < len(lines):
            line = lines[i]
            console_output = language == "console" and not line.startswith("$ ")
            if not line.strip():
                i += 1
                continue
            if line.lstrip().startswith("#") or console_output:
                if commands and commands[-1].doc == doc:
                    last = commands[-1]
                    note = line.strip().lstrip("#").strip()
                    commands[-1] = Command(last.doc, last.line, last.text, (*last.notes, note))
                i += 1
                continue
            start = i
            text = line[2:] if language == "console" else line
            while _incomplete(text) and i + 1 < len(lines):
                i += 1
                text += "\n" + lines[i]
            heredoc = _HEREDOC.search(strip_comment(text))
            if heredoc:
                while i + 1 < len(lines) and lines[i].strip() != heredoc.group(2):
                    i += 1
                    text += "\n" + lines[i]
            commands.append(Command(doc, first + start, text))
            i += 1
    return commands


def free_port() -> int:
    """A TCP port free on 127.0.0.1 and on every address right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        port: int = sock.getsockname()[1]
    return port


@dataclass
class Started:
    """A process started by :class:`DocShell`, with its log."""

    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def alive(self) -> bool:
        return self.popen.poll() is None

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def tail(self, chars: int = 4000) -> str:
        return f"--- {self.name} (pid {self.popen.pid}) ---\n" + self.output()[-chars:]


class CommandError(AssertionError):
    """A documented command failed, stalled or did not do what the doc says."""


@dataclass
class DocShell:
    """Runs documented commands in ``workdir`` with the stated substitutions.

    Attributes
    ----------
    workdir
        The working directory of every command (the docs' "current directory": a copy of
        the app's files, see the test).
    home
        ``FLWR_HOME`` of every process (the docs' ``~/.flwr``).
    replacements
        Plain text replacements applied to every command and file, in order.
    ports
        Fixed port of the docs -> free port used instead (whole numbers only).
    roots
        Absolute folders of the docs (``/etc/fa-hetdp``) -> the folder used instead; only
        where the folder starts a path (after a space, a quote, ``=`` or a line start).
    """

    workdir: Path
    home: Path
    replacements: dict[str, str] = field(default_factory=dict)
    ports: dict[int, int] = field(default_factory=dict)
    roots: dict[str, Path] = field(default_factory=dict)
    env_extra: dict[str, str] = field(default_factory=dict)
    started: list[Started] = field(default_factory=list)
    transcript: list[str] = field(default_factory=list)
    marker: str = field(default_factory=lambda: uuid.uuid4().hex)
    deadline: float = math.inf  # time.monotonic() by which every wait must be over

    # -- substitutions --------------------------------------------------------------------
    def substitute(self, text: str) -> str:
        """``text`` with the stated substitutions, and nothing else, applied."""
        for old, new in self.replacements.items():
            text = text.replace(old, new)
        for fixed, port in self.ports.items():
            text = re.sub(rf"(?<![\w.]){fixed}(?![\w.])", str(port), text)
        if self.roots:
            names = "|".join(re.escape(r) for r in sorted(self.roots, key=len, reverse=True))
            text = re.sub(
                rf"(?<![\w./-])({names})(?=/|\b)",
                lambda m: str(self.roots[m.group(1)]),
                text,
            )
        return text

    @property
    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            {
                "FLWR_HOME": str(self.home),
                "FLWR_TELEMETRY_ENABLED": "0",
                "FLWR_DISABLE_UPDATE_CHECK": "1",
                "PYTHONUNBUFFERED": "1",
                "PATH": programs_path(os.environ.get("PATH", "")),
                "FA_HETDP_DOCS_RUN": self.marker,
                **self.env_extra,
            }
        )
        return env

    # -- processes ------------------------------------------------------------------------
    def start(self, name: str, script: str, *, cwd: Path | None = None) -> Started:
        """Start ``script`` (already substituted) with ``bash -c``; keep it to stop it."""
        log = self.workdir.parent / f"{len(self.started):02d}-{name}.log"
        self.transcript.append(f"$ {script}")
        with log.open("wb") as handle:
            popen = subprocess.Popen(
                ["bash", "-c", script],
                cwd=cwd or self.workdir,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=handle,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        process = Started(name, popen, log)
        self.started.append(process)
        return process

    def _progress(self) -> tuple[int, int]:
        """(bytes of every log, CPU ticks of every process started here and below)."""
        size = sum(p.log.stat().st_size for p in self.started if p.log.exists())
        pids = {p.popen.pid for p in self.started if p.alive()}
        for pid in list(pids):
            pids.update(_descendants(pid))
        pids.update(self.marked_pids())
        ticks = sum(int(f[11]) + int(f[12]) for pid, f in process_stats() if pid in pids)
        return size, ticks

    def wait(
        self,
        what: str,
        done: Callable[[], bool],
        *,
        quiet: float = 60.0,
        cap: float = 480.0,
        watch: Started | None = None,
    ) -> float:
        """Wait until ``done()``; fail after ``quiet`` s without progress or ``cap`` s in all.

        Progress: a log of a process started here grew, or those processes (and what they
        started) used CPU time. ``watch``: fail at once if that process exits first. Past
        :attr:`deadline` (the budget of the whole file) it fails too. Returns the seconds
        waited.
        """
        start = last = time.monotonic()
        seen = self._progress()
        while not done():
            if watch is not None and not watch.alive() and not done():
                raise CommandError(f"{what}: {watch.name} exited first\n" + watch.tail())
            now = time.monotonic()
            current = self._progress()
            if current != seen:
                seen, last = current, now
            if now - last > quiet or now - start > cap or now > self.deadline:
                tails = "\n".join(p.tail(2000) for p in self.started[-4:])
                raise CommandError(
                    f"{what}: not done after {now - start:.0f} s "
                    f"({now - last:.0f} s without progress)\n{tails}"
                )
            time.sleep(0.5)
        return time.monotonic() - start

    def run(
        self, script: str, *, name: str = "command", cwd: Path | None = None, ok: bool = True
    ) -> Started:
        """Run ``script`` (already substituted) to its end; fail on a non-zero exit if ``ok``."""
        process = self.start(name, script, cwd=cwd)
        self.wait(f"`{script}`", lambda: not process.alive())
        if ok and process.popen.returncode != 0:
            raise CommandError(
                f"`{script}` exited with {process.popen.returncode}\n" + process.tail()
            )
        return process

    def marked_pids(self) -> list[int]:
        """PIDs of the processes whose environment carries this shell's marker."""
        marker = f"FA_HETDP_DOCS_RUN={self.marker}".encode()
        found = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit() and int(entry.name) != os.getpid():
                try:
                    if marker in (entry / "environ").read_bytes().split(b"\0"):
                        found.append(int(entry.name))
                except OSError:
                    pass
        return found

    def stop(self, process: Started, *, grace: float = 15.0) -> None:
        """SIGTERM to ``process``'s group (and to the process itself), SIGKILL after ``grace``."""
        if not process.alive():  # its group may outlive it (a command's `&`)
            try:
                os.killpg(process.popen.pid, signal.SIGTERM)
            except (ProcessLookupError, PermissionError):
                pass
            return
        for target in (lambda s: os.killpg(process.popen.pid, s), process.popen.send_signal):
            try:
                target(signal.SIGTERM)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            process.popen.wait(grace)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(process.popen.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.popen.wait(5)

    def stop_all(self) -> list[str]:
        """Stop every process started here, newest first, then any left with the marker.

        Returns the command lines of the processes found by the marker after the groups
        were stopped (what escaped its group, such as flwr's detached local SuperLink).
        """
        for process in reversed(self.started):
            self.stop(process)
        left = []
        for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
            pids = self.marked_pids()
            for pid in pids:
                try:
                    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
                    left.append(cmdline.decode(errors="replace").strip())
                    os.kill(pid, sig)
                except (OSError, ProcessLookupError):
                    pass
            deadline = time.monotonic() + wait
            while self.marked_pids() and time.monotonic() < deadline:
                time.sleep(0.2)
        return left


def listening(port: int, host: str = "127.0.0.1") -> bool:
    """Whether something accepts TCP connections on ``host:port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0
