"""Prometheus metrics of the coordinator (prometheus-client, served on /metrics).

Gauges that describe the current state are computed at scrape time from the engine's job board and host list (a
custom collector), so they can never drift from them; counters and histograms are fed by engine listeners. A scrape
takes no engine lock: it never waits for the engine loop's turn, however long a plan takes to carry out.
Names follow Prometheus conventions (DESIGN.md): ``vcemu_`` prefix, base units, ``_total`` on counters,
no job-id labels.
"""

from __future__ import annotations

import statistics
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from coordinator.engine import Engine
from coordinator.jobboard import JobBoard, hosts_used
from coordinator.metrics import Transition, bounded_stretch
from coordinator.model import JobState

STRETCH_BUCKETS = (1.0, 1.1, 1.25, 1.5, 2.0, 3.0, 5.0, 10.0, 20.0, 50.0, 100.0, float("inf"))
LATENCY_BUCKETS = (1e-5, 5e-5, 1e-4, 5e-4, 1e-3, 5e-3, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, float("inf"))
#: By default an agent counts as up while its last heartbeat is at most this old: three missed 2 s
#: heartbeats, the coordinator's default before it declares an agent lost (CoordinatorServer passes its
#: own heartbeat_misses x heartbeat_s), so one slow beat on a loaded machine does not flap the gauge.
AGENT_STALE_S = 6.0


@dataclass(frozen=True)
class AgentHealth:
    """What the coordinator knows of one registered agent, for the dashboard's agent-health panel."""

    agent: str
    mode: str  # how it enforces shares: cgroup-v1, cgroup-v2 or duty-cycle
    heartbeat_age_s: float  # wall seconds since its last RegisterAgent or Heartbeat
    hosts: int
    stale_after_s: float = AGENT_STALE_S  # up while heartbeat_age_s is at most this
    #: declared lost, and not registered again: down whatever its age, and not counted as registered
    lost: bool = False
    #: heard from since this coordinator started (an agent restored from the store is not, until it answers):
    #: down until then
    heard: bool = True


class _AgentCollector(Collector):
    """Agent health at scrape time: ``up`` per agent (Prometheus' own ``up`` only covers the targets it
    scrapes, and agents are not scraped when they run without a metrics port), heartbeat age and count."""

    def __init__(self, agent_health: Callable[[], list[AgentHealth]]) -> None:
        self.agent_health = agent_health

    def collect(self) -> Iterator[GaugeMetricFamily]:
        agents = self.agent_health()
        yield GaugeMetricFamily("vcemu_agents_registered", "Agents registered with the coordinator",
                                sum(1 for a in agents if not a.lost))
        up = GaugeMetricFamily(
            "vcemu_agent_up",
            "1 while the agent's last heartbeat is recent enough for the coordinator to keep it (by default at "
            f"most {AGENT_STALE_S:g} s old), else 0; an agent restored from the state file is 0 until it is heard "
            "from, and one declared lost stays at 0 until it registers again",
            labels=["agent", "mode"],
        )
        age = GaugeMetricFamily(
            "vcemu_agent_heartbeat_age_seconds", "Seconds since the agent's last heartbeat", labels=["agent"]
        )
        hosts = GaugeMetricFamily("vcemu_agent_hosts", "Hosts an agent emulates", labels=["agent"])
        for a in agents:
            up.add_metric([a.agent, a.mode],
                          1.0 if a.heard and not a.lost and a.heartbeat_age_s <= a.stale_after_s else 0.0)
            age.add_metric([a.agent], a.heartbeat_age_s)
            hosts.add_metric([a.agent], float(a.hosts))
        yield up
        yield age
        yield hosts


class _StateCollector(Collector):
    """The jobs and hosts now, read from the job board and the engine's host list: a scrape never waits for the
    engine loop's turn (coordinator.jobboard)."""

    def __init__(self, engine: Engine, board: JobBoard, host_status: Callable[[], dict] | None, policy: str) -> None:
        self.engine = engine
        self.board = board
        self.host_status = host_status
        self.policy = policy

    def collect(self) -> Iterator[GaugeMetricFamily]:
        counts, running = self.board.counts_and_running()
        hosts = self.engine.hosts  # (a list the engine replaces, never changes: see Engine.add_hosts)
        by_state = GaugeMetricFamily("vcemu_jobs", "Jobs by state", labels=["state", "policy"])
        for state in JobState:
            by_state.add_metric([state.value, self.policy], counts[state])
        yield by_state

        yields = [j.cpu / j.spec.cpu_need for j in running]
        y_min = GaugeMetricFamily("vcemu_yield_min_ratio", "Minimum yield of running jobs", labels=["policy"])
        y_avg = GaugeMetricFamily("vcemu_yield_avg_ratio", "Average yield of running jobs", labels=["policy"])
        if yields:
            y_min.add_metric([self.policy], min(yields))
            y_avg.add_metric([self.policy], statistics.fmean(yields))
        yield y_min
        yield y_avg

        alloc = GaugeMetricFamily(
            "vcemu_host_cpu_allocated_ratio", "CPU allocated on a host, fraction of its capacity", labels=["host"]
        )
        mem = GaugeMetricFamily(
            "vcemu_host_memory_allocated_ratio",
            "Memory allocated on a host, fraction of its capacity",
            labels=["host"],
        )
        for name, (cpu, memory) in hosts_used(running, hosts).items():
            alloc.add_metric([name], cpu)
            mem.add_metric([name], memory)
        yield alloc
        yield mem

        if self.host_status is not None:
            measured = GaugeMetricFamily(
                "vcemu_host_cpu_measured_ratio", "Measured CPU use on a host, fraction of its capacity", labels=["host"]
            )
            used = GaugeMetricFamily(
                "vcemu_host_memory_used_bytes", "Measured memory in use on a host", labels=["host"]
            )
            # The capacities, as the agents report them: what turns the measured bytes into a fraction (the
            # allocated ratio's terms), and the cores the CPU ratios are fractions of (metrics review).
            cores = GaugeMetricFamily("vcemu_host_cpu_cores", "CPU capacity of a host, in real cores",
                                      labels=["host"])
            memory = GaugeMetricFamily("vcemu_host_memory_bytes", "Memory capacity of a host", labels=["host"])
            for name, hs in self.host_status().items():
                measured.add_metric([name], hs.cpu_measured)
                used.add_metric([name], hs.memory_used_bytes)
                cores.add_metric([name], hs.cpu_cores)
                memory.add_metric([name], hs.memory_bytes)
            yield from (measured, used, cores, memory)


class _MoveCounter(Collector):
    """``vcemu_preemptions_total`` and ``vcemu_migrations_total`` counted as coordinator.metrics.job_results
    counts them (seed 001 Sec. III-A and Table II): a migration is a running job moved within one decision,
    by a ``migrate`` transition or by a pause and a resume elsewhere in the same plan (GREEDY-PMTN-MIGR:
    "this amounts to a job migration"; not a preemption), which the engine records as a ``move`` transition. A job
    resumed elsewhere by a later decision was preempted, not migrated.

    Fed by engine listeners while a plan is carried out. A pause may yet turn into a migration (its resume
    elsewhere, later in the same plan), so :meth:`collect` leaves the pauses of the plan under way out of the
    preemptions until the plan is done (:meth:`plan_done`): the counts a scrape sees only grow, and a scrape
    takes this counter's lock only, never the engine's (it used to, and waited out the whole plan).
    """

    def __init__(self, policy: str) -> None:
        self.policy = policy
        self.preemptions = 0
        self.migrations = 0
        self._open = 0  # pauses counted in ``preemptions`` whose plan is still being carried out
        self.lock = threading.Lock()

    def plan_done(self) -> None:
        with self.lock:
            self._open = 0

    def observe(self, t: Transition) -> None:
        with self.lock:
            if t.reason == "migrate":
                self.migrations += 1
            if t.src is JobState.RUNNING and t.dst is JobState.PAUSED:
                self.preemptions += 1
                self._open += 1
            elif t.src is JobState.PAUSED and t.dst is JobState.RUNNING and t.reason == "move":
                self.migrations += 1
                self.preemptions -= 1
                self._open -= 1

    def collect(self) -> Iterator[CounterMetricFamily]:
        with self.lock:
            pre, mig = self.preemptions - self._open, self.migrations
        c = CounterMetricFamily("vcemu_preemptions", "Jobs paused to make room", labels=["policy"])
        c.add_metric([self.policy], pre)
        yield c
        c = CounterMetricFamily(
            "vcemu_migrations",
            "Running jobs moved between hosts within one decision (once per job and decision)",
            labels=["policy"],
        )
        c.add_metric([self.policy], mig)
        yield c


class CoordinatorMetrics:
    """Registers the coordinator's metrics for one engine and keeps the event-fed ones up to date."""

    def __init__(
        self,
        engine: Engine,
        policy: str,
        host_status: Callable[[], dict] | None = None,
        agent_health: Callable[[], list[AgentHealth]] | None = None,
        board: JobBoard | None = None,
    ) -> None:
        """``board``: the engine's job board, if it has one already (the coordinator's); else one is made."""
        self.registry = CollectorRegistry()
        board = board if board is not None else JobBoard.of(engine)  # (an empty board is falsy: no `or`)
        self.registry.register(_StateCollector(engine, board, host_status, policy))
        if agent_health is not None:
            self.registry.register(_AgentCollector(agent_health))
        self.decisions = Histogram(
            "vcemu_decision_latency_seconds",
            "Time a policy took to decide on one event",
            ["policy"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.moves = _MoveCounter(policy)
        engine.plan_listeners.append(self.moves.plan_done)
        self.registry.register(self.moves)
        self.stretch = Histogram(
            "vcemu_job_bounded_stretch",
            "Bounded stretch (30 s bound, seed 001) of completed jobs",
            ["policy"],
            buckets=STRETCH_BUCKETS,
            registry=self.registry,
        )
        self.transitions = Counter(
            "vcemu_job_transitions_total",
            "Job state changes, by the state entered (a running job's new share or host is not one)",
            ["to_state", "policy"], registry=self.registry,
        )
        self.agents_lost = Counter(
            "vcemu_agents_lost", "Agents declared lost (missed heartbeats); their jobs were requeued",
            registry=self.registry,
        )  # exposed as vcemu_agents_lost_total (issue 7)
        # No agent label: an agent started without --agent-id takes a new id at each start (its pid), and a series
        # per id would outlive the LOST_KEPT bound on the others; and one there from the start, at 0, lets
        # increase() count a first registration too (review). Which agent: the coordinator's log says.
        self.agent_registrations = Counter(
            "vcemu_agent_registrations", "Agent registrations this coordinator accepted: an agent process's start, "
            "and each registration again (a restarted process under the same id, an agent back after it was "
            "declared lost or unknown, a registration retried after its reply was late)", registry=self.registry,
        )  # exposed as vcemu_agent_registrations_total
        self.requeues = Counter(
            "vcemu_jobs_requeued", "Running or paused jobs sent back to the queue, to start again from their last "
            "progress: their agent was lost, restarted (a task vanished) or came back with other hosts, or a plan "
            "carrying them out was interrupted",
            ["policy"], registry=self.registry,
        )  # exposed as vcemu_jobs_requeued_total
        self.tasks_unfenced = Counter(
            "vcemu_tasks_unfenced", "Tasks an agent froze when its lease ran out (no word from the coordinator) and "
            "the coordinator resumed", registry=self.registry,
        )  # exposed as vcemu_tasks_unfenced_total
        self.policy = policy
        self.engine = engine
        for c in (self.stretch, self.decisions, self.requeues):
            c.labels(policy)  # present from the start, at 0, so increase()/rate() see the first events
        for state in JobState:  # (each state: a first cancel or failure after a start was no increase(); review)
            self.transitions.labels(state.value, policy)
        engine.listeners.append(self._on_transition)
        engine.decision_listeners.append(self._on_decision)

    def _on_decision(self, seconds: float) -> None:
        self.decisions.labels(self.policy).observe(seconds)

    def _on_transition(self, t: Transition) -> None:
        if t.src is not t.dst:  # (a share change or a move of a running job is recorded as running -> running)
            self.transitions.labels(t.dst.value, self.policy).inc()
        if t.dst is JobState.PENDING and t.src in (JobState.RUNNING, JobState.PAUSED):
            self.requeues.labels(self.policy).inc()
        self.moves.observe(t)
        if t.dst is JobState.DONE:
            spec = self.engine.history.specs[t.job]
            self.stretch.labels(self.policy).observe(bounded_stretch(t.time - spec.submit_time, spec.work))

    def serve(self, port: int, addr: str = "127.0.0.1") -> int:
        server, _thread = start_http_server(port, addr=addr, registry=self.registry)
        return server.server_port
