"""``vcemu status`` straight after ``submit --file`` of 3,000 jobs showed 1,000 (live review): ClusterStatus counts
the engine's jobs only, and accepted jobs wait in the coordinator's intake until the engine loop's next turn, which
a long queue's decision delays by seconds. ClusterStatus now takes the intake in first, as ListJobs does."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from coordinator.policies import get_policy
from coordinator.service import CoordinatorServer, CoordinatorServicer
from vcemu.v1 import agent_pb2
from vcemu.v1 import coordinator_pb2 as pb


@pytest.fixture()
def unstarted() -> Iterator[CoordinatorServer]:
    """A coordinator whose engine loop does not run (never started): what it accepts stays in its intake, as it
    does while a running loop is busy deciding."""
    s = CoordinatorServer(get_policy("fcfs"), port=0)
    desc = agent_pb2.DescribeReply(agent_id="a0", mode="cgroup-v1", hosts=[
        agent_pb2.HostInfo(name="a0-h0", cpu_cores=0.5, memory_bytes=1 << 30)])
    CoordinatorServicer(s).RegisterAgent(pb.RegisterAgentRequest(address="127.0.0.1:1", description=desc), None)
    yield s
    s.stop()


def test_cluster_status_counts_accepted_jobs_not_yet_taken_in(unstarted: CoordinatorServer) -> None:
    spec = pb.JobSpec(tasks=1, cpu_need=0.5, memory=0.1, work_seconds=5, workload="modeled")
    results = unstarted.accept([pb.SubmitRequest(spec=spec) for _ in range(30)])
    assert all(r.code == 0 for r in results)
    reply = CoordinatorServicer(unstarted).ClusterStatus(pb.ClusterStatusRequest(), None)
    assert sum(reply.jobs_by_state.values()) == 30, dict(reply.jobs_by_state)
