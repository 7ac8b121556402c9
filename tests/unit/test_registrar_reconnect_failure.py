"""The registrar's new channel after two unanswered calls (a half-open connection) is made by its channel factory,
which can fail: with TLS (``TlsFiles.client_channel``) it reads the certificate, key and CA files again, and raises
ValueError when one cannot be read at that moment (a certificate being rotated, a secret remounted). Only the first
channel was made at start-up before; now such a failure ended the registrar's thread: the agent never heartbeat or
registered again (its hosts declared lost for good, its tasks frozen by its lease) while its process ran on."""

from __future__ import annotations

import socket
import time

import grpc

from node_agent import register


def test_a_channel_that_cannot_be_made_again_is_tried_again(monkeypatch) -> None:
    from node_agent.agent import AgentCore, HostSpec
    from node_agent.dutycycle import DutyCycleDriver
    from node_agent.server import RunningAgent

    monkeypatch.setattr(register, "HEARTBEAT_S", 0.5)  # (calls' deadlines of 0.5 s)
    silent = socket.create_server(("127.0.0.1", 0))  # takes connections (its backlog), never answers: deadlines
    address = f"127.0.0.1:{silent.getsockname()[1]}"
    made: list[float] = []

    def factory(target: str) -> grpc.Channel:
        made.append(time.monotonic())
        if len(made) == 2:
            raise ValueError("--tls-cert: cannot read 'agent.pem': No such file or directory")
        return grpc.insecure_channel(target)

    core = AgentCore("rr", [HostSpec("h0", 1.0, 1 << 30)], DutyCycleDriver(), {})
    agent = RunningAgent.__new__(RunningAgent)
    agent.core = core
    registrar = register.Registrar(agent, address, "127.0.0.1:1", channel_factory=factory)
    try:
        deadline = time.monotonic() + 8.0
        while len(made) < 3 and registrar._thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert registrar._thread.is_alive(), "the registrar's thread ended on its channel factory's failure"
        assert len(made) >= 3, made
    finally:
        registrar.stop()
        core.shutdown()
        silent.close()
