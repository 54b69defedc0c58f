"""Reconstructing the secrets of one summation, verified, with cheaters identified.

Every reconstructed self-mask seed must match the commitment its owner sent in round 0
(:func:`secagg.crypto.commit_seed`) and every mask key its public key. Shares are tried in a
fast batch first (the first ``t`` shares of each owner, grouped by sender set); a secret that
fails goes to :meth:`ShareRecovery.open_secret`, which searches the other ``t``-subsets of
the shares that arrived and names the senders whose shares do not lie on the verified
polynomial. Those senders are added to the server's cheaters and their shares are ignored
from then on (Bonawitz et al., CCS 2017, Sec. 6; robust reconstruction by consistency with a
commitment).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from . import crypto
from .errors import MessageRejected, ProtocolAborted
from .shamir import LIMBS, reconstruct, reconstruct_each

if TYPE_CHECKING:
    from .server import SecAggServer

__all__ = ["ShareRecovery"]


class ShareRecovery:
    """The unmask responses of one summation, read for reconstruction.

    Parameters
    ----------
    server : SecAggServer
        The server in its unmask round; its ``cheaters`` set is extended in place.
    """

    def __init__(self, server: SecAggServer) -> None:
        self.threshold = server.threshold
        self.graph = server.graph
        self.responses = server.responses
        self.cheaters = server.cheaters
        self.keys = server.keys
        self.session = server.session
        self.summation = server.summation
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
        """Every ``(sender, share)`` of ``owner``'s secret that arrived, honest senders first."""
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

    def open_secret(
        self, owner: int, shares: list[tuple[int, Any]], kind: Literal["seed", "key"]
    ) -> bytes:
        """Reconstruct ``owner``'s secret, find and exclude senders of bad shares.

        The first ``t`` shares are tried; if the result fails its commitment, other
        ``t``-subsets are tried (a bounded search) until one verifies. The senders whose
        shares do not lie on the verified polynomial are cheaters.
        """
        t = self.threshold
        what = "self-mask seed" if kind == "seed" else "mask key"
        if len(shares) < t:
            raise ProtocolAborted(
                f"summation {self.summation}: {len(shares)} shares of client {owner}'s {what} "
                f"arrived, fewer than threshold {t}; aborting."
            )

        def attempt(subset: Sequence[tuple[int, Any]]) -> bytes | None:
            xs = [self._rank[sender] for sender, _ in subset]
            stacked = np.stack([row for _, row in subset]).reshape(len(subset), 1, LIMBS)
            try:
                secret = reconstruct(xs, stacked, t)[0]
            except (ProtocolAborted, MessageRejected):
                return None
            return secret if self.verify(owner, secret, kind) else None

        secret = attempt(shares[:t])
        if secret is not None:
            return secret
        good: Sequence[tuple[int, Any]] | None = None
        for tries, subset in enumerate(itertools.combinations(shares, t)):
            if tries >= 2000:
                break
            secret = attempt(subset)
            if secret is not None:
                good = subset
                break
        if secret is None or good is None:
            raise ProtocolAborted(
                f"summation {self.summation}: no {t} of the {len(shares)} shares of client "
                f"{owner}'s {what} match its commitment; aborting."
            )
        base = list(good[1:])
        for sender, row in shares:
            if any(sender == g for g, _ in good):
                continue
            if attempt([*base, (sender, row)]) is None:
                self.cheaters.add(sender)
        return secret

    def reconstruct(self, owners: Sequence[int], kind: Literal["seed", "key"]) -> dict[int, bytes]:
        """Reconstruct and verify one secret per owner, all in one vectorised batch.

        Fast path: the first ``t`` shares of each owner (each with its own points,
        :func:`secagg.shamir.reconstruct_each`). A secret that fails its commitment goes to
        :meth:`open_secret`, which searches the other shares and excludes the liars.
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
