"""Live backends connected to scripted agents: any ``AgentServicer`` served by a real gRPC server on
127.0.0.1, for tests of the live backend's calls without agent processes or cgroups. :class:`TableAgent`
keeps the real agent's task-table rules (node_agent.agent.AgentCore) and lets a test script the rest."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent import futures
from contextlib import contextmanager

import grpc

from coordinator.backends.live import LiveBackend
from coordinator.engine import Engine
from coordinator.model import Host, Snapshot, Stimulus
from coordinator.plan import Plan
from node_agent.agent import AgentCore
from node_agent.server import AgentServicer
from vcemu.v1 import agent_pb2, agent_pb2_grpc


class Idle:
    """A policy that never acts: every plan is applied by the test (``Engine.apply``)."""

    name, period = "idle", None

    def decide(self, snap: Snapshot, stim: Stimulus) -> Plan:
        return Plan()


def engine_on(backend: LiveBackend) -> Engine:
    """An engine over every host of ``backend``'s agents (1 CPU, all memory each), with the :class:`Idle` policy."""
    return Engine(Idle(), backend, [Host(h, 1.0, 1.0) for h in sorted(backend.host_agent)])


def serve(servicer: agent_pb2_grpc.AgentServicer) -> tuple[grpc.Server, str]:
    """``servicer`` served on a free port of 127.0.0.1: the started server and its address."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    agent_pb2_grpc.add_AgentServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, f"127.0.0.1:{port}"


@contextmanager
def agent_served(core: AgentCore) -> Iterator[agent_pb2_grpc.AgentStub]:
    """The real agent ``core`` behind its gRPC servicer on 127.0.0.1: a stub to it; the core shut down on exit."""
    server, address = serve(AgentServicer(core))
    channel = grpc.insecure_channel(address)
    try:
        yield agent_pb2_grpc.AgentStub(channel)
    finally:
        channel.close()
        server.stop(0)
        core.shutdown()


@contextmanager
def backend_on(*servicers: agent_pb2_grpc.AgentServicer, rpc_timeout: float = 5.0,
               pause_mode: str = "checkpoint") -> Iterator[LiveBackend]:
    """A :class:`LiveBackend` with each of ``servicers`` registered as an agent; all closed on exit."""
    servers: list[grpc.Server] = []
    backend = LiveBackend(rpc_timeout=rpc_timeout, pause_mode=pause_mode)
    try:
        for servicer in servicers:
            server, address = serve(servicer)
            servers.append(server)
            backend.add_agent(address)
        yield backend
    finally:
        backend.close()
        for server in servers:
            server.stop(0)


class TableAgent(agent_pb2_grpc.AgentServicer):
    """An agent whose tasks are entries of a table, with the real agent's rules: Stop forgets a task, a
    finished task stays known until Stop, an unknown id is NOT_FOUND and a known one ALREADY_EXISTS at
    StartTask. No processes: a test moves a task's progress and state with :meth:`set` and :meth:`finish`,
    and scripts faults with the flags below."""

    def __init__(self, agent_id: str = "table", hosts: tuple[str, ...] = ("h0", "h1", "h2"),
                 cores: tuple[float, ...] | None = None) -> None:
        self.agent_id, self.hosts = agent_id, hosts
        self.cores = cores or (1.0,) * len(hosts)  # each host's CPU cores, as Describe reports them
        self.started: list[agent_pb2.StartTaskRequest] = []  # every StartTask request, in order
        self.tasks: dict[str, agent_pb2.TaskStatus] = {}
        self.checkpoints: list[str] = []  # the task ids asked for a checkpoint, in order
        self.mute = False  # Status answers UNAVAILABLE (a slow or briefly partitioned agent)
        self.refuse_start_on: set[str] = set()  # StartTask on these hosts answers UNAVAILABLE
        self.refuse_stop = False  # Stop answers UNAVAILABLE
        self.on_start: Callable[[agent_pb2.StartTaskRequest], None] | None = None  # called at each StartTask
        self.on_stop: Callable[[agent_pb2.TaskRef], None] | None = None  # called at each Stop, before refuse_stop
        # StartTask past a host's CPU (the shares of its running tasks) answers FAILED_PRECONDITION, as
        # AgentCore's capacity check does
        self.check_capacity = False
        #: Batch calls it answers UNIMPLEMENTED, as an agent from before them does: "SetShares", "StartTasks",
        #: "StopTasks".
        self.unimplemented: set[str] = set()
        self.refuse_share: set[str] = set()  # SetShare of these task ids answers FAILED_PRECONDITION
        #: The share calls and starts, in order: ("SetShare", (task id,)), ("SetShares", (task ids...)),
        #: ("StartTask", (task id,)) or ("StartTasks", (task ids...)); and, if ``record_stops``, the stops:
        #: ("Stop", (task id,)) or ("StopTasks", (task ids...)).
        self.calls: list[tuple[str, tuple[str, ...]]] = []
        self.record_stops = False

    def _get(self, task_id: str, context: grpc.ServicerContext) -> agent_pb2.TaskStatus:
        if task_id not in self.tasks:
            context.abort(grpc.StatusCode.NOT_FOUND, f"task_id: no task {task_id!r} on agent {self.agent_id}")
        return self.tasks[task_id]

    def Describe(self, request, context):  # noqa: N802
        return agent_pb2.DescribeReply(agent_id=self.agent_id, mode="cgroup-v1", hosts=[
            agent_pb2.HostInfo(name=h, cpu_cores=c, memory_bytes=1 << 30) for h, c in zip(self.hosts, self.cores,
                                                                                          strict=True)])

    def StartTask(self, request, context):  # noqa: N802
        self.calls.append(("StartTask", (request.task_id,)))
        return agent_pb2.TaskReply(task=self._start(request, context))

    def StartTasks(self, request, context):  # noqa: N802
        """Each start in turn until one fails other than ALREADY_EXISTS, as AgentCore.start_tasks; a host in
        ``refuse_start_on`` fails the whole call (the starts before it made, as when a reply is lost)."""
        self.calls.append(("StartTasks", tuple(r.task_id for r in request.tasks)))
        return self._batch("StartTasks", request.tasks, self._start, context, stops_at_failure=True)

    def _batch(self, name: str, requests, one, context, stops_at_failure: bool = False):  # type: ignore[no-untyped-def]
        """The batch call ``name``: ``one`` for each request, each refusal that request's result (the first other
        than ALREADY_EXISTS ending the batch if ``stops_at_failure``); UNIMPLEMENTED if in :attr:`unimplemented`."""
        if name in self.unimplemented:
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "Method not implemented!")
        results = []
        for r in requests:
            try:
                results.append(agent_pb2.TaskResult(task=one(r, _OneRequest(context))))
            except _Refused as refusal:
                results.append(agent_pb2.TaskResult(error_code=refusal.code.name, error=refusal.details))
                if stops_at_failure and refusal.code != grpc.StatusCode.ALREADY_EXISTS:
                    break
        return agent_pb2.TasksReply(results=results)

    def _start(self, request, context) -> agent_pb2.TaskStatus:
        self.started.append(request)
        if self.on_start is not None:
            self.on_start(request)
        if request.host in self.refuse_start_on:
            (context.call if isinstance(context, _OneRequest) else context).abort(grpc.StatusCode.UNAVAILABLE,
                                                                                   "partitioned")
        if request.task_id in self.tasks:
            context.abort(grpc.StatusCode.ALREADY_EXISTS, f"task_id: task {request.task_id!r} already exists")
        if self.check_capacity:
            used = sum(t.cpu_share for t in self.tasks.values()
                       if t.host == request.host and t.state == agent_pb2.TASK_STATE_RUNNING)
            if used + request.cpu_share > 1.0 + 1e-6:
                context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"cpu_share: host {request.host} has "
                              f"{1.0 - used:.6g} of its CPU unallocated, the request needs {request.cpu_share:.6g}")
        status = agent_pb2.TaskStatus(task_id=request.task_id, host=request.host, progress=request.start_progress,
                                      state=agent_pb2.TASK_STATE_RUNNING, cpu_share=request.cpu_share)
        self.tasks[request.task_id] = status
        return status

    def SetShare(self, request, context):  # noqa: N802
        self.calls.append(("SetShare", (request.task_id,)))
        return agent_pb2.TaskReply(task=self._set_share(request, context))

    def SetShares(self, request, context):  # noqa: N802
        self.calls.append(("SetShares", tuple(r.task_id for r in request.shares)))
        return self._batch("SetShares", request.shares, self._set_share, context)

    def _set_share(self, request, context) -> agent_pb2.TaskStatus:
        status = self._get(request.task_id, context)
        if request.task_id in self.refuse_share:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"cpu_share: refused for {request.task_id}")
        status.cpu_share = request.cpu_share
        return status

    def Pause(self, request, context):  # noqa: N802
        return agent_pb2.TaskReply(task=self._get(request.task_id, context))

    def Resume(self, request, context):  # noqa: N802
        return agent_pb2.TaskReply(task=self._get(request.task_id, context))

    def Checkpoint(self, request, context):  # noqa: N802
        self.checkpoints.append(request.task_id)
        status = self._get(request.task_id, context)
        return agent_pb2.CheckpointReply(task_id=status.task_id, progress=status.progress)

    def Stop(self, request, context):  # noqa: N802
        if self.record_stops:
            self.calls.append(("Stop", (request.task_id,)))
        return agent_pb2.TaskReply(task=self._stop(request, context))

    def StopTasks(self, request, context):  # noqa: N802
        """Each Stop in turn, each failure its own result; ``refuse_stop`` fails the whole call (the stops before
        the first made, as when a reply is lost)."""
        if self.record_stops:
            self.calls.append(("StopTasks", tuple(r.task_id for r in request.tasks)))
        return self._batch("StopTasks", request.tasks, self._stop, context)

    def _stop(self, request, context) -> agent_pb2.TaskStatus:
        if self.on_stop is not None:
            self.on_stop(request)
        if self.refuse_stop:
            (context.call if isinstance(context, _OneRequest) else context).abort(grpc.StatusCode.UNAVAILABLE,
                                                                                   "partitioned")
        status = self._get(request.task_id, context)
        del self.tasks[request.task_id]
        return status

    def Status(self, request, context):  # noqa: N802
        if self.mute:
            context.abort(grpc.StatusCode.UNAVAILABLE, "no answer")
        return agent_pb2.StatusReply(agent_id=self.agent_id, mode="cgroup-v1", tasks=list(self.tasks.values()))

    def set(self, task_id: str, progress: float, state: int = agent_pb2.TASK_STATE_RUNNING, message: str = "") -> None:
        status = self.tasks[task_id]
        status.progress, status.state, status.message = progress, state, message

    def finish(self, task_id: str) -> None:
        self.set(task_id, 1.0, agent_pb2.TASK_STATE_DONE)


class _Refused(Exception):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code, self.details = code, details


class _OneRequest:
    """The context of one request of a batch: a refusal becomes that request's result, not the call's
    (``call``: the batch call's own context)."""

    def __init__(self, call: grpc.ServicerContext) -> None:
        self.call = call

    def abort(self, code: grpc.StatusCode, details: str) -> None:
        raise _Refused(code, details)


class LocalCall:
    """The context of a servicer method called in-process (no gRPC server): a refusal raises, and the peer is this
    machine over plain TCP, as an agent started by ``vcemu up`` registers."""

    def abort(self, code: grpc.StatusCode, details: str) -> None:
        raise RuntimeError(f"{code}: {details}")

    def set_trailing_metadata(self, metadata: object) -> None:
        pass

    def peer(self) -> str:
        return "ipv4:127.0.0.1:1"

    def auth_context(self) -> dict[str, list[bytes]]:
        return {}

    def invocation_metadata(self) -> tuple[()]:
        return ()

    def time_remaining(self) -> float | None:
        return None
