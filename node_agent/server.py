"""The gRPC face of an agent: ``vcemu.v1.Agent``, the standard health service and Prometheus metrics.

:func:`start_agent` starts everything in-process and returns a :class:`RunningAgent` handle; the CLI
and the integration tests both use it.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any, TypeVar

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from node_agent import leaseclock
from node_agent.agent import AgentCore, AgentError, HostSpec, TaskStart, open_core
from node_agent.runner import State, TaskView
from node_agent.transactional import TransactionalParams
from vcemu.auth import BearerTokenInterceptor
from vcemu.ports import cannot_bind, listen_address, ports_refusal, serve_metrics
from vcemu.tls import TlsFiles
from vcemu.v1 import agent_pb2, agent_pb2_grpc

log = logging.getLogger(__name__)
R = TypeVar("R")
SERVICE_NAME = "vcemu.v1.Agent"
#: Largest request an agent accepts (its requests are a few hundred bytes; issue 7 bounds them).
MAX_MESSAGE_BYTES = 64 << 10


def task_status(v: TaskView) -> agent_pb2.TaskStatus:
    s = v.service
    service = None if s is None else agent_pb2.ServiceStats(
        window_seconds=s.window_seconds, response_time_mean_s=s.response_time_mean_s,
        response_time_p95_s=s.response_time_p95_s, throughput_rps=s.throughput_rps, rate_rps=s.rate_rps,
        completed=s.completed, dropped=s.dropped, outstanding=s.outstanding, age_seconds=s.age_seconds)
    return agent_pb2.TaskStatus(
        task_id=v.task_id, host=v.host, state=v.state.value, progress=v.progress, cpu_share=v.cpu_share,
        cpu_measured=v.cpu_measured, cpu_seconds=v.cpu_seconds, memory_bytes=v.memory_bytes,
        exit_code=v.exit_code, message=v.message, workload=v.workload, service=service, fenced=v.fenced)


def transactional_params(r: agent_pb2.StartTaskRequest) -> TransactionalParams | None:
    """The request's TransactionalSpec with its unset (zero) fields at their defaults, or None if absent."""
    if not r.HasField("transactional"):
        return None
    t, d = r.transactional, TransactionalParams()
    return TransactionalParams(rate_rps=t.rate_rps or d.rate_rps, work=t.work or d.work,
                               window_seconds=t.window_seconds or d.window_seconds, seed=t.seed)


def _call(context: grpc.ServicerContext, fn: Callable[[], R]) -> R:
    """Run a request; a refusal becomes its status code, any other failure INTERNAL (:func:`_refusal`)."""
    try:
        return fn()
    except Exception as e:
        code, message = _refusal(e)
        context.abort(getattr(grpc.StatusCode, code), message)
    raise AssertionError("unreachable")  # context.abort raises


def _refusal(e: Exception) -> tuple[str, str]:
    """The status code (its name) and message a request's failure is answered with, alone or in a batch: an
    AgentError's own; any other (a cgroup or OS failure, or a bug) INTERNAL, logged with its traceback."""
    if isinstance(e, AgentError):
        return e.code, e.message
    short = _resource_shortage(e)
    if short is not None:  # the machine's, not the request's: the coordinator keeps the job and tries again
        log.error("request failed: %s", short)
        return "RESOURCE_EXHAUSTED", f"agent out of {short}; retry once it is back"
    log.error("request failed", exc_info=e)
    return "INTERNAL", f"agent failure: {e}"


#: errno -> what the agent ran out of (exhaustion review: a full /dev/shm failed every job started meanwhile, for
#: good, as "INTERNAL: agent failure: [Errno 28] No space left on device", naming neither the place nor that it passes)
_SHORTAGES = {errno.ENOSPC: "space", errno.EDQUOT: "disk quota", errno.EMFILE: "file descriptors (ulimit -n)",
              errno.ENFILE: "file descriptors (the system's)", errno.EAGAIN: "processes or threads (a pids limit?)",
              errno.ENOMEM: "memory"}


def _resource_shortage(e: BaseException) -> str | None:
    """What the machine ran out of, if that is why ``e`` (an OSError, or Python's "can't start new thread")
    happened, with the file concerned; None otherwise."""
    if isinstance(e, OSError) and e.errno in _SHORTAGES:
        # The directory, not the file: a task's files are named by its id, which changes at every attempt, and the
        # coordinator logs a job's refusal once per distinct message (each attempt was logged: review).
        where = f" in {os.path.dirname(e.filename) or e.filename}" if isinstance(e.filename, str) and e.filename \
            else ""
        return f"{_SHORTAGES[e.errno]}{where} ({e.strerror})"
    if isinstance(e, RuntimeError) and "can't start new thread" in str(e):
        return _SHORTAGES[errno.EAGAIN]
    return None


def _expires_at(context: grpc.ServicerContext) -> float | None:
    """The caller's deadline on this process's monotonic clock, or None if it set none."""
    left = context.time_remaining()
    return None if left is None else time.monotonic() + left


def _results(outcomes: list[TaskView | Exception]) -> agent_pb2.TasksReply:
    """A batch's outcomes, each failure answered as :func:`_call` answers a single request's."""
    results = []
    for outcome in outcomes:
        if isinstance(outcome, Exception):
            code, message = _refusal(outcome)
            results.append(agent_pb2.TaskResult(error_code=code, error=message))
        else:
            results.append(agent_pb2.TaskResult(task=task_status(outcome)))
    return agent_pb2.TasksReply(results=results)


class AgentServicer(agent_pb2_grpc.AgentServicer):
    """Maps ``vcemu.v1.Agent`` onto :class:`AgentCore`."""

    def __init__(self, core: AgentCore, wants_token: bool = False) -> None:
        self.core = core
        self.wants_token = wants_token  # (said in Describe: a coordinator without the token refuses the agent)

    def Describe(self, request: Any, context: grpc.ServicerContext) -> agent_pb2.DescribeReply:
        return describe(self.core, self.wants_token)

    def StartTask(self, r: agent_pb2.StartTaskRequest, context: grpc.ServicerContext) -> agent_pb2.TaskReply:
        view = _call(context, lambda: self.core.start_task(
            r.task_id, r.host, r.workload, r.cpu_share, r.cpu_need, r.work_seconds, r.memory_bytes,
            r.start_progress, transactional_params(r), _expires_at(context)))
        return agent_pb2.TaskReply(task=task_status(view))

    def StartTasks(self, r: agent_pb2.StartTasksRequest, context: grpc.ServicerContext) -> agent_pb2.TasksReply:
        """StartTask for each request in turn until one fails, each outcome in its own result: one call for a job's
        tasks on this agent, which one StartTask per task made n calls (and n passes over the agent's tasks)."""
        return _results(self.core.start_tasks([
            TaskStart(t.task_id, t.host, t.workload, t.cpu_share, t.cpu_need, t.work_seconds, t.memory_bytes,
                      t.start_progress, transactional_params(t)) for t in r.tasks], _expires_at(context)))

    def SetLoad(self, r: agent_pb2.SetLoadRequest, context: grpc.ServicerContext) -> agent_pb2.TaskReply:
        return agent_pb2.TaskReply(task=task_status(_call(context, lambda: self.core.set_load(
            r.task_id, r.rate_rps))))

    def SetShare(self, r: agent_pb2.SetShareRequest, context: grpc.ServicerContext) -> agent_pb2.TaskReply:
        return agent_pb2.TaskReply(task=task_status(_call(context, lambda: self.core.set_share(
            r.task_id, r.cpu_share))))

    def SetShares(self, r: agent_pb2.SetSharesRequest, context: grpc.ServicerContext) -> agent_pb2.TasksReply:
        """SetShare for each request in turn, each refusal in its own result: one call for a plan's share
        changes on a host, which one SetShare per task made O(tasks) calls per job started there."""
        return _results(self.core.set_shares([(s.task_id, s.cpu_share) for s in r.shares]))

    def Pause(self, r: agent_pb2.TaskRef, context: grpc.ServicerContext) -> agent_pb2.TaskReply:
        return agent_pb2.TaskReply(task=task_status(_call(context, lambda: self.core.pause(r.task_id))))

    def Resume(self, r: agent_pb2.TaskRef, context: grpc.ServicerContext) -> agent_pb2.TaskReply:
        return agent_pb2.TaskReply(task=task_status(_call(context, lambda: self.core.resume(r.task_id))))

    def Stop(self, r: agent_pb2.TaskRef, context: grpc.ServicerContext) -> agent_pb2.TaskReply:
        return agent_pb2.TaskReply(task=task_status(_call(context, lambda: self.core.stop(r.task_id))))

    def StopTasks(self, r: agent_pb2.StopTasksRequest, context: grpc.ServicerContext) -> agent_pb2.TasksReply:
        """Stop for each request in turn, each failure in its own result: one call for a job's tasks on this agent."""
        return _results(self.core.stop_tasks([t.task_id for t in r.tasks]))

    def Checkpoint(self, r: agent_pb2.TaskRef, context: grpc.ServicerContext) -> agent_pb2.CheckpointReply:
        view = _call(context, lambda: self.core.task(r.task_id))
        return agent_pb2.CheckpointReply(task_id=view.task_id, progress=view.progress)

    def Status(self, request: Any, context: grpc.ServicerContext) -> agent_pb2.StatusReply:
        if request.lease_s > 0 and self.core.started <= request.lease_since <= leaseclock.now():
            # The coordinator's poll, echoing the clock of our last reply it received: a sign of its life from
            # then (AgentCore.renew_lease). (A clock outside our life is not ours: an earlier process of this
            # agent, or one on another machine.)
            self.core.renew_lease(request.lease_s, request.lease_since)
        elif request.lease_s < 0:  # a coordinator that grants no lease: an earlier one's must not fence its tasks
            self.core.renew_lease(0.0, 0.0)
        hosts, tasks = self.core.status()
        return agent_pb2.StatusReply(
            agent_id=self.core.agent_id, mode=self.core.mode,
            hosts=[agent_pb2.HostStatus(
                name=h.name, cpu_cores=h.cpu_cores, memory_bytes=h.memory_bytes, cpu_allocated=h.cpu_allocated,
                cpu_measured=h.cpu_measured, memory_used_bytes=h.memory_used_bytes) for h in hosts],
            tasks=[task_status(t) for t in tasks], uptime_seconds=(clock := leaseclock.now()) - self.core.started,
            clock=clock, lease_left=self.core.lease_left())


def describe(core: AgentCore, wants_token: bool = False) -> agent_pb2.DescribeReply:
    return agent_pb2.DescribeReply(
        agent_id=core.agent_id, mode=core.mode, workloads=core.workloads, wants_token=wants_token,
        hosts=[agent_pb2.HostInfo(name=h.name, cpu_cores=h.cpu_cores, memory_bytes=h.memory_bytes)
               for h in core.hosts.values()])


class AgentCollector(Collector):
    """Reads the agent's state at scrape time (no gauges to keep in sync)."""

    def __init__(self, core: AgentCore) -> None:
        self.core = core

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        hosts, tasks = self.core.status()
        specs = [
            ("vcemu_agent_host_cpu_allocated_ratio", "Sum of the CPU shares of running tasks, fraction of "
             "the host", lambda h: h.cpu_allocated),
            ("vcemu_agent_host_cpu_measured_ratio", "Measured CPU use of the host's tasks, fraction of the "
             "host", lambda h: h.cpu_measured),
            ("vcemu_agent_host_memory_used_bytes", "Resident memory of the host's tasks",
             lambda h: h.memory_used_bytes),
        ]
        for name, doc, get in specs:
            g = GaugeMetricFamily(name, doc, labels=["host"])
            for h in hosts:
                g.add_metric([h.name], float(get(h)))
            yield g
        # What says that the machine withholds CPU from the tasks (a noisy neighbour): the measured ratio above is a
        # 1-s gauge over every task, idle servers and start-ups included; these count busy running tasks only.
        given = self.core.cpu_given()
        for i, (name, doc) in enumerate((
                ("vcemu_agent_host_busy_cpu_allocated_seconds", "CPU-seconds the host's busy running tasks (dgemm, "
                 "arraycycle) were allocated: their shares of its cores over the time they ran"),
                ("vcemu_agent_host_busy_cpu_charged_seconds", "CPU-seconds the host's busy running tasks were "
                 "charged over the same time (below allocated: the machine gave them less than their shares)"))):
            c = CounterMetricFamily(name, doc, labels=["host"])
            for h in hosts:
                c.add_metric([h.name], given.get(h.name, (0.0, 0.0))[i])
            yield c
        g = GaugeMetricFamily("vcemu_agent_host_unkilled_tasks", "Tasks of the host whose processes outlived their "
                              "kill (frozen, or in uninterruptible sleep) and hold their memory", labels=["host"])
        for h in hosts:
            g.add_metric([h.name], float(sum(1 for t in tasks if t.host == h.name and t.kill_failed)))
        yield g
        g = GaugeMetricFamily("vcemu_agent_host_fenced_tasks", "Tasks of the host the agent froze itself when its "
                              "lease ran out (no word from its coordinator), until it resumes or stops them",
                              labels=["host"])
        for h in hosts:
            g.add_metric([h.name], float(sum(1 for t in tasks if t.host == h.name and t.fenced)))
        yield g
        # Unfinished states only: the agent forgets a task at its Stop, so a gauge of finished ones read 0 almost
        # always whatever had ended; the counter below says how many did.
        g = GaugeMetricFamily("vcemu_agent_tasks", "Unfinished tasks the agent knows, by state (starting, "
                              "running, paused); ended ones are in vcemu_agent_tasks_ended_total", labels=["state"])
        for s in State:
            if not s.finished:
                g.add_metric([s.name.lower()], float(sum(t.state is s for t in tasks)))
        yield g
        c = CounterMetricFamily("vcemu_agent_tasks_ended", "Tasks this agent started that have ended, by the "
                                "state they ended in (a StartTask that failed is not counted: its caller got the "
                                "error)", labels=["state"])
        for s, n in self.core.tasks_ended().items():
            c.add_metric([s.name.lower()], float(n))
        yield c
        c = CounterMetricFamily("vcemu_agent_program_starts", "Task programs this agent has started, by workload and "
                                "by whether the start took a spare started ahead or started the program then (cold)",
                                labels=["workload", "source"])
        for (workload, source), n in sorted(self.core.program_starts().items()):
            c.add_metric([workload, source], float(n))
        yield c
        g = GaugeMetricFamily("vcemu_agent_cgroup_mode_info", "How the agent enforces CPU shares (one series, 1)",
                              labels=["mode"])
        g.add_metric([self.core.mode], 1.0)  # (an _info metric: the modes not in use are not series of 0)
        yield g
        # What tells an operator that the coordinator is gone before any task is fenced: without it, an idle
        # agent's metrics were the same before and after its coordinator was killed.
        g = GaugeMetricFamily("vcemu_agent_lease_remaining_seconds", "Seconds until the lease the coordinator "
                              "last renewed runs out (0: it has, and running tasks are frozen); no sample while the "
                              "agent holds no lease", labels=["agent"])  # (its id, as vcemu_agent_up{agent} names it)
        left = self.core.lease_left()
        if left >= 0:
            g.add_metric([self.core.agent_id], left)
        yield g


@dataclass
class RunningAgent:
    """A serving agent. :meth:`stop` kills its tasks and removes its cgroups."""

    core: AgentCore
    server: grpc.Server
    port: int
    address: str
    health: health.HealthServicer
    metrics_port: int | None = None
    wants_token: bool = False  # (its API wants the bearer token: start_agent's ``token``)
    _closers: list[Callable[[], None]] = field(default_factory=list)

    def stop(self, grace: float = 1.0) -> None:
        self.health.enter_graceful_shutdown()
        self.server.stop(grace).wait()
        for close in self._closers:
            with contextlib.suppress(Exception):
                close()
        self.core.shutdown()


class PortUnavailable(RuntimeError):
    """``--port`` or ``--metrics-port`` cannot be listened on; the message names the flag. A setting of the
    user's, refused like a bad flag (exit status 2), unlike an agent that fails to start."""


def start_agent(hosts: list[HostSpec], agent_id: str, port: int = 0, bind: str = "127.0.0.1",
                no_cgroups: bool = False, metrics_port: int | None = None, tls: TlsFiles | None = None,
                progress_by: str = "cpu-time", spares: int = 0, rates_file: str | None = None,
                token: str | None = None) -> RunningAgent:
    """Open cgroups, calibrate under ``units`` progress (or read the calibration from ``rates_file``:
    :func:`~node_agent.agent.open_core`), and serve ``vcemu.v1.Agent`` + health on ``bind:port`` (0 = ephemeral).

    ``token``: the agent's API wants it as ``authorization: Bearer <token>`` on every call (the coordinator's
    ``--token-file``, which the coordinator sends; :mod:`vcemu.auth`), under TLS too; health stays open.

    Raises :class:`~node_agent.cgroups.CgroupUnavailable` if cgroups are not writable and
    ``no_cgroups`` is false, and :class:`PortUnavailable` if the port or the metrics port cannot be bound
    (both are checked before anything starts)."""
    refusal = ports_refusal(bind, port, metrics_port)
    if refusal is not None:
        raise PortUnavailable(refusal)
    core = open_core(agent_id, hosts, no_cgroups=no_cgroups, progress_by=progress_by, spares=spares,
                     rates_file=rates_file)
    try:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=16, thread_name_prefix="agent-rpc"),
                             interceptors=[BearerTokenInterceptor(token, SERVICE_NAME)] if token else [],
                             options=[("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                                      ("grpc.so_reuseport", 0)])  # a port in use is an error, not shared
        agent_pb2_grpc.add_AgentServicer_to_server(AgentServicer(core, wants_token=bool(token)), server)
        hs = health.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(hs, server)
        try:
            if tls is not None:  # mutual TLS: only holders of a certificate of the cluster's CA may call
                bound = server.add_secure_port(listen_address(bind, port), tls.server_credentials())
            else:
                bound = server.add_insecure_port(listen_address(bind, port))
        except RuntimeError:  # grpc's "Failed to bind to address ..."
            bound = 0
        if bound == 0:
            raise PortUnavailable(cannot_bind(bind, port))
        server.start()
        for svc in ("", SERVICE_NAME):
            hs.set(svc, health_pb2.HealthCheckResponse.SERVING)
        agent = RunningAgent(core=core, server=server, port=bound, address=listen_address(bind, bound), health=hs,
                             wants_token=bool(token))
        if metrics_port is not None:
            registry = CollectorRegistry()
            registry.register(AgentCollector(core))
            try:
                httpd, _ = serve_metrics(bind, lambda host: start_http_server(metrics_port, addr=host,
                                                                              registry=registry))
            except OSError as exc:
                server.stop(0)
                raise PortUnavailable(f"--metrics-port: cannot listen on {listen_address(bind, metrics_port)}: "
                                      f"{exc.strerror or exc}") from None
            agent.metrics_port = httpd.server_port
            agent._closers.append(httpd.shutdown)
        return agent
    except BaseException:
        core.shutdown()
        raise
