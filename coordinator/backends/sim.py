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

    #: a paused job's progress stays what it was when it was paused: the engine need not read it again
    paused_progress_fixed = True

    def __init__(self, penalty: float = 0.0) -> None:
        if penalty < 0:
            raise ValueError(f"penalty: must be >= 0 seconds, got {penalty}")
        self.penalty = penalty
        self._now = 0.0
        self._jobs: dict[str, _SimJob] = {}
        # Kept as the jobs change, for the engine's reads at every event (issue 4 benchmark): the running
        # jobs, the only ones ``advance`` moves (the 1,000-job DYNMCB8 run holds four paused jobs for each
        # running one), and every job's progress, which changes only where ``advance`` moves a job.
        self._running: dict[str, _SimJob] = {}
        self._progress: dict[str, float] = {}

    def now(self) -> float:
        return self._now

    def _job(self, job: str) -> _SimJob:
        try:
            return self._jobs[job]
        except KeyError:
            raise BackendError(f"unknown job {job!r}") from None

    def start(self, spec: JobSpec, hosts: Sequence[str], cpu: float, progress: float = 0.0) -> None:
        j = self._jobs[spec.id] = self._running[spec.id] = _SimJob(spec, list(hosts), cpu, progress * spec.work)
        self._progress[spec.id] = self._fraction(j)

    def set_share(self, job: str, cpu: float) -> None:
        self._job(job).cpu = cpu

    def pause(self, job: str) -> None:
        self._job(job).running = False
        self._running.pop(job, None)

    def resume(self, job: str, hosts: Sequence[str], cpu: float) -> None:
        j = self._job(job)
        j.running, j.hosts, j.cpu = True, list(hosts), cpu
        j.blocked_until = self._now + self.penalty
        self._running[job] = j

    def migrate(self, job: str, task: int, dst: str) -> None:
        j = self._jobs.get(job)  # _job(job), inlined: a Move migrates each of its changed tasks
        if j is None:
            raise BackendError(f"unknown job {job!r}")
        j.hosts[task] = dst
        j.blocked_until = self._now + self.penalty

    def stop(self, job: str) -> None:
        self._jobs.pop(job, None)
        self._running.pop(job, None)
        self._progress.pop(job, None)

    @staticmethod
    def _fraction(j: _SimJob) -> float:
        """The fraction of ``j``'s work done, at most 1."""
        p = j.done / j.spec.work  # min(1.0, p), without the builtin call (this runs per job and event)
        return p if p < 1.0 else 1.0

    def progress(self, job: str) -> float:
        return self._progress.get(job, 0.0)

    def progresses(self) -> dict[str, float]:
        """:meth:`progress` of every job the simulator holds (a job it does not hold: 0, absent here), in one
        call: the engine reads every live job's progress at every event. A copy of the kept mapping."""
        return self._progress.copy()

    def wake(self) -> None:
        pass

    def advance(self, until: float) -> list[Report]:
        # A running job progresses at its yield (rate = cpu / need) from the end of its penalty, and finishes
        # when its work is done. One pass over the running jobs computes every rate and finish time (this
        # runs at every event) and the earliest; a paused job gains no work and never finishes, so it is not
        # visited, nor is a job with no CPU (an infinite finish time).
        now = self._now
        t = until
        moving: list[tuple[str, _SimJob, float, float, float]] = []
        for name, j in self._running.items():
            rate = j.cpu / j.spec.cpu_need
            if rate > 0.0:
                start = j.blocked_until if j.blocked_until > now else now  # max(now, blocked_until)
                finish = start + (j.spec.work - j.done) / rate
                if finish < t:
                    t = finish
                moving.append((name, j, rate, start, finish))
        if math.isinf(t):
            return []
        if t < until <= t + 1e-9:
            # A finish within the engine's tolerance of the horizon (its next timer, which it fires when due within
            # 1e-9 s: Engine.step) is at the horizon: the clock stopped 2e-15 s short of an arrival at 10.0, which was
            # then recorded submitted, and started, before its submit time (dependency review h215's hypothesis run).
            t = until
        t = max(t, now)
        progress = self._progress
        finished: list[tuple[float, str]] = []
        for name, j, rate, start, finish in moving:
            if t > start:
                j.done += rate * (t - start)
                p = j.done / j.spec.work  # _fraction(j), inlined
                progress[name] = p if p < 1.0 else 1.0
            if finish <= t:
                finished.append((finish, name))
        self._now = t
        reports = []
        for _, name in sorted(finished):
            self.stop(name)
            reports.append(Report(name, JobState.DONE))
        return reports
