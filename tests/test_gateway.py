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
from fa_hetdp.cli.gateway import GatewaySettings, create_gateway_app
from fa_hetdp.cli.main import main
from fa_hetdp.config.rules import ConfigError


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
        "/v1/fleet/pull-messages?x=1",
        b"payload",
        **{"x-flwr-signature": "sig", "proxy-authorization": "secret", "keep-alive": "timeout=99"},
    )
    assert reply.status_code == 201
    assert reply.headers["x-upstream"] == "superlink"
    echoed = reply.json()
    assert echoed["path"] == "/v1/fleet/pull-messages?x=1"
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
