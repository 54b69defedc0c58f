"""The server's state machine (Bonawitz et al., CCS 2017, Fig. 4; SecAgg+ graphs).

The server is honest but curious: it follows the protocol and routes every message, and
learns only the sum of the surviving inputs of each summation. It never returns a sum it
cannot reconstruct exactly: when survivors (or the shares needed to unmask them) fall below
the threshold it raises :class:`~secagg.errors.ProtocolAborted` naming the reason.

Calling the method that produces a round's request closes the previous round: whoever has
not answered by then is dropped (``key_directory`` closes advertise-keys,
``start_summation`` closes share-keys, ``unmask_requests`` closes masked-input,
``finish_summation`` closes unmask). A late message raises
:class:`~secagg.errors.MessageRejected`; a transport should log it and carry on.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from . import crypto
from .consistency import consistency_payload
from .crypto import U64Array
from .encoding import FixedPointEncoding, FloatArray, U32Array
from .errors import EncodingError, MessageRejected, ProtocolAborted
from .evidence import DIGEST_BYTES
from .graph import Neighbours, choose_graph
from .messages import (
    AdvertiseKeys,
    ConsistencyRequest,
    ConsistencyResponse,
    KeyDirectory,
    MaskedInput,
    MaskedInputRequest,
    MessageValue,
    SetupMessage,
    ShareKeys,
    UnmaskRequest,
    UnmaskResponse,
)
from .recovery import ShareRecovery
from .shamir import PRIME

__all__ = ["SecAggServer", "SumResult"]


@dataclass(frozen=True, eq=False)
class SumResult:
    """The outcome of one summation.

    Attributes
    ----------
    summation : int
        Index of the summation within the session.
    sum : FloatArray
        The decoded sum of the survivors' inputs.
    raw : numpy.ndarray of uint64
        The exact sum of the encoded inputs in Z_{2^m} (``m = encoding.modulus_bits``).
    survivors : tuple of int
        Clients whose inputs are in the sum.
    dropped : tuple of int
        Clients of the session (past share-keys) whose inputs are not.
    max_error : FloatArray
        Per-coordinate bound ``len(survivors) / scale`` on ``|sum - true sum|``.
    cheaters : tuple of int
        Clients named on evidence they signed (:mod:`fa_hetdp.secagg.evidence`): a holder
        whose signed unmask share differs from the share its dealer signed for it, or a
        dealer whose signed shares do not open its commitment or public key. Their shares
        are left out and they are dropped from later summations.
    reasons : mapping of int to str
        Every client the session dropped for cause so far, with why (named cheaters, a
        sender whose shares holders could not read, a seed commitment its own shares
        contradict, an unsigned response): ``{client: reason}``.
    """

    summation: int
    sum: FloatArray
    raw: U64Array
    survivors: tuple[int, ...]
    dropped: tuple[int, ...]
    max_error: FloatArray
    cheaters: tuple[int, ...] = ()
    reasons: Mapping[int, str] = field(default_factory=dict)


class SecAggServer:
    """The server's side of one secure-aggregation session with several summations.

    Parameters
    ----------
    client_ids : sequence of int
        The clients invited to the session (distinct, in ``[0, 2^64)``).
    threshold : int
        Shamir threshold ``t``: shares needed to unmask a client, counted among its share
        holders (its ``k`` neighbours; a client never holds a share of its own secrets);
        also the minimum number of survivors. ``2 <= t <= k`` (see
        :func:`secagg.params.choose_parameters`).
    num_summations : int
        Number of summations this session carries (each with independent masks).
    neighbours : int, "complete" or None
        Graph degree ``k`` (even) of a random Harary graph, ``"complete"``, or ``None`` for
        :func:`secagg.graph.default_degree`.
    rng : numpy.random.Generator
        Draws the public graph permutation only; secrets come from ``os.urandom``.
    consistency : bool
        Add Bonawitz et al.'s consistency round (Ed25519 signatures on the survivor list,
        :meth:`consistency_request`) before every unmask round: ``threat_model =
        "malicious-server"``.
    """

    def __init__(
        self,
        client_ids: Sequence[int],
        *,
        threshold: int,
        num_summations: int = 1,
        neighbours: Neighbours = None,
        rng: np.random.Generator,
        consistency: bool = False,
    ) -> None:
        ids = sorted(int(c) for c in client_ids)
        if len(set(ids)) != len(ids) or len(ids) < 2:
            raise ValueError(f"need at least 2 distinct client ids, got {len(set(ids))}.")
        if ids[0] < 0 or ids[-1] >= 2**64:
            raise ValueError("client ids must lie in [0, 2^64).")
        if not 1 <= num_summations <= 64:
            raise ValueError(f"num_summations must lie in [1, 64], got {num_summations}.")
        self.graph = choose_graph(ids, neighbours, rng=rng)
        holders = self.graph.degree
        if isinstance(threshold, bool) or not 2 <= threshold <= holders:
            raise ValueError(
                f"threshold must lie in [2, {holders}] (share holders per client: its "
                f"{self.graph.degree} neighbours), got {threshold}."
            )
        self.ids = tuple(ids)
        self.setup = SetupMessage(  # the session-wide fields; each client gets its own copy
            session=os.urandom(32),
            recipient=0,
            num_clients=len(ids),
            threshold=int(threshold),
            num_summations=int(num_summations),
            degree=self.graph.degree,
            consistency=int(bool(consistency)),
            graph_digest=crypto.id_digest(self.graph.ring),
            neighbours=(),
            points=(),
        )
        self.consistency = bool(consistency)
        self.threshold = int(threshold)
        self.num_summations = int(num_summations)
        self.rank = {c: i + 1 for i, c in enumerate(ids)}
        self.phase = "advertise"
        self.summation = -1
        self.keys: dict[int, AdvertiseKeys] = {}
        self._seen_keys: set[bytes] = set()
        self.session_id = b""
        self.share_inbox: dict[int, list[tuple[int, bytes]]] = {}
        self.share_senders: set[int] = set()
        self.incoming: dict[int, frozenset[int]] = {}
        self.eligible: tuple[int, ...] = ()
        self._eligible_set: frozenset[int] = frozenset()
        self.encoding: FixedPointEncoding | None = None
        self.context = b""  # the open summation's public-inputs digest (start_summation)
        self.inputs: dict[int, U64Array | U32Array] = {}
        self.survivors: tuple[int, ...] = ()
        self.dropped: tuple[int, ...] = ()
        self._survivor_set: frozenset[int] = frozenset()
        self._dropped_set: frozenset[int] = frozenset()
        self.responses: dict[int, UnmaskResponse] = {}
        self.results: list[SumResult] = []
        self.cheaters: set[int] = set()
        self.excluded: set[int] = set()  # dropped for cause from later summations
        self.reasons: dict[int, str] = {}
        self.digests: dict[tuple[int, int], bytes] = {}  # (dealer, holder) -> share digests
        self.dealt: dict[int, tuple[tuple[int, ...], tuple[bytes, ...], bytes]] = {}
        self.complaints: dict[int, set[int]] = {}  # sender -> holders that rejected its shares
        self.reports_dropped: set[int] = set()  # one of every reported pair (_resolve_reports)
        self.signatures: dict[int, bytes] = {}

    @property
    def session(self) -> bytes:
        """The session nonce carried by every message."""
        return self.setup.session

    def _require(self, phase: str, what: str) -> None:
        if self.phase != phase:
            raise MessageRejected(
                f"{what} arrived in the wrong round (server is in phase {self.phase!r})."
            )

    def _check_session(self, session: bytes) -> None:
        if session != self.session:
            raise MessageRejected("message for another session.")

    # ------------------------------------------------------------------ round 0
    def setup_messages(self) -> dict[int, dict[str, MessageValue]]:
        """Return each invited client's setup request: the session and its neighbourhood.

        O(k) per client (its neighbours and their Shamir points), O(n k) in all.
        """
        out: dict[int, dict[str, MessageValue]] = {}
        for client in self.ids:
            neighbours = self._neighbours_of(client)
            out[client] = replace(
                self.setup,
                recipient=client,
                neighbours=neighbours,
                points=tuple(self.rank[j] for j in neighbours),
            ).to_dict()
        return out

    def receive_advertise_keys(self, message: Mapping[str, Any]) -> None:
        """Accept one client's public keys (malformed, small-order or reused keys refused)."""
        msg = AdvertiseKeys.from_dict(message)
        self._require("advertise", "advertise-keys")
        self._check_session(msg.session)
        if msg.sender not in self.rank:
            raise MessageRejected(f"advertise-keys from unknown client {msg.sender}.")
        if msg.sender in self.keys:
            raise MessageRejected(f"advertise-keys from client {msg.sender} replayed.")
        size = crypto.KEY_BYTES
        if len(msg.mask_keys) != size * self.num_summations:
            raise MessageRejected(
                f"client {msg.sender} sent {len(msg.mask_keys)} bytes of mask keys, expected "
                f"{size * self.num_summations}."
            )
        if len(msg.seed_commitments) != size * self.num_summations:
            raise MessageRejected(
                f"client {msg.sender} sent {len(msg.seed_commitments)} bytes of seed "
                f"commitments, expected {size * self.num_summations}."
            )
        if len(msg.signing_key) != size:
            raise MessageRejected(
                f"client {msg.sender} sent a signing key of {len(msg.signing_key)} bytes, "
                f"expected {size} (every session: it signs the blame evidence)."
            )
        if len(msg.identity) > 64 or len(msg.identity_signature) not in (0, 64):
            raise MessageRejected(
                f"client {msg.sender} sent an identity of {len(msg.identity)} bytes (at most "
                f"64) or an identity signature of {len(msg.identity_signature)} (0 or 64)."
            )
        keys = [msg.channel_key] + [
            msg.mask_keys[size * s : size * (s + 1)] for s in range(self.num_summations)
        ]
        for key in keys:
            crypto.validate_public_key(key)
        normal = {crypto.normalise_public_key(key) for key in keys}
        if len(normal) != len(keys) or self._seen_keys & normal:
            raise MessageRejected(f"client {msg.sender} reuses a public key; rejected.")
        self._seen_keys.update(normal)
        self.keys[msg.sender] = msg

    def key_directory(self) -> dict[int, dict[str, MessageValue]]:
        """Close round 0; return each advertising client's key directory.

        A client receives how many clients advertised (with the digest of their ids) and the
        keys of itself and its neighbours only: O(k) per client and O(n k) per round (every
        client's keys on the complete graph and with a consistency round, whose signatures
        come from the whole session).

        Raises
        ------
        ProtocolAborted
            Fewer than ``threshold`` clients advertised keys.
        """
        self._require("advertise", "key-directory request")
        ids = tuple(sorted(self.keys))
        if len(ids) < self.threshold:
            raise ProtocolAborted(
                f"only {len(ids)} clients advertised keys, fewer than threshold {self.threshold}."
            )
        names = KeyDirectory(
            session=self.session,
            num_advertised=len(ids),
            advertised_digest=crypto.id_digest(ids),
            key_owners=(),
            channel_keys=(),
            mask_keys=(),
            signing_keys=(),
        )
        self.session_id = crypto.session_digest([self.setup.canonical(), names.canonical()])
        self.phase = "share"
        out: dict[int, dict[str, MessageValue]] = {}
        for client in ids:
            if self.consistency or self.graph.complete:
                owners = ids
            else:
                owners = tuple(
                    sorted(j for j in (*self.graph.neighbours(client), client) if j in self.keys)
                )
            out[client] = replace(
                names,
                key_owners=owners,
                channel_keys=tuple(self.keys[c].channel_key for c in owners),
                mask_keys=tuple(self.keys[c].mask_keys for c in owners),
                signing_keys=tuple(self.keys[c].signing_key for c in owners),
                identities=tuple(self.keys[c].identity for c in owners),
                identity_signatures=tuple(self.keys[c].identity_signature for c in owners),
            ).to_dict()
        return out

    # ------------------------------------------------------------------ round 1
    def receive_share_keys(self, message: Mapping[str, Any]) -> None:
        """Accept one client's encrypted shares, addressed to its neighbours."""
        msg = ShareKeys.from_dict(message)
        self._require("share", "share-keys")
        self._check_session(msg.session)
        if msg.sender not in self.keys:
            raise MessageRejected(f"share-keys from client {msg.sender}, who sent no keys.")
        if msg.sender in self.share_senders:
            raise MessageRejected(f"share-keys from client {msg.sender} replayed.")
        expected = {j for j in self._neighbours_of(msg.sender) if j in self.keys}
        addressed = set(msg.recipients)
        stray = sorted(addressed - expected)
        if stray:
            raise MessageRejected(
                f"client {msg.sender} addressed shares to {stray[:5]}, not neighbours that "
                "advertised keys."
            )
        omitted = sorted(expected - addressed)
        if omitted:
            # an omitted neighbour would mask with the sender one way only: a wrong sum
            raise MessageRejected(
                f"client {msg.sender}'s share-keys omits neighbours {omitted[:5]}; every "
                "neighbour that advertised keys must receive shares."
            )
        width = 2 * self.num_summations * DIGEST_BYTES
        if any(len(d) != width for d in msg.digests):
            raise MessageRejected(
                f"client {msg.sender}'s share digests must be {width} bytes per recipient."
            )
        if len(msg.signature) != crypto.SIGNATURE_BYTES:
            raise MessageRejected(f"client {msg.sender}'s share digests carry no signature.")
        # the signature is checked when it is needed as evidence (ShareRecovery), not here:
        # a holder checks the shares against the digests either way
        self.dealt[msg.sender] = (msg.recipients, msg.digests, msg.signature)
        self.share_senders.add(msg.sender)
        for recipient, blob, digest in zip(
            msg.recipients, msg.ciphertexts, msg.digests, strict=True
        ):
            self.share_inbox.setdefault(recipient, []).append((msg.sender, blob))
            self.digests[(msg.sender, recipient)] = digest

    # ------------------------------------------------------------------ round 2
    def start_summation(
        self, encoding: FixedPointEncoding, context: bytes = b""
    ) -> dict[int, dict[str, MessageValue]]:
        """Open the next summation; return the masked-input request of each eligible client.

        ``context``: the digest of the public inputs sent with this summation, as the clients
        bind their pairwise masks to it (:func:`~fa_hetdp.secagg.crypto.bind_mask_key`); the
        server removes a dropped client's masks with it.

        The first call closes the share-keys round. Eligible are the clients that shared
        keys (first summation) or whose inputs entered the previous sum: a client dropped
        in one summation stays dropped.

        Raises
        ------
        ProtocolAborted
            Fewer than ``threshold`` eligible clients, or no summation left.
        EncodingError
            ``encoding.max_clients`` is below the number of eligible clients.
        """
        if self.phase == "done":
            raise ProtocolAborted(f"the session carries only {self.num_summations} summations.")
        if self.phase == "share":
            self.eligible = tuple(sorted(self.share_senders))
            self.incoming = {
                c: frozenset(s for s, _ in self.share_inbox.get(c, [])) for c in self.eligible
            }
        elif self.phase == "ready":
            out = self.cheaters | self.excluded
            self.eligible = tuple(c for c in self.survivors if c not in out)
        else:
            raise MessageRejected(f"cannot start a summation in phase {self.phase!r}.")
        if self.summation + 1 >= self.num_summations:
            raise ProtocolAborted(f"the session carries only {self.num_summations} summations.")
        if len(self.eligible) < self.threshold:
            raise ProtocolAborted(
                f"{len(self.eligible)} clients remain, fewer than threshold {self.threshold}."
            )
        if encoding.max_clients < len(self.eligible):
            raise EncodingError(
                f"encoding admits {encoding.max_clients} summands, but {len(self.eligible)} "
                "clients take part."
            )
        self.summation += 1
        self.encoding = encoding
        self.context = context
        self.inputs = {}
        self.phase = "masked"
        first = self.summation == 0
        requests: dict[int, dict[str, MessageValue]] = {}
        empty: tuple[Any, ...] = ()
        eligible = self._eligible_set = frozenset(self.eligible)
        for client in self.eligible:
            inbox = [(s, b) for s, b in self.share_inbox.get(client, []) if s in eligible]
            requests[client] = MaskedInputRequest(
                session=self.session,
                summation=self.summation,
                recipient=client,
                scales=encoding.scales,
                bounds=encoding.bounds,
                max_clients=encoding.max_clients,
                modulus_bits=encoding.modulus_bits,
                sum_bounds=np.zeros(0) if encoding.sum_bounds is None else encoding.sum_bounds,
                senders=tuple(s for s, _ in inbox) if first else empty,
                ciphertexts=tuple(b for _, b in inbox) if first else empty,
                digests=tuple(self.digests[(s, client)] for s, _ in inbox) if first else empty,
            ).to_dict()
        if first:
            self.share_inbox = {}
        return requests

    def receive_masked_input(self, message: Mapping[str, Any]) -> None:
        """Accept one client's masked input for the open summation.

        A late input (after :meth:`unmask_request` declared the client dropped) is refused,
        and its self mask is never revealed, so it stays masked.
        """
        msg = MaskedInput.from_dict(message)
        self._check_session(msg.session)
        if self.phase != "masked" or msg.summation != self.summation:
            raise MessageRejected(
                f"masked input of client {msg.sender} for summation {msg.summation} arrived "
                f"in the wrong round (server: phase {self.phase!r}, summation "
                f"{self.summation}); the client counts as dropped."
            )
        if msg.sender not in self._eligible_set:
            raise MessageRejected(f"masked input from client {msg.sender}, not eligible.")
        if msg.sender in self.inputs:
            raise MessageRejected(f"masked input from client {msg.sender} replayed.")
        accused = set(msg.rejected)
        if accused and (self.summation != 0 or not accused <= self.incoming[msg.sender]):
            raise MessageRejected(
                f"client {msg.sender} reports shares of {sorted(accused)[:5]} it was not sent "
                "in this round."
            )
        if self.encoding is None or msg.vector.shape != (self.encoding.length,):
            raise MessageRejected(
                f"masked input of client {msg.sender} has shape {msg.vector.shape}, expected "
                f"({self.encoding.length if self.encoding else '?'},)."
            )
        word = np.uint64 if self.encoding.modulus_bits == 64 else np.uint32
        if msg.vector.dtype != word:
            raise MessageRejected(
                f"masked input of client {msg.sender} has {msg.vector.dtype} words, expected "
                f"{np.dtype(word)} (Z_2^{self.encoding.modulus_bits})."
            )
        self.inputs[msg.sender] = msg.vector
        if accused:  # it masked without them: they must drop (their masks with it never match)
            self.incoming[msg.sender] = self.incoming[msg.sender] - accused
            for j in accused:
                self.complaints.setdefault(j, set()).add(msg.sender)

    # ------------------------------------------------------------------ round 3
    def _resolve_reports(self) -> None:
        """Drop one client of every reported pair (holder, sender); name nobody.

        A holder that reports a sender's shares unreadable masked without it, the sender with
        it: one of the two must leave the session, and which one lied (or whether the route
        garbled them) is not known. Greedy vertex cover of the reports: the client party to
        the most reports leaves first (the sender on a tie), so one deviating client, whether
        it garbles its shares to many holders or reports many senders, costs the session
        itself and at most one honest client.
        """
        edges = {(h, j) for j, holders in self.complaints.items() for h in holders}
        while edges:
            degree: dict[int, int] = {}
            for h, j in edges:
                degree[h] = degree.get(h, 0) + 1
                degree[j] = degree.get(j, 0) + 1
            accused = {j for _, j in edges}
            out = max(sorted(degree), key=lambda c: (degree[c], c in accused))
            reporters = sorted(h for h, j in edges if j == out)
            reported = sorted(j for h, j in edges if h == out)
            why = []
            if reporters:
                why.append(f"holders {reporters[:5]} could not open its shares (unreadable)")
            if reported:
                why.append(f"it reported the shares of {reported[:5]} unreadable")
            self.reports_dropped.add(out)
            self.excluded.add(out)
            self.reasons.setdefault(
                out,
                "; ".join(why) + "; dropped without blame (one of each reporting pair must "
                "leave: their masks no longer cancel; the sender, the holder or the route may "
                "be at fault)",
            )
            edges = {(h, j) for h, j in edges if out not in (h, j)}

    def _close_masked(self) -> None:
        if self.summation == 0:
            self._resolve_reports()
        survivors = tuple(sorted(c for c in self.inputs if c not in self.reports_dropped))
        if len(survivors) < self.threshold:
            self.phase = "aborted"
            raise ProtocolAborted(
                f"summation {self.summation}: {len(survivors)} masked inputs, fewer than "
                f"threshold {self.threshold}."
            )
        self._check_holders(frozenset(survivors))
        self.survivors, self._survivor_set = survivors, frozenset(survivors)
        self.dropped = tuple(sorted(set(self.incoming) - self._survivor_set))
        self._dropped_set = frozenset(self.dropped)
        self.responses = {}
        self.signatures = {}

    def _check_holders(self, survivors: frozenset[int]) -> None:
        """Abort unless every secret the unmask round needs has ``threshold`` holders left.

        A survivor's self-mask seed and a dropped client's mask key are shared among the
        owner's neighbours, never the owner: each needs ``threshold`` surviving neighbours
        (the clients refuse an unmask request otherwise, :mod:`.refusals`). Checked here so
        that no request is sent that the survivors must refuse.
        """
        if self.graph.complete:  # a survivor has len(survivors) - 1 holders, a dropped one more
            short = [(c, len(survivors) - 1) for c in sorted(survivors)]
        else:
            alive = set(survivors)
            owners = alive | {j for i in survivors for j in self.incoming.get(i, frozenset())}
            short = [(c, len(self._survivor_neighbours(c, alive))) for c in sorted(owners)]
        short = [(c, h) for c, h in short if h < self.threshold]
        if short:
            client, holders = short[0]
            self.phase = "aborted"
            raise ProtocolAborted(
                f"summation {self.summation}: client {client}'s masks have {holders} surviving "
                f"share holders, fewer than threshold {self.threshold} ({len(short)} such "
                "clients; a client's own share does not count): the sum cannot be unmasked."
            )

    def consistency_request(self) -> dict[str, MessageValue]:
        """Close the masked-input round; return the survivor list to sign (to every survivor).

        Only in sessions with a consistency round (``consistency=True``).

        Raises
        ------
        ProtocolAborted
            Fewer than ``threshold`` masked inputs arrived.
        """
        self._require("masked", "consistency request")
        if not self.consistency:
            raise MessageRejected("this session has no consistency round.")
        self._close_masked()
        self.phase = "consistency"
        return ConsistencyRequest(
            session=self.session, summation=self.summation, survivors=self.survivors
        ).to_dict()

    def receive_consistency(self, message: Mapping[str, Any]) -> None:
        """Accept one survivor's signature of the survivor list (invalid ones refused)."""
        msg = ConsistencyResponse.from_dict(message)
        self._check_session(msg.session)
        if self.phase != "consistency" or msg.summation != self.summation:
            raise MessageRejected(f"signature of client {msg.sender} arrived in the wrong round.")
        if msg.sender not in self._survivor_set or msg.sender in self.signatures:
            raise MessageRejected(f"signature from client {msg.sender} unexpected or replayed.")
        payload = consistency_payload(self.session_id, self.summation, self.survivors)
        if not crypto.verify_signature(self.keys[msg.sender].signing_key, payload, msg.signature):
            raise MessageRejected(f"client {msg.sender}'s signature does not verify.")
        self.signatures[msg.sender] = msg.signature

    def unmask_requests(self) -> dict[int, dict[str, MessageValue]]:
        """Close the masked-input (or consistency) round; return each survivor's unmask request.

        A survivor's request names the survivors and the dropped among itself and its
        neighbours (O(k); everyone on the complete graph) and counts all survivors; with a
        consistency round it carries the signatures, and each client unmasks only if
        ``threshold`` of them verify.

        Raises
        ------
        ProtocolAborted
            Fewer than ``threshold`` masked inputs (or signatures) arrived.
        """
        if self.consistency:
            self._require("consistency", "unmask request")
            if len(self.signatures) < self.threshold:
                self.phase = "aborted"
                raise ProtocolAborted(
                    f"summation {self.summation}: {len(self.signatures)} signatures on the "
                    f"survivor list, fewer than threshold {self.threshold}."
                )
        else:
            self._require("masked", "unmask request")
            self._close_masked()
        self.phase = "unmask"
        signers = tuple(sorted(self.signatures))
        template = UnmaskRequest(
            session=self.session,
            summation=self.summation,
            survivors=self.survivors,
            dropped=self.dropped,
            num_survivors=len(self.survivors),
            signers=signers,
            signatures=tuple(self.signatures[c] for c in signers),
        )
        if self.graph.complete:  # every client's neighbourhood is the whole session
            return {client: template.to_dict() for client in self.survivors}
        survivors, dropped = self._survivor_set, self._dropped_set
        out: dict[int, dict[str, MessageValue]] = {}
        for client in self.survivors:
            neighbours = self.graph.neighbours(client)
            out[client] = replace(
                template,
                survivors=tuple(sorted((client, *(j for j in neighbours if j in survivors)))),
                dropped=tuple(j for j in neighbours if j in dropped),
            ).to_dict()
        return out

    def receive_unmask(self, message: Mapping[str, Any]) -> None:
        """Accept one survivor's shares."""
        msg = UnmaskResponse.from_dict(message)
        self._check_session(msg.session)
        if self.phase != "unmask" or msg.summation != self.summation:
            raise MessageRejected(
                f"unmask response of client {msg.sender} arrived in the wrong round."
            )
        if msg.sender not in self._survivor_set:
            raise MessageRejected(f"unmask response from non-survivor {msg.sender}.")
        if msg.sender in self.responses:
            raise MessageRejected(f"unmask response from client {msg.sender} replayed.")
        peers = set(self._neighbours_of(msg.sender))
        for kind, owners, allowed in (
            ("seed", msg.seed_owners, self._survivor_set),
            ("key", msg.key_owners, self._dropped_set),
        ):
            wrong = sorted(set(owners) - (allowed & peers))
            if wrong:
                raise MessageRejected(f"client {msg.sender} sent a {kind} share of {wrong[:5]}.")
        for name, table in (("seed", msg.seed_shares), ("key", msg.key_shares)):
            if table.size and int(table.max()) >= PRIME:
                raise MessageRejected(
                    f"client {msg.sender} sent a {name} share {int(table.max())} outside "
                    f"[0, {PRIME})."
                )
        self.responses[msg.sender] = msg

    def finish_summation(self) -> SumResult:
        """Close the unmask round, remove all masks and return the decoded sum.

        Raises
        ------
        ProtocolAborted
            Some survivor's seed or some dropped client's mask key has fewer than
            ``threshold`` shares, or a reconstructed key does not match its public key.
        """
        self._require("unmask", "finish")
        if self.encoding is None:
            raise ProtocolAborted("no encoding for the open summation.")
        s, length = self.summation, self.encoding.length
        recovery = ShareRecovery(self)
        seeds = recovery.reconstruct(self.survivors, "seed")
        survivors = set(self.survivors)
        affected = [
            j
            for j in self.dropped
            if any(
                j in self.incoming.get(i, frozenset())
                for i in self._survivor_neighbours(j, survivors)
            )
        ]
        keys = recovery.reconstruct(affected, "key")
        total = np.zeros(length, dtype=np.uint64)
        for client in self.survivors:
            total += self.inputs[client]
        total = crypto.mask_sum(total, [], [seeds[c] for c in self.survivors])
        size = crypto.KEY_BYTES
        for j, private in keys.items():
            peers = [
                i
                for i in self._survivor_neighbours(j, survivors)
                if j in self.incoming.get(i, frozenset())
            ]
            publics = [self.keys[i].mask_keys[size * s : size * (s + 1)] for i in peers]
            agreed = crypto.agree_many(private, publics)
            keys_ij = [
                crypto.bind_mask_key(
                    crypto.derive_mask_key(shared, self.session_id, i, j, s), self.context
                )
                for i, shared in zip(peers, agreed, strict=True)
            ]  # client i added +PRG(m_ij) for j > i: remove it
            pairs = list(zip(peers, keys_ij, strict=True))
            add, sub = [k for i, k in pairs if j < i], [k for i, k in pairs if j > i]
            total = crypto.mask_sum(total, add, sub)
        total = self.encoding.reduce(total)  # Z_2^64 -> Z_2^m (m divides: the same sum)
        result = SumResult(
            summation=s,
            sum=self.encoding.decode(total, len(self.survivors)),
            raw=total,
            survivors=self.survivors,
            dropped=tuple(sorted(set(self.incoming) - survivors)),
            max_error=self.encoding.max_decoding_error(len(self.survivors)),
            cheaters=tuple(sorted(self.cheaters)),
            reasons=dict(self.reasons),
        )
        self.results.append(result)
        self.responses = {}
        self.inputs = {}
        self.phase = "ready" if s + 1 < self.num_summations else "done"
        return result

    def _neighbours_of(self, client: int) -> tuple[int, ...]:
        if self.graph.complete:
            return tuple(c for c in self.ids if c != client)
        return self.graph.neighbours(client)

    def _survivor_neighbours(self, client: int, survivors: set[int]) -> list[int]:
        if self.graph.complete:
            return sorted(survivors - {client})
        return [i for i in self.graph.neighbours(client) if i in survivors]
