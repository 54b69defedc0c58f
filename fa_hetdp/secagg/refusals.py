"""What a client checks before it answers a key directory or an unmask request (O(k)).

Messages carry the recipient's neighbourhood only (:mod:`fa_hetdp.secagg.messages`), and every check
is made against what the client itself holds: its neighbours from the setup, the keys its
directory showed, the shares that reached it. A client can only reveal shares it holds (its
neighbours' secrets), so a request naming clients beyond its neighbourhood never protected
anything; the session-wide facts that matter (how many advertised, how many survived) are
counts that the complete graph lets the client count itself, and that a sparse graph binds
into the session id (the advertised count) or checks against the client's own view.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .errors import MessageRejected, ProtocolAborted, UnmaskRefused

if TYPE_CHECKING:
    from .client import SecAggClient
    from .messages import KeyDirectory, UnmaskRequest

__all__ = ["check_directory", "check_unmask_request"]


def check_directory(client: SecAggClient, msg: KeyDirectory) -> tuple[dict[int, int], list[int]]:
    """Check a key directory against the setup; return ``(owner -> row, neighbours with keys)``.

    Raises
    ------
    MessageRejected
        Own keys missing or altered; keys of a client that is not a neighbour; a count of
        advertised clients below the keys shown, above the invited clients, or (complete
        graph, where every advertised key is shown) different from the keys shown.
    ProtocolAborted
        Fewer than ``threshold`` share holders (neighbours) advertised keys.
    """
    me = client.client_id
    index = {owner: p for p, owner in enumerate(msg.key_owners)}
    own = index.get(me)
    if own is None or (
        msg.channel_keys[own] != client.channel_pk or msg.mask_keys[own] != client.mask_pks
    ):
        raise MessageRejected(f"client {me}: own keys missing or altered.")
    neighbours = [j for j in client.neighbours if j in index]
    if len(neighbours) + 1 != len(index):
        stray = sorted(set(index) - set(client.neighbours) - {me})
        raise MessageRejected(
            f"client {me}: key directory lists keys of {stray[:5]}, not neighbours."
        )
    shown, stated = len(index), msg.num_advertised
    if stated > client.num_clients or (client.complete and stated != shown):
        raise MessageRejected(
            f"client {me}: key directory states {stated} clients advertised keys; it shows "
            f"{shown} keys and the setup invited {client.num_clients}"
            + (" (the complete graph shows every key)." if client.complete else ".")
        )
    if len(neighbours) < client.threshold:
        raise ProtocolAborted(
            f"client {me}: only {len(neighbours)} share holders (neighbours) advertised "
            f"keys, fewer than threshold {client.threshold}."
        )
    return index, neighbours


def check_unmask_request(
    client: SecAggClient, msg: UnmaskRequest
) -> tuple[frozenset[int], frozenset[int]]:
    """Refuse an unsafe unmask request; return its ``(survivors, dropped)`` sets.

    A request that lists this client as dropped also marks it ``"excluded"``.

    Raises
    ------
    UnmaskRefused
        Duplicate ids; ids outside this client's neighbourhood; this client dropped or
        not a survivor; a peer both survivor and dropped; a peer declared dropped earlier
        listed as survivor; survivors that never shared keys with this client; a count of
        survivors below those listed (or, complete graph, different from them) or below
        ``threshold``; fewer than ``threshold`` of its share holders surviving.
    """
    me = client.client_id
    survivors, dropped = frozenset(msg.survivors), frozenset(msg.dropped)
    for name, ids, unique in (
        ("survivors", msg.survivors, survivors),
        ("dropped", msg.dropped, dropped),
    ):
        if len(unique) != len(ids):
            raise UnmaskRefused(f"client {me}: unmask request lists duplicate {name} ids.")
    unknown = sorted((survivors | dropped) - {me, *client.neighbours})
    if unknown:
        raise UnmaskRefused(
            f"client {me}: unmask request names unknown ids {unknown[:5]} (not neighbours)."
        )
    if me in dropped:
        client.phase = "excluded"
        client.pending_unmask = None
        raise UnmaskRefused(f"client {me}: unmask request lists this client as dropped.")
    both = sorted(survivors & dropped)
    if both:
        raise UnmaskRefused(
            f"client {me}: request asks for both the self-mask share and the key share "
            f"of clients {both[:5]}."
        )
    if me not in survivors:
        raise UnmaskRefused(f"client {me}: unmask request omits this client's own input.")
    revived = sorted(survivors & client.dropped_peers)
    if revived:
        raise UnmaskRefused(
            f"client {me}: clients {revived[:5]} were declared dropped earlier; a dropped "
            "client stays dropped."
        )
    count = msg.num_survivors
    if count < len(survivors) or (client.complete and count != len(survivors)):
        raise UnmaskRefused(
            f"client {me}: unmask request counts {count} survivors but lists {len(survivors)}."
        )
    if count < client.threshold:
        raise UnmaskRefused(
            f"client {me}: {count} survivors, fewer than threshold {client.threshold}."
        )
    alive = set(client.alive)
    stray = sorted(survivors - alive - {me})
    if stray:
        raise UnmaskRefused(
            f"client {me}: survivors {stray[:5]} never shared keys with this client."
        )
    local = len(survivors & alive)
    if local < client.threshold:
        raise UnmaskRefused(
            f"client {me}: {local} of its share holders (neighbours) survive, fewer than "
            f"threshold {client.threshold}."
        )
    return survivors, dropped
