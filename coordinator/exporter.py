"""Prometheus metrics of the coordinator (prometheus-client, served on /metrics).

Gauges that describe the current state are computed at scrape time from the engine (a custom
collector), so they can never drift from it; counters and histograms are fed by engine listeners.
Names follow Prometheus conventions (DESIGN.md): ``vcemu_`` prefix, base units, ``_total`` on counters,
no job-id labels.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from coordinator.engine import Engine
from coordinator.metrics import Transition, bounded_stretch
from coordinator.model import JobState

STRETCH_BUCKETS = (1.0, 1.1, 1.25, 1.5, 2.0, 3.0, 5.0, 10.0, 20.0, 50.0, 100.0, float("inf"))
LATENCY_BUCKETS = (1e-5, 5e-5, 1e-4, 5e-4, 1e-3, 5e-3, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, float("inf"))


class _StateCollector(Collector):
    def __init__(self, engine: Engine, host_status: Callable[[], dict] | None, policy: str) -> None:
        self.engine = engine
        self.host_status = host_status
        self.policy = policy

    def collect(self) -> Iterator[GaugeMetricFamily]:
        engine = self.engine
        with engine.lock:
            jobs = list(engine.jobs.values())
            hosts = list(engine.hosts)
        by_state = GaugeMetricFamily("vcemu_jobs", "Jobs by state", labels=["state", "policy"])
        for state in JobState:
            by_state.add_metric([state.value, self.policy], sum(1 for j in jobs if j.state is state))
        yield by_state

        running = [j for j in jobs if j.state is JobState.RUNNING]
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
        cap = {h.name: h for h in hosts}
        cpu_by_host = dict.fromkeys(cap, 0.0)
        mem_by_host = dict.fromkeys(cap, 0.0)
        for j in running:
            for h in j.hosts:
                cpu_by_host[h] += j.cpu
                mem_by_host[h] += j.spec.mem
        for name, host in cap.items():
            alloc.add_metric([name], cpu_by_host[name] / host.cpu)
            mem.add_metric([name], mem_by_host[name] / host.mem)
        yield alloc
        yield mem

        if self.host_status is not None:
            measured = GaugeMetricFamily(
                "vcemu_host_cpu_measured_ratio", "Measured CPU use on a host, fraction of its capacity", labels=["host"]
            )
            used = GaugeMetricFamily(
                "vcemu_host_memory_used_bytes", "Measured memory in use on a host", labels=["host"]
            )
            for name, hs in self.host_status().items():
                measured.add_metric([name], hs.cpu_measured)
                used.add_metric([name], hs.memory_used_bytes)
            yield measured
            yield used


class CoordinatorMetrics:
    """Registers the coordinator's metrics for one engine and keeps the event-fed ones up to date."""

    def __init__(
        self, engine: Engine, policy: str, host_status: Callable[[], dict] | None = None
    ) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(_StateCollector(engine, host_status, policy))
        self.decisions = Histogram(
            "vcemu_decision_latency_seconds",
            "Time a policy took to decide on one event",
            ["policy"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.preemptions = Counter(
            "vcemu_preemptions_total", "Jobs paused to make room", ["policy"], registry=self.registry
        )
        self.migrations = Counter(
            "vcemu_migrations_total",
            "Jobs moved between hosts (once per job and decision)",
            ["policy"],
            registry=self.registry,
        )
        self.stretch = Histogram(
            "vcemu_job_bounded_stretch",
            "Bounded stretch (30 s bound, seed 001) of completed jobs",
            ["policy"],
            buckets=STRETCH_BUCKETS,
            registry=self.registry,
        )
        self.transitions = Counter(
            "vcemu_job_transitions_total", "Job state transitions", ["to_state", "policy"], registry=self.registry
        )
        self.agents_lost = Counter(
            "vcemu_agents_lost", "Agents declared lost (missed heartbeats); their jobs were requeued",
            registry=self.registry,
        )  # exposed as vcemu_agents_lost_total (issue 7)
        self.policy = policy
        self.engine = engine
        for c in (self.preemptions, self.migrations):
            c.labels(policy)  # present from the start, at 0
        engine.listeners.append(self._on_transition)
        engine.decision_listeners.append(lambda s: self.decisions.labels(policy).observe(s))

    def _on_transition(self, t: Transition) -> None:
        self.transitions.labels(t.dst.value, self.policy).inc()
        if t.src is JobState.RUNNING and t.dst is JobState.PAUSED:
            self.preemptions.labels(self.policy).inc()
        if t.reason == "migrate":
            self.migrations.labels(self.policy).inc()
        if t.dst is JobState.DONE:
            spec = self.engine.history.specs[t.job]
            self.stretch.labels(self.policy).observe(bounded_stretch(t.time - spec.submit_time, spec.work))

    def serve(self, port: int, addr: str = "127.0.0.1") -> int:
        server, _thread = start_http_server(port, addr=addr, registry=self.registry)
        return server.server_port
