"""Small builders for hand-worked cluster states (as Ray autoscaler v2's tests do)."""

from __future__ import annotations

from coordinator.model import Host, JobSpec, JobState, JobView, Snapshot


def hosts(n: int, mem: float = 1.0) -> tuple[Host, ...]:
    return tuple(Host(f"h{i}", 1.0, mem) for i in range(n))


def spec(job: str, tasks: int = 1, need: float = 1.0, mem: float = 0.1, work: float = 100.0,
         submit: float = 0.0) -> JobSpec:
    return JobSpec(job, submit, tasks, need, mem, work)


def running(s: JobSpec, on: tuple[str, ...], cpu: float, vt: float = 0.0) -> JobView:
    return JobView(s, JobState.RUNNING, on, cpu, vt, 0, 0.0)


def pending(s: JobSpec, attempts: int = 0) -> JobView:
    return JobView(s, JobState.PENDING, attempts=attempts)


def snap(now: float, hs: tuple[Host, ...], *jobs: JobView) -> Snapshot:
    return Snapshot(now, hs, {j.id: j for j in jobs})
