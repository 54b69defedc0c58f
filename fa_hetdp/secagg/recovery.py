"""Reconstructing the secrets of one summation, verified, with cheaters named on signed evidence.

Every reconstructed self-mask seed is checked against the commitment its owner sent in round 0
(:func:`secagg.crypto.commit_seed`) and every mask key against its public key. Fast path: the
first ``t`` shares of each owner, grouped by sender set. A secret that fails goes to
:meth:`ShareRecovery.open_secret`, which first checks every share that arrived against the
digest its dealer signed for that holder (:mod:`fa_hetdp.secagg.evidence`): a holder whose
signed unmask share differs is named and its shares are ignored from then on; the shares left
are exactly what the dealer dealt, so a bad share from one holder never spoils the search.
If those shares lie on one polynomial, its secret is used even when it contradicts the seed
commitment (the owner is then dropped from later summations, with the reason); if they do
not, the dealer is named (its signed digests convict it) and random ``t``-subsets are tried
until one opens its commitment or public key; only then does the summation abort.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from . import crypto
from .errors import MessageRejected, ProtocolAborted
from .evidence import DIGEST_BYTES, dealer_payload, share_digest, unmask_payload
from .shamir import LIMBS, reconstruct, reconstruct_each

if TYPE_CHECKING:
    from .server import SecAggServer

__all__ = ["ShareRecovery"]

_SEARCH_TRIES = 256  # random t-subsets tried once a dealer is convicted


class ShareRecovery:
    """The unmask responses of one summation, read for reconstruction.

    Parameters
    ----------
    server : SecAggServer
        The server in its unmask round; its ``cheaters``, ``excluded`` and ``reasons`` are
        extended in place.
    """

    def __init__(self, server: SecAggServer) -> None:
        self.threshold = server.threshold
        self.graph = server.graph
        self.responses = server.responses
        self.cheaters = server.cheaters
        self.excluded = server.excluded
        self.reasons = server.reasons
        self.keys = server.keys
        self.digests = server.digests
        self.dealt = server.dealt
        self._signed: dict[tuple[str, int], bool] = {}
        self.session = server.session
        self.session_id = server.session_id
        self.summation = server.summation
        self.num_summations = server.num_summations
        self._rank = server.rank
        self._rows = {
            "seed": {
                c: {o: r for r, o in enumerate(m.seed_owners)} for c, m in self.responses.items()
            },
            "key": {
                c: {o: r for r, o in enumerate(m.key_owners)} for c, m in self.responses.items()
            },
        }

    def verify(self, owner: int, secret: bytes, kind: Literal["seed", "key"]) -> bool:
        """Whether a reconstructed secret matches what ``owner`` committed to in round 0."""
        size, s = crypto.KEY_BYTES, self.summation
        keys = self.keys[owner]
        if kind == "seed":
            commitment = keys.seed_commitments[size * s : size * (s + 1)]
            return crypto.commit_seed(self.session, owner, s, secret) == commitment
        value = int.from_bytes(secret, "little")
        if value % 8 or value >> 254 != 1:  # not a clamped X25519 private key
            return False
        return crypto.public_from_private(secret) == keys.mask_keys[size * s : size * (s + 1)]

    def shares_of(self, owner: int, kind: Literal["seed", "key"]) -> list[tuple[int, Any]]:
        """Every ``(sender, share)`` of ``owner``'s secret that arrived from unnamed senders."""
        out: list[tuple[int, Any]] = []
        candidates = self.responses if self.graph.complete else self.graph.neighbours(owner)
        for sender in sorted(candidates):
            response = self.responses.get(sender)
            if response is None or sender == owner or sender in self.cheaters:
                continue
            listed = response.seed_owners if kind == "seed" else response.key_owners
            row = self._rows[kind].get(sender, {}).get(owner)
            if row is None or owner not in listed:
                continue
            table = response.seed_shares if kind == "seed" else response.key_shares
            out.append((sender, table[row, 0, :]))
        return out

    def _name(self, client: int, reason: str) -> None:
        self.cheaters.add(client)
        self.reasons[client] = f"named: {reason}"

    def signed(self, role: Literal["dealer", "holder"], client: int) -> bool:
        """Whether ``client``'s digests (dealer) or unmask response (holder) are signed by it.

        Checked only when needed as evidence, once each per summation.
        """
        key = (role, client)
        if key not in self._signed:
            public = self.keys[client].signing_key
            if role == "dealer":
                recipients, digests, signature = self.dealt[client]
                payload = dealer_payload(self.session_id, client, recipients, digests)
            else:
                r = self.responses[client]
                signature = r.signature
                payload = unmask_payload(
                    self.session_id,
                    r.summation,
                    client,
                    r.seed_owners,
                    r.seed_shares,
                    r.key_owners,
                    r.key_shares,
                )
            self._signed[key] = crypto.verify_signature(public, payload, signature)
        return self._signed[key]

    def _dealt(self, owner: int, sender: int, kind: Literal["seed", "key"], row: Any) -> bool:
        """Whether ``sender``'s share of ``owner``'s secret is the one ``owner`` signed for it."""
        index = self.summation + (self.num_summations if kind == "seed" else 0)
        signed = self.digests.get((owner, sender), b"")
        share = np.ascontiguousarray(row, dtype="<u4").tobytes()
        digest = share_digest(self.session_id, owner, sender, index, share)
        return signed[DIGEST_BYTES * index : DIGEST_BYTES * (index + 1)] == digest

    def _attempt(self, subset: Sequence[tuple[int, Any]]) -> bytes | None:
        xs = [self._rank[sender] for sender, _ in subset]
        stacked = np.stack([row for _, row in subset]).reshape(len(subset), 1, LIMBS)
        try:
            return reconstruct(xs, stacked.astype(np.uint32), len(subset))[0]
        except (ProtocolAborted, MessageRejected):
            return None

    def _consistent(self, shares: Sequence[tuple[int, Any]], secret: bytes) -> bool:
        """Whether every share lies on the polynomial of the first ``t`` (one vectorised pass).

        The first ``t - 1`` shares with each further share give the same secret exactly when
        all the shares lie on one polynomial of degree ``t - 1`` (two such polynomials that
        agree on ``t - 1`` points and at 0 are equal).
        """
        t = self.threshold
        extra = shares[t:]
        if not extra:
            return False  # t shares always fit a polynomial: nothing confirms the secret
        base = list(shares[: t - 1])
        xs = np.asarray([[self._rank[s] for s, _ in [*base, e]] for e in extra], dtype=np.int64)
        rows = np.stack([np.stack([r for _, r in [*base, e]]) for e in extra]).astype(np.uint32)
        return all(got == secret for got in reconstruct_each(xs, rows))

    def open_secret(
        self, owner: int, shares: list[tuple[int, Any]], kind: Literal["seed", "key"]
    ) -> bytes:
        """Reconstruct ``owner``'s secret from verified shares; name holders or the dealer.

        Raises
        ------
        ProtocolAborted
            Fewer than ``t`` shares that match their signed digests, or (the dealer named)
            no ``t`` of them open its commitment or public key.
        """
        t = self.threshold
        what = "self-mask seed" if kind == "seed" else "mask key"
        verified = []
        for sender, row in shares:
            if self._dealt(owner, sender, kind, row):
                verified.append((sender, row))
            elif self.signed("dealer", owner) and self.signed("holder", sender):
                self._name(  # its signed response contradicts the dealer's signed digest
                    sender,
                    f"its signed unmask share of client {owner}'s {what} in summation "
                    f"{self.summation} differs from the share client {owner} signed for it",
                )
            # else: unsigned, so not provably the sender's: the share is dropped, no one named
        if len(verified) < t:
            raise ProtocolAborted(
                f"summation {self.summation}: {len(verified)} verified shares of client "
                f"{owner}'s {what} arrived, fewer than threshold {t}; aborting."
            )
        secret = self._attempt(verified[:t])
        if secret is not None and self.verify(owner, secret, kind):
            return secret
        if kind == "seed" and secret is not None and self._consistent(verified, secret):
            # what the owner dealt is one seed, not the one it committed to: use it, and
            # leave the owner out of later summations
            self.excluded.add(owner)
            self.reasons.setdefault(
                owner,
                f"its self-mask seed commitment of summation {self.summation} does not match "
                "the seed its signed shares reconstruct; its input stays in this sum, and it "
                "is dropped from later summations",
            )
            return secret
        if self.signed("dealer", owner):
            self._name(
                owner,
                f"the shares of its {what} that it signed (summation {self.summation}) do not "
                "lie on one polynomial that opens its commitment",
            )
        seed = hashlib.sha256(self.session_id + struct.pack("<QQ", owner, self.summation))
        rng = np.random.default_rng(int.from_bytes(seed.digest()[:8], "little"))  # public
        for _ in range(_SEARCH_TRIES):
            pick = sorted(rng.choice(len(verified), size=t, replace=False).tolist())
            found = self._attempt([verified[i] for i in pick])
            if found is not None and self.verify(owner, found, kind):
                return found
        raise ProtocolAborted(
            f"summation {self.summation}: no {t} of the {len(verified)} shares client {owner} "
            f"dealt open its {what}; aborting."
        )

    def reconstruct(self, owners: Sequence[int], kind: Literal["seed", "key"]) -> dict[int, bytes]:
        """Reconstruct and verify one secret per owner, all in one vectorised batch.

        Fast path: the first ``t`` shares of each owner (each with its own points,
        :func:`secagg.shamir.reconstruct_each`). A secret that fails its commitment goes to
        :meth:`open_secret`, which checks the shares against their signed digests.
        """
        rows = self._rows[kind]
        responders = [c for c in sorted(self.responses) if c not in self.cheaters]
        offsets: dict[int, int] = {}  # each responder's first row in ``table``
        parts = []
        total = 0
        for c in responders:
            response = self.responses[c]
            part = (response.seed_shares if kind == "seed" else response.key_shares)[:, 0, :]
            offsets[c], total = total, total + len(part)
            parts.append(part)
        table = np.concatenate(parts) if parts else np.empty((0, LIMBS), dtype=np.uint32)
        batch: list[int] = []
        points: list[list[int]] = []
        index: list[list[int]] = []
        slow: list[int] = []
        for owner in owners:
            chosen: list[int] = []
            candidates = responders if self.graph.complete else self.graph.neighbours(owner)
            for sender in candidates:
                if sender != owner and owner in rows.get(sender, ()):
                    if sender in self.cheaters:
                        continue
                    chosen.append(sender)
                    if len(chosen) == self.threshold:
                        break
            if len(chosen) < self.threshold:
                slow.append(owner)  # open_secret names the shortfall
                continue
            batch.append(owner)
            points.append([self._rank[c] for c in chosen])
            index.append([offsets[c] + rows[c][owner] for c in chosen])
        out: dict[int, bytes] = {}
        if batch:
            secrets = reconstruct_each(np.asarray(points, dtype=np.int64), table[np.asarray(index)])
            for owner, secret in zip(batch, secrets, strict=True):
                if secret is not None and self.verify(owner, secret, kind):
                    out[owner] = secret
                else:
                    slow.append(owner)
        for owner in slow:
            out[owner] = self.open_secret(owner, self.shares_of(owner, kind), kind)
        return out
