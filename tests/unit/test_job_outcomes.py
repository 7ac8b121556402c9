"""``JobOutcomes`` folds each job's results as its transitions happen: it must give, job for job, the count read off
the whole list of a job's transitions (001 Table II's counting: a pause and a resume elsewhere in one plan, which the
engine records as a ``"move"``, is a migration and not a preemption), on real simulations and on arbitrary transition
sequences; and the engine must tag a resume ``"move"`` exactly when its plan paused the job on other hosts."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.backends.sim import SimBackend
from coordinator.engine import Engine
from coordinator.experiments import homogeneous_hosts, simulate, simulate_results
from coordinator.metrics import History, JobOutcomes, JobResult, Transition, job_results, job_yield
from coordinator.model import Host, JobSpec, JobState, Snapshot, Stimulus, Submit
from coordinator.plan import Pause, Plan, Resume, Start
from workloads.annotate import synthetic_trace


def reference_results(history: History) -> list[JobResult]:
    """The count made from a kept history, each job's transitions read as a whole (the same rule as the fold's: this
    checks that folding as transitions come gives the whole history's count; the rule itself, which resumes are
    moves, is the engine's tag, checked below on plans and on a simulation)."""
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
        moves = sum(1 for t in ts if t.src is JobState.PAUSED and t.dst is JobState.RUNNING and t.reason == "move")
        preemptions = sum(1 for t in ts if t.src is JobState.RUNNING and t.dst is JobState.PAUSED) - moves
        migrations = sum(1 for t in ts if t.reason == "migrate") + moves
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
    assert all(r.preemptions >= 0 and r.migrations >= 0 for r in expected)
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
                  st.sampled_from(_HOSTS), st.sampled_from([0.0, 0.25, 0.5]),
                  st.sampled_from(["", "migrate", "done", "move"])),
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


def test_a_pause_and_a_resume_elsewhere_in_one_plan_is_one_migration_not_a_preemption() -> None:
    outcomes = JobOutcomes()
    r, p = JobState.RUNNING, JobState.PAUSED
    for t in [Transition(0.0, "j", JobState.PENDING, r, ("a",), 0.5), Transition(5.0, "j", r, p, ("a",), 0.0, "pause"),
              Transition(5.0, "j", p, r, ("b",), 0.25, "move"),  # moved in the decision at 5 s
              Transition(9.0, "j", r, p, ("b",), 0.0, "pause"),
              Transition(9.0, "j", p, r, ("a",), 0.5, "resume"),  # preempted at 9 s, resumed by the next decision
              Transition(20.0, "j", r, JobState.DONE, ("a",), 0.5)]:
        outcomes(t)
    (result,) = outcomes.results({"j": JobSpec("j", 0.0, 1, 0.5, 0.1, 10.0)})
    assert (result.start, result.end, result.preemptions, result.migrations) == (0.0, 20.0, 1, 1)
    assert result.final_yield == 1.0 and result.state is JobState.DONE


@dataclass(frozen=True)
class _Plans:
    """A policy that answers job ``x``'s submission with a plan of its own: the plans under test."""

    plans: dict[str, Plan]
    name: str = "plans"
    period: float | None = None

    def decide(self, snap: Snapshot, stim: Stimulus) -> Plan:
        return self.plans.get(stim.job, Plan()) if isinstance(stim, Submit) else Plan()


def _reasons(plans: dict[str, Plan], hosts: int = 3) -> list[tuple[float, str, str]]:
    """(time, job, reason) of each resume, with job ``j`` (2 tasks) started on h0 and h1, then ``x`` and ``y``
    submitted at the same instant (two decisions, ``x``'s first), each plan also starting its own job (x on h0, y
    on h2)."""
    plans = {job: Plan((*plans.get(job, Plan()).actions, Start(job, (on,), 0.5))) for job, on in (("x", "h0"),
                                                                                                    ("y", "h2"))}
    engine = Engine(_Plans(plans), SimBackend(), [Host(f"h{i}") for i in range(hosts)])
    engine.arrive(JobSpec("j", 0.0, 2, 0.5, 0.1, 100.0))
    engine.apply(Plan((Start("j", ("h0", "h1"), 0.5),)))
    history = engine.run([JobSpec("x", 1.0, 1, 0.5, 0.1, 1.0), JobSpec("y", 1.0, 1, 0.5, 0.1, 1.0)])
    return [(t.time, t.job, t.reason) for t in history.transitions if t.src is JobState.PAUSED]


def test_the_engine_records_a_resume_elsewhere_in_the_plan_that_paused_the_job_as_a_move() -> None:
    one_plan = {"x": Plan((Pause("j"), Resume("j", ("h1", "h2"), 0.5)))}
    assert _reasons(one_plan) == [(1.0, "j", "move")]


def test_a_resume_on_the_same_hosts_in_another_order_is_no_move() -> None:
    """The hosts are compared as a multiset: the same nodes in another task order are not a move, one of the same
    nodes holding both tasks is."""
    assert _reasons({"x": Plan((Pause("j"), Resume("j", ("h1", "h0"), 0.5)))}) == [(1.0, "j", "resume")]
    assert _reasons({"x": Plan((Pause("j"), Resume("j", ("h1", "h1"), 0.5)))}) == [(1.0, "j", "move")]


def test_a_resume_elsewhere_by_a_later_decision_at_the_same_instant_follows_a_preemption() -> None:
    """Property review: simultaneous submissions are one decision each; GREEDY-PMTN paused a job at one and resumed it
    elsewhere at the next, and the fold, keyed on the instant, counted a migration (001 Table II: GREEDY-PMTN
    migrates nothing)."""
    two_plans = {"x": Plan((Pause("j"),)), "y": Plan((Resume("j", ("h1", "h2"), 0.5),))}
    assert _reasons(two_plans) == [(1.0, "j", "resume")]
    hosts = [Host(f"h{i}") for i in range(5)]
    specs = [JobSpec("j00", 0, 1, 1.0, 1.0, 1e-6), JobSpec("j01", 0, 5, 1.0, 1.0, 1e-6),
             JobSpec("j02", 0, 1, 1.0, 1.0, 1e-6)]
    results = {r.job: r for r in job_results(simulate(specs, "greedy-pmtn", hosts))}
    assert sum(r.migrations for r in results.values()) == 0
    assert (results["j00"].preemptions, results["j00"].migrations) == (1, 0)
