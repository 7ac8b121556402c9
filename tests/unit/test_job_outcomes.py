"""``JobOutcomes`` folds each job's results as its transitions happen; it must give, job for job, what the
history-based count gave before it (kept here as the reference: 001 Table II's counting read off the whole
list of a job's transitions), on real simulations and on arbitrary transition sequences."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.experiments import homogeneous_hosts, simulate, simulate_results
from coordinator.metrics import History, JobOutcomes, JobResult, Transition, job_results, job_yield
from coordinator.model import JobSpec, JobState
from workloads.annotate import synthetic_trace


def _resumes(ts: Sequence[Transition]) -> Iterable[tuple[tuple[str, ...] | None, float | None, Transition]]:
    last_hosts: tuple[str, ...] | None = None
    paused_at: float | None = None
    for t in ts:
        if t.dst is JobState.PAUSED:
            paused_at = t.time
        if t.src is JobState.PAUSED and t.dst is JobState.RUNNING:
            yield last_hosts, paused_at, t
        if t.dst is JobState.RUNNING:
            last_hosts = t.hosts


def reference_results(history: History) -> list[JobResult]:
    """The count as it was made from a kept history (vcemu up to session 39), verbatim."""
    by_job: dict[str, list[Transition]] = {j: [] for j in history.specs}
    for t in history.transitions:
        by_job.setdefault(t.job, []).append(t)
    out = []
    for job, spec in history.specs.items():
        ts = by_job.get(job, [])
        start = next((t.time for t in ts if t.dst is JobState.RUNNING), None)
        end = next((t.time for t in ts if t.dst.finished), None)
        state = ts[-1].dst if ts else JobState.PENDING
        running = [t for t in ts if t.dst is JobState.RUNNING]
        final_yield = job_yield(running[-1].cpu, spec.cpu_need) if running else 0.0
        moved_at = {t.time for prev, paused_at, t in _resumes(ts)
                    if prev is not None and paused_at == t.time and Counter(prev) != Counter(t.hosts)}
        preemptions = sum(
            1 for t in ts if t.src is JobState.RUNNING and t.dst is JobState.PAUSED and t.time not in moved_at
        )
        migrations = sum(1 for t in ts if t.reason == "migrate") + len(moved_at)
        out.append(JobResult(job, spec.submit_time, start, end, spec.work, state, final_yield, preemptions, migrations))
    return out


@pytest.mark.parametrize("policy", ["easy", "greedy-pmtn", "greedy-pmtn-migr", "dynmcb8", "dynmcb8-per-600",
                                    "dynmcb8-asap-per", "dynmcb8-stretch-per"])
def test_the_fold_gives_the_history_count_on_a_simulation(policy: str) -> None:
    specs = synthetic_trace(3, 150, hosts=16, load=0.9)
    hosts = homogeneous_hosts(16)
    history = simulate(specs, policy, hosts, penalty=300.0)
    expected = reference_results(history)
    assert job_results(history) == expected
    assert simulate_results(specs, policy, hosts, penalty=300.0) == expected
    if policy.startswith(("greedy-pmtn", "dynmcb8")):  # the cases that matter were met
        assert sum(r.preemptions for r in expected) > 0
    if policy in ("greedy-pmtn-migr", "dynmcb8"):
        assert sum(r.migrations for r in expected) > 0


# (running and paused weighted up, and a time step of 0 likely: pauses and resumes in one instant are the hard case)
_STATES = [JobState.RUNNING, JobState.PAUSED] * 3 + [JobState.PENDING, JobState.DONE, JobState.FAILED]
_HOSTS = [(), ("a",), ("b",), ("a", "b"), ("b", "a"), ("a", "a")]


@st.composite
def _histories(draw: st.DrawFn) -> History:
    """Jobs with arbitrary transitions at non-decreasing times, few distinct ones (so that instants repeat)."""
    history = History()
    n_jobs = draw(st.integers(1, 3))
    for j in range(n_jobs):
        history.specs[f"j{j}"] = JobSpec(f"j{j}", 0.0, 2, 0.5, 0.1, 100.0)
    steps = draw(st.lists(
        st.tuples(st.integers(0, n_jobs - 1), st.sampled_from([0, 0, 1, 2]), st.sampled_from(_STATES),
                  st.sampled_from(_HOSTS), st.sampled_from([0.0, 0.25, 0.5]), st.sampled_from(["", "migrate", "done"])),
        max_size=40))
    now = 0.0
    last: dict[str, JobState | None] = {}
    for job, advance, dst, hosts, cpu, reason in steps:
        now += advance
        name = f"j{job}"
        history.transitions.append(Transition(now, name, last.get(name), dst, hosts, cpu, reason))
        last[name] = dst
    history.specs["never"] = JobSpec("never", 0.0, 1, 0.5, 0.1, 10.0)  # no transition: pending
    return history


@settings(max_examples=400, deadline=None)
@given(_histories())
def test_the_fold_gives_the_history_count_on_any_ordered_transitions(history: History) -> None:
    assert job_results(history) == reference_results(history)


def test_a_pause_and_a_resume_elsewhere_in_one_instant_is_one_migration_not_a_preemption() -> None:
    outcomes = JobOutcomes()
    r, p = JobState.RUNNING, JobState.PAUSED
    for t in [Transition(0.0, "j", JobState.PENDING, r, ("a",), 0.5), Transition(5.0, "j", r, p, ("a",)),
              Transition(5.0, "j", p, r, ("b",), 0.25),  # moved in the decision at 5 s
              Transition(9.0, "j", r, p, ("b",)), Transition(12.0, "j", p, r, ("a",), 0.5),  # preempted at 9 s
              Transition(20.0, "j", r, JobState.DONE, ("a",), 0.5)]:
        outcomes(t)
    (result,) = outcomes.results({"j": JobSpec("j", 0.0, 1, 0.5, 0.1, 10.0)})
    assert (result.start, result.end, result.preemptions, result.migrations) == (0.0, 20.0, 1, 1)
    assert result.final_yield == 1.0 and result.state is JobState.DONE


def test_a_resume_on_the_same_hosts_in_another_order_is_no_migration() -> None:
    """The hosts are compared as a multiset: the same nodes in another task order are not a move (the pause is
    a preemption, as before)."""
    r, p = JobState.RUNNING, JobState.PAUSED
    history = History(specs={"j": JobSpec("j", 0.0, 2, 0.5, 0.1, 10.0)}, transitions=[
        Transition(0.0, "j", JobState.PENDING, r, ("a", "b"), 0.5), Transition(5.0, "j", r, p, ("a", "b")),
        Transition(5.0, "j", p, r, ("b", "a"), 0.5)])
    (result,) = job_results(history)
    assert (result.preemptions, result.migrations) == (1, 0)
    assert job_results(history) == reference_results(history)
