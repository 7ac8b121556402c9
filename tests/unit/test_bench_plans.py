"""``vcemu bench starts``' timed plans (coordinator.bench_ops._apply_timed): every job paused, resumed where it was,
then moved to the next host, each plan through the engine; a job a plan did not leave as it should is an error, not
a figure."""

from __future__ import annotations

from types import SimpleNamespace

from coordinator.backends.base import BackendError
from coordinator.backends.sim import SimBackend
from coordinator.bench_ops import _apply_timed
from coordinator.engine import Engine
from coordinator.model import Host, JobSpec, JobState
from coordinator.plan import Plan, Start

from .scripted_agent import Idle


def cluster(backend: SimBackend, hosts: int = 3) -> SimpleNamespace:
    """What _apply_timed reads of a coordinator: its engine (jobs a and b running) and its backend's hosts."""
    names = [f"h{i}" for i in range(hosts)]
    engine = Engine(Idle(), backend, [Host(h) for h in names])
    for job, placed in (("a", ("h0", "h1") if hosts > 1 else ("h0",)), ("b", ("h1", "h2") if hosts > 2 else ("h0",))):
        engine.arrive(JobSpec(job, 0.0, len(placed), 0.25, 0.1, 100.0))
        engine.apply(Plan((Start(job, placed, 0.25),)))
    return SimpleNamespace(engine=engine, backend=SimpleNamespace(host_agent={h: "x" for h in names}))


def test_every_job_is_paused_resumed_and_moved_to_the_next_host() -> None:
    server = cluster(SimBackend())
    seconds, wrong = _apply_timed(server, ["a", "b"])
    assert wrong is None and all(seconds[k] is not None and seconds[k] >= 0 for k in ("pause", "resume", "move"))
    jobs = server.engine.jobs
    assert (jobs["a"].state, jobs["a"].hosts, jobs["b"].hosts) == (JobState.RUNNING, ("h1", "h2"), ("h2", "h0"))
    reasons = [t.reason for t in server.engine.history.transitions if t.job == "a"]
    assert reasons[-3:] == ["pause", "resume", "migrate"]


def test_with_one_host_nothing_moves_and_the_move_is_not_timed() -> None:
    server = cluster(SimBackend(), hosts=1)
    seconds, wrong = _apply_timed(server, ["a", "b"])
    assert wrong is None and seconds["move"] is None and seconds["pause"] is not None


class PauseFails(SimBackend):
    def pause(self, job: str) -> None:
        if job == "b":
            raise BackendError("agent refused")
        super().pause(job)


def test_a_job_a_plan_did_not_leave_as_it_should_is_said() -> None:
    seconds, wrong = _apply_timed(cluster(PauseFails()), ["a", "b"])
    assert wrong == "b is failed after the pause plan: pause failed: agent refused"
    assert seconds["pause"] is not None and seconds["resume"] is None
