"""New capacity is a reason to decide (a review found it was not): under FCFS with one host busy and a job
pending, a second agent's host stayed idle until the first job ended, since ``Engine.add_hosts`` queued nothing
and a policy with no period decides only at submissions, completions and its jobs' own timers.

On the simulator backend (virtual time), so each test is exact and takes milliseconds."""

from __future__ import annotations

import pytest

from coordinator.backends.sim import SimBackend
from coordinator.engine import Engine
from coordinator.model import Host, JobSpec, JobState, Tick
from coordinator.policies import get_policy


def busy_one_host(policy: str) -> Engine:
    """One host running a 100-s job, a second such job waiting (pending, or paused by a preemptive policy)."""
    engine = Engine(get_policy(policy), SimBackend(), [Host("h0")])
    engine.schedule_arrivals([JobSpec("a", 0.0, 1, 1.0, 0.6, 100.0), JobSpec("b", 0.0, 1, 1.0, 0.6, 100.0)])
    engine.step(until=1.0)
    assert sorted(r.state.value for r in engine.jobs.values()) in (["pending", "running"], ["paused", "running"])
    return engine


@pytest.mark.parametrize("policy", ["fcfs", "easy", "greedy"])  # greedy: its backoff had b wait until 2 s + 2^k
def test_a_pending_job_starts_on_a_host_added_while_others_are_busy(policy: str) -> None:
    engine = busy_one_host(policy)
    assert engine.jobs["a"].state is JobState.RUNNING
    engine.add_hosts([Host("h1")])
    engine.step(until=2.0)
    b = engine.jobs["b"]
    assert b.state is JobState.RUNNING and b.hosts == ("h1",)
    assert b.first_start is not None and b.first_start < 2.0  # not at 100 s, when a ends


@pytest.mark.parametrize("policy", ["greedy-pmtn", "dynmcb8"])
def test_a_job_set_aside_runs_on_a_host_added(policy: str) -> None:
    """GREEDY-PMTN pauses the older job for the newer (both need most of the host's memory), DYNMCB8 sets the
    lower-priority one aside; a new host takes it at once (DYNMCB8 repacks on the Tick)."""
    engine = busy_one_host(policy)
    waiting = [j for j, r in engine.jobs.items() if r.state is not JobState.RUNNING]
    assert len(waiting) == 1
    engine.add_hosts([Host("h1")])
    engine.step(until=2.0)
    assert all(r.state is JobState.RUNNING for r in engine.jobs.values())


def test_known_hosts_or_an_idle_cluster_queue_no_decision() -> None:
    engine = busy_one_host("fcfs")
    timers = len(engine._timers)
    engine.add_hosts([Host("h0")])  # already there
    assert len(engine._timers) == timers
    idle = Engine(get_policy("fcfs"), SimBackend(), [Host("h0")])
    idle.add_hosts([Host("h1")])
    assert idle._timers == []


@pytest.mark.parametrize("policy", ["dynmcb8-per", "dynmcb8-asap-per", "dynmcb8-stretch-per"])
def test_a_periodic_policys_schedule_is_left_alone(policy: str) -> None:
    """Its periodic Ticks are its schedule: new hosts are seen at the next one, and no second chain starts."""
    engine = Engine(get_policy(policy), SimBackend(), [Host("h0")])
    engine.schedule_arrivals([JobSpec("a", 0.0, 1, 1.0, 0.6, 10_000.0)])
    engine.step(until=1.0)
    ticks = sorted(t.time for t in engine._timers if t.payload == Tick())
    engine.add_hosts([Host("h1")])
    assert sorted(t.time for t in engine._timers if t.payload == Tick()) == ticks


@pytest.mark.parametrize("policy", ["greedy", "greedy-pmtn-migr", "dynmcb8"])
def test_every_other_policy_takes_the_decision_in_its_stride(policy: str) -> None:
    """The decision is a plain ``Tick()``: each policy with no period either acts on the new room or does
    nothing, and the run still ends with every job done."""
    engine = Engine(get_policy(policy), SimBackend(), [Host("h0")])
    jobs = [JobSpec(j, 0.0, 1, 1.0, 0.6, 50.0) for j in "abc"]
    engine.schedule_arrivals(jobs)
    engine.step(until=1.0)
    engine.add_hosts([Host("h1")])
    engine.run(until=10_000.0)
    assert all(r.state is JobState.DONE for r in engine.jobs.values())


def test_a_finish_a_hair_before_an_arrival_does_not_record_the_arrival_before_its_submit_time() -> None:
    """Dependency review (h215), hypothesis 6.100's example of test_props_engine's bounds: jobs ending at
    9.999999999999998 stopped the simulated clock there, and the engine, firing the arrivals at 10.0 as due within its
    1e-9 s tolerance, recorded them submitted and started at 9.999999999999998, before their submit time."""
    from coordinator.experiments import simulate
    from coordinator.model import Host, JobSpec

    hosts = (Host("h0", cpu=1.0, mem=1.0), Host("h1", cpu=1.0, mem=0.5), Host("h2", cpu=0.25, mem=0.75))
    third = 1 / 3
    specs = [JobSpec("j00", 0.0, 6, 0.1, third, 1e-06), JobSpec("j01", 0.0, 1, third, 1.0, 1e-06),
             JobSpec("j02", 0.0, 1, 1.0, 0.25, 1e-06), JobSpec("j03", 10.0, 2, 0.25, 0.1, 1e-06),
             JobSpec("j05", 0.0, 2, 0.9999999999999999, third, 1.0), JobSpec("j07", 0.0, 1, 1.0, 0.5, 1.0),
             JobSpec("j08", 0.0, 1, 0.5, 0.1, 1.0), JobSpec("j10", 0.0, 3, third, 0.010000000000000002, 1.1),
             JobSpec("j11", 10.0, 4, 0.010000000000000002, 0.010000000000000002, 1.1)]
    history = simulate(specs, "greedy", hosts, 5.0)
    early = [(t.job, t.time) for t in history.transitions if t.time < history.specs[t.job].submit_time]
    assert early == []
    assert {t.time for t in history.transitions if t.job in ("j03", "j11") and t.reason == "submitted"} == {10.0}
