"""An agent restarted under its id with other hosts (``vcemu agent --hosts 2`` then ``--hosts 1``, or another
``--cpus-per-host``) re-registers: the hosts it no longer has, or has with another capacity, must leave the
cluster as they were, their jobs requeued. The coordinator used to keep them: ``vcemu status`` listed a host
that was gone, and jobs placed on it failed ("no host ... on agent")."""

from __future__ import annotations

import grpc
import pytest

from coordinator.policies import get_policy
from coordinator.service import CoordinatorServer
from node_agent.agent import HostSpec
from node_agent.register import Registrar
from node_agent.server import start_agent
from tests.integration.conftest import wait_until
from vcemu.v1 import coordinator_pb2 as pb
from vcemu.v1 import coordinator_pb2_grpc as pb_grpc

pytestmark = pytest.mark.integration
GIB = 1 << 30


@pytest.mark.timeout(90)
def test_an_agent_back_with_fewer_or_other_hosts_leaves_no_ghost_host() -> None:
    server = CoordinatorServer(get_policy("greedy"), port=0, heartbeat_s=0.5).start()
    running: list = []
    try:
        def up(hosts: list[HostSpec]) -> None:
            agent = start_agent(hosts, agent_id="pytest-rack", no_cgroups=True)
            registrar = Registrar(agent, server.address, agent.address)
            running.append((registrar, agent))
            assert registrar.registered.wait(10)

        def down() -> None:
            registrar, agent = running.pop()
            registrar.stop()
            agent.stop()

        stub = pb_grpc.CoordinatorStub(grpc.insecure_channel(server.address))

        def jobs() -> dict[str, tuple[str, str]]:
            return {j.job_id: (j.state, j.message) for j in stub.ListJobs(pb.ListJobsRequest(), timeout=5).jobs}

        def hosts() -> dict[str, float]:
            return {h.name: h.cpu for h in server.engine.hosts}

        up([HostSpec("rack-h0", 1.0, GIB), HostSpec("rack-h1", 1.0, GIB)])
        spec = pb.JobSpec(tasks=1, cpu_need=1.0, memory=0.1, work_seconds=600, workload="modeled")
        for _ in range(2):
            stub.Submit(pb.SubmitRequest(spec=spec), timeout=5)
        wait_until("both jobs to run", lambda: [s for s, _ in jobs().values()] == ["running", "running"])

        down()  # restarted with one host
        up([HostSpec("rack-h0", 1.0, GIB)])
        wait_until("rack-h1 to leave the cluster", lambda: "rack-h1" not in hosts())
        assert [h.name for h in stub.ClusterStatus(pb.ClusterStatusRequest(), timeout=5).hosts] == ["rack-h0"]
        wait_until("both jobs to run on rack-h0", lambda: [s for s, _ in jobs().values()] == ["running", "running"])
        assert not [j for j, (s, _) in jobs().items() if s == "failed"], jobs()

        down()  # restarted with half the cores: the host is replaced, its jobs requeued and placed again
        up([HostSpec("rack-h0", 0.5, GIB)])
        wait_until("rack-h0's new capacity", lambda: hosts() == {"rack-h0": 0.5})
        wait_until("both jobs to run again", lambda: [s for s, _ in jobs().values()] == ["running", "running"])
        assert not [j for j, (s, _) in jobs().items() if s == "failed"], jobs()
        placed = [r for r in server.engine.jobs.values() if r.hosts == ("rack-h0",)]
        assert sum(r.cpu for r in placed) <= 0.5 + 1e-9, [(r.spec.id, r.cpu) for r in placed]
    finally:
        while running:
            registrar, agent = running.pop()
            registrar.stop()
            agent.stop()
        server.stop()
