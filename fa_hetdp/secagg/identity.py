"""Long-term identity keys and the federation roster: the PKI of the malicious-server mode.

Bonawitz et al.'s guarantee against a server that deviates (CCS 2017, Sec. 6) assumes that
the clients can authenticate each other's round-0 public keys. Without that, the server
hands out every key and can give a target client keys it made itself for all of the
target's peers: it then reads every share the target deals and unmasks its input with no
colluding client at all. Here every data owner holds a long-term **Ed25519 identity key**
and every node holds the same **roster** (member name -> identity public key), distributed
out of band and compared by its SHA-256. In round 0 a client signs its round-0 keys (the
share-channel and mask public keys and the consistency signing key) together with the
session-binding fields, its client id and the roster's SHA-256
(:func:`identity_payload`); the server forwards the signatures in the key directory, and a
client refuses a directory in which any key is not signed by the roster member its owner
claims to be, a member is not on the roster, or one member claims two client ids
(:func:`check_identities`).

Files (all made by ``python -m fa_hetdp.secagg.identity``):

- an identity key: the Ed25519 private key, PEM (PKCS #8, unencrypted, mode 0600), and
  beside it ``<file>.pub``: the public key as 64 hex digits on one line;
- the roster: TOML, one table ``[members]`` of ``name = "<64 hex digits>"``; its SHA-256 is
  the SHA-256 of the file's bytes (what ``sha256sum`` prints), so every node must hold the
  byte-identical file.

Commands::

    python -m fa_hetdp.secagg.identity keygen certs/owner-0.identity
    python -m fa_hetdp.secagg.identity roster roster.toml owner-0=certs/owner-0.identity.pub ...
    python -m fa_hetdp.secagg.identity digest roster.toml

Keys and signatures are :mod:`cryptography`'s Ed25519 (OpenSSL); TOML is read with the
standard library's :mod:`tomllib`.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import struct
import sys
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from . import crypto
from .errors import MessageRejected, SecAggError

if TYPE_CHECKING:
    from .messages import KeyDirectory

__all__ = [
    "Roster",
    "RosterError",
    "check_identities",
    "generate_identity",
    "generate_roster",
    "identity_payload",
    "load_identity_key",
    "main",
    "public_identity",
    "write_identity_key",
]

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_HEX = re.compile(r"[0-9a-f]{64}")
_LENGTH = struct.Struct("<Q")
_HEADER = (
    "# fa-hetdp secure-aggregation roster: member name = Ed25519 identity public key (hex).\n"
    "# Every node must hold this exact file; compare its SHA-256 out of band.\n"
)


class RosterError(SecAggError, ValueError):
    """A roster or identity key file that cannot be used (the message says what is wrong)."""


@dataclass(frozen=True)
class Roster:
    """The federation's members and their Ed25519 identity public keys.

    Attributes
    ----------
    members : mapping of str to bytes
        Member name -> 32-byte raw Ed25519 public key (distinct keys).
    digest : bytes
        SHA-256 of the roster file's bytes (what people compare).
    """

    members: Mapping[str, bytes]
    digest: bytes
    _by_key: Mapping[bytes, str] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_key", {key: name for name, key in self.members.items()})

    @property
    def sha256(self) -> str:
        """The roster's SHA-256 in hex."""
        return self.digest.hex()

    def member_of(self, public: bytes) -> str | None:
        """Return the member whose identity key is ``public`` (``None``: not on the roster)."""
        return self._by_key.get(public)

    @classmethod
    def from_bytes(cls, data: bytes, *, source: str = "roster") -> Roster:
        """Parse and validate a roster file's bytes.

        Raises
        ------
        RosterError
            Not TOML, no ``[members]`` table, other top-level keys, a bad member name, a key
            that is not 64 hex digits of an Ed25519 public key, or one key listed twice.
        """
        try:
            document = tomllib.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise RosterError(f"{source}: not a TOML roster ({exc}).") from None
        members = document.get("members")
        if set(document) != {"members"} or not isinstance(members, dict) or not members:
            raise RosterError(
                f"{source}: a roster holds exactly one non-empty table [members] of "
                f'name = "<64 hex digits of an Ed25519 public key>", got keys {sorted(document)}.'
            )
        keys: dict[str, bytes] = {}
        for name, value in members.items():
            if not _NAME.fullmatch(name):
                raise RosterError(
                    f"{source}: member name {name!r} must be 1-64 of A-Z a-z 0-9 . _ - "
                    "(starting with a letter or digit)."
                )
            if not isinstance(value, str) or not _HEX.fullmatch(value):
                raise RosterError(
                    f"{source}: member {name!r}: the identity key must be 64 lower-case hex "
                    f"digits (a raw Ed25519 public key), got {str(value)[:20]!r}."
                )
            raw = bytes.fromhex(value)
            try:
                Ed25519PublicKey.from_public_bytes(raw)
            except ValueError:
                raise RosterError(
                    f"{source}: member {name!r}: not an Ed25519 public key."
                ) from None
            keys[name] = raw
        if len(set(keys.values())) != len(keys):
            raise RosterError(f"{source}: one identity key is listed for two members.")
        return cls(members=keys, digest=hashlib.sha256(data).digest())

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Roster:
        """Read and validate the roster file at ``path`` (see :meth:`from_bytes`)."""
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            raise RosterError(f"roster {path}: cannot be read ({exc.strerror}).") from None
        return cls.from_bytes(data, source=f"roster {path}")

    @staticmethod
    def render(members: Mapping[str, bytes]) -> bytes:
        """Return the roster file's bytes for ``members`` (sorted by name)."""
        lines = [_HEADER, "[members]\n"]
        lines += [f'"{name}" = "{members[name].hex()}"\n' for name in sorted(members)]
        return "".join(lines).encode()

    @classmethod
    def build(cls, members: Mapping[str, bytes]) -> Roster:
        """Return the roster of ``members`` (validated as if read from a file)."""
        return cls.from_bytes(cls.render(members))


def public_identity(private_raw: bytes) -> bytes:
    """Return the raw Ed25519 public key of a raw identity private key."""
    return Ed25519PrivateKey.from_private_bytes(private_raw).public_key().public_bytes_raw()


def generate_identity() -> bytes:
    """Return a fresh raw Ed25519 identity private key (32 bytes, from the OS CSPRNG)."""
    return Ed25519PrivateKey.generate().private_bytes_raw()


def generate_roster(names: Sequence[str]) -> tuple[dict[str, bytes], Roster]:
    """Return fresh identity keys (name -> raw private key) and their roster.

    For in-process sessions and tests: the keys and the roster are made in one process, so
    they exercise the checks, not the out-of-band distribution a deployment relies on.
    """
    keys = {name: generate_identity() for name in names}
    return keys, Roster.build({name: public_identity(k) for name, k in keys.items()})


def write_identity_key(path: str | os.PathLike[str], private_raw: bytes) -> Path:
    """Write an identity private key (PEM, PKCS #8, mode 0600) and ``<path>.pub`` (hex)."""
    target = Path(path)
    pem = Ed25519PrivateKey.from_private_bytes(private_raw).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(pem)
    public = target.with_name(target.name + ".pub")
    public.write_text(public_identity(private_raw).hex() + "\n")
    return public


def load_identity_key(path: str | os.PathLike[str]) -> bytes:
    """Read an identity private key written by :func:`write_identity_key`; return it raw.

    Raises
    ------
    RosterError
        The file cannot be read or is not an unencrypted PEM Ed25519 private key.
    """
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise RosterError(f"identity key {path}: cannot be read ({exc.strerror}).") from None
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError):
        key = None
    if not isinstance(key, Ed25519PrivateKey):
        raise RosterError(
            f"identity key {path}: not an unencrypted PEM Ed25519 private key (make one with "
            "python -m fa_hetdp.secagg.identity keygen PATH)."
        )
    return key.private_bytes_raw()


def identity_payload(
    roster_digest: bytes,
    setup_canonical: bytes,
    client_id: int,
    member: bytes,
    channel_key: bytes,
    mask_keys: bytes,
    signing_key: bytes,
) -> bytes:
    """Return the bytes a client signs with its identity key in round 0.

    The roster's SHA-256, the session-binding fields (the setup's session nonce, n, t, the
    summations, the degree, the consistency flag and the graph digest), the client id, the
    member name and the round-0 public keys, each length-prefixed.
    """
    return _identity_payload(
        _payload_head(roster_digest, setup_canonical),
        client_id,
        member,
        channel_key,
        mask_keys,
        signing_key,
    )


def _payload_head(roster_digest: bytes, setup_canonical: bytes) -> bytes:
    """Return the part of :func:`identity_payload` shared by every client of one setup."""
    return (
        crypto.DOMAIN
        + b"/identity"
        + _LENGTH.pack(len(roster_digest))
        + roster_digest
        + _LENGTH.pack(len(setup_canonical))
        + setup_canonical
    )


def _identity_payload(
    head: bytes,
    client_id: int,
    member: bytes,
    channel_key: bytes,
    mask_keys: bytes,
    signing_key: bytes,
) -> bytes:
    pack = _LENGTH.pack
    return b"".join(
        (
            head,
            pack(len(member)),
            member,
            pack(len(channel_key)),
            channel_key,
            pack(len(mask_keys)),
            mask_keys,
            pack(len(signing_key)),
            signing_key,
            pack(client_id),
        )
    )


def check_identities(
    roster: Roster,
    own: str,
    me: int,
    setup_canonical: bytes,
    msg: KeyDirectory,
    *,
    signed: tuple[bytes, bytes] | None = None,
) -> int:
    """Refuse a key directory whose keys are not all signed by their roster members.

    Every other client's entry is verified here, by this client, under the identity key the
    roster lists for the member it claims: one Ed25519 verification per key shown (nothing
    is cached across clients or calls). This client's own entry is compared with what it
    signed itself when ``signed`` = ``(its signing public key, its identity signature)`` is
    given (Ed25519 signatures are deterministic and OpenSSL rejects non-canonical ones, so
    the bytes match exactly when the entry is the one it sent), else verified like the rest.

    Returns
    -------
    int
        The number of signatures verified.

    Raises
    ------
    MessageRejected
        A key owner names no member or one not on the roster, one member is claimed by two
        client ids, this client's own entry names another member or differs from what it
        signed, or a signature does not verify under the claimed member's identity key.
    """
    claimed: dict[bytes, int] = {}
    head = _payload_head(roster.digest, setup_canonical)
    verified = 0
    for p, owner in enumerate(msg.key_owners):
        member = msg.identities[p]
        name = member.decode("utf-8", "replace")
        public = roster.members.get(name) if member else None
        if public is None:
            raise MessageRejected(
                f"client {me}: client {owner} claims identity {name!r}, not a member of the "
                f"roster (SHA-256 {roster.sha256[:16]}...); rejected."
            )
        if member in claimed:
            raise MessageRejected(
                f"client {me}: identity {name!r} is claimed by clients {claimed[member]} and "
                f"{owner}; rejected."
            )
        claimed[member] = owner
        if owner == me:
            if name != own:
                raise MessageRejected(f"client {me}: own identity shown as {name!r}, not {own!r}.")
            if signed is not None and signed[1]:  # own keys: check_directory compared them
                if (msg.signing_keys[p], msg.identity_signatures[p]) != signed:
                    raise MessageRejected(
                        f"client {me}: own signing key or identity signature altered; rejected."
                    )
                continue
        payload = _identity_payload(
            head, owner, member, msg.channel_keys[p], msg.mask_keys[p], msg.signing_keys[p]
        )
        verified += 1
        if not crypto.verify_signature(public, payload, msg.identity_signatures[p]):
            raise MessageRejected(
                f"client {me}: client {owner}'s round-0 keys are not signed by the identity "
                f"key of roster member {name!r}; rejected."
            )
    return verified


# ---------------------------------------------------------------------------- command line
def main(argv: Sequence[str] | None = None) -> int:
    """``python -m fa_hetdp.secagg.identity {keygen,roster,digest}``; returns the exit code."""
    parser = argparse.ArgumentParser(
        prog="python -m fa_hetdp.secagg.identity",
        description="Identity keys and the roster of the malicious-server secure aggregation.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    keygen = sub.add_parser("keygen", help="write an Ed25519 identity key and PATH.pub")
    keygen.add_argument("path", help="the private key file to create (must not exist)")
    roster = sub.add_parser("roster", help="write a roster from NAME=PUBFILE pairs")
    roster.add_argument("path", help="the roster file to create (TOML)")
    roster.add_argument("members", nargs="+", help="NAME=PATH of a member's .pub file")
    digest = sub.add_parser("digest", help="check a roster and print its SHA-256")
    digest.add_argument("path")
    args = parser.parse_args(argv)
    try:
        if args.command == "keygen":
            public = write_identity_key(args.path, generate_identity())
            print(f"{args.path}: identity key; public key {public.read_text().strip()} in {public}")
        elif args.command == "roster":
            members: dict[str, bytes] = {}
            for pair in args.members:
                name, sep, pub = pair.partition("=")
                if not sep or name in members:
                    raise RosterError(f"{pair!r}: give each member once as NAME=PATH.pub.")
                try:
                    text = Path(pub).read_text().strip()
                except OSError as exc:
                    raise RosterError(f"{pub}: cannot be read ({exc.strerror}).") from None
                if not _HEX.fullmatch(text):
                    raise RosterError(f"{pub}: not 64 hex digits of an identity public key.")
                members[name] = bytes.fromhex(text)
            data = Roster.render(members)
            built = Roster.from_bytes(data, source=f"roster {args.path}")
            temporary = Path(f"{args.path}.tmp-{os.getpid()}")
            temporary.write_bytes(data)
            os.replace(temporary, args.path)  # atomically: never a half-written roster
            print(f"{args.path}: {len(built.members)} members, SHA-256 {built.sha256}")
        else:
            loaded = Roster.load(args.path)
            print(f"{args.path}: {len(loaded.members)} members, SHA-256 {loaded.sha256}")
    except (RosterError, FileExistsError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
