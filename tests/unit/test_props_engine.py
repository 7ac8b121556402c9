"""Property-based tests of the DFRS simulation end to end: random small clusters and workloads through the engine, the
simulator backend and each of seed 001's nine policies, checked from the recorded history (not from a policy's own
view). Each property is one the seeds or the code's docs state; the examples are derandomized, so a failure is
reproducible.
"""

from __future__ import annotations

import math
import signal
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinator.experiments import simulate
from coordinator.metrics import History, JobResult, job_results
from coordinator.model import Host, InvalidJob, JobSpec, JobState
from coordinator.policies import get_policy
from coordinator.policy_names import POLICY_NAMES

#: 001's nine policies, the periodic ones at a period a small workload sees several times.
POLICIES = tuple(f"{p}-60" if p.endswith("-per") else p for p in POLICY_NAMES)
#: The policies 001 Sec. III-A/IV-B says never pause a running job (FCFS, EASY, GREEDY).
NEVER_PAUSE = ("fcfs", "easy", "greedy")
#: Capacity slack: the engine's own check allows 1e-6 (``Engine._check``).
TOL = 1e-6
#: Wall seconds one simulation may take: a small workload takes milliseconds; more is a run that does not end.
WALL_S = 20

PROPS = settings(derandomize=True, deadline=None, max_examples=25,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


class _Overtime(Exception):
    pass


@contextmanager
def _bounded(seconds: int) -> Iterator[None]:
    """Fail a run that takes more than ``seconds`` of wall time (a simulator spinning without end)."""

    def _raise(*_: object) -> None:
        raise _Overtime(f"the run took more than {seconds} s")

    old = signal.signal(signal.SIGALRM, _raise)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@st.composite
def clusters(draw: st.DrawFn, equal: bool = False) -> tuple[Host, ...]:
    """1-6 hosts; with ``equal`` False, of unequal CPU and memory (README: a task of need 1 on a quarter-core host
    runs at yield 0.25)."""
    n = draw(st.integers(1, 6))
    if equal:
        return tuple(Host(f"h{i}") for i in range(n))
    size = st.sampled_from([1.0, 1.0, 0.75, 0.5, 0.25])
    return tuple(Host(f"h{i}", draw(size), draw(size)) for i in range(n))


#: Release times with many ties (0 and 10 often), work from the least a job may have to an hour.
_submit = st.one_of(st.just(0.0), st.just(10.0), st.integers(0, 2000).map(float))
_work = st.one_of(st.just(1e-6), st.just(1.0), st.floats(1.0, 3600.0))
_fraction = st.one_of(st.sampled_from([1.0, 0.5, 0.25, 0.1, 1 / 3]), st.floats(0.01, 1.0))


@st.composite
def workloads(draw: st.DrawFn, hosts: tuple[Host, ...], policy: str) -> list[JobSpec]:
    """1-30 jobs, keeping those ``hosts`` can hold under ``policy`` (what ``Engine.arrive`` would refuse is tested
    apart); at least one."""
    refuse = getattr(get_policy(policy), "refuse", None)
    jobs = []
    for k in range(draw(st.integers(1, 30))):
        spec = JobSpec(f"j{k:02d}", draw(_submit), draw(st.integers(1, 7)), draw(_fraction), draw(_fraction),
                       draw(_work))
        try:
            spec.validate(hosts)
        except InvalidJob:
            continue
        if refuse is None or refuse(spec, hosts) is None:
            jobs.append(spec)
    if not jobs:
        jobs.append(JobSpec("j99", 0.0, 1, 0.5, min(h.mem for h in hosts), 5.0))
    return jobs


def _run(specs: Sequence[JobSpec], policy: str, hosts: Sequence[Host], penalty: float) -> History:
    with _bounded(WALL_S):
        return simulate(specs, policy, hosts, penalty)


def _penalty(policy: str, penalty: float) -> float:
    """A periodic policy's penalty kept within its period: a shorter period thrashes and may never end, as 001 Sec.
    IV-A says and ``policy_names.thrashing`` warns (said, not refused)."""
    return min(penalty, 30.0) if "-per" in policy else penalty


def _load(history: History) -> Iterator[tuple[float, dict[str, float], dict[str, float], dict[str, tuple[str, ...]]]]:
    """Per instant, once all its transitions are in: each host's CPU and memory held by running jobs, and where each
    running job is. A paused job holds neither (``Engine._held``: its memory is free to the policies)."""
    placed: dict[str, tuple[tuple[str, ...], float]] = {}
    trs = history.transitions
    i = 0
    while i < len(trs):
        now = trs[i].time
        while i < len(trs) and trs[i].time == now:
            t = trs[i]
            if t.dst is JobState.RUNNING:
                placed[t.job] = (t.hosts, t.cpu)
            else:
                placed.pop(t.job, None)
            i += 1
        cpu: dict[str, float] = defaultdict(float)
        mem: dict[str, float] = defaultdict(float)
        for job, (hosts, share) in placed.items():
            for h in hosts:
                cpu[h] += share
                mem[h] += history.specs[job].mem
        yield now, cpu, mem, {j: h for j, (h, _) in placed.items()}


def _fastest(spec: JobSpec, hosts: Sequence[Host]) -> float:
    """The highest yield ``spec`` can ever have: its need, or the CPU of the largest host, over its need."""
    return min(spec.cpu_need, max(h.cpu for h in hosts)) / spec.cpu_need


def _work_done(history: History, penalty: float) -> dict[str, float]:
    """Each job's work as its history accounts for it: its yield (share over need) over the time it ran, less the
    ``penalty`` after each resume or migration, in which it makes no progress (sim.py, 001 Sec. IV-A)."""
    runs: dict[str, tuple[float, float] | None] = {}
    blocked: dict[str, float] = defaultdict(lambda: -math.inf)
    done: dict[str, float] = defaultdict(float)
    for t in history.transitions:
        run = runs.get(t.job)
        if run is not None:
            since, share = run
            done[t.job] += share / history.specs[t.job].cpu_need * max(0.0, t.time - max(since, blocked[t.job]))
        if t.reason in ("resume", "move", "migrate"):
            blocked[t.job] = t.time + penalty
        runs[t.job] = (t.time, t.cpu) if t.dst is JobState.RUNNING else None
    return done


def _check_run(history: History, hosts: Sequence[Host], specs: Sequence[JobSpec],
               penalty: float = 0.0) -> list[JobResult]:
    cap = {h.name: h for h in hosts}
    for now, cpu, mem, where in _load(history):
        for h in cpu:
            assert cpu[h] <= cap[h].cpu + TOL, f"t={now}: host {h} holds CPU {cpu[h]} of {cap[h].cpu}"
            assert mem[h] <= cap[h].mem + TOL, f"t={now}: host {h} holds memory {mem[h]} of {cap[h].mem}"
        for job, on in where.items():
            assert len(on) == history.specs[job].tasks, f"t={now}: {job} runs {len(on)} tasks"
    ends = Counter(t.job for t in history.transitions if t.dst.finished)
    assert set(ends) == {s.id for s in specs} and set(ends.values()) == {1}, ends
    for t in history.transitions:
        assert t.time >= history.specs[t.job].submit_time, f"{t} before its job's submission"
        if t.dst is JobState.RUNNING:
            assert 0.0 < t.cpu <= history.specs[t.job].cpu_need + 1e-9, t
    results = job_results(history)
    for r in results:
        spec = history.specs[r.job]
        assert r.state is JobState.DONE, r
        assert r.end is not None and r.start is not None
        # 001 Sec. II-B: a job progresses at its yield, at most its fastest; rounding of end - submit allowed for.
        least = spec.work / _fastest(spec, hosts)
        slack = 4 * math.ulp(max(r.end, 1.0)) + 1e-9 * least
        assert r.end - spec.submit_time >= least - slack, (r, least)
        assert 0.0 <= r.final_yield <= 1.0 + 1e-9, r
        assert r.preemptions >= 0 and r.migrations >= 0
    # Work conservation (sim.py's fluid model): the recorded shares, times and penalties account for each job's
    # whole work, no more and no less (a share change the history missed, or a penalty not applied, would show).
    done = _work_done(history, penalty)
    for spec in specs:
        assert math.isclose(done[spec.id], spec.work, rel_tol=1e-6, abs_tol=1e-9), (spec, done[spec.id])
    return results


def _check_max_min(history: History, hosts: Sequence[Host]) -> None:
    """At every instant each running job's yield is at least 1 / max(1, Λ), Λ the largest CPU load (needs over
    capacity) of any host: GREEDY's max-min step, which the average-yield step only raises (dfrs.reshare)."""
    cap = {h.name: h.cpu for h in hosts}
    placed: dict[str, tuple[tuple[str, ...], float]] = {}
    for i, t in enumerate(history.transitions):
        if t.dst is JobState.RUNNING:
            placed[t.job] = (t.hosts, t.cpu)
        else:
            placed.pop(t.job, None)
        if i + 1 < len(history.transitions) and history.transitions[i + 1].time == t.time:
            continue  # (the instant is not over)
        load: dict[str, float] = defaultdict(float)
        for job, (on, _) in placed.items():
            for h in on:
                load[h] += history.specs[job].cpu_need
        floor = 1.0 / max([1.0, *(load[h] / cap[h] for h in load)])
        for job, (_, share) in placed.items():
            assert share / history.specs[job].cpu_need >= floor - 1e-6, (t.time, job, share, floor)


@pytest.mark.parametrize("policy", POLICIES)
@PROPS
@given(data=st.data(), penalty=st.sampled_from([0.0, 5.0, 300.0]))
def test_capacity_completion_and_bounds(policy: str, data: st.DataObject, penalty: float) -> None:
    """On any cluster the policy supports, no host ever holds more CPU or memory than it has, every job that fits
    completes exactly once, no sooner than its work at its fastest yield allows, its tasks are on as many hosts as it
    has, and the history accounts for exactly its work; the non-preemptive policies never pause, GREEDY-PMTN admits
    every job at once, and GREEDY's family keeps every yield at or above the max-min yield (001 Sec. III-A, IV-B)."""
    hosts = data.draw(clusters(equal=policy in ("fcfs", "easy")))  # (unequal batch hosts: see test_batch_unequal)
    specs = data.draw(workloads(hosts, policy))
    penalty = _penalty(policy, penalty)
    history = _run(specs, policy, hosts, penalty)
    results = _check_run(history, hosts, specs, penalty)
    if policy in NEVER_PAUSE:
        assert not any(t.dst is JobState.PAUSED for t in history.transitions)
        assert all(r.preemptions == 0 and r.migrations == 0 for r in results)
    if policy.startswith("greedy-pmtn"):  # dfrs.GreedyPmtn: "every new job is admitted at once"
        assert all(r.start == r.submit for r in results), results
    if policy == "greedy-pmtn":  # 001 Table II: GREEDY-PMTN migrates nothing (metrics.JobOutcomes)
        assert all(r.migrations == 0 for r in results), results
    if policy.startswith("greedy"):  # 001 Sec. III-A: every running job gets at least the max-min yield 1/max(1, Λ)
        _check_max_min(history, hosts)


@pytest.mark.parametrize("policy", ["fcfs", "easy"])
@settings(PROPS, max_examples=15)
@given(data=st.data())
def test_batch_unequal_hosts(policy: str, data: st.DataObject) -> None:
    """FCFS and EASY on hosts of unequal CPU or memory (README: "a task of need 1 on a quarter-core host runs at
    yield 0.25 ... as in the simulator"; ``vcemu replay --cpus-per-host 0.45,0.15``): their plans stay within every
    host, and every job they accepted completes."""
    hosts = data.draw(clusters())
    specs = data.draw(workloads(hosts, policy))
    _check_run(_run(specs, policy, hosts, 0.0), hosts, specs)


@pytest.mark.parametrize("policy", POLICIES)
@settings(PROPS, max_examples=8)
@given(data=st.data())
def test_deterministic_and_input_order_free(policy: str, data: st.DataObject) -> None:
    """sim.py: "a run is a deterministic function of its input": the same jobs twice, or listed in another order
    (``simulate`` replays them by submit time, then id), give the same transitions."""
    hosts = data.draw(clusters(equal=policy in ("fcfs", "easy")))
    specs = data.draw(workloads(hosts, policy))
    shuffled = data.draw(st.permutations(specs))
    first = _run(specs, policy, hosts, 5.0 if "-per" not in policy else 0.0)
    again = _run(shuffled, policy, hosts, 5.0 if "-per" not in policy else 0.0)
    assert repr(first.transitions) == repr(again.transitions)


@pytest.mark.parametrize("policy", POLICIES)
@settings(PROPS, max_examples=8)
@given(data=st.data())
def test_renaming_that_keeps_order_changes_nothing(policy: str, data: st.DataObject) -> None:
    """Ids and host names are only tie-breaks (``Snapshot.in_state``: submission order, ties by id; hosts in list
    order): renamed in the same order, a run's transitions are the same but for the names."""
    hosts = data.draw(clusters(equal=policy in ("fcfs", "easy")))
    specs = data.draw(workloads(hosts, policy))
    renamed_hosts = tuple(replace(h, name=f"node-{h.name}") for h in hosts)
    renamed = [replace(s, id=f"x{s.id}") for s in specs]
    a = _run(specs, policy, hosts, 0.0)
    b = _run(renamed, policy, renamed_hosts, 0.0)
    assert [(t.time, "x" + t.job, t.src, t.dst, tuple(f"node-{h}" for h in t.hosts), t.cpu, t.reason)
            for t in a.transitions] == [(t.time, t.job, t.src, t.dst, t.hosts, t.cpu, t.reason) for t in b.transitions]


@settings(PROPS, max_examples=30)
@given(data=st.data())
def test_fcfs_starts_in_submission_order(data: st.DataObject) -> None:
    """batch.py: FCFS "starts them strictly in submission order": no job starts before one submitted earlier (ties
    by id)."""
    hosts = data.draw(clusters(equal=True))
    specs = data.draw(workloads(hosts, "fcfs"))
    results = {r.job: r for r in job_results(_run(specs, "fcfs", hosts, 0.0))}
    starts = [results[s.id].start for s in sorted(specs, key=lambda s: (s.submit_time, s.id))]
    assert starts == sorted(starts)  # type: ignore[type-var]


@pytest.mark.parametrize("policy", ["fcfs", "easy"])
@settings(PROPS, max_examples=10)
@given(data=st.data())
def test_doubling_every_time_doubles_the_run(policy: str, data: st.DataObject) -> None:
    """Policies with no time constant of their own (FCFS, EASY) run a workload whose times, and the penalty, are all
    doubled in exactly twice the time (doubling is exact in binary floating point). GREEDY's backoff (2^k s), and the
    30 s bound in GREEDY-PMTN's priority and DYNMCB8's stretch, are fixed times: no such claim for them."""
    hosts = data.draw(clusters(equal=True))
    specs = data.draw(workloads(hosts, policy))
    a = _run(specs, policy, hosts, 5.0)
    b = _run([replace(s, submit_time=2 * s.submit_time, work=2 * s.work) for s in specs], policy, hosts, 10.0)
    assert [(2 * t.time, t.job, t.dst, t.hosts, t.cpu) for t in a.transitions] == [
        (t.time, t.job, t.dst, t.hosts, t.cpu) for t in b.transitions]


@settings(PROPS, max_examples=30)
@given(data=st.data())
def test_fcfs_no_worse_with_another_host(data: st.DataObject) -> None:
    """FCFS with exact run times: one more idle node never makes any job start later (each job starts at the first
    time its nodes are free after the previous job's start, and more nodes are free at least as soon)."""
    hosts = data.draw(clusters(equal=True))
    specs = data.draw(workloads(hosts, "fcfs"))
    a = {r.job: r for r in job_results(_run(specs, "fcfs", hosts, 0.0))}
    b = {r.job: r for r in job_results(_run(specs, "fcfs", (*hosts, Host("extra")), 0.0))}
    for job, r in a.items():
        assert b[job].start <= r.start + 1e-9, (job, r, b[job])  # type: ignore[operator]


@settings(PROPS, max_examples=15)
@given(data=st.data())
def test_dynmcb8_per_acts_only_on_its_grid(data: st.DataObject) -> None:
    """Engine._ensure_tick: DYNMCB8-PER "invokes [MCB8] periodically, every T seconds" on one grid, origin + k T from
    the first arrival: it starts, pauses, resumes and moves jobs only then (completions come when they come)."""
    hosts = data.draw(clusters())
    specs = data.draw(workloads(hosts, "dynmcb8-per-60"))
    origin = min(s.submit_time for s in specs)
    for t in _run(specs, "dynmcb8-per-60", hosts, 0.0).transitions:
        if t.reason in ("start", "pause", "resume", "move", "migrate"):
            k = (t.time - origin) / 60.0
            assert abs(k - round(k)) < 1e-9, t


@pytest.mark.parametrize("policy", POLICIES)
@settings(PROPS, max_examples=10)
@given(data=st.data(), which=st.sampled_from(["memory", "tasks"]))
def test_a_job_that_can_never_fit_is_refused_by_name(policy: str, data: st.DataObject, which: str) -> None:
    """model.JobSpec.validate and a policy's ``refuse``: a job more than the cluster can ever hold (memory above every
    host's, more tasks than it holds) is refused with the field named, at once, never left to stall the run."""
    hosts = data.draw(clusters(equal=policy in ("fcfs", "easy")))
    specs = data.draw(workloads(hosts, policy))
    big = max(h.mem for h in hosts)
    bad = (JobSpec("zz", 5.0, 1, 0.5, min(1.0, big + 0.01), 10.0) if which == "memory" and big < 1.0
           else JobSpec("zz", 5.0, 7 * len(hosts) * 1000, 0.5, 0.5, 10.0))
    with pytest.raises(InvalidJob) as err:
        _run([*specs, bad], policy, hosts, 0.0)
    assert err.value.field in ("memory", "tasks")


def test_greedy_pmtn_counts_no_migration_for_simultaneous_arrivals() -> None:
    """Found by test_capacity_completion_and_bounds (shrunk): metrics.JobOutcomes says "a job paused at one event and
    resumed on other nodes at a later one was preempted, not migrated" (001 Table II: GREEDY-PMTN 0.00 migrations).
    Three jobs submitted at one instant are three events: j00 is paused at j01's and resumed on h1 at j02's, which the
    fold, keyed on the instant, counted as a migration and no preemption (REPORT.md finding 2)."""
    hosts = tuple(Host(f"h{i}") for i in range(5))
    specs = [JobSpec("j00", 0.0, 1, 1.0, 1.0, 1.0), JobSpec("j01", 0.0, 5, 1.0, 1.0, 1.0),
             JobSpec("j02", 0.0, 1, 1.0, 1.0, 1.0)]
    results = {r.job: r for r in job_results(_run(specs, "greedy-pmtn", hosts, 0.0))}
    assert (results["j00"].preemptions, results["j00"].migrations) == (1, 0)
