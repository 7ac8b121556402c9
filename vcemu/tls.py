"""Optional mutual TLS between the coordinator and its agents (issue 7, security).

Both sides hold a certificate and key signed by one CA and trust only that CA; each server requires
a client certificate. So an agent accepts StartTask only from a holder of a cluster certificate, and the
coordinator accepts RegisterAgent/Heartbeat (and, with TLS, every call) only from one. Files are PEM.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import grpc


@dataclass(frozen=True)
class TlsFiles:
    cert: str
    key: str
    ca: str

    def _read(self) -> tuple[bytes, bytes, bytes]:
        out = []
        for flag, path in (("--tls-cert", self.cert), ("--tls-key", self.key), ("--tls-ca", self.ca)):
            try:
                with open(path, "rb") as f:
                    out.append(f.read())
            except OSError as exc:
                raise ValueError(f"{flag}: cannot read {path!r}: {exc.strerror}") from None
        return out[0], out[1], out[2]

    def server_credentials(self) -> grpc.ServerCredentials:
        cert, key, ca = self._read()
        return grpc.ssl_server_credentials([(key, cert)], root_certificates=ca, require_client_auth=True)

    def channel_credentials(self) -> grpc.ChannelCredentials:
        cert, key, ca = self._read()
        return grpc.ssl_channel_credentials(root_certificates=ca, private_key=key, certificate_chain=cert)

    def client_channel(self, address: str, options: Sequence[tuple[str, Any]] | None = None) -> grpc.Channel:
        return grpc.secure_channel(address, self.channel_credentials(), options=options)


def from_args(cert: str | None, key: str | None, ca: str | None) -> TlsFiles | None:
    """TLS files from three CLI flags: all or none."""
    given = [x for x in (cert, key, ca) if x]
    if not given:
        return None
    if len(given) != 3:
        raise ValueError("--tls-cert, --tls-key and --tls-ca: give all three for mutual TLS, or none")
    return TlsFiles(cert, key, ca)  # type: ignore[arg-type]


def _names_match(host: str, name: str) -> bool:
    """Whether certificate name ``name`` (a SAN entry: DNS name, maybe ``*.`` wildcard, or IP) covers ``host``."""
    import ipaddress

    try:
        return ipaddress.ip_address(host) == ipaddress.ip_address(name)
    except ValueError:
        pass
    host, name = host.lower().rstrip("."), name.lower().rstrip(".")
    if name.startswith("*."):
        first, _, rest = host.partition(".")
        return bool(first) and rest == name[2:]
    return host == name


def certificate_refusal(address: str, auth_context: dict[str, list[bytes]]) -> str | None:
    """Why the certificate an agent presented (gRPC's ``auth_context``) does not name the host of ``address``, the
    one it registers under, or None (also without TLS). The coordinator checks that name when it dials the agent:
    an agent whose certificate named another address was taken, each call to it then failed "Hostname Verification
    Check failed", and it was declared lost as "heard one way only ... a one-way partition" (multi-host review)."""
    if auth_context.get("transport_security_type") != [b"ssl"]:
        return None
    from vcemu.ports import split_target

    host = split_target(address)[0]
    names = [n.decode(errors="replace") for n in auth_context.get("x509_subject_alternative_name", [])] or \
        [n.decode(errors="replace") for n in auth_context.get("x509_common_name", [])]
    if not host or any(_names_match(host, n) for n in names):
        return None
    return (f"address: this agent's TLS certificate names {', '.join(names) or 'no address'}, not {host}, the host it "
            f"registers under: the coordinator checks that name when it calls the agent, so every call would fail; "
            f"give the agent a certificate whose subject alternative names include {host}, or --advertise an "
            f"address its certificate names")
