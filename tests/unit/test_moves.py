"""DYNMCB8's Move actions (issue 4, round 2): one action per moved job, outcome-identical to the one
``Migrate`` per task they replace."""

from __future__ import annotations

import random

import pytest

from coordinator.backends.sim import SimBackend
from coordinator.engine import Engine, PolicyError, _transition
from coordinator.experiments import homogeneous_hosts
from coordinator.metrics import Transition, job_results
from coordinator.model import JobSpec, JobState, JobView
from coordinator.plan import Migrate, Move, Plan, Start
from coordinator.policies import get_policy
from coordinator.policies.dynmcb import _moved_hosts


def _reference(hosts: tuple[str, ...], new_hosts: tuple[str, ...]) -> list[tuple[int, str]]:
    """The per-task Migrates the policy made before Move (its former ``_moves``, verbatim logic)."""
    wanted: dict[str, int] = {}
    for h in new_hosts:
        wanted[h] = wanted.get(h, 0) + 1
    moving = []
    for i, h in enumerate(hosts):
        left = wanted.get(h, 0)
        if left > 0:
            wanted[h] = left - 1
        else:
            moving.append(i)
    spare = [h for h, left in wanted.items() for _ in range(left)]
    return list(zip(moving, spare, strict=True))


def test_moved_hosts_are_what_the_per_task_migrates_gave() -> None:
    rng = random.Random(4)
    moved = 0
    for _ in range(5000):
        pool = [f"h{i}" for i in range(rng.randint(1, 8))]
        n = rng.randint(1, 12)
        old = tuple(rng.choice(pool) for _ in range(n))
        new = list(old) if rng.random() < 0.2 else [rng.choice(pool) for _ in range(n)]
        if rng.random() < 0.2:
            rng.shuffle(new)
        got = _moved_hosts(old, tuple(new))
        ref = _reference(old, tuple(new))
        if not ref:
            assert got is None
            continue
        moved += 1
        expect = list(old)
        for i, h in ref:
            expect[i] = h
        assert got == tuple(expect)
        assert all(got[i] != old[i] for i, _ in ref)  # every moving task changes host: Move can diff
        assert sorted(got) == sorted(new)
    assert moved > 2000


def _engine() -> Engine:
    engine = Engine(get_policy("greedy"), SimBackend(), homogeneous_hosts(6))
    for name in ("a", "b"):
        engine.arrive(JobSpec(name, 0.0, 3, 0.2, 0.1, 100.0))
    engine.apply(Plan((Start("a", ("h0", "h1", "h2"), 0.2), Start("b", ("h0", "h1", "h2"), 0.2))))
    return engine


def test_a_move_is_the_migrates_of_its_changed_tasks_and_one_migration() -> None:
    calls: list[tuple[str, int, str]] = []
    by_move, by_migrate = _engine(), _engine()
    for engine in (by_move, by_migrate):
        real = engine.backend.migrate
        engine.backend.migrate = lambda j, t, d, real=real: (calls.append((j, t, d)), real(j, t, d))[1]
    by_move.apply(Plan((Move("a", ("h3", "h1", "h4")), Move("b", ("h0", "h5", "h2")))))
    via_move = list(calls)
    calls.clear()
    by_migrate.apply(Plan((Migrate("a", 0, "h3"), Migrate("a", 2, "h4"), Migrate("b", 1, "h5"))))
    assert via_move == calls == [("a", 0, "h3"), ("a", 2, "h4"), ("b", 1, "h5")]
    for engine in (by_move, by_migrate):
        assert engine.jobs["a"].hosts == ("h3", "h1", "h4") and engine.jobs["b"].hosts == ("h0", "h5", "h2")
        assert [(t.job, t.hosts) for t in engine.history.transitions if t.reason == "migrate"] == [
            ("a", ("h3", "h1", "h4")), ("b", ("h0", "h5", "h2"))]
        assert [r.migrations for r in job_results(engine.history)] == [1, 1]


@pytest.mark.parametrize(
    ("move", "error"),
    [
        (Move("a", ("h3", "h4")), r"needs 3 known hosts"),
        (Move("a", ("h3", "h4", "nowhere")), r"needs 3 known hosts"),
        (Move("zz", ("h3", "h4", "h5")), r"on job in state unknown"),
    ],
)
def test_a_bad_move_is_refused(move: Move, error: str) -> None:
    engine = _engine()
    with pytest.raises(PolicyError, match=error):
        engine.apply(Plan((move,)))
    assert engine.jobs["a"].hosts == ("h0", "h1", "h2")


def test_a_move_over_capacity_is_refused() -> None:
    engine = _engine()
    engine.apply(Plan((Move("a", ("h3", "h3", "h3")),)))  # three tasks of 0.2 on one host: fits
    with pytest.raises(PolicyError, match=r"host h3 over capacity"):
        engine.apply(Plan((Move("b", ("h3", "h3", "h3")),)))  # six of 0.2 do not (cpu 1.2)


def test_a_failed_move_fails_its_job_with_the_tasks_moved_so_far() -> None:
    from coordinator.backends.base import BackendError

    engine = _engine()
    real = engine.backend.migrate

    def flaky(job: str, task: int, dst: str) -> None:
        if (job, task) == ("a", 2):
            raise BackendError("agent gone")
        real(job, task, dst)

    engine.backend.migrate = flaky
    engine.apply(Plan((Move("a", ("h3", "h1", "h4")), Move("b", ("h5", "h1", "h2")))))
    a, b = engine.jobs["a"], engine.jobs["b"]
    assert a.state is JobState.FAILED and a.message == "move failed: agent gone" and a.hosts == ("h3", "h1", "h2")
    assert b.state is JobState.RUNNING and b.hosts == ("h5", "h1", "h2")


def test_fast_views_and_transitions_equal_the_constructors() -> None:
    spec = JobSpec("a", 0.0, 3, 0.2, 0.1, 100.0)
    engine = _engine()
    rec = engine.jobs["a"]
    rec.vt = 12.5
    v = rec.view()
    assert v == JobView(spec, JobState.RUNNING, ("h0", "h1", "h2"), 0.2, 12.5, 0, 0.0)
    assert hash(v) == hash(JobView(spec, JobState.RUNNING, ("h0", "h1", "h2"), 0.2, 12.5, 0, 0.0))
    t = _transition(1.5, "a", JobState.RUNNING, JobState.PAUSED, ("h1",), 0.0, "pause")
    ref = Transition(1.5, "a", JobState.RUNNING, JobState.PAUSED, ("h1",), 0.0, "pause")
    assert t == ref and hash(t) == hash(ref) and repr(t) == repr(ref)
    with pytest.raises(AttributeError):
        t.cpu = 1.0  # still frozen
