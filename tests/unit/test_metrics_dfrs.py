"""Seed 001 Sec. V's trace metrics (Table I, Figure 1, Table II) on hand-worked histories."""

import math

import pytest

from coordinator.metrics import (
    HOST_MEMORY_GB,
    History,
    Transition,
    decision_stats,
    degradation_factors,
    max_stretch,
    percentile,
    rescheduling_costs,
    trace_span,
    utilisation,
)
from coordinator.model import JobSpec, JobState

P, R, Z, D = JobState.PENDING, JobState.RUNNING, JobState.PAUSED, JobState.DONE


def _history(specs: list[JobSpec], transitions: list[Transition]) -> History:
    return History(specs={s.id: s for s in specs}, transitions=transitions)


def _two_jobs() -> History:
    """a runs alone on h0 for 100 s while b waits (memory); b then runs 50 s. Cluster: 2 hosts."""
    a = JobSpec("a", 0.0, 1, 1.0, 0.6, 100.0)
    b = JobSpec("b", 0.0, 1, 1.0, 0.6, 50.0)
    return _history([a, b], [
        Transition(0.0, "a", None, P), Transition(0.0, "b", None, P),
        Transition(0.0, "a", P, R, ("h0",), 1.0),
        Transition(100.0, "a", R, D, ("h0",), 1.0),
        Transition(100.0, "b", P, R, ("h1",), 1.0),
        Transition(150.0, "b", R, D, ("h1",), 1.0),
    ])


def test_max_stretch_is_the_worst_job_of_the_trace():
    h = _two_jobs()
    assert max_stretch(h) == pytest.approx(3.0)  # b: flow 150 / work 50
    assert max_stretch(h, bounded=False) == pytest.approx(3.0)


def test_degradation_factor_divides_by_the_best_algorithm_of_the_instance():
    f = degradation_factors({"x": 3.0, "y": 6.0, "z": math.nan, "w": 30.0})
    assert f["x"] == 1.0 and f["y"] == 2.0 and f["w"] == 10.0
    assert math.isnan(f["z"])  # a failed cell is neither best nor scored
    with pytest.raises(ValueError, match="no algorithm"):
        degradation_factors({"x": math.nan})


def test_utilisation_and_underutilisation_over_the_trace_span():
    h = _two_jobs()
    assert trace_span(h) == 150.0
    u = utilisation(h, capacity=2.0)
    assert u.used == pytest.approx((100 + 50) / 300)
    # idle capacity counts only while b is starved (0..100 s): 1 CPU x 100 s of 2 x 150
    assert u.under == pytest.approx(100 / 300)
    with pytest.raises(ValueError, match="capacity"):
        utilisation(h, 0.0)


def test_utilisation_of_a_run_cut_off_with_a_job_still_running_is_over_the_span_only():
    """a finishes at 50 s; b still runs when the run is cut off (a replay's --timeout) and its last change is at 100 s.
    The span ends at the last completion (50 s), and the CPU b held after it counted over that span: 1.5."""
    a, b = JobSpec("a", 0.0, 1, 1.0, 0.1, 50.0), JobSpec("b", 0.0, 1, 1.0, 0.1, 500.0)
    h = _history([a, b], [
        Transition(0.0, "a", None, P), Transition(0.0, "b", None, P),
        Transition(0.0, "a", P, R, ("h0",), 1.0), Transition(0.0, "b", P, R, ("h1",), 1.0),
        Transition(50.0, "a", R, D, ("h0",), 1.0),
        Transition(100.0, "b", R, R, ("h1",), 0.5, "share"),
    ])
    assert trace_span(h) == 50.0
    assert utilisation(h, capacity=2.0).used == pytest.approx(1.0)  # both hosts busy over the 50 s


def test_rescheduling_costs_count_and_size_every_preemption_and_migration():
    """c (2 tasks x 25% memory = 4 GB at 8 GB/node) is paused at 10 s and resumed in place at 20 s (a
    preemption), paused at 30 s and resumed elsewhere at 40 s (a preemption: 001 counts no migration when
    the move spans two events, Table II's GREEDY-PMTN), then moved at 50 s within one decision (a migration)."""
    c = JobSpec("c", 0.0, 2, 1.0, 0.25, 60.0)
    h = _history([c], [
        Transition(0.0, "c", None, P),
        Transition(0.0, "c", P, R, ("h0", "h1"), 1.0),
        Transition(10.0, "c", R, Z, ("h0", "h1"), 0.0),
        Transition(20.0, "c", Z, R, ("h0", "h1"), 1.0),
        Transition(30.0, "c", R, Z, ("h0", "h1"), 0.0),
        Transition(40.0, "c", Z, R, ("h2", "h3"), 1.0),
        Transition(50.0, "c", R, Z, ("h2", "h3"), 0.0),
        Transition(50.0, "c", Z, R, ("h0", "h3"), 1.0, "move"),  # (the engine's tag for a resume elsewhere in its plan)
        Transition(80.0, "c", R, D, ("h0", "h3"), 1.0),
    ])
    k = rescheduling_costs(h)
    assert HOST_MEMORY_GB == 8.0
    assert (k.preemptions, k.migrations, k.span_s) == (2, 1, 80.0)
    assert (k.pmtn_gb, k.mig_gb) == (8.0, 4.0)
    assert k.pmtn_per_hour == pytest.approx(90.0) and k.mig_per_hour == pytest.approx(45.0)
    assert (k.pmtn_per_job, k.mig_per_job) == (2.0, 1.0)
    assert k.pmtn_gb_s == pytest.approx(0.1) and k.mig_gb_s == pytest.approx(0.05)
    assert rescheduling_costs(h, host_memory_gb=2.0).pmtn_gb == 2.0
    with pytest.raises(ValueError, match="host_memory_gb"):
        rescheduling_costs(h, host_memory_gb=0)


def test_decision_time_distribution():
    s = decision_stats([0.004, 0.001, 0.003, 0.002])
    assert s.count == 4 and s.max_s == 0.004
    assert s.mean_s == pytest.approx(0.0025) and s.p50_s == pytest.approx(0.0025)
    assert s.p99_s == pytest.approx(0.00397)
    assert percentile([5.0], 99) == 5.0
    assert math.isnan(decision_stats([]).p99_s)
