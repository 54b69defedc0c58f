"""The fleet gateway's connection limits: what uvicorn's HTTP/1.1 server (h11) lacks.

uvicorn already offers an idle timeout between requests (``timeout_keep_alive``) and a cap on
the size of a request line plus headers (``h11_max_incomplete_event_size``); the gateway
uses both. It has no deadline on reading a request's headers (a connection that sends half a
request line is held until the client leaves) and no cap on open connections
(``limit_concurrency`` answers 503 to requests once it is reached, real ones included, but
keeps accepting connections). :func:`guarded_protocol` adds both on top of uvicorn's h11
protocol:

- a header-read deadline: a connection's request line and headers must be complete within
  ``header_timeout`` seconds of the connection opening (after the TLS handshake) or of a new
  request's first byte; it is a total, not an idle, time, so trickling a byte at a time does
  not extend it. A late connection is closed at once;
- a connection cap: once ``max_connections`` are open, a new connection is answered 503 and
  closed, so the file descriptors left serve the SuperLink connections;
- TLS terminated by the protocol itself, so that a connection in its TLS handshake counts
  against the cap and the handshake has ``header_timeout`` seconds too (with uvicorn's
  ``ssl_*`` settings, asyncio would hold an unfinished handshake 60 s, uncounted).

:func:`ensure_file_descriptors` checks, before anything listens, that the process may open
enough file descriptors for the cap (raising the soft limit up to the hard one if needed).
"""

from __future__ import annotations

import asyncio
import resource
import ssl
from typing import Any, Final

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["FD_RESERVE", "ensure_file_descriptors", "file_descriptors_needed", "guarded_protocol"]

FD_RESERVE: Final = 64
"""File descriptors kept for the listening socket, logs, the TLS files and the interpreter."""

_BUSY: Final = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"content-length: 45\r\nconnection: close\r\n\r\n"
    b"fa-hetdp fleet gateway: too many connections\n"
)


def guarded_protocol(
    header_timeout: float, max_connections: int, tls: ssl.SSLContext | None = None
) -> type[H11Protocol]:
    """Return uvicorn's h11 protocol with a header-read deadline and a connection cap.

    With ``tls``, the protocol terminates TLS itself (``loop.start_tls``) so that the
    handshake counts against the cap from the moment the connection is accepted and must end
    within ``header_timeout`` (asyncio's own default is 60 s); uvicorn is then run without
    its ``ssl_*`` settings.
    """

    class GuardedH11Protocol(H11Protocol):
        _header_timer: asyncio.TimerHandle | None = None
        _handshake: asyncio.Task[None] | None = None
        _raw: asyncio.Transport | None = None
        _refused = False
        _lost = False

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._early = bytearray()

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            if len(self.connections) >= max_connections:
                self._refused = True
                if tls is None and isinstance(transport, asyncio.WriteTransport):
                    transport.write(_BUSY)
                transport.close()
                return
            if tls is None:
                super().connection_made(transport)  # type: ignore[arg-type]
                self._arm()
                return
            if not isinstance(transport, asyncio.Transport):  # no stream: no TLS to start
                transport.close()
                return
            self._raw = transport
            transport.pause_reading()  # until start_tls puts the TLS layer in between
            self.connections.add(self)  # counted while the handshake runs
            self._handshake = self.loop.create_task(self._start_tls(transport, tls))

        async def _start_tls(self, raw: asyncio.Transport, context: ssl.SSLContext) -> None:
            try:
                secure = await self.loop.start_tls(
                    raw,
                    self,
                    context,
                    server_side=True,
                    ssl_handshake_timeout=header_timeout,
                    ssl_shutdown_timeout=header_timeout,
                )
            except Exception:  # a failed, late or broken handshake: nothing to serve
                secure = None
            self._handshake = None
            if secure is None or not isinstance(secure, asyncio.Transport) or self._lost:
                self.connections.discard(self)
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
                self._raw.abort()
                return
            super().shutdown()

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
