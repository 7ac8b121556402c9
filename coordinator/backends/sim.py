"""The simulator backend: discrete events in virtual time with fluid CPU sharing (seed 001 Sec. IV-A).

A job whose tasks each get CPU fraction c with need alpha progresses at c/alpha of full speed (its
yield) and completes when its cumulative work equals its ``work``. After a resume or a migration it
makes no progress for ``penalty`` seconds (the rescheduling penalty of 001 Sec. IV-A). Nothing here is
random, so a run is a deterministic function of its input.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from coordinator.backends.base import BackendError, Report
from coordinator.model import JobSpec, JobState


@dataclass
class _SimJob:
    spec: JobSpec
    hosts: list[str]  # one per task; changed in place by a migration (a repacking moves thousands of tasks)
    cpu: float
    done: float  # seconds of full-speed work done
    running: bool = True
    blocked_until: float = -math.inf


class SimBackend:
    """A virtual cluster. ``advance`` jumps straight to the next completion or to ``until``."""

    def __init__(self, penalty: float = 0.0) -> None:
        if penalty < 0:
            raise ValueError(f"penalty: must be >= 0 seconds, got {penalty}")
        self.penalty = penalty
        self._now = 0.0
        self._jobs: dict[str, _SimJob] = {}

    def now(self) -> float:
        return self._now

    def _job(self, job: str) -> _SimJob:
        try:
            return self._jobs[job]
        except KeyError:
            raise BackendError(f"unknown job {job!r}") from None

    def start(self, spec: JobSpec, hosts: Sequence[str], cpu: float, progress: float = 0.0) -> None:
        self._jobs[spec.id] = _SimJob(spec, list(hosts), cpu, progress * spec.work)

    def set_share(self, job: str, cpu: float) -> None:
        self._job(job).cpu = cpu

    def pause(self, job: str) -> None:
        self._job(job).running = False

    def resume(self, job: str, hosts: Sequence[str], cpu: float) -> None:
        j = self._job(job)
        j.running, j.hosts, j.cpu = True, list(hosts), cpu
        j.blocked_until = self._now + self.penalty

    def migrate(self, job: str, task: int, dst: str) -> None:
        j = self._job(job)
        j.hosts[task] = dst
        j.blocked_until = self._now + self.penalty

    def stop(self, job: str) -> None:
        self._jobs.pop(job, None)

    def progress(self, job: str) -> float:
        j = self._jobs.get(job)
        if j is None:
            return 0.0
        p = j.done / j.spec.work  # min(1.0, p), without the builtin call (this runs per job and event)
        return p if p < 1.0 else 1.0

    def progresses(self) -> dict[str, float]:
        """:meth:`progress` of every job the simulator holds (a job it does not hold: 0, absent here), in one
        call: the engine reads every live job's progress at every event."""
        out = {}
        for name, j in self._jobs.items():
            p = j.done / j.spec.work
            out[name] = p if p < 1.0 else 1.0
        return out

    def wake(self) -> None:
        pass

    def _rate(self, j: _SimJob) -> float:
        return j.cpu / j.spec.cpu_need if j.running else 0.0

    def _finish_time(self, j: _SimJob) -> float:
        rate = self._rate(j)
        if rate <= 0.0:
            return math.inf
        return max(self._now, j.blocked_until) + (j.spec.work - j.done) / rate

    def advance(self, until: float) -> list[Report]:
        # One pass computes every job's rate and finish time (_rate, _finish_time, inlined: this runs at
        # every event for every job in the system); a paused job (rate 0) gains no work and never
        # finishes (an infinite finish time, which neither the minimum nor the finished list would use).
        now = self._now
        finish: dict[str, float] = {}
        moving: list[tuple[_SimJob, float]] = []
        for name, j in self._jobs.items():
            if not j.running:
                continue
            rate = j.cpu / j.spec.cpu_need
            if rate <= 0.0:
                finish[name] = math.inf
            else:
                start = j.blocked_until if j.blocked_until > now else now  # max(now, blocked_until)
                finish[name] = start + (j.spec.work - j.done) / rate
                moving.append((j, rate))
        t = min(min(finish.values(), default=math.inf), until)
        if math.isinf(t):
            return []
        t = max(t, now)
        for j, rate in moving:
            active_from = j.blocked_until if j.blocked_until > now else now
            if t > active_from:
                j.done += rate * (t - active_from)
        self._now = t
        reports = []
        for name in sorted((n for n, f in finish.items() if f <= t), key=lambda n: (finish[n], n)):
            self._jobs.pop(name)
            reports.append(Report(name, JobState.DONE))
        return reports
