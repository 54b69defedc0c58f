"""The fleet gateway's limits against a real gateway process: body caps, deadlines, connections.

Measured on the gateway process itself (``/proc/<pid>/status``): a 256 MiB body, declared or
sent chunked without end, is refused and the gateway's peak RSS (VmHWM) grows by less than
:data:`RSS_GROWTH_BOUND`; 1000 slowloris connections (partial headers, a byte more every half
second) do not stop a real request and are all closed by the header deadline; past the
connection cap, new connections get 503 and the gateway stays up under a 256-descriptor limit.
Time-outs here are guards against a hang, not measurements: each wait ends as soon as the
awaited event (a reply, a close) happens.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
import time
from collections.abc import Iterator

import pytest
from gateway_harness import (
    GatewayProcess,
    RecordingUpstream,
    exchange,
    read_all,
    request_bytes,
    running_gateway,
    status,
)

#: Largest growth of the gateway's peak RSS allowed while a 256 MiB body is refused. The body
#: is streamed in chunks of at most 256 KiB; 32 MiB leaves room for the interpreter's arenas.
RSS_GROWTH_BOUND = 32 * 2**20

MiB = 2**20


@pytest.fixture(scope="module")
def upstream() -> Iterator[RecordingUpstream]:
    server = RecordingUpstream()
    yield server
    server.close()


@pytest.fixture(scope="module")
def gateway(
    upstream: RecordingUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    home = tmp_path_factory.mktemp("gw-limits")
    args = ("--max-message-bytes", str(8 * MiB), "--body-timeout", "1")
    with running_gateway(upstream.address, *args, home=home) as process:
        yield process


def push(port: int, head: bytes, chunk: bytes, limit: int) -> tuple[bytes, int]:
    """Send ``head`` then ``chunk`` again and again (up to ``limit`` bytes) while reading.

    Returns the reply and how many body bytes were sent before the gateway stopped reading
    (closed or reset the connection), or ``limit`` if it never did.
    """
    sent = 0
    reply: list[bytes] = []
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        reader = threading.Thread(target=lambda: reply.append(read_all(sock)), daemon=True)
        reader.start()
        try:
            sock.sendall(head)
            while sent < limit:
                sock.sendall(chunk)
                sent += len(chunk)
        except OSError:
            pass  # the gateway closed: it stopped reading
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_WR)
        reader.join(timeout=60)
    return (reply[0] if reply else b""), sent


def test_a_256_mib_declared_body_is_refused_before_it_is_read(
    gateway: GatewayProcess, upstream: RecordingUpstream
) -> None:
    upstream.recorded.clear()
    _, peak_before = gateway.memory()
    for route in ("/v1/fleet/push-object", "/v1/fleet/send-node-heartbeat"):
        head = request_bytes("POST", route, close=False).replace(
            b"Content-Length: 0", f"Content-Length: {256 * MiB}".encode()
        )
        reply, sent = push(gateway.port, head, b"\0" * MiB, 256 * MiB)
        assert status(reply) == 413, reply[:300]
        assert b"256" in reply or b"268435456" in reply
        assert sent < 64 * MiB, sent  # it stopped reading at once (socket buffers aside)
    _, peak_after = gateway.memory()
    assert peak_after - peak_before < RSS_GROWTH_BOUND, (peak_before, peak_after)
    assert upstream.recorded.snapshot() == []


@pytest.mark.slow
def test_a_chunked_body_that_keeps_going_is_cut_at_the_cap(
    gateway: GatewayProcess, upstream: RecordingUpstream
) -> None:
    _, peak_before = gateway.memory()
    chunk = f"{MiB:x}\r\n".encode() + b"\1" * MiB + b"\r\n"
    for route, cap in (("/v1/fleet/push-object", 8 * MiB), ("/v1/fleet/get-run", 64 * 1024)):
        head = request_bytes("POST", route, chunked=True, close=False).removesuffix(b"0\r\n\r\n")
        reply, sent = push(gateway.port, head, chunk, 256 * MiB)
        # the 413 is written before the close; a reset may still beat it to the client
        assert status(reply) in (413, 0), reply[:300]
        assert sent < cap + 64 * MiB, sent  # cut near the cap, not at 256 MiB
    _, peak_after = gateway.memory()
    assert peak_after - peak_before < RSS_GROWTH_BOUND, (peak_before, peak_after)
    # the gateway still serves
    assert status(exchange(gateway.port, request_bytes("POST", "/v1/fleet/get-run"))) == 200


def test_a_chunked_body_over_the_cap_gets_413(
    gateway: GatewayProcess, upstream: RecordingUpstream
) -> None:
    data = request_bytes("POST", "/v1/fleet/get-run", b"x" * (64 * 1024 + 1), chunked=True)
    reply = exchange(gateway.port, data)
    assert status(reply) == 413 and b"more than 65536 bytes sent" in reply, reply[:300]


def test_a_stalled_body_gets_408(gateway: GatewayProcess) -> None:
    head = request_bytes("POST", "/v1/fleet/push-object").replace(
        b"Content-Length: 0", b"Content-Length: 1000"
    )
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=60) as sock:
        sock.sendall(head + b"x" * 10)  # then nothing
        reply = read_all(sock)
    assert status(reply) == 408 and b"stalled for 1 s" in reply, reply[:300]


def _recv(sock: socket.socket) -> bytes:
    try:
        return sock.recv(4096)
    except OSError:
        return b""


def _open_slow(port: int, count: int) -> list[socket.socket]:
    partial = b"POST /v1/fleet/get-run HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "
    socks = []
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        sock.setblocking(False)
        with contextlib.suppress(OSError):
            sock.send(partial)
        socks.append(sock)
    return socks


def _trickle_until_closed(socks: list[socket.socket], guard: float) -> tuple[int, float]:
    """Send a header byte to every open socket each half second until the gateway closes them.

    Returns how many are still open at the end and the seconds it took.
    """
    start = time.monotonic()
    open_socks = set(socks)
    while open_socks and time.monotonic() - start < guard:
        readable, _, _ = select.select(list(open_socks), [], [], 0.5)
        for sock in readable:
            try:
                data = sock.recv(4096)
            except OSError:
                data = b""
            if not data or b"HTTP/1.1" in data:
                open_socks.discard(sock)
        for sock in list(open_socks):
            try:
                sock.send(b"a")
            except BlockingIOError:
                pass
            except OSError:
                open_socks.discard(sock)
    return len(open_socks), time.monotonic() - start


@pytest.mark.slow
def test_1000_slowloris_connections_do_not_stop_a_real_request_and_are_closed_by_the_deadline(
    upstream: RecordingUpstream, tmp_path_factory: pytest.TempPathFactory
) -> None:
    home = tmp_path_factory.mktemp("gw-slow")
    args = ("--header-timeout", "3", "--max-connections", "1100")
    args += ("--max-connections-per-ip", "1100")  # all from 127.0.0.1: the deadline is tested
    with running_gateway(upstream.address, *args, home=home) as gateway:
        socks = _open_slow(gateway.port, 1000)
        try:
            upstream.recorded.clear()
            opened = time.monotonic()
            reply = exchange(gateway.port, request_bytes("POST", "/v1/fleet/get-run"))
            served_after = time.monotonic() - opened
            assert status(reply) == 200, reply[:300]
            assert upstream.recorded.snapshot() == [("POST", "/v1/fleet/get-run")]
            still_open, took = _trickle_until_closed(socks, guard=120)
            assert still_open == 0, f"{still_open} slow connections still open after {took} s"
            print(f"real request served in {served_after:.3f} s; 1000 closed in {took:.1f} s")
        finally:
            for sock in socks:
                sock.close()


@pytest.mark.slow
def test_past_the_connection_cap_new_connections_get_503_and_the_gateway_holds(
    upstream: RecordingUpstream, tmp_path_factory: pytest.TempPathFactory
) -> None:
    home = tmp_path_factory.mktemp("gw-cap")
    args = ("--header-timeout", "2", "--max-connections", "96")
    args += ("--max-connections-per-ip", "96")  # all from 127.0.0.1: the global cap is tested
    gateway = GatewayProcess(upstream.address, *args, home=home, nofile=256)
    try:
        gateway.wait_ready()
        # 300 connections, silent until the gateway has had its say (so that a refusal is
        # not lost to a reset of unread bytes); then the held ones send partial headers.
        socks = [socket.create_connection(("127.0.0.1", gateway.port)) for _ in range(300)]
        try:
            busy: set[socket.socket] = set()
            guard = time.monotonic() + 60
            while len(busy) < 300 - 96 and time.monotonic() < guard:
                readable, _, _ = select.select([s for s in socks if s not in busy], [], [], 0.5)
                busy.update(s for s in readable if b" 503 " in _recv(s))
            assert len(busy) == 300 - 96  # exactly the connections beyond the cap
            held = [s for s in socks if s not in busy]
            for sock in held:
                with contextlib.suppress(OSError):  # the deadline may have closed it already
                    sock.sendall(b"POST /v1/fleet/get-run HTTP/1.1\r\nHost: x\r\n")
                sock.setblocking(False)
            # a SuperNode retries like flwr's client does until it is served
            statuses: list[int] = []
            while not statuses or statuses[-1] != 200:
                statuses.append(
                    status(exchange(gateway.port, request_bytes("POST", "/v1/fleet/get-run")))
                )
                assert set(statuses) <= {200, 503} and len(statuses) < 200, statuses
                if statuses[-1] != 200:
                    time.sleep(0.2)
            still_open, _ = _trickle_until_closed(held, guard=60)
            assert still_open == 0
            assert gateway.proc.poll() is None
        finally:
            for sock in socks:
                sock.close()
    finally:
        gateway.stop()


@pytest.mark.slow  # the whole command starts (3-15 s with other work on the machine)
def test_too_few_file_descriptors_refuse_to_start_with_one_line(
    upstream: RecordingUpstream, tmp_path_factory: pytest.TempPathFactory
) -> None:
    gateway = GatewayProcess(upstream.address, home=tmp_path_factory.mktemp("gw-fd"), nofile=256)
    try:
        assert gateway.proc.wait(timeout=120) == 2
        output = gateway.output().strip()
        assert output.startswith("fa-hetdp fleet-gateway: error:") and "\n" not in output
        assert "1024 connections need 2112 file descriptors" in output, output
    finally:
        gateway.stop()
