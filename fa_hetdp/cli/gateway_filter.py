"""The fleet gateway's request filter: an exact allowlist, decided on the raw request target.

The target is judged as the client sent it (uvicorn's ``raw_path`` and ``query_string``),
never after percent-decoding or dot-segment removal, and the upstream URL is then built from
the matched route's constant, never from the received bytes. A target is refused with 400
when it is not a plain origin-form path (absolute-form, authority-form, ``*``), is longer
than :data:`MAX_TARGET_BYTES`, carries a query, a fragment, ``;`` parameters, any
percent-encoding (which covers ``%2e``, ``%2f``, ``%5c`` in any case and double encoding: the
Fleet API's paths have none), a backslash, a doubled slash, a ``.`` or ``..`` segment, or any
byte outside ``[a-z0-9/-]``. A well-formed path that is not a Fleet route gets 403, a Fleet
route with another method 405.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from fa_hetdp.cli.gateway_routes import FLEET_ROUTES, FleetRoute

__all__ = ["MAX_TARGET_BYTES", "Refusal", "screen"]

MAX_TARGET_BYTES: Final = 128
"""Longest request target considered (the longest Fleet path has 34 bytes)."""

_ROUTES: Final = {route.path.encode("ascii"): route for route in FLEET_ROUTES}
_PLAIN: Final = re.compile(rb"/[a-z0-9/-]*")


@dataclass(frozen=True)
class Refusal:
    """Why a request is not forwarded: the status to answer and a one-line reason."""

    status: int
    reason: str


def _malformed(target: bytes, query: bytes) -> str | None:
    """Return the first reason ``target`` is not a plain origin-form path, or ``None``."""
    if len(target) + len(query) > MAX_TARGET_BYTES:
        return f"request target longer than {MAX_TARGET_BYTES} bytes"
    if not target.startswith(b"/"):
        return "only origin-form request targets (/path) are accepted"
    checks = (
        (bool(query) or b"?" in target, "query strings are not used by the Fleet API"),
        (b"#" in target, "fragments are not allowed in a request target"),
        (b";" in target, "';' path parameters are not allowed"),
        (b"%" in target, "percent-encoding is not allowed (the Fleet API's paths have none)"),
        (b"\\" in target, "backslashes are not allowed"),
        (b"//" in target, "doubled slashes are not allowed"),
        (
            any(segment in (b".", b"..") for segment in target.split(b"/")),
            "dot segments ('.', '..') are not allowed",
        ),
        (
            _PLAIN.fullmatch(target) is None,
            "characters outside a-z, 0-9, '-' and '/' are not allowed",
        ),
    )
    return next((reason for bad, reason in checks if bad), None)


def screen(method: str, target: bytes, query: bytes = b"") -> FleetRoute | Refusal:
    """Return the Fleet route ``method target`` names exactly, or why it is refused.

    Parameters
    ----------
    method
        The request method as received.
    target, query
        The raw request target (path part, as sent, not decoded) and the raw query string.
    """
    reason = _malformed(target, query)
    if reason is not None:
        return Refusal(400, f"bad request target: {reason}")
    route = _ROUTES.get(target)
    if route is None:
        return Refusal(
            403,
            "only the Fleet API is served on this address; the Control API is reachable "
            "from the coordinator's host only",
        )
    if method != route.method:
        return Refusal(405, f"{route.path} accepts {route.method} only, got {method}")
    return route
