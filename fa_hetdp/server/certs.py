"""Development TLS certificates for a test deployment (a throw-away CA and a SuperLink cert).

For trying TLS on one machine or a lab network only: production deployments use their own
PKI. ``python -m fa_hetdp.server.certs OUTDIR [HOST ...]`` writes ``ca.crt``, ``ca.key``,
``server.pem`` and ``server.key`` (the SuperLink's certificate carries every HOST as a
subject alternative name, default ``127.0.0.1 localhost``). Start the SuperLink with
``--ssl-ca-certfile ca.crt --ssl-certfile server.pem --ssl-keyfile server.key`` and each
SuperNode (and ``flwr``'s connection) with ``--root-certificates ca.crt``.
``--node-keys NAME ...`` also writes SuperNode authentication key pairs (OpenSSH format,
see :func:`generate_node_keys`).
"""

from __future__ import annotations

import argparse
import datetime as dt
import ipaddress
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["NodeKeys", "TlsFiles", "generate_node_keys", "generate_tls_files"]


@dataclass(frozen=True)
class TlsFiles:
    """Paths of the files written by :func:`generate_tls_files`."""

    ca_certificate: Path
    ca_key: Path
    server_certificate: Path
    server_key: Path


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


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
    """
    if not hosts:
        raise ValueError("hosts must name at least one host name or IP address, got none.")
    if days < 1:
        raise ValueError(f"days must be >= 1, got days={days}.")
    directory.mkdir(parents=True, exist_ok=True)
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

    files = TlsFiles(
        ca_certificate=directory / "ca.crt",
        ca_key=directory / "ca.key",
        server_certificate=directory / "server.pem",
        server_key=directory / "server.key",
    )
    files.ca_certificate.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    _write_key(files.ca_key, ca_key)
    files.server_certificate.write_bytes(server_cert.public_bytes(serialization.Encoding.PEM))
    _write_key(files.server_key, server_key)
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
    """
    if not name or "/" in name:
        raise ValueError(f"name must be a plain file name, got name={name!r}.")
    directory.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP384R1())
    files = NodeKeys(private_key=directory / name, public_key=directory / f"{name}.pub")
    files.private_key.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.OpenSSH,
            serialization.NoEncryption(),
        )
    )
    files.private_key.chmod(0o600)
    files.public_key.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
        )
        + b"\n"
    )
    return files


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: ``python -m fa_hetdp.server.certs OUTDIR [HOST ...]``."""
    parser = argparse.ArgumentParser(prog="python -m fa_hetdp.server.certs", description=__doc__)
    parser.add_argument("outdir", type=Path)
    parser.add_argument("hosts", nargs="*", default=["127.0.0.1", "localhost"])
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--node-keys", nargs="*", default=[], metavar="NAME")
    args = parser.parse_args(argv)
    files = generate_tls_files(args.outdir, args.hosts, days=args.days)
    for path in (files.ca_certificate, files.server_certificate, files.server_key):
        print(path)
    for name in args.node_keys:
        keys = generate_node_keys(args.outdir, name)
        print(keys.private_key)
        print(keys.public_key)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
