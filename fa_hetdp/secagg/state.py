"""Serialising a :class:`~secagg.client.SecAggClient` between rounds (JSON, secrets included).

A transport that keeps the client across separate handlers (the Flower ClientApp keeps it in
``context.state``) writes it with :func:`dump_client` and reads it back with
:func:`load_client`; keep the bytes where the client keeps its own secrets.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from .errors import MessageRejected
from .identity import Roster
from .params import THREAT_MODELS

if TYPE_CHECKING:
    from .client import SecAggClient

__all__ = ["PHASES", "dump_client", "load_client"]

PHASES = ("new", "advertised", "shared", "excluded")


def dump_client(client: SecAggClient) -> bytes:
    """Return the client's whole state as JSON bytes."""
    state = {
        "client_id": client.client_id,
        "threat_model": client.threat_model,
        "gamma": client.gamma,
        "identity_name": client.identity_name,
        "roster": None
        if client.roster is None
        else {
            "digest": client.roster.digest.hex(),
            "members": {k: v.hex() for k, v in client.roster.members.items()},
        },
        "consistency": client.consistency,
        "signing_sk": client.signing_sk.hex(),
        "signing_pk": client.signing_pk.hex(),
        "identity_signature": client.identity_signature.hex(),
        "peer_signing_pks": {str(j): v.hex() for j, v in client.peer_signing_pks.items()},
        "signed": {str(s): list(v) for s, v in client.signed.items()},
        "phase": client.phase,
        "session": client.session.hex(),
        "num_clients": client.num_clients,
        "threshold": client.threshold,
        "num_summations": client.num_summations,
        "degree": client.degree,
        "graph_digest": client.graph_digest.hex(),
        "neighbours": list(client.neighbours),
        "points": [client.points[j] for j in client.neighbours],
        "channel_sk": client.channel_sk.hex(),
        "mask_sks": [k.hex() for k in client.mask_sks],
        "channel_pk": client.channel_pk.hex(),
        "mask_pks": client.mask_pks.hex(),
        "session_id": client.session_id.hex(),
        "num_advertised": client.num_advertised,
        "advertised_digest": client.advertised_digest.hex(),
        "peer_mask_pks": {str(j): v.hex() for j, v in client.peer_mask_pks.items()},
        "receive_keys": {str(j): v.hex() for j, v in client.receive_keys.items()},
        "seeds": [s.hex() for s in client.seeds],
        "held_shares": {str(j): v.hex() for j, v in client.held_shares.items()},
        "alive": list(client.alive),
        "pair_keys": {str(j): [k.hex() for k in v] for j, v in client.pair_keys.items()},
        "next_summation": client.next_summation,
        "pending_unmask": client.pending_unmask,
        "dropped_peers": sorted(client.dropped_peers),
    }
    return json.dumps(state, separators=(",", ":")).encode()


def load_client(cls: type[SecAggClient], data: bytes) -> SecAggClient:
    """Restore a client written by :func:`dump_client`.

    Raises
    ------
    MessageRejected
        If ``data`` is not a state written by :func:`dump_client`.
    """
    try:
        state = json.loads(data)
        roster = state["roster"]
        client = cls(int(state["client_id"]), gamma=float(state["gamma"]))
        client.threat_model = state["threat_model"]
        if client.threat_model not in THREAT_MODELS:
            raise ValueError(f"unknown threat model {client.threat_model!r}")
        if roster is not None:
            client.roster = Roster(
                members={str(k): bytes.fromhex(v) for k, v in roster["members"].items()},
                digest=bytes.fromhex(roster["digest"]),
            )
        elif client.threat_model == "malicious-server":
            raise ValueError("a malicious-server state without its roster")
        client.identity_name = str(state["identity_name"])
        client.consistency = int(state["consistency"])
        client.signing_sk = bytes.fromhex(state["signing_sk"])
        # absent from states written before they were kept: the own entry is then verified
        client.signing_pk = bytes.fromhex(state.get("signing_pk", ""))
        client.identity_signature = bytes.fromhex(state.get("identity_signature", ""))
        client.peer_signing_pks = {
            int(j): bytes.fromhex(v) for j, v in state["peer_signing_pks"].items()
        }
        client.signed = {int(s): tuple(int(c) for c in v) for s, v in state["signed"].items()}
        if state["phase"] not in PHASES:
            raise ValueError(f"unknown phase {state['phase']!r}")
        client.phase = str(state["phase"])
        client.session = bytes.fromhex(state["session"])
        client.num_clients = int(state["num_clients"])
        client.threshold = int(state["threshold"])
        client.num_summations = int(state["num_summations"])
        client.degree = int(state["degree"])
        client.graph_digest = bytes.fromhex(state["graph_digest"])
        client.neighbours = tuple(int(c) for c in state["neighbours"])
        client.points = dict(zip(client.neighbours, (int(p) for p in state["points"]), strict=True))
        client.channel_sk = bytes.fromhex(state["channel_sk"])
        client.mask_sks = [bytes.fromhex(k) for k in state["mask_sks"]]
        client.channel_pk = bytes.fromhex(state["channel_pk"])
        client.mask_pks = bytes.fromhex(state["mask_pks"])
        client.session_id = bytes.fromhex(state["session_id"])
        client.num_advertised = int(state["num_advertised"])
        client.advertised_digest = bytes.fromhex(state["advertised_digest"])
        client.peer_mask_pks = {int(j): bytes.fromhex(v) for j, v in state["peer_mask_pks"].items()}
        client.receive_keys = {int(j): bytes.fromhex(v) for j, v in state["receive_keys"].items()}
        client.seeds = [bytes.fromhex(s) for s in state["seeds"]]
        client.held_shares = {int(j): bytes.fromhex(v) for j, v in state["held_shares"].items()}
        client.alive = tuple(int(c) for c in state["alive"])
        client.pair_keys = {
            int(j): [bytes.fromhex(k) for k in v] for j, v in state["pair_keys"].items()
        }
        client.next_summation = int(state["next_summation"])
        pending = state["pending_unmask"]
        client.pending_unmask = None if pending is None else int(pending)
        client.dropped_peers = {int(c) for c in state["dropped_peers"]}
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise MessageRejected(f"not a serialised SecAggClient state: {exc}") from None
    return client
