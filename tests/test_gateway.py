"""`fa-hetdp fleet-gateway`: Fleet paths forwarded as they are, everything else refused.

The upstream here is a small HTTP server on 127.0.0.1 that echoes what it received; the
real SuperLink behind the gateway is in ``test_deployment_operator.py`` (slow).
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from fa_hetdp.cli.cluster import free_port
from fa_hetdp.cli.gateway import BodyPace, GatewaySettings, create_gateway_app
from fa_hetdp.cli.gateway_filter import Refusal, screen
from fa_hetdp.cli.gateway_protocol import client_key, ensure_file_descriptors
from fa_hetdp.cli.gateway_routes import (
    DEFAULT_MAX_MESSAGE_BYTES,
    FLEET_ROUTES,
    FleetRoute,
    check_installed_routes,
    installed_fleet_routes,
)
from fa_hetdp.cli.main import main
from fa_hetdp.config.rules import ConfigError
from fa_hetdp.server.app import MAX_REPLY_BYTES


class Echo(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        reply = json.dumps(
            {"path": self.path, "body": body.decode(), "headers": dict(self.headers.items())}
        ).encode()
        self.send_response(201)
        self.send_header("content-type", "application/json")
        self.send_header("x-upstream", "superlink")
        self.send_header("content-length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def upstream() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def post(superlink: str, path: str, content: bytes, **headers: str) -> httpx.Response:
    """POST ``path`` to a gateway in front of ``superlink`` (the app called in process)."""
    settings = GatewaySettings(host="127.0.0.1", port=1, superlink=superlink, insecure=True)
    transport = httpx.ASGITransport(app=create_gateway_app(settings))

    async def call() -> httpx.Response:
        async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
            return await client.post(path, content=content, headers=headers)

    return asyncio.run(call())


def test_fleet_requests_are_forwarded_as_they_are(upstream: str) -> None:
    reply = post(
        upstream,
        "/v1/fleet/pull-messages",
        b"payload",
        **{"x-flwr-signature": "sig", "proxy-authorization": "secret", "keep-alive": "timeout=99"},
    )
    assert reply.status_code == 201
    assert reply.headers["x-upstream"] == "superlink"
    echoed = reply.json()
    assert echoed["path"] == "/v1/fleet/pull-messages"
    assert echoed["body"] == "payload"
    headers = {k.lower(): v for k, v in echoed["headers"].items()}
    assert headers["x-flwr-signature"] == "sig"  # SuperNode auth headers pass unchanged
    assert "proxy-authorization" not in headers and "keep-alive" not in headers  # hop-by-hop


@pytest.mark.parametrize(
    "path", ["/v1/control/start-run", "/v1/runtime/pull-messages", "/docs", "/v1/fleetx", "/"]
)
def test_every_other_path_is_refused_without_reaching_the_superlink(
    upstream: str, path: str
) -> None:
    reply = post(upstream, path, b"{}")
    assert reply.status_code == 403
    assert "only the Fleet API" in reply.text and "superlink" not in reply.headers.values()


def test_an_unreachable_superlink_is_a_502() -> None:
    reply = post(f"127.0.0.1:{free_port()}", "/v1/fleet/get-run", b"")
    assert reply.status_code == 502 and "SuperLink unreachable" in reply.text


def test_tls_files_are_required_without_insecure(tmp_path: Path) -> None:
    settings = GatewaySettings(host="0.0.0.0", port=9092, superlink="127.0.0.1:9093")
    with pytest.raises(ConfigError, match="--ssl-certfile"):
        settings.check()
    GatewaySettings(host="0.0.0.0", port=9092, superlink="x:1", insecure=True).check()


def test_the_command_refuses_a_bad_setup_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "missing.pem"
    code = main(["fleet-gateway", "--listen", "127.0.0.1:9092", "--ssl-certfile", str(missing)])
    assert code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("fa-hetdp fleet-gateway: error:"), err


# --- the filter, the allowlist, the start-up checks --------------------------------------


@pytest.mark.parametrize(
    ("target", "query", "expected"),
    [
        (b"/v1/fleet/get-run", b"", "/v1/fleet/get-run"),
        (b"/v1/fleet/push-object", b"", "/v1/fleet/push-object"),
        (b"/v1/fleet/%2e%2e/control/list-runs", b"", 400),
        (b"/v1/fleet/%2E%2E/control/list-runs", b"", 400),
        (b"/v1/fleet/%252e%252e/control/list-runs", b"", 400),
        (b"/v1/fleet/..%2fcontrol", b"", 400),
        (b"/v1/fleet/..%5Ccontrol", b"", 400),
        (b"/v1/fleet/../control/list-runs", b"", 400),
        (b"/v1/fleet/./get-run", b"", 400),
        (b"/v1/fleet\\..\\control", b"", 400),
        (b"/v1/fleet/get-run;a=b", b"", 400),
        (b"/v1/fleet//get-run", b"", 400),
        (b"/v1/fleet/get-run", b"x=1", 400),
        (b"http://127.0.0.1/v1/fleet/get-run", b"", 400),
        (b"*", b"", 400),
        (b"/v1/fleet/" + b"a" * 200, b"", 400),
        (b"/v1/fleet/get-run/", b"", 403),
        (b"/v1/control/list-runs", b"", 403),
    ],
)
def test_the_filter_judges_the_raw_target(target: bytes, query: bytes, expected: str | int) -> None:
    verdict = screen("POST", target, query)
    if isinstance(expected, str):
        assert isinstance(verdict, FleetRoute) and verdict.path == expected
    else:
        assert isinstance(verdict, Refusal) and verdict.status == expected
        assert "\n" not in verdict.reason


def test_the_filter_allows_only_the_routes_method() -> None:
    verdict = screen("GET", b"/v1/fleet/get-run")
    assert isinstance(verdict, Refusal) and verdict.status == 405
    assert verdict.reason == "/v1/fleet/get-run accepts POST only, got GET"


def test_the_shipped_allowlist_is_the_installed_flwrs_fleet_api() -> None:
    installed = installed_fleet_routes()
    assert installed == {(route.method, route.path) for route in FLEET_ROUTES}
    assert len(installed) == 12  # flwr 1.42: flwr/superlink/routers/fleet/router.py
    check_installed_routes()


def test_a_different_flwr_stops_the_gateway_with_what_differs() -> None:
    installed = {(r.method, r.path) for r in FLEET_ROUTES} - {("POST", "/v1/fleet/get-fab")}
    installed |= {("POST", "/v1/fleet/new-thing")}
    with pytest.raises(ConfigError) as caught:
        check_installed_routes(installed)
    message = str(caught.value)
    assert "flwr serves POST /v1/fleet/new-thing, missing from the allowlist" in message
    assert "allowlist has POST /v1/fleet/get-fab, which flwr does not serve" in message


def test_body_caps_per_route() -> None:
    caps = {route.path: route.body_cap() for route in FLEET_ROUTES}
    assert caps["/v1/fleet/push-object"] == DEFAULT_MAX_MESSAGE_BYTES == 64 * 2**20
    assert caps["/v1/fleet/push-messages"] == 2**20
    assert caps["/v1/fleet/send-node-heartbeat"] == 64 * 2**10
    # the default holds a masked stage vector (2d + 1 words of 8 bytes) for d = 4 million
    assert 8 * (2 * 4_000_000 + 1) < DEFAULT_MAX_MESSAGE_BYTES <= MAX_REPLY_BYTES


def test_a_declared_body_over_the_cap_is_refused_before_it_is_read(upstream: str) -> None:
    reply = post(upstream, "/v1/fleet/get-run", b"x" * (64 * 1024 + 1))
    assert reply.status_code == 413
    assert "the cap is 65536" in reply.text


def test_too_few_file_descriptors_for_the_connection_cap_refuse_to_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import resource

    monkeypatch.setattr(resource, "getrlimit", lambda _: (256, 256))
    with pytest.raises(ConfigError, match=r"1024 connections need 2112 file descriptors"):
        ensure_file_descriptors(1024)
    ensure_file_descriptors(96)  # 2 * 96 + 64 = 256 fits


def test_limits_must_be_positive() -> None:
    settings = GatewaySettings(
        host="127.0.0.1", port=9092, superlink="x:1", insecure=True, max_connections=0
    )
    with pytest.raises(ConfigError, match="--max-connections: must be an integer >= 1, got 0"):
        settings.check()


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("max_connections_per_ip", 0, "--max-connections-per-ip: must be in 1..1024"),
        ("max_connections_per_ip", 1025, "--max-connections-per-ip: must be in 1..1024"),
        ("min_body_rate", 0, "--min-body-rate: must be in 1..1073741824 bytes per second"),
        ("min_body_rate", 2**31, "--min-body-rate: must be in 1..1073741824 bytes per second"),
        ("body_grace", 0.0, r"--body-grace: must be in \(0, 86400\] seconds, got 0.0"),
        ("body_timeout", float("nan"), r"--body-timeout: must be in \(0, 86400\] seconds"),
        ("send_timeout", float("inf"), r"--send-timeout: must be in \(0, 86400\] seconds"),
        ("header_timeout", -1.0, r"--header-timeout: must be in \(0, 86400\] seconds"),
    ],
)
def test_each_limit_is_refused_outside_its_range_naming_the_flag(
    field: str, value: float, message: str
) -> None:
    settings = GatewaySettings(
        host="127.0.0.1", port=9092, superlink="x:1", insecure=True, **{field: value}
    )
    with pytest.raises(ConfigError, match=message):
        settings.check()


def test_a_bad_limit_on_the_command_line_stops_before_anything_listens(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["fleet-gateway", "--listen", "127.0.0.1:9092", "--insecure"]
    code = main([*argv, "--min-body-rate", "0", "--max-connections-per-ip", "5000"])
    assert code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("fa-hetdp fleet-gateway: error:"), err
    assert "--min-body-rate" in err and "--max-connections-per-ip" in err, err


def test_the_defaults_are_valid_and_refuse_a_trickle() -> None:
    settings = GatewaySettings(host="0.0.0.0", port=9092, superlink="x:1", insecure=True)
    settings.check()
    assert settings.body_timeout < 20  # the trickle: a byte every 20 s
    assert settings.max_connections_per_ip < settings.max_connections


def test_the_body_pace_is_not_renewed_by_a_trickle() -> None:
    pace = BodyPace(min_rate=1024, grace=10.0, pause=10.0)
    # a byte every 9 s (under the pause) buys 1/1024 s per byte, not a new time-out
    now, received = 0.0, 0
    while True:
        wait, by_rate = pace.wait(0.0, received, now)
        if wait < 9:
            break
        now += 9
        received += 1
    assert by_rate and now < 10 + 9, now  # cut within one byte interval of the grace
    # a body at the rate is never behind; a 64 KiB body may take 10 + 64 s at most
    assert pace.deadline(0.0, 65536) == pytest.approx(74.0)
    short = BodyPace(min_rate=1024, grace=10.0, pause=5.0)
    assert short.wait(0.0, 0, 0.0) == (5.0, False)  # the pause limit comes first
    assert short.wait(0.0, 0, 7.0) == (3.0, True)  # then the rate's deadline


@pytest.mark.parametrize(
    ("peer", "key"),
    [
        (("203.0.113.7", 5000), "203.0.113.7"),
        (("::ffff:203.0.113.7", 5000, 0, 0), "203.0.113.7"),
        (("2001:db8:1:2:3:4:5:6", 5000, 0, 0), "2001:db8:1:2::/64"),
        (("2001:db8:1:2:ffff::1", 5000, 0, 0), "2001:db8:1:2::/64"),
        (("fe80::1%eth0", 5000, 0, 2), "fe80::/64"),
        (None, "?"),
        ("/run/socket", "?"),
    ],
)
def test_the_per_address_cap_counts_an_ipv6_host_by_its_64(peer: object, key: str) -> None:
    assert client_key(peer) == key


def test_forwarding_headers_are_dropped_whatever_their_case(upstream: str) -> None:
    reply = post(
        upstream,
        "/v1/fleet/get-run",
        b"",
        **{"X-Forwarded-For": "6.6.6.6", "x-forwarded-anything": "1", "FORWARDED": "for=x"},
    )
    headers = {k.lower() for k in reply.json()["headers"]}
    assert not {h for h in headers if "forward" in h}, headers


def test_a_request_without_a_raw_target_is_refused(upstream: str) -> None:
    """The filter never falls back to the decoded path (an ASGI server without raw_path)."""
    settings = GatewaySettings(host="127.0.0.1", port=1, superlink=upstream, insecure=True)
    app = create_gateway_app(settings)
    sent: list[dict[str, object]] = []
    scope = {"type": "http", "method": "POST", "path": "/v1/fleet/get-run", "headers": []}

    async def receive() -> dict[str, object]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, object]) -> None:
        sent.append(message)

    asyncio.run(app(scope, receive, send))  # type: ignore[arg-type]
    assert sent[0]["status"] == 400
    assert b"no raw request target" in sent[1]["body"]  # type: ignore[operator]
