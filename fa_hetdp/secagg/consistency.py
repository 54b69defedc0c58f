"""Bonawitz et al.'s consistency round (CCS 2017, Sec. 6), the client's side.

With ``threat_model = "malicious-server"`` a client (i) joins only a session that has the
consistency round, on the complete graph, with a threshold of at least
:func:`secagg.params.min_signatures` for the session size it sees and its own ``gamma``,
whatever the server says; (ii) signs, once per summation, the survivor list it is shown
(Ed25519, bound to the session id and the summation); (iii) unmasks only if the unmask
request repeats that list and carries at least ``threshold`` valid signatures on it from
clients of the list. Honest clients sign one list per summation, so two different lists
cannot both collect ``t > (n + corrupt) / 2`` signatures: every honest client that unmasks
saw the same list, and no client's seed and mask key are both revealed.
"""

from __future__ import annotations

import math
import struct
from typing import TYPE_CHECKING

import numpy as np

from . import crypto
from .errors import MessageRejected, UnmaskRefused
from .params import min_private_threshold, min_signatures

if TYPE_CHECKING:
    from .client import SecAggClient
    from .messages import UnmaskRequest

__all__ = ["check_safe", "check_signatures", "consistency_payload"]


def consistency_payload(session_id: bytes, summation: int, survivors: tuple[int, ...]) -> bytes:
    """Return the bytes a client signs in the consistency round (session, summation, ids)."""
    ids = np.asarray(sorted(survivors), dtype="<u8").tobytes()
    head = struct.pack("<QQ", summation, len(survivors))
    return crypto.DOMAIN + b"/consistency" + session_id + head + ids


def check_safe(
    client: SecAggClient,
    consistency: int,
    complete: bool,
    threshold: int,
    n: int,
    degree: int,
    *,
    roster_size: int | None = None,
) -> None:
    """Refuse a session below this client's own safe minimums, whatever the server says.

    Malicious server: the consistency round on the complete graph and ``t >=
    floor((n + c)/2) + 1`` and ``t >= c + 1``, ``c`` the colluders: ``ceil(gamma |roster|)``
    with a roster (``roster_size``, default the client's own roster; a session the server
    picks smaller than the roster does not shrink them), else ``ceil(gamma n)``
    (:func:`min_signatures`). Honest-but-curious with ``gamma > 0`` (a node's own floor):
    ``t >=`` :func:`min_private_threshold` ``(n, degree, gamma)``.
    """
    if roster_size is None and client.roster is not None:
        roster_size = len(client.roster.members)
    if client.threat_model != "malicious-server":
        if client.gamma > 0:
            floor = min_private_threshold(n, degree, client.gamma)
            if threshold < floor:
                raise MessageRejected(
                    f"client {client.client_id} guards against gamma = {client.gamma:g}: it "
                    f"needs threshold >= {floor} for n = {n} on degree {degree} (n P[Bin(k, "
                    f"gamma) >= t] <= 2^-40); the server offers threshold={threshold}."
                )
        return
    needed = min_signatures(n, client.gamma)
    against = ""
    if roster_size is not None and roster_size > n:
        corrupt = math.ceil(client.gamma * roster_size - 1e-12)
        needed = max(needed, (n + corrupt) // 2 + 1, corrupt + 1)
        against = f" (c = ceil(gamma |roster|) = {corrupt} of a roster of {roster_size})"
    if not consistency or not complete or threshold < needed:
        raise MessageRejected(
            f"client {client.client_id} (threat model malicious-server) needs a consistency "
            f"round on the complete graph and threshold >= {needed} for n = {n}, gamma = "
            f"{client.gamma:g}{against}; the server offers consistency={consistency}, "
            f"complete={complete}, threshold={threshold}."
        )


def check_signatures(client: SecAggClient, msg: UnmaskRequest) -> None:
    """Refuse to unmask unless ``threshold`` valid signatures cover the list this client signed."""
    me, s = client.client_id, msg.summation
    shown = client.signed.get(s)
    if shown is None or tuple(sorted(msg.survivors)) != shown:
        raise UnmaskRefused(
            f"client {me}: the unmask request's survivors differ from the list it signed "
            f"for summation {s}."
        )
    payload = consistency_payload(client.session_id, s, shown)
    survivors = set(shown)
    valid = 0
    for j, sig in zip(msg.signers, msg.signatures, strict=True):  # signers are distinct
        if valid >= client.threshold:
            break  # t valid signatures suffice; the rest need no verification
        if (
            j in survivors
            and j in client.peer_signing_pks
            and crypto.verify_signature(client.peer_signing_pks[j], payload, sig)
        ):
            valid += 1
    if valid < client.threshold:
        raise UnmaskRefused(
            f"client {me}: {valid} valid signatures on the survivor list, fewer than "
            f"threshold {client.threshold}; refusing to unmask."
        )
