"""The fleet gateway's connection limits: what uvicorn's HTTP/1.1 server (h11) lacks.

uvicorn already offers an idle timeout between requests (``timeout_keep_alive``) and a cap on
the size of a request line plus headers (``h11_max_incomplete_event_size``); the gateway
uses both. It has no deadline on reading a request's headers (a connection that sends half a
request line is held until the client leaves), no cap on open connections
(``limit_concurrency`` answers 503 to requests once it is reached, real ones included, but
keeps accepting connections), none per client address, and no time-out on a client that stops
reading its reply. :func:`guarded_protocol` adds them on top of uvicorn's h11 protocol:

- a header-read deadline: a connection's request line and headers must be complete within
  ``header_timeout`` seconds of the connection opening (after the TLS handshake) or of a new
  request's first byte; it is a total, not an idle, time, so trickling a byte at a time does
  not extend it. A late connection is closed at once;
- a connection cap: once ``max_connections`` are open, a new connection is answered 503 and
  closed, so the file descriptors left serve the SuperLink connections;
- a cap per client address: once ``max_per_address`` connections from one address (an IPv6
  address's /64, which one host holds) are open, its next one is answered 429 and closed, so
  one client cannot take every slot of the connection cap (slow bodies or slow headers from
  one address lock nobody else out); counted from the moment a connection is accepted, TLS
  handshake included;
- a send time-out: a reply whose bytes the client leaves unread, so that the connection's
  write buffer stays full for ``send_timeout`` seconds, closes the connection (nginx's
  ``send_timeout``);
- TLS terminated by the protocol itself, so that a connection in its TLS handshake counts
  against the cap and the handshake has ``header_timeout`` seconds too (with uvicorn's
  ``ssl_*`` settings, asyncio would hold an unfinished handshake 60 s, uncounted), and with
  a read buffer of one TLS record (:data:`TLS_READ_BYTES`) where asyncio allocates 256 KiB
  per connection: 1000 slow clients took 250 MB in those buffers alone.

Once many connections have closed (:data:`TRIM_AFTER_CLOSED`), the memory they freed is
handed back to the operating system (glibc's ``malloc_trim``; elsewhere nothing is done):
without it, the gateway kept the peak of an attack of slow clients for good.

:func:`ensure_file_descriptors` checks, before anything listens, that the process may open
enough file descriptors for the cap (raising the soft limit up to the hard one if needed).
"""

from __future__ import annotations

import asyncio
import asyncio.sslproto
import ipaddress
import resource
import ssl
from collections.abc import Callable
from typing import Any, Final

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = [
    "FD_RESERVE",
    "TLS_READ_BYTES",
    "TRIM_AFTER_CLOSED",
    "client_key",
    "ensure_file_descriptors",
    "file_descriptors_needed",
    "guarded_protocol",
]

FD_RESERVE: Final = 64
"""File descriptors kept for the listening socket, logs, the TLS files and the interpreter."""

TLS_READ_BYTES: Final = 16 * 1024
"""Read buffer of one TLS connection: one TLS record's plaintext (asyncio's default: 256 KiB)."""


TRIM_AFTER_CLOSED: Final = 256
"""Connections closed since the last peak after which freed memory is handed back."""


def _malloc_trim() -> Callable[[int], int] | None:
    """Return glibc's ``malloc_trim`` (hands freed heap memory back), or None elsewhere."""
    try:
        import ctypes

        trim: Callable[[int], int] = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError, ImportError):  # not glibc: nothing to call
        return None
    return trim


class _Trimmer:
    """Calls ``malloc_trim`` once :data:`TRIM_AFTER_CLOSED` connections closed since a peak."""

    def __init__(self) -> None:
        self._trim = _malloc_trim()
        self._peak = 0
        self._pending = False

    def opened(self, count: int) -> None:
        self._peak = max(self._peak, count)

    def closed(self, loop: asyncio.AbstractEventLoop, count: Callable[[], int]) -> None:
        if self._trim is None or self._pending or self._peak - count() < TRIM_AFTER_CLOSED:
            return
        self._pending = True
        loop.call_later(1.0, self._run, count)  # after the burst of closes, once

    def _run(self, count: Callable[[], int]) -> None:
        self._pending = False
        self._peak = count()
        if self._trim is not None:
            self._trim(0)


class _LeanSSLProtocol(asyncio.sslproto.SSLProtocol):
    """asyncio's TLS protocol with a read buffer of :data:`TLS_READ_BYTES` per connection."""

    max_size = TLS_READ_BYTES


async def _start_tls(
    loop: asyncio.AbstractEventLoop,
    transport: asyncio.Transport,
    protocol: asyncio.BaseProtocol,
    context: ssl.SSLContext,
    timeout: float,
) -> asyncio.Transport:
    """``loop.start_tls(server_side=True)`` with :class:`_LeanSSLProtocol` (asyncio's steps)."""
    waiter = loop.create_future()
    tls = _LeanSSLProtocol(
        loop,
        protocol,
        context,
        waiter,
        server_side=True,
        call_connection_made=False,
        # typeshed says int; asyncio takes any positive number of seconds (as start_tls does)
        ssl_handshake_timeout=timeout,  # type: ignore[arg-type]
        ssl_shutdown_timeout=timeout,
    )
    transport.pause_reading()  # so that no data reaches the TLS layer before connection_made
    transport.set_protocol(tls)
    made = loop.call_soon(tls.connection_made, transport)
    resumed = loop.call_soon(transport.resume_reading)
    try:
        await waiter
    except BaseException:
        transport.close()
        made.cancel()
        resumed.cancel()
        raise
    return tls._app_transport


def _plain_answer(status: str, text: str) -> bytes:
    """Return a whole ``connection: close`` reply of one line of text (written before h11)."""
    body = f"fa-hetdp fleet gateway: {text}\n".encode()
    head = (
        f"HTTP/1.1 {status}\r\ncontent-type: text/plain; charset=utf-8\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode() + body


_BUSY: Final = _plain_answer("503 Service Unavailable", "too many connections")
_TOO_MANY_FROM_ADDRESS: Final = _plain_answer(
    "429 Too Many Requests", "too many connections from your address"
)


def client_key(peer: object) -> str:
    """Return what the per-address cap counts for a peer: its IPv4 address, or its IPv6 /64.

    ``peer`` is a transport's ``peername`` (``(host, port, ...)``); an IPv4-mapped IPv6 address
    counts as its IPv4 address. Anything else (no address) counts under one shared key.
    """
    if not isinstance(peer, tuple) or not peer or not isinstance(peer[0], str):
        return "?"
    host = peer[0].partition("%")[0]  # an IPv6 zone index is not part of the address
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)


def guarded_protocol(
    header_timeout: float,
    max_connections: int,
    tls: ssl.SSLContext | None = None,
    *,
    max_per_address: int | None = None,
    send_timeout: float | None = None,
) -> type[H11Protocol]:
    """Return uvicorn's h11 protocol with the connection limits of this module.

    With ``tls``, the protocol terminates TLS itself (``loop.start_tls``) so that the
    handshake counts against the caps from the moment the connection is accepted and must end
    within ``header_timeout`` (asyncio's own default is 60 s); uvicorn is then run without
    its ``ssl_*`` settings. ``max_per_address`` (default: ``max_connections``) caps the open
    connections of one client address (:func:`client_key`); ``send_timeout`` (default: none)
    is how long a reply may wait on a client that does not read it.
    """
    per_address_cap = max_connections if max_per_address is None else max_per_address
    open_per_address: dict[str, int] = {}
    trimmer = _Trimmer()

    class GuardedH11Protocol(H11Protocol):
        _header_timer: asyncio.TimerHandle | None = None
        _send_timer: asyncio.TimerHandle | None = None
        _handshake: asyncio.Task[None] | None = None
        _raw: asyncio.Transport | None = None
        _address: str | None = None
        _refused = False
        _lost = False

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._early = bytearray()

        def _refuse(self, transport: asyncio.BaseTransport, answer: bytes) -> None:
            self._refused = True
            if tls is None and isinstance(transport, asyncio.WriteTransport):
                transport.write(answer)
            transport.close()

        def _release(self) -> None:
            """Stop counting this connection against its address (once, whatever the path)."""
            key, self._address = self._address, None
            if key is not None:
                left = open_per_address.get(key, 1) - 1
                if left > 0:
                    open_per_address[key] = left
                else:
                    open_per_address.pop(key, None)
                trimmer.closed(self.loop, lambda: len(self.connections))

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            if len(self.connections) >= max_connections:
                self._refuse(transport, _BUSY)
                return
            key = client_key(transport.get_extra_info("peername"))
            if open_per_address.get(key, 0) >= per_address_cap:
                self._refuse(transport, _TOO_MANY_FROM_ADDRESS)
                return
            open_per_address[key] = open_per_address.get(key, 0) + 1
            self._address = key
            trimmer.opened(len(self.connections) + 1)
            if tls is None:
                super().connection_made(transport)  # type: ignore[arg-type]
                self._arm()
                return
            if not isinstance(transport, asyncio.Transport):  # no stream: no TLS to start
                self._release()
                transport.close()
                return
            self._raw = transport
            transport.pause_reading()  # until start_tls puts the TLS layer in between
            self.connections.add(self)  # counted while the handshake runs
            self._handshake = self.loop.create_task(self._start_tls(transport, tls))

        async def _start_tls(self, raw: asyncio.Transport, context: ssl.SSLContext) -> None:
            try:
                secure = await _start_tls(self.loop, raw, self, context, header_timeout)
            except Exception:  # a failed, late or broken handshake: nothing to serve
                secure = None
            self._handshake = None
            if secure is None or not isinstance(secure, asyncio.Transport) or self._lost:
                self.connections.discard(self)
                self._release()
                raw.abort()
                return
            super().connection_made(secure)
            self._arm()
            if self._early:  # what arrived with the end of the handshake
                early, self._early = bytes(self._early), bytearray()
                self.data_received(early)

        def _in_handshake(self) -> bool:
            return self._raw is not None and self.transport is None

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            self._stop_send_timer()
            self._release()
            if self._refused:
                return
            if self._in_handshake():  # before start_tls returned: nothing was set up
                self._lost = True
                self.connections.discard(self)
                return
            super().connection_lost(exc)

        def shutdown(self) -> None:
            if self._raw is not None and self._in_handshake():
                if self._handshake is not None:
                    self._handshake.cancel()
                self.connections.discard(self)
                self._release()
                self._raw.abort()
                return
            super().shutdown()

        def pause_writing(self) -> None:
            super().pause_writing()  # the client is not reading fast enough: a reply waits
            if send_timeout is not None and self._send_timer is None:
                self._send_timer = self.loop.call_later(send_timeout, self._send_stalled)

        def resume_writing(self) -> None:
            self._stop_send_timer()
            super().resume_writing()

        def _stop_send_timer(self) -> None:
            if self._send_timer is not None:
                self._send_timer.cancel()
                self._send_timer = None

        def _send_stalled(self) -> None:
            self._send_timer = None
            if self.transport is not None:
                self.transport.abort()

        def data_received(self, data: bytes) -> None:
            if self._refused:
                return
            if self._in_handshake():
                # The TLS layer delivers data that came with the client's Finished message
                # before start_tls returns: keep it until the connection is set up.
                self._early += data
                return
            super().data_received(data)
            self._follow()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if self.conn.their_state is h11.IDLE and self.conn.trailing_data[0]:
                self._arm()  # a pipelined request has begun

        def _follow(self) -> None:
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self._arm()  # still reading a request line and headers
            else:
                self._disarm()

        def _arm(self) -> None:
            if self._header_timer is None:
                self._header_timer = self.loop.call_later(header_timeout, self._too_late)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _too_late(self) -> None:
            self._header_timer = None
            if self.conn.their_state is h11.IDLE:
                self.transport.abort()

    return GuardedH11Protocol


def file_descriptors_needed(max_connections: int) -> int:
    """File descriptors for ``max_connections`` clients, as many SuperLink connections, spare."""
    return 2 * max_connections + FD_RESERVE


def ensure_file_descriptors(max_connections: int) -> None:
    """Make sure this process may open :func:`file_descriptors_needed` file descriptors.

    Raises the soft ``RLIMIT_NOFILE`` up to the hard limit when that is enough.

    Raises
    ------
    ConfigError
        The hard limit is too low for ``--max-connections`` (says what to raise).
    """
    from fa_hetdp.config.rules import ConfigError

    need = file_descriptors_needed(max_connections)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < need:
        if hard == resource.RLIM_INFINITY or hard >= need:
            resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
            return
        reason = (
            f"{max_connections} connections need {need} file descriptors (one per client, one "
            f"per SuperLink connection, {FD_RESERVE} spare) but the limit is {hard}: raise it "
            "(ulimit -n, systemd LimitNOFILE) or lower --max-connections"
        )
        raise ConfigError("command line", [("--max-connections", reason)])
