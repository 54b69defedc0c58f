"""Development TLS certificates: a CA and a SuperLink certificate it signs."""

from __future__ import annotations

import ipaddress
import ssl
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec

from fa_hetdp.server.certs import generate_tls_files, main


def test_server_certificate_is_signed_by_the_ca_for_the_hosts(tmp_path: Path) -> None:
    files = generate_tls_files(tmp_path, ("127.0.0.1", "localhost", "link.example"))
    ca = x509.load_pem_x509_certificate(files.ca_certificate.read_bytes())
    server = x509.load_pem_x509_certificate(files.server_certificate.read_bytes())
    ca_key = ca.public_key()
    assert isinstance(ca_key, ec.EllipticCurvePublicKey)
    server.verify_directly_issued_by(ca)
    names = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert ipaddress.ip_address("127.0.0.1") in names.get_values_for_type(x509.IPAddress)
    assert set(names.get_values_for_type(x509.DNSName)) == {"localhost", "link.example"}
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True
    assert files.server_key.stat().st_mode & 0o077 == 0
    # Python's TLS stack accepts the pair and trusts the CA.
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(files.server_certificate, files.server_key)
    client = ssl.create_default_context(cafile=str(files.ca_certificate))
    assert client.cert_store_stats()["x509_ca"] == 1


def test_rejects_empty_hosts_and_bad_validity(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="at least one host"):
        generate_tls_files(tmp_path, ())
    with pytest.raises(ValueError, match="days must be"):
        generate_tls_files(tmp_path, days=0)


def test_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tmp_path / "out"), "10.0.0.5"]) == 0
    printed = capsys.readouterr().out.split()
    assert printed[0].endswith("ca.crt") and Path(printed[1]).is_file()
