"""An agent heard one way only (its heartbeats arrive, the coordinator's calls to it go unanswered) is declared lost
(:meth:`coordinator.service.CoordinatorServer.heard_one_way`), and only such an agent: not one that answers its polls
while a call is slow, nor one whose polls stall a few seconds, nor every agent at once when none answers (the
coordinator's own side is as likely at fault), nor through a stall of the coordinator itself. Its registrations are
refused, within the registrar's deadline, until it can be reached (code review of the change; the integration test
in test_agent_lease runs a real partition)."""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time

import grpc
import pytest

from coordinator.policies import get_policy
from coordinator.service import CoordinatorServer
from node_agent.agent import AgentCore, HostSpec
from node_agent.dutycycle import DutyCycleDriver
from node_agent.server import describe
from tests.unit.scripted_agent import TableAgent, serve
from vcemu.v1 import agent_pb2
from vcemu.v1 import coordinator_pb2 as pb
from vcemu.v1 import coordinator_pb2_grpc as pb_grpc


class SlowStatus(TableAgent):
    """A TableAgent whose Status takes 1.3 s (past the poll's 1 s deadline) until ``slow_until``: an agent whose
    lock a burst of starts holds, or a loaded machine; its other calls, and its heartbeats, are prompt."""

    slow_until = 0.0

    def Status(self, request, context):  # noqa: N802
        if time.monotonic() < self.slow_until:
            time.sleep(1.3)
        return super().Status(request, context)


def _heartbeats(stub: pb_grpc.CoordinatorStub, agent_id: str, every: float, stop: threading.Event,
                replies: list[pb.HeartbeatReply]) -> None:
    while not stop.wait(every):
        with contextlib.suppress(grpc.RpcError):
            replies.append(stub.Heartbeat(pb.HeartbeatRequest(agent_id=agent_id), timeout=2))


@pytest.mark.parametrize("heartbeat_s, stall_s", [(0.25, 3.0), (0.5, 3.8)])
def test_an_agent_whose_status_stalls_a_few_seconds_while_it_heartbeats_is_not_declared_lost(heartbeat_s, stall_s):
    """Its heartbeats arrive throughout and every call but Status answers: nothing one-way about it. At the shortest
    intervals the CLI takes, two polls unanswered (1 s deadline, 0.5 s apart) already span 3 intervals, and the
    watch declares it lost before its third poll is even sent (1 s after the second)."""
    agent = SlowStatus("slow", ("s-h0",))
    server, address = serve(agent)
    s = CoordinatorServer(get_policy("greedy"), port=0, heartbeat_s=heartbeat_s).start()
    channel = grpc.insecure_channel(s.address)
    stop = threading.Event()
    replies: list[pb.HeartbeatReply] = []
    try:
        stub = pb_grpc.CoordinatorStub(channel)
        stub.RegisterAgent(pb.RegisterAgentRequest(address=address, description=agent.Describe(None, None)),
                           timeout=5)
        threading.Thread(target=_heartbeats, args=(stub, "slow", heartbeat_s, stop, replies), daemon=True).start()
        deadline = time.monotonic() + 5
        while s.backend.agents["slow"].last_seen == 0.0 and time.monotonic() < deadline:
            time.sleep(0.05)
        agent.slow_until = time.monotonic() + stall_s  # its Status stalls this long, then answers at once
        time.sleep(stall_s + 3.0)
        assert "slow" not in dict(s.lost_agents()), dict(s.lost_agents())["slow"].reason
        assert "slow" in s.backend.agents
    finally:
        stop.set()
        channel.close()
        s.stop(grace=0)
        server.stop(0)


def test_an_agent_that_answers_its_polls_is_not_lost_for_a_slow_stop():
    """A kill can take seconds (node_agent.runner.Task: a process in uninterruptible sleep, up to 10 s): the Stops
    of a cancelled job's two tasks (one per host) outlive their deadlines, three attempts of 1.67 s then one of
    1 s, under the backend's lock, while the agent answers every poll before and after and heartbeats throughout.
    The span of those unanswered calls (over 3 intervals of 0.5 s after the second attempt) made its heartbeats
    stop counting, and the watch declared it lost before the next poll could answer."""
    agent = TableAgent("stopslow", ("x-h0", "x-h1"))
    server, address = serve(agent)
    s = CoordinatorServer(get_policy("greedy"), port=0, heartbeat_s=0.5).start()
    channel = grpc.insecure_channel(s.address)
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(0.5):
            with contextlib.suppress(grpc.RpcError):
                stub.Heartbeat(pb.HeartbeatRequest(agent_id="stopslow"), timeout=2)

    try:
        stub = pb_grpc.CoordinatorStub(channel)
        stub.RegisterAgent(pb.RegisterAgentRequest(address=address, description=agent.Describe(None, None)),
                           timeout=5)
        threading.Thread(target=beat, daemon=True).start()
        spec = pb.JobSpec(tasks=2, cpu_need=1.0, memory=0.1, work_seconds=600.0, workload="modeled")
        job = stub.Submit(pb.SubmitRequest(spec=spec), timeout=5).job_id
        deadline = time.monotonic() + 10
        while len(agent.tasks) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(agent.tasks) == 2
        agent.on_stop = lambda _request: time.sleep(2.5)  # each Stop outlives its deadline; polls stay prompt
        with contextlib.suppress(grpc.RpcError):
            stub.Cancel(pb.JobRef(job_id=job), timeout=30)
        time.sleep(3.0)
        lost = dict(s.lost_agents())
        assert "stopslow" not in lost, lost["stopslow"].reason
    finally:
        stop.set()
        channel.close()
        s.stop(grace=0)
        server.stop(0)


def test_a_refused_registration_is_said_within_the_registrars_deadline_when_the_address_swallows_calls():
    """The registrar's RegisterAgent deadline is min(5, max(0.5, interval)): 0.5 s at intervals up to 0.5 s. The
    probe of an address that takes connections and answers nothing (a firewall that drops, a one-way partition)
    waited FAST_TIMEOUT_S (1 s): the agent got DEADLINE_EXCEEDED, never the refusal's reason, and after two of them
    its registrar dropped its connection to a coordinator that was fine ("2 calls in a row unanswered")."""
    hole = socket.create_server(("127.0.0.1", 0))  # listens, never accepts: connects, then nothing
    address = f"127.0.0.1:{hole.getsockname()[1]}"
    s = CoordinatorServer(get_policy("greedy"), port=0, heartbeat_s=0.5).start()
    core = AgentCore("hole", [HostSpec("h0", 1.0, 1 << 30)], DutyCycleDriver(), {})
    channel = grpc.insecure_channel(s.address)
    try:
        s.unreachable["hole"] = "the coordinator's calls to it went unanswered (test)"
        stub = pb_grpc.CoordinatorStub(channel)
        begun = time.monotonic()
        try:
            stub.RegisterAgent(pb.RegisterAgentRequest(address=address, description=describe(core)), timeout=0.5)
        except grpc.RpcError as exc:
            code, details = exc.code(), exc.details()
        assert code == grpc.StatusCode.FAILED_PRECONDITION, (code, details, time.monotonic() - begun)
        assert "cannot yet" in details
    finally:
        channel.close()
        core.shutdown()
        s.stop(grace=0)
        hole.close()


class _LongId(TableAgent):
    def Describe(self, request, context):  # noqa: N802
        return agent_pb2.DescribeReply(agent_id="x" * 100_000, mode="cgroup-v1")


def test_a_refusal_naming_another_agent_at_the_address_keeps_its_reason():
    """Another agent's id, in full in the refusal, was gRPC metadata past the 16 KiB limit: the registering agent got
    RESOURCE_EXHAUSTED "Stream removed" (which its registrar reads as a coordinator out of descriptors)."""
    server, address = serve(_LongId("o", ("o-h0",)))
    s = CoordinatorServer(get_policy("greedy"), port=0, heartbeat_s=0.5).start()
    channel = grpc.insecure_channel(s.address)
    try:
        s.unreachable["mine"] = "the coordinator's calls to it went unanswered (test)"
        mine = TableAgent("mine", ("m-h0",)).Describe(None, None)
        register = pb.RegisterAgentRequest(address=address, description=mine)
        try:
            pb_grpc.CoordinatorStub(channel).RegisterAgent(register, timeout=5)
        except grpc.RpcError as exc:
            code, details = exc.code(), exc.details()
        assert code == grpc.StatusCode.FAILED_PRECONDITION, (code, details[:200])
        assert "answers at" in details and "100,000 characters" in details
    finally:
        channel.close()
        s.stop(grace=0)
        server.stop(0)


def test_when_no_agent_answers_none_is_declared_lost_as_heard_one_way(caplog: pytest.LogCaptureFixture):
    """The coordinator's own outbound path failing (its network, its descriptors) leaves every agent unanswered while
    their heartbeats arrive: each found heard one way, all were lost and every job requeued. With no agent answering
    a poll for as long, none is; the log says why once. One that answers makes the verdict possible again."""
    s = CoordinatorServer(get_policy("greedy"), port=0, heartbeat_s=0.5).start()
    core = AgentCore("alone", [HostSpec("h0", 1.0, 1 << 30)], DutyCycleDriver(), {})
    channel = grpc.insecure_channel(s.address)
    try:
        stub = pb_grpc.CoordinatorStub(channel)
        stub.RegisterAgent(pb.RegisterAgentRequest(address="127.0.0.1:1", description=describe(core)), timeout=5)
        s.backend.unanswered_for = lambda _agent: 5.0  # (its calls unanswered over 5 s)
        s.backend.answered_at = time.monotonic() - 5.0  # and no agent answered since
        with caplog.at_level(logging.WARNING, logger="vcemu.coordinator"):
            for _ in range(3):
                reply = stub.Heartbeat(pb.HeartbeatRequest(agent_id="alone"), timeout=5)
                assert reply.known and reply.lease_s == s.lease_s and not reply.unreachable
        said = [r.getMessage() for r in caplog.records if "no agent has answered" in r.getMessage()]
        assert len(said) == 1 and "a fault on the coordinator's side" in said[0]
        s.backend.answered_at = time.monotonic()  # another agent answers: this one is heard one way
        assert stub.Heartbeat(pb.HeartbeatRequest(agent_id="alone"), timeout=5).unreachable
    finally:
        channel.close()
        core.shutdown()
        s.stop(grace=0)


def test_a_stall_of_the_coordinator_itself_is_not_counted_as_calls_unanswered():
    """A call whose deadline passed while this process did not run (SIGSTOP, a paused VM) says nothing of its
    agent: the span of unanswered calls starts afresh when the stall is noticed."""
    quiet = TableAgent("quiet", ("q-h0",))
    server, address = serve(quiet)
    s = CoordinatorServer(get_policy("greedy"), port=0, heartbeat_s=0.5).start()
    channel = grpc.insecure_channel(s.address)
    try:
        pb_grpc.CoordinatorStub(channel).RegisterAgent(
            pb.RegisterAgentRequest(address=address, description=quiet.Describe(None, None)), timeout=5)
        handle = s.backend.agents["quiet"]
        handle.unanswered()
        handle.unanswered_since -= 10.0
        handle.polls_unanswered = 5
        assert s.backend.unanswered_for("quiet") >= 10.0
        with s.heartbeats_lock:
            s._ran_at -= 10.0  # (as if the process had not run for 10 s)
        s._note_running()
        assert s.backend.unanswered_for("quiet") == 0.0 and handle.polls_unanswered == 0
    finally:
        channel.close()
        s.stop(grace=0)
        server.stop(0)
