"""The registrar's first channel is made by its channel factory too, in its thread: with TLS it reads the certificate,
key and CA files, which can fail at that moment (being rotated, a secret remounted, as for a later channel:
test_registrar_reconnect_failure). Such a failure ended the thread: the agent served, and never registered."""

from __future__ import annotations

import socket
import time

import grpc

from node_agent import register


def test_a_first_channel_that_cannot_be_made_is_tried_again(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from node_agent.agent import AgentCore, HostSpec
    from node_agent.dutycycle import DutyCycleDriver
    from node_agent.server import RunningAgent

    monkeypatch.setattr(register, "HEARTBEAT_S", 0.5)
    silent = socket.create_server(("127.0.0.1", 0))
    address = f"127.0.0.1:{silent.getsockname()[1]}"
    made: list[float] = []

    def factory(target: str) -> grpc.Channel:
        made.append(time.monotonic())
        if len(made) == 1:
            raise ValueError("--tls-cert: cannot read 'agent.pem': No such file or directory")
        return grpc.insecure_channel(target)

    core = AgentCore("rr-first", [HostSpec("h0", 1.0, 1 << 30)], DutyCycleDriver(), {})
    agent = RunningAgent.__new__(RunningAgent)
    agent.core = core
    registrar = register.Registrar(agent, address, "127.0.0.1:1", channel_factory=factory)
    try:
        deadline = time.monotonic() + 5.0
        while len(made) < 2 and registrar._thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert registrar._thread.is_alive(), "the registrar's thread ended on its first channel's failure"
        assert len(made) >= 2, made
    finally:
        registrar.stop()
        core.shutdown()
        silent.close()
