"""The fleet gateway against hostile request targets, sent byte for byte on raw sockets.

A real ``fa-hetdp fleet-gateway`` process listens on 127.0.0.1 in front of a recording
upstream (``gateway_harness.RecordingUpstream``, which notes every request target it sees).
Nothing outside the Fleet API's exact routes may reach the upstream, whatever the spelling
(dot segments raw or percent-encoded, double encoding, backslashes, ``;`` parameters, doubled
slashes, queries, absolute-form, overlong), over HTTP/1.1, HTTP/1.0, with chunked bodies, and
over TLS; every allowlisted route does reach it, with its exact path.
"""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from gateway_harness import (
    FORWARDING,
    HOSTILE_TARGETS,
    NEAR_MISSES,
    ROUTES,
    GatewayProcess,
    RecordingUpstream,
    Tls,
    body,
    exchange,
    make_tls,
    read_all,
    request_bytes,
    running_gateway,
    status,
)


@pytest.fixture(scope="module")
def upstream() -> Iterator[RecordingUpstream]:
    server = RecordingUpstream()
    yield server
    server.close()


@pytest.fixture(scope="module")
def gateway(
    upstream: RecordingUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    with running_gateway(upstream.address, home=tmp_path_factory.mktemp("gw")) as process:
        yield process


@pytest.fixture
def recorded(upstream: RecordingUpstream) -> RecordingUpstream:
    upstream.recorded.clear()
    return upstream


@pytest.mark.parametrize("target", HOSTILE_TARGETS)
def test_a_hostile_target_is_refused_with_400_and_never_reaches_the_superlink(
    gateway: GatewayProcess, recorded: RecordingUpstream, target: str
) -> None:
    reply = exchange(gateway.port, request_bytes("POST", target, b"\x08\x01"))
    assert status(reply) == 400, reply[:300]
    assert recorded.recorded.snapshot() == []


@pytest.mark.parametrize("target", NEAR_MISSES)
def test_a_path_under_the_fleet_prefix_that_is_no_route_is_refused_with_403(
    gateway: GatewayProcess, recorded: RecordingUpstream, target: str
) -> None:
    reply = exchange(gateway.port, request_bytes("POST", target, b"\x08\x01"))
    assert status(reply) == 403, reply[:300]
    assert b"only the Fleet API" in body(reply)
    assert recorded.recorded.snapshot() == []


@pytest.mark.parametrize(
    "target",
    ["/v1/fleet/../control/list-runs", "/v1/fleet/%2e%2e/control/list-runs", "//v1/fleet/get-run"],
)
@pytest.mark.parametrize("variant", ["HTTP/1.0", "chunked"])
def test_hostile_targets_are_refused_over_http_1_0_and_with_chunked_bodies(
    gateway: GatewayProcess, recorded: RecordingUpstream, target: str, variant: str
) -> None:
    if variant == "HTTP/1.0":
        data = request_bytes("POST", target, b"x", version="HTTP/1.0", close=False)
    else:
        data = request_bytes("POST", target, b"x" * 100, chunked=True)
    assert status(exchange(gateway.port, data)) == 400
    assert recorded.recorded.snapshot() == []


@pytest.mark.parametrize(
    ("method", "target"),
    [
        ("CONNECT", "127.0.0.1:9093"),
        ("OPTIONS", "*"),
        ("GET", "http://127.0.0.1/v1/control/list-runs"),
    ],
)
def test_non_origin_form_targets_are_refused(
    gateway: GatewayProcess, recorded: RecordingUpstream, method: str, target: str
) -> None:
    reply = exchange(gateway.port, request_bytes(method, target))
    assert status(reply) == 400, reply[:300]
    assert recorded.recorded.snapshot() == []


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"])
def test_only_the_routes_method_is_forwarded(
    gateway: GatewayProcess, recorded: RecordingUpstream, method: str
) -> None:
    reply = exchange(gateway.port, request_bytes(method, "/v1/fleet/get-run"))
    assert status(reply) == 405, reply[:300]
    assert recorded.recorded.snapshot() == []


def test_a_pipelined_hostile_request_after_a_good_one_does_not_reach_the_superlink(
    gateway: GatewayProcess, recorded: RecordingUpstream
) -> None:
    good = request_bytes("POST", "/v1/fleet/get-run", b"\x08\x01", close=False)
    bad = request_bytes("POST", "/v1/fleet/%2e%2e/control/list-runs", b"\x08\x01")
    reply = exchange(gateway.port, good + bad)
    assert reply.count(b"HTTP/1.1 ") == 2 and b" 400 " in reply, reply[:600]
    assert recorded.recorded.snapshot() == [("POST", "/v1/fleet/get-run")]


@pytest.mark.parametrize("route", ROUTES)
def test_every_allowlisted_route_reaches_the_superlink_with_its_exact_path(
    gateway: GatewayProcess, recorded: RecordingUpstream, route: str
) -> None:
    reply = exchange(gateway.port, request_bytes("POST", route, b"\x08\x01\x10\x02"))
    assert status(reply) == 200, reply[:300]
    assert body(reply) == f"upstream saw POST {route} (4 bytes)".encode()
    assert recorded.recorded.snapshot() == [("POST", route)]


@pytest.mark.parametrize("variant", ["HTTP/1.0", "chunked"])
def test_an_allowlisted_route_works_over_http_1_0_and_chunked(
    gateway: GatewayProcess, recorded: RecordingUpstream, variant: str
) -> None:
    if variant == "HTTP/1.0":
        data = request_bytes("POST", "/v1/fleet/pull-messages", b"abc", version="HTTP/1.0")
    else:
        data = request_bytes("POST", "/v1/fleet/push-object", b"z" * 70000, chunked=True)
    reply = exchange(gateway.port, data)
    assert status(reply) == 200, reply[:300]
    size = 3 if variant == "HTTP/1.0" else 70000
    assert recorded.recorded.body_bytes == [size]


# --- TLS ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Tls:
    return make_tls(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def tls_upstream(tls: Tls) -> Iterator[RecordingUpstream]:
    server = RecordingUpstream(tls=tls.server_context())
    yield server
    server.close()


@pytest.fixture(scope="module")
def tls_gateway(
    tls_upstream: RecordingUpstream, tls: Tls, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    home = tmp_path_factory.mktemp("gw-tls")
    with running_gateway(
        tls_upstream.address, "--header-timeout", "2", tls=tls, home=home
    ) as process:
        yield process


_CLIENT_HELLO_HEAD = bytes.fromhex("16030100c8010000c40303") + bytes(32)


@pytest.mark.parametrize(
    "garbage",
    [
        request_bytes("POST", "/v1/fleet/../control/list-runs"),  # plain HTTP on the TLS port
        request_bytes("POST", "/v1/fleet/get-run"),
        _CLIENT_HELLO_HEAD,  # a ClientHello cut short
        bytes.fromhex("8080010301005700000020"),  # an SSLv2-style hello
        b"\x16\x03\x01\xff\xff" + b"\x00" * 2000,  # a record of nonsense
        b"\x00" * 64,
    ],
    ids=["plain-hostile", "plain-route", "short-hello", "sslv2", "nonsense", "zeros"],
)
def test_invalid_tls_handshakes_reach_nothing(
    tls_gateway: GatewayProcess, tls_upstream: RecordingUpstream, tls: Tls, garbage: bytes
) -> None:
    tls_upstream.recorded.clear()
    with socket.create_connection(("127.0.0.1", tls_gateway.port), timeout=60) as sock:
        sock.sendall(garbage)
        if garbage is _CLIENT_HELLO_HEAD:
            sock.shutdown(socket.SHUT_WR)
        reply = read_all(sock)
    assert b"HTTP/1" not in reply and b"upstream saw" not in reply
    assert tls_upstream.recorded.snapshot() == []
    # the gateway still serves a proper TLS request afterwards
    good = exchange(
        tls_gateway.port, request_bytes("POST", "/v1/fleet/get-run"), tls=tls.client_context()
    )
    assert status(good) == 200 and tls_upstream.recorded.snapshot() == [
        ("POST", "/v1/fleet/get-run")
    ]


def _tls_request_with_finished(port: int, context: ssl.SSLContext, request: bytes) -> bytes:
    """Send the client's TLS Finished message and ``request`` in one write; return the reply.

    The gateway then receives the request in the same read that completes the handshake.
    """
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname="127.0.0.1")
    reply = bytearray()
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        while True:
            try:
                tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                sock.sendall(outgoing.read())
                incoming.write(sock.recv(65536))
        tls.write(request)
        sock.sendall(outgoing.read())  # Finished + request together
        while data := sock.recv(65536):
            incoming.write(data)
            try:
                while chunk := tls.read(65536):
                    reply += chunk
            except ssl.SSLWantReadError:
                continue
            break  # read() gave b"": the gateway's close_notify, the reply is complete
    return bytes(reply)


def test_a_request_that_arrives_with_the_tls_finished_message_is_served(
    tls_gateway: GatewayProcess, tls_upstream: RecordingUpstream, tls: Tls
) -> None:
    tls_upstream.recorded.clear()
    for _ in range(5):
        reply = _tls_request_with_finished(
            tls_gateway.port, tls.client_context(), request_bytes("POST", "/v1/fleet/get-run")
        )
        assert status(reply) == 200, reply[:300]
    assert tls_upstream.recorded.snapshot() == [("POST", "/v1/fleet/get-run")] * 5


@pytest.mark.parametrize("opening", [b"", _CLIENT_HELLO_HEAD], ids=["silent", "half-hello"])
def test_a_stalled_tls_handshake_is_closed_by_the_header_deadline(
    tls_gateway: GatewayProcess, opening: bytes
) -> None:
    """The fixture's deadline is 2 s (asyncio's own handshake time-out would be 60 s)."""
    with socket.create_connection(("127.0.0.1", tls_gateway.port), timeout=50) as sock:
        sock.sendall(opening)
        started = time.monotonic()
        assert read_all(sock) == b""  # closed by the gateway (a hang fails on the timeout)
    assert time.monotonic() - started < 50


def test_hostile_targets_over_tls_are_refused_and_routes_forwarded(
    tls_gateway: GatewayProcess, tls_upstream: RecordingUpstream, tls: Tls
) -> None:
    tls_upstream.recorded.clear()
    client = tls.client_context()
    for target in HOSTILE_TARGETS:
        reply = exchange(tls_gateway.port, request_bytes("POST", target), tls=client)
        assert status(reply) == 400, (target, reply[:300])
    assert tls_upstream.recorded.snapshot() == []
    reply = exchange(tls_gateway.port, request_bytes("POST", "/v1/fleet/pull-object"), tls=client)
    assert status(reply) == 200
    assert tls_upstream.recorded.snapshot() == [("POST", "/v1/fleet/pull-object")]


def test_the_harness_sends_targets_unnormalised(tmp_path: Path) -> None:
    """The corpus really goes out as written (a guard on the harness, not the gateway)."""
    upstream = RecordingUpstream()
    try:
        for target in ("/v1/fleet/%2e%2e/control/list-runs", "/v1/fleet/../x", "//a;b"):
            exchange(upstream.port, request_bytes("POST", target))
        assert [t for _, t in upstream.recorded.snapshot()] == [
            "/v1/fleet/%2e%2e/control/list-runs",
            "/v1/fleet/../x",
            "//a;b",
        ]
    finally:
        upstream.close()


@pytest.mark.parametrize("route", ["/v1/fleet/get-run", "/v1/fleet/push-object"])
@pytest.mark.parametrize("variant", ["HTTP/1.1", "chunked"])
def test_client_supplied_forwarding_headers_never_reach_the_superlink(
    gateway: GatewayProcess, recorded: RecordingUpstream, route: str, variant: str
) -> None:
    """The SuperLink's uvicorn trusts X-Forwarded-* from 127.0.0.1, where the gateway is."""
    headers = [*FORWARDING, ("X-Flwr-Signature", "sig")]
    data = request_bytes("POST", route, b"\x08\x01", headers=headers, chunked=variant == "chunked")
    assert status(exchange(gateway.port, data)) == 200
    [seen] = recorded.recorded.header_snapshot()
    names = {name for name, _ in seen}
    assert not names & {name.lower() for name, _ in FORWARDING}, seen
    assert not any("6.6.6.6" in value for _, value in seen), seen
    assert ("x-flwr-signature", "sig") in seen  # a SuperNode's own headers pass unchanged
