"""The Fleet API's routes: the only requests a Fleet front door forwards (flwr 1.42).

One list, read by the gateway (``fa-hetdp fleet-gateway``), by the test of the shipped nginx
configuration (``deploy/nginx/fleet-gateway.conf``) and checked, when the gateway starts,
against the routes the installed flwr defines (``flwr.superlink.routers.fleet.router``): a
flwr upgrade that adds, removes or renames a Fleet route stops the gateway with a message
instead of silently refusing (or forwarding) requests.

Each route carries a body cap. A SuperNode's requests are small protobuf messages (node ids,
public keys, run ids, object ids: a few hundred bytes), except two:

- ``push-messages`` carries message metadata and object trees (no content): 1 MiB;
- ``push-object`` carries one object of a message's content. A fa-hetdp message is one
  ``ConfigRecord`` (``fa_hetdp.flowerkit.wire``), so its blob travels as one object: the largest
  legitimate one is a masked stage vector of ``2d + 1`` 8-byte words (or ``k`` share
  ciphertexts of about 300 bytes). The default :data:`DEFAULT_MAX_MESSAGE_BYTES`, 64 MiB, holds
  a stage vector for ``d`` up to 4 million coordinates (the documented examples use
  ``d <= 3072``); deployments with larger vectors raise ``--max-message-bytes`` (the ServerApp
  itself refuses replies over ``fa_hetdp.server.app.MAX_REPLY_BYTES``, 256 MiB). The cap
  matters beyond the gateway: the SuperLink reads a whole body before it checks the
  SuperNode's signature.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, Literal

__all__ = [
    "DEFAULT_MAX_MESSAGE_BYTES",
    "FLEET_ROUTES",
    "MESSAGE_LIST_BODY_BYTES",
    "SMALL_BODY_BYTES",
    "FleetRoute",
    "check_installed_routes",
    "installed_fleet_routes",
    "route_differences",
]

SMALL_BODY_BYTES: Final = 64 * 1024
"""Body cap of the routes that carry ids and keys only."""
MESSAGE_LIST_BODY_BYTES: Final = 1024 * 1024
"""Body cap of ``push-messages`` (message metadata and object trees, no content)."""
DEFAULT_MAX_MESSAGE_BYTES: Final = 64 * 1024 * 1024
"""Default body cap of ``push-object``, one object of a message (``--max-message-bytes``)."""

BodyKind = Literal["small", "message-list", "object"]


@dataclass(frozen=True)
class FleetRoute:
    """One Fleet API route: its exact path, its method and what its body carries."""

    path: str
    method: str
    body: BodyKind

    def body_cap(self, max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES) -> int:
        """Largest request body accepted on this route, in bytes."""
        if self.body == "object":
            return max_message_bytes
        if self.body == "message-list":
            return MESSAGE_LIST_BODY_BYTES
        return SMALL_BODY_BYTES


def _post(name: str, body: BodyKind = "small") -> FleetRoute:
    return FleetRoute(f"/v1/fleet/{name}", "POST", body)


#: flwr 1.42's Fleet API (``flwr/superlink/routers/fleet/router.py``), every route a POST.
FLEET_ROUTES: Final[tuple[FleetRoute, ...]] = (
    _post("register-node"),
    _post("activate-node"),
    _post("deactivate-node"),
    _post("unregister-node"),
    _post("send-node-heartbeat"),
    _post("pull-messages"),
    _post("push-messages", "message-list"),
    _post("get-run"),
    _post("get-fab"),
    _post("push-object", "object"),
    _post("pull-object"),
    _post("confirm-message-received"),
)


def installed_fleet_routes() -> frozenset[tuple[str, str]]:
    """Return ``(method, path)`` of every Fleet route the installed flwr serves."""
    from flwr.superlink.routers.fleet.router import router

    pairs: set[tuple[str, str]] = set()
    for route in router.routes:
        path = getattr(route, "path", None)
        methods = getattr(route, "methods", None) or ()
        if isinstance(path, str):
            pairs.update((str(method), path) for method in methods)
    return frozenset(pairs)


def route_differences(
    shipped: Iterable[FleetRoute], installed: Iterable[tuple[str, str]]
) -> list[str]:
    """List what the shipped allowlist and the installed flwr disagree on (empty: agree)."""
    ours = {(route.method, route.path) for route in shipped}
    theirs = set(installed)
    problems = [
        f"flwr serves {m} {p}, missing from the allowlist" for m, p in sorted(theirs - ours)
    ]
    problems += [
        f"allowlist has {m} {p}, which flwr does not serve" for m, p in sorted(ours - theirs)
    ]
    return problems


def check_installed_routes(installed: Iterable[tuple[str, str]] | None = None) -> None:
    """Refuse to run when the installed flwr's Fleet routes differ from :data:`FLEET_ROUTES`.

    Raises
    ------
    ConfigError
        Listing each route that only one side has.
    """
    from fa_hetdp.config.rules import ConfigError

    found = installed_fleet_routes() if installed is None else installed
    problems = route_differences(FLEET_ROUTES, found)
    if problems:
        import flwr

        where = f"the installed flwr {getattr(flwr, '__version__', '?')}'s Fleet routes"
        raise ConfigError(
            where,
            [("fleet routes", "; ".join(problems) + " (the gateway ships flwr 1.42's list)")],
        )
