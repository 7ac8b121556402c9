"""Every agent silent at once is as likely the coordinator's own fault (its uplink, a switch) as all of them failing:
none is declared lost for it until :data:`coordinator.service.ALL_SILENT_WINDOWS` loss windows have passed
(:meth:`CoordinatorServer._all_silent`). Multi-host review, session 46: a 6-s fault on the coordinator's side of the
network declared all three agents lost, and every job on the cluster was restarted when it healed.

The watch is driven by hand (a heartbeat of 100 s: a loss window of 300 s, the watch thread asleep), with the
agents' last signs of life set back in time."""

from __future__ import annotations

import logging
import threading
import time

import grpc
import pytest

from coordinator.policies import get_policy
from coordinator.service import ALL_SILENT_WINDOWS, CoordinatorServer
from vcemu.v1 import agent_pb2
from vcemu.v1 import coordinator_pb2 as pb
from vcemu.v1 import coordinator_pb2_grpc as pb_grpc

WINDOW = 3 * 100.0


def _watched(*agent_ids: str) -> CoordinatorServer:
    """A started coordinator with the given agents registered and heard once; its watch and stall ticker idle."""
    server = CoordinatorServer(get_policy("greedy"), port=0, heartbeat_s=100.0)
    server._ticker = threading.Thread(target=lambda: None)
    server.start()
    try:
        with grpc.insecure_channel(server.address) as ch:
            api = pb_grpc.CoordinatorStub(ch)
            for agent_id in agent_ids:
                desc = agent_pb2.DescribeReply(agent_id=agent_id, mode="cgroup-v1", hosts=[
                    agent_pb2.HostInfo(name=f"{agent_id}-h0", cpu_cores=0.5, memory_bytes=1 << 30)])
                api.RegisterAgent(pb.RegisterAgentRequest(address="127.0.0.1:1", description=desc), timeout=5)
                api.Heartbeat(pb.HeartbeatRequest(agent_id=agent_id), timeout=5)
    except BaseException:
        server.stop()
        raise
    return server


def _silent_for(server: CoordinatorServer, seconds: float, *agent_ids: str) -> None:
    now = time.monotonic()
    for agent_id in agent_ids:
        server.heartbeats[agent_id] = now - seconds
        server.backend.agents[agent_id].last_seen = now - seconds


def _said(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if text in r.getMessage()]


def test_every_agent_silent_at_once_is_not_declared_lost_and_is_said_once(caplog: pytest.LogCaptureFixture):
    server = _watched("a0", "a1", "a2")
    try:
        _silent_for(server, WINDOW + 100.0, "a0", "a1", "a2")
        with caplog.at_level(logging.WARNING, logger="vcemu.coordinator"):
            server._check_agents()
            server._check_agents()
        assert set(server.backend.agents) == {"a0", "a1", "a2"} and not server.lost
        (said,) = _said(caplog, "has been silent")
        assert "every agent (3)" in said and "coordinator's own network" in said
    finally:
        server.stop()


def test_once_one_is_heard_the_rest_get_a_window_afresh_and_one_still_silent_then_is_lost(
        caplog: pytest.LogCaptureFixture):
    server = _watched("a0", "a1", "a2")
    try:
        _silent_for(server, WINDOW + 100.0, "a0", "a1", "a2")
        server._check_agents()
        server.beat("a0")  # the fault heals: a0's heartbeat arrives first
        with caplog.at_level(logging.WARNING, logger="vcemu.coordinator"):
            server._check_agents()
        assert set(server.backend.agents) == {"a0", "a1", "a2"} and not server.lost
        assert _said(caplog, "given 300 s afresh")
        assert min(server.heartbeats.values()) > time.monotonic() - 5.0
        server.beat("a1")  # a1 is heard within its window; a2 stays silent past it
        _silent_for(server, WINDOW + 1.0, "a2")
        server._check_agents()
        assert set(server.backend.agents) == {"a0", "a1"} and list(server.lost) == ["a2"]
    finally:
        server.stop()


def test_agents_all_silent_past_the_bound_are_declared_lost(caplog: pytest.LogCaptureFixture):
    server = _watched("a0", "a1")
    try:
        _silent_for(server, WINDOW + 100.0, "a0", "a1")
        server._check_agents()
        assert not server.lost
        _silent_for(server, ALL_SILENT_WINDOWS * WINDOW + 1.0, "a0", "a1")
        with caplog.at_level(logging.WARNING, logger="vcemu.coordinator"):
            server._check_agents()
        assert not server.backend.agents and set(server.lost) == {"a0", "a1"}
        assert _said(caplog, "they are declared lost")
    finally:
        server.stop()


def test_one_silent_agent_among_others_heard_is_declared_lost_as_before():
    server = _watched("a0", "a1")
    try:
        _silent_for(server, WINDOW + 1.0, "a1")
        server._check_agents()
        assert set(server.backend.agents) == {"a0"} and list(server.lost) == ["a1"]
    finally:
        server.stop()


def test_a_coordinator_of_one_agent_cannot_tell_and_declares_it_lost_as_before():
    server = _watched("a0")
    try:
        _silent_for(server, WINDOW + 1.0, "a0")
        server._check_agents()
        assert not server.backend.agents and list(server.lost) == ["a0"]
    finally:
        server.stop()
