"""The simulator keeps its running jobs and every job's progress as they change, and the engine does not read
its paused jobs' progress again (issue 4 benchmark, round 5): the same reports, times, progress and snapshots
as the passes over every job they replaced."""

from __future__ import annotations

import math
import random

import pytest

from coordinator.backends.base import Report
from coordinator.backends.sim import SimBackend, _SimJob
from coordinator.engine import Engine
from coordinator.model import Host, JobSpec, JobState, Snapshot, Stimulus
from coordinator.plan import Pause, Plan, Start


def _advance_all(jobs: dict[str, _SimJob], now: float, until: float) -> tuple[float, list[str]]:
    """SimBackend.advance as it was before it kept its running jobs: a pass over every job (paused ones
    skipped in it), on copies of the jobs' state. Returns the new time and the finished jobs."""
    finish: dict[str, float] = {}
    for name, j in jobs.items():
        if j.running:
            rate = j.cpu / j.spec.cpu_need
            finish[name] = math.inf if rate <= 0.0 else max(now, j.blocked_until) + (j.spec.work - j.done) / rate
    t = min(min(finish.values(), default=math.inf), until)
    if math.isinf(t):
        return now, []
    t = max(t, now)
    for j in jobs.values():
        if j.running and j.cpu > 0.0 and t > max(now, j.blocked_until):
            j.done += j.cpu / j.spec.cpu_need * (t - max(now, j.blocked_until))
    return t, sorted((n for n, f in finish.items() if f <= t), key=lambda n: (finish[n], n))


@pytest.mark.parametrize("penalty", [0.0, 3.0])
def test_the_simulators_kept_running_jobs_and_progress_are_its_jobs(penalty: float) -> None:
    rng = random.Random(5)
    sim = SimBackend(penalty)
    names = [f"j{i}" for i in range(12)]
    reports = 0
    for _ in range(3000):
        name, op = rng.choice(names), rng.random()
        j = sim._jobs.get(name)
        if j is None and op < 0.5:
            spec = JobSpec(name, 0.0, 2, rng.choice([0.5, 1.0]), 0.1, rng.uniform(1.0, 50.0))
            sim.start(spec, ("h0", "h1"), rng.choice([0.0, 0.25, 0.5]), rng.choice([0.0, 0.3]))
        elif j is not None and op < 0.3:
            (sim.pause if j.running else lambda n: sim.resume(n, ("h1", "h0"), 0.5))(name)
        elif j is not None and op < 0.4:
            sim.set_share(name, rng.choice([0.0, 0.25, 0.5]))
        elif j is not None and op < 0.5:
            sim.migrate(name, 0, "h2")
        elif j is not None and op < 0.55:
            sim.stop(name)
        else:
            before = {n: _SimJob(j.spec, list(j.hosts), j.cpu, j.done, j.running, j.blocked_until)
                      for n, j in sim._jobs.items()}
            until = sim.now() + rng.choice([0.5, 5.0, math.inf])
            t, finished = _advance_all(before, sim.now(), until)
            got = sim.advance(until)
            reports += len(got)
            assert got == [Report(n, JobState.DONE) for n in finished] and sim.now() == t
            assert {n: j.done for n, j in sim._jobs.items()} == {n: before[n].done for n in sim._jobs}
        assert sim._running == {n: j for n, j in sim._jobs.items() if j.running}
        assert sim.progresses() == {n: min(1.0, j.done / j.spec.work) for n, j in sim._jobs.items()}
        assert sim.progress(name) == (min(1.0, j.done / j.spec.work) if (j := sim._jobs.get(name)) else 0.0)
    assert reports > 100


class _Recording:
    """A policy that records every snapshot's jobs before deciding as ``inner`` does."""

    def __init__(self, inner: object) -> None:
        self.inner = inner
        self.seen: list[tuple[float, dict]] = []

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    def decide(self, snap, stim):  # type: ignore[no-untyped-def]
        self.seen.append((snap.now, dict(snap.jobs)))
        return self.inner.decide(snap, stim)  # type: ignore[attr-defined]


@pytest.mark.parametrize("penalty", [0.0, 300.0])
def test_paused_jobs_progress_is_not_read_again_and_every_snapshot_is_the_same(penalty: float) -> None:
    """SimBackend.paused_progress_fixed: the engine skips reading paused jobs' progress; every view of every
    snapshot (vt to the last bit) is what reading it gives."""
    from coordinator.engine import Engine
    from coordinator.experiments import homogeneous_hosts
    from coordinator.policies import get_policy
    from workloads.annotate import synthetic_trace

    specs = synthetic_trace(7, 100, hosts=16, load=0.9)
    runs = []
    for fixed in (True, False):
        policy, sim = _Recording(get_policy("dynmcb8-asap-per")), SimBackend(penalty)
        sim.paused_progress_fixed = fixed  # type: ignore[misc]
        Engine(policy, sim, homogeneous_hosts(16)).run(specs)  # type: ignore[arg-type]
        runs.append(policy.seen)
    fast, read = runs
    assert len(fast) > 200 and fast == read
    assert sum(v.state is JobState.PAUSED for _, jobs in read for v in jobs.values()) > 500


def test_a_job_paused_without_a_snapshot_first_keeps_the_work_it_did() -> None:
    """With the simulator the engine reads a paused job's progress when it pauses it, not at later snapshots:
    a plan applied straight after time passed (no snapshot in between) must not leave the job's vt behind."""
    engine = Engine(_Idle(), SimBackend(), [Host("h0", 1.0, 1.0)])
    engine.arrive(JobSpec("a", 0.0, 1, 1.0, 0.1, 100.0))
    engine.apply(Plan((Start("a", ("h0",), 1.0),)))
    engine.backend.advance(10.0)
    engine.apply(Plan((Pause("a"),)))
    engine.backend.advance(20.0)
    assert engine.snapshot().jobs["a"].vt == 10.0


class _Idle:
    """A policy that never acts (the test applies its plans itself)."""

    name = "idle"
    period = None

    def decide(self, snap: Snapshot, stim: Stimulus) -> Plan:
        return Plan()
