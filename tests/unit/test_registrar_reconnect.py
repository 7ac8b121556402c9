"""An agent's channel to its coordinator retries its connection at least every heartbeat interval: gRPC's default
back-off grows to 120 s, and after a coordinator was down for 90 s its agents registered 12-28 s after it came back
(multi-host review)."""

import grpc

from node_agent import register


def test_the_registrars_channels_cap_their_reconnection_backoff() -> None:
    options = dict(register.RECONNECT_OPTIONS)
    assert options["grpc.max_reconnect_backoff_ms"] <= register.HEARTBEAT_S * 1000
    assert options["grpc.initial_reconnect_backoff_ms"] <= options["grpc.max_reconnect_backoff_ms"]


def test_the_default_factory_uses_them(monkeypatch) -> None:
    seen = {}
    real = grpc.insecure_channel

    def channel(address, options=None):
        seen[address] = options
        return real(address)

    monkeypatch.setattr(register.grpc, "insecure_channel", channel)
    register._insecure("127.0.0.1:1").close()
    assert seen["127.0.0.1:1"] == register.RECONNECT_OPTIONS
