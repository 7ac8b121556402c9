"""Optional mutual TLS between the coordinator and its agents (issue 7, security).

Both sides hold a certificate and key signed by one CA and trust only that CA; each server requires
a client certificate. So an agent accepts StartTask only from a holder of a cluster certificate, and the
coordinator accepts RegisterAgent/Heartbeat (and, with TLS, every call) only from one. Files are PEM.
"""

from __future__ import annotations

from dataclasses import dataclass

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

    def client_channel(self, address: str) -> grpc.Channel:
        return grpc.secure_channel(address, self.channel_credentials())


def from_args(cert: str | None, key: str | None, ca: str | None) -> TlsFiles | None:
    """TLS files from three CLI flags: all or none."""
    given = [x for x in (cert, key, ca) if x]
    if not given:
        return None
    if len(given) != 3:
        raise ValueError("--tls-cert, --tls-key and --tls-ca: give all three for mutual TLS, or none")
    return TlsFiles(cert, key, ca)  # type: ignore[arg-type]
