"""The coordinator's gRPC service: the network face of one engine driving the live backend.

``CoordinatorServer`` owns three things: the engine (with a live backend), a loop thread that calls
``engine.step`` (the same loop the simulator runs, on a real clock), and the gRPC server whose handlers
only validate, translate and hand work to the engine. A refused job gets INVALID_ARGUMENT with a message
naming the field, and nothing already accepted is touched.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import math
import queue
import threading
from collections.abc import Iterator
from concurrent import futures

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from coordinator.backends.base import BackendError
from coordinator.backends.live import LiveBackend
from coordinator.engine import Engine, JobRecord
from coordinator.exporter import AgentHealth, CoordinatorMetrics
from coordinator.metrics import Transition, bounded_stretch
from coordinator.model import InvalidJob, JobSpec, JobState
from coordinator.policies.base import Policy
from vcemu.v1 import coordinator_pb2 as pb
from vcemu.v1 import coordinator_pb2_grpc as pb_grpc

log = logging.getLogger("vcemu.coordinator")

SERVICE_NAME = "vcemu.v1.Coordinator"
MAX_MESSAGE_BYTES = 1 << 20


def job_message(rec: JobRecord) -> pb.Job:
    spec = rec.spec
    done = rec.state is JobState.DONE and rec.end is not None
    return pb.Job(
        job_id=spec.id,
        spec=pb.JobSpec(
            name=spec.id, tasks=spec.tasks, cpu_need=spec.cpu_need, memory=spec.mem,
            work_seconds=spec.work, workload=spec.workload,
        ),
        state=rec.state.value,
        submit_time=spec.submit_time,
        start_time=-1.0 if rec.first_start is None else rec.first_start,
        end_time=-1.0 if rec.end is None else rec.end,
        hosts=list(rec.hosts),
        cpu_share=rec.cpu,
        virtual_time=rec.vt,
        stretch=bounded_stretch(rec.end - spec.submit_time, spec.work) if done else 0.0,  # type: ignore[operator]
        message=rec.message,
        **{"yield": rec.cpu / spec.cpu_need if rec.state is JobState.RUNNING else 0.0},
    )


class CoordinatorServicer(pb_grpc.CoordinatorServicer):
    def __init__(self, server: CoordinatorServer) -> None:
        self.s = server

    def Submit(self, request: pb.SubmitRequest, context: grpc.ServicerContext) -> pb.Job:
        engine = self.s.engine
        spec_in = request.spec
        with engine.lock:
            if not engine.hosts:
                context.abort(grpc.StatusCode.UNAVAILABLE, "no hosts registered yet: start agents first")
            if request.request_id and request.request_id in self.s.requests:
                return job_message(engine.jobs[self.s.requests[request.request_id]])
            job_id = f"job-{next(self.s.ids):05d}"
            spec = JobSpec(
                id=job_id,
                submit_time=engine.backend.now(),
                tasks=spec_in.tasks,
                cpu_need=spec_in.cpu_need,
                mem=spec_in.memory,
                work=spec_in.work_seconds,
                workload=spec_in.workload or "dgemm",
            )
            try:
                engine.arrive(spec)
            except InvalidJob as exc:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"invalid job: {exc}")
            if request.request_id:
                self.s.requests[request.request_id] = job_id
            return job_message(engine.jobs[job_id])

    def _record(self, job_id: str, context: grpc.ServicerContext) -> JobRecord:
        rec = self.s.engine.jobs.get(job_id)
        if rec is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"job_id: no job {job_id!r}")
        return rec  # type: ignore[return-value]

    def Cancel(self, request: pb.JobRef, context: grpc.ServicerContext) -> pb.Job:
        with self.s.engine.lock:
            self._record(request.job_id, context)
            return job_message(self.s.engine.cancel(request.job_id))

    def GetJob(self, request: pb.JobRef, context: grpc.ServicerContext) -> pb.Job:
        with self.s.engine.lock:
            return job_message(self._record(request.job_id, context))

    def ListJobs(self, request: pb.ListJobsRequest, context: grpc.ServicerContext) -> pb.ListJobsReply:
        if request.state and request.state not in {s.value for s in JobState}:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"state: unknown state {request.state!r}")
        with self.s.engine.lock:
            recs = [r for r in self.s.engine.jobs.values() if not request.state or r.state.value == request.state]
            return pb.ListJobsReply(jobs=[job_message(r) for r in recs])

    def WatchEvents(self, request: pb.WatchEventsRequest, context: grpc.ServicerContext) -> Iterator[pb.JobEvent]:
        q: queue.Queue[Transition | None] = queue.Queue(maxsize=10_000)
        self.s.watchers.append(q)
        def wake() -> None:
            with contextlib.suppress(queue.Full):
                q.put_nowait(None)

        context.add_callback(wake)
        try:
            while context.is_active():
                t = q.get()
                if t is None:
                    break
                yield pb.JobEvent(
                    time=t.time, job_id=t.job, from_state=t.src.value if t.src else "", to_state=t.dst.value,
                    hosts=list(t.hosts), cpu_share=t.cpu, reason=t.reason,
                )
        finally:
            self.s.watchers.remove(q)

    def ClusterStatus(self, request: pb.ClusterStatusRequest, context: grpc.ServicerContext) -> pb.ClusterStatusReply:
        engine = self.s.engine
        measured = self.s.backend.host_status()
        with engine.lock:
            running = [r for r in engine.jobs.values() if r.state is JobState.RUNNING]
            reply = pb.ClusterStatusReply(policy=engine.policy.name, now=engine.backend.now())
            for h in engine.hosts:
                on = [r for r in running for x in r.hosts if x == h.name]
                info = self.s.backend.host_info.get(h.name)
                reply.hosts.append(
                    pb.HostView(
                        name=h.name,
                        agent=self.s.backend.host_agent.get(h.name, ""),
                        cpu_allocated=sum(r.cpu for r in on),
                        memory_allocated=sum(r.spec.mem for r in on),
                        cpu_measured=measured[h.name].cpu_measured if h.name in measured else 0.0,
                        cpu_cores=info.cpu_cores if info else 0.0,
                        memory_bytes=info.memory_bytes if info else 0,
                    )
                )
            for state in JobState:
                reply.jobs_by_state[state.value] = sum(1 for r in engine.jobs.values() if r.state is state)
            yields = [r.cpu / r.spec.cpu_need for r in running]
            reply.min_yield = min(yields, default=0.0)
            reply.avg_yield = sum(yields) / len(yields) if yields else 0.0
            return reply

    def RegisterAgent(self, request: pb.RegisterAgentRequest, context: grpc.ServicerContext) -> pb.RegisterAgentReply:
        if not request.address or not request.description.hosts:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "address and description.hosts are required")
        try:
            hosts = self.s.backend.add_agent(request.address, request.description)
        except BackendError as exc:
            context.abort(grpc.StatusCode.UNAVAILABLE, str(exc))
        self.s.engine.add_hosts(hosts)
        self.s.heartbeats[request.description.agent_id] = self.s.backend.now()
        log.info("agent %s at %s registered %d hosts", request.description.agent_id, request.address, len(hosts))
        return pb.RegisterAgentReply(hosts=[h.name for h in hosts])

    def Heartbeat(self, request: pb.HeartbeatRequest, context: grpc.ServicerContext) -> pb.HeartbeatReply:
        known = request.agent_id in self.s.backend.agents
        if known:
            self.s.heartbeats[request.agent_id] = self.s.backend.now()
        return pb.HeartbeatReply(known=known)


class CoordinatorServer:
    """A running coordinator: gRPC API + metrics + the engine loop on a live backend."""

    def __init__(
        self,
        policy: Policy,
        port: int = 0,
        bind: str = "127.0.0.1",
        metrics_port: int | None = None,
        compression: float = 1.0,
        poll_interval: float = 0.1,
    ) -> None:
        self.backend = LiveBackend(compression=compression, poll_interval=poll_interval)
        self.engine = Engine(policy, self.backend)
        self.metrics = CoordinatorMetrics(self.engine, policy.name, self.backend.host_status, self.agent_health)
        self.ids = itertools.count(1)
        self.requests: dict[str, str] = {}
        self.heartbeats: dict[str, float] = {}
        self.watchers: list[queue.Queue[Transition | None]] = []
        self.engine.listeners.append(self._broadcast)
        self._stop = threading.Event()
        self.grpc = grpc.server(
            futures.ThreadPoolExecutor(max_workers=16),
            options=[("grpc.max_receive_message_length", MAX_MESSAGE_BYTES)],
        )
        pb_grpc.add_CoordinatorServicer_to_server(CoordinatorServicer(self), self.grpc)
        self.health = health.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.grpc)
        self.port = self.grpc.add_insecure_port(f"{bind}:{port}")
        if self.port == 0:
            raise OSError(f"cannot bind the coordinator to {bind}:{port}")
        self.address = f"{bind}:{self.port}"
        self.metrics_port = self.metrics.serve(metrics_port, bind) if metrics_port is not None else None
        self._loop = threading.Thread(target=self._run, name="engine-loop", daemon=True)

    def agent_health(self) -> list[AgentHealth]:
        """Registered agents with the wall-clock age of their last heartbeat (for the metrics)."""
        now = self.backend.now()
        return [
            AgentHealth(a, h.mode, (now - self.heartbeats.get(a, -math.inf)) / self.backend.compression, len(h.hosts))
            for a, h in list(self.backend.agents.items())
        ]

    def _broadcast(self, t: Transition) -> None:
        for q in list(self.watchers):
            with contextlib.suppress(queue.Full):
                q.put_nowait(t)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.engine.step(until=self.backend.now() + 0.5 * self.backend.compression)
            except Exception:  # the loop must survive a bad event; the error is logged with its trace
                log.exception("engine step failed")
                self._stop.wait(0.5)

    def start(self) -> CoordinatorServer:
        self.grpc.start()
        self._loop.start()
        self.health.set(SERVICE_NAME, health_pb2.HealthCheckResponse.SERVING)
        self.health.set("", health_pb2.HealthCheckResponse.SERVING)
        return self

    def stop(self, grace: float = 1.0) -> None:
        self.health.enter_graceful_shutdown()
        self._stop.set()
        self.backend.wake()
        self._loop.join(timeout=5)
        with self.engine.lock:
            for job, rec in self.engine.jobs.items():
                if rec.state in (JobState.RUNNING, JobState.PAUSED):
                    with contextlib.suppress(BackendError):
                        self.backend.stop(job)
        for q in list(self.watchers):
            with contextlib.suppress(queue.Full):
                q.put_nowait(None)
        self.grpc.stop(grace).wait()
        self.backend.close()

    def wait_idle(self, timeout: float = math.inf) -> bool:
        """Block until every accepted job is finished (for the demo and tests)."""
        deadline = self.backend.now() + timeout * self.backend.compression
        while self.backend.now() < deadline:
            with self.engine.lock:
                if self.engine.jobs and self.engine.unfinished == 0:
                    return True
            self._stop.wait(0.1)
        return False
