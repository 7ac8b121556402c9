"""The engine's capacity check (issue 4 benchmark, round 5): the running jobs as the snapshot found them, the
tasks' host positions looked up in one pass; the verdict and message of a loop over the placed tasks."""

from __future__ import annotations

import random

import pytest

from coordinator.backends.sim import SimBackend
from coordinator.engine import Engine, PolicyError
from coordinator.model import Host, JobSpec, JobState
from coordinator.plan import Action, Migrate, Move, Pause, Plan, Resume, SetShare, Start
from coordinator.policies import get_policy


def _capacity_verdict(engine: Engine, plan: Plan) -> str | None:
    """The capacity check as a loop over the placed tasks: the placement the plan leaves (running jobs in
    submission order, then those it starts or resumes, in the order it applies them), each host's shares
    added task by task in that order; the message for the first host over, in host order, or None."""
    placed = {j: [list(r.hosts), r.cpu, r.spec] for j, r in engine._live.items() if r.state is JobState.RUNNING}
    for a in engine._ordered(plan):
        if isinstance(a, (Start, Resume)):
            placed[a.job] = [list(a.hosts), a.cpu, engine.jobs[a.job].spec]
        elif isinstance(a, Pause):
            del placed[a.job]
        elif isinstance(a, SetShare):
            placed[a.job][1] = a.cpu
        elif isinstance(a, Migrate):
            placed[a.job][0][a.task] = a.dst
        elif isinstance(a, Move):
            placed[a.job][0] = list(a.hosts)
    cpu = {h.name: 0.0 for h in engine.hosts}
    mem = dict(cpu)
    for hs, c, spec in placed.values():
        for h in hs:
            cpu[h] += c
            mem[h] += spec.mem
    for h in engine.hosts:
        if cpu[h.name] > h.cpu + 1e-6 or mem[h.name] > h.mem + 1e-6:
            return (f"greedy: host {h.name} over capacity (cpu {cpu[h.name]:.4f}/{h.cpu}, "
                    f"memory {mem[h.name]:.4f}/{h.mem})")
    return None


def _random_plan(rng: random.Random, engine: Engine, names: list[str]) -> Plan:
    """A plan that is consistent with the jobs' states (so only capacity can refuse it)."""
    actions: list[Action] = []
    for rec in engine._live.values():
        job, tasks, r = rec.spec.id, rec.spec.tasks, rng.random()
        where = tuple(rng.choice(names) for _ in range(tasks))
        cpu = rng.choice([0.1, 0.2, 0.3, 0.5])
        if rec.state is JobState.PENDING and r < 0.5:
            actions.append(Start(job, where, cpu))
        elif rec.state is JobState.PAUSED and r < 0.5:
            actions.append(Resume(job, where, cpu))
        elif rec.state is JobState.RUNNING:
            if r < 0.2:
                actions.append(Pause(job))
            elif r < 0.4:
                actions.append(SetShare(job, cpu))
            elif r < 0.6:
                actions.append(Move(job, where))
            elif r < 0.8:
                actions += [Migrate(job, t, rng.choice(names)) for t in rng.sample(range(tasks), k=min(2, tasks))]
    rng.shuffle(actions)
    return Plan(tuple(actions))


def test_the_capacity_check_is_the_loop_over_placed_tasks_with_or_without_the_snapshots_running_jobs() -> None:
    rng = random.Random(11)
    hosts = [Host(f"h{i}", rng.choice([1.0, 1.5]), rng.choice([0.5, 1.0])) for i in range(5)]
    engine = Engine(get_policy("greedy"), SimBackend(), hosts)
    names = [h.name for h in hosts]
    for i in range(14):
        engine.arrive(JobSpec(f"j{i}", 0.0, rng.randint(1, 4), 0.5, rng.choice([0.05, 0.1, 0.2]), 100.0))
    verdicts = {True: 0, False: 0}
    for _ in range(1500):
        plan = _random_plan(rng, engine, names)
        want = _capacity_verdict(engine, plan)
        _, running = engine._snapshot()
        for given in (running, None):
            if want is None:
                engine._check(plan, engine._ordered(plan), given)
            else:
                with pytest.raises(PolicyError) as err:
                    engine._check(plan, engine._ordered(plan), given)
                assert str(err.value) == want
        verdicts[want is None] += 1
        if want is None:
            engine._apply(plan, running)
    assert min(verdicts.values()) > 200
