"""A throwaway PKI: a CA, serving and client certificates, and service-account keys.

kube-apiserver needs TLS and client-certificate authentication to run RBAC for real; later tests
reuse `issue_cert` for NATS TLS and for users without RBAC bindings. Keys are ECDSA P-256: fast to
generate and accepted by Go's TLS stack, kube-apiserver (ES256 service-account tokens) and NATS.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

LOOPBACK_IPS = ("127.0.0.1",)
LOOPBACK_DNS = ("localhost",)
ADMIN_USER = "jetstream-operator-admin"
ADMIN_GROUP = "system:masters"
# The identity RBAC's bootstrap policy grants kube-controller-manager (it then mints a token per
# controller service account, so each controller runs with its own bootstrap role).
CONTROLLER_MANAGER_USER = "system:kube-controller-manager"

# Backdated so a few seconds of clock skew between processes never makes a fresh cert invalid.
_BACKDATE = datetime.timedelta(hours=1)


@dataclass(frozen=True)
class Credential:
    """A certificate with its private key."""

    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    @property
    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    @property
    def key_pem(self) -> bytes:
        return private_key_pem(self.key)

    def write(self, directory: Path, stem: str) -> tuple[Path, Path]:
        """Write `<stem>.crt` and `<stem>.key` (mode 0600) and return their paths."""
        directory.mkdir(parents=True, exist_ok=True)
        cert_file = directory / f"{stem}.crt"
        key_file = directory / f"{stem}.key"
        cert_file.write_bytes(self.cert_pem)
        _write_secret(key_file, self.key_pem)
        return cert_file, key_file


def new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def private_key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def public_key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def _name(common_name: str, organizations: Sequence[str] = ()) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
    attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attributes)


def create_ca(common_name: str = "jetstream-operator-dev-ca", *, days: int = 3650) -> Credential:
    """A self-signed CA that may only sign end-entity certificates."""
    key = new_key()
    now = datetime.datetime.now(datetime.UTC)
    name = _name(common_name)
    public = key.public_key()
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(now + datetime.timedelta(days=days))
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
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .sign(key, hashes.SHA256())
    )
    return Credential(cert, key)


def issue_cert(
    ca: Credential,
    common_name: str,
    *,
    organizations: Sequence[str] = (),
    dns_names: Sequence[str] = (),
    ip_addresses: Sequence[str] = (),
    server: bool = False,
    client: bool = False,
    days: int = 365,
) -> Credential:
    """An end-entity certificate signed by `ca`.

    For Kubernetes client certs the CN is the user name and each organization a group.
    """
    if not (server or client):
        raise ValueError("a certificate needs server and/or client usage")
    key = new_key()
    now = datetime.datetime.now(datetime.UTC)
    usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if server else []) + (
        [ExtendedKeyUsageOID.CLIENT_AUTH] if client else []
    )
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name, organizations))
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()),
            critical=False,
        )
    )
    sans: list[x509.GeneralName] = [x509.DNSName(name) for name in dns_names]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses]
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return Credential(builder.sign(ca.key, hashes.SHA256()), key)


def issue_serving_cert(
    ca: Credential,
    common_name: str = "localhost",
    *,
    ip_addresses: Sequence[str] = (),
    dns_names: Sequence[str] = (),
) -> Credential:
    """A server (and peer-client) cert valid for 127.0.0.1, localhost and the names given."""
    return issue_cert(
        ca,
        common_name,
        dns_names=(*LOOPBACK_DNS, *dns_names),
        ip_addresses=(*LOOPBACK_IPS, *ip_addresses),
        server=True,
        client=True,
    )


def issue_client_cert(ca: Credential, user: str, groups: Sequence[str] = ()) -> Credential:
    """A Kubernetes client certificate: user `user` in `groups`."""
    return issue_cert(ca, user, organizations=groups, client=True)


@dataclass(frozen=True)
class ControlPlanePki:
    """The PEM files kube-apiserver (and its admin) need, all inside one directory."""

    directory: Path
    ca_cert: Path
    ca_key: Path
    serving_cert: Path
    serving_key: Path
    admin_cert: Path
    admin_key: Path
    controller_manager_cert: Path
    controller_manager_key: Path
    service_account_key: Path
    service_account_pub: Path

    def load_ca(self) -> Credential:
        """The CA back from disk, so tests can issue more certs (e.g. for unbound users)."""
        cert = x509.load_pem_x509_certificate(self.ca_cert.read_bytes())
        key = serialization.load_pem_private_key(self.ca_key.read_bytes(), password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise TypeError(f"{self.ca_key} is not an EC private key")
        return Credential(cert, key)


def control_plane_pki(
    directory: Path, *, serving_ips: Sequence[str] = (), serving_dns: Sequence[str] = ()
) -> ControlPlanePki:
    """The control plane's PKI in `directory`, created once and reused on restarts.

    `serving_ips`/`serving_dns` are extra names of the API server (a node's pods reach it by the
    `kubernetes` Service's IP and DNS name and by the address the project made for it).
    """
    pki = ControlPlanePki(
        directory=directory,
        ca_cert=directory / "ca.crt",
        ca_key=directory / "ca.key",
        serving_cert=directory / "serving.crt",
        serving_key=directory / "serving.key",
        admin_cert=directory / "admin.crt",
        admin_key=directory / "admin.key",
        controller_manager_cert=directory / "controller-manager.crt",
        controller_manager_key=directory / "controller-manager.key",
        service_account_key=directory / "sa.key",
        service_account_pub=directory / "sa.pub",
    )
    if all(path.is_file() for path in _files(pki)):
        return pki
    ca = create_ca()
    ca.write(directory, "ca")
    issue_serving_cert(ca, "kube-apiserver", ip_addresses=serving_ips, dns_names=serving_dns).write(
        directory, "serving"
    )
    issue_client_cert(ca, ADMIN_USER, [ADMIN_GROUP]).write(directory, "admin")
    issue_client_cert(ca, CONTROLLER_MANAGER_USER).write(directory, "controller-manager")
    sa_key = new_key()
    _write_secret(pki.service_account_key, private_key_pem(sa_key))
    pki.service_account_pub.write_bytes(public_key_pem(sa_key))
    return pki


def _files(pki: ControlPlanePki) -> list[Path]:
    return [
        pki.ca_cert,
        pki.ca_key,
        pki.serving_cert,
        pki.serving_key,
        pki.admin_cert,
        pki.admin_key,
        pki.controller_manager_cert,
        pki.controller_manager_key,
        pki.service_account_key,
        pki.service_account_pub,
    ]


def _write_secret(path: Path, data: bytes) -> None:
    """Private keys are created 0600 from the start, never briefly world-readable."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as handle:
        handle.write(data)
