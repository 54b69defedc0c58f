"""``fa-hetdp fleet-gateway``: the SuperLink's Fleet API on a public address, nothing else.

flwr 1.42 serves the Fleet API (SuperNodes), the Control API (``flwr run``, ``flwr supernode
register``, ``flwr ls``, ...) and the Runtime API (its own ServerApp and SuperExec) on one
HTTP(S) port, and the open-source SuperLink has no authentication of Control-API users: whoever
reaches that port with the CA certificate may register a SuperNode key or submit an app that
runs on the data owners' nodes. So the SuperLink listens on the coordinator's loopback address
only (``flower-superlink --host 127.0.0.1``), where the coordinator runs ``flwr``, and this
gateway, on the public address, forwards to it the Fleet API's exact routes and nothing else
(docs/deployment.md, step 2):

- the request filter (:mod:`fa_hetdp.cli.gateway_filter`) judges the raw request target
  against the allowlist of :mod:`fa_hetdp.cli.gateway_routes` (checked against the installed
  flwr when the gateway starts), and the upstream URL is the matched route's constant;
- each route's body cap is enforced from ``Content-Length`` before any byte of the body is
  read (413), and by counting while a chunked body streams;
- a body must keep pace (:class:`BodyPace`): after a grace period it must have arrived at
  ``min_body_rate`` bytes per second on average, and it may never pause for ``body_timeout``
  seconds; a body that falls behind gets 408 and the connection is closed. A trickle (a byte
  every few seconds) cannot defeat it: each byte buys ``1 / min_body_rate`` seconds, not a
  new time-out;
- the first :data:`BODY_PREFIX_BYTES` (64 KiB) of a body are read before the SuperLink is
  contacted: a body that size or smaller (every body of the routes that carry ids and keys,
  and most message contents) is sent whole, and a trickle never holds a SuperLink connection
  unless it has delivered 64 KiB at ``min_body_rate``; the rest of a larger body
  (``push-messages`` up to 1 MiB, ``push-object`` up to ``max_message_bytes``) streams through
  in pieces, never held whole, and so do the replies;
- client-supplied ``Forwarded``, ``X-Forwarded-*``, ``X-Real-IP`` and similar headers are
  dropped: the SuperLink (uvicorn) trusts ``X-Forwarded-For`` from 127.0.0.1, which is where
  the gateway connects from, so a client could otherwise choose the address it is logged as;
- the connection limits (:mod:`fa_hetdp.cli.gateway_protocol`): a header-read deadline (total,
  not per byte), an idle keep-alive time-out, a cap on the header block, on open connections
  and on open connections per client address, and a send time-out on a client that leaves its
  reply unread.

The gateway terminates TLS with the SuperLink's certificate and key, and connects to the
SuperLink over TLS, trusting ``--ssl-ca-certfile`` (the SuperLink's certificate must name
127.0.0.1). SuperNode authentication is unchanged: the SuperNode's signed headers are
forwarded as they are and checked by the SuperLink.
"""

from __future__ import annotations

import argparse
import asyncio
import ssl
import time
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from fa_hetdp.cli.gateway_filter import Refusal, screen
from fa_hetdp.cli.gateway_routes import DEFAULT_MAX_MESSAGE_BYTES, FLEET_ROUTES, FleetRoute

if TYPE_CHECKING:
    import httpx
    from starlette.types import Receive, Scope, Send

__all__ = [
    "BODY_PREFIX_BYTES",
    "FORWARDING_HEADERS",
    "MAX_HEADER_BYTES",
    "BodyPace",
    "FleetGateway",
    "GatewaySettings",
    "add_arguments",
    "create_gateway_app",
    "run_command",
    "serve_gateway",
]

MAX_HEADER_BYTES: Final = 8192
"""Largest request line plus headers (a SuperNode's signed headers take a few hundred bytes)."""

BODY_PREFIX_BYTES: Final = 64 * 1024
"""A body's bytes read before the SuperLink is contacted (nginx: ``client_body_buffer_size``)."""

#: Headers that belong to one connection (RFC 9110, section 7.6.1), or that the gateway sets
#: itself, and are not forwarded.
_HOP_BY_HOP: Final = frozenset(
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
        "expect",
        "host",
        "content-length",
    }
)

#: Headers by which a proxy tells the next hop who the client is. A client that sends them
#: speaks for a proxy that is not there: they are dropped, with every ``X-Forwarded-*``.
FORWARDING_HEADERS: Final = frozenset(
    {
        "forwarded",
        "x-real-ip",
        "x-client-ip",
        "client-ip",
        "true-client-ip",
        "x-cluster-client-ip",
        "cf-connecting-ip",
        "fastly-client-ip",
        "x-original-forwarded-for",
        "via",
    }
)
_FORWARDING_PREFIX: Final = "x-forwarded-"

#: Longest time-out accepted for any setting, in seconds (a day; also refuses ``inf``).
_MAX_SECONDS: Final = 86400.0
#: Largest ``--min-body-rate`` accepted, in bytes per second (1 GiB/s).
_MAX_BODY_RATE: Final = 2**30


@dataclass(frozen=True)
class GatewaySettings:
    """Where the gateway listens, where the SuperLink is, the TLS files and the limits.

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
    max_message_bytes
        Body cap of ``push-object``, the route that carries a message's content
        (:data:`~fa_hetdp.cli.gateway_routes.DEFAULT_MAX_MESSAGE_BYTES` says why 64 MiB).
    max_connections
        Open client connections at most; one more is answered 503 and closed.
    max_connections_per_ip
        Open connections from one client address (an IPv6 address's /64) at most; one more
        is answered 429 and closed.
    header_timeout
        Seconds a connection has to finish its TLS handshake, and again to send a complete
        request line and headers (a total, not a time between bytes).
    keep_alive_timeout
        Seconds an idle connection is kept open between requests.
    body_timeout
        Seconds a request body may pause (no byte received) before the request gets 408.
    min_body_rate, body_grace
        A request body must have arrived at ``min_body_rate`` bytes per second on average,
        counted from ``body_grace`` seconds after it began (:class:`BodyPace`); else 408.
    send_timeout
        Seconds a reply may wait on a client that does not read it; then the connection is
        closed.
    """

    host: str
    port: int
    superlink: str
    ssl_certfile: Path | None = None
    ssl_keyfile: Path | None = None
    ssl_ca_certfile: Path | None = None
    insecure: bool = False
    upstream_timeout: float = 300.0
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    max_connections: int = 1024
    max_connections_per_ip: int = 32
    header_timeout: float = 10.0
    keep_alive_timeout: float = 10.0
    body_timeout: float = 10.0
    min_body_rate: int = 1024
    body_grace: float = 10.0
    send_timeout: float = 30.0

    def check(self) -> None:
        """Refuse an incomplete TLS setup or a bad limit (one line, before anything listens).

        Raises
        ------
        ConfigError
            A TLS file missing without ``--insecure``, a port outside 1..65535, or a limit
            outside its range (each problem names the flag and the range it allows).
        """
        from fa_hetdp.config.rules import ConfigError

        problems: list[tuple[str, str]] = []
        if not 0 < self.port < 65536:
            problems.append(("--listen", f"port must be in 1..65535, got {self.port}"))
        for flag, count in (
            ("--max-message-bytes", self.max_message_bytes),
            ("--max-connections", self.max_connections),
        ):
            if not count > 0:
                problems.append((flag, f"must be an integer >= 1, got {count}"))
        per_ip_top = max(1, self.max_connections)
        if not 1 <= self.max_connections_per_ip <= per_ip_top:
            problems.append(
                (
                    "--max-connections-per-ip",
                    f"must be in 1..{per_ip_top} (at most --max-connections), got "
                    f"{self.max_connections_per_ip}",
                )
            )
        if not 1 <= self.min_body_rate <= _MAX_BODY_RATE:
            problems.append(
                (
                    "--min-body-rate",
                    f"must be in 1..{_MAX_BODY_RATE} bytes per second, got {self.min_body_rate}",
                )
            )
        for flag, seconds in (
            ("--upstream-timeout", self.upstream_timeout),
            ("--header-timeout", self.header_timeout),
            ("--keep-alive-timeout", self.keep_alive_timeout),
            ("--body-timeout", self.body_timeout),
            ("--body-grace", self.body_grace),
            ("--send-timeout", self.send_timeout),
        ):
            if not 0 < seconds <= _MAX_SECONDS:  # also refuses nan
                problems.append((flag, f"must be in (0, {_MAX_SECONDS:g}] seconds, got {seconds}"))
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


class _RefusedError(Exception):
    """A request body broke a limit while it streamed; answer ``refusal``."""

    def __init__(self, refusal: Refusal) -> None:
        super().__init__(refusal.reason)
        self.refusal = refusal


class _ClientGoneError(Exception):
    """The client disconnected before its body was complete."""


def _forwarded(headers: Iterable[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """Return the request headers to pass on: less hop-by-hop and client-supplied forwarding."""
    kept = []
    for name, value in headers:
        lowered = name.decode("latin-1").lower()
        if lowered in _HOP_BY_HOP or lowered in FORWARDING_HEADERS:
            continue
        if lowered.startswith(_FORWARDING_PREFIX):
            continue
        kept.append((name, value))
    return kept


@dataclass(frozen=True)
class BodyPace:
    """How fast a request body must arrive: a minimum average rate after a grace, no long pause.

    ``seconds`` after the body began, at least ``min_rate * (seconds - grace)`` bytes must have
    arrived; in other words, ``received`` bytes buy the body until :meth:`deadline`. The
    longest a body of ``n`` bytes may take is ``grace + n / min_rate`` seconds, and one
    ``pause`` without a byte ends it earlier. A trickle that keeps a per-read time-out alive
    (a byte every ``pause - 1`` seconds) falls behind the rate once the grace is spent.
    """

    min_rate: int
    grace: float
    pause: float

    def deadline(self, started: float, received: int) -> float:
        """Return the time by which more than ``received`` bytes must have arrived."""
        return started + self.grace + received / self.min_rate

    def wait(self, started: float, received: int, now: float) -> tuple[float, bool]:
        """Return how long to wait for the next piece, and whether the rate ends that wait.

        ``(seconds, True)``: the rate's deadline comes first (``seconds`` may be <= 0, when
        the body is already behind); ``(seconds, False)``: the pause does.
        """
        behind = self.deadline(started, received) - now
        if behind <= self.pause:
            return behind, True
        return self.pause, False


async def _answer(send: Send, refusal: Refusal, *extra: tuple[bytes, bytes]) -> None:
    """Answer ``refusal`` in one line of text, and close the connection."""
    text = f"fa-hetdp fleet gateway: {refusal.reason}\n".encode()
    headers = [
        (b"content-type", b"text/plain; charset=utf-8"),
        (b"content-length", str(len(text)).encode()),
        (b"connection", b"close"),
        *extra,
    ]
    await send({"type": "http.response.start", "status": refusal.status, "headers": headers})
    await send({"type": "http.response.body", "body": text, "more_body": False})


def _declared_length(headers: Iterable[tuple[bytes, bytes]]) -> int | Refusal | None:
    """Return the ``Content-Length`` (``None``: chunked), or why the framing is refused."""
    lengths = [v for k, v in headers if k.lower() == b"content-length"]
    chunked = any(k.lower() == b"transfer-encoding" for k, _ in headers)
    if chunked and lengths:
        return Refusal(400, "both Content-Length and Transfer-Encoding were sent")
    if not lengths:
        return None if chunked else 0
    if len(set(lengths)) != 1 or not lengths[0].isdigit():
        return Refusal(400, "Content-Length must be one non-negative integer")
    return int(lengths[0])


class FleetGateway:
    """The gateway as an ASGI application: filter, cap, and stream to the SuperLink."""

    def __init__(self, settings: GatewaySettings) -> None:
        import httpx

        self.settings = settings
        scheme = "http" if settings.insecure else "https"
        verify: ssl.SSLContext | bool = False
        if not settings.insecure:
            verify = ssl.create_default_context(cafile=str(settings.ssl_ca_certfile))
        self.client = httpx.AsyncClient(
            base_url=f"{scheme}://{settings.superlink}",
            verify=verify,
            timeout=httpx.Timeout(settings.upstream_timeout, connect=10.0),
            limits=httpx.Limits(
                max_connections=settings.max_connections,
                max_keepalive_connections=min(100, settings.max_connections),
            ),
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one ASGI connection scope (``http``; ``lifespan`` closes the client)."""
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        elif scope["type"] == "http":
            await self._request(scope, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.client.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _request(self, scope: Scope, receive: Receive, send: Send) -> None:
        import httpx

        raw_path = scope.get("raw_path")  # the target as sent; never the decoded "path"
        if not isinstance(raw_path, bytes):
            await _answer(send, Refusal(400, "the server passed no raw request target"))
            return
        verdict = screen(scope["method"], raw_path, scope.get("query_string", b""))
        if isinstance(verdict, Refusal):
            allow = [(b"allow", b"POST")] if verdict.status == 405 else []
            await _answer(send, verdict, *allow)
            return
        route = verdict
        cap = route.body_cap(self.settings.max_message_bytes)
        declared = _declared_length(scope["headers"])
        if isinstance(declared, Refusal):
            await _answer(send, declared)
            return
        if declared is not None and declared > cap:
            await _answer(send, _too_large(route, cap, f"{declared} bytes declared"))
            return
        headers = _forwarded(scope["headers"])
        body = self._body(receive, route, cap)
        try:  # the first 64 KiB before the SuperLink is contacted
            prefix, rest = await _prefix(body, BODY_PREFIX_BYTES)
        except _RefusedError as exc:
            await _answer(send, exc.refusal)
            return
        except _ClientGoneError:
            return
        content: bytes | AsyncIterator[bytes] = prefix
        if rest is not None:  # a larger body: the prefix, then the rest as it arrives
            content = _chain(prefix, rest)
            if declared is not None:
                headers.append((b"content-length", str(declared).encode()))
        upstream = self.client.build_request(
            route.method, route.path, headers=headers, content=content
        )
        try:
            reply = await self.client.send(upstream, stream=True)
        except _RefusedError as exc:
            await _answer(send, exc.refusal)
            return
        except _ClientGoneError:
            return
        except httpx.TransportError as exc:
            await _answer(send, Refusal(502, f"SuperLink unreachable: {exc}"))
            return
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": reply.status_code,
                    "headers": _reply_headers(reply),
                }
            )
            async for chunk in reply.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except httpx.TransportError:
            return  # the reply broke off: uvicorn closes the connection (response incomplete)
        finally:
            await reply.aclose()

    async def _body(self, receive: Receive, route: FleetRoute, cap: int) -> AsyncIterator[bytes]:
        """Yield the request body as it arrives, counted against ``cap`` and paced.

        A body that falls behind :class:`BodyPace` or pauses too long is a 408; the clock
        starts when the gateway first asks for the body (uvicorn holds at most 64 KiB that the
        gateway has not asked for, so the client is never timed while the gateway waits).
        """
        settings = self.settings
        pace = BodyPace(settings.min_body_rate, settings.body_grace, settings.body_timeout)
        started = time.monotonic()
        received = 0
        more = True
        while more:
            wait, by_rate = pace.wait(started, received, time.monotonic())
            try:
                if wait <= 0:
                    raise TimeoutError
                message = await asyncio.wait_for(receive(), wait)
            except TimeoutError:
                if by_rate:
                    elapsed = time.monotonic() - started
                    reason = (
                        f"request body too slow: {received} bytes in {elapsed:.1f} s, under "
                        f"{settings.min_body_rate} bytes/s after the first "
                        f"{settings.body_grace:g} s"
                    )
                else:
                    reason = f"request body stalled for {settings.body_timeout:g} s"
                raise _RefusedError(Refusal(408, reason)) from None
            if message["type"] == "http.disconnect":
                raise _ClientGoneError
            chunk = bytes(message.get("body", b""))
            more = bool(message.get("more_body", False))
            received += len(chunk)
            if received > cap:
                raise _RefusedError(_too_large(route, cap, f"more than {cap} bytes sent"))
            if chunk:
                yield chunk


async def _prefix(
    body: AsyncIterator[bytes], size: int
) -> tuple[bytes, AsyncIterator[bytes] | None]:
    """Read ``body`` until ``size`` bytes or its end; return them and the rest (None: ended)."""
    pieces: list[bytes] = []
    held = 0
    async for piece in body:
        pieces.append(piece)
        held += len(piece)
        if held >= size:
            return b"".join(pieces), body
    return b"".join(pieces), None


async def _chain(first: bytes, rest: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    yield first
    async for piece in rest:
        yield piece


def _too_large(route: FleetRoute, cap: int, what: str) -> Refusal:
    return Refusal(413, f"request body too large for {route.path}: {what}, the cap is {cap}")


def _reply_headers(reply: httpx.Response) -> list[tuple[bytes, bytes]]:
    """Return the SuperLink's reply headers less hop-by-hop ones and those uvicorn sets."""
    drop = (_HOP_BY_HOP - {"content-length"}) | {"date", "server"}
    return [(k, v) for k, v in reply.headers.raw if k.decode("latin-1").lower() not in drop]


def create_gateway_app(settings: GatewaySettings) -> FleetGateway:
    """Return the gateway as an ASGI application for ``settings``."""
    return FleetGateway(settings)


def serve_gateway(settings: GatewaySettings) -> None:
    """Check ``settings`` and the installed flwr, then serve until interrupted.

    The checks load flwr and the fa-hetdp library (about 190 MB); the server needs neither,
    so once they pass the process replaces itself (``exec``, same process id) with a lean
    interpreter (:mod:`fa_hetdp.cli.gateway_lean`) that imports only the gateway's modules,
    uvicorn and httpx (about 40 MB) and runs :func:`serve_checked`.

    Raises
    ------
    ConfigError
        A bad setting, the installed flwr's Fleet routes differing from the allowlist, or too
        few file descriptors for ``max_connections`` (all before anything listens).
    """
    import os
    import sys

    from fa_hetdp.cli.gateway_protocol import ensure_file_descriptors
    from fa_hetdp.cli.gateway_routes import check_installed_routes

    settings.check()
    check_installed_routes()
    ensure_file_descriptors(settings.max_connections)  # the raised limit survives exec
    _server_tls(settings)  # a certificate or key that does not load stops us here
    if not sys.executable:  # an embedded interpreter: nothing to exec, serve here
        _serve(settings)
        return
    here = Path(__file__).resolve().parent
    lean = [str(here / "gateway_lean.py"), str(here.parent), _to_json(settings)]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, *lean])


def _to_json(settings: GatewaySettings) -> str:
    import dataclasses
    import json

    fields = dataclasses.asdict(settings)
    return json.dumps({k: str(v) if isinstance(v, Path) else v for k, v in fields.items()})


def _from_json(text: str) -> GatewaySettings:
    import json

    fields = json.loads(text)
    for name in ("ssl_certfile", "ssl_keyfile", "ssl_ca_certfile"):
        if fields[name] is not None:
            fields[name] = Path(fields[name])
    return GatewaySettings(**fields)


def serve_checked(settings_json: str) -> None:
    """Serve the gateway with settings that :func:`serve_gateway` has checked (the lean start)."""
    _serve(_from_json(settings_json))


def _server_tls(settings: GatewaySettings) -> ssl.SSLContext | None:
    if settings.insecure:
        return None
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(str(settings.ssl_certfile), str(settings.ssl_keyfile))
    return tls


def _serve(settings: GatewaySettings) -> None:
    """Serve until interrupted (uvicorn, one worker, h11 with the limits)."""
    import uvicorn

    from fa_hetdp.cli.gateway_protocol import guarded_protocol

    config = uvicorn.Config(
        create_gateway_app(settings),
        host=settings.host,
        port=settings.port,
        http=guarded_protocol(
            settings.header_timeout,
            settings.max_connections,
            _server_tls(settings),
            max_per_address=settings.max_connections_per_ip,
            send_timeout=settings.send_timeout,
        ),
        loop="asyncio",
        ws="none",
        lifespan="on",
        timeout_keep_alive=max(1, round(settings.keep_alive_timeout)),
        h11_max_incomplete_event_size=MAX_HEADER_BYTES,
        server_header=False,
        log_level="warning",
    )
    print(
        f"fa-hetdp fleet-gateway: Fleet API on {settings.host}:{settings.port} -> "
        f"{settings.superlink} (its {len(FLEET_ROUTES)} routes only; every other request "
        "refused)",
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
    parser.add_argument(
        "--max-message-bytes",
        type=int,
        default=DEFAULT_MAX_MESSAGE_BYTES,
        help="body cap of /v1/fleet/push-object, which carries a message's content (default: "
        f"{DEFAULT_MAX_MESSAGE_BYTES}, 64 MiB: a masked stage vector of 2d+1 8-byte words for "
        "d up to 4 million; the other routes have fixed caps of 64 KiB and 1 MiB)",
    )
    parser.add_argument(
        "--max-connections",
        type=int,
        default=1024,
        help="open client connections at most; more are answered 503 and closed (default: "
        "1024; the process needs 2 x this + 64 file descriptors, see ulimit -n)",
    )
    parser.add_argument(
        "--max-connections-per-ip",
        type=int,
        default=32,
        help="open connections from one client address (an IPv6 address's /64) at most; more "
        "are answered 429 and closed, so that one client cannot take every connection "
        "(1..--max-connections; default: 32)",
    )
    parser.add_argument(
        "--header-timeout",
        type=float,
        default=10.0,
        help="seconds a connection has to finish its TLS handshake, and again to send a "
        "request line and its headers, in total (default: 10)",
    )
    parser.add_argument(
        "--keep-alive-timeout",
        type=float,
        default=10.0,
        help="seconds an idle connection stays open between requests (default: 10)",
    )
    parser.add_argument(
        "--body-timeout",
        type=float,
        default=10.0,
        help="seconds a request body may pause (no byte) before the request gets 408 (default: 10)",
    )
    parser.add_argument(
        "--min-body-rate",
        type=int,
        default=1024,
        help="bytes per second a request body must average once --body-grace has passed, "
        "else 408: a body of N bytes may take --body-grace + N / this seconds, however it "
        "trickles (1..1073741824; default: 1024)",
    )
    parser.add_argument(
        "--body-grace",
        type=float,
        default=10.0,
        help="seconds at the start of a body before --min-body-rate counts (default: 10)",
    )
    parser.add_argument(
        "--send-timeout",
        type=float,
        default=30.0,
        help="seconds a reply may wait on a client that does not read it; then the "
        "connection is closed (default: 30)",
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
        max_message_bytes=int(args.max_message_bytes),
        max_connections=int(args.max_connections),
        max_connections_per_ip=int(args.max_connections_per_ip),
        header_timeout=float(args.header_timeout),
        keep_alive_timeout=float(args.keep_alive_timeout),
        body_timeout=float(args.body_timeout),
        min_body_rate=int(args.min_body_rate),
        body_grace=float(args.body_grace),
        send_timeout=float(args.send_timeout),
    )
    serve_gateway(settings)
    return 0
