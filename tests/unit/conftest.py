"""Fixtures shared by unit tests of more than one module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from coordinator.apc import experiment as apc
from coordinator.policies import get_policy
from coordinator.service import CoordinatorServer, CoordinatorServicer
from tests.unit.scripted_agent import LocalCall
from vcemu.v1 import agent_pb2
from vcemu.v1 import coordinator_pb2 as pb


@pytest.fixture
def simulations(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The keys of the simulations ``vcemu apc`` runs in this process from now on, in order."""
    ran: list[str] = []
    real = apc.simulate_unit

    def logged(key: str, *args: object, **kwargs: object) -> object:
        ran.append(key)
        return real(key, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(apc, "simulate_unit", logged)
    return ran


@pytest.fixture()
def unstarted() -> Iterator[CoordinatorServer]:
    """A coordinator whose engine loop does not run (never started), with one agent's host registered: what it
    accepts stays in its intake, as it does while a running loop is busy deciding."""
    s = CoordinatorServer(get_policy("fcfs"), port=0)
    desc = agent_pb2.DescribeReply(agent_id="a0", mode="cgroup-v1", hosts=[
        agent_pb2.HostInfo(name="a0-h0", cpu_cores=0.5, memory_bytes=1 << 30)])
    CoordinatorServicer(s).RegisterAgent(pb.RegisterAgentRequest(address="127.0.0.1:1", description=desc), LocalCall())
    yield s
    s.stop()
