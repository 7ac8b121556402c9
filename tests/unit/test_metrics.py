"""Metrics exactly as seed 001 Sec. II-B.2 and III-A define them, on hand-worked numbers."""

import math

import pytest

from coordinator.backends.sim import SimBackend
from coordinator.metrics import (
    History,
    Transition,
    bounded_stretch,
    job_results,
    priority,
    stretch,
    summarize,
)
from coordinator.model import JobSpec, JobState


def test_bounded_stretch_uses_the_30_second_bound():
    assert bounded_stretch(10.0, 5.0) == 1.0  # both below the bound
    assert bounded_stretch(45.0, 10.0) == 1.5  # a short job: flow / 30
    assert bounded_stretch(120.0, 60.0) == 2.0  # above the bound: the plain stretch
    assert stretch(120.0, 60.0) == 2.0


def test_priority_is_flow_over_virtual_time_squared():
    assert priority(10.0, 0.0) == math.inf  # never ran: infinite priority
    assert priority(10.0, 5.0) == pytest.approx(30.0 / 25.0)  # flow below the 30 s bound
    assert priority(100.0, 5.0) == pytest.approx(100.0 / 25.0)


def test_virtual_time_is_the_integral_of_the_yield():
    """001 Sec. III-A's example: 10 s at yield 1, paused 2 minutes, 30 s at yield 0.5 -> 25 s."""
    sim = SimBackend()
    job = JobSpec("a", 0.0, 1, 0.5, 0.1, 1000.0)
    sim.start(job, ["h0"], 0.5)  # yield 1
    sim.advance(10.0)
    sim.pause("a")
    sim.advance(130.0)
    sim.resume("a", ["h0"], 0.25)  # yield 0.5
    sim.advance(160.0)
    assert sim.now() == 160.0
    assert sim.progress("a") * job.work == pytest.approx(25.0)


def test_job_results_from_a_history():
    h = History()
    h.specs["a"] = JobSpec("a", 5.0, 1, 1.0, 0.1, 20.0)
    h.transitions += [
        Transition(5.0, "a", None, JobState.PENDING),
        Transition(7.0, "a", JobState.PENDING, JobState.RUNNING, ("h0",), 1.0),
        Transition(9.0, "a", JobState.RUNNING, JobState.RUNNING, ("h0",), 0.5, "share"),
        Transition(10.0, "a", JobState.RUNNING, JobState.PAUSED, ("h0",), 0.0, "pause"),
        Transition(12.0, "a", JobState.PAUSED, JobState.RUNNING, ("h1",), 0.5, "resume"),
        Transition(65.0, "a", JobState.RUNNING, JobState.DONE, ("h1",), 0.5, "completed"),
    ]
    (r,) = job_results(h)
    assert (r.wait, r.flow_time, r.run_time) == (2.0, 60.0, 58.0)
    assert r.stretch == 3.0 and r.bounded_stretch == 2.0
    assert r.final_yield == 0.5
    assert (r.preemptions, r.migrations) == (1, 0)  # resumed elsewhere at a later event: preempted only
    s = summarize([r])
    assert (s.jobs, s.completed, s.max_stretch) == (1, 1, 3.0)


def test_a_pause_and_resume_elsewhere_at_once_is_one_migration_not_a_preemption():
    h = History()
    h.specs["a"] = JobSpec("a", 0.0, 3, 1.0, 0.1, 20.0)
    h.transitions += [
        Transition(0.0, "a", JobState.PENDING, JobState.RUNNING, ("h1", "h1", "h2"), 1.0),
        Transition(5.0, "a", JobState.RUNNING, JobState.PAUSED, ("h1", "h1", "h2"), 0.0, "pause"),
        Transition(5.0, "a", JobState.PAUSED, JobState.RUNNING, ("h1", "h2", "h2"), 1.0, "resume"),
        Transition(25.0, "a", JobState.RUNNING, JobState.DONE, ("h1", "h2", "h2"), 1.0, "completed"),
    ]
    (r,) = job_results(h)
    assert (r.preemptions, r.migrations) == (0, 1)  # same set of hosts, other task counts: still a move


def test_a_stretch_difference_only_for_a_job_done_both_ways() -> None:
    """``vcemu demo`` and ``vcemu replay`` compare a job's live and simulated stretch; a job that failed live has an
    end, so a stretch, and was counted (a failed start 1 ms in: a 99.98% difference in the median)."""
    from coordinator.metrics import JobResult, stretch_difference

    def result(state: JobState, end: float) -> JobResult:
        return JobResult("a", 0.0, 0.0, end, 100.0, state, 1.0, 0, 0)

    done, failed = result(JobState.DONE, 110.0), result(JobState.FAILED, 0.001)
    assert stretch_difference(done, result(JobState.DONE, 100.0)) == pytest.approx(0.1)
    assert stretch_difference(failed, result(JobState.DONE, 100.0)) is None
    assert stretch_difference(done, result(JobState.CANCELLED, 100.0)) is None
    assert stretch_difference(None, done) is None and stretch_difference(done, None) is None
