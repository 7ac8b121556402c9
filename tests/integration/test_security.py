"""Security (issue 7): loopback by default, a bearer token on the user API, agents that run only their
registered workload programs, and mutual TLS between coordinator and agents (certificates generated
here with ``cryptography``)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from coordinator.policies import get_policy
from coordinator.service import CoordinatorServer
from node_agent.agent import HostSpec
from node_agent.register import Registrar
from node_agent.server import RunningAgent, start_agent
from tests.certs import make_certs
from vcemu.v1 import agent_pb2, agent_pb2_grpc
from vcemu.v1 import coordinator_pb2 as pb
from vcemu.v1 import coordinator_pb2_grpc as pb_grpc

pytestmark = pytest.mark.integration
SPEC = pb.JobSpec(tasks=1, cpu_need=0.5, memory=0.1, work_seconds=1.0, workload="modeled")


@pytest.fixture(scope="module")
def agent() -> Iterator[RunningAgent]:
    a = start_agent([HostSpec("sec-h0", 1.0, 1 << 30)], agent_id="pytest-sec", no_cgroups=True)
    yield a
    a.stop()


def test_everything_binds_loopback_by_default(agent: RunningAgent) -> None:
    server = CoordinatorServer(get_policy("greedy"), port=0, metrics_port=0).start()
    try:
        assert server.address.startswith("127.0.0.1:") and agent.address.startswith("127.0.0.1:")
        assert server.metrics.registry is not None
    finally:
        server.stop()


def test_user_api_needs_the_token_when_one_is_set() -> None:
    server = CoordinatorServer(get_policy("greedy"), port=0, token="s3cret-token").start()
    try:
        with grpc.insecure_channel(server.address) as ch:
            stub = pb_grpc.CoordinatorStub(ch)
            for metadata in ((), (("authorization", "Bearer wrong"),), (("authorization", "s3cret-token"),)):
                with pytest.raises(grpc.RpcError) as err:
                    stub.Submit(pb.SubmitRequest(spec=SPEC), timeout=5, metadata=metadata)
                assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
                assert "token" in err.value.details()
            with pytest.raises(grpc.RpcError) as err:
                next(iter(stub.WatchEvents(pb.WatchEventsRequest(), timeout=5)))
            assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
            good = (("authorization", "Bearer s3cret-token"),)
            with pytest.raises(grpc.RpcError) as err:  # past the token: refused only for having no hosts
                stub.Submit(pb.SubmitRequest(spec=SPEC), timeout=5, metadata=good)
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE
            assert stub.ListJobs(pb.ListJobsRequest(), timeout=5, metadata=good).jobs == []
            # without TLS the agents' calls want the token too (API review: a rogue agent registered without it)
            with pytest.raises(grpc.RpcError) as err:
                stub.Heartbeat(pb.HeartbeatRequest(agent_id="nobody"), timeout=5)
            assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
            assert not stub.Heartbeat(pb.HeartbeatRequest(agent_id="nobody"), timeout=5, metadata=good).known
    finally:
        server.stop()


@pytest.mark.parametrize("workload", ["sh", "/bin/sh", "../workloads/dgemm", "dgemm --evil", "os.system"])
def test_agent_refuses_a_workload_it_does_not_know(agent: RunningAgent, workload: str) -> None:
    with grpc.insecure_channel(agent.address) as ch:
        stub = agent_pb2_grpc.AgentStub(ch)
        with pytest.raises(grpc.RpcError) as err:
            stub.StartTask(agent_pb2.StartTaskRequest(task_id="t1", host="sec-h0", workload=workload, cpu_share=0.5,
                                                      cpu_need=0.5, work_seconds=1.0), timeout=5)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert err.value.details().startswith("workload: unknown workload")
        assert not stub.Status(agent_pb2.StatusRequest(), timeout=5).tasks  # nothing was started


@pytest.mark.parametrize("task_id", ["a\nb", "a\tb", "a\x00b"])
def test_agent_refuses_a_task_id_that_would_break_its_logs(agent: RunningAgent, task_id: str) -> None:
    """Security review: an id with a newline split the agent's log line (and the coordinator's). One with spaces, as
    a job file's id may have, and a long one are taken (code review: a first check refused them, and such a
    replay's jobs failed)."""
    with grpc.insecure_channel(agent.address) as ch:
        stub = agent_pb2_grpc.AgentStub(ch)
        with pytest.raises(grpc.RpcError) as err:
            stub.StartTask(agent_pb2.StartTaskRequest(task_id=task_id, host="sec-h0", workload="modeled",
                                                      cpu_share=0.5, cpu_need=0.5, work_seconds=1.0), timeout=5)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert err.value.details().startswith("task_id: must be printable")
        assert not stub.Status(agent_pb2.StatusRequest(), timeout=5).tasks
        for fine in ("job a/0", "j" * 1000 + "/0"):
            stub.StartTask(agent_pb2.StartTaskRequest(task_id=fine, host="sec-h0", workload="modeled",
                                                      cpu_share=0.1, cpu_need=0.5, work_seconds=60.0), timeout=5)
            stub.Stop(agent_pb2.TaskRef(task_id=fine), timeout=5)
        assert not stub.Status(agent_pb2.StatusRequest(), timeout=5).tasks  # (stopped: gone, for the other tests)


def test_agent_refuses_an_oversized_request(agent: RunningAgent) -> None:
    with grpc.insecure_channel(agent.address) as ch:
        with pytest.raises(grpc.RpcError) as err:
            agent_pb2_grpc.AgentStub(ch).StartTask(agent_pb2.StartTaskRequest(task_id="x" * (1 << 17)), timeout=5)
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


def test_an_agent_given_the_token_wants_it_on_its_own_api_and_the_coordinator_sends_it() -> None:
    """Without TLS, an agent's own API (start, stop, pause) took calls from whoever reached its port, token or
    not (API review, session 40): an agent given the token refuses calls without it, and a coordinator with the
    token sends it, so a job still runs there. Health stays open (probes carry no token)."""
    token = "s3cret-agent-token"
    agent = start_agent([HostSpec("tok-h0", 1.0, 1 << 30)], agent_id="pytest-token", no_cgroups=True, token=token)
    server = CoordinatorServer(get_policy("greedy"), port=0, token=token, heartbeat_s=0.5).start()
    registrar = Registrar(agent, server.address, agent.address, token=token)
    good = (("authorization", f"Bearer {token}"),)
    try:
        with grpc.insecure_channel(agent.address) as ch:
            stub = agent_pb2_grpc.AgentStub(ch)
            start = agent_pb2.StartTaskRequest(task_id="rogue", host="tok-h0", workload="modeled", cpu_share=0.5,
                                               cpu_need=0.5, work_seconds=1.0)
            for metadata in ((), (("authorization", "Bearer wrong"),), (("authorization", token),)):
                for call, request in ((stub.StartTask, start), (stub.Describe, agent_pb2.DescribeRequest()),
                                      (stub.Status, agent_pb2.StatusRequest())):
                    with pytest.raises(grpc.RpcError) as err:
                        call(request, timeout=5, metadata=metadata)
                    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED, (call, metadata)
                    assert "token" in err.value.details()
            assert not stub.Status(agent_pb2.StatusRequest(), timeout=5, metadata=good).tasks  # nothing started
            served = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
            assert served.status == health_pb2.HealthCheckResponse.SERVING
        assert registrar.registered.wait(20), "the agent with a token never registered"
        with grpc.insecure_channel(server.address) as ch:
            user = pb_grpc.CoordinatorStub(ch)
            job = user.Submit(pb.SubmitRequest(spec=SPEC), timeout=5, metadata=good)
            deadline = time.monotonic() + 20
            while (state := user.GetJob(pb.JobRef(job_id=job.job_id), timeout=5, metadata=good).state) != "done":
                assert state in ("pending", "running"), state
                assert time.monotonic() < deadline, "the job never ran on the agent that wants the token"
                time.sleep(0.1)
    finally:
        registrar.stop()
        server.stop()
        agent.stop()


def test_a_coordinator_without_the_agents_token_refuses_the_agent(caplog) -> None:
    """An agent whose API wants a token that the coordinator does not have is refused when it registers
    (FAILED_PRECONDITION, which the agent logs): taken on, every job placed there failed UNAUTHENTICATED."""
    agent = start_agent([HostSpec("tok-h1", 1.0, 1 << 30)], agent_id="pytest-token-2", no_cgroups=True,
                        token="the-agents")
    server = CoordinatorServer(get_policy("greedy"), port=0, heartbeat_s=0.5).start()
    caplog.set_level("ERROR", logger="node_agent.register")
    registrar = Registrar(agent, server.address, agent.address, token="the-agents")
    try:
        assert not registrar.registered.wait(3)
        said = [r.getMessage() for r in caplog.records if "FAILED_PRECONDITION" in r.getMessage()]
        assert said and "wants a bearer token and this coordinator has none" in said[0], said
        assert server.backend.agents == {}
        with grpc.insecure_channel(server.address) as ch, pytest.raises(grpc.RpcError) as err:
            pb_grpc.CoordinatorStub(ch).Submit(pb.SubmitRequest(spec=SPEC), timeout=5)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE  # no hosts
    finally:
        registrar.stop()
        server.stop()
        agent.stop()


def test_apc_live_agent_takes_the_agents_token(tmp_path: Path, capsys) -> None:
    """``vcemu apc --live-agent`` against an agent that wants a token: refused up front with a hint to give it,
    accepted with ``--live-token-file``; the flag alone (the in-process agent wants none) is refused."""
    from coordinator.apc.experiment import apc_main
    from coordinator.apc.live import LiveAgentError, check_agent

    agent = start_agent([HostSpec("tok-apc", 1.0, 1 << 30)], agent_id="pytest-token-apc", no_cgroups=True,
                        token="apc-token")
    try:
        with pytest.raises(LiveAgentError, match="UNAUTHENTICATED.*--live-token-file"):
            check_agent(agent.address)
        check_agent(agent.address, token="apc-token")
        (tmp_path / "token").write_text("apc-token\n")
        for extra, said in (([], "--live-token-file: needs --live (without it"),
                            (["--live"], "--live-token-file: needs --live-agent")):
            assert apc_main(["--out", str(tmp_path / "out"), *extra, "--live-token-file", str(tmp_path / "token")]) == 2
            assert said in capsys.readouterr().err
        assert not (tmp_path / "out").exists()
        # A run with it: no file of the results holds the token (code review: both config.json files did)
        assert apc_main(["--out", str(tmp_path / "run"), "--experiments", "", "--live", "--live-seconds", "2",
                         "--live-agent", agent.address, "--live-token-file", str(tmp_path / "token")]) == 0
        written = [p for p in (tmp_path / "run").rglob("*") if p.is_file()]
        assert any(p.name == "config.json" for p in written), written
        assert not [p for p in written if b"apc-token" in p.read_bytes()]
    finally:
        agent.stop()


def test_a_registration_under_a_live_agents_id_is_refused_and_a_restart_elsewhere_taken() -> None:
    """Security review: RegisterAgent under the id of an agent that was alive, from another address, took its
    place; the real agent's heartbeats kept it "alive" and its jobs were sent to the impostor's address (stuck
    running until the real agent was restarted by hand). It is refused while the registered agent still answers
    as that id; an agent restarted under the id at a new address (its predecessor gone) takes its place."""
    server = CoordinatorServer(get_policy("greedy"), port=0, heartbeat_s=0.5).start()
    first = start_agent([HostSpec("dup-h0", 1.0, 1 << 30)], agent_id="pytest-dup", no_cgroups=True)
    registrar = Registrar(first, server.address, first.address)
    second = None
    try:
        assert registrar.registered.wait(20)
        impostor = pb.RegisterAgentRequest(address="127.0.0.1:9", description=agent_pb2.DescribeReply(
            agent_id="pytest-dup", mode="duty-cycle", hosts=[agent_pb2.HostInfo(name="dup-h0", cpu_cores=1.0,
                                                                                memory_bytes=1 << 30)]))
        with grpc.insecure_channel(server.address) as ch:
            stub = pb_grpc.CoordinatorStub(ch)
            with pytest.raises(grpc.RpcError) as err:
                stub.RegisterAgent(impostor, timeout=10)
            assert err.value.code() == grpc.StatusCode.ALREADY_EXISTS
            assert f"registered at {first.address}, which still answers" in err.value.details()
            assert server.backend.agents["pytest-dup"].address == first.address
            job = stub.Submit(pb.SubmitRequest(spec=SPEC), timeout=5)
            deadline = time.monotonic() + 20
            while stub.GetJob(pb.JobRef(job_id=job.job_id), timeout=5).state != "done":
                assert time.monotonic() < deadline, "the job never ran on the agent that kept its id"
                time.sleep(0.1)
            registrar.stop()
            first.stop()
            second = start_agent([HostSpec("dup-h0", 1.0, 1 << 30)], agent_id="pytest-dup", no_cgroups=True)
            assert second.address != first.address
            stub.RegisterAgent(pb.RegisterAgentRequest(address=second.address, description=impostor.description),
                               timeout=10)
            assert server.backend.agents["pytest-dup"].address == second.address
    finally:
        registrar.stop()
        server.stop()
        first.stop()
        if second is not None:
            second.stop()


# ---- mutual TLS -----------------------------------------------------------------------------------------


def test_under_tls_an_agent_wanting_another_token_is_refused_and_one_without_is_sent_none(tmp_path: Path,
                                                                                           caplog) -> None:
    """Code review: under mutual TLS the agents' calls need no token, so an agent whose API wants another token than
    the coordinator's was taken on, and every job sent there failed UNAUTHENTICATED; it is refused when it
    registers. (That an agent wanting none is sent none: tests/unit/test_agent_token.py.)"""
    pytest.importorskip("cryptography", reason="mutual TLS test certificates are made with cryptography")
    tls = make_certs(tmp_path, "cluster")
    server = CoordinatorServer(get_policy("greedy"), port=0, tls=tls, heartbeat_s=0.5, token="the-coordinators").start()
    agent = start_agent([HostSpec("tls-h1", 1.0, 1 << 30)], agent_id="pytest-tls-tok", no_cgroups=True, tls=tls,
                        token="another")
    caplog.set_level("ERROR", logger="node_agent.register")
    registrar = Registrar(agent, server.address, agent.address, tls.client_channel, token="another")
    try:
        assert not registrar.registered.wait(3)
        said = [r.getMessage() for r in caplog.records if "UNAUTHENTICATED" in r.getMessage()]
        assert said and "not this coordinator's" in said[0], said
        assert "pytest-tls-tok" not in server.backend.agents
    finally:
        registrar.stop()
        server.stop()
        agent.stop()


def test_mutual_tls_between_coordinator_and_agent(tmp_path: Path) -> None:
    pytest.importorskip("cryptography", reason="mutual TLS test certificates are made with cryptography")
    tls = make_certs(tmp_path, "cluster")
    stranger = make_certs(tmp_path, "stranger")
    server = CoordinatorServer(get_policy("greedy"), port=0, tls=tls, heartbeat_s=0.5).start()
    agent = start_agent([HostSpec("tls-h0", 1.0, 1 << 30)], agent_id="pytest-tls", no_cgroups=True, tls=tls)
    registrar = Registrar(agent, server.address, agent.address, tls.client_channel)
    try:
        assert registrar.registered.wait(20), "the agent never registered over mutual TLS"
        with tls.client_channel(server.address) as ch:
            stub = pb_grpc.CoordinatorStub(ch)
            job = stub.Submit(pb.SubmitRequest(spec=SPEC), timeout=5)
            deadline = time.monotonic() + 20
            while stub.GetJob(pb.JobRef(job_id=job.job_id), timeout=5).state != "done":
                assert time.monotonic() < deadline, "the job never finished over TLS"
                time.sleep(0.1)
        for channel in (grpc.insecure_channel(agent.address), stranger.client_channel(agent.address),
                        grpc.insecure_channel(server.address), stranger.client_channel(server.address)):
            with channel, pytest.raises(grpc.RpcError) as err:
                agent_pb2_grpc.AgentStub(channel).Describe(agent_pb2.DescribeRequest(), timeout=3)
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        registrar.stop()
        server.stop()
        agent.stop()
