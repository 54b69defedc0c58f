"""Protocol messages: frozen dataclasses that round-trip through plain dictionaries.

Every message converts to a ``dict`` of bytes, ints, tuples of those, and numpy arrays with
:meth:`to_dict` (what a transport such as a Flower ``ConfigRecord``/``ArrayRecord``
carries; :func:`split_arrays` turns the tuples into lists) and back with ``from_dict``
(lists or tuples), which validates every field: a missing, extra or ill-typed field raises
:class:`~secagg.errors.MessageRejected`. The ``"message"`` key holds the message's tag
(bytes), so a message of one round is never parsed as another.

Every message a client receives or sends is O(k) (its neighbourhood; k = n - 1 on the complete
graph): the session's O(n) id lists never travel. Where the whole list matters, a message
carries its size and SHA-256 digest (:func:`secagg.crypto.id_digest`), both bound into the
session id, so two clients that disagree about them cannot open each other's shares.

Semantic checks (session, round, sender, replay) are the state machines' job
(:mod:`fa_hetdp.secagg.client`, :mod:`fa_hetdp.secagg.server`).
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, TypeVar, cast

import numpy as np
import numpy.typing as npt

from .encoding import U32Array
from .errors import MessageRejected
from .shamir import LIMBS, PRIME

__all__ = [
    "AdvertiseKeys",
    "ConsistencyRequest",
    "ConsistencyResponse",
    "KeyDirectory",
    "MaskedInput",
    "MaskedInputRequest",
    "Message",
    "MessageValue",
    "SetupMessage",
    "ShareKeys",
    "UnmaskRequest",
    "UnmaskResponse",
    "join_arrays",
    "parse_message",
    "split_arrays",
]

MessageValue = (
    bytes | int | list[int] | list[bytes] | tuple[int, ...] | tuple[bytes, ...] | npt.NDArray[Any]
)
_MAX_ID = 2**64 - 1
_DIGEST = 32
M = TypeVar("M", bound="Message")


def _int(value: object, name: str, low: int = 0, high: int = _MAX_ID) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise MessageRejected(f"field {name!r} must be an int, got {type(value).__name__}.")
    out = int(value)
    if not low <= out <= high:
        raise MessageRejected(f"field {name!r} must lie in [{low}, {high}], got {out}.")
    return out


def _bytes(value: object, name: str) -> bytes:
    if not isinstance(value, bytes):
        raise MessageRejected(f"field {name!r} must be bytes, got {type(value).__name__}.")
    return value


def _int_list(value: object, name: str) -> tuple[int, ...]:
    if isinstance(value, np.ndarray) and value.dtype.kind in "iu" and value.ndim == 1:
        value = value.tolist()
    if not isinstance(value, list | tuple):
        raise MessageRejected(f"field {name!r} must be a list, got {type(value).__name__}.")
    out = tuple(value)
    if not set(map(type, out)) <= {int}:
        return tuple(_int(v, name) for v in out)
    if out and (min(out) < 0 or max(out) > _MAX_ID):
        raise MessageRejected(f"field {name!r} holds an id outside [0, {_MAX_ID}].")
    return out


def _digest(value: object, name: str) -> bytes:
    out = _bytes(value, name)
    if len(out) != _DIGEST:
        raise MessageRejected(f"field {name!r} must be a {_DIGEST}-byte digest, got {len(out)}.")
    return out


def _bytes_list(value: object, name: str) -> tuple[bytes, ...]:
    if not isinstance(value, list | tuple):
        raise MessageRejected(f"field {name!r} must be a list, got {type(value).__name__}.")
    out = tuple(value)
    if not set(map(type, out)) <= {bytes}:
        return tuple(_bytes(v, name) for v in out)
    return out


def _array(value: object, name: str, dtype: type[np.generic], ndim: int) -> npt.NDArray[Any]:
    if not isinstance(value, np.ndarray) or value.dtype != np.dtype(dtype):
        kind = value.dtype if isinstance(value, np.ndarray) else type(value).__name__
        raise MessageRejected(f"field {name!r} must be a {np.dtype(dtype)} array, got {kind}.")
    if value.ndim != ndim:
        raise MessageRejected(f"field {name!r} must have {ndim} dimensions, got {value.ndim}.")
    if not value.flags.writeable and value.base is None:
        return value  # read-only and owning its data (a parsed or an encoding's array)
    out = np.array(value, copy=True)
    out.setflags(write=False)
    return out


def _unique(values: tuple[int, ...], name: str) -> None:
    if len(set(values)) != len(values):
        raise MessageRejected(f"field {name!r} lists an id twice.")


def _unique_ids(value: object, name: str) -> tuple[int, ...]:
    out = _int_list(value, name)
    _unique(out, name)
    return out


def _sorted(values: tuple[int, ...], name: str) -> None:
    if list(values) != sorted(values):
        raise MessageRejected(f"field {name!r} must be sorted.")


@functools.cache
def _field_names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in fields(cls))


@functools.cache
def _field_order(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls))


@dataclass(frozen=True)
class Message:
    """Base class: conversion to and from a plain dictionary."""

    TAG: ClassVar[bytes] = b""

    def to_dict(self) -> dict[str, MessageValue]:
        """Return the message as a dictionary of bytes, ints, lists and numpy arrays."""
        out: dict[str, MessageValue] = {"message": self.TAG}
        for name in _field_order(cast(type, type(self))):
            out[name] = getattr(self, name)
        return out

    @classmethod
    def from_dict(cls: type[M], data: Mapping[str, object]) -> M:
        """Parse and validate a dictionary produced by :meth:`to_dict`.

        Raises
        ------
        MessageRejected
            Wrong tag, missing or unexpected fields, or fields of the wrong type.
        """
        if not isinstance(data, Mapping):
            raise MessageRejected(f"message must be a mapping, got {type(data).__name__}.")
        tag = data.get("message")
        if tag != cls.TAG:
            raise MessageRejected(f"expected a {cls.TAG!r} message, got {tag!r}.")
        names = _field_names(cast(type, cls))
        present = set(data) - {"message"}
        if present != names:
            missing, extra = sorted(names - present), sorted(present - names)
            raise MessageRejected(
                f"{cls.TAG!r} message has missing fields {missing} / unexpected {extra}."
            )
        return cls._parse(data)

    @classmethod
    def _parse(cls: type[M], data: Mapping[str, object]) -> M:
        raise NotImplementedError


@dataclass(frozen=True)
class SetupMessage(Message):
    """Server -> one client: the session parameters and its neighbourhood (round 0 request).

    ``num_clients`` is the number of invited clients and ``graph_digest`` the SHA-256 of the
    graph's ring order (:func:`secagg.crypto.id_digest`); both enter the session id. The
    recipient learns only its own ``neighbours`` (sorted; its share holders and mask peers)
    and their Shamir evaluation ``points`` (1-based ranks among the invited ids): O(k).
    ``degree == num_clients - 1`` means the complete graph.
    """

    TAG: ClassVar[bytes] = b"secagg/setup"
    session: bytes
    recipient: int
    num_clients: int
    threshold: int
    num_summations: int
    degree: int
    consistency: int
    graph_digest: bytes
    neighbours: tuple[int, ...]
    points: tuple[int, ...]

    @classmethod
    def _parse(cls, data: Mapping[str, object]) -> SetupMessage:
        recipient = _int(data["recipient"], "recipient")
        n = _int(data["num_clients"], "num_clients", 2, PRIME - 1)
        degree = _int(data["degree"], "degree", 1, n - 1)
        neighbours = _int_list(data["neighbours"], "neighbours")
        points = _int_list(data["points"], "points")
        _unique(neighbours, "neighbours")
        _sorted(neighbours, "neighbours")
        _unique(points, "points")
        if len(neighbours) != degree or len(points) != degree:
            raise MessageRejected(
                f"setup lists {len(neighbours)} neighbours and {len(points)} points for "
                f"degree {degree}."
            )
        if recipient in neighbours:
            raise MessageRejected(f"setup lists client {recipient} as its own neighbour.")
        if points and (min(points) < 1 or max(points) > n):
            raise MessageRejected(f"Shamir points must lie in [1, {n}].")
        return cls(
            session=_bytes(data["session"], "session"),
            recipient=recipient,
            num_clients=n,
            threshold=_int(data["threshold"], "threshold", 1, degree),
            num_summations=_int(data["num_summations"], "num_summations", 1, 64),
            degree=degree,
            consistency=_int(data["consistency"], "consistency", 0, 1),
            graph_digest=_digest(data["graph_digest"], "graph_digest"),
            neighbours=neighbours,
            points=points,
        )

    @property
    def complete(self) -> bool:
        """Whether the session uses the complete graph (every client a neighbour)."""
        return self.degree == self.num_clients - 1

    def canonical(self) -> bytes:
        """Return an unambiguous encoding of the session-wide fields (input to the session id).

        The recipient's own fields (``recipient``, ``neighbours``, ``points``) are left out:
        every client of the session derives the same bytes.
        """
        head = struct.pack(
            "<QQQQQ",
            self.num_clients,
            self.threshold,
            self.num_summations,
            self.degree,
            self.consistency,
        )
        return self.session + head + self.graph_digest


@dataclass(frozen=True)
class AdvertiseKeys(Message):
    """Client -> server: the client's X25519 public keys (round 0 reply).

    ``mask_keys`` concatenates one 32-byte public mask key per summation,
    ``seed_commitments`` one 32-byte commitment per summation to the self-mask seed
    (:func:`secagg.crypto.commit_seed`), and ``signing_key`` is the Ed25519 public key of the
    consistency round (empty when the session has none). With a roster, ``identity`` is the
    roster member the client is (UTF-8 name) and ``identity_signature`` its identity key's
    Ed25519 signature of :func:`secagg.identity.identity_payload`; both empty without one.
    """

    TAG: ClassVar[bytes] = b"secagg/advertise-keys"
    session: bytes
    sender: int
    channel_key: bytes
    mask_keys: bytes
    seed_commitments: bytes
    signing_key: bytes
    identity: bytes = b""
    identity_signature: bytes = b""

    @classmethod
    def _parse(cls, data: Mapping[str, object]) -> AdvertiseKeys:
        return cls(
            session=_bytes(data["session"], "session"),
            sender=_int(data["sender"], "sender"),
            channel_key=_bytes(data["channel_key"], "channel_key"),
            mask_keys=_bytes(data["mask_keys"], "mask_keys"),
            seed_commitments=_bytes(data["seed_commitments"], "seed_commitments"),
            signing_key=_bytes(data["signing_key"], "signing_key"),
            identity=_bytes(data["identity"], "identity"),
            identity_signature=_bytes(data["identity_signature"], "identity_signature"),
        )


@dataclass(frozen=True)
class KeyDirectory(Message):
    """Server -> one client that advertised keys: how many advertised, and the keys it needs.

    ``num_advertised`` counts the clients that advertised keys and ``advertised_digest`` is
    the SHA-256 of their sorted ids (:func:`secagg.crypto.id_digest`); both enter the session
    id. ``key_owners`` (sorted) are the clients whose keys follow, aligned with
    ``channel_keys``, ``mask_keys`` and ``signing_keys``: the recipient and its neighbours
    that advertised (O(k) keys; every client on the complete graph). ``identities`` and
    ``identity_signatures`` forward each owner's roster member and identity signature
    (:class:`AdvertiseKeys`; empty bytes without a roster).
    """

    TAG: ClassVar[bytes] = b"secagg/key-directory"
    session: bytes
    num_advertised: int
    advertised_digest: bytes
    key_owners: tuple[int, ...]
    channel_keys: tuple[bytes, ...]
    mask_keys: tuple[bytes, ...]
    signing_keys: tuple[bytes, ...]
    identities: tuple[bytes, ...] = ()
    identity_signatures: tuple[bytes, ...] = ()

    @classmethod
    def _parse(cls, data: Mapping[str, object]) -> KeyDirectory:
        owners = _int_list(data["key_owners"], "key_owners")
        _unique(owners, "key_owners")
        _sorted(owners, "key_owners")
        channel = _bytes_list(data["channel_keys"], "channel_keys")
        mask = _bytes_list(data["mask_keys"], "mask_keys")
        signing = _bytes_list(data["signing_keys"], "signing_keys")
        identities = _bytes_list(data["identities"], "identities")
        signatures = _bytes_list(data["identity_signatures"], "identity_signatures")
        lengths = {len(x) for x in (owners, channel, mask, signing, identities, signatures)}
        if len(lengths) != 1:
            raise MessageRejected("key directory lists differ in length.")
        return cls(
            session=_bytes(data["session"], "session"),
            num_advertised=_int(data["num_advertised"], "num_advertised", len(owners)),
            advertised_digest=_digest(data["advertised_digest"], "advertised_digest"),
            key_owners=owners,
            channel_keys=channel,
            mask_keys=mask,
            signing_keys=signing,
            identities=identities,
            identity_signatures=signatures,
        )

    def canonical(self) -> bytes:
        """Return an unambiguous encoding of who advertised (input to the session id).

        The count and the digest of the ids only: each client sees its own slice of the
        keys, and the keys enter every derived key through the X25519 secrets themselves.
        """
        return struct.pack("<Q", self.num_advertised) + self.advertised_digest


@dataclass(frozen=True)
class ShareKeys(Message):
    """Client -> server: encrypted shares, one ciphertext per neighbour (round 1 reply).

    ``digests`` holds, per recipient, the SHA-256 digest of each share dealt to it
    (:func:`secagg.evidence.share_digests`), and ``signature`` the dealer's Ed25519 signature
    of them with its round-0 signing key (:func:`secagg.evidence.dealer_payload`).
    """

    TAG: ClassVar[bytes] = b"secagg/share-keys"
    session: bytes
    sender: int
    recipients: tuple[int, ...]
    ciphertexts: tuple[bytes, ...]
    digests: tuple[bytes, ...] = ()
    signature: bytes = b""

    @classmethod
    def _parse(cls, data: Mapping[str, object]) -> ShareKeys:
        recipients = _int_list(data["recipients"], "recipients")
        _unique(recipients, "recipients")
        ciphertexts = _bytes_list(data["ciphertexts"], "ciphertexts")
        digests = _bytes_list(data["digests"], "digests")
        if not len(recipients) == len(ciphertexts) == len(digests):
            raise MessageRejected("recipients, ciphertexts and digests differ in length.")
        return cls(
            session=_bytes(data["session"], "session"),
            sender=_int(data["sender"], "sender"),
            recipients=recipients,
            ciphertexts=ciphertexts,
            digests=digests,
            signature=_bytes(data["signature"], "signature"),
        )


@dataclass(frozen=True, eq=False)
class MaskedInputRequest(Message):
    """Server -> one client: start summation ``summation`` (round 2 request).

    Carries the fixed-point encoding (``scales``, ``bounds``, ``max_clients``, the ring
    ``Z_2^m`` as ``modulus_bits``) and, in the first summation only, the ciphertexts
    addressed to ``recipient`` with their senders and the share digests each sender signed
    for it (``digests``, aligned with ``senders``).
    """

    TAG: ClassVar[bytes] = b"secagg/masked-input-request"
    session: bytes
    summation: int
    recipient: int
    scales: npt.NDArray[np.float64]
    bounds: npt.NDArray[np.float64]
    max_clients: int
    senders: tuple[int, ...]
    ciphertexts: tuple[bytes, ...]
    modulus_bits: int = 64
    sum_bounds: npt.NDArray[np.float64] = field(default_factory=lambda: np.zeros(0))  # none: []
    digests: tuple[bytes, ...] = ()

    @classmethod
    def _parse(cls, data: Mapping[str, object]) -> MaskedInputRequest:
        senders = _int_list(data["senders"], "senders")
        _unique(senders, "senders")
        ciphertexts = _bytes_list(data["ciphertexts"], "ciphertexts")
        digests = _bytes_list(data["digests"], "digests")
        if not len(senders) == len(ciphertexts) == len(digests):
            raise MessageRejected("senders, ciphertexts and digests differ in length.")
        scales = _array(data["scales"], "scales", np.float64, 1)
        bounds = _array(data["bounds"], "bounds", np.float64, 1)
        if scales.shape != bounds.shape:
            raise MessageRejected("scales and bounds differ in length.")
        sum_bounds = _array(data["sum_bounds"], "sum_bounds", np.float64, 1)
        if sum_bounds.size and sum_bounds.shape != scales.shape:
            raise MessageRejected("scales and sum_bounds differ in length.")
        return cls(
            session=_bytes(data["session"], "session"),
            summation=_int(data["summation"], "summation", 0, 63),
            recipient=_int(data["recipient"], "recipient"),
            scales=scales,
            bounds=bounds,
            max_clients=_int(data["max_clients"], "max_clients", 1),
            modulus_bits=_int(data["modulus_bits"], "modulus_bits", 32, 64),  # 32 or 64: encoding
            sum_bounds=sum_bounds,
            senders=senders,
            ciphertexts=ciphertexts,
            digests=digests,
        )


@dataclass(frozen=True, eq=False)
class MaskedInput(Message):
    """Client -> server: the masked, encoded vector in Z_{2^m}, uint64 or uint32 (round 2 reply).

    ``rejected`` (first summation only) lists the senders whose shares this client could not
    open or found unlike their signed digests: it masked without them.
    """

    TAG: ClassVar[bytes] = b"secagg/masked-input"
    session: bytes
    sender: int
    summation: int
    vector: npt.NDArray[np.uint64] | U32Array
    rejected: tuple[int, ...] = ()

    @classmethod
    def _parse(cls, data: Mapping[str, object]) -> MaskedInput:
        vector = data["vector"]  # uint32: Z_2^32 (the server checks the summation's width)
        word = np.uint32 if getattr(vector, "dtype", None) == np.uint32 else np.uint64
        return cls(
            session=_bytes(data["session"], "session"),
            sender=_int(data["sender"], "sender"),
            summation=_int(data["summation"], "summation", 0, 63),
            vector=_array(vector, "vector", word, 1),
            rejected=_unique_ids(data["rejected"], "rejected"),
        )


@dataclass(frozen=True)
class UnmaskRequest(Message):
    """Server -> one surviving client: who survived summation ``summation`` (round 3 request).

    ``survivors`` and ``dropped`` name the recipient's neighbourhood only (the recipient and
    its neighbours: the only clients whose shares it holds; everyone on the complete graph),
    ``num_survivors`` counts the survivors of the whole session. With a consistency round,
    ``signers``/``signatures`` carry the signatures on the survivor list.
    """

    TAG: ClassVar[bytes] = b"secagg/unmask-request"
    session: bytes
    summation: int
    survivors: tuple[int, ...]
    dropped: tuple[int, ...]
    num_survivors: int
    signers: tuple[int, ...] = ()
    signatures: tuple[bytes, ...] = ()

    @classmethod
    def _parse(cls, data: Mapping[str, object]) -> UnmaskRequest:
        # Duplicates are left for the client to refuse (UnmaskRefused names them).
        signers = _int_list(data["signers"], "signers")
        _unique(signers, "signers")
        signatures = _bytes_list(data["signatures"], "signatures")
        if len(signers) != len(signatures):
            raise MessageRejected("signers and signatures differ in length.")
        return cls(
            session=_bytes(data["session"], "session"),
            summation=_int(data["summation"], "summation", 0, 63),
            survivors=_int_list(data["survivors"], "survivors"),
            dropped=_int_list(data["dropped"], "dropped"),
            num_survivors=_int(data["num_survivors"], "num_survivors"),
            signers=signers,
            signatures=signatures,
        )


@dataclass(frozen=True)
class ConsistencyRequest(Message):
    """Server -> surviving clients: the survivor list to sign (malicious-server sessions).

    Bonawitz et al. (CCS 2017, Sec. 6) consistency check: each client signs the list it is
    shown; the unmask request then carries the signatures.
    """

    TAG: ClassVar[bytes] = b"secagg/consistency-request"
    session: bytes
    summation: int
    survivors: tuple[int, ...]

    @classmethod
    def _parse(cls, data: Mapping[str, object]) -> ConsistencyRequest:
        survivors = _int_list(data["survivors"], "survivors")
        _unique(survivors, "survivors")
        return cls(
            session=_bytes(data["session"], "session"),
            summation=_int(data["summation"], "summation", 0, 63),
            survivors=survivors,
        )


@dataclass(frozen=True)
class ConsistencyResponse(Message):
    """Client -> server: the Ed25519 signature of the survivor list it was shown."""

    TAG: ClassVar[bytes] = b"secagg/consistency-response"
    session: bytes
    sender: int
    summation: int
    signature: bytes

    @classmethod
    def _parse(cls, data: Mapping[str, object]) -> ConsistencyResponse:
        return cls(
            session=_bytes(data["session"], "session"),
            sender=_int(data["sender"], "sender"),
            summation=_int(data["summation"], "summation", 0, 63),
            signature=_bytes(data["signature"], "signature"),
        )


@dataclass(frozen=True, eq=False)
class UnmaskResponse(Message):
    """Client -> server: self-mask-seed shares of survivors, mask-key shares of the dropped.

    ``seed_shares`` has shape ``(len(seed_owners), 1, LIMBS)`` and ``key_shares`` shape
    ``(len(key_owners), 1, LIMBS)``, dtype uint32 (round 3 reply). Both are shares of this
    summation's secrets only: its self-mask seed and its mask private key. ``signature`` is
    the sender's Ed25519 signature of all of it (:func:`secagg.evidence.unmask_payload`).
    """

    TAG: ClassVar[bytes] = b"secagg/unmask-response"
    session: bytes
    sender: int
    summation: int
    seed_owners: tuple[int, ...]
    seed_shares: npt.NDArray[np.uint32]
    key_owners: tuple[int, ...]
    key_shares: npt.NDArray[np.uint32]
    signature: bytes = b""

    @classmethod
    def _parse(cls, data: Mapping[str, object]) -> UnmaskResponse:
        seed_owners = _int_list(data["seed_owners"], "seed_owners")
        key_owners = _int_list(data["key_owners"], "key_owners")
        _unique(seed_owners, "seed_owners")
        _unique(key_owners, "key_owners")
        seed_shares = _array(data["seed_shares"], "seed_shares", np.uint32, 3)
        key_shares = _array(data["key_shares"], "key_shares", np.uint32, 3)
        if seed_shares.shape != (len(seed_owners), 1, LIMBS):
            raise MessageRejected(f"seed_shares has shape {seed_shares.shape}.")
        if key_shares.shape != (len(key_owners), 1, LIMBS):
            raise MessageRejected(f"key_shares has shape {key_shares.shape}.")
        return cls(
            session=_bytes(data["session"], "session"),
            sender=_int(data["sender"], "sender"),
            summation=_int(data["summation"], "summation", 0, 63),
            seed_owners=seed_owners,
            seed_shares=seed_shares,
            key_owners=key_owners,
            key_shares=key_shares,
            signature=_bytes(data["signature"], "signature"),
        )


_ALL: tuple[type[Message], ...] = (
    SetupMessage,
    AdvertiseKeys,
    KeyDirectory,
    ShareKeys,
    MaskedInputRequest,
    MaskedInput,
    UnmaskRequest,
    UnmaskResponse,
    ConsistencyRequest,
    ConsistencyResponse,
)


def split_arrays(
    data: Mapping[str, MessageValue],
) -> tuple[dict[str, bytes | int | list[int] | list[bytes]], dict[str, npt.NDArray[Any]]]:
    """Split a message dictionary into its scalar/list part and its numpy-array part.

    Handy for transports that keep arrays apart (a Flower ``ConfigRecord`` for the first,
    an ``ArrayRecord`` for the second); :func:`join_arrays` undoes it.
    """
    scalars: dict[str, bytes | int | list[int] | list[bytes]] = {}
    arrays: dict[str, npt.NDArray[Any]] = {}
    for key, value in data.items():
        if isinstance(value, np.ndarray):
            arrays[key] = value
        else:  # a ConfigRecord holds lists, not tuples
            scalars[key] = list(value) if isinstance(value, tuple) else value  # type: ignore[assignment]
    return scalars, arrays


def join_arrays(scalars: Mapping[str, object], arrays: Mapping[str, object]) -> dict[str, object]:
    """Merge the two parts made by :func:`split_arrays` (validation happens on parsing)."""
    overlap = set(scalars) & set(arrays)
    if overlap:
        raise MessageRejected(f"fields {sorted(overlap)} appear in both parts.")
    return {**scalars, **arrays}


def parse_message(data: Mapping[str, object]) -> Message:
    """Parse any protocol message by its ``"message"`` tag."""
    tag = data.get("message") if isinstance(data, Mapping) else None
    for cls in _ALL:
        if cls.TAG == tag:
            return cls.from_dict(data)
    raise MessageRejected(f"unknown message tag {tag!r}.")
