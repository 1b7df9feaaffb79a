"""The throwaway PKI issues certificates that chain to its CA and name the right hosts."""

from __future__ import annotations

import ipaddress
import ssl
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.x509 import DNSName, IPAddress
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from cryptography.x509.verification import PolicyBuilder, Store, VerificationError

from jetstream_devtools import pki


def test_issued_certs_chain_to_the_ca() -> None:
    ca = pki.create_ca()
    server = pki.issue_serving_cert(ca)
    client = pki.issue_client_cert(ca, "alice", ["team-a"])

    for cred in (server, client):
        cred.cert.verify_directly_issued_by(ca.cert)
        assert cred.cert.not_valid_before_utc < cred.cert.not_valid_after_utc
    with pytest.raises(InvalidSignature):  # same name, different key
        server.cert.verify_directly_issued_by(pki.create_ca().cert)


def test_serving_cert_passes_full_path_validation_for_loopback_names() -> None:
    ca = pki.create_ca()
    server = pki.issue_serving_cert(ca)
    builder = PolicyBuilder().store(Store([ca.cert]))
    for name in (DNSName("localhost"), IPAddress(ipaddress.ip_address("127.0.0.1"))):
        chain = builder.build_server_verifier(name).verify(server.cert, [])
        assert chain[-1] == ca.cert
    with pytest.raises(VerificationError):
        builder.build_server_verifier(DNSName("example.com")).verify(server.cert, [])


def test_serving_cert_names_loopback_only() -> None:
    server = pki.issue_serving_cert(pki.create_ca())
    sans = server.cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == ["localhost"]
    assert sans.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    usages = server.cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.SERVER_AUTH in usages


def test_client_cert_carries_user_and_groups() -> None:
    client = pki.issue_client_cert(pki.create_ca(), "alice", ["team-a", "team-b"])
    subject = client.cert.subject
    assert [a.value for a in subject.get_attributes_for_oid(NameOID.COMMON_NAME)] == ["alice"]
    orgs = [a.value for a in subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]
    assert orgs == ["team-a", "team-b"]
    usages = client.cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usages) == [ExtendedKeyUsageOID.CLIENT_AUTH]


def test_certificate_needs_a_usage() -> None:
    with pytest.raises(ValueError):
        pki.issue_cert(pki.create_ca(), "nothing")


def test_control_plane_pki_files_load_in_python_tls(tmp_path: Path) -> None:
    files = pki.control_plane_pki(tmp_path)
    assert (files.ca_key.stat().st_mode & 0o777) == 0o600
    # Python's TLS stack (used by the kubernetes client) accepts the PEM formats we write.
    context = ssl.create_default_context(cafile=str(files.ca_cert))
    context.load_cert_chain(str(files.admin_cert), str(files.admin_key))
    # A second call reuses the files, so restarts keep trusting the same CA.
    again = pki.control_plane_pki(tmp_path)
    assert again.ca_cert.read_bytes() == files.ca_cert.read_bytes()
    assert again.load_ca().cert == x509.load_pem_x509_certificate(files.ca_cert.read_bytes())
