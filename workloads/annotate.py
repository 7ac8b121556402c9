"""Turn rigid-job workloads into :class:`coordinator.model.JobSpec` lists, as seed 001 Sec. IV-C does.

Three things live here:

1. **Annotation of synthetic (Lublin) jobs** with a CPU need and a memory requirement per task
   (:func:`annotate_rigid`, :func:`synthetic_trace`).
2. **Conversion of the HPC2N trace** (SWF) into jobs and its split into 1-week segments
   (:func:`convert_hpc2n`, :func:`segment_weeks`, :func:`hpc2n_segments`).
3. **Offered load** and scaling of inter-arrival times to reach a target load
   (:func:`offered_load`, :func:`scale_to_load`).

Synthetic annotation (001 Sec. IV-C), quoted:

* CPU: "We assume that the task in a one-task job is sequential, and ... that other tasks are
  multi-threaded ... CPU needs of sequential tasks are 25% and those of other tasks are 100%" (quad-core
  nodes: a sequential task uses at most 25% of a node).
* Memory: "55% of the jobs have tasks with a memory requirement of 10%. The remaining 45% of the jobs
  have tasks with memory requirements 10×x%, where x is an integer value uniformly distributed over
  {2,...,10}." Each job draws once; all its tasks share the value.

HPC2N conversion: see :func:`convert_hpc2n`. Offered load: see :func:`offered_load`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from coordinator.model import MIN_WORK_S, JobSpec
from workloads.lublin import DEFAULT_NODES, LublinParams, RigidJob, as_generator, generate
from workloads.swf import SWFJob, SWFReader

__all__ = [
    "CPU_NEED_PARALLEL",
    "CPU_NEED_SERIAL",
    "DROP_RULES",
    "HPC2N_CPU_NEED_ONE_CORE",
    "HPC2N_CPU_NEED_TWO_CORES",
    "HPC2N_DEFAULT_MEMORY",
    "HPC2N_MIN_MEMORY",
    "HPC2N_NODES",
    "HPC2N_NODE_MEMORY_KB",
    "MEM_BASE",
    "MEM_BASE_PROB",
    "MEM_MULTIPLIERS",
    "WEEK_S",
    "Conversion",
    "HPC2NSegments",
    "annotate_rigid",
    "convert_hpc2n",
    "hpc2n_job",
    "hpc2n_segments",
    "offered_load",
    "scale_to_load",
    "segment_weeks",
    "synthetic_trace",
]

# ---- synthetic annotation (001 Sec. IV-C) --------------------------------------------------------------

#: CPU need of the task of a one-task (sequential) job: one core of a quad-core node.
CPU_NEED_SERIAL = 0.25
#: CPU need of each task of a multi-task job (multi-threaded and CPU-bound).
CPU_NEED_PARALLEL = 1.0
#: Memory per task of 55% of the jobs: 10% of a node.
MEM_BASE = 0.10
MEM_BASE_PROB = 0.55
#: The other 45% need 10*x % with x uniform over {2, ..., 10}.
MEM_MULTIPLIERS = tuple(range(2, 11))


def annotate_rigid(
    jobs: Sequence[RigidJob],
    rng: np.random.Generator | int | None = None,
    *,
    id_prefix: str = "j",
    workload: str = "dgemm",
) -> list[JobSpec]:
    """Annotate rigid jobs with CPU needs and memory per 001 Sec. IV-C (see the module docstring).

    Job ``k`` (0-based) gets id ``f"{id_prefix}{k}"``; ``tasks`` is the job's size and ``work`` its
    run time. The memory draw uses ``rng`` (a Generator or a seed).
    """
    gen = as_generator(rng)
    n = len(jobs)
    base = gen.random(n) < MEM_BASE_PROB
    mult = gen.integers(MEM_MULTIPLIERS[0], MEM_MULTIPLIERS[-1] + 1, n)
    out: list[JobSpec] = []
    for k, (job, is_base, x) in enumerate(zip(jobs, base, mult, strict=True)):
        mem = MEM_BASE if is_base else round(MEM_BASE * int(x), 10)
        cpu = CPU_NEED_SERIAL if job.size == 1 else CPU_NEED_PARALLEL
        out.append(
            JobSpec(
                id=f"{id_prefix}{k}",
                submit_time=float(job.submit_time),
                tasks=int(job.size),
                cpu_need=cpu,
                mem=mem,
                work=float(job.run_time),
                workload=workload,
            )
        )
    return out


def synthetic_trace(
    seed: int,
    n_jobs: int = 1000,
    *,
    hosts: int = DEFAULT_NODES,
    load: float | None = None,
    workload: str = "dgemm",
    id_prefix: str = "j",
) -> list[JobSpec]:
    """One of 001's synthetic traces: ``n_jobs`` Lublin jobs for ``hosts`` nodes, annotated.

    With ``load`` set, inter-arrival times are then scaled to that offered load (:func:`scale_to_load`),
    which is how 001 derives its 0.1..0.9 traces from one generated trace: same seed, same job mix.
    The model and the annotation draw from independent streams spawned from ``seed``.
    """
    model_seq, annot_seq = np.random.SeedSequence(seed).spawn(2)
    rigid = generate(n_jobs, np.random.default_rng(model_seq), LublinParams(nodes=hosts))
    jobs = annotate_rigid(rigid, np.random.default_rng(annot_seq), id_prefix=id_prefix, workload=workload)
    return scale_to_load(jobs, hosts, load) if load is not None else jobs


# ---- HPC2N (001 Sec. IV-C) ---------------------------------------------------------------------------

#: "the system memory of 2GB" per node; SWF memory is in KB, and HPC2N's figures are whole MB
#: (e.g. 409600 KB = 400 MB; the largest, 2048000 KB = 2000 MB), so 2 GB = 2 * 1024 * 1024 KB.
HPC2N_NODE_MEMORY_KB = 2 * 1024 * 1024
#: "a 120-node dual-core cluster" (the SWF header's MaxNodes/MaxProcs say 240: it counts processors).
HPC2N_NODES = 120
#: "with a minimum observed of 10%": per-processor memory below 10% of a node is raised to 10%.
HPC2N_MIN_MEMORY = 0.10
#: Jobs that give neither used nor requested memory: "we assigned them a value of 10%".
HPC2N_DEFAULT_MEMORY = 0.10
#: Tasks of paired (multi-threaded) jobs: "each task had a CPU need of 100%".
HPC2N_CPU_NEED_TWO_CORES = 1.0
#: Tasks of one-per-processor jobs: "each of these tasks had a CPU need of 50% (i.e., 1 core)".
HPC2N_CPU_NEED_ONE_CORE = 0.5
#: "we split the HPC2N workload into 182 1-week segments".
WEEK_S = 7 * 86400.0


@dataclass
class Conversion:
    """The result of converting an SWF trace: the jobs (log-relative submit times) and the tallies.

    ``dropped`` maps each drop rule to the number of jobs it removed (every rule is listed, 0 if it
    removed none). ``defaulted_memory`` counts jobs with no memory figure (set to 10%),
    ``raised_memory`` jobs whose figure was below 10% of a node (raised to 10%), ``paired`` jobs whose
    tasks were taken as pairs of processors.
    """

    jobs: list[JobSpec]
    dropped: dict[str, int]
    records: int = 0
    defaulted_memory: int = 0
    raised_memory: int = 0
    paired: int = 0
    skipped_lines: int = 0


@dataclass
class HPC2NSegments:
    """1-week segments of a converted trace. ``segments[k]`` holds the jobs submitted in week ``k`` of
    the log, with submit times relative to that week's start; ``conversion`` has the drop tallies."""

    segments: list[list[JobSpec]]
    conversion: Conversion
    week_s: float = WEEK_S
    origin: float = 0.0

    @property
    def dropped(self) -> dict[str, int]:
        return self.conversion.dropped


#: Drop rules, in the order they are applied. None of them is stated in 001 (which drops no job);
#: each removes a record that cannot be a valid :class:`JobSpec` on the target cluster (or, for
#: ``no_submit_time``, cannot be placed in time).
DROP_RULES = ("no_submit_time", "no_processors", "no_run_time", "memory_exceeds_node", "does_not_fit_cluster")


@dataclass(frozen=True)
class _Annotated:
    tasks: int
    cpu_need: float
    mem: float
    paired: bool
    defaulted: bool
    raised: bool


def _processors(rec: SWFJob) -> int:
    # "information about the required number of processors": the requested count (field 8), falling
    # back on the allocated count (field 5) when the request is missing.
    return rec.requested_processors if rec.requested_processors > 0 else rec.allocated_processors


def _annotate_hpc2n(rec: SWFJob, node_memory_kb: float) -> _Annotated:
    procs = _processors(rec)
    used, requested = rec.used_memory_kb, rec.requested_memory_kb
    defaulted = raised = False
    if used <= 0 and requested <= 0:
        per_proc = HPC2N_DEFAULT_MEMORY
        defaulted = True
    else:
        per_proc = max(used, requested) / node_memory_kb
        if per_proc < HPC2N_MIN_MEMORY:
            per_proc = HPC2N_MIN_MEMORY
            raised = True
    if procs % 2 == 0 and per_proc < 0.5:
        return _Annotated(procs // 2, HPC2N_CPU_NEED_TWO_CORES, 2 * per_proc, True, defaulted, raised)
    return _Annotated(procs, HPC2N_CPU_NEED_ONE_CORE, per_proc, False, defaulted, raised)


def hpc2n_job(
    rec: SWFJob,
    *,
    node_memory_kb: float = HPC2N_NODE_MEMORY_KB,
    workload: str = "dgemm",
    id_prefix: str = "",
) -> JobSpec:
    """One SWF record as a job, per the rules of :func:`convert_hpc2n` (no drop checks; not validated).

    The id is ``f"{id_prefix}{job_number}"``; the submit time is the record's (relative to the log start).
    """
    return _job(rec, _annotate_hpc2n(rec, node_memory_kb), workload, id_prefix)


def _job(rec: SWFJob, a: _Annotated, workload: str, id_prefix: str) -> JobSpec:
    return JobSpec(
        id=f"{id_prefix}{rec.job_number}",
        submit_time=float(rec.submit_time),
        tasks=a.tasks,
        cpu_need=a.cpu_need,
        mem=a.mem,
        work=float(rec.run_time),
        workload=workload,
    )


def convert_hpc2n(
    records: Iterable[SWFJob],
    *,
    nodes: int = HPC2N_NODES,
    node_memory_kb: float = HPC2N_NODE_MEMORY_KB,
    workload: str = "dgemm",
    id_prefix: str = "",
) -> Conversion:
    """Convert HPC2N SWF records to jobs by the rules of 001 Sec. IV-C.

    The rules, with the paper's words:

    1. **Per-processor memory.** "job per-processor memory requirements were set as the maximum of
       either requested or used memory as a fraction of the system memory of 2GB, with a minimum
       observed of 10%": ``m = max(used_memory_kb, requested_memory_kb) / (2 * 1024**2 KB)`` and,
       reading "minimum ... of 10%" as a floor, ``m = max(m, 0.10)`` (1,823 jobs of the real trace
       are below 10%, so the minimum is imposed, not merely observed). A missing figure is ``-1`` and
       does not take part in the maximum.
    2. **No memory figure.** "only 2,142 (~1%) did not give values for either used or requested memory
       and we assigned them a value of 10%": ``m = 0.10``. (The cleaned trace used here has 2,137 such
       jobs: it lacks 5 of the paper's 202,876 jobs, see its header's ``job<=10`` filter.)
    3. **Processors.** "The swf file format ... contains information about the required number of
       processors": ``p`` is the requested processor count (SWF field 8), or the allocated count
       (field 5) if the request is missing (``-1``). On HPC2N 699 jobs ask for 1 processor and were
       allocated 2 (a whole node); the request is used.
    4. **Paired tasks.** "For jobs that required an even number of processors and had a per-processor
       memory requirement less than 50% of the available node memory, we assumed that the job used a
       number of multi-threaded tasks equal to half the number of processors. In this case each task
       had a CPU need of 100% ... and the memory requirement was doubled": if ``p`` is even and
       ``m < 0.5``: ``tasks = p / 2``, ``cpu_need = 1.0``, ``mem = 2 m``.
    5. **One task per processor.** "For jobs requiring an odd number of processors or more than 50% of
       the available node memory per processor, we assumed that the number of tasks was equal to the
       number of processors and that each of these tasks had a CPU need of 50% (i.e., 1 core)":
       otherwise ``tasks = p``, ``cpu_need = 0.5``, ``mem = m``. A job at exactly 50% is not "less than
       50%", so it falls here (16 jobs of the real trace).
    6. **Work** is the SWF run time (field 4), the job's execution time in 001's simulator
       (Sec. IV-A: "an execution time").

    Drop rules. 001 drops no job; these remove only records that cannot become a valid job on a cluster
    of ``nodes`` hosts of memory 1, and each is counted in :attr:`Conversion.dropped` (all are 0 on
    the HPC2N trace), in this order: ``no_submit_time`` (submit time ``< 0``: SWF's ``-1``, unknown; the
    job has no place in the trace's time, and taking ``-1`` as a time would give it a wait it never had, or
    a week before the first), ``no_processors`` (``p <= 0``), ``no_run_time`` (run time ``<= 0``),
    ``memory_exceeds_node`` (per-task memory ``> 1``), ``does_not_fit_cluster`` (more tasks than the
    cluster can hold at that memory, :meth:`JobSpec.validate`).

    Submit times are kept relative to the log's start (SWF time 0 = the header's ``UnixStartTime``).
    """
    dropped = dict.fromkeys(DROP_RULES, 0)
    result = Conversion(jobs=[], dropped=dropped)
    for rec in records:
        result.records += 1
        if rec.submit_time < 0:
            dropped["no_submit_time"] += 1
            continue
        if _processors(rec) <= 0:
            dropped["no_processors"] += 1
            continue
        if rec.run_time < MIN_WORK_S:  # (none, or under the model's least work: JobSpec.validate refuses it)
            dropped["no_run_time"] += 1
            continue
        a = _annotate_hpc2n(rec, node_memory_kb)
        if a.mem > 1.0:
            dropped["memory_exceeds_node"] += 1
            continue
        job = _job(rec, a, workload, id_prefix)
        # JobSpec.validate(hosts) on `nodes` identical hosts of memory 1, inlined (it is the hot loop).
        if a.tasks > nodes * math.floor(1.0 / a.mem + 1e-9):
            dropped["does_not_fit_cluster"] += 1
            continue
        job.validate()
        result.defaulted_memory += a.defaulted
        result.raised_memory += a.raised
        result.paired += a.paired
        result.jobs.append(job)
    return result


def segment_weeks(
    jobs: Iterable[JobSpec],
    *,
    origin: float = 0.0,
    week_s: float = WEEK_S,
    n_segments: int | None = None,
) -> list[list[JobSpec]]:
    """Split jobs into consecutive 1-week segments by submit time (001 Sec. IV-C).

    Segment ``k`` covers ``[origin + k*week_s, origin + (k+1)*week_s)`` and its jobs' submit times are
    made relative to that start. Weeks are counted from ``origin`` (the log start for HPC2N: its
    submit times run from day 4 to week 181.2, so weeks 0..181 give exactly the paper's "182 1-week
    segments"). Empty weeks are kept as empty lists so that index ``k`` is always week ``k``. Jobs
    before ``origin`` are refused. ``n_segments`` defaults to one past the last non-empty week.
    """
    buckets: dict[int, list[JobSpec]] = {}
    for job in jobs:
        offset = job.submit_time - origin
        if offset < 0:
            raise ValueError(f"job {job.id}: submit time {job.submit_time} is before the origin {origin}")
        k = int(offset // week_s)
        start = origin + k * week_s
        moved = JobSpec(job.id, job.submit_time - start, job.tasks, job.cpu_need, job.mem, job.work, job.workload)
        buckets.setdefault(k, []).append(moved)
    count = (max(buckets) + 1 if buckets else 0) if n_segments is None else n_segments
    if buckets and max(buckets) >= count:
        raise ValueError(f"n_segments={count} is too small: a job falls in week {max(buckets)}")
    return [buckets.get(k, []) for k in range(count)]


def hpc2n_segments(
    source: str | os.PathLike[str] | Iterable[SWFJob],
    *,
    nodes: int = HPC2N_NODES,
    node_memory_kb: float = HPC2N_NODE_MEMORY_KB,
    workload: str = "dgemm",
    skip_bad: bool = False,
    week_s: float = WEEK_S,
) -> HPC2NSegments:
    """The HPC2N trace as 001 uses it: converted (:func:`convert_hpc2n`) and split into 1-week
    segments (:func:`segment_weeks`, weeks counted from the log start). ``source`` is an SWF path
    (``.swf`` or ``.swf.gz``) or an iterable of records.

    The records are taken as they are: a job number given twice or a time out of bounds is found only by
    :meth:`JobSpec.validate` or the engine, naming no line. A file a user gives is read through
    :func:`workloads.jobfile.load_jobs` instead (``vcemu simulate``, and ``vcemu sweep --hpc2n``, which segments
    its jobs with :func:`segment_weeks`: the same weeks), which refuses those naming the file, the line and the SWF
    field."""
    skipped = 0
    if isinstance(source, (str, os.PathLike)):
        with SWFReader(source, skip_bad=skip_bad) as reader:
            conv = convert_hpc2n(reader, nodes=nodes, node_memory_kb=node_memory_kb, workload=workload)
            skipped = reader.skipped
    else:
        conv = convert_hpc2n(source, nodes=nodes, node_memory_kb=node_memory_kb, workload=workload)
    conv.skipped_lines = skipped
    return HPC2NSegments(segments=segment_weeks(conv.jobs, week_s=week_s), conversion=conv, week_s=week_s)


# ---- offered load --------------------------------------------------------------------------------------


def _span(jobs: Sequence[JobSpec]) -> tuple[float, float]:
    if len(jobs) < 2:
        raise ValueError("offered load needs at least two jobs (it is defined over the submission span)")
    first = min(j.submit_time for j in jobs)
    last = max(j.submit_time for j in jobs)
    if not last > first:
        raise ValueError("offered load is undefined: all jobs are submitted at the same time")
    return first, last


def offered_load(jobs: Sequence[JobSpec], hosts: int) -> float:
    """The offered load of a job list on ``hosts`` nodes:

        load = sum_j tasks_j * work_j / (hosts * (last submit - first submit))

    the node-seconds the jobs ask for divided by the node-seconds the cluster offers while they
    arrive. Why this definition: 001 Sec. IV-C defines its load levels by "offered load [4]" and
    reaches them by multiplying all inter-arrival times by a constant, so load must be inversely
    proportional to the arrival span for a fixed job mix. Ref. [4] (Batat & Feitelson's gang
    scheduling with memory considerations, on the same Lublin/Feitelson workload models) and the
    workload literature use load = arrival rate x mean (size x run time) / machine size, i.e. the
    node-time demand per unit time; with the arrival rate taken over the trace's submission span that
    is the formula above. It counts nodes (tasks), not CPU needs: the load levels are set on the
    Lublin job mix, which has sizes and run times, and a batch scheduler gives each task a whole node.
    ``work`` is the run time at full speed. Not capped at 1: a value above 1 is an overloaded cluster.
    """
    if hosts <= 0:
        raise ValueError(f"hosts: must be > 0, got {hosts}")
    first, last = _span(jobs)
    demand = math.fsum(j.tasks * j.work for j in jobs)
    return demand / (hosts * (last - first))


def compress_time(jobs: Sequence[JobSpec], factor: float) -> list[JobSpec]:
    """The same jobs with every job's work and every inter-arrival time divided by ``factor``: the offered
    load and the job mix's shape are unchanged, there are ``factor`` times as many jobs per hour, and a
    fixed rescheduling penalty (001's 300 s) weighs ``factor`` times more against a job's run time. Used to
    study how 001's results depend on job length relative to the penalty (``vcemu sweep --job-scale``)."""
    if not (isinstance(factor, (int, float)) and math.isfinite(factor) and factor > 0):
        raise ValueError(f"factor: must be a finite number > 0, got {factor!r}")
    if not jobs:
        return []
    first = min(j.submit_time for j in jobs)
    return [replace(j, submit_time=first + (j.submit_time - first) / factor, work=j.work / factor) for j in jobs]


def scale_to_load(jobs: Sequence[JobSpec], hosts: int, load: float) -> list[JobSpec]:
    """The same jobs with every inter-arrival time multiplied by one constant so that
    :func:`offered_load` equals ``load`` (001 Sec. IV-C: "we multiplied the inter-arrival times of jobs
    in each generated trace by 9 computed constants ... [for] load levels of 0.1 to 0.9").

    The constant is ``offered_load(jobs) / load``; the first submission stays where it is and job order
    is unchanged. 001 uses loads 0.1..0.9; any positive load is accepted.
    """
    if not (isinstance(load, (int, float)) and math.isfinite(load) and load > 0):
        raise ValueError(f"load: must be a finite number > 0, got {load!r}")
    first, _ = _span(jobs)
    factor = offered_load(jobs, hosts) / load
    return [replace(j, submit_time=first + (j.submit_time - first) * factor) for j in jobs]
