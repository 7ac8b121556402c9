"""The live backend moving a finished task of an unfinished job (DYNMCB8 repacks every running job, whatever
its tasks' progress). A real agent forgets a task it is told to Stop, so a task moved once after it finished
is no longer on any agent: moving it again must not ask for its checkpoint, which the agent refuses
(NOT_FOUND), failing the whole job. Seen in CI: tests/integration/test_live_cluster.py's DYNMCB8 test failed
job-00003 with "move failed: Checkpoint ...: NOT_FOUND". The agent here is a gRPC server on 127.0.0.1 that
keeps the real agent's task table rules (node_agent.agent.AgentCore: Stop forgets, Checkpoint of an unknown
task is NOT_FOUND)."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest

from coordinator.backends.live import LiveBackend
from coordinator.model import JobSpec, JobState
from vcemu.v1 import agent_pb2, agent_pb2_grpc

from .scripted_agent import backend_on

HOSTS = ("h0", "h1", "h2")


class TableAgent(agent_pb2_grpc.AgentServicer):
    """Tasks are entries of a table, finished when the test says so; no processes."""

    def __init__(self) -> None:
        self.tasks: dict[str, agent_pb2.TaskStatus] = {}
        self.checkpoints: list[str] = []

    def _get(self, task_id: str, context: grpc.ServicerContext) -> agent_pb2.TaskStatus:
        if task_id not in self.tasks:
            context.abort(grpc.StatusCode.NOT_FOUND, f"task_id: no task {task_id!r} on agent table")
        return self.tasks[task_id]

    def Describe(self, request, context):  # noqa: N802
        return agent_pb2.DescribeReply(agent_id="table", mode="cgroup-v1", hosts=[
            agent_pb2.HostInfo(name=h, cpu_cores=1.0, memory_bytes=1 << 30) for h in HOSTS])

    def StartTask(self, request, context):  # noqa: N802
        status = agent_pb2.TaskStatus(task_id=request.task_id, host=request.host, progress=request.start_progress,
                                      state=agent_pb2.TASK_STATE_RUNNING)
        self.tasks[request.task_id] = status
        return agent_pb2.TaskReply(task=status)

    def SetShare(self, request, context):  # noqa: N802
        return agent_pb2.TaskReply(task=self._get(request.task_id, context))

    def Checkpoint(self, request, context):  # noqa: N802
        self.checkpoints.append(request.task_id)
        status = self._get(request.task_id, context)
        return agent_pb2.CheckpointReply(task_id=status.task_id, progress=status.progress)

    def Stop(self, request, context):  # noqa: N802
        status = self._get(request.task_id, context)
        del self.tasks[request.task_id]
        return agent_pb2.TaskReply(task=status)

    def Status(self, request, context):  # noqa: N802
        return agent_pb2.StatusReply(agent_id="table", mode="cgroup-v1", tasks=list(self.tasks.values()))

    def finish(self, task_id: str) -> None:
        self.tasks[task_id].progress = 1.0
        self.tasks[task_id].state = agent_pb2.TASK_STATE_DONE


@pytest.fixture()
def cluster() -> Iterator[tuple[LiveBackend, TableAgent]]:
    agent = TableAgent()
    with backend_on(agent) as backend:
        yield backend, agent


def test_a_finished_task_moved_twice_is_not_checkpointed_and_its_job_carries_on(
    cluster: tuple[LiveBackend, TableAgent],
) -> None:
    backend, agent = cluster
    backend.start(JobSpec("a", 0.0, 2, 1.0, 0.1, 10.0), ["h0", "h1"], 1.0)
    first, second = agent.tasks  # the tasks' ids, in start order
    agent.finish(first)
    assert backend.poll() == []  # task 1 still runs: the job is not done

    backend.migrate("a", 0, "h2")  # a repacking moves the finished task: it is stopped, and forgotten
    assert not backend.flush() and first not in agent.tasks
    backend.migrate("a", 0, "h0")  # the next repacking moves it again: nothing to checkpoint
    assert not backend.flush()
    assert agent.checkpoints == []

    agent.finish(second)
    assert [(r.job, r.state) for r in backend.poll()] == [("a", JobState.DONE)]
    assert agent.tasks == {}
