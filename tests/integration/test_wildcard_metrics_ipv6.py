"""A wildcard ``--bind 0.0.0.0`` serves the metrics over IPv6 as gRPC serves the API (IPv6 review: gRPC listened on
both families, the metrics server on IPv4 only, and a Prometheus on an IPv6 network found nothing there)."""

from __future__ import annotations

import os
import socket
import urllib.request

import pytest

from coordinator.policies import get_policy
from coordinator.service import CoordinatorServer
from node_agent.agent import HostSpec
from node_agent.server import start_agent

pytestmark = pytest.mark.integration


def _dual_stack() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            dual = s.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY) == 0  # (before a bind, which may set it)
            s.bind(("::1", 0))
            return dual
    except OSError:
        return False


def _scraped(host: str, port: int) -> str:
    return urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=5).read().decode()


@pytest.mark.skipif(not _dual_stack(), reason="no dual-stack IPv6 here")
def test_a_wildcard_bind_serves_the_metrics_over_both_families() -> None:
    server = CoordinatorServer(get_policy("greedy"), port=0, bind="0.0.0.0", metrics_port=0).start()
    try:
        agent = start_agent([HostSpec("wild-h0", 1.0, 1 << 30)], agent_id=f"pytest-wild-{os.getpid()}",
                            bind="0.0.0.0", metrics_port=0, no_cgroups=True)
        try:
            for port in (server.metrics_port, agent.metrics_port):
                assert "vcemu_" in _scraped("127.0.0.1", port) and "vcemu_" in _scraped("[::1]", port)
        finally:
            agent.stop()
    finally:
        server.stop()
