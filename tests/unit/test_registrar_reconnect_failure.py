"""The registrar's channels are made by its channel factory, which can fail: with TLS (``TlsFiles.client_channel``) it
reads the certificate, key and CA files again, and raises ValueError when one cannot be read at that moment (a
certificate being rotated, a secret remounted). Such a failure ended the registrar's thread while the agent's process
ran on: for the new channel made after two unanswered calls (a half-open connection), the agent never heartbeat or
registered again (its hosts declared lost for good, its tasks frozen by its lease); for the first channel, it never
registered at all, and nothing anywhere said it was missing (coverage review)."""

from __future__ import annotations

import socket
import time

import grpc
import pytest

from node_agent import register


@pytest.mark.parametrize(("failing", "which"), [(1, "first"), (2, "new")])
def test_a_channel_that_cannot_be_made_is_tried_again(monkeypatch, failing: int, which: str) -> None:
    from node_agent.agent import AgentCore, HostSpec
    from node_agent.dutycycle import DutyCycleDriver
    from node_agent.server import RunningAgent

    monkeypatch.setattr(register, "HEARTBEAT_S", 0.5)  # (calls' deadlines of 0.5 s)
    silent = socket.create_server(("127.0.0.1", 0))  # takes connections (its backlog), never answers: deadlines
    address = f"127.0.0.1:{silent.getsockname()[1]}"
    made: list[float] = []

    def factory(target: str) -> grpc.Channel:
        made.append(time.monotonic())
        if len(made) == failing:
            raise ValueError("--tls-cert: cannot read 'agent.pem': No such file or directory")
        return grpc.insecure_channel(target)

    core = AgentCore(f"rr-{which}", [HostSpec("h0", 1.0, 1 << 30)], DutyCycleDriver(), {})
    agent = RunningAgent.__new__(RunningAgent)
    agent.core = core
    registrar = register.Registrar(agent, address, "127.0.0.1:1", channel_factory=factory)
    try:
        deadline = time.monotonic() + 8.0
        while len(made) <= failing and registrar._thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert registrar._thread.is_alive(), f"the registrar's thread ended on its {which} channel's failure"
        assert len(made) > failing, made
    finally:
        registrar.stop()
        core.shutdown()
        silent.close()
