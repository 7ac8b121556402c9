"""Coordinator and agent together on 127.0.0.1: jobs submitted over gRPC run as real processes in real
cgroups, under the same engine and policies as the simulator."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator

import grpc
import pytest

from coordinator.policies import get_policy
from coordinator.service import CoordinatorServer
from node_agent.agent import HostSpec
from node_agent.server import RunningAgent, start_agent
from vcemu.v1 import agent_pb2, agent_pb2_grpc
from vcemu.v1 import coordinator_pb2 as pb
from vcemu.v1 import coordinator_pb2_grpc as pb_grpc

pytestmark = pytest.mark.integration
MIB = 1 << 20


class Cluster:
    def __init__(self, policy: str, hosts: int, cores: float = 0.4, heartbeat_s: float = 2.0) -> None:
        self.server = CoordinatorServer(get_policy(policy), port=0, metrics_port=0, heartbeat_s=heartbeat_s).start()
        specs = [HostSpec(f"h{i}", cores, 512 * MIB) for i in range(hosts)]
        self.agent: RunningAgent = start_agent(specs, agent_id=f"pytest-live-{os.getpid()}-{policy}", port=0)
        self.channel = grpc.insecure_channel(self.server.address)
        self.stub = pb_grpc.CoordinatorStub(self.channel)
        with grpc.insecure_channel(self.agent.address) as ch:
            description = agent_pb2_grpc.AgentStub(ch).Describe(agent_pb2.DescribeRequest(), timeout=5)
        self.stub.RegisterAgent(pb.RegisterAgentRequest(address=self.agent.address, description=description),
                                timeout=5)

    def submit(self, tasks=1, need=1.0, memory=0.1, work=3.0) -> str:
        spec = pb.JobSpec(tasks=tasks, cpu_need=need, memory=memory, work_seconds=work, workload="dgemm")
        return self.stub.Submit(pb.SubmitRequest(spec=spec), timeout=5).job_id

    def job(self, job_id: str) -> pb.Job:
        return self.stub.GetJob(pb.JobRef(job_id=job_id), timeout=5)

    def wait(self, job_ids, state="done", timeout=30.0) -> list[pb.Job]:
        deadline = time.monotonic() + timeout
        while True:
            jobs = [self.job(j) for j in job_ids]
            if all(j.state == state for j in jobs):
                return jobs
            assert time.monotonic() < deadline, [(j.job_id, j.state, j.message) for j in jobs]
            time.sleep(0.1)

    def close(self) -> None:
        self.channel.close()
        self.server.stop()
        self.agent.stop()


@pytest.fixture
def greedy(cgroups_required) -> Iterator[Cluster]:
    c = Cluster("greedy", hosts=2)
    yield c
    c.close()


def test_a_job_runs_to_completion_in_about_its_work(greedy: Cluster):
    job_id = greedy.submit(tasks=2, work=3.0)
    (job,) = greedy.wait([job_id])
    assert job.hosts == [] or sorted(job.hosts) == ["h0", "h1"]
    run = job.end_time - job.start_time
    assert 3.0 <= run <= 3.0 + 1.5, run  # the work, plus process start-up and status polling
    assert job.virtual_time == pytest.approx(3.0)


def test_two_jobs_on_one_host_share_it_and_the_cgroups_enforce_it(greedy: Cluster):
    a = greedy.submit(memory=0.3, work=60.0)
    b = greedy.submit(memory=0.3, work=60.0)
    c = greedy.submit(memory=0.3, work=60.0)  # three single-task jobs on two hosts: one host holds two
    greedy.wait([a, b, c], state="running")
    time.sleep(4.0)  # past start-up (at host capacity, up to ~1.5 s) and one 1 s measurement window
    status = greedy.stub.ClusterStatus(pb.ClusterStatusRequest(), timeout=5)
    assert status.min_yield == pytest.approx(0.5) and status.avg_yield == pytest.approx(2 / 3)
    shared = next(h for h in status.hosts if h.cpu_allocated > 0.99)
    assert shared.cpu_measured == pytest.approx(1.0, abs=0.06)
    for j in (a, b, c):
        greedy.stub.Cancel(pb.JobRef(job_id=j), timeout=5)
    assert {greedy.job(j).state for j in (a, b, c)} == {"cancelled"}


def test_coordinator_metrics_are_served(greedy: Cluster):
    job_id = greedy.submit(work=1.0)
    greedy.wait([job_id])
    port = greedy.server.metrics_port
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    assert 'vcemu_jobs{policy="greedy",state="done"} 1.0' in text
    assert 'vcemu_job_bounded_stretch_count{policy="greedy"} 1.0' in text
    assert "vcemu_decision_latency_seconds_count" in text
    assert 'vcemu_host_cpu_allocated_ratio{host="h0"}' in text


def test_preemption_pauses_and_resumes_real_processes(cgroups_required):
    """GREEDY-PMTN on one host: b needs memory a holds, so a is frozen, b runs, then a resumes."""
    cluster = Cluster("greedy-pmtn", hosts=1)
    try:
        a = cluster.submit(memory=0.6, work=3.0)
        cluster.wait([a], state="running")
        time.sleep(1.5)
        b = cluster.submit(memory=0.6, work=2.0)
        cluster.wait([b], state="running", timeout=5)
        assert cluster.job(a).state == "paused"
        job_a, job_b = cluster.wait([a, b], timeout=30)
        assert job_b.end_time < job_a.end_time  # a waited for b
        events = [t for t in cluster.server.engine.history.transitions if t.job == a]
        assert [t.dst.value for t in events if t.reason in ("start", "pause", "resume", "completed")] == [
            "running", "paused", "running", "done"]
    finally:
        cluster.close()


def test_bad_input_over_the_cli_names_the_field(greedy: Cluster):
    cmd = [sys.executable, "-m", "coordinator.cli", "submit", "--coordinator", greedy.server.address]
    out = subprocess.run([*cmd, "--cpu-need", "1.5"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2  # refused before connecting (a range the help states), naming the flag
    assert out.stderr.strip() == "vcemu submit: --cpu-need: must be in (0, 1] (a fraction of one host), got 1.5"
    # what depends on the hosts only the coordinator can say, naming the field
    out = subprocess.run([*cmd, "--memory", "0.2", "--tasks", "11"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "invalid job: tasks:" in out.stderr
    out = subprocess.run([*cmd, "--work", "2", "--memory", "0.2"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip().startswith("job-")
    greedy.wait([out.stdout.strip()])


def test_dynmcb8_repacks_live_and_every_job_finishes_once(cgroups_required):
    """DYNMCB8 repacks everything at each event: tasks move between hosts (stopped everywhere first,
    then restarted from their progress) and low-priority jobs are paused. Every job must finish once."""
    cluster = Cluster("dynmcb8", hosts=3)
    try:
        jobs = []
        for tasks, memory in ((2, 0.4), (1, 0.5), (3, 0.3), (2, 0.5), (1, 0.6), (2, 0.2)):
            jobs.append(cluster.submit(tasks=tasks, memory=memory, work=3.0))
            time.sleep(0.7)
        done = cluster.wait(jobs, timeout=90)
        assert all(j.virtual_time == pytest.approx(3.0) for j in done)
        finishes = [t.job for t in cluster.server.engine.history.transitions if t.dst.value == "done"]
        assert sorted(finishes) == sorted(jobs)
    finally:
        cluster.close()


def test_a_stalled_engine_loop_does_not_declare_a_live_agent_lost(cgroups_required):
    """The engine loop is held up (here: its lock held for 5 heartbeat intervals, as a long first
    decision would) while the agent is fine. The coordinator was not polling, so the silence is not the
    agent's: it stays registered, and work submitted afterwards runs on it."""
    cluster = Cluster("dynmcb8", hosts=1, heartbeat_s=0.3)
    try:
        agent_id = cluster.agent.core.agent_id
        time.sleep(0.5)  # a few polls answered
        with cluster.server.engine.lock:
            time.sleep(1.5)
        time.sleep(0.6)  # two watchdog intervals and a poll after the stall
        assert agent_id in cluster.server.backend.agents
        (job,) = cluster.wait([cluster.submit(work=1.0)], timeout=20)
        assert job.state == "done"
    finally:
        cluster.close()


def test_a_local_cluster_that_does_not_come_up_says_what_its_agent_said(tmp_path):
    """With the agents' log in a file (demo, replay), the reason an agent gave for exiting is in the error."""
    from coordinator.servers import start_local_cluster

    log_path = tmp_path / "agents.log"
    with log_path.open("ab") as log, pytest.raises(SystemExit) as stop:
        # more cores than the machine has: the agent refuses its arguments and exits
        start_local_cluster("greedy", 1, 1, [str(4 * (os.cpu_count() or 1))], "512MiB", 0, None, True,
                            wait_s=30, agent_log=log)
    message = str(stop.value)
    assert "agent exited with code 2" in message and str(log_path) in message
    assert "--cpus-per-host" in message and "more than this machine's" in message, message
