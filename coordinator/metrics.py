"""Scheduling metrics, exactly as seed 001 defines them (Sec. II-B.2 and III-A).

All are pure functions, either of a job's numbers or of a recorded :class:`History`, so a simulated run
and a live run are scored by the same code.

- yield: allocated CPU fraction / CPU need (001 Sec. II-B.2).
- virtual time: the integral of the yield since release (001 Sec. III-A) — the seconds of full-speed
  work done.
- flow time: time since submission (until completion once done).
- stretch: flow time / flow time alone on the cluster (= work, the run time at full speed).
- bounded stretch: the flow time replaced by max(flow time, 30 s) (001 Sec. II-B.2, which names it the
  "bounded slowdown" of its reference [31], Feitelson et al.). Read literally, 001 divides by the work;
  we divide by max(work, 30 s) as [31]'s definition does — identical to max(1, flow/max(work, 30)),
  never below 1 — so the two differ only for jobs shorter than 30 s.
- priority: max(30, flow time) / virtual time^2, infinite for a job with no virtual time (001 Sec. III-A).
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from coordinator.model import STRETCH_BOUND_S, JobSpec, JobState


def job_yield(cpu: float, cpu_need: float) -> float:
    return cpu / cpu_need


def stretch(flow_time: float, work: float) -> float:
    return flow_time / work


def bounded_stretch(flow_time: float, work: float, bound: float = STRETCH_BOUND_S) -> float:
    return max(flow_time, bound) / max(work, bound)


def priority(flow_time: float, vt: float, bound: float = STRETCH_BOUND_S) -> float:
    if vt <= 0.0:
        return math.inf
    return max(bound, flow_time) / (vt * vt)


# ---- the recorded history of a run ------------------------------------------------------------------


@dataclass(frozen=True)
class Transition:
    """One recorded change of a job: a state change, or a new share/placement in the same state."""

    time: float
    job: str
    src: JobState | None
    dst: JobState
    hosts: tuple[str, ...] = ()
    cpu: float = 0.0
    reason: str = ""


@dataclass
class History:
    """Everything a run did: the jobs submitted and every transition, in order."""

    specs: dict[str, JobSpec] = field(default_factory=dict)
    transitions: list[Transition] = field(default_factory=list)
    decision_seconds: list[float] = field(default_factory=list)

    def of(self, job: str) -> list[Transition]:
        return [t for t in self.transitions if t.job == job]


@dataclass(frozen=True)
class JobResult:
    job: str
    submit: float
    start: float | None
    end: float | None
    work: float
    state: JobState
    final_yield: float
    preemptions: int
    migrations: int

    @property
    def wait(self) -> float | None:
        return None if self.start is None else self.start - self.submit

    @property
    def flow_time(self) -> float | None:
        return None if self.end is None else self.end - self.submit

    @property
    def run_time(self) -> float | None:
        return None if self.end is None or self.start is None else self.end - self.start

    @property
    def stretch(self) -> float | None:
        return None if self.flow_time is None else stretch(self.flow_time, self.work)

    @property
    def bounded_stretch(self) -> float | None:
        return None if self.flow_time is None else bounded_stretch(self.flow_time, self.work)


def job_results(history: History) -> list[JobResult]:
    """Per-job outcome from the transitions: wait, flow time, stretch, last yield, preemptions, moves."""
    by_job: dict[str, list[Transition]] = {j: [] for j in history.specs}
    for t in history.transitions:
        by_job.setdefault(t.job, []).append(t)
    out = []
    for job, spec in history.specs.items():
        ts = by_job.get(job, [])
        submit = spec.submit_time
        start = next((t.time for t in ts if t.dst is JobState.RUNNING), None)
        end = next((t.time for t in ts if t.dst.finished), None)
        state = ts[-1].dst if ts else JobState.PENDING
        running = [t for t in ts if t.dst is JobState.RUNNING]
        final_yield = job_yield(running[-1].cpu, spec.cpu_need) if running else 0.0
        # A pause and a resume elsewhere at the same instant is a migration (GREEDY-PMTN-MIGR), not a
        # preemption.
        moved_at = {t.time for prev, t in _resumes(ts) if prev is not None and Counter(prev) != Counter(t.hosts)}
        preemptions = sum(
            1 for t in ts if t.src is JobState.RUNNING and t.dst is JobState.PAUSED and t.time not in moved_at
        )
        # A migration is a running job moved (once per decision, however many tasks) or a paused job
        # resumed on other hosts (001 Sec. III-A: "this amounts to a job migration").
        migrations = sum(1 for t in ts if t.reason == "migrate") + sum(
            1
            for prev, t in _resumes(ts)
            if prev is not None and Counter(prev) != Counter(t.hosts)
        )
        out.append(JobResult(job, submit, start, end, spec.work, state, final_yield, preemptions, migrations))
    return out


def _resumes(ts: Sequence[Transition]) -> Iterable[tuple[tuple[str, ...] | None, Transition]]:
    """Pairs (hosts before the pause, resume transition) for every pause/resume cycle."""
    last_hosts: tuple[str, ...] | None = None
    for t in ts:
        if t.src is JobState.PAUSED and t.dst is JobState.RUNNING:
            yield last_hosts, t
        if t.dst is JobState.RUNNING:
            last_hosts = t.hosts


@dataclass(frozen=True)
class Summary:
    jobs: int
    completed: int
    max_stretch: float
    mean_stretch: float
    max_bounded_stretch: float
    mean_bounded_stretch: float
    preemptions: int
    migrations: int


def summarize(results: Sequence[JobResult]) -> Summary:
    done = [r for r in results if r.state is JobState.DONE]
    bs = [r.bounded_stretch for r in done if r.bounded_stretch is not None]
    st = [r.stretch for r in done if r.stretch is not None]
    return Summary(
        jobs=len(results),
        completed=len(done),
        max_stretch=max(st, default=math.nan),
        mean_stretch=statistics.fmean(st) if st else math.nan,
        max_bounded_stretch=max(bs, default=math.nan),
        mean_bounded_stretch=statistics.fmean(bs) if bs else math.nan,
        preemptions=sum(r.preemptions for r in results),
        migrations=sum(r.migrations for r in results),
    )


def relative_difference(a: float, b: float) -> float:
    """|a - b| / b: how far a measured value a is from a reference b."""
    return abs(a - b) / abs(b) if b else math.inf
