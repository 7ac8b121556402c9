"""Test certificates for mutual TLS, made with ``cryptography``: shared by the integration tests of the
coordinator-agent link and the unit tests of the client commands, so that both test against the same kind of
cluster certificate (a test module importing another's private helper would tie one to the other's layout)."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

from vcemu.tls import TlsFiles


def make_certs(tmp: Path, name: str) -> TlsFiles:
    """A CA and one certificate (for 127.0.0.1 and localhost, client and server use) signed by it."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{name} CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    paths = TlsFiles(str(tmp / f"{name}.crt"), str(tmp / f"{name}.key"), str(tmp / f"{name}-ca.crt"))
    Path(paths.cert).write_bytes(cert.public_bytes(pem))
    Path(paths.key).write_bytes(key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                                  serialization.NoEncryption()))
    Path(paths.ca).write_bytes(ca.public_bytes(pem))
    return paths
