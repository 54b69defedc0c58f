"""Cryptographic building blocks, all from :mod:`cryptography` (OpenSSL).

* Key agreement: X25519 (RFC 7748). Every client holds two key pairs: one for the channel
  that carries Shamir shares (``channel``), one for the pairwise masks (``mask``), as in
  Bonawitz et al. (CCS 2017), Sec. 4.
* Key derivation: the one-step KDF of NIST SP 800-56C (SHA-256) with ``FixedInfo`` naming
  the purpose, the session id and the ordered pair of client ids (and the summation), so
  that no key is ever reused across sessions, purposes, pairs or summations.
* Share channel: AES-256-GCM with a random 96-bit nonce; the associated data binds the
  session id, the sender, the recipient and the round.
* Mask PRG: the AES-256-CTR keystream of a fresh 256-bit key with an all-zero initial
  counter block, read as little-endian ``uint64`` words. Every key is used for exactly one
  keystream, so the fixed counter block never repeats under one key. Never a numpy RNG,
  never a seed folded to 32 bits.
"""

from __future__ import annotations

import functools
import hashlib
import os
import struct
from collections.abc import Sequence
from typing import cast

import numpy as np
import numpy.typing as npt
from cryptography.exceptions import InvalidSignature, InvalidTag
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from .errors import MessageRejected

__all__ = [
    "DOMAIN",
    "KEY_BYTES",
    "SIGNATURE_BYTES",
    "PrivateKey",
    "U64Array",
    "agree",
    "agree_many",
    "bind_mask_key",
    "commit_seed",
    "derive_channel_keys",
    "derive_channel_keys_many",
    "derive_mask_key",
    "derive_mask_keys",
    "generate_keypair",
    "generate_loaded_keypair",
    "generate_loaded_signing_key",
    "generate_signing_key",
    "id_digest",
    "kdf_sha256",
    "mask_keystream",
    "mask_sum",
    "normalise_public_key",
    "normalised_public_key",
    "normalised_public_keys",
    "open_sealed",
    "public_from_private",
    "random_bytes",
    "seal",
    "seal_many",
    "session_digest",
    "sign",
    "validate_public_key",
    "verify_signature",
]

U64Array = npt.NDArray[np.uint64]
PrivateKey = X25519PrivateKey
"""A loaded X25519 private key (see :func:`generate_loaded_keypair`)."""

DOMAIN = b"fa-hetdp/secagg/v1"
"""Domain-separation prefix of every hash, KDF ``FixedInfo`` and associated data."""

KEY_BYTES = 32
SIGNATURE_BYTES = 64
NONCE_BYTES = 12
_P25519 = 2**255 - 19
# u-coordinates (reduced mod p) of the points of order 1, 2, 4 and 8 on Curve25519 and its
# twist: the X25519 output for them is independent of the private key (RFC 7748, Sec. 6.1;
# the same list as libsodium's blocklist). Non-canonical encodings reduce to these.
_SMALL_ORDER_U = frozenset(
    {
        0,
        1,
        _P25519 - 1,
        325606250916557431795983626356110631294008115727848805560023387167927233504,
        39382357235489614581723060781553021112529911719440698176882885853963445705823,
    }
)
_SMALL_ORDER_RAW = frozenset(u.to_bytes(KEY_BYTES, "little") for u in _SMALL_ORDER_U)
_ZERO_BLOCK = bytes(16)
_CTR_ZERO = modes.CTR(_ZERO_BLOCK)  # immutable mode object, shared by every keystream
_PAIR = struct.Struct("<QQ")
_MASK_BUFFER = 1 << 22
"""Bytes of keystream :func:`mask_sum` holds at once (then sums and reuses the buffer)."""


def random_bytes(size: int) -> bytes:
    """Return ``size`` bytes from the operating system's CSPRNG."""
    return os.urandom(size)


def generate_keypair() -> tuple[bytes, bytes]:
    """Return a fresh X25519 key pair as ``(private_raw, public_raw)``, 32 bytes each.

    The private key is clamped (RFC 7748, Sec. 5) before it is returned, so its integer value
    lies in ``[2^254, 2^255)`` and fits the Shamir secret encoding of :mod:`fa_hetdp.secagg.shamir`.
    """
    private_raw, public_raw, _ = generate_loaded_keypair()
    return private_raw, public_raw


def generate_loaded_keypair() -> tuple[bytes, bytes, X25519PrivateKey]:
    """Return :func:`generate_keypair`'s pair and the loaded private key object.

    Loading a raw private key costs one scalar multiplication (OpenSSL derives its public
    key); a holder that keeps the object passes it to :func:`agree_many` instead.
    """
    raw = bytearray(os.urandom(KEY_BYTES))
    raw[0] &= 248
    raw[31] &= 127
    raw[31] |= 64
    private = X25519PrivateKey.from_private_bytes(bytes(raw))
    return bytes(raw), private.public_key().public_bytes_raw(), private


def public_from_private(private_raw: bytes) -> bytes:
    """Return the X25519 public key of a raw private key."""
    return X25519PrivateKey.from_private_bytes(private_raw).public_key().public_bytes_raw()


def validate_public_key(raw: object) -> bytes:
    """Return ``raw`` if it is a well-formed X25519 public key of large order.

    Raises
    ------
    MessageRejected
        If ``raw`` is not 32 bytes, or encodes a point of small order (whose shared secret
        would not depend on the peer's private key).
    """
    if not isinstance(raw, bytes) or len(raw) != KEY_BYTES:
        size = len(raw) if isinstance(raw, bytes) else type(raw).__name__
        raise MessageRejected(f"public key must be {KEY_BYTES} bytes, got {size}.")
    u = int.from_bytes(raw, "little") & ((1 << 255) - 1)
    if u % _P25519 in _SMALL_ORDER_U:
        raise MessageRejected(f"public key {raw.hex()} is a small-order point; rejected.")
    return raw


def agree(private_raw: bytes, public_raw: bytes) -> bytes:
    """Return the X25519 shared secret of a private key and a (validated) peer public key.

    Raises
    ------
    MessageRejected
        If the public key is malformed or the shared secret is all zero.
    """
    return agree_many(private_raw, [public_raw])[0]


def agree_many(
    private_raw: bytes | X25519PrivateKey,
    publics_raw: Sequence[bytes],
    *,
    validated: bool = False,
) -> list[bytes]:
    """Return the X25519 shared secrets of one private key with several peer public keys.

    Loading a private key costs as much as one exchange, so it is loaded once (or passed
    loaded, see :func:`generate_loaded_keypair`). Pass ``validated=True`` only for keys
    already checked with :func:`validate_public_key`; an all-zero shared secret is refused
    either way.

    Raises
    ------
    MessageRejected
        If a public key is malformed or a shared secret is all zero.
    """
    private = (
        X25519PrivateKey.from_private_bytes(private_raw)
        if isinstance(private_raw, bytes)
        else private_raw
    )
    out = []
    for public_raw in publics_raw:
        if not validated:
            validate_public_key(public_raw)
        peer = X25519PublicKey.from_public_bytes(public_raw)
        try:
            out.append(private.exchange(peer))
        except ValueError as exc:  # OpenSSL refuses an all-zero shared secret
            raise MessageRejected(f"X25519 key agreement failed: {exc}") from None
    return out


def _fixed_info(purpose: bytes, session_id: bytes, low: int, high: int) -> bytes:
    # unambiguous: distinct purposes of which none is a prefix of another, then a
    # length-prefixed session id and the fixed-size ordered pair
    return _info_head(purpose, session_id) + struct.pack("<QQ", low, high)


@functools.lru_cache(maxsize=8)
def _info_head(purpose: bytes, session_id: bytes) -> bytes:
    return DOMAIN + b"/" + purpose + struct.pack("<Q", len(session_id)) + session_id


def derive_channel_keys(
    shared: bytes, session_id: bytes, own_id: int, peer_id: int
) -> tuple[bytes, bytes]:
    """Derive the AES-GCM keys of the share channel between two clients.

    :func:`kdf_sha256` with ``FixedInfo`` = purpose, session id and the ordered pair
    ``(min id, max id)`` yields 64 bytes: the first half keys the direction low → high, the
    second half high → low.

    Returns
    -------
    tuple of bytes
        ``(send_key, receive_key)`` as seen by ``own_id``.
    """
    low, high = (own_id, peer_id) if own_id < peer_id else (peer_id, own_id)
    info = _fixed_info(b"share-channel", session_id, low, high)
    okm = kdf_sha256(shared, info, 2 * KEY_BYTES)
    low_to_high, high_to_low = okm[:KEY_BYTES], okm[KEY_BYTES:]
    if own_id == low:
        return low_to_high, high_to_low
    return high_to_low, low_to_high


def derive_channel_keys_many(
    secrets: Sequence[bytes], session_id: bytes, own_id: int, peer_ids: Sequence[int]
) -> list[tuple[bytes, bytes]]:
    """:func:`derive_channel_keys` for each ``(secret, peer id)``: the same keys, one call."""
    head, sha = _info_head(b"share-channel", session_id), hashlib.sha256
    out = []
    for shared, peer_id in zip(secrets, peer_ids, strict=True):
        low = own_id < peer_id
        tail = shared + head + (_PAIR.pack(own_id, peer_id) if low else _PAIR.pack(peer_id, own_id))
        low_to_high = sha(b"\x00\x00\x00\x01" + tail).digest()  # kdf_sha256, 64 bytes
        high_to_low = sha(b"\x00\x00\x00\x02" + tail).digest()
        out.append((low_to_high, high_to_low) if low else (high_to_low, low_to_high))
    return out


def derive_mask_keys(
    secrets: Sequence[bytes],
    session_id: bytes,
    own_id: int,
    peer_ids: Sequence[int],
    summation: int,
) -> list[bytes]:
    """:func:`derive_mask_key` for each ``(secret, peer id)``: the same keys, one call."""
    head, sha = _info_head(b"pairwise-mask", session_id), hashlib.sha256
    tail = struct.pack("<Q", summation)
    out = []
    for shared, peer_id in zip(secrets, peer_ids, strict=True):
        pair = _PAIR.pack(own_id, peer_id) if own_id < peer_id else _PAIR.pack(peer_id, own_id)
        out.append(sha(b"\x00\x00\x00\x01" + shared + head + pair + tail).digest())
    return out


def bind_mask_key(key: bytes, context: bytes) -> bytes:
    """Bind a pairwise-mask key of one summation to the public inputs it masks.

    ``context`` is the caller's digest of the public inputs of the summation (what the server
    broadcast with it, the same for every client of an honest run; empty: no binding, the key
    as it is). Both ends of a pair mask with ``KDF(key, "public-inputs" || context)``: two
    clients shown different broadcasts derive different keys, their masks do not cancel and the
    sum cannot be decoded, so a server cannot have some clients calibrate their noise shares to
    inputs the others did not see.
    """
    if not context:
        return key
    return kdf_sha256(key, DOMAIN + b"/public-inputs" + context, KEY_BYTES)


def derive_mask_key(
    shared: bytes, session_id: bytes, id_a: int, id_b: int, summation: int
) -> bytes:
    """Derive the AES-256 pairwise-mask key of one pair and one summation.

    ``shared`` is the X25519 secret of the two clients' mask keys *of this summation*;
    ``FixedInfo`` names the purpose, the session, the ordered pair ``(min id, max id)`` and
    the summation, so both ends obtain the same key and no key serves two purposes.
    """
    low, high = (id_a, id_b) if id_a < id_b else (id_b, id_a)
    info = _fixed_info(b"pairwise-mask", session_id, low, high) + struct.pack("<Q", summation)
    return kdf_sha256(shared, info, KEY_BYTES)


def kdf_sha256(secret: bytes, fixed_info: bytes, length: int) -> bytes:
    """Derive ``length`` bytes from ``secret``: NIST SP 800-56C Rev. 2 one-step KDF, SHA-256.

    ``K(i) = SHA-256(i as 4-byte big-endian || Z || FixedInfo)`` for ``i = 1, 2, ...``,
    concatenated and cut to ``length`` bytes (Sec. 4.1; the ANSI X9.63 "Concat" KDF, byte
    for byte ``cryptography``'s ``ConcatKDFHash``). One hash per 32 bytes, where HKDF
    (RFC 5869) spends four to six SHA-256 calls on them, and a session derives two keys per
    pair. The session id enters ``FixedInfo`` (HKDF's salt held it).
    """
    if not 0 < length <= 255 * 32:
        raise ValueError(f"KDF length must lie in [1, {255 * 32}], got {length}.")
    tail = secret + fixed_info
    out = hashlib.sha256(b"\x00\x00\x00\x01" + tail).digest()
    for counter in range(2, -(-length // 32) + 1):
        out += hashlib.sha256(counter.to_bytes(4, "big") + tail).digest()
    return out[:length]


def mask_keystream(key: bytes, length: int) -> U64Array:
    """Return ``length`` pseudo-random elements of Z_{2^64} from a 256-bit key.

    The AES-256-CTR keystream (initial counter block all zero) is read as little-endian
    ``uint64`` words: element ``i`` is bytes ``[8 i, 8 i + 8)`` of the keystream.
    """
    if len(key) != KEY_BYTES:
        raise ValueError(f"mask key must be {KEY_BYTES} bytes, got {len(key)}.")
    encryptor = Cipher(algorithms.AES(key), _CTR_ZERO).encryptor()
    stream = encryptor.update(_zeros(8 * length))
    return np.frombuffer(stream, dtype="<u8").astype(np.uint64, copy=False)


def mask_sum(base: U64Array, add: Sequence[bytes], subtract: Sequence[bytes]) -> U64Array:
    """Return ``base + sum_a PRG(a) - sum_s PRG(s)`` in Z_{2^64} (a new array).

    ``PRG`` is :func:`mask_keystream` of ``len(base)`` words; the result equals adding and
    subtracting those keystreams one by one. The keystreams are written with ``update_into``
    into one reused buffer of at most :data:`_MASK_BUFFER` bytes (or one keystream) and
    summed per sign, without a bytes object per keystream.

    Raises
    ------
    ValueError
        If a key is not 32 bytes.
    """
    length = base.shape[0]
    size = 8 * length
    rows = max(1, min(len(add) + len(subtract), _MASK_BUFFER // max(size, 1)))
    buffer = np.empty(size * rows + 16, dtype=np.uint8)  # update_into needs 15 spare bytes
    view, zeros = buffer.data, _zeros(size)
    streams = buffer[: size * rows].view("<u8").reshape(rows, length)
    total = base.astype(np.uint64, copy=True)
    for keys, add_sign in ((add, True), (subtract, False)):
        for first in range(0, len(keys), rows):
            chunk = keys[first : first + rows]
            for row, key in enumerate(chunk):
                if len(key) != KEY_BYTES:
                    raise ValueError(f"mask key must be {KEY_BYTES} bytes, got {len(key)}.")
                encryptor = Cipher(algorithms.AES(key), _CTR_ZERO).encryptor()
                encryptor.update_into(zeros, view[size * row : size * (row + 1) + 15])
            part = streams[: len(chunk)].sum(axis=0, dtype=np.uint64)
            if add_sign:
                total += part
            else:
                total -= part
    return total


@functools.lru_cache(maxsize=8)
def _zeros(size: int) -> bytes:
    return bytes(size)


def seal(key: bytes, plaintext: bytes, associated_data: bytes) -> bytes:
    """Encrypt with AES-256-GCM under a random nonce; return ``nonce || ciphertext || tag``."""
    nonce = os.urandom(NONCE_BYTES)
    return nonce + AESGCM(key).encrypt(nonce, plaintext, associated_data)


def seal_many(
    keys: Sequence[bytes], plaintexts: Sequence[bytes], associated_data: Sequence[bytes]
) -> list[bytes]:
    """:func:`seal` each plaintext under its key; the random nonces come from one read."""
    nonces = os.urandom(NONCE_BYTES * len(keys))
    out = []
    for i, (key, plaintext, aad) in enumerate(zip(keys, plaintexts, associated_data, strict=True)):
        nonce = nonces[NONCE_BYTES * i : NONCE_BYTES * (i + 1)]
        out.append(nonce + AESGCM(key).encrypt(nonce, plaintext, aad))
    return out


def open_sealed(key: bytes, blob: bytes, associated_data: bytes) -> bytes:
    """Decrypt the output of :func:`seal`.

    Raises
    ------
    MessageRejected
        If the blob is too short or fails authentication (wrong key, tampered ciphertext,
        or associated data for another session, sender, recipient or round).
    """
    if len(blob) < NONCE_BYTES + 16:
        raise MessageRejected(f"ciphertext of {len(blob)} bytes is too short.")
    try:
        return AESGCM(key).decrypt(blob[:NONCE_BYTES], blob[NONCE_BYTES:], associated_data)
    except InvalidTag:
        raise MessageRejected("share ciphertext failed authentication (AES-GCM).") from None


def session_digest(parts: Sequence[bytes]) -> bytes:
    """Return SHA-256 over length-prefixed ``parts`` under the library's domain prefix."""
    h = hashlib.sha256(DOMAIN + b"/session")
    for part in parts:
        h.update(struct.pack("<Q", len(part)))
        h.update(part)
    return h.digest()


def id_digest(ids: Sequence[int]) -> bytes:
    """Return SHA-256 of a list of ids (count, then each as little-endian uint64), in order.

    The session's O(n) lists (the graph's ring order, the ids that advertised keys) travel
    as this digest plus their length; both enter the session id.
    """
    h = hashlib.sha256(DOMAIN + b"/ids")
    h.update(struct.pack("<Q", len(ids)))
    h.update(np.asarray(ids, dtype="<u8").tobytes())
    return h.digest()


def normalised_public_key(raw: object) -> bytes:
    """Validate ``raw`` as :func:`validate_public_key` does; return its canonical encoding.

    Raises
    ------
    MessageRejected
        As :func:`validate_public_key`.
    """
    if not isinstance(raw, bytes) or len(raw) != KEY_BYTES:
        return validate_public_key(raw)  # raises, naming the size
    if raw[31] < 0x7F:  # u < 2^255 - 2^248 < p: already canonical (every honest key)
        if raw in _SMALL_ORDER_RAW:
            raise MessageRejected(f"public key {raw.hex()} is a small-order point; rejected.")
        return raw
    u = (int.from_bytes(raw, "little") & ((1 << 255) - 1)) % _P25519
    if u in _SMALL_ORDER_U:
        raise MessageRejected(f"public key {raw.hex()} is a small-order point; rejected.")
    return u.to_bytes(KEY_BYTES, "little")


def normalised_public_keys(raws: Sequence[object]) -> list[bytes]:
    """:func:`normalised_public_key` of each key, in order (one pass for canonical keys).

    Every honest key is 32 bytes with ``u < 2^255 - 2^248``: already canonical, so the keys
    are returned as they are once none is a small-order point; any other key goes through
    :func:`normalised_public_key`.

    Raises
    ------
    MessageRejected
        As :func:`validate_public_key`, for the first offending key.
    """
    if all(type(raw) is bytes and len(raw) == KEY_BYTES and raw[31] < 0x7F for raw in raws):
        if _SMALL_ORDER_RAW.isdisjoint(raws):
            return cast("list[bytes]", list(raws))  # all bytes, checked above
    return [normalised_public_key(raw) for raw in raws]


def normalise_public_key(raw: bytes) -> bytes:
    """Return the canonical encoding of an X25519 public key (bit 255 cleared, u mod p).

    X25519 ignores bit 255 and reduces ``u`` modulo ``p``, so several byte strings name one
    key; duplicate checks compare this form.
    """
    u = (int.from_bytes(raw, "little") & ((1 << 255) - 1)) % _P25519
    return u.to_bytes(KEY_BYTES, "little")


def commit_seed(session: bytes, client_id: int, summation: int, seed: bytes) -> bytes:
    """Return the SHA-256 commitment to a self-mask seed, bound to session, id and summation.

    The seed is a uniform 256-bit secret, so the hash hides it; a reconstructed seed is
    accepted only if it matches the commitment sent in the first round.
    """
    h = hashlib.sha256(DOMAIN + b"/seed-commitment")
    h.update(struct.pack("<Q", len(session)) + session)
    h.update(struct.pack("<QQ", client_id, summation))
    h.update(seed)
    return h.digest()


def generate_signing_key() -> tuple[bytes, bytes]:
    """Return a fresh Ed25519 key pair as ``(private_raw, public_raw)``, 32 bytes each."""
    private_raw, public_raw, _ = generate_loaded_signing_key()
    return private_raw, public_raw


def generate_loaded_signing_key() -> tuple[bytes, bytes, Ed25519PrivateKey]:
    """Return :func:`generate_signing_key`'s pair and the key object that signs with it.

    Loading a raw Ed25519 private key costs one scalar multiplication (its public key); a
    holder that keeps the object signs without loading it again.
    """
    private = Ed25519PrivateKey.generate()
    return private.private_bytes_raw(), private.public_key().public_bytes_raw(), private


def sign(private_raw: bytes, message: bytes) -> bytes:
    """Return the Ed25519 signature (64 bytes) of ``message``."""
    return Ed25519PrivateKey.from_private_bytes(private_raw).sign(message)


def verify_signature(public_raw: bytes, message: bytes, signature: bytes) -> bool:
    """Return whether ``signature`` is a valid Ed25519 signature of ``message``."""
    if len(public_raw) != KEY_BYTES or len(signature) != SIGNATURE_BYTES:
        return False
    try:
        Ed25519PublicKey.from_public_bytes(public_raw).verify(signature, message)
    except (InvalidSignature, ValueError):
        return False
    return True
