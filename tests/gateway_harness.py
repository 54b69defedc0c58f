"""Test harness for the Fleet front doors: a recording upstream, raw-socket clients, a corpus.

The hostile requests are written byte for byte on plain sockets (an HTTP client library would
normalise ``..``, percent-encoding or absolute-form targets before sending them). The upstream
stands in for the SuperLink on 127.0.0.1: it records the method and the exact request target of
every request that reaches it, reads the body (``Content-Length`` or chunked) without keeping
it, and answers 200 (with a body of ``X-Reply-Bytes`` bytes when the request asks for one).
:class:`Trickle` holds slow clients open: each sends a request head, then one body byte per
interval until the front door closes it. Import it by module name
(``from gateway_harness import ...``).
"""

from __future__ import annotations

import contextlib
import io
import os
import selectors
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from fa_hetdp.cli.gateway_routes import FLEET_ROUTES

ROUTES = tuple(route.path for route in FLEET_ROUTES)

#: Hostile request targets; each must be refused with 400 and never reach the upstream.
HOSTILE_TARGETS: tuple[str, ...] = (
    # dot segments, raw
    "/v1/fleet/../control/list-runs",
    "/v1/fleet/../../v1/control/list-runs",
    "/v1/fleet/./get-run",
    "/v1/fleet/get-run/..",
    "/v1/fleet/get-run/../../control/list-runs",
    # dot segments, percent-encoded (both cases, partly encoded)
    "/v1/fleet/%2e%2e/control/list-runs",
    "/v1/fleet/%2E%2E/control/list-runs",
    "/v1/fleet/.%2e/control/list-runs",
    "/v1/fleet/%2e./control/list-runs",
    "/v1/fleet/%2e/get-run",
    # double encoding
    "/v1/fleet/%252e%252e/control/list-runs",
    "/v1/fleet/%252E%252E%252Fcontrol/list-runs",
    # encoded slash
    "/v1/fleet%2f..%2fcontrol/list-runs",
    "/v1/fleet/..%2Fcontrol/list-runs",
    "/v1/fleet/get-run%2f",
    # backslashes, raw and encoded
    "/v1/fleet/..\\control\\list-runs",
    "/v1/fleet/%5c..%5ccontrol/list-runs",
    "/v1/fleet/..%5Ccontrol/list-runs",
    # ;-parameters
    "/v1/fleet/get-run;x=1",
    "/v1/fleet/..;/control/list-runs",
    "/v1/fleet/get-run;",
    # doubled slashes
    "/v1/fleet//get-run",
    "//v1/fleet/get-run",
    "/v1//fleet/get-run",
    # a query string the Fleet API does not use (a bare trailing "?" is not seen: uvicorn
    # hands over the path and an empty query, and the upstream URL is the route's constant)
    "/v1/fleet/get-run?next=/v1/control/list-runs",
    "/v1/fleet/get-run?x",
    # a fragment
    "/v1/fleet/get-run#x",
    # overlong
    "/v1/fleet/" + "a" * 4000,
    "/v1/fleet/get-run" + "x" * 300,
    # absolute-form and other non-origin forms
    "http://127.0.0.1/v1/control/list-runs",
    "http://127.0.0.1/v1/fleet/get-run",
    "https://superlink/v1/fleet/../control/list-runs",
    "*",
    # other cases than the routes'
    "/V1/FLEET/get-run",
    "/v1/fleet/GET-RUN",
)

#: Well-formed paths under the Fleet prefix that are not Fleet routes: 403, never forwarded.
NEAR_MISSES: tuple[str, ...] = (
    "/v1/fleet/get-run/",
    "/v1/fleet/get-runs",
    "/v1/fleet/",
    "/v1/fleet/control/list-runs",
    "/v1/fleet/v1/control/list-runs",
)


#: Headers by which a client pretends to be a proxy's report of who the client is.
FORWARDING = (
    ("X-Forwarded-For", "6.6.6.6"),
    ("X-Forwarded-Host", "control.example"),
    ("X-Forwarded-Proto", "http"),
    ("X-Forwarded-Port", "9093"),
    ("x-forwarded-prefix", "/v1/control"),
    ("Forwarded", "for=6.6.6.6;proto=http"),
    ("X-Real-IP", "6.6.6.6"),
    ("True-Client-IP", "6.6.6.6"),
    ("Via", "1.1 6.6.6.6"),
)


@dataclass
class Recorded:
    """What reached the upstream: ``(method, target)`` pairs, headers and body sizes, in order.

    A request is recorded when its head has arrived, before its body is read.
    """

    requests: list[tuple[str, str]] = field(default_factory=list)
    headers: list[list[tuple[str, str]]] = field(default_factory=list)
    body_bytes: list[int] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def clear(self) -> None:
        with self.lock:
            self.requests.clear()
            self.headers.clear()
            self.body_bytes.clear()

    def snapshot(self) -> list[tuple[str, str]]:
        with self.lock:
            return list(self.requests)

    def header_snapshot(self) -> list[list[tuple[str, str]]]:
        """The headers of each request, ``(lower-case name, value)`` as received."""
        with self.lock:
            return [list(h) for h in self.headers]


class RecordingUpstream:
    """A stand-in SuperLink on 127.0.0.1 that records every request target it sees."""

    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        self.recorded = Recorded()
        self._tls = tls
        self._listener = socket.create_server(("127.0.0.1", 0), backlog=256)
        self.port = int(self._listener.getsockname()[1])
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def close(self) -> None:
        self._stop.set()
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        self._thread.join(timeout=10)

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with contextlib.ExitStack() as stack:
            stack.callback(conn.close)
            try:
                sock: socket.socket = conn
                if self._tls is not None:
                    sock = self._tls.wrap_socket(conn, server_side=True)
                    stack.callback(sock.close)
                reader = sock.makefile("rb")
                stack.callback(reader.close)
                while self._one_request(sock, reader):
                    pass
            except (OSError, ValueError, ssl.SSLError):
                return

    def _one_request(self, sock: socket.socket, reader: io.BufferedReader) -> bool:
        read_line = reader.readline
        request_line = read_line(65536)
        if not request_line:
            return False
        method, target, _ = request_line.decode("latin-1").rstrip("\r\n").split(" ", 2)
        headers: dict[str, str] = {}
        received: list[tuple[str, str]] = []
        while True:
            line = read_line(65536)
            if line in (b"\r\n", b"\n", b""):
                break
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
            received.append((name.strip().lower(), value.strip()))
        with self.recorded.lock:
            self.recorded.requests.append((method, target))
            self.recorded.headers.append(received)
        size = 0
        read = reader.read
        if headers.get("transfer-encoding", "").lower() == "chunked":
            while True:
                size_line = read_line(1024)
                if not size_line:
                    return False
                length = int(size_line.split(b";")[0].strip(), 16)
                if length == 0:
                    while read_line(1024) not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    break
                while length:
                    chunk = read(min(length, 1 << 16))
                    if not chunk:
                        return False
                    size += len(chunk)
                    length -= len(chunk)
                read_line(1024)
        else:
            remaining = int(headers.get("content-length", "0"))
            while remaining:
                chunk = read(min(remaining, 1 << 16))
                if not chunk:
                    return False
                size += len(chunk)
                remaining -= len(chunk)
        with self.recorded.lock:
            self.recorded.body_bytes.append(size)
        body = f"upstream saw {method} {target} ({size} bytes)".encode()
        if headers.get("x-reply-bytes", "").isdigit():  # a large reply, for slow readers
            body = b"r" * int(headers["x-reply-bytes"])
        sock.sendall(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\nx-upstream: superlink\r\n"
            + f"content-length: {len(body)}\r\n\r\n".encode()
            + body
        )
        return headers.get("connection", "").lower() != "close"


def request_bytes(
    method: str,
    target: str,
    body: bytes = b"",
    *,
    version: str = "HTTP/1.1",
    headers: Sequence[tuple[str, str]] = (),
    chunked: bool = False,
    close: bool = True,
) -> bytes:
    """One request, byte for byte as given (no normalisation of ``target``)."""
    lines = [f"{method} {target} {version}"]
    if version == "HTTP/1.1":
        lines.append("Host: 127.0.0.1")
    lines.append("Content-Type: application/protobuf")
    if chunked:
        lines.append("Transfer-Encoding: chunked")
        payload = (f"{len(body):x}\r\n".encode() + body + b"\r\n" if body else b"") + b"0\r\n\r\n"
    else:
        lines.append(f"Content-Length: {len(body)}")
        payload = body
    if close:
        lines.append("Connection: close")
    lines.extend(f"{name}: {value}" for name, value in headers)
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + payload


def read_all(sock: socket.socket) -> bytes:
    """Everything the peer sends until it closes (a reset ends the reply too)."""
    chunks: list[bytes] = []
    while True:
        try:
            chunk = sock.recv(1 << 16)
        except (ConnectionResetError, ssl.SSLError):
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def exchange(
    port: int,
    data: bytes,
    *,
    tls: ssl.SSLContext | None = None,
    timeout: float = 60.0,
    source: str | None = None,
) -> bytes:
    """Send ``data`` on a fresh connection to 127.0.0.1:``port``; return the whole reply.

    ``source``: the client address to connect from (any 127.x.y.z is this machine too), so
    that a test has more than one client address.
    """
    where = None if source is None else (source, 0)
    with socket.create_connection(
        ("127.0.0.1", port), timeout=timeout, source_address=where
    ) as raw:
        if tls is None:
            raw.sendall(data)
            return read_all(raw)
        with tls.wrap_socket(raw, server_hostname="127.0.0.1") as sock:
            sock.sendall(data)
            return read_all(sock)


def slow_head(route: str, length: int) -> bytes:
    """A request head that announces a ``length``-byte body (which a slow client trickles)."""
    return request_bytes("POST", route).replace(
        b"Content-Length: 0", f"Content-Length: {length}".encode()
    )


class Trickle:
    """``count`` slow clients: each sends ``head``, then one body byte every ``interval`` s.

    The clients connect from ``source`` (an address, or one per client index; over TLS with
    ``tls``); a thread sends the bytes and
    collects what the front door answers, until it closes each connection or :meth:`stop` is
    called. A connection refused at once (a 429 or 503 before the body) counts as closed.
    """

    def __init__(
        self,
        port: int,
        head: bytes,
        *,
        count: int,
        interval: float,
        source: str | Callable[[int], str] = "127.0.0.1",
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.interval = interval
        self.started = time.monotonic()
        self.socks: list[socket.socket] = []
        self.replies: dict[int, bytearray] = {}
        self.closed_after: dict[int, float] = {}  # index -> seconds after the start
        self._open: dict[socket.socket, int] = {}
        self._lock = threading.Lock()
        for index in range(count):
            self.replies[index] = bytearray()
            try:
                where = source if isinstance(source, str) else source(index)
                raw = socket.create_connection(
                    ("127.0.0.1", port), timeout=30, source_address=(where, 0)
                )
            except OSError:
                self.closed_after[index] = 0.0
                continue
            sock: socket.socket = raw
            try:
                if tls is not None:
                    sock = tls.wrap_socket(raw, server_hostname="127.0.0.1")
                sock.sendall(head)
            except (OSError, ssl.SSLError):
                self._take(sock, index)
                self.closed_after[index] = time.monotonic() - self.started
                sock.close()
                continue
            sock.setblocking(False)
            self.socks.append(sock)
            self._open[sock] = index
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _take(self, sock: socket.socket, index: int) -> bool:
        """Read what ``sock`` has; return False once the peer has closed it."""
        while True:
            try:
                data = sock.recv(1 << 16)
            except (ssl.SSLWantReadError, BlockingIOError):
                return True
            except (OSError, ssl.SSLError):
                return False
            if not data:
                return False
            self.replies[index] += data

    def _close(self, sock: socket.socket) -> None:
        index = self._open.pop(sock)
        self.closed_after[index] = time.monotonic() - self.started
        with contextlib.suppress(OSError):
            sock.close()

    def _run(self) -> None:
        next_byte = time.monotonic() + self.interval
        with selectors.DefaultSelector() as watching:  # epoll: no 1024-descriptor limit
            with self._lock:
                for sock in self._open:
                    watching.register(sock, selectors.EVENT_READ)
            while not self._stop.is_set():
                with self._lock:
                    if not self._open:
                        return
                wait = min(0.2, max(0.0, next_byte - time.monotonic()))
                readable = [key.fileobj for key, _ in watching.select(wait)]
                with self._lock:
                    for sock in readable:
                        assert isinstance(sock, socket.socket)
                        if sock in self._open and not self._take(sock, self._open[sock]):
                            watching.unregister(sock)
                            self._close(sock)
                    if time.monotonic() >= next_byte:
                        next_byte += self.interval
                        self._send_one_byte(watching)

    def _send_one_byte(self, watching: selectors.BaseSelector) -> None:
        for sock in list(self._open):
            try:
                sock.send(b"x")
            except (ssl.SSLWantWriteError, ssl.SSLWantReadError, BlockingIOError):
                pass
            except (OSError, ssl.SSLError):
                self._take(sock, self._open[sock])
                watching.unregister(sock)
                self._close(sock)

    def open_count(self) -> int:
        with self._lock:
            return len(self._open)

    def wait_closed(self, guard: float) -> int:
        """Wait until every connection is closed (or ``guard`` s pass); return how many are open."""
        deadline = time.monotonic() + guard
        while self.open_count() and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.open_count()

    def statuses(self) -> list[int]:
        """The status each client got so far (0: none)."""
        with self._lock:
            return [status(bytes(self.replies[i])) for i in sorted(self.replies)]

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        with self._lock:
            for sock in list(self._open):
                self._close(sock)


def status(reply: bytes) -> int:
    """The status code of a raw HTTP reply (0 when there is none)."""
    parts = reply.split(b"\r\n", 1)[0].split(b" ")
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0


def body(reply: bytes) -> bytes:
    """The body of a raw (non-chunked) HTTP reply."""
    return reply.partition(b"\r\n\r\n")[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class Tls:
    """The TLS files of one test deployment (the certificate names 127.0.0.1)."""

    ca: Path
    cert: Path
    key: Path

    def client_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca))

    def server_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(self.cert), str(self.key))
        return context


def make_tls(directory: Path) -> Tls:
    from fa_hetdp.server.certs import generate_tls_files

    files = generate_tls_files(directory, ("127.0.0.1", "localhost"))
    return Tls(files.ca_certificate, files.server_certificate, files.server_key)


_MAIN = "import sys; from fa_hetdp.cli.main import main; sys.exit(main(sys.argv[1:]))"


class GatewayProcess:
    """``fa-hetdp fleet-gateway`` in a child process, listening on 127.0.0.1."""

    def __init__(
        self,
        upstream: str,
        *args: str,
        tls: Tls | None = None,
        home: Path,
        nofile: int | None = None,
    ) -> None:
        self.port = free_port()
        command = [sys.executable, "-c", _MAIN, "fleet-gateway"]
        command += ["--listen", f"127.0.0.1:{self.port}", "--superlink", upstream]
        if tls is None:
            command.append("--insecure")
        else:
            command += ["--ssl-certfile", str(tls.cert), "--ssl-keyfile", str(tls.key)]
            command += ["--ssl-ca-certfile", str(tls.ca)]
        command += list(args)
        env = dict(os.environ, FLWR_HOME=str(home), FLWR_TELEMETRY_ENABLED="0")
        self.log = home / f"gateway-{self.port}.log"
        self._log = self.log.open("wb")

        def limit_files() -> None:  # in the child, before exec
            import resource

            if nofile is not None:
                resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

        self.proc = subprocess.Popen(
            command, env=env, stdout=self._log, stderr=subprocess.STDOUT, preexec_fn=limit_files
        )

    def wait_ready(self) -> GatewayProcess:
        """Return once the port accepts, while the process lives (it may refuse to start)."""
        deadline = time.monotonic() + 120  # only a guard: a live process keeps us waiting
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"gateway exited {self.proc.returncode}: {self.output()}")
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), timeout=1),
            ):
                return self
            time.sleep(0.05)
        raise RuntimeError(f"gateway not listening after 120 s: {self.output()}")

    def output(self) -> str:
        self._log.flush()
        return self.log.read_text(errors="replace")

    def memory(self) -> tuple[int, int]:
        """``(VmRSS, VmHWM)`` of the gateway process, in bytes (Linux /proc)."""
        fields = {}
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            name, _, value = line.partition(":")
            fields[name] = value
        return (int(fields["VmRSS"].split()[0]) * 1024, int(fields["VmHWM"].split()[0]) * 1024)

    def holds(self, client_port: int) -> bool:
        """Whether the gateway process still has a socket of the client at ``client_port``.

        Linux /proc: the process's socket inodes against ``/proc/<pid>/net/tcp``'s (a closed
        or aborted connection leaves the process's descriptors, whatever the kernel still
        sends of it).
        """
        fd_dir = Path(f"/proc/{self.proc.pid}/fd")
        inodes = set()
        for fd in fd_dir.iterdir():
            with contextlib.suppress(OSError):
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes.add(target[len("socket:[") : -1])
        for table in ("tcp", "tcp6"):
            path = Path(f"/proc/{self.proc.pid}/net/{table}")
            if not path.exists():
                continue
            for line in path.read_text().splitlines()[1:]:
                fields = line.split()
                remote_port = int(fields[2].rsplit(":", 1)[1], 16)
                if remote_port == client_port and fields[9] in inodes:
                    return True
        return False

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


@contextlib.contextmanager
def running_gateway(
    upstream: str, *args: str, tls: Tls | None = None, home: Path
) -> Iterator[GatewayProcess]:
    gateway = GatewayProcess(upstream, *args, tls=tls, home=home)
    try:
        yield gateway.wait_ready()
    finally:
        gateway.stop()
