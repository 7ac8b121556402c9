"""Gray network failures between the coordinator, its agents and its clients (gray-failure review): connections
that stay open but carry nothing any more."""

from __future__ import annotations

import time

from coordinator.policies import get_policy
from coordinator.service import CoordinatorServer
from tests.unit.stall_proxy import StallProxy


def test_an_agent_whose_connection_to_the_coordinator_went_half_open_connects_again():
    """An agent's connection to its coordinator left half-open (nothing forwarded either way, nothing closed) while
    new connections got through: its heartbeats waited out their deadlines on it for good (measured: 60 s and more,
    its hosts declared lost and never back), as gRPC without keepalives never drops such a connection. The
    registrar now connects again after two calls in a row went unanswered, and the agent is heard again."""
    from node_agent.agent import AgentCore, HostSpec
    from node_agent.dutycycle import DutyCycleDriver
    from node_agent.register import Registrar
    from node_agent.server import RunningAgent

    s = CoordinatorServer(get_policy("greedy"), port=0, heartbeat_s=0.5).start()
    proxy = StallProxy(s.address)
    core = AgentCore("gray", [HostSpec("h0", 1.0, 1 << 30)], DutyCycleDriver(), {})
    agent = RunningAgent.__new__(RunningAgent)
    agent.core = core
    registrar = None
    try:
        registrar = Registrar(agent, proxy.address, "127.0.0.1:1")
        assert registrar.registered.wait(5.0) and "gray" in s.backend.agents
        proxy.stall_existing()
        stalled_at = time.monotonic()
        time.sleep(2.5)  # its heartbeats unanswered for 5 intervals: the agent is declared lost
        assert "gray" not in s.backend.agents
        deadline = time.monotonic() + 10.0
        while "gray" not in s.backend.agents and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "gray" in s.backend.agents, (
            f"not registered again {time.monotonic() - stalled_at:.1f} s after its connection stalled "
            f"({proxy.accepted} connection(s) made)")
        assert proxy.accepted >= 2
    finally:
        if registrar is not None:
            registrar.stop()
        core.shutdown()
        proxy.close()
        s.stop(grace=0)
