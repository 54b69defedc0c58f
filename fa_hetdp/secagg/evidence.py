"""Signed evidence for blame: share digests signed by a dealer, unmask shares by a holder.

A client is named a cheater only on something it signed with its round-0 Ed25519 signing key
(present in every session; authenticated by the roster in malicious-server sessions):

- a dealer signs, in round 1, one SHA-256 digest per share it deals (:func:`share_digests`,
  :func:`dealer_payload`); the server forwards each holder its digests, and the holder checks
  the shares it opens against them (a mismatch is reported, not revealed);
- a holder signs every unmask response (:func:`unmask_payload`).

The server checks a signature only when it needs it as evidence (at most one per dealer and
per holder and summation, in :class:`secagg.recovery.ShareRecovery`): the honest path costs no
verification.

A revealed share whose digest differs from the one its dealer signed for that holder convicts
the holder (both signatures are on record); shares that all match their dealer's signed
digests but do not lie on one polynomial, or whose secret does not open the dealer's public
key, convict the dealer. Anything unsigned or unverifiable is dropped without naming anyone.
The digests are one-way images of uniformly random field elements: they reveal nothing a
coalition below ``t`` could use.
"""

from __future__ import annotations

import functools
import hashlib
import struct
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from . import crypto
from .shamir import LIMBS

__all__ = [
    "DIGEST_BYTES",
    "SHARE_BYTES",
    "dealer_payload",
    "share_digest",
    "share_digests",
    "unmask_payload",
]

DIGEST_BYTES = 32
SHARE_BYTES = LIMBS * 4  # one share of one 256-bit secret: LIMBS little-endian uint32
_HEAD = struct.Struct("<QQQ")


@functools.lru_cache(maxsize=8)
def _prefix(session_id: bytes) -> hashlib._Hash:
    """Return the hash state after the domain and the session id (copied per digest)."""
    return hashlib.sha256(
        crypto.DOMAIN + b"/share-digest" + struct.pack("<Q", len(session_id)) + session_id
    )


def share_digest(session_id: bytes, dealer: int, holder: int, index: int, share: bytes) -> bytes:
    """Return the digest of the share of secret ``index`` that ``dealer`` dealt ``holder``.

    ``SHA-256(domain, session id, dealer, holder, index, share)``, fixed-size fields.
    """
    h = _prefix(session_id).copy()
    h.update(_HEAD.pack(dealer, holder, index) + share)
    return h.digest()


def share_digests(session_id: bytes, dealer: int, holder: int, body: bytes) -> bytes:
    """Return the digests of every share in one holder's ``body`` (secrets x LIMBS uint32).

    The same bytes as :func:`share_digest` for each secret in turn.
    """
    base, pack = _prefix(session_id), _HEAD.pack
    out = []
    for m in range(len(body) // SHARE_BYTES):
        h = base.copy()
        h.update(pack(dealer, holder, m) + body[m * SHARE_BYTES : (m + 1) * SHARE_BYTES])
        out.append(h.digest())
    return b"".join(out)


def dealer_payload(
    session_id: bytes, dealer: int, recipients: Sequence[int], digests: Sequence[bytes]
) -> bytes:
    """Return the bytes a dealer signs in round 1: its recipients and their share digests."""
    ids = np.asarray(recipients, dtype="<u8").tobytes()
    head = struct.pack("<QQQ", len(session_id), dealer, len(recipients))
    return crypto.DOMAIN + b"/share-digests" + head + session_id + ids + b"".join(digests)


def unmask_payload(
    session_id: bytes,
    summation: int,
    sender: int,
    seed_owners: Sequence[int],
    seed_shares: npt.NDArray[np.uint32],
    key_owners: Sequence[int],
    key_shares: npt.NDArray[np.uint32],
) -> bytes:
    """Return the bytes a holder signs in its unmask response (every share it reveals)."""
    parts = [
        struct.pack("<QQQ", len(session_id), summation, sender),
        session_id,
        struct.pack("<Q", len(seed_owners)),
        np.asarray(seed_owners, dtype="<u8").tobytes(),
        np.ascontiguousarray(seed_shares, dtype="<u4").tobytes(),
        struct.pack("<Q", len(key_owners)),
        np.asarray(key_owners, dtype="<u8").tobytes(),
        np.ascontiguousarray(key_shares, dtype="<u4").tobytes(),
    ]
    return crypto.DOMAIN + b"/unmask" + b"".join(parts)
