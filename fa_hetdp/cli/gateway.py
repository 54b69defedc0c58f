"""``fa-hetdp fleet-gateway``: the SuperLink's Fleet API on a public address, nothing else.

flwr 1.42 serves the Fleet API (SuperNodes), the Control API (``flwr run``, ``flwr supernode
register``, ``flwr ls``, ...) and the Runtime API (its own ServerApp and SuperExec) on one
HTTP(S) port, and the open-source SuperLink has no authentication of Control-API users: whoever
reaches that port with the CA certificate may register a SuperNode key or submit an app that
runs on the data owners' nodes. So the SuperLink listens on the coordinator's loopback address
only (``flower-superlink --host 127.0.0.1``), where the coordinator runs ``flwr``, and this
gateway, on the public address, forwards to it the requests under ``/v1/fleet/`` (the paths a
SuperNode uses) and answers every other request with 403 (docs/deployment.md, step 2).

The gateway terminates TLS with the SuperLink's certificate and key, and connects to the
SuperLink over TLS, trusting ``--ssl-ca-certfile`` (the SuperLink's certificate must name
127.0.0.1). SuperNode authentication is unchanged: the SuperNode's signed headers are
forwarded as they are and checked by the SuperLink.
"""

from __future__ import annotations

import argparse
import contextlib
import ssl
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from starlette.applications import Starlette

__all__ = [
    "FLEET_PREFIX",
    "GatewaySettings",
    "add_arguments",
    "create_gateway_app",
    "run_command",
    "serve_gateway",
]

#: The only request paths forwarded: those of the Fleet API (flwr 1.42, ``/v1/fleet/...``).
FLEET_PREFIX = "/v1/fleet/"

#: Headers that belong to one connection and are not forwarded (RFC 9110, section 7.6.1).
_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)

REFUSED = (
    "fa-hetdp fleet gateway: only the Fleet API ({prefix}) is served on this address; "
    "the Control API is reachable from the coordinator's host only.\n"
)


@dataclass(frozen=True)
class GatewaySettings:
    """Where the gateway listens, where the SuperLink is, and the TLS files.

    Attributes
    ----------
    host, port
        The public address the SuperNodes connect to.
    superlink
        The SuperLink's ``host:port`` on the coordinator (its loopback address).
    ssl_certfile, ssl_keyfile
        The certificate and key the gateway presents (the SuperLink's, for the public host
        names); ``None`` with ``insecure``.
    ssl_ca_certfile
        The CA certificate that signed the SuperLink's certificate (to verify the upstream).
    insecure
        No TLS on either side (trials on one machine only).
    upstream_timeout
        Seconds to wait for the SuperLink's answer to one request.
    """

    host: str
    port: int
    superlink: str
    ssl_certfile: Path | None = None
    ssl_keyfile: Path | None = None
    ssl_ca_certfile: Path | None = None
    insecure: bool = False
    upstream_timeout: float = 300.0

    def check(self) -> None:
        """Refuse an incomplete TLS setup (one line, before anything listens).

        Raises
        ------
        ConfigError
            A TLS file missing without ``--insecure``, or a port outside 1..65535.
        """
        from fa_hetdp.config.rules import ConfigError

        problems: list[tuple[str, str]] = []
        if not 0 < self.port < 65536:
            problems.append(("--listen", f"port must be in 1..65535, got {self.port}"))
        if not self.insecure:
            for flag, path in (
                ("--ssl-certfile", self.ssl_certfile),
                ("--ssl-keyfile", self.ssl_keyfile),
                ("--ssl-ca-certfile", self.ssl_ca_certfile),
            ):
                if path is None or not path.is_file():
                    reason = f"a readable file is required without --insecure, got {path}"
                    problems.append((flag, reason))
        if problems:
            raise ConfigError("command line", problems)


def _forwarded(headers: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    return [(k, v) for k, v in headers if k.lower() not in _HOP_BY_HOP]


def create_gateway_app(settings: GatewaySettings) -> Starlette:
    """Return the gateway as an ASGI application (Starlette) for ``settings``."""
    import httpx
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import PlainTextResponse, Response
    from starlette.routing import Route

    scheme = "http" if settings.insecure else "https"
    verify: ssl.SSLContext | bool = False
    if not settings.insecure:
        verify = ssl.create_default_context(cafile=str(settings.ssl_ca_certfile))
    client = httpx.AsyncClient(
        base_url=f"{scheme}://{settings.superlink}",
        verify=verify,
        timeout=httpx.Timeout(settings.upstream_timeout, connect=10.0),
    )

    async def forward(request: Request) -> Response:
        if not request.url.path.startswith(FLEET_PREFIX):
            return PlainTextResponse(REFUSED.format(prefix=FLEET_PREFIX), status_code=403)
        upstream = client.build_request(
            request.method,
            request.url.path,
            params=request.url.query or None,
            headers=_forwarded(request.headers.items()),
            content=await request.body(),
        )
        try:
            reply = await client.send(upstream, stream=True)
        except httpx.TransportError as exc:
            return PlainTextResponse(f"SuperLink unreachable: {exc}\n", status_code=502)
        try:
            body = b"".join([chunk async for chunk in reply.aiter_raw()])
        finally:
            await reply.aclose()
        headers = dict(_forwarded(reply.headers.items()))
        return Response(body, status_code=reply.status_code, headers=headers)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await client.aclose()

    methods = ["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"]
    return Starlette(routes=[Route("/{path:path}", forward, methods=methods)], lifespan=lifespan)


def serve_gateway(settings: GatewaySettings) -> None:
    """Serve the gateway until interrupted (uvicorn, one worker)."""
    import uvicorn

    settings.check()
    config = uvicorn.Config(
        create_gateway_app(settings),
        host=settings.host,
        port=settings.port,
        ssl_certfile=None if settings.insecure else str(settings.ssl_certfile),
        ssl_keyfile=None if settings.insecure else str(settings.ssl_keyfile),
        log_level="warning",
    )
    print(
        f"fa-hetdp fleet-gateway: Fleet API on {settings.host}:{settings.port} -> "
        f"{settings.superlink} (every other path refused)",
        flush=True,
    )
    uvicorn.Server(config).run()


def _address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host.strip("[]"), int(port)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``fa-hetdp fleet-gateway --listen HOST:PORT --superlink HOST:PORT ...``."""
    parser.add_argument(
        "--listen",
        type=_address,
        required=True,
        help="public HOST:PORT the SuperNodes connect to (e.g. 0.0.0.0:9092)",
    )
    parser.add_argument(
        "--superlink",
        default="127.0.0.1:9093",
        help="the SuperLink's loopback HOST:PORT (flower-superlink --host 127.0.0.1 "
        "--port 9093; default: 127.0.0.1:9093)",
    )
    parser.add_argument("--ssl-certfile", type=Path, help="certificate presented to SuperNodes")
    parser.add_argument("--ssl-keyfile", type=Path, help="its private key")
    parser.add_argument(
        "--ssl-ca-certfile", type=Path, help="CA certificate that verifies the SuperLink's"
    )
    parser.add_argument(
        "--insecure",
        action="store_true",
        help="no TLS on either side (trials on one machine only; default: TLS)",
    )
    parser.add_argument(
        "--upstream-timeout",
        type=float,
        default=300.0,
        help="seconds to wait for the SuperLink's answer to one request (default: 300)",
    )


def run_command(args: argparse.Namespace) -> int:
    """Run ``fa-hetdp fleet-gateway``; returns 0 when interrupted after serving."""
    host, port = args.listen
    settings = GatewaySettings(
        host=host,
        port=port,
        superlink=str(args.superlink),
        ssl_certfile=args.ssl_certfile,
        ssl_keyfile=args.ssl_keyfile,
        ssl_ca_certfile=args.ssl_ca_certfile,
        insecure=bool(args.insecure),
        upstream_timeout=float(args.upstream_timeout),
    )
    serve_gateway(settings)
    return 0
