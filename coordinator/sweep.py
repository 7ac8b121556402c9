"""``vcemu sweep``: seed 001 Sec. V's experiments -- algorithms x traces x rescheduling penalties, on Ray.

A *cell* is one (trace, algorithm, penalty) simulation. Cells run as Ray tasks (a local Ray sized by
``--workers`` by default, ``--address`` for an existing cluster), each stored as one JSON file in
``OUT/cells/`` when it ends, so a rerun skips them (resumable). Traces are built in the driver from the
config (seeded: the same config gives the same traces and so the same results) and shipped to workers.

Traces (001 Sec. IV-C):

- ``lublin``: ``--traces`` Lublin-Feitelson traces of ``--jobs`` jobs for ``--hosts`` (128) nodes, trace
  ``i`` from seed ``seed + i``, annotated with CPU needs and memory (workloads/annotate.py), each scaled
  to every load in ``--loads`` (0.1..0.9). **Offered load** is
  ``sum_j tasks_j * work_j / (hosts * (last submit - first submit))`` -- the node-seconds the jobs ask
  for over the node-seconds the cluster offers while they arrive (workloads.annotate.offered_load); a
  level is reached by multiplying every inter-arrival time by one constant, as 001 does.
- ``unscaled``: ``--unscaled`` further Lublin traces straight from the model (Table I's middle column).
- ``--job-scale K`` divides every Lublin job's work and inter-arrival time by K (same load, K times the jobs
  per hour; trace ids get ``-xK``): how much the 5-minute penalty weighs depends on job length, and our
  Lublin jobs are about 4x longer than 001's (see workloads/lublin.py and the README's reproduction notes).
- ``hpc2n``: the 1-week segments ``--hpc2n-weeks`` of the HPC2N log (``--hpc2n`` path, ``.swf`` or ``.swf.gz``),
  converted by 001's rules, on 120 nodes. The file is read as ``vcemu simulate`` reads an SWF trace
  (:func:`workloads.jobfile.load_jobs`): a malformed line, a job number given twice or a time out of bounds is
  refused before any cell runs, naming the file, the line and the SWF field; the records the conversion drops are
  said in one line (``dropped 1 of 20 records: no_run_time=1``) and recorded in ``config.json``
  (``swf_conversion``, None without weeks).

Guards: ``--max-jobs`` keeps the first N jobs (by submission) of a trace; ``--cell-timeout`` aborts a
cell whose simulation runs longer (recorded as ``timeout`` with no stretch), and a Ray-side backstop
cancels the tasks when none has finished for far longer.

Limits (refused naming the flags before anything is built; a rerun's union with the stored sweep too): ``--jobs`` at
most :data:`MAX_JOBS` (1,000,000 per Lublin trace; 001: 1,000); the Lublin traces together at most
:data:`MAX_TRACE_JOBS` jobs (5,000,000: the driver holds them all, about 300 bytes each; 001's full sweep, 100 traces
at 9 loads, is 900,000); at most :data:`MAX_CELLS` cells (1,000,000; 001's is about 17,000); HPC2N week indices at most
:data:`MAX_HPC2N_WEEK` (9,999, some 190 years of log; HPC2N's has 182 weeks, 0..181).

What is stored (the rule a rerun relies on): a cell's file holds an outcome of the *cell* (but for its timings,
``wall_s`` and ``decision_mean_s``/``_p99_s``/``_max_s``, which are the machine's and which no report or figure
reads), the source fingerprint of the code that ran it (``code``,
:func:`vcemu.provenance.source_fingerprint`, taken in the worker) and a digest of the settings it ran with
(``settings``, :func:`cell_settings`: what its id leaves out or rounds). The simulation is deterministic from the
config and the code, so

- a cell stored by other code (another fingerprint, or none: an older vcemu) or with other settings is run
  again, whatever its status, and the reports leave it out (``--report-only`` too, and says so): they never mix
  two versions' or two settings' results.

- ``ok`` and ``error`` (the cell's own exception in the policy or engine, or jobs that never completed)
  are stored for good; ``--retry-failed`` reruns the ``error`` ones (after a code change).
- ``timeout`` is stored with the limit it had (``timeout_s``; the tables count it as failed) but depends on the
  machine's load: a rerun runs it again when its ``--cell-timeout`` is larger than that limit, and
  ``--retry-failed`` reruns it whatever the limit.
- A cell that Ray lost -- worker crash (kill -9, OOM killer), node loss, the backstop's cancel, a lost
  object, a ``MemoryError`` -- is not stored: the run says so and a rerun runs it. (Older vcemu stored such
  cells without ``wall_s``, which every real outcome has; a rerun runs those too.)

One sweep at a time uses an ``--out``: a run holds an exclusive lock on ``OUT/.lock`` (:func:`out_lock`) from
before it reads ``config.json`` to its end, and a second is refused. A rerun into an ``--out`` that holds a sweep
takes the union of its algorithms and penalties with those the command names (naming none: the stored ones, not the
defaults) and runs every algorithm at every penalty (and says so when that is more than the command names):
each table then compares the same algorithms, where running only the cells named would leave, say, FCFS alone
and so "best" at a new penalty. So too for its traces (``--traces``,
``--unscaled``, ``--loads``: each trace depends on its seed and load alone; ``--hpc2n-weeks``: each week on the
HPC2N file alone, which must be the same file when both name weeks), so that a sweep is extended by more traces;
every other setting that changes results must match.

A cell that cannot be stored (a full disk, an immutable ``cells/``) stops the run: the cells still running are
cancelled, those stored stay, and one line names the file and the error. Ctrl-C or SIGTERM stops the run with one
line saying how many cells are stored (a rerun resumes from them), Ray shut down, status 130.

Exit status: 0 when every cell this run ran is ``ok`` (``--report-only``: when every cell of the sweep is stored);
1 when one timed out, failed or was not stored, or Ray workers computed it with other code than the driver's, or
the run itself failed (``--report-only``: when cells are missing); 2 when the settings are refused (a bad argument,
an ``--out`` that cannot be written, is in use by another sweep, holds a sweep with other settings or a
``config.json`` that cannot be read or used: one whose keys are missing or of the wrong type is refused naming the
key, and nothing stored is changed; ``--report-only`` of an ``--out`` that holds no sweep, which it leaves as it was);
130 when interrupted.

Cell ids name a load with 2 decimals and a penalty with ``%g`` (6 significant digits): values that would
share an id (e.g. ``--loads 0.851,0.852``) are refused rather than let their cells overwrite each other, and so
is an HPC2N week named twice.

Outputs in OUT: ``config.json`` (with ``code``, :func:`vcemu.provenance.code_version`; not written by
``--report-only``), ``.lock``, ``cells/*.json``, ``cells.csv`` (every cell with its metrics), ``degradation.csv``
(001's degradation factor per cell: max stretch / best max stretch of the same trace and penalty),
``table1_p<penalty>.csv/.png``, ``table1_vs_paper_p300.csv`` (Table I at 300 s beside 001's, with ranks; tied
averages share a rank, "1224"), ``fig1_p<penalty>.csv`` and ``fig1.png`` (average degradation factor vs. load, one
panel per penalty; with ``--traces`` > 0), ``table2_p<penalty>.csv/.png`` (preemption/migration costs, scaled
traces, load >= 0.7; only when such cells exist). A plot with nothing to show is not drawn
(see :mod:`coordinator.sweep_report`).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import math
import os
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from coordinator.flagcheck import first_refusal
from coordinator.locks import NO_LOCKS, Held, claim
from coordinator.model import JobSpec
from coordinator.policy_names import POLICY_NAMES, PolicyNameError, canonical_name, policy_order, thrashing
from coordinator.resumable import setting_shown
from vcemu.cliargs import Parser, doc_head, doc_text, usable_out_dir
from vcemu.limits import MAX_PENALTY_S
from vcemu.signals import INTERRUPTED, signals_interrupt

if TYPE_CHECKING:
    from coordinator.raycluster import RayContext

ALGORITHMS = POLICY_NAMES
#: --penalties of a new sweep (001 Sec. V: none, and 5 minutes); a rerun keeps the stored sweep's.
DEFAULT_PENALTIES = "0,300"
DEFAULT_LOADS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
DEFAULT_HPC2N = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "traces",  # ../shared beside the clone
                             "HPC2N-2002-2.2-cln.swf.gz")


#: A cell's status when Ray lost it (see the module docstring): reported, never stored.
LOST = "lost"


class CellTimeout(RuntimeError):
    pass


# ---- one cell ------------------------------------------------------------------------------------------


class TimedPolicy:
    """Wraps a policy: records each decision's job count and wall time, and aborts the run past a
    deadline (the per-cell guard: the engine calls ``decide`` at every event, so a slow cell stops at
    its next decision). Every other attribute (name, period, refuse) is the wrapped policy's."""

    def __init__(self, policy: Any, deadline: float = math.inf) -> None:
        self._policy = policy
        self._deadline = deadline
        self.samples: list[tuple[int, float]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._policy, name)

    def decide(self, snap: Any, stim: Any) -> Any:
        t0 = time.perf_counter()
        if t0 > self._deadline:
            raise CellTimeout("cell time limit reached")
        plan = self._policy.decide(snap, stim)
        self.samples.append((len(snap.jobs), time.perf_counter() - t0))
        return plan


def run_cell(specs: Sequence[JobSpec], algorithm: str, penalty: float, hosts: int, *,
             timeout_s: float = math.inf, host_memory_gb: float = 8.0) -> dict[str, Any]:
    """Simulate one cell and score it with 001's metrics. Never raises for a slow or failing run: the
    outcome is in ``status`` (ok / timeout / error). A ``MemoryError`` is raised: it is the machine's
    failure, not the cell's, and must not be stored as the cell's result."""
    from coordinator.backends.sim import SimBackend
    from coordinator.engine import Engine
    from coordinator.experiments import homogeneous_hosts
    from coordinator.metrics import (
        MOVE_COUNTING,
        decision_stats,
        job_results,
        literal_bounded_stretch,
        rescheduling_costs,
        summarize,
        utilisation,
    )
    from coordinator.model import JobState
    from coordinator.policies import get_policy
    from coordinator.warmup import warm_kernels
    from vcemu.provenance import source_fingerprint

    code = source_fingerprint()  # before the run: the files as this worker imported them (cached after the first)
    # Once per process, before the clock starts: a worker's first cell took the policies' imports and kernel loads
    # into its time (0.17 s for a 0.014 s FCFS cell), and timed out where later ones would not (review).
    warm_kernels()
    t0 = time.perf_counter()
    policy = TimedPolicy(get_policy(algorithm), t0 + timeout_s)
    cluster = homogeneous_hosts(hosts)
    engine = Engine(policy, SimBackend(penalty=penalty), cluster)  # type: ignore[arg-type]
    # timeout_s: the limit this outcome had (a stored timeout is run again under a larger one, see _to_run)
    out: dict[str, Any] = {"algorithm": algorithm, "penalty": penalty, "hosts": hosts, "jobs": len(specs),
                           "timeout_s": timeout_s}
    try:
        history = engine.run(sorted(specs, key=lambda s: (s.submit_time, s.id)))
    except CellTimeout:
        out.update(status="timeout", wall_s=time.perf_counter() - t0, max_stretch=math.nan,
                   error=f"exceeded {timeout_s:g} s at simulated time {engine.backend.now():.0f} s",
                   code=code)
        return out
    except MemoryError:
        raise
    except Exception as exc:  # noqa: BLE001 -- a failing policy is a result of the sweep, not a crash
        out.update(status="error", wall_s=time.perf_counter() - t0, max_stretch=math.nan,
                   error=f"{type(exc).__name__}: {exc}", code=code)
        return out
    wall = time.perf_counter() - t0
    out["code"] = code
    results = job_results(history)
    s = summarize(results)
    literal = [literal_bounded_stretch(r.flow_time, r.work) for r in results
               if r.state is JobState.DONE and r.flow_time is not None]
    k = rescheduling_costs(history, host_memory_gb=host_memory_gb, results=results)
    u = utilisation(history, sum(h.cpu for h in cluster))
    d = decision_stats(history.decision_seconds)
    complete = s.completed == s.jobs
    # A cell whose jobs did not all complete has no max stretch (its stretches over the completed jobs alone are
    # kept apart, for a look): the reports would otherwise take it for a result and average it.
    stretches = dict(max_stretch=s.max_bounded_stretch, max_plain_stretch=s.max_stretch,
                     mean_stretch=s.mean_bounded_stretch, max_literal_stretch=max(literal, default=math.nan))
    out.update(
        status="ok" if complete else "error",
        error="" if complete else f"{s.jobs - s.completed} jobs did not complete",
        wall_s=wall, completed=s.completed,
        **(stretches if complete else {k: math.nan for k in stretches}),
        **({} if complete else {f"completed_{k}": v for k, v in stretches.items()}),
        preemptions=k.preemptions, migrations=k.migrations, counting=MOVE_COUNTING, span_s=k.span_s,
        pmtn_per_hour=k.pmtn_per_hour, mig_per_hour=k.mig_per_hour,
        pmtn_per_job=k.pmtn_per_job, mig_per_job=k.mig_per_job,
        pmtn_gb_s=k.pmtn_gb_s, mig_gb_s=k.mig_gb_s,
        utilisation=u.used, underutilisation=u.under,
        decisions=d.count, decision_mean_s=d.mean_s, decision_p99_s=d.p99_s, decision_max_s=d.max_s,
    )
    return out


# ---- traces --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Trace:
    id: str
    group: str  # scaled / unscaled / hpc2n
    load: float | None
    hosts: int
    host_memory_gb: float
    specs: tuple[JobSpec, ...]


def _first(jobs: Sequence[JobSpec], n: int | None) -> list[JobSpec]:
    ordered = sorted(jobs, key=lambda j: (j.submit_time, j.id))
    return ordered if n is None else ordered[:n]


def build_traces(cfg: dict[str, Any]) -> list[Trace]:
    """Every trace the config names, deterministically from its seed (see the module docstring). Sets
    ``cfg["swf_conversion"]``: what the HPC2N file's conversion read and dropped (:func:`_hpc2n_weeks`), None
    without weeks. A bad HPC2N file or week raises ValueError (OSError for a file that is not there)."""
    from workloads.annotate import HPC2N_NODES, compress_time, offered_load, synthetic_trace

    traces: list[Trace] = []
    hosts, n, cap = cfg["hosts"], cfg["jobs"], cfg["max_jobs"]
    k = cfg.get("job_scale", 1.0)
    tag = "" if k == 1.0 else f"-x{k:g}"
    for i in range(cfg["traces"]):
        seed = cfg["seed"] + i
        for load in cfg["loads"]:
            specs = _first(compress_time(synthetic_trace(seed, n, hosts=hosts, load=load), k), cap)
            traces.append(Trace(f"lublin-s{seed}-l{_load_id(load)}{tag}", "scaled", load, hosts, cfg["host_memory_gb"],
                                tuple(specs)))
    for i in range(cfg["unscaled"]):
        seed = cfg["seed"] + 10_000 + i
        specs = _first(compress_time(synthetic_trace(seed, n, hosts=hosts), k), cap)
        traces.append(Trace(f"unscaled-s{seed}{tag}", "unscaled", round(offered_load(specs, hosts), 3), hosts,
                            cfg["host_memory_gb"], tuple(specs)))
    cfg["swf_conversion"] = None
    if cfg["hpc2n_weeks"]:
        path = cfg["hpc2n"]
        if not os.path.exists(path):
            raise FileNotFoundError(f"--hpc2n: no such trace file {path}")
        segs, cfg["swf_conversion"] = _hpc2n_weeks(path)
        for w in cfg["hpc2n_weeks"]:
            if not 0 <= w < len(segs):
                has = f"weeks 0..{len(segs) - 1}" if segs else "no job (after the conversion), so no week"
                raise ValueError(f"--hpc2n-weeks: {path} has {has}, got {w}")
            if len(segs[w]) < 2:  # no offered load, nothing to compare: skipped, and said so
                print(f"vcemu sweep: HPC2N week {w} has {len(segs[w])} jobs; skipped", file=sys.stderr)
                continue
            specs = _first(segs[w], cap)
            traces.append(Trace(f"hpc2n-w{w:03d}", "hpc2n", round(offered_load(specs, HPC2N_NODES), 3),
                                HPC2N_NODES, 2.0, tuple(specs)))
    return traces


def _hpc2n_weeks(path: str) -> tuple[list[list[JobSpec]], dict[str, Any] | None]:
    """The 1-week segments of the HPC2N trace at ``path`` (:func:`workloads.annotate.segment_weeks`) and what its
    conversion read and dropped (``config.json``'s ``swf_conversion``). Read as ``vcemu simulate`` reads an SWF trace
    (:func:`workloads.jobfile.load_jobs`, with 001's conversion for HPC2N's 120 nodes): a malformed line, a job number
    given twice (two jobs of one id, which every cell refused at the second's arrival) or a time out of bounds raises
    ValueError naming the file, the line and the SWF field (it said "work_seconds: must be below 1e+12 s", naming
    none). The records the conversion drops are said in one line, as simulate says them."""
    from workloads.annotate import segment_weeks
    from workloads.jobfile import is_swf, load_jobs, unreadable

    if not is_swf(path):  # (load_jobs would read it as JSON lines)
        raise ValueError(f"--hpc2n: {path}: not an SWF trace (its name must end in .swf or .swf.gz)")
    try:
        source = load_jobs(path)
    except OSError as exc:
        raise ValueError(f"--hpc2n: {unreadable(path, exc)}") from None
    except ValueError as exc:  # (JobFileError: "PATH:LINE: FIELD: why (SWF field N, name)")
        raise ValueError(f"--hpc2n: {exc}") from None
    if (note := source.drop_note()) is not None:
        print(f"vcemu sweep: {path}: {note}", file=sys.stderr)
    return segment_weeks(source.jobs), source.provenance()["swf_conversion"]


def _load_id(load: float) -> str:
    return f"{load:.2f}"


def _penalty_id(penalty: float) -> str:
    return f"{penalty:g}"  # also in the report names (table1_p300.csv)


def cell_key(trace: str, algorithm: str, penalty: float) -> str:
    return f"{trace}__{algorithm}__p{_penalty_id(penalty)}"


def _refuse_shared_ids(values: Sequence[float], ident: Callable[[float], str], name: str, tag: str) -> None:
    """Refuse values that give one id: their cells (and reports) would overwrite each other's files."""
    seen: dict[str, float] = {}
    for v in values:
        if (i := ident(v)) in seen:
            raise SystemExit(f"vcemu sweep: {name}: {seen[i]!r} and {v!r} are both {tag}{i} in cell ids; "
                             "give values that differ there")
        seen[i] = v


# ---- the sweep ------------------------------------------------------------------------------------------


def _remote_run_cell(specs: Sequence[JobSpec], algorithm: str, penalty: float, hosts: int, timeout_s: float,
                     host_memory_gb: float) -> dict[str, Any]:
    return run_cell(specs, algorithm, penalty, hosts, timeout_s=timeout_s, host_memory_gb=host_memory_gb)


def ray_init(address: str | None, workers: int) -> RayContext | None:
    """A local Ray with ``workers`` CPUs, or the existing cluster at ``address``; None if this process is
    already connected. Through :func:`coordinator.raycluster.connect`, which keeps Ray's ``(raylet) ...`` lines
    (a worker killed by a cell's timeout, say) out of the progress bar until the context is closed."""
    import ray

    from coordinator.raycluster import RayUnavailable, connect

    if ray.is_initialized():
        return None
    address = address or None  # (--address '' is a local Ray, as it was before connect())
    env = {"env_vars": {"PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}}
    kwargs: dict[str, Any] = {"runtime_env": env} if address else {"runtime_env": env, "num_cpus": workers}
    try:  # a head's HOST:PORT fails fast, in one line; Ray's own forms (auto, ray://) go to ray.init as given
        return connect(address, setting="--address", ray_forms=True, **kwargs)
    except RayUnavailable as exc:
        raise SystemExit(f"vcemu sweep: {exc}") from None


class CellNotStored(RuntimeError):
    """A finished cell could not be written to ``OUT/cells`` (a full disk, an immutable or read-only folder):
    the run stops there, keeping the cells already stored."""

    def __init__(self, path: Path, error: OSError) -> None:
        super().__init__(f"cannot store {path} ({error.strerror or error})")
        self.path, self.error = path, error


def run_cells(todo: list[tuple[str, Trace, str, float]], cfg: dict[str, Any], cells_dir: Path | None,
              *, progress: bool = True, results: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Run cells as Ray tasks (Ray must be initialised), storing each result as it arrives, and appending its row
    to ``results`` (returned; a caller that passes its own list still has the rows if the run is interrupted). A
    cell that cannot be stored raises :class:`CellNotStored` once the cells still running are cancelled: their
    results would have nowhere to go either."""
    import ray
    from tqdm import tqdm

    remote = ray.remote(num_cpus=1, max_retries=0)(_remote_run_cell)
    trace_refs: dict[str, Any] = {}
    pending: dict[Any, tuple[str, Trace, str, float, float]] = {}
    for key, tr, alg, pen in todo:
        if tr.id not in trace_refs:
            trace_refs[tr.id] = ray.put(list(tr.specs))
        ref = remote.remote(trace_refs[tr.id], alg, pen, tr.hosts, cfg["cell_timeout"], tr.host_memory_gb)
        pending[ref] = (key, tr, alg, pen, time.monotonic())
    results = [] if results is None else results
    backstop = 2 * cfg["cell_timeout"] + 60  # a task stuck outside the policy (queued time included)

    def lost(tr: Trace, alg: str, pen: float, why: str) -> dict[str, Any]:
        return {"algorithm": alg, "penalty": pen, "hosts": tr.hosts, "jobs": len(tr.specs), "status": LOST,
                "error": why, "max_stretch": math.nan}

    def store(res: dict[str, Any], key: str, tr: Trace, pen: float) -> None:
        try:
            results.append(_store(res, key, tr, cells_dir, cell_settings(cfg, tr, pen)))
        except OSError as exc:
            for ref in pending:
                ray.cancel(ref, force=True)
            raise CellNotStored(cells_dir / f"{key}.json" if cells_dir else Path(key), exc) from None

    with tqdm(total=len(todo), desc="sweep", unit="cell", disable=not progress, dynamic_ncols=True) as bar:
        last_progress = time.monotonic()
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1, timeout=5.0)
            if done:
                last_progress = time.monotonic()
            for ref in done:
                key, tr, alg, pen, _t = pending.pop(ref)
                try:
                    res = ray.get(ref)
                except Exception as exc:  # noqa: BLE001 -- run_cell returns the cell's own failures: this is Ray's
                    res = lost(tr, alg, pen, f"{type(exc).__name__}: {exc}")
                store(res, key, tr, pen)
                bar.update(1)
            if not done and time.monotonic() - last_progress > backstop:
                for ref, (key, tr, alg, pen, _t) in list(pending.items()):
                    ray.cancel(ref, force=True)
                    pending.pop(ref)
                    store(lost(tr, alg, pen, f"cancelled by the sweep's backstop ({backstop:g} s without a result)"),
                          key, tr, pen)
                    bar.update(1)
    return results


def _store(res: dict[str, Any], key: str, tr: Trace, cells_dir: Path | None, settings: str) -> dict[str, Any]:
    """The cell's row, with the digest of the settings it was computed with (:func:`cell_settings`); written to
    ``cells_dir`` (atomically) unless Ray lost the cell, so that a rerun runs a lost cell again instead of reading
    the crash as its result."""
    from vcemu.outputs import write_json

    res = {"cell": key, "trace": tr.id, "group": tr.group, "load": tr.load, **res, "settings": settings}
    if cells_dir is not None and res["status"] != LOST:
        write_json(cells_dir / f"{key}.json", res, indent=None)
    return res


def _read_cell(path: Path, unreadable: str = "it is run again") -> dict[str, Any] | None:
    """A stored cell, or None when there is none or it cannot be read (said so, with what follows:
    ``unreadable``)."""
    try:
        cell = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        print(f"vcemu sweep: {path}: unreadable cell ({exc}); {unreadable}", file=sys.stderr)
        return None
    return cell if isinstance(cell, dict) else None


def cell_settings(cfg: dict[str, Any], tr: Trace, penalty: float) -> str:
    """A digest of the settings a cell's result depends on beyond what its id names exactly: the trace's size and
    cluster (``--jobs``, ``--max-jobs``, ``--hosts``, ``--host-memory-gb``, ``--job-scale``; the HPC2N file for
    its weeks), the exact load and penalty (ids round them). Stored in each cell and compared when it is read, so
    that a cell another sweep with other settings wrote under the same id is never taken for this sweep's."""
    vals: dict[str, Any] = {"penalty": penalty, "hosts": tr.hosts, "host_memory_gb": tr.host_memory_gb,
                            "max_jobs": cfg["max_jobs"]}
    if tr.group == "hpc2n":
        vals["hpc2n_sha256"] = cfg["hpc2n_sha256"]
    else:
        vals.update(jobs=cfg["jobs"], job_scale=cfg.get("job_scale", 1.0),
                    load=tr.load if tr.group == "scaled" else None)
    return hashlib.sha256(json.dumps(vals, sort_keys=True).encode()).hexdigest()[:16]


def _unusable(stored: dict[str, Any] | None, code: str, settings: str) -> str | None:
    """Why a stored cell is not a result of this run's code and settings: ``missing`` (none, unreadable, or an
    older vcemu's record of a Ray failure, which lacks ``wall_s``), ``code`` (another source fingerprint) or
    ``settings`` (another :func:`cell_settings` digest); None when it is."""
    if stored is None or "wall_s" not in stored:
        return "missing"
    if stored.get("code") != code:
        return "code"
    if stored.get("settings") != settings:
        return "settings"
    return None


def _to_run(stored: dict[str, Any] | None, cell_timeout: float, retry_failed: bool, code: str,
            settings: str) -> bool:
    """Whether this run, of source fingerprint ``code``, runs a cell whose settings digest is ``settings``, given
    what is stored for it (the rule in the module docstring)."""
    if stored is None or _unusable(stored, code, settings):
        return True
    status = stored.get("status")
    if status == "ok":
        return False
    if retry_failed or status not in ("error", "timeout"):
        return True
    return status == "timeout" and cell_timeout > float(stored["timeout_s"])  # more time than it had


def _parse_floats(text: str, name: str) -> list[float]:
    try:
        vals = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise SystemExit(f"vcemu sweep: {name}: expected comma-separated numbers, got {text!r}") from None
    return vals


def _parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = Parser(
        prog="vcemu sweep", description=doc_text(doc_head(__doc__, paragraph=True)),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="stored cells: ok; error (the cell's own failure: deterministic); timeout (machine-dependent:\n"
               "rerun by a larger --cell-timeout or --retry-failed). Not stored: cells Ray lost (worker crash,\n"
               "node loss, out of memory, the backstop's cancel, lost object): a rerun runs them. A cell stored\n"
               "by other code (its source fingerprint) or with other settings is run again and left out of the\n"
               "reports.\n"
               "resuming: an --out holding a sweep takes the union of its algorithms and penalties with those\n"
               "this command names (none named: the stored ones), and runs every algorithm at every penalty of it\n"
               "(said so when that is more than the command names), so that every table compares the same\n"
               "algorithms; and so of its traces (--traces,\n"
               "--unscaled, --loads, --hpc2n-weeks of the same HPC2N file): a rerun naming more extends it.\n"
               "exit status: 0 every cell of this run ok (--report-only: every cell of the sweep stored); 1 some\n"
               "timed out, failed or were not stored (--report-only: some missing); 2 settings refused (another\n"
               "sweep using --out, an --out that cannot be written); 130 interrupted (Ctrl-C, SIGTERM).")
    p.add_argument("--out", default="results/sweep",
                   help="output directory (resumes if it holds a sweep; one sweep at a time uses it; default "
                        "%(default)s)")
    p.add_argument("--algorithms", default=None,
                   help=f"comma-separated policies (default: those of the sweep in --out; for a new one all nine, "
                        f"as in 001's Table I: {','.join(ALGORITHMS)}); a periodic one may end in its period in "
                        "seconds, dynmcb8-per-60 (001 also ran T = 60 and 3600)")
    p.add_argument("--penalties", default=None,
                   help=f"rescheduling penalties in seconds (default: those of the sweep in --out; for a new one "
                        f"{DEFAULT_PENALTIES}, as in 001)")
    p.add_argument("--traces", type=int, default=20,
                   help="Lublin traces per load level (default %(default)s; 001: 100)")
    p.add_argument("--jobs", type=int, default=1000,
                   help=f"jobs per Lublin trace, at most {MAX_JOBS:,} (default %(default)s, as in 001); all the Lublin "
                        f"traces together at most {MAX_TRACE_JOBS:,} jobs, the sweep at most {MAX_CELLS:,} cells")
    p.add_argument("--loads", default=",".join(f"{x:.1f}" for x in DEFAULT_LOADS),
                   help="offered loads of the scaled Lublin traces (default %(default)s)")
    p.add_argument("--unscaled", type=int, default=0,
                   help="unscaled Lublin traces (Table I, middle column; default 0). Our reconstruction of the Lublin "
                   "arrival process spans about 16 days per 1,000 jobs where 001's spanned 4-6: these run at about a "
                   "third of 001's load, not comparable with its column (workloads/lublin.py)")
    p.add_argument("--hosts", type=int, default=128,
                   help="nodes for the Lublin traces (default %(default)s, as in 001)")
    p.add_argument("--hpc2n", default=os.path.normpath(DEFAULT_HPC2N),
                   help="HPC2N SWF trace path, .swf or .swf.gz (default: the copy in shared/traces beside this clone, "
                        "%(default)s)")
    p.add_argument("--hpc2n-weeks", default="",
                   help=f"HPC2N week indices (0..{MAX_HPC2N_WEEK}), e.g. 10,11 or a range 0-181 (default '': none)")
    p.add_argument("--max-jobs", type=int, default=None,
                   help="keep only the first N jobs of every trace (default: all)")
    p.add_argument("--job-scale", type=float, default=1.0,
                   help="divide every Lublin job's work and inter-arrival time by K (same load, K times the jobs "
                        "per hour; the penalty weighs K times more; default %(default)s)")
    p.add_argument("--cell-timeout", type=float, default=600.0,
                   help="seconds (finite, > 0) before a cell is abandoned (stored as a timeout, with its limit; a "
                        "rerun with a larger limit runs it again; default %(default)s)")
    p.add_argument("--host-memory-gb", type=float, default=8.0,
                   help="node memory (> 0) for the bandwidth of Lublin traces (default %(default)s, 001 footnote 1's "
                        "8 GB; HPC2N: 2 GB)")
    p.add_argument("--seed", type=int, default=1,
                   help="first seed of the Lublin traces, >= 0 (default %(default)s)")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                   help="CPUs of the local Ray (default: this machine's, %(default)s)")
    p.add_argument("--address", default=None,
                   help="an existing Ray cluster: its head's HOST:PORT (as `ray start --head --port` gave it; an "
                        "unreachable head or a refused token is said in one line), ray://HOST:PORT, or auto "
                        "(default: a local Ray of --workers CPUs)")
    p.add_argument("--retry-failed", action="store_true",
                   help="rerun stored cells that timed out or failed (a failure is deterministic: for after a "
                        "code change)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--report-only", action="store_true",
                   help="write the reports from the stored cells of the sweep in --out, run none (with the stored "
                        "sweep's settings: the other flags need not be repeated)")
    return p.parse_args(list(argv))


def _weeks(text: str) -> list[int]:
    """Week indices and ranges A-B (A <= B); a bad item is refused (by :func:`sweep_main`, exit status 2), and so
    is a week named twice, as a load given twice is: its cells would run twice at once into one file. So is an index
    past :data:`MAX_HPC2N_WEEK`, before its range is made (``0-99999999999`` was a MemoryError)."""
    out: list[int] = []
    for part in (x.strip() for x in text.split(",") if x.strip()):
        try:
            a, b = (int(x) for x in part.split("-", 1)) if "-" in part else (int(part),) * 2
        except ValueError:
            raise SystemExit(f"vcemu sweep: --hpc2n-weeks: bad item {part!r} (week indices >= 0 and ranges A-B, "
                             "e.g. 10,11 or 0-181)") from None
        if a > b:
            raise SystemExit(f"vcemu sweep: --hpc2n-weeks: reversed range {part!r}: a range A-B needs "
                             f"A <= B (did you mean {b}-{a}?)")
        if b > MAX_HPC2N_WEEK:
            raise SystemExit(f"vcemu sweep: --hpc2n-weeks: week {b} is past the largest index, {MAX_HPC2N_WEEK} "
                             f"(some 190 years of log; HPC2N's has weeks 0..181), in {part!r}")
        out.extend(range(a, b + 1))
    twice = sorted(w for w, n in Counter(out).items() if n > 1)
    if twice:
        raise SystemExit(f"vcemu sweep: --hpc2n-weeks: week{'s' if len(twice) > 1 else ''} "
                         f"{', '.join(map(str, twice))} given twice in {text!r}; name each week once")
    return out


def _refuse_empty_grid(a: argparse.Namespace, algs: Sequence[str], pens: Sequence[float], loads: Sequence[float],
                       weeks: Sequence[int]) -> None:
    """Refuse settings that give no cell, naming the flags that make it so: such a run reported "0 cells", wrote
    tables of nan and exited 0, as if it had run a sweep. No trace named is no refusal where ``--out`` holds a sweep:
    a rerun covers the stored sweep's traces too (:func:`_extend`), so ``--traces 0`` alone resumes a sweep of HPC2N
    weeks; :func:`_refuse_no_trace` checks the union."""
    if not algs:
        raise SystemExit(f"vcemu sweep: --algorithms: no algorithm in {a.algorithms!r}; nothing to run")
    if not pens:
        raise SystemExit(f"vcemu sweep: --penalties: no penalty in {a.penalties!r}; nothing to run")
    if not (Path(a.out) / "config.json").exists():
        _refuse_no_trace(a, {"traces": a.traces, "loads": loads, "unscaled": a.unscaled, "hpc2n_weeks": weeks})


def _refuse_no_trace(a: argparse.Namespace, cfg: dict[str, Any]) -> None:
    """Refuse a sweep whose settings ``cfg`` (the command's, or their union with a stored sweep's) name no trace."""
    if (cfg["traces"] and cfg["loads"]) or cfg["unscaled"] or cfg["hpc2n_weeks"]:
        return
    lublin = f"--traces {a.traces}" if not a.traces else f"--loads {a.loads!r} (no load)"
    raise SystemExit(f"vcemu sweep: no trace to run: {lublin}, --unscaled {a.unscaled} and --hpc2n-weeks "
                     f"{a.hpc2n_weeks!r} give none; give --traces N (Lublin traces per load), --unscaled N or "
                     "--hpc2n-weeks W")


def config_from_args(a: argparse.Namespace) -> dict[str, Any]:
    try:  # each policy's one name (dynmcb8-per-600 is dynmcb8-per), each once
        algs = list(dict.fromkeys(canonical_name(x) for x in (a.algorithms if a.algorithms is not None else
                                                               ",".join(ALGORITHMS)).split(",") if x.strip()))
    except PolicyNameError as exc:
        raise SystemExit(f"vcemu sweep: --algorithms: {exc}") from None
    loads = _parse_floats(a.loads, "--loads")
    if bad := [x for x in loads if not (math.isfinite(x) and x > 0)]:
        raise SystemExit(f"vcemu sweep: --loads: every load must be a finite number > 0, got {bad[0]}")
    _refuse_shared_ids(loads, _load_id, "--loads", "l")
    pens = _parse_floats(a.penalties if a.penalties is not None else DEFAULT_PENALTIES, "--penalties")
    if bad := [x for x in pens if not (math.isfinite(x) and 0 <= x <= MAX_PENALTY_S)]:
        raise SystemExit(f"vcemu sweep: --penalties: every penalty must be a finite number >= 0 (seconds) and at "
                         f"most {MAX_PENALTY_S:g} (a job's longest work), got {bad[0]}")
    _refuse_shared_ids(pens, _penalty_id, "--penalties", "p")
    checks = (  # each refused on its own line, with the value given (not a list of every rule at once)
        ("--traces", a.traces, a.traces >= 0, "must be >= 0"),
        ("--unscaled", a.unscaled, a.unscaled >= 0, "must be >= 0"),
        ("--jobs", a.jobs, a.jobs >= 2, "must be >= 2"),
        ("--jobs", a.jobs, a.jobs <= MAX_JOBS, f"must be at most {MAX_JOBS:,} jobs per Lublin trace (001: 1,000)"),
        ("--hosts", a.hosts, a.hosts >= 1, "must be >= 1"),
        ("--workers", a.workers, a.workers >= 1, "must be >= 1"),
        # written to config.json and every cell (strict JSON has no NaN or Infinity); for practically no limit,
        # a large number does
        ("--cell-timeout", a.cell_timeout, math.isfinite(a.cell_timeout) and a.cell_timeout > 0,
         "must be a finite number of seconds > 0"),
        ("--host-memory-gb", a.host_memory_gb, math.isfinite(a.host_memory_gb) and a.host_memory_gb > 0,
         "must be a finite number > 0"),
        # numpy seeds the Lublin traces, and takes no negative seed
        ("--seed", a.seed, a.seed >= 0, "must be >= 0"),
        ("--max-jobs", a.max_jobs, a.max_jobs is None or a.max_jobs >= 2, "must be >= 2"),
        # (at most 1,000: a Lublin job's work, a second or more, stays above the model's least work, 1e-6 s; a
        # scale of 1e7 made works of 6e-7 s that the engine refused mid-sweep; diff review)
        ("--job-scale", a.job_scale, math.isfinite(a.job_scale) and 0 < a.job_scale <= MAX_JOB_SCALE,
         f"must be a finite number > 0 and at most {MAX_JOB_SCALE:g}"),
    )
    line = first_refusal("vcemu sweep", checks)
    if line is not None:
        raise SystemExit(line)
    weeks = _weeks(a.hpc2n_weeks)
    _refuse_oversized({"traces": a.traces, "loads": loads, "unscaled": a.unscaled, "jobs": a.jobs,
                       "hpc2n_weeks": weeks, "algorithms": algs, "penalties": pens})
    if not a.report_only:  # (--report-only takes the stored sweep's settings)
        _refuse_empty_grid(a, algs, pens, loads, weeks)
        for alg in algs:  # (such cells end at --cell-timeout, stored as timeouts: that is 001's observation)
            if (why := thrashing(alg, max(pens, default=0.0))) is not None:
                print(f"vcemu sweep: warning: {why}; its cells of such penalties may end at --cell-timeout",
                      file=sys.stderr)
    if a.traces or a.unscaled:  # the Lublin model's size distribution needs a big enough machine
        from workloads.lublin import LublinParams

        try:
            LublinParams(nodes=a.hosts)
        except ValueError as exc:
            raise SystemExit(f"vcemu sweep: --hosts: {exc}") from None
    return {
        "algorithms": algs, "penalties": pens, "traces": a.traces, "jobs": a.jobs, "loads": loads,
        "unscaled": a.unscaled, "hosts": a.hosts, "hpc2n": os.path.abspath(a.hpc2n),
        "hpc2n_weeks": weeks, "max_jobs": a.max_jobs, "job_scale": a.job_scale,
        "cell_timeout": a.cell_timeout, "host_memory_gb": a.host_memory_gb, "seed": a.seed, "workers": a.workers,
        "swf_conversion": None,  # (build_traces sets it: what the HPC2N file's conversion read and dropped)
        "offered_load": "sum_j tasks_j*work_j / (hosts * (last submit - first submit)); levels by scaling "
                        "all inter-arrival times by one constant (workloads.annotate.scale_to_load)",
    }


#: Settings that change results: a stored sweep with other values cannot be resumed (those of :data:`_EXTENDED` are
#: joined instead). ``hpc2n_sha256`` is the HPC2N file's content (None without weeks): another file under the same
#: path gives other results, so it must match when both the stored sweep and the command name weeks.
_RESULT_KEYS = ("traces", "jobs", "loads", "unscaled", "hosts", "hpc2n_weeks", "max_jobs", "host_memory_gb", "seed",
                "job_scale", "hpc2n_sha256")
#: Result keys a rerun extends rather than matches: each trace depends on its own seed and load alone (traces are
#: ``seed + i`` at each load, :func:`build_traces`), so a stored sweep's traces are this run's too, and a rerun with
#: more ``--traces``, ``--unscaled`` or ``--loads`` runs the new traces beside them (the union, as for algorithms and
#: penalties). A finished sweep could only be extended into another ``--out`` (reproducibility review). So too for
#: ``--hpc2n-weeks``: each week depends on the HPC2N file alone, which must be the same (:func:`_mismatched`).
_EXTENDED = ("traces", "unscaled", "loads", "hpc2n_weeks")
#: The value of a result key in a sweep stored before that key existed.
_RESULT_DEFAULTS: dict[str, Any] = {"job_scale": 1.0}
#: The largest ``--job-scale``.
MAX_JOB_SCALE = 1000.0
#: The most ``--jobs`` of a Lublin trace (001: 1,000).
MAX_JOBS = 1_000_000
#: The most jobs of all the Lublin traces together, ``(traces x loads + unscaled) x jobs``: the driver builds and holds
#: them all (about 300 bytes a job), before any cell runs (001's full sweep, 100 traces at 9 loads: 900,000).
MAX_TRACE_JOBS = 5_000_000
#: The most cells of a sweep (001's: about 17,000): each is a task and a file in ``OUT/cells``.
MAX_CELLS = 1_000_000
#: The largest HPC2N week index: some 190 years of log (HPC2N's has 182 weeks, 0..181).
MAX_HPC2N_WEEK = 9_999


def _refuse_oversized(cfg: dict[str, Any], *, stored: bool = False) -> None:
    """Refuse a sweep past :data:`MAX_TRACE_JOBS` or :data:`MAX_CELLS`, naming the flags and the count, before any
    trace is built (``--traces 1000000000 --jobs 2`` hung in silence building traces). ``stored``: ``cfg`` is the
    union with a stored sweep's settings (:func:`_extend`), and the line says so."""
    whose, also = (" (with the stored sweep's)", ", with the stored sweep's") if stored else ("", "")
    lublin = cfg["traces"] * len(cfg["loads"]) + cfg["unscaled"]
    jobs = lublin * cfg["jobs"]
    if jobs > MAX_TRACE_JOBS:
        raise SystemExit(f"vcemu sweep: --traces, --loads, --unscaled, --jobs{whose}: the Lublin traces would hold "
                         f"{jobs:,} jobs (({cfg['traces']} traces x {len(cfg['loads'])} loads + {cfg['unscaled']} "
                         f"unscaled) x {cfg['jobs']} jobs), more than the most, {MAX_TRACE_JOBS:,}; give fewer, or run "
                         "them as several sweeps into other --out folders")
    traces = lublin + len(cfg["hpc2n_weeks"])
    cells = traces * len(cfg["algorithms"]) * len(cfg["penalties"])
    if cells > MAX_CELLS:
        raise SystemExit(f"vcemu sweep: the sweep would have {cells:,} cells ({traces} traces x "
                         f"{len(cfg['algorithms'])} algorithms x {len(cfg['penalties'])} penalties{also}), more than "
                         "the most, "
                         f"{MAX_CELLS:,}; give fewer --traces, --loads, --unscaled, --hpc2n-weeks, --algorithms or "
                         "--penalties")


def _stored_setting(old: dict[str, Any], key: str, cfg: dict[str, Any]) -> Any:
    """A result key's value in the stored config ``old``. A sweep stored before the HPC2N digest was
    recorded named its file by path only: the same path is taken as the same file, once."""
    if key in old:
        return old[key]
    if key == "hpc2n_sha256":
        return cfg[key] if not old.get("hpc2n_weeks") or old.get("hpc2n") == cfg["hpc2n"] else None
    return _RESULT_DEFAULTS.get(key)


def _same_setting(key: str, value: Any) -> Any:
    """A result key's value as two sweeps compare it: the HPC2N weeks as a set (their order changes no cell)."""
    return sorted(set(value)) if key == "hpc2n_weeks" and isinstance(value, list) else value


def _mismatched(cfg: dict[str, Any], old: dict[str, Any]) -> list[str]:
    """The result keys on which ``cfg`` and the stored sweep ``old`` differ, those a rerun extends left out; the HPC2N
    file only when both name weeks (one that names none runs no week of any file)."""
    both_weeks = bool(old.get("hpc2n_weeks")) and bool(cfg.get("hpc2n_weeks"))
    return [k for k in _RESULT_KEYS if k not in _EXTENDED and (k != "hpc2n_sha256" or both_weeks)
            and _same_setting(k, _stored_setting(old, k, cfg)) != _same_setting(k, cfg.get(k))]


#: The flag of each result key :func:`_mismatched` can name (the HPC2N file's digest: its contents).
_FLAGS = {"jobs": "--jobs", "hosts": "--hosts", "max_jobs": "--max-jobs", "host_memory_gb": "--host-memory-gb",
          "seed": "--seed", "job_scale": "--job-scale"}


def _other_settings(out: Path, diff: Sequence[str], cfg: dict[str, Any], old: dict[str, Any]) -> str:
    """The refusal of a run into ``out``, whose stored sweep ``old`` has other values of the result keys ``diff``
    than ``cfg``: each flag with both values, and the flags that resume the stored sweep (README walk-through:
    ``--traces 0`` on a sweep stored with ``--jobs 100`` said "other settings (jobs)", leaving the user to find the
    flag and its value)."""
    parts, resume = [], []
    for k in diff:
        if k in _FLAGS:
            stored = _stored_setting(old, k, cfg)
            parts.append(f"{_FLAGS[k]} {setting_shown(stored)} stored, {setting_shown(cfg.get(k))} now")
            resume.append(f"no {_FLAGS[k]}" if stored is None else f"{_FLAGS[k]} {setting_shown(stored)}")
        else:  # the HPC2N file: the same path may hold another file by now
            parts.append("the HPC2N file's contents (--hpc2n) differ from the stored sweep's")
            resume.append("the HPC2N file it was made with (--hpc2n)")
    how = f"give {', '.join(resume)} to resume it, or use another --out"
    return f"vcemu sweep: {out} holds a sweep with other settings ({'; '.join(parts)}); {how}"


def _extend(cfg: dict[str, Any], old: dict[str, Any]) -> None:
    """Make ``cfg`` cover the stored sweep ``old``'s traces too (:data:`_EXTENDED`), and say so when that is more than
    the command names. Only when every other result key matches: otherwise the run is refused, naming those keys.
    The stored weeks of a command that names none run on the stored sweep's HPC2N file, if it is still the one its
    cells ran (refused otherwise)."""
    if _mismatched(cfg, old):
        return
    named = cfg["hpc2n"]
    if old.get("hpc2n_weeks") and not cfg["hpc2n_weeks"]:
        cfg["hpc2n"] = old.get("hpc2n", cfg["hpc2n"])
        now, unread = _digest_now(cfg["hpc2n"])
        if now is None or old.get("hpc2n_sha256", now) != now:  # (none stored: older vcemu, the file at its path)
            raise SystemExit(f"vcemu sweep: the stored sweep's HPC2N weeks ran on {cfg['hpc2n']}, which "
                             f"{unread or 'is another file now'}; name them with --hpc2n-weeks and --hpc2n of the "
                             "file they ran, or use another --out")
        cfg["hpc2n_sha256"] = now
    was = {k: cfg[k] for k in _EXTENDED}
    cfg["hpc2n_weeks"] = sorted(set(old.get("hpc2n_weeks") or ()) | set(cfg["hpc2n_weeks"]))
    stored_traces = int(old.get("traces", 0))
    # A sweep's loads are those of its Lublin traces: one without any (--traces 0: HPC2N or unscaled traces only)
    # adds none to the union, though its config lists the default nine (diff review).
    loads = (set(old.get("loads", ())) if stored_traces else set()) | (set(cfg["loads"]) if cfg["traces"] else set())
    cfg["traces"] = max(cfg["traces"], stored_traces)
    cfg["unscaled"] = max(cfg["unscaled"], int(old.get("unscaled", 0)))
    if loads:
        cfg["loads"] = sorted(loads)
    # two loads of one id (0.5 and 0.501 are both l0.50) would write each other's cells (diff review)
    _refuse_shared_ids(cfg["loads"], _load_id, "--loads (with the stored sweep's)", "l")
    more = [k for k in _EXTENDED if (set(cfg[k]) != set(was[k]) if k in ("loads", "hpc2n_weeks") else cfg[k] != was[k])]
    if more:
        weeks = f", --hpc2n-weeks {','.join(map(str, cfg['hpc2n_weeks']))}" if cfg["hpc2n_weeks"] else ""
        if cfg["hpc2n_weeks"] and cfg["hpc2n"] != named:
            weeks += f" of {cfg['hpc2n']}"
        print(f"vcemu sweep: the stored sweep has more {', '.join('--' + k.replace('_', '-') for k in more)} than "
              f"this command names: this run covers their union (--traces {cfg['traces']}, --unscaled "
              f"{cfg['unscaled']}, --loads {','.join(f'{x:g}' for x in cfg['loads'])}{weeks})", file=sys.stderr)


def _digest_now(path: str) -> tuple[str | None, str]:
    """The sha256 of the file at ``path`` now, or None and why (``cannot be read now (...)``): a stored sweep's
    HPC2N file, checked before its weeks are reported or run again."""
    from vcemu.provenance import file_sha256

    try:
        return file_sha256(path), ""
    except OSError as exc:
        return None, f"cannot be read now ({exc.strerror or exc})"


def _stale_hpc2n(old: dict[str, Any]) -> str | None:
    """Why the HPC2N file a stored sweep ran is no longer at its path (another file, or none), or None:
    ``--report-only`` reports the stored cells all the same, and says so (it reported them in silence)."""
    path, digest = old.get("hpc2n"), old.get("hpc2n_sha256")
    if not old.get("hpc2n_weeks") or not isinstance(path, str) or not isinstance(digest, str):
        return None
    now, unread = _digest_now(path)
    if now is None:
        return f"the HPC2N file the stored cells ran, {path}, {unread}"
    if now == digest:
        return None
    return (f"{path} is not the HPC2N file the stored cells ran (sha256 {now[:12]}, they ran {digest[:12]}); the "
            "reports are of the stored cells, and a rerun without --report-only is refused")


def _read_config(path: Path) -> dict[str, Any]:
    """The stored sweep's config, or a one-line error naming the file (an older vcemu killed while writing
    it left it empty or half-written), and the key when one is missing or not of its type (:data:`_STORED`: valid
    JSON of wrong types gave tracebacks, "--jobs 20 stored, 20 given" for ``"jobs": "20"``, "another file now" for
    ``"hpc2n_weeks": "abc"``). Refused before anything in the folder is written."""
    try:
        old = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise SystemExit(f"vcemu sweep: {path}: cannot read the stored sweep's config ({exc}); use another "
                         "--out, or remove that file if this run's settings are those of its cells") from None
    if not isinstance(old, dict):
        raise SystemExit(f"vcemu sweep: {path}: not a sweep config (no JSON object); use another --out")
    if (why := _stored_problem(old)) is not None:
        raise SystemExit(f"vcemu sweep: {path}: cannot use the stored sweep's config: {why}; use another --out")
    # (a week named twice, which a vcemu before _weeks refused it stored, is one trace: its cells are one file each)
    old["hpc2n_weeks"] = list(dict.fromkeys(old["hpc2n_weeks"]))
    return old


def _whole(least: int, most: int | None = None) -> Callable[[Any], bool]:
    return lambda v: (isinstance(v, int) and not isinstance(v, bool) and v >= least
                      and (most is None or v <= most))


def _finite(least: float, *, above: bool, most: float | None = None) -> Callable[[Any], bool]:
    return lambda v: (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                      and (v > least if above else v >= least) and (most is None or v <= most))


def _listed(ok: Callable[[Any], bool], *, empty: bool = True) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, list) and (empty or bool(v)) and all(ok(x) for x in v)


#: The keys of a stored config.json this vcemu reads, each with its rule (as :func:`config_from_args` checks the
#: flags) and whether every sweep wrote it (the others, ``job_scale`` and ``hpc2n_sha256``, came later).
_STORED: tuple[tuple[str, bool, Callable[[Any], bool], str], ...] = (
    ("algorithms", True, _listed(lambda x: isinstance(x, str), empty=False), "a non-empty list of policy names"),
    ("penalties", True, _listed(_finite(0, above=False), empty=False),
     "a non-empty list of finite numbers >= 0 (seconds)"),
    ("traces", True, _whole(0), "a whole number >= 0"),
    ("jobs", True, _whole(2, MAX_JOBS), f"a whole number >= 2 and at most {MAX_JOBS:,}"),
    ("loads", True, _listed(_finite(0, above=True)), "a list of finite numbers > 0"),
    ("unscaled", True, _whole(0), "a whole number >= 0"),
    ("hosts", True, _whole(1), "a whole number >= 1"),
    ("hpc2n", True, lambda v: isinstance(v, str) and bool(v), "a file's path"),
    ("hpc2n_weeks", True, _listed(_whole(0, MAX_HPC2N_WEEK)), f"a list of week indices 0..{MAX_HPC2N_WEEK}"),
    ("max_jobs", True, lambda v: v is None or _whole(2)(v), "null or a whole number >= 2"),
    # (not finite: a vcemu before 3fc04c9 took --cell-timeout inf and stored Infinity; code review)
    ("cell_timeout", True, lambda v: isinstance(v, int | float) and not isinstance(v, bool) and v > 0,
     "a number of seconds > 0"),
    ("host_memory_gb", True, _finite(0, above=True), "a finite number > 0"),
    ("seed", True, _whole(0), "a whole number >= 0"),
    ("job_scale", False, _finite(0, above=True, most=MAX_JOB_SCALE),
     f"a finite number > 0 and at most {MAX_JOB_SCALE:g}"),
    ("hpc2n_sha256", False, lambda v: v is None or isinstance(v, str), "null or a sha256 in hex"),
)


def _stored_problem(old: dict[str, Any]) -> str | None:
    """What makes the stored config ``old`` unusable, naming the key (``jobs must be a whole number >= 2 ..., got
    "20"``), or None. A policy name must be one this vcemu knows, written as it writes it (cells are stored by that
    name)."""
    for key, always, ok, rule in _STORED:
        if key not in old:
            if always:
                return f"it has no {key} key (every sweep writes one)"
            continue
        if not ok(old[key]):
            shown = json.dumps(old[key])
            return f"{key} must be {rule}, got {shown if len(shown) <= 80 else shown[:77] + '...'}"
    for name in old["algorithms"]:
        try:
            one = canonical_name(name)
        except PolicyNameError as exc:
            return f"algorithms: {exc}"
        if one != name:
            return f"algorithms: {name!r} is written {one!r} (cells are stored by that name)"
    return None


def sweep_main(argv: Sequence[str]) -> int:
    """``vcemu sweep``; a refused setting (a ``SystemExit`` with a message) exits 2, as the documented
    status says, not 1, which a script may take for cells to retry."""
    try:
        return _sweep(argv)
    except SystemExit as exc:
        if not isinstance(exc.code, str):
            raise
        print(exc.code, file=sys.stderr)
        return 2


#: The file in ``--out`` that a running sweep holds an exclusive ``flock`` on (:func:`out_lock`).
LOCK = ".lock"


@contextlib.contextmanager
def out_lock(out: Path) -> Iterator[None]:
    """Within: an exclusive lock on ``out/.lock`` (:func:`coordinator.locks.claim`), so that one sweep at a time
    uses ``out``. Two at once would each check config.json, then store cells of their own settings under the same
    ids, and each would clear the other's temporary files. Another holder is refused (SystemExit, one line, with
    its pid when it wrote one)."""
    path = out / LOCK
    fd: int | None = None
    try:
        fd = claim(path)
    except Held as held:
        raise SystemExit(f"vcemu sweep: another vcemu sweep{f' (pid {held.pid})' if held.pid else ''} is using "
                         f"{out}; wait for it to end, or use another --out") from None
    except OSError as exc:
        if exc.errno not in NO_LOCKS:
            raise SystemExit(f"vcemu sweep: --out {out}: cannot lock {path} ({exc.strerror or exc})") from None
        # A file system without locks (NFS without lockd, say): sweeps ran there before the lock existed.
        print(f"vcemu sweep: warning: --out {out}: cannot lock {path} ({exc.strerror or exc}); a second sweep "
              "into it at the same time would not be noticed", file=sys.stderr)
    try:
        yield
    finally:
        if fd is not None:
            os.close(fd)


def _holds_sweep(out: Path) -> bool:
    return (out / "config.json").exists() or any((out / "cells").glob("*.json"))


def _sweep(argv: Sequence[str]) -> int:
    from vcemu.provenance import file_sha256

    a = _parse_args(argv)
    cfg = config_from_args(a)
    try:  # the file's identity, once: a stored sweep must match it (see _RESULT_KEYS)
        cfg["hpc2n_sha256"] = file_sha256(cfg["hpc2n"]) if cfg["hpc2n_weeks"] else None
    except OSError as exc:
        raise SystemExit(f"vcemu sweep: --hpc2n: cannot read the trace file {cfg['hpc2n']} "
                         f"({exc.strerror or exc})") from None
    out = Path(a.out)
    if a.report_only and not _holds_sweep(out):  # nothing to report: create nothing (no config of settings never run)
        raise SystemExit(f"vcemu sweep: --report-only: {out} holds no sweep (no config.json, no stored cells); "
                         "nothing to report")
    try:  # before anything runs: a long sweep must not end by failing to store its first cell
        usable_out_dir(out, command="sweep")
        if not a.report_only:
            usable_out_dir(out / "cells")
    except ValueError as exc:
        raise SystemExit(f"vcemu sweep: {exc}") from None
    with out_lock(out), signals_interrupt():
        return _locked_sweep(a, cfg, out)


def _locked_sweep(a: argparse.Namespace, cfg: dict[str, Any], out: Path) -> int:
    """The sweep in ``out``, which this process has locked (:func:`out_lock`), with SIGINT and SIGTERM raising
    KeyboardInterrupt: then one line says how many cells are stored, Ray is shut down, and the status is 130."""
    from coordinator.sweep_report import REPORT_PATTERNS, write_reports
    from vcemu.outputs import clear_outputs, write_json
    from vcemu.provenance import code_version, library_changes, source_fingerprint

    cells_dir = out / "cells"
    cfg_path = out / "config.json"
    # the cells per trace this command names (a flag not given names the stored sweep's, counted after the union)
    named = {"algorithms": len(cfg["algorithms"]) if a.algorithms is not None else None,
             "penalties": len(cfg["penalties"]) if a.penalties is not None else None}
    asked = 0
    grid: list[tuple[str, Trace, str, float]] = []
    usable: set[str] = set()  # the cells of the grid stored with this code and these settings
    ran: list[dict[str, Any]] = []
    code = ""
    ray_started = False
    ray_ctx: RayContext | None = None
    try:
        old: dict[str, Any] | None = None
        if cfg_path.exists():
            old = _read_config(cfg_path)
            if a.report_only:  # the stored sweep's reports, whatever settings flags came with the command
                if (stale := _stale_hpc2n(old)) is not None:
                    print(f"vcemu sweep: warning: {stale}", file=sys.stderr)
                cfg.update({k: _stored_setting(old, k, cfg) for k in _RESULT_KEYS})
                cfg.update({k: old[k] for k in ("hpc2n", "algorithms", "penalties", "cell_timeout") if k in old})
            else:
                _extend(cfg, old)
            if diff := _mismatched(cfg, old):
                raise SystemExit(_other_settings(out, diff, cfg, old))
            # Not named: the stored sweep's, not the defaults' (a stored sweep of three algorithms, resumed with
            # --traces 0 "as it is", ran all nine; reproducibility review). Named: the union.
            given = {"algorithms": a.algorithms is not None, "penalties": a.penalties is not None}
            for key, order in (("algorithms", policy_order), ("penalties", None)):
                if old.get(key) or given[key]:
                    cfg[key] = sorted(set(old.get(key) or ()) | (set(cfg[key]) if given[key] else set()), key=order)
            _refuse_shared_ids(cfg["penalties"], _penalty_id, "--penalties (with the stored sweep's)", "p")
            if not a.report_only:  # (the reports of a stored sweep are read whatever its size: code review)
                _refuse_oversized(cfg, stored=True)
        asked = math.prod(n if n is not None else len(cfg[k]) for k, n in named.items())
        if not a.report_only:  # (not refused before: --out held a sweep, whose traces the run covers too)
            _refuse_no_trace(a, cfg)
        try:
            traces = build_traces(cfg)
        except (OSError, ValueError) as exc:
            raise SystemExit(f"vcemu sweep: {exc}") from None
        if not traces and not a.report_only:  # the flags named some (config_from_args): HPC2N weeks, all skipped
            raise SystemExit(f"vcemu sweep: no trace to run: every week of --hpc2n-weeks {a.hpc2n_weeks!r} was "
                             "skipped (fewer than 2 jobs), and --traces and --unscaled give none")
        if not traces:  # (--report-only of stored cells without a config.json: it wrote empty tables, exit 0)
            where = "the stored config.json" if cfg_path.exists() else "the command (there is no config.json)"
            raise SystemExit(f"vcemu sweep: --report-only: no trace to report: {where} names none; give the "
                             "--traces, --unscaled or --hpc2n-weeks its cells ran")
        code = source_fingerprint()
        grid = [(cell_key(tr.id, alg, pen), tr, alg, pen)
                for tr in traces for pen in cfg["penalties"] for alg in cfg["algorithms"]]
        settings = {key: cell_settings(cfg, tr, pen) for key, tr, _, pen in grid}
        unreadable = "the reports leave it out" if a.report_only else "it is run again"
        stored = {key: _read_cell(cells_dir / f"{key}.json", unreadable) for key, *_ in grid}
        why = {key: _unusable(stored[key], code, settings[key]) for key in stored}
        usable = {key for key, w in why.items() if w is None}
        todo = [c for c in grid if _to_run(stored[c[0]], cfg["cell_timeout"], a.retry_failed, code, settings[c[0]])]
        _say_plan(a, cfg, out, len(traces), len(grid), asked, todo, usable, Counter(why.values()), code)
        if usable and old is not None and (changes := library_changes(old, {"code": code_version()})):
            print(f"vcemu sweep: note: the run that last wrote {cfg_path} had {'; '.join(changes)}: its cells kept "
                  "are not run again (the source is the same), so the reports come from both", file=sys.stderr)
        if a.report_only and grid and not usable:
            # Nothing this code can report: the reports there (an older vcemu's, of cells computed by its code) stay
            # as they are. They were removed, and tables of no cell written in their place (upgrade review).
            print(f"vcemu sweep: no stored cell of {out} can be reported by this code: its reports are left as they "
                  "are; run the sweep without --report-only to compute its cells again with this code",
                  file=sys.stderr)
            return 1
        run = bool(todo) and not a.report_only
        if run:  # first: a cluster that cannot be reached or refuses us leaves the folder as it was, reports too
            ray_started = True
            ray_ctx = ray_init(a.address, a.workers)  # (it keeps the SIGTERM handler above across ray.init)
        # This run writes the reports again at its end: until then there are none, so that a run killed
        # before it leaves cells and config, never an older run's tables beside them.
        try:
            clear_outputs(out, REPORT_PATTERNS)
            clear_outputs(cells_dir, ["*.json.tmp"])  # an older vcemu's temporary cell files
            if not a.report_only:  # --report-only reads a sweep: it never records settings it did not run
                cfg["code"] = code_version()
                write_json(cfg_path, cfg)
        except OSError as exc:  # checked writable above: a disk that has just filled up, say
            print(f"vcemu sweep: cannot write in {out} ({exc.strerror or exc}: {exc.filename}); no cell run",
                  file=sys.stderr)
            return 1
        t0 = time.perf_counter()
        if run:
            try:
                run_cells(todo, cfg, cells_dir, progress=not a.no_progress, results=ran)
            except CellNotStored as exc:
                kept = len(usable | _stored_keys(ran, code))
                print(f"vcemu sweep: {exc}; stopped: {kept} of {len(grid)} cells stored, the cells still running "
                      "cancelled, no reports written; run the same command again to resume once it can store "
                      "there", file=sys.stderr)
                return 1
        wall = time.perf_counter() - t0
        for r in ran:
            if r["status"] != LOST:
                stored[r["cell"]] = r
        rows = [c for key, *_ in grid
                if (c := stored[key]) is not None and _unusable(c, code, settings[key]) is None]
        reported = True
        try:
            paths = write_reports(rows, cfg, out)
        except OSError as exc:
            # Those written before the failure go too: a folder holds all of a run's reports or none (above), and
            # a full disk left three tables without their figures while the run said it wrote none (storage review).
            with contextlib.suppress(OSError):
                clear_outputs(out, REPORT_PATTERNS)
            which = f": {exc.filename}" if exc.filename else ""
            print(f"vcemu sweep: cannot write the reports in {out} ({exc.strerror or exc}{which}); the cells are "
                  "stored: --report-only writes the reports again", file=sys.stderr)
            paths, reported = [], False
        bad = sum(1 for r in rows if r.get("status") != "ok")
        # (the cells run now apart from those stored before: "72 cells in 57.9 s" timed 48 of them, and
        # --report-only's "in 0.0 s" none; README walk-through)
        now = len({r["cell"] for r in ran if r["status"] != LOST} & {r.get("cell") for r in rows})
        timing = (f"{now} run now in {wall:.1f} s" if now else "none run now") + (
            f", {len(rows) - now} stored by earlier runs" if len(rows) > now else "")
        print(f"vcemu sweep: {len(rows)} cells ({bad} timed out or failed; {timing}); wrote "
              + (", ".join(str(p) for p in paths) or "no reports"), file=sys.stderr)
        missing = len(grid) - len(rows)
        if a.report_only:
            return 1 if missing or not reported else 0
        return _say_outcome(ran, code) or (0 if reported else 1)
    except KeyboardInterrupt:
        # The cells under way are abandoned: the errors of their killed workers, which nothing will read, are no news.
        # Ray logged each as "ERROR worker.py -- Unhandled error ... The worker died unexpectedly" after the line
        # below (it reads this variable when it would log one; CI saw it once on a busy machine).
        os.environ["RAY_IGNORE_UNHANDLED_ERRORS"] = "1"
        kept = (f"{len(usable | _stored_keys(ran, code))} of {len(grid)}" if grid  # else: before reading them
                else str(sum(1 for _ in cells_dir.glob("*.json"))))
        print(f"vcemu sweep: interrupted: {kept} cells stored; run the same command again to resume",
              file=sys.stderr, flush=True)
        return INTERRUPTED
    finally:
        if ray_started:
            import ray

            try:
                if ray_ctx is not None:
                    ray_ctx.close()  # shuts Ray down with its messages still silenced, then turns them back on
            finally:
                ray.shutdown()  # (a Ray this process had started before the sweep: as before, shut down too)


def _stored_keys(ran: Sequence[dict[str, Any]], code: str) -> set[str]:
    """The cells of ``ran`` that were stored as results of this code (not lost, not computed by other code)."""
    return {r["cell"] for r in ran if r["status"] != LOST and r.get("code") == code}


def _say_plan(a: argparse.Namespace, cfg: dict[str, Any], out: Path, traces: int, total: int, asked: int,
              todo: Sequence[Any], usable: set[str], why: Counter[str | None], code: str) -> None:
    """The lines a run prints before it runs anything: how many cells, how many stored, what it will run (or,
    with --report-only, how many are missing), and why stored cells are not used."""
    head = (f"vcemu sweep: {traces} traces x {len(cfg['algorithms'])} algorithms x {len(cfg['penalties'])} penalties "
            f"= {total} cells; ")
    if a.report_only:
        gone = total - len(usable)
        print(head + f"{len(usable)} stored" + (f", {gone} missing (the reports leave them out; run without "
                                                f"--report-only to run them)" if gone else ""), file=sys.stderr)
    else:
        print(head + f"{total - len(todo)} stored, {len(todo)} to run", file=sys.stderr)
    if traces and total > traces * asked:
        print(f"vcemu sweep: {out} holds a sweep of more algorithms or penalties than this command names: "
              f"{'the reports cover' if a.report_only else 'this run covers'} their union, "
              f"{', '.join(cfg['algorithms'])} at penalties {', '.join(f'{p:g}' for p in cfg['penalties'])} "
              f"({total - traces * asked} cells more than the command's own), so that every table compares the same "
              "algorithms", file=sys.stderr)
    for reason, how in (("code", f"by other code (another source fingerprint than this code's {code[:12]}, or none)"),
                        ("settings", f"with other settings than this sweep's (another sweep wrote into {out})")):
        if n := why[reason]:
            one = n == 1
            print(f"vcemu sweep: {n} stored cell{'' if one else 's'} {'was' if one else 'were'} computed {how}; "
                  + (f"the reports leave {'it' if one else 'them'} out" if a.report_only
                     else f"{'it is' if one else 'they are'} run again"), file=sys.stderr)


def _say_outcome(ran: Sequence[dict[str, Any]], code: str) -> int:
    """The lines on this run's own cells that were not ok; its exit status (0 or 1)."""
    foreign = [r for r in ran if r["status"] != LOST and r.get("code") != code]
    if foreign:  # Ray workers that import other files than this driver (a cluster with another install)
        print(f"vcemu sweep: {len(foreign)} cells were computed by Ray workers running other code (source "
              f"{str(foreign[0].get('code'))[:12]}, this driver's {code[:12]}): stored, but left out of the reports; "
              "run the sweep where the workers have this code", file=sys.stderr)
    failed = [r for r in ran if r["status"] in ("error", "timeout")]
    lost = [r for r in ran if r["status"] == LOST]
    if failed:
        print(f"vcemu sweep: {len(failed)} of this run's cells timed out or failed (stored; --retry-failed runs "
              f"them again, a larger --cell-timeout the timeouts), e.g. {failed[0]['cell']}: {failed[0]['error']}",
              file=sys.stderr)
    if lost:
        n = len(lost)
        print(f"vcemu sweep: {n} cell{'s' if n != 1 else ''} failed for infrastructure reasons and "
              f"{'were' if n != 1 else 'was'} not stored; run again to retry {'them' if n != 1 else 'it'} "
              f"(e.g. {lost[0]['cell']}: {lost[0]['error']})", file=sys.stderr)
    return 1 if failed or lost or foreign else 0

