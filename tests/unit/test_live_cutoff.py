"""The live backend against a hung agent (issue 7): a call in flight to an agent that is being declared lost
is cancelled at once, and the error says the agent was unreachable (so the engine requeues, not fails, the
job). The agent here is a real gRPC server on 127.0.0.1 whose StartTask never answers, as a SIGSTOPped
agent's would not; tests/integration/test_faults.py stops a real agent process."""

from __future__ import annotations

import threading
import time

import grpc
import pytest

from coordinator.backends.base import BackendError
from coordinator.backends.live import LiveBackend
from coordinator.model import JobSpec
from vcemu.v1 import agent_pb2, agent_pb2_grpc

from .scripted_agent import backend_on


class HungAgent(agent_pb2_grpc.AgentServicer):
    """Describes itself; StartTask of task ``bad`` is refused, any other hangs until released."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.called = threading.Event()  # a StartTask that hangs has arrived

    def Describe(self, request, context):  # noqa: N802
        return agent_pb2.DescribeReply(agent_id="hung", mode="cgroup-v1", hosts=[
            agent_pb2.HostInfo(name="hung-h0", cpu_cores=1.0, memory_bytes=1 << 30)])

    def StartTask(self, request, context):  # noqa: N802
        if request.workload == "bash":
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "workload: unknown 'bash'")
        self.called.set()
        self.release.wait(30)
        return agent_pb2.TaskReply()


@pytest.fixture()
def hung() -> HungAgent:
    return HungAgent()


@pytest.fixture()
def agent(hung: HungAgent):
    with backend_on(hung) as backend:
        try:
            yield backend
        finally:
            hung.release.set()


def _spec(job: str, workload: str = "dgemm") -> JobSpec:
    return JobSpec(job, 0.0, 1, 1.0, 0.1, 10.0, workload)


def test_cutting_off_a_hung_agent_ends_its_call_in_flight_at_once(agent: LiveBackend, hung: HungAgent) -> None:
    # One attempt's deadline is 30 s / 3 = 10 s: a call that was not cancelled ends only then, far past the
    # bound below (it was 0.5 s), which leaves a busy machine seconds to end a cancelled one.
    agent.rpc_timeout = 30.0
    errors: list[BackendError] = []

    def start() -> None:
        try:
            agent.start(_spec("a"), ["hung-h0"], 1.0)
        except BackendError as exc:
            errors.append(exc)

    thread = threading.Thread(target=start)
    thread.start()
    assert hung.called.wait(30), "the StartTask never reached the agent"  # it is in flight (10 s deadline)
    # ... and its caller is waiting for it: past the check of `lost` that would cancel it before the wait (the path
    # under test is cut_off cancelling a call already waited on; without this the check usually did it: diff review)
    deadline = time.monotonic() + 30
    while not agent.agents["hung"].calls and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.3)
    t0 = time.monotonic()
    agent.cut_off("hung")
    thread.join(8.0)
    assert not thread.is_alive() and time.monotonic() - t0 < 3.0
    assert len(errors) == 1 and errors[0].unreachable and "hung lost" in str(errors[0])
    with pytest.raises(BackendError, match="agent hung of host 'hung-h0' is lost") as err:
        agent.start(_spec("b"), ["hung-h0"], 1.0)  # and later calls fail without a call
    assert err.value.unreachable


def test_a_call_past_its_deadline_is_unreachable_and_a_refusal_is_not(agent: LiveBackend) -> None:
    agent.rpc_timeout = 0.6  # three attempts of 0.2 s
    with pytest.raises(BackendError, match="DEADLINE_EXCEEDED") as err:
        agent.start(_spec("a"), ["hung-h0"], 1.0)
    assert err.value.unreachable
    assert agent.agents["hung"].silent  # the next calls get one short attempt
    with pytest.raises(BackendError, match="INVALID_ARGUMENT: workload") as err:
        agent.start(_spec("b", workload="bash"), ["hung-h0"], 1.0)
    assert not err.value.unreachable
