"""The coordinator's gRPC service: the network face of one engine driving the live backend.

``CoordinatorServer`` owns the engine (with a live backend), a loop thread that calls ``engine.step`` (the same
loop the simulator runs, on a real clock), the gRPC server whose handlers only validate, translate and hand work
to the engine, and what watches the agents (the ``agent-watch`` thread, which declares the silent ones lost, and
the ``stall-ticker``, which notes when this process did not run); with ``metrics_port``, a Prometheus HTTP
server too. A refused job gets INVALID_ARGUMENT with a message
naming the field, and nothing already accepted is touched.

Reliability (issue 7). With ``state`` (a SQLite file, :mod:`coordinator.store`) every accepted job and
every transition is committed before the reply leaves; a restarted coordinator reloads its jobs, takes
back its agents and the tasks they kept running (:meth:`LiveBackend.adopt`), and carries on. Agents
heartbeat every ``heartbeat_s`` (told to them in RegisterAgentReply); one silent for ``heartbeat_misses``
intervals is declared lost: its hosts leave the cluster and its jobs are requeued from their last
checkpoint (counted in ``vcemu_agents_lost_total``, each requeue in the event stream); not while every agent,
two or more, is silent at once, for up to :data:`ALL_SILENT_WINDOWS` such windows (the coordinator's own network
is as likely at fault). Before that silence
has passed, the agent has frozen the tasks it runs (fencing: :attr:`CoordinatorServer.lease_s`), so a job is
never started again while an agent that is only cut off from the coordinator runs it on. Submit is
idempotent by ``request_id``, durably. With ``token`` the user API needs ``authorization: Bearer <token>``, and so
do the agents' calls unless mutual TLS authenticates them (:class:`TokenInterceptor`); the coordinator sends it on
its calls to the agents, whose API wants it when they were given it (:mod:`vcemu.auth`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
import math
import os
import queue
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Callable, Collection, Iterator
from concurrent import futures
from typing import Any

import grpc
from google.protobuf.message import DecodeError
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from coordinator.backends.base import BackendError
from coordinator.backends.live import AgentHandle, LiveBackend
from coordinator.engine import Engine, JobRecord
from coordinator.exporter import AgentHealth, CoordinatorMetrics
from coordinator.jobboard import JobBoard, JobRow, hosts_used
from coordinator.metrics import Transition, bounded_stretch, stretch
from coordinator.model import InvalidJob, JobSpec, JobState
from coordinator.policies.base import Policy
from coordinator.store import Store, StoreError
from coordinator.warmup import warm_kernels
from vcemu.auth import BearerTokenInterceptor, presented
from vcemu.limits import (
    BUSY,
    KNOWN_METADATA,
    MAX_AGENT_HOSTS,
    MAX_MESSAGE_BYTES,
    MAX_QUEUED,
    MAX_REPLY_BYTES,
    address_refusal,
    name_refusal,
    request_bounds,
    shown,
)
from vcemu.ports import (
    cannot_bind,
    is_loopback,
    listen_address,
    ports_refusal,
    serve_metrics,
    unreachable_advertise,
)
from vcemu.tls import TlsFiles, certificate_refusal
from vcemu.v1 import agent_pb2
from vcemu.v1 import coordinator_pb2 as pb
from vcemu.v1 import coordinator_pb2_grpc as pb_grpc

log = logging.getLogger("vcemu.coordinator")

SERVICE_NAME = "vcemu.v1.Coordinator"
#: Seconds between two traces of the same state-file error of the engine loop (:meth:`CoordinatorServer._run`).
STORE_ERROR_REPEAT_S = 60.0
#: Exceptions of the engine loop kept as text (:attr:`CoordinatorServer.loop_errors`).
LOOP_ERRORS_KEPT = 20
#: Seconds between two notes of the stall ticker (:meth:`CoordinatorServer._tick`).
STALL_TICK_S = 0.05
#: Seconds between two tries at writing the job changes the state file could not take (:meth:`_persist`).
UNSAVED_RETRY_S = 1.0
#: Agents declared lost that keep a down series (``vcemu_agent_up`` 0) until they register again: the latest ones.
#: An agent restarted under a new id each time (the default id holds its pid) would otherwise add a series, and
#: an entry here, per restart for as long as the coordinator runs.
LOST_KEPT = 256
#: How often the log says again that an agent's registration is refused for an address it cannot be called at.
REFUSAL_SAY_S = 60.0
MAX_BATCH = 1_000  # submissions per SubmitBatch call (with MAX_MESSAGE_BYTES, bounds one call's work)
#: Threads serving the gRPC API (users' calls and the agents' RegisterAgent and Heartbeat).
API_THREADS = 16
#: Open WatchEvents streams at once. Each holds an API thread for its whole life; beyond this many, a new one is
#: refused (RESOURCE_EXHAUSTED), so that watchers (dashboards, scripts) can never take every thread and starve
#: submissions, listings and the agents' heartbeats (with all 16 taken, healthy agents went stale).
MAX_WATCHERS = API_THREADS // 2
#: Cancels waiting for the engine's lock at once (the loop holds it through a turn, seconds at scale). Beyond this
#: many a Cancel is refused (UNAVAILABLE, retry), so that with the watchers they can never take every API thread:
#: 16 Cancels waiting out a 6 s turn made the agents' heartbeats miss their deadline (concurrency review).
MAX_CANCELS_WAITING = API_THREADS - MAX_WATCHERS - 2
#: RegisterAgent calls waiting for the engine's lock at once, in the same budget as the Cancels (one semaphore, so
#: that together they too leave threads to the heartbeats): beyond it a registration is refused UNAVAILABLE and the
#: agent retries after its backoff. 64 agents started at once (2 cores) each waited on an API thread for a turn, on
#: past its 2 s deadline (the agent then registered again, on another thread): they took every thread, and agents
#: registered already were declared lost, their heartbeats unanswered, as the cluster came up (scale review).
MAX_REGISTRATIONS_WAITING = MAX_CANCELS_WAITING
#: Seconds between the server's pings of each client connection, and seconds a ping may go unanswered before the
#: connection is closed and its calls cancelled (a half-open connection: a client gone without a word).
KEEPALIVE_S = 30.0
KEEPALIVE_TIMEOUT_S = 20.0
#: Events a WatchEvents stream may fall behind by. Past that its stream ends with RESOURCE_EXHAUSTED once it has
#: sent what it holds (:class:`EventQueue`), rather than go on with events missing from it.
WATCH_QUEUE = 10_000
AGENT_METHODS = ("RegisterAgent", "Heartbeat")
#: Least time between the end of an agent's lease and the moment it can be declared lost: its monitor looks at the
#: lease every 0.1 s, under the agent's lock, and freezes its tasks one after another.
MIN_FENCE_SLACK_S = 0.3
#: The lease granted in a heartbeat's reply that renews none (:attr:`pb.HeartbeatReply.unreachable`): an agent that
#: predates that field reads this lease, which has run out by the time it reads it, and freezes its tasks at once.
UNRENEWED_LEASE_S = 1e-3
#: Registrations of agents heard one way only probed at once (:meth:`CoordinatorServicer._probe`), and the
#: time left of the caller's deadline for its reply.
MAX_PROBES = 4
PROBE_REPLY_MARGIN_S = 0.1
#: How many loss windows (``heartbeat_misses x heartbeat_s``) every agent, two or more, may be silent together before
#: they are declared lost (:meth:`CoordinatorServer._check_agents`): all silent at once is as likely a fault of the
#: coordinator's own network as of every agent, and losing them all for a blip restarted every job on the cluster
#: (multi-host review, session 46). Bounded, so that jobs of agents that did all fail (a rack's power, every agent
#: stopped) show as running for a minute at the defaults, not for ever, and are requeued then as before.
ALL_SILENT_WINDOWS = 10
#: Shortest time between two turns of the engine loop (seconds).
BATCH_WINDOW_S = 0.02
#: Wall time a turn of the engine loop spends at most on the stimuli due (:meth:`Engine.step`'s ``budget_s``): the rest
#: wait for the next turn, which starts 3 times that later (:meth:`CoordinatorServer._run`), the lock free between.
TURN_BUDGET_S = 0.25


#: File descriptors kept free for the clients and the state file: an agent that would leave fewer is refused.
FD_RESERVE = 64


def descriptors_short() -> str | None:
    """Why this process's open file descriptors leave fewer free under its soft limit (ulimit -n) than it keeps for
    the clients (:data:`FD_RESERVE`, or a quarter of a smaller limit), or None (also where /proc cannot tell)."""
    import resource

    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    try:
        used = len(os.listdir("/proc/self/fd"))
    except OSError:
        return None
    reserve = min(FD_RESERVE, soft // 4)
    if soft == resource.RLIM_INFINITY or used + reserve <= soft:
        return None
    return (f"{used} of its {soft} file descriptors are open (ulimit -n), and {reserve} are kept for the clients: "
            "raise the coordinator's limit")


@dataclasses.dataclass(frozen=True)
class LostAgent:
    """An agent declared lost and not registered since (:meth:`CoordinatorServer.lose_agent`): for its
    ``vcemu_agent_up`` 0 series and for ``vcemu status``, which named no lost agent (only the log did)."""

    mode: str
    #: Monotonic time of its last sign of life (-inf if none was heard from this process).
    last_heard: float
    #: Monotonic time it was declared lost.
    lost_at: float
    hosts: tuple[str, ...]
    #: Why, as the log says it ("agent a0 lost: no heartbeat for 3 x 2 s").
    reason: str
    requeued: int


def _host_changes(before: dict[str, agent_pb2.HostInfo], now: dict[str, tuple[float, int]], changed: list[str]) -> str:
    """What changed in a re-registering agent's hosts, for a person: the ones it no longer has, and the ones
    whose size changed with the sizes (live review: "without host(s) h0, h1 as they were" listed hosts that were
    still there, and did not say what had changed)."""
    gone = [n for n in changed if n not in now]
    resized = [f"{n} ({before[n].cpu_cores:g} -> {now[n][0]:g} cores, {before[n].memory_bytes >> 20} -> "
               f"{now[n][1] >> 20} MiB)" for n in changed if n in now]
    parts = ([f"host{'s' if len(resized) > 1 else ''} resized: {', '.join(resized)}"] if resized else []) + (
        [f"host{'s' if len(gone) > 1 else ''} gone: {', '.join(gone)}"] if gone else [])
    return "; ".join(parts)


class TokenInterceptor(BearerTokenInterceptor):
    """Refuse calls without ``authorization: Bearer <token>`` (UNAUTHENTICATED): the user API's, and with ``agents``
    the agents' RegisterAgent/Heartbeat too (the coordinator's ``--token-file`` given to ``vcemu agent``, which
    ``vcemu up`` does for the agents it starts). Without ``agents`` (under mutual TLS) the agents' calls are left to
    their certificates, as they were before agents sent a token: an agent of a TLS cluster needs no token."""

    def __init__(self, token: str, agents: bool = True) -> None:
        super().__init__(token, SERVICE_NAME, () if agents else AGENT_METHODS)


def fence_slack(heartbeat_s: float) -> float:
    """Time between the end of an agent's lease and the moment it can be declared lost: half an interval, at least
    :data:`MIN_FENCE_SLACK_S`."""
    return max(0.5 * heartbeat_s, MIN_FENCE_SLACK_S)


def lease_for(heartbeat_s: float, misses: int) -> float:
    """The lease a coordinator grants its agents (:attr:`CoordinatorServer.lease_s`): the silence after which it
    declares one lost, less :func:`fence_slack`; 0 (none) if that is shorter than one heartbeat interval."""
    lease = misses * heartbeat_s - fence_slack(heartbeat_s)
    return lease if lease >= heartbeat_s else 0.0


def check_spec(spec: pb.JobSpec, request_id: str) -> str | None:
    """The first bound a request breaks, as ``field: why``, or None (:func:`vcemu.limits.request_bounds`)."""
    return request_bounds(request_id, spec.name, spec.tasks, spec.work_seconds)


#: Bounds on an agent's registration (:func:`check_agent`): a host's cores and memory (and ``limits.MAX_AGENT_HOSTS``).
MAX_HOST_CORES = 1e6
MAX_HOST_MEMORY = 1 << 60


def _keep_latest(agents: dict[str, Any]) -> None:
    """Drop the oldest entries of a dict keyed by agent id (insertion order: the latest last) beyond :data:`LOST_KEPT`:
    ids are the agents' to choose, and one restarted under a new id each time would add an entry per restart."""
    while len(agents) > LOST_KEPT:
        del agents[next(iter(agents))]


def check_agent(request: pb.RegisterAgentRequest) -> str | None:
    """The first thing wrong with an agent's registration, as ``field: why``, or None. Its host names label jobs,
    logs, tables and metrics, and its capacities become the engine's: registrations with 1e308 cores, two hosts of
    one name, 20,000 hosts, a name with a newline or an address with no port were taken, and jobs then failed on
    them (input review)."""
    d = request.description
    why = address_refusal("address", request.address) or name_refusal("description.agent_id", d.agent_id)
    if why is not None:
        return why
    if not d.hosts:
        return "description.hosts: required"
    if len(d.hosts) > MAX_AGENT_HOSTS:
        return f"description.hosts: at most {MAX_AGENT_HOSTS:,} per agent, got {len(d.hosts):,}"
    seen: set[str] = set()
    for h in d.hosts:
        why = name_refusal("description.hosts.name", h.name)
        if why is not None:
            return why
        if h.name in seen:
            return f"description.hosts: two hosts named {shown(h.name)}"
        seen.add(h.name)
        where = f"description.hosts: host {shown(h.name)}"
        if not (math.isfinite(h.cpu_cores) and 0 < h.cpu_cores <= MAX_HOST_CORES):
            return f"{where}: cpu_cores must be in (0, {MAX_HOST_CORES:g}], got {h.cpu_cores}"
        if not 0 < h.memory_bytes <= MAX_HOST_MEMORY:
            return f"{where}: memory_bytes must be in (0, 2^60], got {h.memory_bytes}"
    return None


def _flow(rec: JobRecord, done: bool) -> float | None:
    """A done job's flow time (end - submit), else None."""
    return rec.end - rec.spec.submit_time if done and rec.end is not None else None


def job_message(rec: JobRecord | JobRow, vt: float | None = None) -> pb.Job:
    """The API's view of a job; ``vt``: its virtual time now, if not the record's (a running job's progress moves
    between its transitions)."""
    spec = rec.spec
    done = rec.state is JobState.DONE and rec.end is not None
    return pb.Job(
        job_id=spec.id,
        spec=pb.JobSpec(
            name=spec.name or spec.id, tasks=spec.tasks, cpu_need=spec.cpu_need, memory=spec.mem,
            work_seconds=spec.work, workload=spec.workload,
        ),
        state=rec.state.value,
        submit_time=spec.submit_time,
        start_time=-1.0 if rec.first_start is None else rec.first_start,
        end_time=-1.0 if rec.end is None else rec.end,
        hosts=list(rec.hosts),
        cpu_share=rec.cpu,
        virtual_time=rec.vt if vt is None else vt,
        # (flow: rec.end is set when done)
        bounded_stretch=bounded_stretch(flow, spec.work) if (flow := _flow(rec, done)) is not None else 0.0,
        stretch=stretch(flow, spec.work) if flow is not None else 0.0,
        message=rec.message,
        **{"yield": rec.cpu / spec.cpu_need if rec.state is JobState.RUNNING else 0.0},
    )


def _vt_now(row: JobRow, progress: dict[str, float]) -> float | None:
    """A running job's virtual time as of the agents' last Status (``progress``: the backend's progress_seen), not
    of its last transition; None (the record's) for a job not running, or whose tasks the backend no longer lists
    (its requeue under way: it read 0 for a moment; live check)."""
    seen = progress.get(row.spec.id) if row.state is JobState.RUNNING else None
    return None if seen is None else seen * row.spec.work


_CODES = {c.value[0]: c for c in grpc.StatusCode}


def _page_start(token: str) -> tuple[int, str] | None:
    """Where the page after ``token`` starts: the number of jobs already scanned and the id of the last of them
    (:meth:`JobBoard.page` checks that it is still there: a restarted coordinator may list its jobs in another
    order); None for a token that is no page token at all. The first page's token is empty."""
    if not token:
        return 0, ""
    count, _, last = token.partition(":")
    if not (count.isascii() and count.isdigit()) or int(count) == 0:  # ("²".isdigit(): int fails)
        return None
    return int(count), last


class EventQueue(queue.Queue):
    """A WatchEvents stream's events on their way out. Once full, it takes no more (:attr:`gap_at` is the time of
    the first it missed): the stream then sends what the queue holds and ends with RESOURCE_EXHAUSTED, so that a
    consumer that fell :data:`WATCH_QUEUE` events behind learns of the gap, where events were dropped in silence
    and the stream went on (26 to 125 of 31,500 events of a 10,500-job burst; scale review). ``None`` ends a
    stream (the coordinator stopping, the client gone)."""

    def __init__(self, maxsize: int = 0) -> None:
        super().__init__(maxsize)
        self.gap_at: float | None = None

    def offer(self, t: Transition) -> None:
        if self.gap_at is not None:
            return
        try:
            self.put_nowait(t)
        except queue.Full:
            self.gap_at = t.time


def _refusal(code: grpc.StatusCode, error: str) -> pb.SubmitResult:
    return pb.SubmitResult(code=code.value[0], error=error)


def _job_id_given(request: pb.JobRef, context: grpc.ServicerContext) -> None:
    """An empty job id is a bad request, not an unknown job (API review: NOT_FOUND "no job ''")."""
    if not request.job_id:
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, "job_id: required")


def _spec_differences(spec: JobSpec, asked: pb.JobSpec) -> str:
    """How a submission's spec differs in what runs from the spec of the job its request id made ("" if in
    nothing): the fields by their proto names, the job's value first, numbers in full. Not the name, a label: a
    state file from before names were kept holds none, and a genuine retry of ``submit --file`` sends one (review)."""
    pairs = (("tasks", spec.tasks, asked.tasks), ("cpu_need", spec.cpu_need, asked.cpu_need),
             ("memory", spec.mem, asked.memory), ("work_seconds", spec.work, asked.work_seconds),
             ("workload", spec.workload, asked.workload or "dgemm"))
    return ", ".join(f"{name} {shown(had) if isinstance(had, str) else repr(had)} (not "
                     f"{shown(got) if isinstance(got, str) else repr(got)})" for name, had, got in pairs if had != got)


class CoordinatorServicer(pb_grpc.CoordinatorServicer):
    def __init__(self, server: CoordinatorServer) -> None:
        self.s = server

    def _accept(self, requests: list[pb.SubmitRequest], context: grpc.ServicerContext) -> list[pb.SubmitResult]:
        """:meth:`CoordinatorServer.accept`, and a state file that cannot be written (a full disk) as one clear
        UNAVAILABLE: gRPC's own "Exception calling application" (UNKNOWN) named neither the cause nor the fix."""
        try:
            return self.s.accept(requests)
        except (sqlite3.Error, OSError) as exc:
            where = f" {self.s.store.path}" if self.s.store is not None else ""
            context.abort(grpc.StatusCode.UNAVAILABLE, f"the coordinator cannot write its state file{where} ({exc}): "
                          "nothing was accepted; submit again once it can")
            raise  # (abort raises)

    def Submit(self, request: pb.SubmitRequest, context: grpc.ServicerContext) -> pb.Job:
        (result,) = self._accept([request], context)
        if result.code != grpc.StatusCode.OK.value[0]:
            context.abort(_CODES[result.code], result.error)
        self.s.engine.backend.wake()
        # Whether the request id was seen before (the job is the one it made then): Job has no field for it.
        context.set_trailing_metadata(((KNOWN_METADATA, "true" if result.known else "false"),))
        return result.job

    def SubmitBatch(self, request: pb.SubmitBatchRequest, context: grpc.ServicerContext) -> pb.SubmitBatchReply:
        if len(request.requests) > MAX_BATCH:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          f"requests: at most {MAX_BATCH} per batch, got {len(request.requests)}")
        results = self._accept(list(request.requests), context)
        self.s.engine.backend.wake()
        return pb.SubmitBatchReply(results=results)

    def _record(self, job_id: str, context: grpc.ServicerContext) -> JobRecord:
        self.s.drain()
        rec = self.s.engine.jobs.get(job_id)
        if rec is None and job_id in self.s.intake:  # accepted, and every agent lost before the loop took it in
            # (concurrency review: NOT_FOUND "no job" for a job GetJob shows pending, which ran once hosts returned)
            context.abort(grpc.StatusCode.UNAVAILABLE, f"job_id: job {shown(job_id)} waits for hosts (every agent is "
                          "lost): it can be cancelled once one registers again; retry then")
        if rec is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"job_id: no job {shown(job_id)}")
        return rec  # type: ignore[return-value]

    def Cancel(self, request: pb.JobRef, context: grpc.ServicerContext) -> pb.Job:
        _job_id_given(request, context)
        if self.s.board.get(request.job_id) is None:  # (an unknown id waits for no turn of the loop)
            context.abort(grpc.StatusCode.NOT_FOUND, f"job_id: no job {shown(request.job_id)}")
        if not self.s.cancels_waiting.acquire(blocking=False):
            # (the budget is shared with RegisterAgent: 64 agents starting at once hold it with no cancel waiting)
            context.abort(grpc.StatusCode.UNAVAILABLE, f"{MAX_CANCELS_WAITING} cancels and registrations are waiting "
                          "for the engine's turn, the most this coordinator holds at once (the agents' heartbeats "
                          f"need the other threads): {BUSY}")
        try:
            with self.s.engine.lock:
                rec = self._record(request.job_id, context)
                store = self.s.store
                # A cancel is acknowledged like a submission: only once the state file has it. Answered OK while the
                # file could not be written (a full disk), it was undone by a restart and the job ran again
                # (exhaustion review). Refused first if the file is failing now (the changes it could not take are
                # tried once more), then checked after.
                if store is not None and not rec.state.finished and not self.s.save_unsaved():
                    context.abort(grpc.StatusCode.UNAVAILABLE, f"the coordinator cannot write its state file "
                                  f"{store.path}: nothing was cancelled (a restart would undo a cancel it cannot "
                                  "record); cancel again once it can")
                after = self.s.engine.cancel(request.job_id)  # (cancelled, or as it ended: done or failed)
                job = job_message(after)
                if store is not None and request.job_id in self.s.unsaved:
                    self.s.save_unsaved()
                if store is not None and request.job_id in self.s.unsaved:
                    context.abort(grpc.StatusCode.UNAVAILABLE, f"job {shown(request.job_id)} is {after.state.value}, "
                                  f"but the state file {store.path} cannot record it now: a coordinator restarted "
                                  "before it can would run the job again; it is written as soon as the file can be "
                                  "(cancel again to know)")
                return job
        finally:
            self.s.cancels_waiting.release()

    # The read-only calls read the job board and the backend, never waiting for the engine loop's turn
    # (coordinator.jobboard). A job accepted and not yet taken in by the loop is on the board already.

    def GetJob(self, request: pb.JobRef, context: grpc.ServicerContext) -> pb.Job:
        _job_id_given(request, context)
        row = self.s.board.get(request.job_id)
        if row is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"job_id: no job {shown(request.job_id)}")
        assert row is not None
        progress = self.s.backend.progress_seen(row.spec.id) if row.state is JobState.RUNNING else {}
        return job_message(row, _vt_now(row, progress))

    def ListJobs(self, request: pb.ListJobsRequest, context: grpc.ServicerContext) -> pb.ListJobsReply:
        if request.state and request.state not in {s.value for s in JobState}:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"state: unknown state {shown(request.state)}; known: "
                          f"{', '.join(s.value for s in JobState)}")
        if request.page_size < 0:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"page_size: must be >= 0, got {request.page_size}")
        try:
            start = _page_start(request.page_token)  # (int() of over 4,300 digits raises ValueError too)
            if start is None:
                raise ValueError("not a page token")
            rows, end, last, more = self.s.board.page(*start, request.page_size or None,
                                                      JobState(request.state) if request.state else None)
        except ValueError:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          f"page_token: {shown(request.page_token)} is not a page of this coordinator's job list "
                          "(from another coordinator, or from before a restart): list again from the first page")
        progress = self.s.backend.progress_seen() if any(r.state is JobState.RUNNING for r in rows) else {}
        jobs = [job_message(r, _vt_now(r, progress)) for r in rows]
        return pb.ListJobsReply(jobs=jobs, next_page_token=f"{end}:{last}" if more else "")

    def WatchEvents(self, request: pb.WatchEventsRequest, context: grpc.ServicerContext) -> Iterator[pb.JobEvent]:
        q = EventQueue(maxsize=WATCH_QUEUE)
        with self.s.watchers_lock:
            if len(self.s.watchers) >= MAX_WATCHERS:
                context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                              f"{MAX_WATCHERS} event streams are open, the most this coordinator serves at once; "
                              "close one (or poll ListJobs)")
            self.s.watchers.append(q)
        def wake() -> None:
            with contextlib.suppress(queue.Full):
                q.put_nowait(None)

        context.add_callback(wake)
        try:
            while context.is_active():
                if q.gap_at is not None and q.empty():
                    context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                                  f"this stream fell {WATCH_QUEUE} events behind: events from t={q.gap_at:.3f} s on "
                                  "were not sent; watch again, and list the jobs (ListJobs) for their states now")
                t = q.get()
                if t is None:
                    break
                yield pb.JobEvent(
                    time=t.time, job_id=t.job, from_state=t.src.value if t.src else "", to_state=t.dst.value,
                    hosts=list(t.hosts), cpu_share=t.cpu, reason=t.reason,
                )
        finally:
            with self.s.watchers_lock:
                self.s.watchers.remove(q)

    def ClusterStatus(self, request: pb.ClusterStatusRequest, context: grpc.ServicerContext) -> pb.ClusterStatusReply:
        engine, backend, board = self.s.engine, self.s.backend, self.s.board
        measured = backend.host_status()
        hosts = engine.hosts  # (a list the engine replaces, never changes: see Engine.add_hosts)
        counts, running = board.counts_and_running()  # (one look: the counts and the hosts' figures agree)
        used = hosts_used(running, hosts)
        # A repacking scheduled before the last job ended still comes, and has nothing to do: none is due when no
        # job is left to place (as the reply's counts say; live check, session 32).
        waiting = any(counts.get(s, 0) for s in (JobState.PENDING, JobState.RUNNING, JobState.PAUSED))
        reply = pb.ClusterStatusReply(policy=engine.policy.name, now=backend.now(),
                                      next_repacking=(engine.next_tick or 0.0) if waiting else 0.0)
        # As the policy sees them: to one that pauses or moves running jobs, a marked host where tasks of ours run is
        # shown as it is, not kept from new tasks (code review: status listed it)
        closed = engine.closed(running)
        for h in hosts:
            info = backend.host_info.get(h.name)
            until, why = closed.get(h.name, (0.0, ""))
            reply.hosts.append(
                pb.HostView(
                    name=h.name,
                    agent=backend.host_agent.get(h.name, ""),
                    # Fractions of this host's capacity, as cpu_measured and the exporter's ratios are
                    cpu_allocated=used[h.name][0],
                    memory_allocated=used[h.name][1],
                    cpu_measured=measured[h.name].cpu_measured if h.name in measured else 0.0,
                    cpu_cores=info.cpu_cores if info else 0.0,
                    memory_bytes=info.memory_bytes if info else 0,
                    closed_for=max(0.0, until - reply.now) if until else 0.0,
                    closed_reason=why,
                )
            )
        for state, count in counts.items():  # (accepted jobs not yet taken in by the loop included)
            reply.jobs_by_state[state.value] = count
        now = time.monotonic()
        for agent, lost in reversed(self.s.lost_agents()):  # the latest first
            reply.lost_agents.append(pb.LostAgentView(agent=agent, hosts=lost.hosts, reason=lost.reason,
                                                      seconds_ago=now - lost.lost_at, jobs_requeued=lost.requeued))
        since = self.s.all_silent_since  # (read once: the watch may end the hold meanwhile)
        if since is not None:  # (review s47: status said nothing of the hold, only the heartbeats' growing ages)
            reply.all_silent_for = now - since
            reply.all_silent_limit = ALL_SILENT_WINDOWS * self.s.heartbeat_misses * self.s.heartbeat_s
        yields = [r.cpu / r.spec.cpu_need for r in running]
        reply.min_yield = min(yields, default=0.0)
        reply.avg_yield = sum(yields) / len(yields) if yields else 0.0
        return reply

    def RegisterAgent(self, request: pb.RegisterAgentRequest, context: grpc.ServicerContext) -> pb.RegisterAgentReply:
        d = request.description
        why = check_agent(request)
        if why is None:
            # An address the coordinator could not call (multi-host review): taken, the agent's hosts were given
            # tasks that never started, and it was declared lost as heard one way only. Said in this log too (the
            # operator reads it), once a minute for an agent, which retries every heartbeat.
            why = certificate_refusal(request.address, context.auth_context()) or \
                unreachable_advertise(request.address, context.peer())
            if why is not None and self.s.refusal_due(d.agent_id):
                log.error("agent %s at %s refused: %s", shown(d.agent_id), shown(request.address), why)
        if why is not None:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, why)
        if d.agent_id not in self.s.backend.agents and (short := descriptors_short()) is not None:
            # Each agent holds two descriptors (its heartbeats' connection, the coordinator's to it): agents let in
            # up to the limit left none for the clients, whose every call then timed out as "took the connection but
            # never answered: is it a gRPC server?" (exhaustion review)
            log.error("agent %s refused: %s", d.agent_id, short)
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, f"this coordinator cannot take another agent: {short}")
        if d.wants_token:  # (else every task sent there would fail, UNAUTHENTICATED: the job lost)
            if not self.s.token:
                context.abort(grpc.StatusCode.FAILED_PRECONDITION, "description.wants_token: this agent's API wants "
                              "a bearer token and this coordinator has none (start it with the agent's --token-file)")
            # Without TLS the interceptor has checked it; under TLS the agents' calls need none, but this one's token
            # must be the coordinator's (code review: one with another token was taken, and every job sent failed).
            if not presented(context.invocation_metadata(), self.s.token):
                context.abort(grpc.StatusCode.UNAUTHENTICATED, "description.wants_token: this agent's API wants a "
                              "bearer token, and the one it sent is not this coordinator's (give it the coordinator's "
                              "--token-file)")
        # An agent declared lost as heard one way only, or found so and not lost yet (a registration anew would count
        # its calls afresh, its lease renewed: code review), is asked first. Its registration comes over its own link,
        # which says nothing of ours to it: taken, it was given tasks that could not start, and declared lost again,
        # over and over, for as long as the partition lasted.
        one_way = self.s.unreachable.get(d.agent_id) or self.s.one_way.get(d.agent_id)
        if one_way is not None and (
                unanswered := self._probe(request.address, d.agent_id, d.wants_token, context)) is not None:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"agent {shown(d.agent_id)} is heard one way only: "
                          f"{one_way}; it is taken again once the coordinator can reach it, and cannot yet: "
                          f"{unanswered}")
        checked = self.s.backend.agents.get(d.agent_id)
        holder = self.s.backend.answering_elsewhere(checked, request.address)
        if holder is not None:  # (outside the engine lock: a call to an agent)
            # Security review: a registration under a live agent's id took its place (its jobs then ran nowhere, while
            # its heartbeats kept it "alive"). An agent restarted elsewhere is let in: its predecessor answers no more.
            context.abort(grpc.StatusCode.ALREADY_EXISTS, f"description.agent_id: agent {shown(d.agent_id)} is "
                          f"registered at {holder}, which still answers as that agent: give this one another "
                          "--agent-id, or stop that one first")
        if not self.s.cancels_waiting.acquire(blocking=False):  # (the budget of MAX_REGISTRATIONS_WAITING)
            context.abort(grpc.StatusCode.UNAVAILABLE, f"{MAX_REGISTRATIONS_WAITING} registrations and cancels are "
                          "waiting for the engine's turn, the most this coordinator holds at once (the agents' "
                          f"heartbeats need the other threads): {BUSY}")
        try:
            return self._register(request, context, checked)
        finally:
            self.s.cancels_waiting.release()

    def _register(self, request: pb.RegisterAgentRequest, context: grpc.ServicerContext,
                  checked: AgentHandle | None) -> pb.RegisterAgentReply:
        """RegisterAgent's part under the engine's lock, once the agent may wait for it."""
        d = request.description
        with self.s.engine.lock:
            if self.s.backend.agents.get(d.agent_id) is not checked:  # (code review: the check could be overtaken)
                context.abort(grpc.StatusCode.UNAVAILABLE, f"description.agent_id: agent {shown(d.agent_id)} "
                              "registered meanwhile from another call; retry")
            taken = {n: a for n, a in self.s.backend.host_agent.items() if a != d.agent_id}
            clash = [h.name for h in d.hosts if h.name in taken]
            if clash:
                context.abort(grpc.StatusCode.ALREADY_EXISTS, f"description.hosts: host {shown(clash[0])} is already "
                              f"emulated by agent {shown(taken[clash[0]])}")
            before = {n: self.s.backend.host_info[n] for n in self.s.backend.host_agent
                      if self.s.backend.host_agent[n] == d.agent_id and n in self.s.backend.host_info}
            # Stamped before its new handle goes in (and again below): the watch reads a handle, then its stamp, so a
            # new handle is never judged by the old stamp (review: it was, between add_agent and the beat below)
            self.s.beat(d.agent_id)
            try:
                hosts = self.s.backend.add_agent(request.address, d)
            except BackendError as exc:
                context.abort(grpc.StatusCode.UNAVAILABLE, str(exc))
            # An agent that comes back (a restart under its id) may have other hosts: one it no longer has is lost
            # (its jobs requeued: placing on it fails), and one whose capacity changed is lost and added anew (its
            # jobs requeued: they may no longer fit, and the engine checks every plan against capacities).
            now = {h.name: (h.cpu_cores, h.memory_bytes) for h in d.hosts}
            changed = [n for n, info in before.items() if now.get(n) != (info.cpu_cores, info.memory_bytes)]
            if changed:
                what = _host_changes(before, now, changed)
                jobs = self.s.engine.lose_hosts(changed, f"agent {d.agent_id} came back with {what}", judge=False)
                log.warning("agent %s re-registered with %s: %d job%s requeued", d.agent_id, what, len(jobs),
                            "" if len(jobs) == 1 else "s")
            self.s.engine.add_hosts(hosts)
            if changed:  # (a resized host may hold less: judged once it is back, not in between)
                self.s.engine.judge_pending()
            self.s.beat(d.agent_id)
            self.s.registered.add(d.agent_id)
            self.s.lost.pop(d.agent_id, None)
            self.s.unreachable.pop(d.agent_id, None)
            self.s.one_way.pop(d.agent_id, None)  # (it answered the probe: a new handle, its calls counted afresh)
            if self.s.store is not None:
                self.s.store.put_agent(d.agent_id, request.address, d.SerializeToString())
                if self.s.backend.reference is not None:
                    self.s.store.keep_reference(self.s.backend.reference.SerializeToString())
            lease_s = self.s.grant(d.agent_id)
        self.s.metrics.agent_registrations.inc()
        log.info("agent %s at %s registered %d host%s", d.agent_id, request.address, len(hosts),
                 "" if len(hosts) == 1 else "s")
        return pb.RegisterAgentReply(hosts=[h.name for h in hosts], heartbeat_interval_s=self.s.heartbeat_s,
                                     lease_s=lease_s)

    def _probe(self, address: str, agent_id: str, wants_token: bool, context: grpc.ServicerContext) -> str | None:
        """:meth:`LiveBackend.probe` within the caller's deadline (less a margin for the reply): the registrar's is
        min(5, max(0.5, interval)) s, under the probe's own 1 s at short intervals, and an agent whose address
        swallowed the probe got DEADLINE_EXCEEDED, never the refusal's reason. At most :data:`MAX_PROBES` at once:
        each holds an API thread, which heartbeats and clients share (a rack cut one way, its agents registering
        every interval, would take them all)."""
        if not self.s.probes.acquire(blocking=False):
            context.abort(grpc.StatusCode.UNAVAILABLE, f"agent {shown(agent_id)} is heard one way only, and the "
                          "coordinator is asking other such agents whether it can reach them now; retry")
        try:
            left = context.time_remaining()
            timeout = math.inf if left is None else max(0.05, left - PROBE_REPLY_MARGIN_S)  # (the probe's own, at most)
            return self.s.backend.probe(address, agent_id, wants_token, timeout)
        finally:
            self.s.probes.release()

    def Heartbeat(self, request: pb.HeartbeatRequest, context: grpc.ServicerContext) -> pb.HeartbeatReply:
        if not request.agent_id:  # (API review: it answered known = false)
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "agent_id: required")
        # Under the membership lock, which a loss holds as it removes the agent: a heartbeat received as its agent
        # was declared lost wrote back its stamp, its `beating` entry and its lease (in the store too) after the
        # loss had removed them, and told the gone agent it was known, which re-registered one interval late
        # (concurrency review). One being cut off is told it is not known: it registers again at once.
        with self.s.membership:
            handle = self.s.backend.agents.get(request.agent_id)
            if handle is None or handle.lost:
                return pb.HeartbeatReply(known=False)
            unreachable = self.s.heard_one_way(request.agent_id, handle.address)
            if unreachable is not None:
                # Not a sign of this agent's life the coordinator can use, but one that its network brings heartbeats:
                # not every agent is silent (review h213: one heard one way only beside a dead one held both 60 s).
                handle.received = self.s.heard_at = time.monotonic()
                return pb.HeartbeatReply(known=True, lease_s=UNRENEWED_LEASE_S, unreachable=unreachable)
            self.s.beat(request.agent_id)
            self.s.beating.add(request.agent_id)
            handle.heard = True  # a restored agent that heartbeats is the one at its stored address
            return pb.HeartbeatReply(known=True, lease_s=self.s.grant(request.agent_id))


def _decoded(kind, data: bytes, store: Store | None):  # type: ignore[no-untyped-def]
    """A message the store kept (an agent's description, the reference host); a damaged one is refused in one
    line naming the state file (StoreError), not a protobuf DecodeError traceback."""
    try:
        return kind.FromString(data)
    except DecodeError:
        where = store.path if store is not None else "?"
        raise StoreError(f"--state {where}: not a usable vcemu state file: a damaged {kind.__name__} row") from None


def wait_registered(server: CoordinatorServer, agent_ids: Collection[str], timeout_s: float, *,
                    hosts: int | None = None, failed: Callable[[], str | None] | None = None) -> str | None:
    """Wait until every agent of ``agent_ids`` has registered with ``server``'s process, and, given ``hosts``, until
    that many of their hosts are in its cluster: not merely until enough hosts are known, which a restart on
    ``--state`` satisfies at once with the agents restored from the store (an earlier run's, at addresses where
    nothing may listen any more). None once they have; else why not: ``failed()``'s answer (an agent process
    exited, say), asked at each look, or what is missing at the deadline. ``vcemu up``, local and ``--ray``."""
    deadline = time.monotonic() + timeout_s
    while True:
        missing = sorted(set(agent_ids) - server.registered)
        if not missing:
            if hosts is None:
                return None
            ours = {h for h, a in server.backend.host_agent.items() if a in agent_ids}
            if len({h.name for h in server.engine.hosts} & ours) >= hosts:
                return None
        why = failed() if failed is not None else None
        if why is not None:
            return why
        if time.monotonic() > deadline:
            if missing:
                shown = ", ".join(missing[:5]) + (", ..." if len(missing) > 5 else "")
                return f"{len(missing)} of {len(agent_ids)} agents ({shown}) did not register within {timeout_s:.0f} s"
            return f"not all {hosts} hosts registered within {timeout_s:.0f} s"
        time.sleep(0.1)


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
        state: str | None = None,
        heartbeat_s: float = 2.0,
        heartbeat_misses: int = 3,
        token: str | None = None,
        tls: TlsFiles | None = None,
        rpc_timeout: float = 5.0,
        stop_tasks_on_exit: bool = True,
        reference: agent_pb2.HostInfo | None = None,
        keep_history: bool = True,
        turn_budget_s: float | None = TURN_BUDGET_S,
        max_queued: int = MAX_QUEUED,
    ) -> None:
        """``reference``: the host a job's needs are fractions of (``vcemu coordinator --reference-host``), set
        before any agent can register. Without it, agents started by hand make the first host to register the
        reference, so with unequal hosts a need of 1 is another amount of CPU from one run to the next. A state file
        whose jobs were made with another reference is refused (ValueError): their needs would change meaning.
        ``turn_budget_s``: the wall time a turn of the engine loop spends at most on the stimuli due (None: no bound,
        for a replay or the demo, whose live run is compared with its simulation: a stimulus left to the next turn
        waits 3 times the budget, compression times that in model time; code review).
        ``max_queued``: the most jobs not finished it holds (:data:`MAX_QUEUED`; 0: no bound)."""
        if not heartbeat_s > 0 or heartbeat_misses < 1:
            raise ValueError(f"heartbeat: interval must be > 0 and misses >= 1, got {heartbeat_s}, {heartbeat_misses}")
        # Both ports, before the store is opened, and without gRPC's own error line: one line naming the flag.
        refusal = ports_refusal(bind, port, metrics_port)
        if refusal is not None:
            raise OSError(refusal)
        self.heartbeat_s, self.heartbeat_misses = heartbeat_s, heartbeat_misses
        self.turn_budget_s = turn_budget_s
        self.max_queued = max_queued
        #: The lease granted to agents (:meth:`node_agent.agent.AgentCore.renew_lease`): an agent that has heard
        #: nothing from this coordinator for ``lease_s`` seconds freezes its tasks. An agent is declared lost
        #: ``heartbeat_misses x heartbeat_s`` seconds after its last sign of life as this side received it, and the
        #: agent counts its lease from a moment that cannot follow that receipt: the sending of its Heartbeat or
        #: RegisterAgent, whose reply says it was received, or, for a Status poll, the making of its previous
        #: reply, which the poll's ``lease_since`` says was received. So the lease ends at least
        #: :func:`fence_slack` before the agent can be declared lost: time for its monitor (every 0.1 s) to freeze
        #: the tasks. None (0) when that leaves less than one heartbeat interval (one miss, or a very short
        #: interval): the lease would run out between two heartbeats.
        self.lease_s = lease_for(heartbeat_s, heartbeat_misses)
        if self.lease_s == 0:
            log.warning("a heartbeat of %g s, lost after %d, leaves no room for a lease: an agent cut off from the "
                        "coordinator will not freeze its tasks before its jobs are restarted elsewhere",
                        heartbeat_s, heartbeat_misses)
        self.stop_tasks_on_exit = stop_tasks_on_exit
        self.token = token  # (an agent whose API wants a token must show this one: RegisterAgent)
        self.store = Store(state, exclusive=True) if state else None  # one coordinator per state file
        try:  # a failure from here on (a port taken, a bad store) lets go of the state file at once
            loaded = self.store.load(transitions=keep_history) if self.store is not None else None
            self.backend = LiveBackend(compression=compression, poll_interval=poll_interval,
                                       epoch=loaded.epoch if loaded else None, rpc_timeout=rpc_timeout,
                                       channel_factory=tls.client_channel if tls else None, lease_s=self.lease_s,
                                       token=token, clock=loaded.clock if loaded else 0.0)
            self.engine = Engine(policy, self.backend, keep_history=keep_history)
            #: the jobs as the read-only calls and the metrics show them, without the engine's lock
            self.board = JobBoard.of(self.engine)
            self.metrics = CoordinatorMetrics(self.engine, policy.name,
                                              lambda: self.backend.host_status(answering=True),
                                              self.agent_health, board=self.board)
            self.backend.unfence_listeners.append(lambda _task: self.metrics.tasks_unfenced.inc())
            self.ids = itertools.count(1)
            self.requests: dict[str, str] = {}
            self.heartbeats: dict[str, float] = {}
            #: Taken by whatever writes a stamp in ``heartbeats`` while it may be shifted (:meth:`beat`,
            #: :meth:`_note_running`, which never lowers one; a heartbeat may lower a restored agent's grace).
            self.heartbeats_lock = threading.Lock()
            #: Held by a Heartbeat from its look-up of the agent to its lease, and by a loss as it removes the agent's
            #: bookkeeping (:meth:`lose_agent`, once its handle is cut off): a heartbeat comes wholly before a loss or
            #: sees it. Taken under the engine lock, never the other way round; ``heartbeats_lock`` is taken under it,
            #: and never the backend's lock (held across whole polls).
            self.membership = threading.Lock()
            #: When the process was last noted running (:meth:`_note_running`).
            self._ran_at = time.monotonic()
            #: The lease the store says each agent was last granted (:meth:`grant`).
            self.granted: dict[str, float] = {}
            #: agents that send heartbeats (a registrar): their silence is heard by the gRPC threads, whatever
            #: the engine loop is doing. Agents registered by hand are judged by the loop's Status polls only.
            self.beating: set[str] = set()
            #: agents that registered with this coordinator process (not merely restored from the store): what
            #: ``vcemu up`` waits for before it says its cluster is up.
            self.registered: set[str] = set()
            #: agents declared lost and not registered since (the latest :data:`LOST_KEPT`, the latest last), so
            #: that ``vcemu_agent_up`` stays 0 for them (an alert on it can fire) until they return, and ``status``
            #: names them.
            self.lost: dict[str, LostAgent] = {}
            #: agents heard one way only (:meth:`heard_one_way`): why, said once; their heartbeats count for nothing.
            self.one_way: dict[str, str] = {}
            #: when each agent's registration was last refused in the log for an address it cannot be called at
            #: (:meth:`refusal_due`; the latest :data:`LOST_KEPT`)
            self.refused_said: dict[str, float] = {}
            #: agents declared lost as heard one way only, and why, until they register again: the coordinator asks
            #: them to Describe themselves first (:meth:`Service.RegisterAgent`).
            self.unreachable: dict[str, str] = {}
            self.probes = threading.BoundedSemaphore(MAX_PROBES)
            self.none_answer = False  # (:meth:`heard_one_way`: said once, until an agent answers again)
            #: since when every agent has been silent (:meth:`_check_agents`), or None
            self.all_silent_since: float | None = None
            #: when an agent's heartbeat (one heard one way only's too) or registration was last received (the stamps
            #: alone are moved by a stall), and the latest such time or answered poll when every agent was found silent
            self.heard_at = self.heard_before_hold = -math.inf
            self.watchers: list[EventQueue] = []
            self.cancels_waiting = threading.BoundedSemaphore(MAX_CANCELS_WAITING)
            self.watchers_lock = threading.Lock()  # the count against MAX_WATCHERS and the list change together
            # Accepted (and, with a store, committed) jobs not yet handed to the engine: Submit never waits
            # for the engine loop, which may be busy deciding; the loop drains this before every step.
            self.intake_lock = threading.Lock()
            self.intake: dict[str, JobRecord] = {}
            #: Transitions the store could not take yet, per job (:meth:`_persist`), and whether writing fails now.
            self.unsaved: dict[str, list[Transition]] = {}
            self.unsaved_failing = False
            self.unsaved_retry_at = -math.inf
            self.closing = False  # (the store is being closed: nothing is written to it any more)
            if reference is not None:  # before the stored agents are added: the first of them is no reference
                self._set_reference(reference, loaded.reference if loaded is not None else None)
            #: What a restart took back from the state file, in one line for the operator (``vcemu coordinator``
            #: and ``up`` print it; it was logged at INFO only, so a restart said nothing of it), or None.
            self.restored_note: str | None = None
            if loaded is not None:
                self._restore(loaded)
            if self.store is not None:
                self.engine.listeners.append(self._persist)
                self.backend.journal = self.store.put_tasks
                self.backend.journal_batch = self.store.transaction
                self.backend.clock_journal = self.store.put_clock
            self.engine.listeners.append(self._broadcast)
            self._stop = threading.Event()
            #: How many exceptions the engine loop survived (logged, and the loop went on, as a service must), and the
            #: last few as text (a long-running coordinator must not keep every one and its frames). A run that
            #: measures (``vcemu replay``) cannot go on after one: an arrival it failed on left no job behind.
            self.loop_error_count = 0
            self.loop_errors: deque[str] = deque(maxlen=LOOP_ERRORS_KEPT)
            #: The state file's error the engine loop last said with its trace, and when (:meth:`_run`).
            self._turn_store_error: tuple[str, float] | None = None
            # (without TLS the agents' calls want the token too: a rogue agent registered without it and was given a
            # job, API review)
            interceptors = [TokenInterceptor(token, agents=tls is None)] if token else []
            self.grpc = grpc.server(
                futures.ThreadPoolExecutor(max_workers=API_THREADS),
                interceptors=interceptors,
                # gRPC sets SO_REUSEPORT by default: a second coordinator on a port in use would then listen too,
                # and the kernel would split clients between the two
                options=[("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                         ("grpc.max_send_message_length", MAX_REPLY_BYTES), ("grpc.so_reuseport", 0),
                         # A client's connection left half-open by the network (nothing acknowledged, nothing closed)
                         # is closed once a ping goes unanswered, its calls cancelled: a watcher's stream held its API
                         # thread and one of the MAX_WATCHERS slots for good (gray-failure review). Pinged however
                         # long its streams send nothing (else gRPC stops after 2 pings without data).
                         ("grpc.keepalive_time_ms", int(KEEPALIVE_S * 1000)),
                         ("grpc.keepalive_timeout_ms", int(KEEPALIVE_TIMEOUT_S * 1000)),
                         ("grpc.http2.ping_timeout_ms", int(KEEPALIVE_TIMEOUT_S * 1000)),
                         ("grpc.http2.max_pings_without_data", 0)],
            )
            pb_grpc.add_CoordinatorServicer_to_server(CoordinatorServicer(self), self.grpc)
            self.health = health.HealthServicer()
            health_pb2_grpc.add_HealthServicer_to_server(self.health, self.grpc)
            try:
                if tls is not None:
                    self.port = self.grpc.add_secure_port(listen_address(bind, port), tls.server_credentials())
                else:
                    self.port = self.grpc.add_insecure_port(listen_address(bind, port))
            except RuntimeError:  # grpc's "Failed to bind to address ..."
                self.port = 0
            if self.port == 0:
                raise OSError(cannot_bind(bind, port))
            self.address = listen_address(bind, self.port)
            if not token and tls is None and not is_loopback(bind):
                # (security review: it started without a word, and the Kubernetes base runs so)
                log.warning("listening on %s with neither --token-file nor TLS: anything that reaches this port can "
                            "submit and cancel jobs and register agents, which this coordinator then dials and "
                            "gives jobs (--token-file, or mutual TLS: --tls-cert/--tls-key/--tls-ca)", bind)
            if token and tls is None and not is_loopback(bind):
                # (the token guards this API, the agents' calls and the agents' own API: but in clear text)
                log.warning("--token-file guards this coordinator and its agents' APIs, but without TLS the token "
                            "travels in clear text: anything that sees the network between them can read it and "
                            "use it (mutual TLS: vcemu coordinator and vcemu agent --tls-cert/--tls-key/--tls-ca)")
            try:
                self.metrics_port = None if metrics_port is None else \
                    serve_metrics(bind, lambda host: self.metrics.serve(metrics_port, host))
            except OSError as exc:
                self.grpc.stop(0)
                why = exc.strerror or exc
                raise OSError(f"--metrics-port: cannot listen on {listen_address(bind, metrics_port)}: {why}") from None
            self._loop = threading.Thread(target=self._run, name="engine-loop", daemon=True)
            self._watch = threading.Thread(target=self._watch_agents, name="agent-watch", daemon=True)
            self._ticker = threading.Thread(target=self._tick, name="stall-ticker", daemon=True)
        except BaseException:
            if self.store is not None:
                self.store.close()
            raise

    # ---- durability ---------------------------------------------------------------------------------

    def transaction(self) -> contextlib.AbstractContextManager[None]:
        return self.store.transaction() if self.store is not None else contextlib.nullcontext()

    def lookup(self, job_id: str) -> JobRecord | None:
        return self.engine.jobs.get(job_id) or self.intake.get(job_id)

    def accept(self, requests: list[pb.SubmitRequest]) -> list[pb.SubmitResult]:
        """Validate and accept submissions, in order; each gets its job or its refusal. With a store, every
        accepted job (its row, first transition and request id) is committed, in one transaction for the
        lot, before this returns: the reply never acknowledges a job a crash could lose. A request id seen
        before returns the job it made (idempotent submit), also within one batch."""
        results: list[pb.SubmitResult] = []
        accepted: dict[str, JobRecord] = {}  # handed to the intake only once the commit succeeded
        requests_seen: dict[str, str] = {}
        with self.intake_lock:
            mark = next(self.ids)  # (the next id, put back: a batch the state file refused takes none, no gaps)
            self.ids = itertools.count(mark)
            try:
                self._accept_into(requests, results, accepted, requests_seen)
            except BaseException:
                self.ids = itertools.count(mark)
                raise
            self.intake.update(accepted)
            self.requests.update(requests_seen)
            self.board.put_all(accepted.values())  # readers see it now, before the loop takes it in
        return results

    def _accept_into(self, requests: list[pb.SubmitRequest], results: list[pb.SubmitResult],
                     accepted: dict[str, JobRecord], requests_seen: dict[str, str]) -> None:
        ok = grpc.StatusCode.OK.value[0]
        engine = self.engine
        with self.transaction():
            hosts = tuple(engine.hosts)
            refuse = getattr(engine.policy, "refuse", None)
            # (under the intake lock, which every acceptance holds: no two can both take the last room)
            room = self.max_queued - self.board.unfinished() if self.max_queued > 0 else math.inf
            for request in requests:
                spec_in = request.spec
                why = check_spec(spec_in, request.request_id)
                if why is not None:
                    results.append(_refusal(grpc.StatusCode.INVALID_ARGUMENT, f"invalid job: {why}"))
                    continue
                earlier = request.request_id and (requests_seen.get(request.request_id)
                                                  or self.requests.get(request.request_id))
                if earlier:
                    rec = accepted.get(earlier) or self.lookup(earlier)
                    assert rec is not None, f"request id {request.request_id!r} names no job"
                    if differs := _spec_differences(rec.spec, spec_in):
                        # (a retry sends the same spec; another spec under a used id is another job, which a sweep
                        # reusing ids took silently for the first: API review, as idempotency keys are checked)
                        results.append(_refusal(grpc.StatusCode.ALREADY_EXISTS, (
                            f"request_id: {shown(request.request_id)} already made {rec.spec.id} from another spec "
                            f"({differs}): give another request id, or the same spec to get that job")))
                        continue
                    results.append(pb.SubmitResult(job=job_message(rec), code=ok, known=True))
                    continue
                if not hosts:
                    results.append(_refusal(grpc.StatusCode.UNAVAILABLE,
                                            "no hosts registered yet: start agents first"))
                    continue
                spec = JobSpec(
                    id="",  # given once the job is accepted: a refused one takes no id (no gaps in the ids)
                    submit_time=engine.backend.now(),
                    tasks=spec_in.tasks,
                    cpu_need=spec_in.cpu_need,
                    mem=spec_in.memory,
                    work=spec_in.work_seconds,
                    workload=spec_in.workload or "dgemm",
                    name=spec_in.name,
                )
                try:
                    spec.validate(hosts)
                    why_not = refuse(spec, hosts) if refuse is not None else None
                    if why_not is not None:
                        raise InvalidJob(*why_not)
                except InvalidJob as exc:
                    results.append(_refusal(grpc.StatusCode.INVALID_ARGUMENT, f"invalid job: {exc}"))
                    continue
                except ArithmeticError as exc:  # a check's arithmetic on extreme numbers: this request alone fails
                    log.exception("the checks of a submitted job failed")
                    why = f"its numbers cannot be checked ({type(exc).__name__}: {exc})"
                    results.append(_refusal(grpc.StatusCode.INVALID_ARGUMENT, f"invalid job: {why}"))
                    continue
                if room <= 0:  # (after the checks: a job that would be refused anyway is told why)
                    results.append(_refusal(grpc.StatusCode.RESOURCE_EXHAUSTED, (
                        f"the coordinator holds {self.max_queued:,} jobs not finished, the most it takes "
                        "(--max-queued): submit again once some have finished")))
                    continue
                room -= 1
                spec = dataclasses.replace(spec, id=f"job-{next(self.ids):05d}")
                rec = JobRecord(spec)
                if self.store is not None:  # the job's row and its first transition
                    self.store.put_job(spec, JobState.PENDING, (), 0.0, 0.0, 0, None, None, "")
                    self.store.add_transition(Transition(spec.submit_time, spec.id, None, JobState.PENDING,
                                                         reason="submitted"))
                    if request.request_id:
                        self.store.set_request(spec.id, request.request_id)
                accepted[spec.id] = rec
                if request.request_id:
                    requests_seen[request.request_id] = spec.id
                results.append(pb.SubmitResult(job=job_message(rec), code=ok, known=False))

    def drain(self) -> None:
        """Hand accepted jobs to the engine, in submission order. A job the cluster can no longer hold
        (its hosts were lost meanwhile, or changed) fails with the reason, and stays on record; while no host is
        left at all, every job waits in the intake."""
        with self.intake_lock:
            batch = list(self.intake.values())
        if not batch:
            return
        with self.engine.lock:
            if not self.engine.hosts:
                # Every agent lost: nothing can judge the jobs, which wait here (shown pending, as a restored job
                # waits) and are taken in once hosts register. Judged against no host, a job accepted just before
                # its agent was declared lost failed as "more than any host has (0.0)" (live check).
                return
            for rec in batch:
                if rec.spec.id in self.engine.jobs:
                    continue
                try:
                    self.engine.arrive(rec.spec)
                except InvalidJob as exc:
                    rec.state, rec.message, rec.end = JobState.FAILED, f"invalid job: {exc}", self.backend.now()
                    # Its end is a transition like any other: in the history, the store and the event stream.
                    failed = Transition(rec.end, rec.spec.id, JobState.PENDING, JobState.FAILED, (), 0.0, rec.message)
                    self.engine.restore([rec], [failed])
                    if self.store is not None:  # (kept and written later if the file cannot take it now)
                        self._persist(failed)
                    self._broadcast(failed)
        with self.intake_lock:
            for rec in batch:
                self.intake.pop(rec.spec.id, None)

    def _persist(self, t: Transition) -> None:
        """Engine listener: the job's row and the transition, committed (with the caller's transaction).
        A job's first transition was written when it was accepted.

        Never raises. A write that fails (a full disk, a file made read-only) keeps the transition, with every
        other one not yet written, in :attr:`unsaved`; the engine loop tries again once a second
        (:data:`UNSAVED_RETRY_S`, :meth:`save_unsaved`), and so does the next transition once writing works.
        Raised into the engine, the failure cut short the handling of the reports it was recording: of four jobs
        that ended together, the three after the first were never marked done (their tasks were already
        forgotten), and stayed running for good (fault-injection review)."""
        assert self.store is not None
        if t.src is None:
            return
        self.unsaved.setdefault(t.job, []).append(t)
        if not self.unsaved_failing:  # (while it fails, the loop tries again, once a second: not every change)
            self.save_unsaved()

    def save_unsaved(self) -> bool:
        """(Under the engine's lock.) Write the jobs' rows and transitions :meth:`_persist` could not, one job per
        transaction; True once none is left. A value SQLite refuses for the one job (a constraint, a type) is
        logged, and that job's change dropped, so that it cannot hold every other job's back for good. Any other
        error is the file's or the machine's (a full disk, a read-only or damaged file, no memory): every change is
        kept, to be tried again, logged once when that starts and once when it ends."""
        if not self.unsaved or self.store is None or self.closing:
            return True
        saved = 0
        for job in list(self.unsaved):
            rec = self.engine.jobs[job]
            try:
                with self.store.transaction():
                    self.store.put_job(rec.spec, rec.state, rec.hosts, rec.cpu, rec.vt, rec.attempts,
                                       rec.first_start, rec.end, rec.message)
                    for t in self.unsaved[job]:
                        self.store.add_transition(t)
            except (sqlite3.IntegrityError, sqlite3.DataError, sqlite3.InterfaceError, TypeError, ValueError):
                log.exception("the change of job %s cannot be recorded in the state file; dropped", job)
            except Exception as exc:  # the file's (full, read-only, damaged) or the machine's: kept for later
                if not self.unsaved_failing:
                    self.unsaved_failing = True
                    log.error("the state file cannot be written (%s: %s): job changes are kept in memory and "
                              "written as soon as it can be; a coordinator stopped before then loses them, and runs "
                              "those jobs again after a restart", type(exc).__name__, exc)
                self.unsaved_retry_at = time.monotonic() + UNSAVED_RETRY_S
                return False
            del self.unsaved[job]
            saved += 1
        if self.unsaved_failing:
            self.unsaved_failing = False
            log.warning("the state file is written again: %d jobs' changes saved", saved)
        return True

    def _set_reference(self, reference: agent_pb2.HostInfo, kept: bytes | None) -> None:
        """Take ``reference`` as the reference host (see :meth:`__init__`), unless the state file has one (``kept``)
        of another size: refused then, as its jobs' needs are fractions of that one."""
        stored = _decoded(agent_pb2.HostInfo, kept, self.store) if kept is not None else None
        if stored is not None and (stored.cpu_cores, stored.memory_bytes) != (reference.cpu_cores,
                                                                               reference.memory_bytes):
            raise ValueError(
                f"reference host: the state file's jobs have needs in units of a host of {stored.cpu_cores:g} cores "
                f"and {stored.memory_bytes} bytes of memory, not {reference.cpu_cores:g} cores and "
                f"{reference.memory_bytes} bytes; give that host, or no reference host")
        self.backend.restore_reference(reference)

    def _restore(self, loaded) -> None:  # type: ignore[no-untyped-def]
        """Reload jobs, agents and tasks from the store (a restart after a crash, or a clean stop)."""
        # Restored agents get time to heartbeat again: two intervals, and in any case until the lease an earlier
        # coordinator of this state last granted each (the store records it before granting it) has run out and
        # its slack passed, counted from now, which follows the agent's last renewal. A silent agent may hold such
        # a lease (an earlier run's heartbeat may have been longer), and must have frozen its tasks before they are
        # started elsewhere.
        now = time.monotonic()
        lost_after, slack = self.heartbeat_misses * self.heartbeat_s, fence_slack(self.heartbeat_s)
        if loaded.reference is not None:
            self.backend.restore_reference(_decoded(agent_pb2.HostInfo, loaded.reference, self.store))
        # A state file of a vcemu before 2026-11-23 records no reference host: its jobs' needs were fractions of the
        # first host that registered in its run, and the first host of the agents table (what add_agent takes below)
        # is another one when that agent registered again later (INSERT OR REPLACE moves its row to the end), or
        # `up` takes the largest: the restored jobs' needs then meant other amounts of CPU, silently (upgrade review).
        guessed = loaded.reference is None and self.backend.reference is None and bool(loaded.jobs)
        for agent_id, address, desc in loaded.agents:
            try:
                # Not heard from yet: it may be gone for good (a restarted ``vcemu up``'s agents were its own),
                # and no task is started on it until it answers (a poll) or registers anew.
                hosts = self.backend.add_agent(address, _decoded(agent_pb2.DescribeReply, desc, self.store),
                                               restored=True)
            except BackendError as exc:
                log.warning("agent %s from the store: %s", agent_id, exc)
                continue
            self.engine.add_hosts(hosts)
            held = self.granted[agent_id] = loaded.leases.get(agent_id, 0.0)
            self.heartbeats[agent_id] = now + max(2 * self.heartbeat_s, held + slack - lost_after)
        records, top = [], 0
        for j in loaded.jobs:
            rec = JobRecord(j.spec, j.state, j.hosts, j.cpu, j.vt, j.attempts, j.first_start, j.end, j.message)
            restarts, tasks = loaded.tasks.get(j.spec.id, (-1, []))
            placed = j.state in (JobState.RUNNING, JobState.PAUSED)
            # A host no restored agent has: its agent was lost and removed from the store, while this job's
            # requeue was not recorded (a store write that failed during the loss). Nothing could ever report
            # the job, and a policy would meet a host it does not know: it starts over, as lose_hosts would.
            orphaned = placed and any(h not in self.backend.host_agent for h in (*j.hosts, *(t.host for t in tasks)))
            if placed and tasks and not orphaned:
                self.backend.adopt(j.spec, restarts, tasks, j.cpu, j.state)
            else:
                self.backend.reserve_restarts(j.spec.id, restarts)  # its leftover tasks are stopped by polling
                if placed:  # placed, but no task record (or on a host that is gone): start over
                    if tasks:  # from the progress its tasks were journalled with
                        rec.vt = max(rec.vt, min(t.progress for t in tasks) * j.spec.work)
                    rec.state, rec.hosts, rec.cpu = JobState.PENDING, (), 0.0
            if j.request_id:
                self.requests[j.request_id] = j.spec.id
            with contextlib.suppress(ValueError, IndexError):
                top = max(top, int(j.spec.id.rsplit("-", 1)[1]))
            records.append(rec)
        self.engine.restore(records, loaded.transitions)
        self.ids = itertools.count(top + 1)
        unfinished = sum(1 for r in records if not r.state.finished)
        where = self.store.path if self.store else "the state file"

        def many(n: int, what: str) -> str:
            return f"{n:,} {what}{'' if n == 1 else 's'}"

        # (printed by vcemu up and coordinator; it was logged at INFO too, so their terminals showed it twice, and a
        # new file read "restored 0 jobs (0 unfinished) and 0 agents"; operator review)
        self.restored_note = (f"restored {many(len(records), 'job')} ({unfinished:,} unfinished) and "
                              f"{many(len(loaded.agents), 'agent')} from {where}" if records or loaded.agents
                              else f"{where} holds no job or agent yet: this run is recorded there")
        if (records or loaded.agents) and self.backend.clock_behind:  # (the backend logged it; the restart line too)
            self.restored_note += (f"; its clock carries on at t={self.backend.now():.1f} s, where it was left: "
                                   f"this machine's wall clock is {self.backend.clock_behind:.1f} s behind the "
                                   "earlier run's")
        if guessed and (ref := self.backend.reference) is not None:
            self.restored_note += (
                f"; it records no reference host (an older vcemu wrote it), so its jobs' needs are taken as fractions "
                f"of {ref.name} ({ref.cpu_cores:g} cores, {ref.memory_bytes >> 20} MiB), the first host of the agents "
                "it lists: if the first host to register in that run was another, stop and start again with "
                "--reference-host CORES,SIZE of that host")
        log.debug("%s", self.restored_note)

    # ---- agent health -------------------------------------------------------------------------------

    def _watch_agents(self) -> None:
        """Declare an agent lost after ``heartbeat_misses`` silent intervals: its hosts leave the cluster
        and its jobs go back to pending with their progress (restart from the last checkpoint). An
        answered Status poll counts as a sign of life too (an agent registered by hand, without a
        registrar, is alive as long as it answers). Such an agent is declared lost only when the engine
        loop's last poll of it went unanswered as well: if the loop itself was held up (a long decision),
        the coordinator was not listening, and the silence says nothing about the agent. Nor when this whole
        process did not run (:meth:`_note_running`)."""
        while not self._stop.wait(self.heartbeat_s / 4):
            self._check_agents()

    def _tick(self) -> None:
        """The stall ticker: a thread that only notes, every :data:`STALL_TICK_S`, that the process runs
        (:meth:`_note_running`). It waits for no lock but the stamps', so a gap in its notes is the process not
        running, not a thread waiting for the engine (a long decision) or an agent call."""
        while not self._stop.wait(STALL_TICK_S):
            self._note_running()

    def beat(self, agent_id: str) -> None:
        """A sign of life from the agent, received now (a heartbeat or a registration)."""
        with self.heartbeats_lock:
            self.heartbeats[agent_id] = self.heard_at = time.monotonic()

    def refusal_due(self, agent_id: str) -> bool:
        """Whether a refusal of ``agent_id``'s address is to be said in the log now: once a minute for an agent
        (:data:`REFUSAL_SAY_S`), for at most :data:`LOST_KEPT` agents remembered (ids are the caller's to choose)."""
        with self.membership:  # (registrations come on several API threads)
            now = time.monotonic()
            if now - self.refused_said.get(agent_id, -math.inf) < REFUSAL_SAY_S:
                return False
            self.refused_said.pop(agent_id, None)
            self.refused_said[agent_id] = now
            _keep_latest(self.refused_said)
            return True

    def heard_one_way(self, agent_id: str, address: str) -> str | None:
        """Why the agent's heartbeat, received now, is not to count (None: it counts): the coordinator's calls to it
        have gone unanswered over as long as it waits on a silent agent (``heartbeat_misses`` intervals), while its
        heartbeats arrive. Such an agent was never declared lost: its heartbeats renewed its lease and kept it
        registered, so its running jobs showed `running`, their progress frozen, and its tasks out of our reach ran
        on, for as long as the partition lasted (gray-failure review, session 44). Its heartbeats now neither count
        as signs of life nor renew its lease: the lease runs out and its tasks are frozen, then it is declared lost
        as a silent agent is, and its jobs run elsewhere. Said once until it answers again."""
        unanswered = self.backend.unanswered_for(agent_id)
        window = self.heartbeat_misses * self.heartbeat_s
        if unanswered >= window and time.monotonic() - self.backend.answered_at > window:
            # No agent has answered a poll for as long: the coordinator's own side (its network, its descriptors) is
            # as likely at fault, and losing every agent for it would requeue every job (code review). As before.
            if not self.none_answer:
                self.none_answer = True
                log.warning("the coordinator's calls to agent %s at %s have gone unanswered for %.1f s while its "
                            "heartbeats arrive, and no agent has answered a poll for as long: a fault on the "
                            "coordinator's side (its network, its file descriptors) is as likely, so none is declared "
                            "lost for it", agent_id, address, unanswered)
            unanswered = 0.0
        elif self.backend.answered_at > time.monotonic() - window:
            self.none_answer = False
        if unanswered < window:
            if self.one_way.pop(agent_id, None) is not None:
                log.info("agent %s answers again: its heartbeats count again", agent_id)
            return None
        if agent_id not in self.one_way:
            why = (f"the coordinator's calls to {address} went unanswered for {unanswered:.1f} s while the agent's "
                   "heartbeats arrived (a one-way partition, a link that loses many packets or is slower than the "
                   "calls' 1-s deadline, or an address the coordinator cannot reach: the agent's --advertise)")
            self.one_way[agent_id] = why
            log.warning("agent %s: %s: they no longer renew its lease nor count as signs of life: it is declared lost "
                        "if a call to it still goes unanswered in %g s", agent_id, why, window)
        return (f"{self.one_way[agent_id]}: the lease is not renewed, and the agent is declared lost unless the "
                "coordinator's calls get through")

    def _note_running(self) -> None:
        """Note that the process runs now (the ticker, and the watch before each look). If it was last noted more
        than a heartbeat interval (plus a tick) ago, it did not run in between (SIGSTOP, a paused VM, swapping):
        it heard no heartbeat, whoever sent one, so the silence of every agent last heard before that gap is
        counted from the gap's length later, and from no later than now. A stamp written since (a heartbeat
        received once the process ran again) is left alone, and none is lowered. Only a delay, of at most the
        gap, and once: an agent that is really gone is still declared lost, that much later, and one whose lease
        ran out meanwhile has frozen its tasks. Before, a coordinator stopped for 8 s declared a healthy agent lost
        the moment it ran again, and requeued its jobs (fault-injection review)."""
        with self.heartbeats_lock:
            now = time.monotonic()
            stalled, self._ran_at = now - self._ran_at - STALL_TICK_S, now
            if stalled <= self.heartbeat_s:
                return
            for agent_id, last in list(self.heartbeats.items()):
                if last < now - stalled:
                    self.heartbeats[agent_id] = min(last + stalled, now)
        self.backend.excuse_unanswered()  # (nor the calls whose deadlines passed meanwhile: code review)
        log.warning("the coordinator did not run for %.1f s: the agents' silence over that time is not counted "
                    "against them", stalled)

    def _check_agents(self) -> None:
        """One look at every agent's last sign of life (see :meth:`_watch_agents`), after a gap in the process's
        running is excused (whichever of this watch and the ticker runs first once it runs again). Agents silent
        past the window are declared lost, unless every agent is, two or more: see :meth:`_all_silent`."""
        self._note_running()
        window = self.heartbeat_misses * self.heartbeat_s
        deadline = time.monotonic() - window
        silent: list[tuple[str, AgentHandle, float]] = []
        unheard: list[tuple[str, AgentHandle, float]] = []
        judged, newest = 0, -math.inf
        heard = max(self.heard_at, self.backend.answered_at)  # (before the stamps: see _all_silent's hold)
        for agent_id in list(self.heartbeats):
            handle = self.backend.agents.get(agent_id)
            # Its heartbeat read after its handle, each time: an agent that registered again while an earlier loss
            # in this look waited for the engine lock has a new handle and a fresh heartbeat, and was declared lost
            # on the stamp read before (concurrency review). RegisterAgent stamps before it puts the new handle in,
            # so a new handle is never read with the old stamp.
            last = self.heartbeats.get(agent_id)
            if last is None or handle is None:  # (lost meanwhile)
                continue
            # Silence counts only if the coordinator was listening: heartbeats are received by the
            # gRPC threads, but an agent without them is heard only through the engine loop's polls,
            # and a stalled loop (no polls) is no evidence against it: its last poll must have failed.
            listening = agent_id in self.beating or handle.silent
            past = listening and max(last, handle.last_seen) < deadline
            if not handle.heard:
                # Restored from the store and never heard by this process (review h214): its silence says nothing
                # of this coordinator's network, and it is lost after its grace as before, not held with the others
                # (a restart on --state whose agents were all gone kept their jobs "running" 10 windows more).
                if past:
                    unheard.append((agent_id, handle, max(last, handle.last_seen)))
                continue
            judged += 1
            newest = max(newest, last, handle.last_seen, handle.received)  # (received: heard one way only)
            if past:
                silent.append((agent_id, handle, max(last, handle.last_seen)))
        silent = unheard if self._all_silent(silent, judged, newest, heard) else silent + unheard
        doomed: list[tuple[str, AgentHandle, str]] = []
        for agent_id, handle, last in silent:
            one_way = self.one_way.get(agent_id)
            if one_way is not None and handle.unanswered_last < last + window:
                # Heard one way only: lost once a call made after its lease ran out goes unanswered too, not
                # before it is asked again (its polls wait up to SILENT_POLL_MAX_S: at short intervals the poll
                # that would have cleared it came after the loss). A loop held up asks nothing: no loss then.
                continue
            if self.heartbeats.get(agent_id) is None or max(self.heartbeats[agent_id], handle.last_seen) >= deadline:
                continue  # (heard, or lost, meanwhile)
            doomed.append((agent_id, handle, f"no heartbeat for {self.heartbeat_misses} x {self.heartbeat_s:g} s"
                           if one_way is None else f"unreachable: {one_way}"))
        # Every one cut off before the first is removed (review h213): each loss waits for the engine lock, and the
        # loop, given the first one's jobs, placed them on the next ones, still registered and silent, each call a
        # deadline under that lock (6 s between the first and the last of three lost at the end of a hold).
        if self._stop.is_set():  # (lose_agent declares none lost then: none cut off either)
            return
        for agent_id, handle, _why in doomed:
            self.backend.cut_off(agent_id, handle)
        for agent_id, handle, why in doomed:
            try:
                self.lose_agent(agent_id, f"agent {agent_id} lost: {why}", handle)
            except Exception:  # the watch must outlive any one loss: the next agent to die needs it
                log.exception("declaring agent %s lost failed", agent_id)

    def _all_silent(self, silent: list[tuple[str, AgentHandle, float]], judged: int, newest: float,
                    heard: float) -> bool:
        """Whether to declare none of the ``silent`` agents lost now because every one of the ``judged`` agents,
        two or more, is silent: a fault of the coordinator's own network (its uplink, a switch) silences them all
        at once, and declaring each lost restarted every job on the cluster when it healed (a blip of 6 s or more,
        multi-host review) where their frozen tasks could have been thawed. They stay registered, their leases run
        out (so their tasks are frozen: none runs out of our reach), and the log says so once. That lasts
        :data:`ALL_SILENT_WINDOWS` loss windows at most, counted from the last sign of life of any: agents that
        did all fail are lost then, as before. Once one is heard again, those still silent are given one window
        afresh, from now (their heartbeats come within an interval of the first, a healthy agent's a little later),
        as after a stall of the coordinator (:meth:`_note_running`); one that stays silent is lost then. A
        coordinator of one agent cannot tell its own fault from the agent's, and loses it as before. A stall of this
        process meanwhile moves their stamps on (:meth:`_note_running`) but hears no agent: the hold goes on.

        ``heard``: the latest heartbeat, registration or answered poll received as the look began.
        ``newest``: the latest sign of life of any of the ``judged`` agents. Every agent is silent once none has been
        heard for all but one and a half intervals of the window (review h213: their last signs of life are spread
        over up to an interval, heartbeats, and over a poll round or more, a slow answer: the one heard last before
        the fault passed the window a look or more before the others, and was declared lost alone, its jobs
        restarted; review h214: half an interval more, for the round trip and a loaded machine). An
        agent whose own silence, by its polls (which the window given afresh does not touch), has passed the bound
        is given no window afresh: one agent heard now and then kept a dead one registered for ever."""
        window = self.heartbeat_misses * self.heartbeat_s
        bound = ALL_SILENT_WINDOWS * window
        now = time.monotonic()
        # (heartbeats come an interval and a round trip apart, more on a loaded machine: half an interval of margin)
        if judged >= 2 and silent and now - newest >= max(1.5 * self.heartbeat_s, window - 1.5 * self.heartbeat_s):
            since = newest
            if now - since < bound:
                if self.all_silent_since is None:
                    # (as the look began: a sign received while it read the stamps is a heal, seen at the next look)
                    self.heard_before_hold = heard
                    log.warning("every agent (%d) has been silent for %.1f s: a fault of the coordinator's own network "
                                "is as likely as all of them failing at once, so none is declared lost before %g s "
                                "of silence; their leases run out meanwhile, freezing the tasks they still run", judged,
                                now - since, ALL_SILENT_WINDOWS * window)
                # (each time: a stall during the hold moves the stamps, and the bound, on; status counts as the bound)
                self.all_silent_since = since
                return True
            if self.all_silent_since is not None:
                log.warning("every agent (%d) has been silent for %.1f s: they are declared lost", judged, now - since)
                self.all_silent_since = None
            return False
        if self.all_silent_since is not None:
            if judged >= 2 and max(self.heard_at, self.backend.answered_at) <= self.heard_before_hold:
                # No agent heard: their stamps were moved on by a stall of this process (:meth:`_note_running`),
                # excused as ever; the hold goes on, and is not said again (review s47: such a stall was logged as a
                # heal, the hold said again once the stamps passed the window, and the silent were given more).
                self.all_silent_since = newest  # (the bound counts from the moved stamps: status says as much)
                return True
            self.all_silent_since = None
            # Every agent not heard within the last interval, not only those past the window (review h214): the
            # hold starts when the first passes it, the others up to an interval later, and a fault that healed in
            # between left those not past it yet to be lost a moment later, their heartbeats still to come.
            with self.heartbeats_lock:
                afresh = []
                for agent_id, last in self.heartbeats.items():
                    handle = self.backend.agents.get(agent_id)
                    if (handle is not None and max(last, handle.last_seen) < now - self.heartbeat_s
                            and now - handle.last_seen < bound):
                        afresh.append(agent_id)
                for agent_id in afresh:
                    self.heartbeats[agent_id] = now
            if afresh:
                log.warning("an agent is heard again after every agent was silent: the %d still silent are given %g s "
                            "afresh to be heard before each is declared lost", len(afresh), window)
            else:
                log.warning("an agent is heard again after every agent was silent")
            # Nor do the calls that went unanswered over the fault count against them (review h213): their heartbeats
            # come before their polls, backed off up to SILENT_POLL_MAX_S, and once another agent's poll was answered
            # they were taken for heard one way only, their leases not renewed, until their next poll.
            self.backend.excuse_unanswered()
            return False  # (those given a window afresh are heard now for the look's recheck; the others are lost)
        return False

    def grant(self, agent_id: str) -> float:
        """The lease to grant an agent now (:attr:`lease_s`), recorded in the store first if it is not the one the
        store holds for it, so that a restarted coordinator waits out what the agent may hold (:meth:`_restore`).
        If that write fails, the agent is granted no longer a lease than the store holds (and is told to drop
        its own if the store holds none): a lease may be shorter than the silence, never longer than the wait."""
        if self.store is not None and self.granted.get(agent_id, 0.0) != self.lease_s:
            try:
                self.store.put_lease(agent_id, self.lease_s)
            except Exception:
                log.warning("recording the lease of agent %s failed; it is granted %g s", agent_id,
                            min(self.lease_s, self.granted.get(agent_id, 0.0)), exc_info=True)
                return min(self.lease_s, self.granted.get(agent_id, 0.0))
            self.granted[agent_id] = self.lease_s
        return self.lease_s

    def lose_agent(self, agent_id: str, reason: str, silent: AgentHandle | None = None) -> list[str]:
        """Remove the agent, its hosts, and requeue its jobs. The state in memory is changed whole even when the
        store cannot record it (a full disk): its hosts are gone and its jobs pending, so the next agent's loss is
        handled too, and a restart that finds the agent still stored adopts it and loses it again.
        Not once this server is stopping, when the agents stopping beside it fall silent (their loss was said, and
        with a state file recorded, at a clean stop: the restart then requeued jobs whose tasks it could have
        adopted). ``silent``: the agent's handle found silent (the watch's); if the agent has registered again
        since (a restarted agent, ``vcemu up --restart-agents``), only that old handle is cut off: the new one is
        alive, and its polls requeue the jobs whose tasks the new process does not have."""
        if self._stop.is_set():
            return []
        # First, without the engine lock (the engine loop may hold it through a call to this very agent):
        # its calls fail at once, so the loop lets go and the agent's jobs are requeued now, not in seconds.
        self.backend.cut_off(agent_id, silent)
        with self.engine.lock:
            if self._stop.is_set():  # (the stop came while the loop held the lock)
                return []
            handle = self.backend.agents.get(agent_id)
            if silent is not None and handle is not silent:  # registered again meanwhile (or removed already)
                log.info("agent %s registered again as it was being declared lost: kept", agent_id)
                return []
            if handle is not None:  # (recorded first: a scrape in between would find it neither up nor down)
                # (a restored agent's heartbeat stamp is a grace in the future, not a sign of life: not its age)
                beat = max(self.heartbeats.get(agent_id, -math.inf), handle.last_seen) if handle.heard else -math.inf
                self.lost.pop(agent_id, None)  # (to the end: the latest lost last)
                self.lost[agent_id] = LostAgent(handle.mode, beat, time.monotonic(), tuple(handle.hosts), reason, 0)
                _keep_latest(self.lost)
            self.registered.discard(agent_id)
            # Not under membership: remove_agent waits for the backend's lock, which the engine loop holds across a
            # whole poll (agent calls included), and every agent's Heartbeat would wait that long on membership. The
            # handle is cut off (lost) already, so a heartbeat from here on answers known=False either way.
            hosts = self.backend.remove_agent(agent_id)
            with self.membership:
                with self.heartbeats_lock:
                    self.heartbeats.pop(agent_id, None)
                self.beating.discard(agent_id)
                self.granted.pop(agent_id, None)  # (the store drops its record with the agent)
                if (one_way := self.one_way.pop(agent_id, None)) is not None:  # (asked before it is taken again)
                    self.unreachable[agent_id] = one_way
                    _keep_latest(self.unreachable)  # (as the lost agents: one never back is kept no longer)
            jobs = self.engine.lose_hosts(hosts, reason)  # a failure to record one is logged, not raised
            if (lost := self.lost.get(agent_id)) is not None:
                self.lost[agent_id] = dataclasses.replace(lost, requeued=len(jobs))
            if self.store is not None:
                try:
                    self.store.drop_agent(agent_id)
                except Exception:
                    log.exception("agent %s lost: removing it from the state file failed", agent_id)
        self.metrics.agents_lost.inc()
        log.warning("%s; hosts %s removed, %d job%s requeued", reason, ", ".join(hosts), len(jobs),
                    "" if len(jobs) == 1 else "s")
        return jobs

    def agent_health(self) -> list[AgentHealth]:
        """Registered agents with the wall-clock age of their last heartbeat (for the metrics). Heartbeats
        are stamped with ``time.monotonic()``; an agent restored from the store has a grace stamp in the
        future, shown as age 0, and is not up until it is heard from (it may be long gone)."""
        now, stale = time.monotonic(), self.heartbeat_misses * self.heartbeat_s  # up until declared lost
        agents = list(self.backend.agents.items())
        return [
            AgentHealth(a, h.mode, max(0.0, now - self.heartbeats.get(a, -math.inf)), len(h.hosts), stale,
                        heard=h.heard)
            for a, h in agents
        ] + [  # lost ones, until they register again: down, with no hosts
            AgentHealth(a, lost.mode, max(0.0, now - lost.last_heard) if math.isfinite(lost.last_heard) else math.inf,
                        0, stale, lost=True)
            for a, lost in self.lost_agents()
        ]

    def lost_agents(self) -> list[tuple[str, LostAgent]]:
        """The agents declared lost that have not registered again, the latest lost last."""
        return [(a, lost) for a, lost in list(self.lost.items()) if a not in self.backend.agents]

    def _broadcast(self, t: Transition) -> None:
        for q in list(self.watchers):
            q.offer(t)

    def _run(self) -> None:
        """The engine loop. A turn starts at most every ``BATCH_WINDOW_S``: each submission wakes the loop,
        and a burst of them should be taken in as one batch (one decision for a policy that decides on
        state, see ``Engine._merged``), not one turn per job starving the API threads of the GIL. Like
        Slurm's ``batch_sched_delay``; the delay is far below the agents' poll interval."""
        last, window = -math.inf, BATCH_WINDOW_S
        while not self._stop.is_set():
            wait = last + window - time.monotonic()
            if wait > 0 and self._stop.wait(wait):
                break
            last = time.monotonic()
            try:
                busy = time.thread_time()
                self.drain()
                self.engine.step(until=self.backend.now() + 0.5 * self.backend.compression, budget_s=self.turn_budget_s)
                if self.unsaved and time.monotonic() >= self.unsaved_retry_at:
                    with self.engine.lock:  # (a record is read whole)
                        self.save_unsaved()
                # A turn that computed for c seconds waits 3c before the next: with a long queue the loop
                # keeps at most a quarter of the CPU, and the API threads the rest (waiting is not counted).
                window = max(BATCH_WINDOW_S, 3 * (time.thread_time() - busy))
            except Exception as exc:  # the loop must survive a bad event; the error is logged with its trace
                if self._stop.is_set():
                    # Stopping: the turn was cut short by what stop() closes (the agents' channels, once the loop
                    # has had 5 s): said in one line, not as a failure with its traceback (torture review).
                    log.warning("engine turn cut short by the stop: %s: %s", type(exc).__name__, exc)
                    log.debug("the turn's traceback", exc_info=True)  # (whatever its cause: a bug's trace is kept)
                    break
                said = f"{type(exc).__name__}: {exc}"
                # A state file that cannot be written (full, read-only) fails every turn that starts a job, twice a
                # second for as long as it lasts, and each was a 28-line trace (storage-fault review): the same
                # such error is said with its trace once a minute; any other error every time.
                store = isinstance(exc, (sqlite3.Error, OSError))
                now = time.monotonic()
                said_before = self._turn_store_error  # (not ``last``: the loop's own, the start of this turn)
                if store and said_before is not None and said_before[0] == said and \
                        now - said_before[1] < STORE_ERROR_REPEAT_S:
                    log.debug("engine step failed again", exc_info=True)
                else:
                    log.exception("engine step failed" + (" (the same failure is said again once a minute while "
                                                          "it lasts)" if store else ""))
                    self._turn_store_error = (said, now) if store else None
                self.loop_errors.append(said)
                self.loop_error_count += 1
                self._stop.wait(0.5)

    def start(self) -> CoordinatorServer:
        """Serve. A start that fails gives back what the server holds (its port, the agents' channels, and its
        state file's lock, which would otherwise refuse a later server on the same state in this process)."""
        try:
            took = warm_kernels()  # before serving: a first decision must not stall the loop compiling
            if took > 1.0:
                log.info("policy kernels compiled in %.1f s", took)
            self.grpc.start()
            self._loop.start()
            self._ran_at = time.monotonic()
            self._ticker.start()
            self._watch.start()
        except BaseException:
            self.stop(grace=0)
            raise
        self.health.set(SERVICE_NAME, health_pb2.HealthCheckResponse.SERVING)
        self.health.set("", health_pb2.HealthCheckResponse.SERVING)
        return self

    def stop(self, grace: float = 1.0) -> None:
        """Stop serving and give back what the server holds; also after a :meth:`start` that failed part way."""
        self.health.enter_graceful_shutdown()
        self._stop.set()
        self.backend.wake()
        for thread in (self._loop, self._watch, self._ticker):
            if thread.is_alive():  # (not started, if start() failed before it)
                thread.join(timeout=5)
        if self.stop_tasks_on_exit and self.store is None:  # with a store, a restart adopts them instead
            # A Stop that fails now is not retried (no poll follows): the backend logs it at INFO, without
            # "will retry" (an agent whose last poll went unanswered gets one short attempt each).
            self.backend.closing = True
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
        if self.store is not None:
            if self.engine.lock.acquire(timeout=5):  # (a loop that did not stop in time may hold it)
                try:
                    self.save_unsaved()
                    with contextlib.suppress(Exception):  # (a file that cannot be written: said by save_unsaved)
                        self.store.put_clock(self.backend.now())
                    self.closing = True
                finally:
                    self.engine.lock.release()
            else:
                self.closing = True
            if self.unsaved:
                log.error("stopping with %d jobs' changes not written to the state file (it cannot be written, or "
                          "the engine loop did not stop): a restart on it runs those jobs again from their last "
                          "saved state", len(self.unsaved))
            self.store.close()
