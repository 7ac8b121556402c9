"""An IPv6 --bind, bare (``::1``) or in brackets (``[::1]``), serves the gRPC API and the metrics of the coordinator
and of an agent, and an agent registers under an address the coordinator dials (IPv6 review: ``::1`` reached gRPC as
``::1:PORT``, "Misformatted domain name", and ``[::1]`` the metrics server, "Name or service not known")."""

from __future__ import annotations

import os
import socket
import urllib.request

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from coordinator.policies import get_policy
from coordinator.service import CoordinatorServer
from node_agent.agent import HostSpec
from node_agent.register import Registrar
from node_agent.server import start_agent

pytestmark = pytest.mark.integration


def _no_ipv6_loopback() -> str | None:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
    except OSError as exc:
        return f"no IPv6 loopback here: {exc}"
    return None


def _serving(address: str) -> bool:
    with grpc.insecure_channel(address) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
    return reply.status == health_pb2.HealthCheckResponse.SERVING


def _metrics(port: int) -> str:
    return urllib.request.urlopen(f"http://[::1]:{port}/metrics", timeout=5).read().decode()


@pytest.mark.skipif(_no_ipv6_loopback() is not None, reason=str(_no_ipv6_loopback()))
@pytest.mark.parametrize("bind", ["::1", "[::1]"])
def test_an_ipv6_bind_serves_grpc_and_metrics_and_the_agent_registers(bind: str) -> None:
    server = CoordinatorServer(get_policy("greedy"), port=0, bind=bind, metrics_port=0).start()
    try:
        assert server.address == f"[::1]:{server.port}"
        assert _serving(server.address)
        assert "vcemu_" in _metrics(server.metrics_port)
        agent = start_agent([HostSpec("v6-h0", 1.0, 1 << 30)], agent_id=f"pytest-v6-{os.getpid()}", bind=bind,
                            metrics_port=0, no_cgroups=True)
        try:
            assert agent.address == f"[::1]:{agent.port}"
            assert _serving(agent.address)
            assert "vcemu_agent" in _metrics(agent.metrics_port)
            registrar = Registrar(agent, server.address, agent.address)
            try:
                assert registrar.registered.wait(10)
                assert "v6-h0" in server.backend.host_agent
            finally:
                registrar.stop()
        finally:
            agent.stop()
    finally:
        server.stop()
