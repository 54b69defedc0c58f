"""The fleet gateway against slow clients: trickled bodies and headers, one address's flood.

Issue 28: a request body sent one byte every 20 s kept a connection open forever (the body
time-out was per pause, so every byte renewed it), and 50 such connections locked real
SuperNodes out of a gateway whose cap they filled. Here a real ``fa-hetdp fleet-gateway``
process runs with its limits set small (a rate of 200 bytes/s after a 1 s grace, a 2 s pause
limit, 4 connections per address), so that a trickle faster than the pause limit is cut by the
rate rule, and one address's slow connections beyond its cap are refused while another
address is served. Time-outs are guards against a hang, not measurements: each wait ends as
soon as the awaited event (a reply, a close) happens.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest
from gateway_harness import (
    GatewayProcess,
    RecordingUpstream,
    Trickle,
    exchange,
    read_all,
    request_bytes,
    running_gateway,
    slow_head,
    status,
)

#: The test gateway's limits (the defaults are 1024 bytes/s, 10 s, 10 s, 32).
RATE, GRACE, PAUSE, PER_ADDRESS, CONNECTIONS = 200, 1.0, 2.0, 4, 16
#: A SuperNode-like request: a small protobuf body on a Fleet route.
SUPERNODE = request_bytes("POST", "/v1/fleet/pull-messages", b"\x08\x01\x10\x02")


@pytest.fixture(scope="module")
def upstream() -> Iterator[RecordingUpstream]:
    server = RecordingUpstream()
    yield server
    server.close()


@pytest.fixture(scope="module")
def gateway(
    upstream: RecordingUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    args = (
        ("--min-body-rate", str(RATE)),
        ("--body-grace", str(GRACE)),
        ("--body-timeout", str(PAUSE)),
        ("--max-connections-per-ip", str(PER_ADDRESS)),
        ("--max-connections", str(CONNECTIONS)),
        ("--header-timeout", "1"),
        ("--send-timeout", "1"),
    )
    flags = [part for pair in args for part in pair]
    home = tmp_path_factory.mktemp("gw-slow-clients")
    with running_gateway(upstream.address, *flags, home=home) as process:
        yield process


@pytest.mark.parametrize("route", ["/v1/fleet/push-object", "/v1/fleet/get-run"])
def test_a_body_trickled_faster_than_the_pause_limit_is_cut_with_408(
    gateway: GatewayProcess, upstream: RecordingUpstream, route: str
) -> None:
    """A byte every 0.5 s never pauses 2 s; the rate rule cuts it soon after the 1 s grace."""
    upstream.recorded.clear()
    trickle = Trickle(gateway.port, slow_head(route, 10_000), count=1, interval=0.5)
    try:
        assert trickle.wait_closed(guard=60) == 0, "the trickle was never cut"
        assert trickle.statuses() == [408], trickle.replies
        assert b"request body too slow" in trickle.replies[0]
        # cut by the rate (grace + a few bytes' worth), not after the 10 000 bytes it announced
        assert trickle.closed_after[0] < 30
    finally:
        trickle.stop()
    # a short body goes whole or not at all: the SuperLink never saw the get-run
    if route == "/v1/fleet/get-run":
        assert upstream.recorded.snapshot() == []


def test_a_stalled_body_is_still_cut_by_the_pause_limit(gateway: GatewayProcess) -> None:
    head = slow_head("/v1/fleet/push-object", 100_000)
    body = b"y" * 10_000  # enough to be well ahead of the rate: only the pause can end it
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=60) as sock:
        sock.sendall(head + body)  # then nothing
        reply = read_all(sock)
    assert status(reply) == 408 and b"stalled for 2 s" in reply, reply[:300]


def test_a_trickled_header_block_is_cut_by_its_total_deadline(gateway: GatewayProcess) -> None:
    """A header byte every 0.2 s does not extend the 1 s header deadline."""
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=60) as sock:
        sock.sendall(b"POST /v1/fleet/get-run HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        started = time.monotonic()
        closed = False
        while time.monotonic() - started < 30:
            try:
                sock.sendall(b"a")
            except OSError:
                closed = True
                break
            sock.settimeout(0.2)
            try:
                if sock.recv(4096) == b"":
                    closed = True
                    break
            except TimeoutError:
                continue
            except OSError:
                closed = True
                break
        assert closed, "a trickled header was held past 30 s"
        assert time.monotonic() - started < 30


def test_slow_bodies_from_one_address_do_not_lock_out_another(
    gateway: GatewayProcess, upstream: RecordingUpstream
) -> None:
    """As many slow bodies as the whole connection cap, from 127.0.0.1, against 127.0.0.2.

    The first four (the per-address cap) are held until the rate rule cuts them; the rest
    are answered 429 at once; a SuperNode on another address is served during the attack.
    """
    upstream.recorded.clear()
    head = slow_head("/v1/fleet/push-object", 1_000_000)
    trickle = Trickle(gateway.port, head, count=CONNECTIONS, interval=0.5)
    try:
        time.sleep(0.3)  # the refused ones have had their answer
        held = trickle.open_count()
        assert held <= PER_ADDRESS, f"{held} slow connections held from one address"
        started = time.monotonic()
        reply = exchange(gateway.port, SUPERNODE, source="127.0.0.2", timeout=30)
        latency = time.monotonic() - started
        assert status(reply) == 200, reply[:300]
        assert latency < 10, latency
        # the attacker's own address is at its cap while its slow bodies are open
        if trickle.open_count() == PER_ADDRESS:
            refused = exchange(gateway.port, SUPERNODE, source="127.0.0.1", timeout=30)
            assert status(refused) in (0, 429), refused[:300]
        assert trickle.wait_closed(guard=60) == 0
        statuses = trickle.statuses()
        assert statuses.count(429) >= CONNECTIONS - PER_ADDRESS, statuses
        assert set(statuses) <= {408, 429}, statuses
    finally:
        trickle.stop()
    # once they are cut, the address is served again
    assert status(exchange(gateway.port, SUPERNODE, source="127.0.0.1")) == 200


def _pending(sock: socket.socket) -> bool:
    """Whether bytes wait in ``sock``'s receive queue (peeked, not read: no window opens)."""
    try:
        return bool(sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT))
    except BlockingIOError:
        return False


def test_a_reply_left_unread_closes_the_connection_after_the_send_timeout(
    gateway: GatewayProcess,
) -> None:
    """A client that asks for 32 MiB and reads nothing: its write buffer stays full 1 s.

    The client reads nothing until the gateway has let go of the connection (its process
    holds no socket of it): on a loaded machine the reply may start late, so a fixed pause
    could end before the gateway's timer and the reading would let the whole reply through.
    """
    size = 32 * 2**20
    data = request_bytes("POST", "/v1/fleet/pull-object", headers=[("X-Reply-Bytes", str(size))])
    raw = socket.socket()
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    with raw:
        raw.settimeout(60)
        raw.connect(("127.0.0.1", gateway.port))
        raw.sendall(data)
        port = raw.getsockname()[1]
        guard = time.monotonic() + 120  # against a hang only: each wait ends at its event
        while not _pending(raw) and time.monotonic() < guard:
            time.sleep(0.05)  # the reply has started
        while gateway.holds(port) and time.monotonic() < guard:
            time.sleep(0.05)  # the gateway's send time-out closes it
        got = len(read_all(raw))
    assert got < size, f"{got} bytes: the whole reply waited for a client that did not read"
    # the gateway still serves
    assert status(exchange(gateway.port, SUPERNODE)) == 200
