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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from coordinator.model import STRETCH_BOUND_S, JobSpec, JobState


def job_yield(cpu: float, cpu_need: float) -> float:
    return cpu / cpu_need


def stretch(flow_time: float, work: float) -> float:
    return flow_time / work


def bounded_stretch(flow_time: float, work: float, bound: float = STRETCH_BOUND_S) -> float:
    return max(flow_time, bound) / max(work, bound)


def literal_bounded_stretch(flow_time: float, work: float, bound: float = STRETCH_BOUND_S) -> float:
    """001 Sec. II-B.2's words read literally: only the turn-around time is bounded ("replaced by the maximum of
    the turn-around time and of a threshold value"), the time alone is not, so a 1 s job has at least 30. The other
    reading (:func:`bounded_stretch`, [31]'s) is the one the policies and reports use; ``vcemu sweep`` records
    this one beside it, to see which reproduces 001's tables."""
    return max(flow_time, bound) / work


def priority(flow_time: float, vt: float, bound: float = STRETCH_BOUND_S) -> float:
    if vt <= 0.0:
        return math.inf
    return max(bound, flow_time) / (vt * vt)


# ---- the recorded history of a run ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Transition:
    """One recorded change of a job: a state change, or a new share/placement in the same state. Slotted: a long
    simulation keeps millions (6.4 million for 64 HPC2N weeks of DYNMCB8), at 120 bytes each instead of 232."""

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
    """Per-job outcome from the transitions: wait, flow time, stretch, last yield, preemptions, moves (a
    :class:`JobOutcomes` fed the history's transitions in order)."""
    outcomes = JobOutcomes()
    for t in history.transitions:
        outcomes(t)
    return outcomes.results(history.specs)


class _Fold:
    """One job's outcome so far, from its transitions in order (see :class:`JobOutcomes`)."""

    __slots__ = ("start", "end", "state", "cpu", "running", "migrates", "preemptions", "moves")

    def __init__(self) -> None:
        self.start: float | None = None
        self.end: float | None = None
        self.state = JobState.PENDING
        self.cpu = 0.0  # the share of its last transition to running
        self.running = False  # it has run
        self.migrates = 0  # Migrate actions ("migrate" transitions)
        self.preemptions = 0  # pauses of a running job, less those its plan resumed elsewhere
        self.moves = 0  # pauses and resumes elsewhere within one plan ("move" transitions)


class JobOutcomes:
    """Each job's :class:`JobResult`, folded from its transitions as they happen: a listener of an engine
    (``engine.listeners.append(outcomes)``) that keeps a few numbers per job, where a :class:`History` keeps every
    transition (6.4 million for 64 HPC2N weeks of DYNMCB8). :func:`job_results` is this fold over a history.

    Counting (001 Table II): a migration is a running job moved within one decision, once however many tasks: a
    Migrate (a ``"migrate"`` transition), or a pause and a resume on other hosts in one plan (GREEDY-PMTN-MIGR, 001
    Sec. III-A: "this amounts to a job migration"; the engine records that resume as a ``"move"`` transition), which
    is then not a preemption. A job paused by one decision and resumed on other nodes by a later one was preempted,
    not migrated, even at the same instant (simultaneous submissions are one decision each): 001 Table II gives
    GREEDY-PMTN 0.00 migrations although it "may or may not" restart a paused job on its previous nodes. (Until
    session 46 an instant stood for a decision: GREEDY-PMTN on HPC2N week 3 read 31 preemptions and 3 migrations
    where this rule reads 36 and 0, property review; :data:`MOVE_COUNTING` tells the two apart in stored results.)"""

    def __init__(self) -> None:
        self._jobs: dict[str, _Fold] = {}

    def __call__(self, t: Transition) -> None:
        f = self._jobs.get(t.job)
        if f is None:
            f = self._jobs[t.job] = _Fold()
        src, dst = t.src, t.dst
        if dst is JobState.PAUSED:
            if src is JobState.RUNNING:
                f.preemptions += 1
        elif dst is JobState.RUNNING:
            if src is JobState.PAUSED and t.reason == "move":  # (its pause, in the same plan, was counted above)
                f.preemptions -= 1
                f.moves += 1
            f.cpu, f.running = t.cpu, True
            if f.start is None:
                f.start = t.time
        elif dst.finished and f.end is None:
            f.end = t.time
        if t.reason == "migrate":
            f.migrates += 1
        f.state = dst

    def results(self, specs: Mapping[str, JobSpec]) -> list[JobResult]:
        """The outcome of every job of ``specs``, in its order (a job with no transition is pending)."""
        out = []
        for job, spec in specs.items():
            f = self._jobs.get(job)
            if f is None:
                out.append(JobResult(job, spec.submit_time, None, None, spec.work, JobState.PENDING, 0.0, 0, 0))
                continue
            final_yield = job_yield(f.cpu, spec.cpu_need) if f.running else 0.0
            out.append(JobResult(job, spec.submit_time, f.start, f.end, spec.work, f.state, final_yield,
                                 f.preemptions, f.migrates + f.moves))
        return out


#: How :func:`job_results` counts preemptions and migrations, stored with results computed from them (a
#: sweep's cells), so that counts made under an earlier rule are not averaged with these. "-by-decision": a pause and
#: a resume elsewhere make a move only within one plan, not merely within one instant (:class:`JobOutcomes`).
MOVE_COUNTING = "001-table-ii-by-decision"


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


def stretch_difference(live: JobResult | None, sim: JobResult | None) -> float | None:
    """How far a job's live stretch is from its simulated one (:func:`relative_difference`), if it was done both ways;
    None otherwise: a job that failed or was cancelled has an end, so a stretch, but no outcome to compare (``vcemu
    demo``'s and ``vcemu replay``'s per-job figures)."""
    if live is None or sim is None or live.state is not JobState.DONE or sim.state is not JobState.DONE:
        return None
    assert live.stretch is not None and sim.stretch is not None  # (a done job has an end)
    return relative_difference(live.stretch, sim.stretch)


# ---- trace-level metrics of seed 001 Sec. V (Table I, Figure 1, Table II) ------------------------------

#: Bytes of a node's memory, to turn memory requirements (fractions of a node) into the bytes Table II's bandwidth
#: counts. 001 never states a node memory for Table II; we take the 8 GB per task of its Sec. IV-A footnote 1 ("a
#: 128-task job with 1 TB total memory, or 8 GB per task", there to argue the 5-minute penalty) as a node's.
HOST_MEMORY_GB = 8.0


def max_stretch(history: History, *, bounded: bool = True) -> float:
    """The maximum (bounded) stretch of a trace: 001 Sec. V's per-instance objective.

    001 evaluates schedules by "the maximum (bounded) stretch" (Sec. VII), bounded with 30 s (Sec.
    II-B.2), over the jobs that completed. NaN when no job completed (nothing to compare).
    """
    s = summarize(job_results(history))
    return s.max_bounded_stretch if bounded else s.max_stretch


def degradation_factors(max_stretches: Mapping[str, float]) -> dict[str, float]:
    """Each algorithm's degradation factor on one instance (001 Sec. V): "the ratio between the maximum
    stretch achieved by that algorithm on that instance and that achieved by the best algorithm for that
    instance". 1 marks the best. A NaN (failed/timed-out cell) stays NaN and is not a candidate for best.
    """
    finite = [v for v in max_stretches.values() if not math.isnan(v)]
    if not finite:
        raise ValueError("degradation factor: no algorithm has a maximum stretch on this instance")
    best = min(finite)
    if best <= 0:
        raise ValueError(f"degradation factor: best maximum stretch must be > 0, got {best}")
    return {alg: (math.nan if math.isnan(v) else v / best) for alg, v in max_stretches.items()}


def trace_span(history: History) -> float:
    """Seconds from the first submission to the last completion: the denominator of the per-hour rates,
    the bandwidths and the (under)utilisation. 001 does not name its denominator for "per hour"; the
    trace's duration is the natural one."""
    if not history.specs:
        return 0.0
    first, last = _span_bounds(history)
    return max(0.0, last - first)


def _span_bounds(history: History) -> tuple[float, float]:
    """The first submission and the last completion (the last transition if none finished) of a history with jobs."""
    first = min(s.submit_time for s in history.specs.values())
    ends = [t.time for t in history.transitions if t.dst.finished]
    return first, max(ends, default=max((t.time for t in history.transitions), default=first))


@dataclass(frozen=True)
class Costs:
    """001 Table II for one trace: preemption (pmtn) and migration (mig) costs.

    Bandwidth: every preemption and every migration moves the job's whole memory image once, i.e.
    ``tasks x mem x host_memory_gb`` GB (001 Sec. IV-A: all migrations go through pause/resume, so a
    migration costs what a preemption does), summed and divided by the trace span.
    """

    span_s: float
    jobs: int
    preemptions: int
    migrations: int
    pmtn_gb: float
    mig_gb: float

    @property
    def pmtn_per_hour(self) -> float:
        return self.preemptions * 3600.0 / self.span_s if self.span_s > 0 else 0.0

    @property
    def mig_per_hour(self) -> float:
        return self.migrations * 3600.0 / self.span_s if self.span_s > 0 else 0.0

    @property
    def pmtn_per_job(self) -> float:
        return self.preemptions / self.jobs if self.jobs else 0.0

    @property
    def mig_per_job(self) -> float:
        return self.migrations / self.jobs if self.jobs else 0.0

    @property
    def pmtn_gb_s(self) -> float:
        return self.pmtn_gb / self.span_s if self.span_s > 0 else 0.0

    @property
    def mig_gb_s(self) -> float:
        return self.mig_gb / self.span_s if self.span_s > 0 else 0.0


def rescheduling_costs(history: History, *, host_memory_gb: float = HOST_MEMORY_GB,
                       results: Sequence[JobResult] | None = None) -> Costs:
    """Preemptions and migrations of a run, counted as :func:`job_results` counts them, with the memory
    they move (see :class:`Costs`). ``host_memory_gb`` is the node memory a ``mem`` of 1.0 stands for
    (001: 8 GB for its synthetic traces; 2 GB is HPC2N's node memory). ``results``: the history's
    :func:`job_results`, if the caller has them already (not counted twice)."""
    if host_memory_gb <= 0:
        raise ValueError(f"host_memory_gb: must be > 0, got {host_memory_gb}")
    pm = mg = 0
    pm_gb = mg_gb = 0.0
    for r in job_results(history) if results is None else results:
        spec = history.specs[r.job]
        image = spec.tasks * spec.mem * host_memory_gb
        pm += r.preemptions
        mg += r.migrations
        pm_gb += r.preemptions * image
        mg_gb += r.migrations * image
    return Costs(trace_span(history), len(history.specs), pm, mg, pm_gb, mg_gb)


@dataclass(frozen=True)
class Utilisation:
    """CPU use over the trace span, as fractions of the cluster's CPU capacity x span.

    - ``used``: allocated CPU (tasks x per-task share of every running job), integrated over time.
    - ``under``: 001 Sec. II-B.2 observes that "resources may not be fully utilized once the minimum
      yield has been maximized" while jobs want more; 001 gives no formula, so we define
      underutilisation as the idle CPU capacity integrated over the times when at least one submitted,
      unfinished job is below yield 1 (pending, paused, or running on less than its need), i.e. CPU
      left unused while there was unmet demand. Idle CPU with every job at full speed is not counted.
    """

    used: float
    under: float


def utilisation(history: History, capacity: float) -> Utilisation:
    """:class:`Utilisation` of a run on a cluster whose CPU capacities sum to ``capacity``."""
    if capacity <= 0:
        raise ValueError(f"capacity: must be > 0, got {capacity}")
    span = trace_span(history)
    if span <= 0:
        return Utilisation(0.0, 0.0)
    events: list[tuple[float, int, str, float, bool]] = []  # time, order, job, allocated cpu, starved
    for s in history.specs.values():
        events.append((s.submit_time, 0, s.id, 0.0, True))
    for i, t in enumerate(history.transitions):
        spec = history.specs.get(t.job)
        if spec is None:
            continue
        running = t.dst is JobState.RUNNING
        alloc = spec.tasks * t.cpu if running else 0.0
        starved = (not t.dst.finished) and (not running or t.cpu < spec.cpu_need - 1e-9)
        events.append((t.time, 1 + i, t.job, alloc, starved))
    events.sort(key=lambda e: (e[0], e[1]))
    alloc_of: dict[str, float] = {}
    starved_jobs: set[str] = set()
    used = under = 0.0
    now = events[0][0] if events else 0.0
    # Up to the span's end only: a run cut off before every job finished (a replay's --timeout) has jobs that
    # still hold CPU after its last completion, and counting that time over the span gave utilisation above 1.
    end = _span_bounds(history)[1]
    for time_, _, job, alloc, starved in events:
        dt = min(time_, end) - now
        if dt > 0:
            total = min(capacity, sum(alloc_of.values()))
            used += total * dt
            if starved_jobs:
                under += (capacity - total) * dt
            now = min(time_, end)
        alloc_of[job] = alloc
        if starved:
            starved_jobs.add(job)
        else:
            starved_jobs.discard(job)
    return Utilisation(used / (capacity * span), under / (capacity * span))


@dataclass(frozen=True)
class DecisionStats:
    """The distribution of scheduler decision times (001 Sec. V reports average 0.25 s, max < 4.5 s)."""

    count: int
    mean_s: float
    p50_s: float
    p90_s: float
    p99_s: float
    max_s: float


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) by linear interpolation between closest ranks (numpy's default)."""
    if not 0 <= q <= 100:
        raise ValueError(f"q: must be in 0..100, got {q}")
    xs = sorted(values)
    if not xs:
        return math.nan
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def decision_stats(seconds: Sequence[float]) -> DecisionStats:
    if not seconds:
        return DecisionStats(0, math.nan, math.nan, math.nan, math.nan, math.nan)
    return DecisionStats(
        len(seconds), statistics.fmean(seconds), percentile(seconds, 50), percentile(seconds, 90),
        percentile(seconds, 99), max(seconds),
    )
