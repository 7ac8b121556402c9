"""Gray network failures between the coordinator, its agents and its clients (gray-failure review): connections
that stay open but carry nothing any more."""

from __future__ import annotations

import math
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
        first = s.backend.agents["gray"]
        proxy.stall_existing()
        stalled_at = time.monotonic()
        # Its heartbeats unanswered for 3 intervals, the agent is declared lost; it registers again once its registrar
        # has connected anew, which may be before any fixed look (that is the point): a new handle, after a loss.
        deadline = time.monotonic() + 10.0
        while s.backend.agents.get("gray") in (first, None) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert s.metrics.agents_lost._value.get() == 1
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


def test_an_agent_heard_one_way_is_not_renewed_then_refused_until_it_can_be_reached():
    """An agent whose heartbeats arrive while the coordinator's calls to it have gone unanswered over as long as it
    waits on a silent agent: its heartbeat is answered known but renews no lease (an older agent reads a lease that
    has run out) and is no sign of life; once it is declared lost, its registration is refused while the coordinator
    cannot reach its address, and taken once it can (the integration test test_agent_lease runs it with a real
    partition)."""
    import grpc
    import pytest

    from coordinator.service import UNRENEWED_LEASE_S
    from node_agent.agent import AgentCore, HostSpec
    from node_agent.dutycycle import DutyCycleDriver
    from node_agent.server import describe
    from vcemu.v1 import coordinator_pb2 as pb
    from vcemu.v1 import coordinator_pb2_grpc as pb_grpc

    s = CoordinatorServer(get_policy("greedy"), port=0, heartbeat_s=0.5).start()
    core = AgentCore("oneway", [HostSpec("h0", 1.0, 1 << 30)], DutyCycleDriver(), {})
    channel = grpc.insecure_channel(s.address)
    try:
        stub = pb_grpc.CoordinatorStub(channel)
        register = pb.RegisterAgentRequest(address="127.0.0.1:1", description=describe(core))  # (nothing listens)
        assert stub.RegisterAgent(register, timeout=5).lease_s == s.lease_s > 0
        beat = pb.HeartbeatRequest(agent_id="oneway")
        reply = stub.Heartbeat(beat, timeout=5)
        assert reply.known and reply.lease_s == s.lease_s and not reply.unreachable
        handle = s.backend.agents["oneway"]  # (its polls fail: the span they measure is set here instead)
        unanswered = [1.4]  # over 1.4 s: under 3 heartbeats of 0.5 s, still counted
        s.backend.unanswered_for = lambda _agent: unanswered[0]
        s.backend.answered_at = math.inf  # (as if other agents answered: test_heard_one_way has none answering)
        reply = stub.Heartbeat(beat, timeout=5)
        assert reply.lease_s == s.lease_s and not reply.unreachable
        unanswered[0] = 1.6
        stamp = s.heartbeats["oneway"]
        reply = stub.Heartbeat(beat, timeout=5)
        assert reply.known and reply.lease_s == UNRENEWED_LEASE_S
        assert "127.0.0.1:1" in reply.unreachable and "lease is not renewed" in reply.unreachable
        assert s.heartbeats["oneway"] == stamp  # no sign of life
        s.lose_agent("oneway", "agent oneway lost: unreachable: (test)", handle)
        assert s.unreachable["oneway"].startswith("the coordinator's calls to 127.0.0.1:1 went unanswered")
        with pytest.raises(grpc.RpcError) as refused:
            stub.RegisterAgent(register, timeout=5)
        assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "cannot yet: its Describe at 127.0.0.1:1 failed" in refused.value.details()
        assert "oneway" not in s.backend.agents
        s.backend.probe = lambda *_a: None  # (as if it answered now)
        del s.backend.unanswered_for  # (the backend's own again)
        assert stub.RegisterAgent(register, timeout=5).hosts == ["h0"]
        assert "oneway" not in s.unreachable
        assert not stub.Heartbeat(beat, timeout=5).unreachable  # a new handle: its calls not yet unanswered
    finally:
        channel.close()
        core.shutdown()
        s.stop(grace=0)


def test_the_unanswered_span_runs_from_the_first_unanswered_call_to_the_latest_until_a_poll_answers(monkeypatch):
    """Not to now: an engine loop held up asks nothing, and what it did not ask says nothing of the agent."""
    from coordinator.backends import live
    from tests.unit.scripted_agent import TableAgent, backend_on

    monkeypatch.setattr(live, "IDLE_POLL_S", 0.0)  # (agents that run nothing are asked at every round, as busy ones)

    quiet = TableAgent("quiet", ("q-h0",))
    with backend_on(quiet) as backend:
        backend.poll()
        assert backend.unanswered_for("quiet") == 0.0 and backend.unanswered_for("nobody") == 0.0
        quiet.mute = True
        backend.poll()
        handle = backend.agents["quiet"]
        first = handle.unanswered_since
        assert handle.silent and backend.unanswered_for("quiet") == 0.0
        time.sleep(0.3)
        assert backend.unanswered_for("quiet") == 0.0  # nothing asked since
        handle.next_poll = 0.0
        backend.poll()
        assert handle.unanswered_since == first
        assert backend.unanswered_for("quiet") == 0.0  # two polls: the one on a new channel not yet unanswered
        handle.next_poll = 0.0
        backend.poll()
        assert handle.unanswered_since == first and backend.unanswered_for("quiet") >= 0.3
        quiet.mute = False
        handle.next_poll = 0.0
        backend.poll()
        assert not handle.silent and backend.unanswered_for("quiet") == 0.0
