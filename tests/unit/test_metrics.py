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


def test_a_pause_and_resume_elsewhere_in_one_plan_is_one_migration_not_a_preemption():
    h = History()
    h.specs["a"] = JobSpec("a", 0.0, 3, 1.0, 0.1, 20.0)
    h.transitions += [
        Transition(0.0, "a", JobState.PENDING, JobState.RUNNING, ("h1", "h1", "h2"), 1.0),
        Transition(5.0, "a", JobState.RUNNING, JobState.PAUSED, ("h1", "h1", "h2"), 0.0, "pause"),
        Transition(5.0, "a", JobState.PAUSED, JobState.RUNNING, ("h1", "h2", "h2"), 1.0, "move"),  # (the engine's tag)
        Transition(25.0, "a", JobState.RUNNING, JobState.DONE, ("h1", "h2", "h2"), 1.0, "completed"),
    ]
    (r,) = job_results(h)
    assert (r.preemptions, r.migrations) == (0, 1)


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


# ---- added by the mutation review: summaries, utilisation and decision times on hand-worked numbers ----------


def _result(job: str, flow: float, work: float, state: JobState = JobState.DONE):
    from coordinator.metrics import JobResult

    return JobResult(job, 0.0, 0.0, flow, work, state, 1.0, 0, 0)


def test_summary_scores_done_jobs_only_with_arithmetic_means() -> None:
    """001 Sec. V scores the jobs that completed; a failed job's end is no outcome (mean, not median)."""
    rs = [
        _result("a", 60.0, 60.0),  # stretch 1, bounded 1
        _result("b", 120.0, 60.0),  # 2, 2
        _result("c", 360.0, 60.0),  # 6, 6
        _result("d", 20.0, 10.0),  # 2, but bounded max(20,30)/max(10,30) = 1
        _result("f", 1000.0, 10.0, JobState.FAILED),  # would be stretch 100: must not count
    ]
    s = summarize(rs)
    assert (s.jobs, s.completed) == (5, 4)
    assert s.max_stretch == 6.0 and s.max_bounded_stretch == 6.0
    assert s.mean_stretch == pytest.approx((1 + 2 + 6 + 2) / 4)  # 2.75; the median would be 2
    assert s.mean_bounded_stretch == pytest.approx((1 + 2 + 6 + 1) / 4)  # 2.5; the median would be 1.5


def test_max_stretch_bounded_flag_selects_the_bound() -> None:
    """001 Sec. II-B.2: a 10 s job done 20 s after submission has stretch 2 and bounded stretch 30/30 = 1."""
    from coordinator.metrics import max_stretch

    h = History()
    h.specs["a"] = JobSpec("a", 0.0, 1, 1.0, 0.1, 10.0)
    h.transitions += [
        Transition(10.0, "a", JobState.PENDING, JobState.RUNNING, ("h0",), 1.0),
        Transition(20.0, "a", JobState.RUNNING, JobState.DONE, ("h0",), 1.0, "completed"),
    ]
    assert max_stretch(h) == 1.0
    assert max_stretch(h, bounded=False) == 2.0


def test_degradation_factor_refuses_a_zero_best() -> None:
    """001 Sec. V: the ratio to the best is undefined when the best maximum stretch is 0."""
    from coordinator.metrics import degradation_factors

    with pytest.raises(ValueError, match="must be > 0"):
        degradation_factors({"a": 0.0, "b": 2.0})


def _one_job_history(tasks: int, need: float, cpu: float, end: float) -> History:
    h = History()
    h.specs["a"] = JobSpec("a", 0.0, tasks, need, 0.1, end)
    h.transitions += [
        Transition(0.0, "a", JobState.PENDING, JobState.RUNNING, tuple(f"h{k}" for k in range(tasks)), cpu),
        Transition(end, "a", JobState.RUNNING, JobState.DONE, (), cpu, "completed"),
    ]
    return h


def test_utilisation_counts_every_task_of_a_job() -> None:
    """A 2-task job at full CPU on a 4-CPU cluster for the whole span uses 2/4 of it, wanting nothing more."""
    from coordinator.metrics import utilisation

    u = utilisation(_one_job_history(tasks=2, need=1.0, cpu=1.0, end=10.0), capacity=4.0)
    assert u.used == pytest.approx(0.5)
    assert u.under == 0.0


def test_utilisation_counts_idle_cpu_beside_a_job_below_its_need_as_under() -> None:
    """001 Sec. II-B.2: a job running at yield 0.5 is unmet demand, so the 1.5 idle CPUs of 2 are underutilised."""
    from coordinator.metrics import utilisation

    u = utilisation(_one_job_history(tasks=1, need=1.0, cpu=0.5, end=20.0), capacity=2.0)
    assert u.used == pytest.approx(0.25)  # 0.5 CPU of 2 for 20 s
    assert u.under == pytest.approx(0.75)  # 1.5 idle CPUs of 2 for 20 s


def test_utilisation_never_exceeds_the_capacity() -> None:
    """Allocations beyond the stated capacity (2 tasks x 1.0 on a capacity of 1) count as full use, not 200%."""
    from coordinator.metrics import utilisation

    u = utilisation(_one_job_history(tasks=2, need=1.0, cpu=1.0, end=10.0), capacity=1.0)
    assert u.used == pytest.approx(1.0)


def test_decision_stats_percentiles_by_hand() -> None:
    """001 Sec. V's decision times: p50/p90/p99 interpolate between ranks of 1..10 s (numpy's default)."""
    from coordinator.metrics import decision_stats

    d = decision_stats([float(k) for k in range(10, 0, -1)])
    assert d.count == 10 and d.mean_s == pytest.approx(5.5) and d.max_s == 10.0
    assert d.p50_s == pytest.approx(5.5)  # rank 4.5 of 0..9
    assert d.p90_s == pytest.approx(9.1)  # rank 8.1: 9 + 0.1
    assert d.p99_s == pytest.approx(9.91)  # rank 8.91: 9 + 0.91
