"""An agent that heartbeats but does not answer the coordinator's calls (a one-way partition, gray-failure review):
never declared lost, its hosts looked free to the policy, which sent every new job there again at every retry while
other hosts stood idle."""

from __future__ import annotations

import time

from coordinator.backends.live import LiveBackend
from coordinator.engine import Engine
from coordinator.model import Host, JobSpec, JobState
from coordinator.policies import get_policy
from tests.unit.scripted_agent import TableAgent, backend_on


def _run_until_running(engine: Engine, backend: LiveBackend, job: str, wait: float) -> None:
    deadline = time.monotonic() + wait
    while engine.jobs[job].state is not JobState.RUNNING and time.monotonic() < deadline:
        engine.step(until=backend.now() + 0.5)
        time.sleep(0.05)


def test_jobs_go_to_other_hosts_while_an_agent_leaves_the_starts_unanswered() -> None:
    x, y = TableAgent("x", ("h0",)), TableAgent("y", ("h1",))
    x.refuse_start_on = {"h0"}  # every StartTask there unanswered (UNAVAILABLE)
    with backend_on(x, y, rpc_timeout=0.5) as backend:
        engine = Engine(get_policy("greedy"), backend, [Host("h0", 1.0, 1.0), Host("h1", 1.0, 1.0)])
        engine.arrive(JobSpec("a", 0.0, 1, 0.5, 0.1, 60.0))
        _run_until_running(engine, backend, "a", 8.0)
        assert x.started, "the policy never tried the unanswering agent's host"
        assert engine.jobs["a"].state is JobState.RUNNING and engine.jobs["a"].hosts == ("h1",), (
            f"{len(x.started)} starts sent to h0, whose agent answers none; h1 idle")


def test_an_agent_that_registers_again_has_its_hosts_offered_at_once() -> None:
    """Its hosts were kept from new tasks for up to 16 poll intervals after its unanswered start: a new registration
    (the agent answers now) ends that."""
    x, y = TableAgent("x", ("h0",)), TableAgent("y", ("h1",))
    x.refuse_start_on = {"h0"}
    with backend_on(x, y, rpc_timeout=0.5) as backend:
        engine = Engine(get_policy("greedy"), backend, [Host("h0", 1.0, 1.0), Host("h1", 1.0, 1.0)])
        engine.arrive(JobSpec("a", 0.0, 1, 0.5, 0.1, 60.0))
        _run_until_running(engine, backend, "a", 8.0)
        assert engine.jobs["a"].hosts == ("h1",)
        x.refuse_start_on = set()
        engine.arrive(JobSpec("b", backend.now(), 1, 0.5, 0.1, 60.0))
        engine.step(until=backend.now() + 0.5)
        assert engine.jobs["b"].hosts == ("h1",), "h0 offered again before its wait had passed"
        engine.add_hosts([Host("h0", 1.0, 1.0)])  # (its agent registered again)
        engine.arrive(JobSpec("c", backend.now(), 1, 0.5, 0.1, 60.0))
        _run_until_running(engine, backend, "c", 5.0)
        assert engine.jobs["c"].hosts == ("h0",)  # (the emptier host, now that it is offered)
