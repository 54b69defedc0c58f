"""The two Fleet front doors side by side under slow clients (issue 28).

``fa-hetdp fleet-gateway`` and nginx with the shipped ``deploy/nginx/fleet-gateway.conf``, each
with its shipped limits and TLS on both sides, in front of a stand-in SuperLink (the recording
upstream of ``tests/gateway_harness.py``). For each K, a fresh front door gets K slow clients:
each connects from its own address (127.1.x.y: K machines, so that no per-address cap refuses
them; ``--one-address`` sends them all from 127.0.0.1), sends the head of a request that
announces a 1 MB body on ``--route`` and then one body byte every ``--interval`` seconds, for
``--hold`` seconds. Measured, per front door and K:

- the resident memory (RSS, Linux ``/proc``) of the gateway process, or of nginx's master and
  workers summed: idle before the attack, its peak (sampled every 0.2 s) during it, and
  ``--settle`` seconds after every slow client has gone;
- how many slow clients the front door held when a SuperNode-like request (a small body on
  ``pull-messages``, from another address) was sent during the attack, whether that request
  was served and its latency (median of 5);
- how many slow clients the front door itself closed within ``--hold``, and after how long
  (median).

One command: ``python benchmarks/frontdoor_bench.py`` (K = 100, 500, 1000; ``--k`` for
others). Prints a markdown table, the machine and the command.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import os
import platform
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
if str(TESTS) not in sys.path:
    sys.path.append(str(TESTS))

from gateway_harness import (  # noqa: E402  (test support)
    GatewayProcess,
    RecordingUpstream,
    Tls,
    Trickle,
    exchange,
    free_port,
    make_tls,
    request_bytes,
    slow_head,
    status,
)

CONF = ROOT / "deploy" / "nginx" / "fleet-gateway.conf"
MB = 1e6
#: The request a SuperNode sends every few seconds (a small protobuf body).
SUPERNODE = request_bytes("POST", "/v1/fleet/pull-messages", b"\x08\x01\x10\x02")
VICTIM_ADDRESS = "127.200.0.1"


def slow_address(index: int) -> str:
    """The address of slow client ``index``: 127.1.0.1, 127.1.0.2, ... (one per client)."""
    return f"127.1.{index // 250}.{index % 250 + 1}"


# --- memory -----------------------------------------------------------------------------------


def _rss(pid: int) -> int:
    """VmRSS of one process in bytes (0 once it is gone)."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    for line in text.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            stat = (entry / "stat").read_text()
            if int(stat.rpartition(")")[2].split()[1]) == pid:
                found.append(int(entry.name))
    return found


class Sampler:
    """Samples the summed RSS of a process tree every 0.2 s in a thread; keeps the peak."""

    def __init__(self, pids: Callable[[], list[int]]) -> None:
        self._pids = pids
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def now(self) -> int:
        return sum(_rss(pid) for pid in self._pids())

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.now())
            self._stop.wait(0.2)

    def __enter__(self) -> Sampler:
        self.peak = self.now()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


# --- the two front doors ----------------------------------------------------------------------


@dataclass
class Door:
    """A running front door: its name, public port and the processes whose memory counts."""

    name: str
    port: int
    pids: Callable[[], list[int]]


@contextlib.contextmanager
def gateway(upstream: RecordingUpstream, tls: Tls, home: Path, k: int) -> Iterator[Door]:
    """``fa-hetdp fleet-gateway`` with its default limits (the connection cap raised if k needs)."""
    args = ("--max-connections", str(max(1024, k + 64)))
    process = GatewayProcess(upstream.address, *args, tls=tls, home=home)
    try:
        process.wait_ready()
        yield Door("fa-hetdp fleet-gateway", process.port, lambda: [process.proc.pid])
    finally:
        process.stop()


def _nginx_binary() -> str:
    found = shutil.which("nginx") or next(
        (p for p in ("/usr/sbin/nginx", "/usr/local/sbin/nginx") if os.access(p, os.X_OK)), None
    )
    if found is None:
        raise SystemExit("nginx not found (Debian: apt-get install nginx-light)")
    return found


def nginx_version() -> str:
    done = subprocess.run(
        [_nginx_binary(), "-v"], capture_output=True, text=True, check=False, timeout=30
    )
    return done.stderr.strip().removeprefix("nginx version: ").removeprefix("nginx/")


@contextlib.contextmanager
def nginx(upstream: RecordingUpstream, tls: Tls, home: Path, k: int) -> Iterator[Door]:
    """nginx running the shipped file as shipped (only the port, upstream and TLS paths set).

    The main context is the one the file's header asks for: worker_connections 4096 (raised
    if k needs more) per worker, twice that in descriptors, one worker per core.
    """
    port = free_port()
    text = CONF.read_text()
    for old, new in {
        "listen 9092 ssl;": f"listen 127.0.0.1:{port} ssl;",
        "server 127.0.0.1:9093;": f"server {upstream.address};",
        "/etc/fa-hetdp/certs/server.pem": str(tls.cert),
        "/etc/fa-hetdp/certs/server.key": str(tls.key),
        "/etc/fa-hetdp/certs/ca.crt": str(tls.ca),
    }.items():
        if old not in text:
            raise SystemExit(f"{CONF} no longer contains {old!r}: update the bench")
        text = text.replace(old, new)
    (home / "fleet-gateway.conf").write_text(text)
    temp = {name: home / name for name in ("body", "proxy", "fastcgi", "uwsgi", "scgi")}
    for path in temp.values():
        path.mkdir(exist_ok=True)
    connections = max(4096, 2 * k + 64)
    user = "user root root;\n" if os.geteuid() == 0 else ""
    main = (
        f"{user}daemon off;\nworker_processes auto;\nworker_rlimit_nofile {2 * connections};\n"
        f"pid {home / 'nginx.pid'};\nerror_log {home / 'error.log'} error;\n"
        f"events {{ worker_connections {connections}; }}\n"
        "http {\n  access_log off;\n"
        f"  client_body_temp_path {temp['body']};\n  proxy_temp_path {temp['proxy']};\n"
        f"  fastcgi_temp_path {temp['fastcgi']};\n  uwsgi_temp_path {temp['uwsgi']};\n"
        f"  scgi_temp_path {temp['scgi']};\n"
        f"  include {home / 'fleet-gateway.conf'};\n}}\n"
    )
    (home / "nginx.conf").write_text(main)
    binary = _nginx_binary()
    log = (home / "nginx.out").open("wb")
    proc = subprocess.Popen(
        [binary, "-c", str(home / "nginx.conf"), "-p", str(home)],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"nginx exited: {(home / 'error.log').read_text()}")
            try:
                exchange(port, SUPERNODE, tls=tls.client_context(), timeout=5)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        yield Door(f"nginx {nginx_version()}", port, lambda: [proc.pid, *_children(proc.pid)])
    finally:
        proc.send_signal(signal.SIGQUIT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


# --- one row ----------------------------------------------------------------------------------


@dataclass
class Row:
    door: str
    k: int
    held: int
    served: str
    latency_ms: float
    idle_mb: float
    peak_mb: float
    after_mb: float
    cut: int
    cut_after_s: float | None


def attack(door: Door, tls: Tls, k: int, args: argparse.Namespace) -> Row:
    sampler = Sampler(door.pids)
    client = tls.client_context()
    for _ in range(3):  # warm: the first requests load what a request needs
        exchange(door.port, SUPERNODE, tls=client, source=VICTIM_ADDRESS)
    time.sleep(1)
    idle = sampler.now()
    source: str | Callable[[int], str] = "127.0.0.1" if args.one_address else slow_address
    with sampler:
        trickle = Trickle(
            door.port,
            slow_head(args.route, 1_000_000),
            count=k,
            interval=args.interval,
            source=source,
            tls=client,
        )
        try:
            held = trickle.open_count()
            statuses, latencies = [], []
            for _ in range(5):
                started = time.monotonic()
                try:
                    reply = exchange(
                        door.port, SUPERNODE, tls=client, source=VICTIM_ADDRESS, timeout=30
                    )
                    statuses.append(status(reply))
                except OSError as exc:
                    statuses.append(0)
                    print(f"  {door.name}: the normal request failed: {exc}", file=sys.stderr)
                latencies.append(time.monotonic() - started)
            rest = args.hold - (time.monotonic() - trickle.started)
            if rest > 0:
                time.sleep(rest)
            closed_by_door = dict(trickle.closed_after)
        finally:
            trickle.stop()
        time.sleep(args.settle)
    after = sampler.now()
    ok = statuses.count(200)
    cut_times = sorted(closed_by_door.values())
    return Row(
        door=door.name,
        k=k,
        held=held,
        served=f"{ok}/5" + ("" if ok == 5 else f" ({', '.join(map(str, statuses))})"),
        latency_ms=1000 * statistics.median(latencies),
        idle_mb=idle / MB,
        peak_mb=sampler.peak / MB,
        after_mb=after / MB,
        cut=len(cut_times),
        cut_after_s=statistics.median(cut_times) if cut_times else None,
    )


def table(rows: list[Row], args: argparse.Namespace) -> str:
    lines = [
        f"| front door | K slow clients | held when served | normal request | latency "
        f"(median) | RSS idle | RSS peak | RSS {args.settle:g} s after | slow clients the "
        f"door cut within {args.hold:g} s (median time) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        cut = f"{row.cut}/{row.k}" + (
            f" ({row.cut_after_s:.1f} s)" if row.cut_after_s is not None else ""
        )
        lines.append(
            f"| {row.door} | {row.k} | {row.held} | {row.served} | {row.latency_ms:.0f} ms | "
            f"{row.idle_mb:.0f} MB | {row.peak_mb:.0f} MB | {row.after_mb:.0f} MB | {cut} |"
        )
    return "\n".join(lines)


def machine() -> str:
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return (
        f"{dt.date.today().isoformat()}, {platform.node() or 'this machine'}: "
        f"{os.cpu_count()} cores, {platform.system()} {platform.release()}, Python "
        f"{platform.python_version()}, nginx {nginx_version()}, commit {commit or '?'} "
        f"(plus the working tree), load average {load} at the end"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument(
        "--k", type=int, nargs="+", default=[100, 500, 1000], help="slow-client counts"
    )
    parser.add_argument(
        "--doors",
        nargs="+",
        choices=("gateway", "nginx"),
        default=["gateway", "nginx"],
        help="front doors to measure (default: both)",
    )
    parser.add_argument(
        "--route",
        default="/v1/fleet/push-object",
        help="the route the slow bodies go to (default: push-object, which the gateway "
        "streams; the other routes it reads whole first)",
    )
    parser.add_argument(
        "--interval",
        type=float,
        default=5.0,
        help="seconds between two body bytes of a slow client (default: 5, under both doors' "
        "10 s pause limit, so that only a rule on progress cuts them; the issue's was 20)",
    )
    parser.add_argument(
        "--hold", type=float, default=30.0, help="seconds the attack lasts (default: 30)"
    )
    parser.add_argument(
        "--settle",
        type=float,
        default=5.0,
        help="seconds after the attack before the 'after' RSS (default: 5)",
    )
    parser.add_argument(
        "--one-address",
        action="store_true",
        help="all slow clients from 127.0.0.1 (the per-address caps then refuse most)",
    )
    args = parser.parse_args(argv)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = 4 * max(args.k) + 256  # clients, the upstream's sockets, the doors' children
    if soft != resource.RLIM_INFINITY and soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(need, hard), hard))
    doors = {"gateway": gateway, "nginx": nginx}
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="frontdoor-bench-") as tmp:
        home = Path(tmp)
        os.environ.setdefault("FLWR_HOME", str(home / "flwr"))
        os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
        (home / "certs").mkdir()
        tls = make_tls(home / "certs")
        upstream = RecordingUpstream(tls=tls.server_context())
        try:
            for k in args.k:
                for name in args.doors:
                    where = home / f"{name}-{k}"
                    where.mkdir()
                    with doors[name](upstream, tls, where, k) as door:
                        row = attack(door, tls, k, args)
                    rows.append(row)
                    print(
                        f"{row.door}, K = {k}: peak {row.peak_mb:.0f} MB, after "
                        f"{row.after_mb:.0f} MB, normal request {row.served}",
                        file=sys.stderr,
                        flush=True,
                    )
                    upstream.recorded.clear()
        finally:
            upstream.close()
    command = "python benchmarks/frontdoor_bench.py " + " ".join(argv or sys.argv[1:])
    print(table(rows, args))
    print(f"\n{machine()}\n\n`{command.strip()}`")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
