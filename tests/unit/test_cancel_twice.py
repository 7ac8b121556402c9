"""``vcemu cancel`` of a job cancelled already (live review): the second cancel printed ``job-02000 cancelled`` as
the first did; it now says nothing was cancelled, as it does for a finished job."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest

from coordinator.policies import get_policy
from coordinator.service import CoordinatorServer
from tests.unit.test_cli_errors import run
from vcemu.v1 import agent_pb2
from vcemu.v1 import coordinator_pb2 as pb
from vcemu.v1 import coordinator_pb2_grpc as pb_grpc


@pytest.fixture()
def server() -> Iterator[CoordinatorServer]:
    """A coordinator with one described agent (its address answers nothing), as in test_cli_review."""
    s = CoordinatorServer(get_policy("fcfs"), port=0).start()
    desc = agent_pb2.DescribeReply(agent_id="a0", mode="cgroup-v1", hosts=[
        agent_pb2.HostInfo(name="a0-h0", cpu_cores=0.5, memory_bytes=1 << 30)])
    with grpc.insecure_channel(s.address) as ch:
        pb_grpc.CoordinatorStub(ch).RegisterAgent(
            pb.RegisterAgentRequest(address="127.0.0.1:1", description=desc), timeout=5)
    yield s
    s.stop()


def test_cancel_twice_says_the_second_cancelled_nothing(server: CoordinatorServer,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["submit", "--coordinator", server.address, "--work", "1"], capsys)
    job = out.strip()
    code, out, _ = run(["cancel", "--coordinator", server.address, job], capsys)
    assert code == 0 and out.strip() == f"{job} cancelled"
    code, out, _ = run(["cancel", "--coordinator", server.address, job], capsys)
    assert code == 0 and out.strip() == f"{job} cancelled: it had been cancelled already, nothing was cancelled"


def test_cancel_of_an_unknown_job_is_still_refused(server: CoordinatorServer,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["cancel", "--coordinator", server.address, "job-09999"], capsys)
    assert code != 0 and "job-09999" in err and not out
