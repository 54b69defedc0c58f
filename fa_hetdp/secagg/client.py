"""The client's state machine (Bonawitz et al., CCS 2017, Fig. 4; SecAgg+ graphs).

One :class:`SecAggClient` per client and session. Each round is one method that takes the
server's request as a plain dictionary and returns the reply as a plain dictionary, so a
transport can drive it one round at a time from separate handlers. Between rounds the state
can be kept in the object (it pickles) or written out with :meth:`SecAggClient.to_bytes`
and read back with :meth:`SecAggClient.from_bytes` (JSON; secret material included, so keep
it where the client keeps its own secrets).

A request that is malformed, for another session, replayed, or for the wrong round raises
:class:`~secagg.errors.MessageRejected` and leaves the state unchanged.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from . import crypto
from .consistency import check_safe, check_signatures, consistency_payload
from .encoding import FixedPointEncoding, FloatArray
from .errors import EncodingError, MessageRejected, ProtocolAborted, UnmaskRefused
from .evidence import dealer_payload, share_digests, unmask_payload
from .identity import Roster, check_identities, identity_payload
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
from .params import THREAT_MODELS, ThreatModel
from .refusals import check_directory, check_unmask_request
from .shamir import LIMBS, PRIME, share
from .state import dump_client, load_client

__all__ = ["SecAggClient", "share_aad"]


def share_aad(session_id: bytes, sender: int, recipient: int) -> bytes:
    """Associated data of a share ciphertext: domain, round, session, sender, recipient."""
    return crypto.DOMAIN + b"/share-keys" + session_id + struct.pack("<QQ", sender, recipient)


class SecAggClient:
    """One client's side of a secure-aggregation session.

    Parameters
    ----------
    client_id : int
        This client's id, as listed by the server's setup message.
    threat_model : {"honest-but-curious", "malicious-server"}
        The client's own choice, whatever the server says: with ``"malicious-server"`` it
        joins only sessions with a consistency round on the complete graph whose threshold
        is at least :func:`secagg.params.min_signatures` of the session size it can verify
        (the key directory: every key is shown on the complete graph), and unmasks only
        after that many valid signatures on the survivor list it was shown.
    gamma : float
        Fraction of corrupt clients the client guards against, whatever the server says:
        with ``"malicious-server"`` the threshold must be at least
        :func:`secagg.params.min_signatures` ``(n, gamma)``; with
        ``"honest-but-curious"`` and ``gamma > 0`` at least
        :func:`secagg.params.min_private_threshold` (no coalition of ``gamma n`` corrupt
        clients among its share holders reaches ``t`` except with probability 2^-40).
        Checked at the setup, at the key directory (n counted) and at every unmask request.
    identity : bytes, optional
        This client's raw Ed25519 identity private key (:mod:`fa_hetdp.secagg.identity`);
        signs its round-0 keys. Required with ``roster``.
    roster : Roster, optional
        The federation's roster. With one, the client signs its round-0 keys and refuses a
        key directory with any key not signed by the roster member its owner claims to be.
        Required with ``"malicious-server"``.

    Notes
    -----
    Rounds, in order (each takes and returns a ``dict``):

    0. :meth:`advertise_keys` (setup) -> advertise-keys
    1. :meth:`share_keys` (key directory) -> share-keys
    2. :meth:`masked_input` (masked-input request, values, rng) -> masked input, then
    3. :meth:`unmask` (unmask request) -> unmask response;
       rounds 2-3 repeat once per summation of the session.
    """

    def __init__(
        self,
        client_id: int,
        *,
        threat_model: ThreatModel = "honest-but-curious",
        gamma: float = 0.0,
        identity: bytes | None = None,
        roster: Roster | None = None,
    ) -> None:
        if isinstance(client_id, bool) or not 0 <= int(client_id) < 2**64:
            raise ValueError(f"client_id must lie in [0, 2^64), got {client_id}.")
        if threat_model not in THREAT_MODELS:
            raise ValueError(f"threat_model must be one of {THREAT_MODELS}, got {threat_model!r}.")
        if not 0.0 <= gamma < 1.0:
            raise ValueError(f"gamma must lie in [0, 1), got {gamma}.")
        if threat_model == "malicious-server" and roster is None:
            raise ValueError(
                "threat model malicious-server needs a roster of identity keys (roster=, "
                "distributed out of band) and this client's identity key (identity=): "
                "without them the server can substitute every peer's keys. Make them with "
                "python -m fa_hetdp.secagg.identity."
            )
        self.identity_name = ""
        self._identity: Ed25519PrivateKey | None = None  # in memory only, until round 0
        if roster is not None:
            if identity is None:
                raise ValueError("a roster needs this client's identity key (identity=).")
            key = Ed25519PrivateKey.from_private_bytes(identity)  # loaded once: it signs
            name = roster.member_of(key.public_key().public_bytes_raw())
            if name is None:
                raise ValueError(
                    f"this client's identity key is not on the roster (SHA-256 "
                    f"{roster.sha256}); ask for the roster that lists it."
                )
            self.identity_name, self._identity = name, key
        self.roster = roster
        self.client_id = int(client_id)
        self.threat_model: ThreatModel = threat_model
        self.gamma = float(gamma)
        self.consistency = 0
        self.signing_sk = b""
        self.signing_pk = b""
        self.identity_signature = b""
        self.peer_signing_pks: dict[int, bytes] = {}
        self.signed: dict[int, tuple[int, ...]] = {}
        self.phase = "new"
        self.session = b""
        self.num_clients = 0
        self.threshold = 0
        self.num_summations = 0
        self.degree = 0
        self.graph_digest = b""
        self.neighbours: tuple[int, ...] = ()
        self.points: dict[int, int] = {}
        self.channel_sk = b""
        self.mask_sks: list[bytes] = []
        self.channel_pk = b""
        self.mask_pks = b""
        self.session_id = b""
        self.num_advertised = 0
        self.advertised_digest = b""
        self.peer_mask_pks: dict[int, bytes] = {}
        self.receive_keys: dict[int, bytes] = {}
        self.seeds: list[bytes] = []
        self.held_shares: dict[int, bytes] = {}
        self.alive: tuple[int, ...] = ()
        self.pair_keys: dict[int, list[bytes]] = {}
        self.next_summation = 0
        self.pending_unmask: int | None = None
        self.dropped_peers: set[int] = set()
        self._loaded: dict[bytes, crypto.PrivateKey] = {}  # in memory only
        self._signing_key: Ed25519PrivateKey | None = None  # in memory only

    # ------------------------------------------------------------------ helpers
    def __getstate__(self) -> dict[str, Any]:
        """Pickle without the loaded key objects and the identity key (round 0 only)."""
        skip = ("_loaded", "_identity", "_signing_key")
        return {k: v for k, v in self.__dict__.items() if k not in skip}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._loaded = {}
        self._identity = None
        self._signing_key = None

    def _private(self, raw: bytes) -> bytes | crypto.PrivateKey:
        """Return the loaded key object of a private key made in round 0, else the raw bytes.

        Loading costs one scalar multiplication; a client restored from bytes loads again.
        """
        return self._loaded.get(raw, raw)

    def _sign(self, message: bytes) -> bytes:
        """Sign with the round-0 signing key (loaded once per process, like the X25519 keys)."""
        key = self._signing_key
        if key is None:
            key = self._signing_key = Ed25519PrivateKey.from_private_bytes(self.signing_sk)
        return key.sign(message)

    @property
    def complete(self) -> bool:
        """Whether the session uses the complete graph (every client a neighbour)."""
        return self.degree == self.num_clients - 1

    def _require(self, phase: str, what: str) -> None:
        if self.phase != phase:
            raise MessageRejected(
                f"client {self.client_id}: {what} arrived in the wrong round "
                f"(client is in phase {self.phase!r})."
            )

    def _check_session(self, session: bytes) -> None:
        if session != self.session:
            raise MessageRejected(
                f"client {self.client_id}: message for another session "
                f"({session.hex()[:16]}... != {self.session.hex()[:16]}...)."
            )

    # ------------------------------------------------------------------ round 0
    def advertise_keys(self, setup: Mapping[str, Any]) -> dict[str, MessageValue]:
        """Round 0: read the session parameters, create key pairs, return the public keys.

        Creates one X25519 key pair for the share channel and one per summation for the
        pairwise masks (independent keys per summation: revealing the mask key of a client
        that drops in a later summation must not unmask its earlier inputs).
        """
        msg = SetupMessage.from_dict(setup)
        self._require("new", "setup")
        if msg.recipient != self.client_id:
            raise MessageRejected(
                f"client {self.client_id}: setup addressed to client {msg.recipient}."
            )
        holders = len(msg.neighbours)
        if not 2 <= msg.threshold <= holders:
            raise MessageRejected(
                f"threshold must lie in [2, {holders}] (share holders: the neighbours), got "
                f"{msg.threshold}."
            )
        # on the complete graph n = len(neighbours) + 1 is counted, not merely stated
        check_safe(self, msg.consistency, msg.complete, msg.threshold, msg.num_clients, msg.degree)
        channel_sk, channel_pk, channel_key = crypto.generate_loaded_keypair()
        mask_pairs = [crypto.generate_loaded_keypair() for _ in range(msg.num_summations)]
        seeds = [crypto.random_bytes(crypto.KEY_BYTES) for _ in range(msg.num_summations)]
        commitments = b"".join(
            crypto.commit_seed(msg.session, self.client_id, s, seed) for s, seed in enumerate(seeds)
        )
        # every session: it signs the share digests and unmask responses (blame evidence),
        # and, with a consistency round, the survivor lists
        signing_sk, signing_pk, signing_key = crypto.generate_loaded_signing_key()
        self.session, self.num_clients, self.graph_digest = (
            msg.session,
            msg.num_clients,
            msg.graph_digest,
        )
        self.threshold, self.num_summations, self.degree = (
            msg.threshold,
            msg.num_summations,
            msg.degree,
        )
        self.neighbours = msg.neighbours
        self.points = dict(zip(msg.neighbours, msg.points, strict=True))
        self.consistency, self.signing_sk, self.seeds = msg.consistency, signing_sk, seeds
        self.signing_pk, self._signing_key = signing_pk, signing_key
        self.channel_sk, self.channel_pk = channel_sk, channel_pk
        self.mask_sks = [sk for sk, _, _ in mask_pairs]
        self.mask_pks = b"".join(pk for _, pk, _ in mask_pairs)
        self._loaded = {channel_sk: channel_key} | {sk: key for sk, _, key in mask_pairs}
        member, signature = b"", b""
        if self.roster is not None:  # the identity key vouches for the round-0 keys
            member = self.identity_name.encode()
            payload = identity_payload(
                self.roster.digest,
                self._setup_canonical(),
                self.client_id,
                member,
                channel_pk,
                self.mask_pks,
                signing_pk,
            )
            if self._identity is None:
                raise ValueError(
                    f"client {self.client_id}: its identity key is held in memory only; a "
                    "client restored from its state before round 0 cannot sign its keys."
                )
            signature = self._identity.sign(payload)
        self.identity_signature = signature
        self._identity = None  # used once: the state written between rounds never holds it
        self.phase = "advertised"
        return AdvertiseKeys(
            session=self.session,
            sender=self.client_id,
            channel_key=self.channel_pk,
            mask_keys=self.mask_pks,
            seed_commitments=commitments,
            signing_key=signing_pk,
            identity=member,
            identity_signature=signature,
        ).to_dict()

    @property
    def session_size(self) -> int:
        """The session size n from the key directory: the clients that advertised keys.

        On the complete graph it is counted (every advertised key is shown); on a sparse
        graph it is the directory's count, bound with the digest of the advertised ids into
        the session id, so every neighbour that shares keys with this client holds the same
        n (a different one fails the share channel). Never the setup's or a step's number.
        """
        return self.num_advertised

    # ------------------------------------------------------------------ round 1
    def share_keys(self, directory: Mapping[str, Any]) -> dict[str, MessageValue]:
        """Round 1: check the key directory, secret-share the mask keys and self-mask seeds.

        Each neighbour that advertised keys receives, encrypted under AES-GCM with a key
        derived from the channel key agreement, its Shamir shares of this client's mask
        private keys and self-mask seeds (one of each per summation).

        Raises
        ------
        MessageRejected
            Wrong session or round, own keys misreported, malformed, small-order or
            duplicate neighbour keys, keys of clients that are not neighbours, a count of
            advertised clients that the directory contradicts.
        ProtocolAborted
            Fewer than ``threshold`` share holders advertised keys.
        """
        msg = KeyDirectory.from_dict(directory)
        self._require("advertised", "key directory")
        self._check_session(msg.session)
        me = self.client_id
        index, neighbours = check_directory(self, msg)
        if self.roster is not None:  # every key shown signed by its owner's roster member
            check_identities(
                self.roster,
                self.identity_name,
                me,
                self._setup_canonical(),
                msg,
                signed=(self.signing_pk, self.identity_signature) if self.signing_pk else None,
            )
        signing: dict[int, bytes] = {}
        # n is counted on the complete graph (check_directory), bound into the session id else
        n = msg.num_advertised
        check_safe(self, self.consistency, self.complete, self.threshold, n, self.degree)
        if self.consistency:
            for j, p in index.items():
                if len(msg.signing_keys[p]) != crypto.KEY_BYTES:
                    raise MessageRejected(f"client {j}'s signing key is malformed.")
                signing[j] = msg.signing_keys[p]
        seen = {
            crypto.normalise_public_key(k)
            for k in (self.channel_pk, *self._split_mask_keys(self.mask_pks))
        }
        peer_mask: dict[int, bytes] = {}
        channel_keys: list[bytes] = []
        shown: list[bytes] = []  # every neighbour's keys, in order
        size, blob = crypto.KEY_BYTES, crypto.KEY_BYTES * self.num_summations
        for j in neighbours:
            row = index[j]
            ck, mks = msg.channel_keys[row], msg.mask_keys[row]
            if len(mks) != blob:
                self._split_mask_keys(mks)  # raises, naming the length
            shown.append(ck)
            if blob == size:
                shown.append(mks)
            else:
                shown += self._split_mask_keys(mks)
            peer_mask[j] = mks
            channel_keys.append(ck)
        norms = crypto.normalised_public_keys(shown)  # validated: large order, 32 bytes
        if len(seen.union(norms)) != len(seen) + len(norms):  # find who reuses a key
            per = 1 + self.num_summations
            for p, norm in enumerate(norms):
                if norm in seen:
                    j = neighbours[p // per]
                    raise MessageRejected(f"client {j} reuses a public key; rejected.")
                seen.add(norm)
        session_id = crypto.session_digest([self._setup_canonical(), msg.canonical()])
        # Shares go to the neighbours only: a client's own share never counts toward t.
        points = [self.points[h] for h in neighbours]
        body = share([*self.mask_sks, *self.seeds], points, self.threshold).tobytes()
        stride = len(body) // len(neighbours)
        agreed = crypto.agree_many(self._private(self.channel_sk), channel_keys, validated=True)
        aad = share_aad(session_id, me, 0)[:-8]  # + the recipient, below
        channel = crypto.derive_channel_keys_many(agreed, session_id, me, neighbours)
        send_keys = [send for send, _ in channel]
        receive_keys = {j: receive for j, (_, receive) in zip(neighbours, channel, strict=True)}
        plaintexts, aads, digests = [], [], []
        for h, holder in enumerate(neighbours):
            pair = struct.pack("<QQ", me, holder)
            dealt = body[h * stride : (h + 1) * stride]
            plaintexts.append(pair + dealt)
            aads.append(aad + pair[8:])
            digests.append(share_digests(session_id, me, holder, dealt))
        ciphertexts = crypto.seal_many(send_keys, plaintexts, aads)
        recipients = neighbours
        signature = self._sign(dealer_payload(session_id, me, recipients, digests))
        self.session_id = session_id
        self.num_advertised, self.advertised_digest = msg.num_advertised, msg.advertised_digest
        self.peer_mask_pks, self.receive_keys = peer_mask, receive_keys
        self.peer_signing_pks = signing
        self.held_shares = {}
        self.phase = "shared"
        return ShareKeys(
            session=self.session,
            sender=me,
            recipients=tuple(recipients),
            ciphertexts=tuple(ciphertexts),
            digests=tuple(digests),
            signature=signature,
        ).to_dict()

    def _split_mask_keys(self, blob: bytes) -> list[bytes]:
        size = crypto.KEY_BYTES
        if len(blob) != size * self.num_summations:
            raise MessageRejected(
                f"mask keys must be {self.num_summations} x {size} bytes, got {len(blob)}."
            )
        return [blob[size * s : size * (s + 1)] for s in range(self.num_summations)]

    def _setup_canonical(self) -> bytes:
        return SetupMessage(
            session=self.session,
            recipient=self.client_id,
            num_clients=self.num_clients,
            threshold=self.threshold,
            num_summations=self.num_summations,
            degree=self.degree,
            consistency=self.consistency,
            graph_digest=self.graph_digest,
            neighbours=(),
            points=(),
        ).canonical()

    # ------------------------------------------------------------------ round 2
    def masked_input(
        self,
        request: Mapping[str, Any],
        values: FloatArray,
        *,
        rng: np.random.Generator,
        context: bytes = b"",
    ) -> dict[str, MessageValue]:
        """Round 2: encode ``values`` and return them masked (once per summation).

        ``y = encode(values) + PRG(b_s) + sum_{j > i} PRG(m_ijs) - sum_{j < i} PRG(m_ijs)``
        in Z_{2^64}, over the neighbours ``j`` whose shares arrived (Bonawitz et al., Sec. 4).
        The first request of the session delivers those shares; they are decrypted and
        checked here.

        Parameters
        ----------
        request : mapping
            The server's masked-input request for this client.
        values : FloatArray, shape (d,)
            This client's float64 input, within the request's per-client bounds.
        rng : numpy.random.Generator
            Source of the stochastic rounding (not of any mask).
        context : bytes
            The digest of the summation's public inputs as this client received them (the
            server's broadcast): every pairwise mask is bound to it
            (:func:`~fa_hetdp.secagg.crypto.bind_mask_key`), so the sum decodes only if every
            survivor was shown the same inputs. Empty: no binding.

        Raises
        ------
        MessageRejected
            Wrong session, recipient, round or summation; replayed, tampered or misaddressed
            share ciphertexts.
        EncodingError
            ``values`` of the wrong length or dtype, non-finite, or beyond the stated bounds.
        ProtocolAborted
            Fewer than ``threshold`` share holders delivered shares.
        """
        msg = MaskedInputRequest.from_dict(request)
        self._check_session(msg.session)
        if msg.recipient != self.client_id:
            raise MessageRejected(
                f"client {self.client_id}: request addressed to client {msg.recipient}."
            )
        self._require("shared", "masked-input request")
        if msg.summation != self.next_summation or msg.summation >= self.num_summations:
            raise MessageRejected(
                f"client {self.client_id}: masked-input request for summation "
                f"{msg.summation} arrived in the wrong round (expected {self.next_summation})."
            )
        try:
            encoding = FixedPointEncoding(
                scales=msg.scales,
                bounds=msg.bounds,
                max_clients=msg.max_clients,
                modulus_bits=msg.modulus_bits,
                sum_bounds=msg.sum_bounds if msg.sum_bounds.size else None,
            )
        except EncodingError as exc:
            raise MessageRejected(f"request carries an unusable encoding: {exc}") from None
        rejected: tuple[int, ...] = ()
        if msg.summation == 0:
            held, alive, rejected = self._open_shares(msg)
        elif msg.ciphertexts or msg.senders:
            raise MessageRejected("share ciphertexts replayed after the first summation.")
        else:
            held, alive = self.held_shares, self.alive
        encoded = encoding.encode(values, rng=rng)
        pair_keys = self.pair_keys or self._derive_pair_keys(alive)
        s = msg.summation
        me = self.client_id  # + PRG(b_s) + PRG(m_ijs) for j > i, - PRG(m_ijs) for j < i

        def bound(j: int) -> bytes:
            return crypto.bind_mask_key(pair_keys[j][s], context)

        add = [self.seeds[s], *(bound(j) for j in alive if j > me)]
        total = crypto.mask_sum(encoded, add, [bound(j) for j in alive if j < me])
        vector = total if encoding.modulus_bits == 64 else total.astype(np.uint32)  # mod 2^32
        self.held_shares, self.alive, self.pair_keys = held, alive, pair_keys
        self.next_summation = s + 1
        self.pending_unmask = s
        return MaskedInput(
            session=self.session,
            sender=self.client_id,
            summation=s,
            vector=vector,
            rejected=rejected,
        ).to_dict()

    def _open_shares(
        self, msg: MaskedInputRequest
    ) -> tuple[dict[int, bytes], tuple[int, ...], tuple[int, ...]]:
        """Open the shares addressed to this client; return ``(held, alive, rejected)``.

        A sender whose ciphertext fails authentication, whose plaintext is malformed or
        holds values outside ``[0, p)``, or whose shares differ from the digests it signed
        (as forwarded) is rejected: this client masks without it and reports it, so the
        server drops that sender instead of this client dropping out. A sender that is not
        a neighbour which advertised keys is a malformed request (refused whole).
        """
        held = dict(self.held_shares)
        secrets = 2 * self.num_summations
        expected = secrets * LIMBS * 4
        aad = share_aad(self.session_id, 0, 0)[:-16]  # + sender, recipient
        me = struct.pack("<Q", self.client_id)
        rejected: list[int] = []
        for sender in msg.senders:
            if sender not in self.receive_keys:
                raise MessageRejected(
                    f"client {self.client_id}: shares from {sender}, not a neighbour that "
                    "advertised keys."
                )
        for sender, blob, digest in zip(msg.senders, msg.ciphertexts, msg.digests, strict=True):
            pair = struct.pack("<Q", sender) + me
            try:
                plaintext = crypto.open_sealed(self.receive_keys[sender], blob, aad + pair)
            except MessageRejected:
                rejected.append(sender)
                continue
            body = plaintext[16:]
            if len(plaintext) != 16 + expected or plaintext[:16] != pair:
                rejected.append(sender)
                continue
            if share_digests(self.session_id, sender, self.client_id, body) != digest:
                rejected.append(sender)
                continue
            held[sender] = body
        opened = [s for s in msg.senders if s in held and s not in self.held_shares]
        if opened:  # every share must lie in [0, p): one vectorised pass, then who is out
            table = np.frombuffer(b"".join(held[s] for s in opened), dtype="<u4")
            over = table.reshape(len(opened), -1).max(axis=1) >= PRIME
            for sender in np.asarray(opened)[over].tolist():
                del held[sender]
                rejected.append(int(sender))
        alive = tuple(sorted(set(msg.senders) - set(rejected)))
        if len(alive) < self.threshold:
            raise ProtocolAborted(
                f"client {self.client_id}: usable shares arrived from {len(alive)} neighbours, "
                f"fewer than threshold {self.threshold}."
            )
        return held, alive, tuple(sorted(rejected))

    def _derive_pair_keys(self, alive: tuple[int, ...]) -> dict[int, list[bytes]]:
        keys: dict[int, list[bytes]] = {j: [] for j in alive}
        size = crypto.KEY_BYTES
        for s in range(self.num_summations):
            publics = [self.peer_mask_pks[j][size * s : size * (s + 1)] for j in alive]
            agreed = crypto.agree_many(self._private(self.mask_sks[s]), publics, validated=True)
            derived = crypto.derive_mask_keys(agreed, self.session_id, self.client_id, alive, s)
            for j, key in zip(alive, derived, strict=True):
                keys[j].append(key)
        return keys

    # ------------------------------------------------------------------ consistency
    def sign_survivors(self, request: Mapping[str, Any]) -> dict[str, MessageValue]:
        """Consistency round (malicious-server sessions): sign the survivor list shown.

        Signs once per summation (Bonawitz et al., CCS 2017, Sec. 6); the list must include
        this client and name only clients of its key directory.

        Raises
        ------
        MessageRejected
            No consistency round in this session, wrong session or summation, a second
            list for the same summation, or a list without this client.
        """
        msg = ConsistencyRequest.from_dict(request)
        self._check_session(msg.session)
        self._require("shared", "consistency request")
        me = self.client_id
        if not self.consistency:
            raise MessageRejected(f"client {me}: this session has no consistency round.")
        if self.pending_unmask is None or msg.summation != self.pending_unmask:
            raise MessageRejected(
                f"client {me}: consistency request for summation {msg.summation} arrived in "
                f"the wrong round (awaiting {self.pending_unmask})."
            )
        if msg.summation in self.signed:
            raise MessageRejected(
                f"client {me}: already signed a list for summation {msg.summation}."
            )
        survivors = tuple(sorted(msg.survivors))
        if me not in survivors or not set(survivors) <= self.peer_signing_pks.keys():
            raise MessageRejected(f"client {me}: survivor list omits it or names unknown ids.")
        payload = consistency_payload(self.session_id, msg.summation, survivors)
        signature = self._sign(payload)
        self.signed[msg.summation] = survivors
        return ConsistencyResponse(
            session=self.session, sender=me, summation=msg.summation, signature=signature
        ).to_dict()

    # ------------------------------------------------------------------ round 3
    def unmask(self, request: Mapping[str, Any]) -> dict[str, MessageValue]:
        """Round 3: reveal shares that let the server remove the masks of this summation.

        For every survivor that is a share holder's peer: the share of its self-mask seed
        of this summation; for every dropped peer: the share of its mask key of this
        summation. Keys are independent per summation, so no server ever holds both secrets
        of one client and summation.

        Raises
        ------
        UnmaskRefused
            The request lists this client as dropped, names a peer as both survivor and
            dropped, names unknown or duplicate ids, lists as survivor a peer declared
            dropped earlier, or leaves fewer than ``threshold`` survivors (overall or among
            this client's share holders).
        MessageRejected
            Wrong session, or no masked input of this summation awaits unmasking.
        """
        msg = UnmaskRequest.from_dict(request)
        self._check_session(msg.session)
        self._require("shared", "unmask request")
        if self.pending_unmask is None or msg.summation != self.pending_unmask:
            raise MessageRejected(
                f"client {self.client_id}: unmask request for summation {msg.summation} "
                f"arrived in the wrong round (awaiting {self.pending_unmask})."
            )
        survivor_set, dropped_set = check_unmask_request(self, msg)
        me = self.client_id
        # the node's own floor once more, on the n it counted (the state is the client's own)
        try:
            n = self.num_advertised
            check_safe(self, self.consistency, self.complete, self.threshold, n, self.degree)
        except MessageRejected as exc:
            raise UnmaskRefused(str(exc)) from None
        if self.consistency:
            check_signatures(self, msg)
        s = msg.summation
        seed_owners = sorted(j for j in self.held_shares if j in survivor_set)
        key_owners = sorted(j for j in self.held_shares if j in dropped_set)

        def rows(owners: list[int], index: int) -> npt.NDArray[np.uint32]:
            if not owners:
                return np.empty((0, 1, LIMBS), dtype=np.uint32)
            held = b"".join(self.held_shares[owner] for owner in owners)
            limbs = np.frombuffer(held, dtype="<u4").reshape(len(owners), -1)
            table = limbs[:, index * LIMBS : (index + 1) * LIMBS].astype(np.uint32)
            return table.reshape(len(owners), 1, LIMBS)

        seed_shares = rows(seed_owners, self.num_summations + s)
        key_shares = rows(key_owners, s)
        signature = self._sign(
            unmask_payload(
                self.session_id, s, me, seed_owners, seed_shares, key_owners, key_shares
            ),
        )
        self.dropped_peers |= dropped_set
        self.pending_unmask = None
        return UnmaskResponse(
            session=self.session,
            sender=me,
            summation=s,
            seed_owners=tuple(seed_owners),
            seed_shares=seed_shares,
            key_owners=tuple(key_owners),
            key_shares=key_shares,
            signature=signature,
        ).to_dict()

    # ------------------------------------------------------------------ state
    def to_bytes(self) -> bytes:
        """Serialise the whole state (including secret keys) as JSON bytes."""
        return dump_client(self)

    @classmethod
    def from_bytes(cls, data: bytes) -> SecAggClient:
        """Restore a client written by :meth:`to_bytes`.

        Raises
        ------
        MessageRejected
            If ``data`` is not a state written by :meth:`to_bytes`.
        """
        return load_client(cls, data)
