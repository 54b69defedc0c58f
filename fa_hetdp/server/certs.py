"""Development TLS certificates for a test deployment (a throw-away CA and a SuperLink cert).

For trying TLS on one machine or a lab network only: production deployments use their own
PKI. ``python -m fa_hetdp.server.certs OUTDIR [HOST ...]`` writes ``ca.crt``, ``ca.key``,
``server.pem`` and ``server.key`` (the SuperLink's certificate carries every HOST as a
subject alternative name, default ``127.0.0.1 localhost``). Start the SuperLink with
``--ssl-ca-certfile ca.crt --ssl-certfile server.pem --ssl-keyfile server.key`` and each
SuperNode (and ``flwr``'s connection) with ``--root-certificates ca.crt``.
``--node-keys NAME ...`` also writes SuperNode authentication key pairs (OpenSSH format,
see :func:`generate_node_keys`).

Nothing is ever replaced: a new CA over an old one would orphan every certificate and key it
had handed out. The command refuses an OUTDIR that holds anything (one line naming what is
there; exit code 2) before it writes, and :func:`generate_tls_files` and
:func:`generate_node_keys` refuse any file they would replace (:class:`FileExistsError`).
Each file is written atomically (:func:`fa_hetdp.report.files.write_atomic`): the private
keys with mode 0600, the certificates and public keys readable by all (0644).
"""

from __future__ import annotations

import argparse
import datetime as dt
import ipaddress
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from fa_hetdp.report.files import write_atomic

__all__ = ["TLS_FILE_NAMES", "NodeKeys", "TlsFiles", "generate_node_keys", "generate_tls_files"]

#: The files :func:`generate_tls_files` writes, in its folder.
TLS_FILE_NAMES: tuple[str, ...] = ("ca.crt", "ca.key", "server.pem", "server.key")
_PRIVATE, _PUBLIC = 0o600, 0o644


@dataclass(frozen=True)
class TlsFiles:
    """Paths of the files written by :func:`generate_tls_files`."""

    ca_certificate: Path
    ca_key: Path
    server_certificate: Path
    server_key: Path


def _refuse_existing(paths: Sequence[Path]) -> None:
    """Raise :class:`FileExistsError` naming every path of ``paths`` that exists."""
    there = [p for p in paths if os.path.lexists(p)]
    if there:
        one = len(there) == 1
        raise FileExistsError(
            f"{', '.join(str(p) for p in there)} already exist{'s' if one else ''}: nothing is "
            f"replaced (what {'it secures' if one else 'they secure'} would be lost); write "
            "into another folder, or move the old files away first"
        )


def _write(path: Path, data: bytes, mode: int) -> None:
    """Write ``data`` to ``path`` atomically with permissions ``mode`` (set before the rename)."""

    def fill(handle: IO[bytes]) -> None:
        os.fchmod(handle.fileno(), mode)
        handle.write(data)

    write_atomic(path, fill)


def _pkcs8(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _san(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def generate_tls_files(
    directory: Path, hosts: Sequence[str] = ("127.0.0.1", "localhost"), *, days: int = 30
) -> TlsFiles:
    """Write a fresh CA and a SuperLink certificate for ``hosts`` into ``directory``.

    Keys are ECDSA P-256, generated here (never passed in). ``days`` is the validity period.

    Raises
    ------
    FileExistsError
        One of the files (:data:`TLS_FILE_NAMES`) is there already: nothing is written.
    """
    if not hosts:
        raise ValueError("hosts must name at least one host name or IP address, got none.")
    if days < 1:
        raise ValueError(f"days must be >= 1, got days={days}.")
    paths = [directory / name for name in TLS_FILE_NAMES]
    _refuse_existing(paths)
    now = dt.datetime.now(dt.UTC)
    not_before = now - dt.timedelta(minutes=5)
    not_after = now + dt.timedelta(days=days)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fa-hetdp development CA")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )

    server_key = ec.generate_private_key(ec.SECP256R1())
    server_cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
        .issuer_name(ca_name)
        .public_key(server_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.SubjectAlternativeName([_san(h) for h in hosts]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )

    _refuse_existing(paths)  # nothing appeared in the meantime
    files = TlsFiles(*paths)
    _write(files.ca_key, _pkcs8(ca_key), _PRIVATE)
    _write(files.ca_certificate, ca_cert.public_bytes(serialization.Encoding.PEM), _PUBLIC)
    _write(files.server_key, _pkcs8(server_key), _PRIVATE)
    _write(files.server_certificate, server_cert.public_bytes(serialization.Encoding.PEM), _PUBLIC)
    return files


@dataclass(frozen=True)
class NodeKeys:
    """A SuperNode's authentication key pair (OpenSSH format, ECDSA P-384)."""

    private_key: Path
    public_key: Path


def generate_node_keys(directory: Path, name: str) -> NodeKeys:
    """Write ``<name>`` (private) and ``<name>.pub`` for SuperNode authentication.

    The SuperLink runs with ``--enable-supernode-auth``; the public key is registered with
    ``flwr supernode register <name>.pub <connection>``; the SuperNode starts with
    ``--auth-supernode-private-key <name>``. Equivalent to
    ``ssh-keygen -t ecdsa -b 384 -N "" -f <name>``.

    Raises
    ------
    ValueError
        ``name`` is not a plain file name.
    FileExistsError
        ``<name>`` or ``<name>.pub`` is there already: nothing is written.
    """
    problem = _node_key_name_problem(name)
    if problem is not None:
        raise ValueError(f"name {problem}.")
    files = NodeKeys(private_key=directory / name, public_key=directory / f"{name}.pub")
    _refuse_existing([files.private_key, files.public_key])
    key = ec.generate_private_key(ec.SECP384R1())
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    _write(files.private_key, private, _PRIVATE)
    _write(files.public_key, public + b"\n", _PUBLIC)
    return files


def _node_key_name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a SuperNode key file (None: it can)."""
    if not name or "/" in name or os.sep in name or name in (".", ".."):
        return f"must be a plain file name, got name={name!r}"
    return None


def _node_key_names_problem(names: Sequence[str]) -> str | None:
    """Why ``--node-keys NAME ...`` cannot be written together (None: they can)."""
    taken = set(TLS_FILE_NAMES)
    for name in names:
        problem = _node_key_name_problem(name)
        if problem is not None:
            return f"each NAME {problem}"
        if {name, f"{name}.pub"} & taken:
            clash = sorted({name, f"{name}.pub"} & taken)[0]
            return (
                f"{name!r} would write {clash}, which "
                + ("another NAME writes" if clash not in TLS_FILE_NAMES else "is a TLS file")
                + ": give each owner its own name"
            )
        taken |= {name, f"{name}.pub"}
    return None


def _outdir_problem(outdir: Path) -> str | None:
    """Why OUTDIR cannot take the files (None: it is new or empty)."""
    if not outdir.exists():
        return (
            None
            if not os.path.lexists(outdir)
            else f"{outdir} is a broken link; choose another OUTDIR"
        )
    if not outdir.is_dir():
        return f"{outdir} exists and is not a folder; choose another OUTDIR"
    held = sorted(entry.name for entry in outdir.iterdir())
    if not held:
        return None
    shown = ", ".join(held[:8]) + (f", ... ({len(held)} entries)" if len(held) > 8 else "")
    return (
        f"{outdir} already exists and is not empty ({shown}): the command writes a new CA "
        "and new keys and never replaces files (the old CA's certificates and the keys "
        "handed out would be lost); write into another folder (new or empty), or move "
        f"{outdir} away first if its files are no longer needed"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: ``python -m fa_hetdp.server.certs OUTDIR [HOST ...]``; the exit code.

    OUTDIR must be new or empty (nothing is ever replaced); a refused command writes nothing
    and exits with code 2 and one line on stderr.
    """
    parser = argparse.ArgumentParser(prog="python -m fa_hetdp.server.certs", description=__doc__)
    parser.add_argument("outdir", type=Path, help="a new or empty folder for the files")
    parser.add_argument("hosts", nargs="*", default=["127.0.0.1", "localhost"])
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--node-keys", nargs="*", default=[], metavar="NAME")
    args = parser.parse_args(argv)

    def refuse(message: str) -> int:
        print(f"{parser.prog}: error: {message}", file=sys.stderr)
        return 2

    names_problem = _node_key_names_problem(args.node_keys)
    if names_problem is not None:
        return refuse(f"--node-keys: {names_problem}")
    outdir_problem = _outdir_problem(args.outdir)
    if outdir_problem is not None:
        return refuse(outdir_problem)
    try:
        files = generate_tls_files(args.outdir, args.hosts, days=args.days)
        keys = [generate_node_keys(args.outdir, name) for name in args.node_keys]
    except (ValueError, OSError) as exc:  # a bad host or --days; a folder that cannot be written
        return refuse(str(exc))
    for path in (files.ca_certificate, files.server_certificate, files.server_key):
        print(path)
    for pair in keys:
        print(pair.private_key)
        print(pair.public_key)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
