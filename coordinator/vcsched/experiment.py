"""The simulation experiments of seed 002 Sec. 4 (and Sec. 5 with ``--parallel-jobs``): ``vcemu vcsched``.

Small set: 4 hosts with 6, 8, 10 or 12 tasks; large set: 64 hosts with 100, 250 or 500 tasks. Memory slack
0.1 .. 0.9, coefficients of variation 0.25 and 0.75 for memory and for CPU (Sec. 4.1): 144 and 108
specifications. Each instance is solved by MCB1-MCB8, GR/SG/GB/SGB, RRND/RRNZ, the MILP (small set only)
and compared with the LP bound. Written to ``--out`` (default ``results/vcsched``), per set:

* ``results.csv``      one row per (instance, algorithm): minimum yield, average yield, failure, run time
  (``seconds``) and the ``session`` that timed it (see below). The LP row's average yield is its minimum yield
  (every job's yield in the relaxation is the bound: :func:`run_instance`);
* ``summary.csv``      per algorithm and slack: mean minimum / average yield over solved instances, failure
  rate, mean run time, and how many sessions timed those rows;
* ``degradation.csv``  Tables 1 and 7: average and maximum % degradation from best among MCB1-MCB8;
* ``mcb_*.png``        Figs. 2-5 (small) / 6, 8-10 (large); ``all_*.png`` Figs. 11-14 / 15-18 (19-22);
* ``config.json``      (one level up) everything needed to reproduce the run, the code that ran it (``"code"``,
  :func:`vcemu.provenance.code_version`), ``"sessions"`` and ``"complete"``.

``--out`` always describes one run. At the start the command removes its previous outputs (only the names above,
in both set directories) and writes ``config.json`` with ``"complete": false``, set to true once every result is
written; every file is replaced atomically, and ``--replot`` refuses an unfinished run. Each instance's rows are
appended to ``results.partial.csv`` (one level up, flushed to disk) as it finishes, so a killed or interrupted run
loses no finished instance: rerun the same command and it keeps them (checking each) and solves only the rest.
If the settings differ from the stored ``config.json`` (anything but ``--jobs``; ``--slacks`` and ``--algorithms``
are stored in one order whatever the order given), the run is refused, naming the flags, and ``--out`` is left as
it was (:func:`coordinator.resumable.other_settings_refusal`); if only the code does (its source fingerprint), it
says so and starts over.
Worker processes end when the command is killed (:func:`coordinator.resumable.die_with_parent`).

Two steps are vcemu's reading, not 002's (:mod:`coordinator.policies.packing`,
:mod:`coordinator.policies.avgyield`): a heuristic's reported minimum yield is the best its placement supports
(never below the search's Y, from which 002 Sec. 3.5 starts), and with ``--parallel-jobs`` the per-job average-yield
step (Sec. 5 gives the metric, no algorithm) is a greedy, which 002 proves optimal for sequential jobs only
(Sec. 3.5): on 64 hosts and 250 tasks the exact LP beats it by 0.0019 average yield on average, by up to 0.0189.

The MCB yield search stops once its interval of yields is at most ``--accuracy`` wide (absolute), 0.001 by default.
That tolerance is vcemu's choice: 002 Sec. 3.4 says only "perform a binary search of possible minimum yield values"
and gives none (0.01 is seed 001's, for its online DYNMCB8). Until this version the default was 0.01, which on the
large set (upper bound ~0.25 at 500 tasks) is ~4% of the bound: the search stopped after 5 probes and held MCB8
3.12% below the LP bound (0.91% at 0.001, 0.81% at 0.0001; Table 7's MCB8 average degradation 0.18% at 0.01,
0.05% at 0.0001, 002: 0.09%). A stored run made with the old default (``config.json``'s ``"accuracy": 0.01``, or no
``"accuracy"`` at all, or null: read as 0.01, the default every earlier vcsched ran with) holds other settings: a
rerun without ``--accuracy 0.01`` into its ``--out`` is refused, naming ``--accuracy``, like any other changed flag
(and one with it starts over, as for any change of code). Replotted, a stored ``"accuracy": 0.01`` is named on the
figures (``other flags given: --accuracy 0.01``), as it is no longer the default.

Every instance is generated from ``SeedSequence([seed, set, tasks, slack, cv_mem, cv_cpu, k])`` (``set`` 0 for
small, 1 for large; slack and CVs by value, in millionths: :func:`seed_key`), so a run is reproducible whatever
``--jobs`` is, and a run of a subset of ``--slacks`` (or of ``--set``, or fewer ``--instances``) gives the same
instances, and rows, as the full run at those settings. RRND and RRNZ draw from streams of their own spawned from it,
so neither's rows depend on whether the other runs. (Before, the slack's *position* in ``--slacks`` keyed its
instances, so ``--slacks 0.7`` and ``--slacks 0.3,0.7`` differed at 0.7; a journal written then carries another
source fingerprint and is not resumed.) Each slack may be given once.

Run times are the CPU time (``time.process_time``) of each worker process per algorithm, so that a busy machine
does not inflate them; they include the average-yield step (shared by all heuristics) and, for RRND/RRNZ, solving
the LP relaxation. The LP row's ``seconds`` is 0 (not timed). Each worker first runs the selected heuristics once,
untimed, on a tiny instance (:func:`_warm`): the first MCB8 call of a process loads or compiles its numba kernels
(about 0.4 s, against well under a millisecond for a small instance), which would otherwise land in the run time of
whichever instance that worker solved first.

A row's ``status`` is its solver's: the MILP's for the MILP row, and the LP relaxation's for the RRND and RRNZ rows
(which round it), so a rounding that found no allocation is ``failed`` 1 beside the relaxation's ``optimal``; empty for
the heuristics and the LP bound.

The MILP's ``--milp-time-limit`` is wall-clock time: where it binds (status ``time_limit``: the best solution found
by then, or a failure), the row depends on the machine's speed and load, and two identical runs can differ. MILP
rows are reproducible only where the limit does not bind; each set's report counts the ``time_limit`` rows (on
stdout and in ``checks.json``'s ``"milp"``).

A resumed run keeps the rows (and so the run times) of the instances an earlier run finished: its results mix
run times measured in different *sessions* (each run of the command is one), possibly at other times, on another
machine or with another ``--jobs``. Every row says which: ``session`` is 1 for the first run and one more for each
resume, and ``config.json``'s ``"sessions"`` gives, per session number, when it started (UTC), the host, its
CPU count and ``--jobs``. Each session is recorded there as it starts, so one that finished no instance keeps
its number (no row carries it) and the next takes the following one. Compare run times within one session (or
rerun into a fresh ``--out``); the yields do not depend on the session.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import os
import platform
import sys
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from coordinator.figures import coinciding_labels, count, marker, plain_log_ticks, settings_note
from coordinator.figures import flags_given as figure_flags
from coordinator.flagcheck import first_refusal
from coordinator.policies.greedy_packing import GREEDY_VARIANTS, greedy_search
from coordinator.policies.packing import MCB_KEYS, Allocation, PackJob, PackProblem, lp_bound, mcb_search
from coordinator.resumable import (
    Journal,
    claim_out,
    die_with_parent,
    other_settings_refusal,
    releasing_out_locks,
    say_resumed,
    unfinished_rows,
)
from coordinator.vcsched.generator import InstanceSpec, generate
from vcemu.cliargs import Parser, max_workers, usable_out_dir
from vcemu.outputs import clear_outputs, save_figure, stored_config, write_json, write_text
from vcemu.provenance import code_version
from vcemu.signals import signals_interrupt

__all__ = ["ExperimentConfig", "run_instance", "vcsched_main"]

SETS = {"small": (4, (6, 8, 10, 12)), "large": (64, (100, 250, 500))}
SLACKS = tuple(round(0.1 * i, 1) for i in range(1, 10))
CVS = (0.25, 0.75)
MCB = tuple(MCB_KEYS)
ALL_ALGOS = (*MCB, *GREEDY_VARIANTS, "RRND", "RRNZ", "MILP")
OVERALL = ("MCB8", *GREEDY_VARIANTS, "RRND", "RRNZ", "MILP", "LP")
#: The columns of ``results.csv`` (and of the journal), as :func:`_row` writes them.
FIELDS = ("set", "hosts", "tasks", "slack", "cv_mem", "cv_cpu", "instance", "algorithm", "failed", "min_yield",
          "avg_yield", "seconds", "status", "session")
JOURNAL = "results.partial.csv"
#: Every file the command writes in a set's directory: what a new run removes first.
SET_OUTPUTS = ("results.csv", "summary.csv", "degradation.csv", "checks.json",
               *(f"{g}_{key}.png" for g in ("mcb", "all") for key in ("min_yield", "avg_yield", "failure_rate",
                                                                       "runtime")))
#: Settings in ``config.json`` that do not change any result: a stored run that differs only in these resumes.
NOT_RESULTS = ("argv", "complete", "sessions")
#: The config keys set by flags that change results, and their flags: a run with others into an ``--out`` that holds
#: work is refused (:func:`coordinator.resumable.other_settings_refusal`).
SETTINGS = {"sets": "--set", "instances": "--instances", "large_instances": "--large-instances", "seed": "--seed",
            "algorithms": "--algorithms", "accuracy": "--accuracy", "search": "--search",
            "backtrack_limit": "--backtrack-limit", "backtrack_limit_large": "--backtrack-limit-large",
            "milp_time_limit": "--milp-time-limit", "rr_max_tasks": "--rr-max-tasks",
            "parallel_jobs": "--parallel-jobs", "slacks": "--slacks"}
#: The MCB yield search's default stopping tolerance (``--accuracy``): vcemu's, 002 Sec. 3.4 gives none. 0.01 (001's
#: threshold, the default until this version) is ~4% of the large set's bound and held MCB8 3.12% below the LP bound.
ACCURACY = 0.001
#: The accuracy every vcsched before :data:`ACCURACY` ran with by default: what a stored config without one used.
OLD_ACCURACY = 0.01
#: What ``--help`` says about the run times (the ``seconds`` column) of a resumed run.
TIMING_HELP = """run times: `seconds` is the CPU time of one worker process per algorithm. A resumed run keeps the
rows an earlier run (session) finished, so its results mix run times of several sessions: results.csv's
`session` column says which session timed each row (1 = the first run, +1 per resume), config.json's
`sessions` when each started, on which host, with how many CPUs and --jobs; summary.csv's `sessions`
counts the sessions behind each mean. Compare run times within one session, or rerun into a new --out.
MCB8 runs compiled (numba), MCB1-MCB7 and GR/SG/GB/SGB in Python: a factor of ~15 between MCB8 and the
other MCBs is the implementation's, and the greedy algorithms can come out slower than MCB8 (002 Sec. 4 has them
faster)."""


@dataclass
class ExperimentConfig:
    """Everything that determines a run (written to ``config.json``)."""

    sets: tuple[str, ...] = ("small", "large")
    instances: int = 10
    large_instances: int | None = None
    seed: int = 0
    algorithms: tuple[str, ...] = ALL_ALGOS
    accuracy: float = ACCURACY  # (vcemu's choice: 002 gives no tolerance; see the module's docstring)
    search: str = "paper"
    backtrack_limit: int = 500_000
    backtrack_limit_large: int | None = None
    milp_time_limit: float = 60.0
    rr_max_tasks: int = 100
    rr_eps: float = 0.01
    parallel_jobs: bool = False
    slacks: tuple[float, ...] = SLACKS
    extra: dict[str, Any] = field(default_factory=dict)

    def n_instances(self, set_name: str) -> int:
        if set_name == "large" and self.large_instances is not None:
            return self.large_instances
        return self.instances

    def attempts(self, set_name: str) -> int:
        if set_name == "large" and self.backtrack_limit_large is not None:
            return self.backtrack_limit_large
        return self.backtrack_limit


@dataclass(frozen=True)
class Unit:
    set_name: str
    hosts: int
    tasks: int
    slack_i: int
    cvm_i: int
    cvc_i: int
    k: int


def seed_key(value: float) -> int:
    """A slack or coefficient of variation as an integer key of an instance's SeedSequence: its value in millionths,
    so that an instance depends on its settings' values, never on their positions in ``--slacks`` (or in
    :data:`CVS`)."""
    return round(value * 1_000_000)


def _units(cfg: ExperimentConfig) -> list[Unit]:
    out = []
    for s in cfg.sets:
        hosts, tasks = SETS[s]
        for n in tasks:
            for si in range(len(cfg.slacks)):
                for a in range(len(CVS)):
                    for b in range(len(CVS)):
                        for k in range(cfg.n_instances(s)):
                            out.append(Unit(s, hosts, n, si, a, b, k))
    return out


def _row(u: Unit, cfg: ExperimentConfig, algo: str, alloc: Allocation | None, secs: float, status: str = "") -> dict:
    return {
        "set": u.set_name,
        "hosts": u.hosts,
        "tasks": u.tasks,
        "slack": cfg.slacks[u.slack_i],
        "cv_mem": CVS[u.cvm_i],
        "cv_cpu": CVS[u.cvc_i],
        "instance": u.k,
        "algorithm": algo,
        "failed": int(alloc is None),
        "min_yield": "" if alloc is None else f"{alloc.min_yield:.6f}",
        "avg_yield": "" if alloc is None else f"{alloc.avg_yield:.6f}",
        "seconds": f"{secs:.6f}",
        "status": status,
    }


def _algorithms(u: Unit, cfg: ExperimentConfig) -> list[str]:
    """The algorithms run on ``u``, in the order of its rows: the LP bound, the packing heuristics, the
    randomized roundings (instances of at most ``rr_max_tasks`` tasks) and the MILP (small set). A journal's
    rows of ``u`` are checked against this list too."""
    heuristics = [a for a in cfg.algorithms if a in MCB_KEYS or a in GREEDY_VARIANTS]
    rr = [a for a in ("RRND", "RRNZ") if a in cfg.algorithms] if u.tasks <= cfg.rr_max_tasks else []
    milp = ["MILP"] if "MILP" in cfg.algorithms and u.set_name == "small" else []
    return ["LP", *heuristics, *rr, *milp]


def run_instance(u: Unit, cfg: ExperimentConfig) -> list[dict]:
    """Generate one instance and run every configured algorithm on it."""
    set_idx = ("small", "large").index(u.set_name)
    ss = np.random.SeedSequence([cfg.seed, set_idx, u.tasks, seed_key(cfg.slacks[u.slack_i]), seed_key(CVS[u.cvm_i]),
                                 seed_key(CVS[u.cvc_i]), u.k])
    # One stream per randomized rounding (children 1 and 2; child 1 is the stream RRND always had): RRNZ drew from
    # wherever RRND had left a shared stream, so its rows changed with whether RRND ran too (reproducibility review)
    gen_rng, rrnd_rng, rrnz_rng = (np.random.default_rng(s) for s in ss.spawn(3))
    spec = InstanceSpec(u.hosts, u.tasks, cfg.slacks[u.slack_i], CVS[u.cvm_i], CVS[u.cvc_i], parallel=cfg.parallel_jobs)
    inst = generate(spec, gen_rng)
    prob = inst.problem()
    rows = []
    bound = lp_bound(inst.jobs, inst.host_arg)
    # The LP's average yield is its minimum yield. On identical hosts (this experiment's) the relaxation's optimum is
    # Y = min(1, H / sum alpha) (002 Sec. 3.1) when total memory fits; maximising the average yield with Y >= that
    # (Sec. 3.5) cannot raise any job: the hosts' CPU (Eq. 8) gives sum_i alpha_i y_i <= H = Y sum_i alpha_i with
    # every y_i >= Y (Eq. 11), so every y_i = Y (or 1 when Y = 1). The same holds per job with parallel jobs
    # (Sec. 5, Eqs. 17 and 21: sum_i T_i alpha_i y_i <= H). Figs. 12, 16 and 20 plot it.
    lp = "" if bound is None else f"{bound:.6f}"
    rows.append({**_row(u, cfg, "LP", None, 0.0), "failed": int(bound is None), "min_yield": lp, "avg_yield": lp})
    algos = _algorithms(u, cfg)
    for algo in algos:
        if algo in MCB_KEYS:
            t = time.process_time()
            a = mcb_search(prob, algo, cfg.accuracy, search=cfg.search)
            rows.append(_row(u, cfg, algo, a, time.process_time() - t))
        elif algo in GREEDY_VARIANTS:
            t = time.process_time()
            a = greedy_search(prob, algo, cfg.attempts(u.set_name))
            rows.append(_row(u, cfg, algo, a, time.process_time() - t))
    rr = [a for a in algos if a in ("RRND", "RRNZ")]
    if rr:
        from coordinator.vcsched.exact import rrnd, rrnz, solve_lp_relaxation

        t = time.process_time()
        relax = solve_lp_relaxation(prob)
        lp_secs = time.process_time() - t
        for name in rr:
            t = time.process_time()
            a = rrnd(prob, rrnd_rng, relax) if name == "RRND" else rrnz(prob, rrnz_rng, relax, cfg.rr_eps)
            rows.append(_row(u, cfg, name, a, lp_secs + time.process_time() - t, relax.status))
    if "MILP" in algos:
        from coordinator.vcsched.exact import solve_milp

        t = time.process_time()
        r = solve_milp(prob, cfg.milp_time_limit)
        rows.append(_row(u, cfg, "MILP", r.allocation, time.process_time() - t, r.status))
    return rows


def _warm(cfg: ExperimentConfig) -> None:
    """Run ``cfg``'s heuristics once, untimed, on a tiny instance (and on one with a parallel job when
    ``cfg.parallel_jobs``): the first MCB8 call of a process loads its numba kernels from the disk cache (or compiles
    them), about 0.4 s against well under a millisecond per small instance, and that must not be timed as the first
    instance's run time. :func:`coordinator.warmup.warm_kernels` is not used: it simulates DYNMCB8 and GREEDY-PMTN-MIGR
    (about 0.5 s per process with a warm cache, 8 s without) and still leaves the per-probe kernel of
    ``--search paper`` cold."""
    # four jobs needing 3 CPUs on 2 hosts: the yield search probes, and the average-yield step runs (yield < 1)
    jobs = [PackJob(1, need, 0.3) for need in (0.9, 0.8, 0.7, 0.6)]
    problems = [PackProblem.build(jobs, 2)]
    if cfg.parallel_jobs:
        problems.append(PackProblem.build([*jobs[:2], PackJob(2, 0.7, 0.2)], 2))
    for prob in problems:
        for algo in cfg.algorithms:
            if algo in MCB_KEYS:
                mcb_search(prob, algo, cfg.accuracy, search=cfg.search)
            elif algo in GREEDY_VARIANTS:
                greedy_search(prob, algo, cfg.attempts("small"))


def _quiet_worker(cfg: ExperimentConfig | None = None) -> None:
    """A worker's initializer: it ends with the command, keeps HiGHS quiet and warms the kernels (:func:`_warm`)
    before any timed work. (Every instance runs in a worker, whatever ``--jobs`` is: the command's own process never
    times one.)"""
    die_with_parent()
    # HiGHS prints some diagnostics straight to file descriptor 1; keep the progress bar readable.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    if cfg is not None:
        _warm(cfg)


def _unit_of(row: dict, cfg: ExperimentConfig) -> Unit | None:
    """The instance a journal row (as :func:`_load_rows` reads it) belongs to, or None if it is none of this
    run's."""
    try:
        u = Unit(row["set"], row["hosts"], row["tasks"], cfg.slacks.index(row["slack"]), CVS.index(row["cv_mem"]),
                 CVS.index(row["cv_cpu"]), row["instance"])
    except ValueError:
        return None
    ok = (u.set_name in cfg.sets and (u.hosts, u.tasks) in {(SETS[u.set_name][0], t) for t in SETS[u.set_name][1]}
          and 0 <= u.k < cfg.n_instances(u.set_name))
    return u if ok else None


def _numbers_or_empty(row: dict) -> bool:
    for k in ("min_yield", "avg_yield", "seconds"):
        if row[k] != "":
            float(row[k])  # raises ValueError
    return True


def resume_rows(out: Path, config: dict, cfg: ExperimentConfig) -> dict[Unit, list[dict]] | None:
    """The finished instances of an unfinished run in ``out`` with the same settings as ``config``, or None
    (with a line on stderr) if ``out`` holds one with other settings. An instance is kept only if it has exactly
    one well-formed row per algorithm it runs; the rest are solved again."""
    stored = unfinished_rows(out, JOURNAL, FIELDS, config, NOT_RESULTS, "vcemu vcsched", as_now=_stored_as_now,
                             results=tuple(f"{s}/results.csv" for s in SETS))
    if stored is None:
        return None
    raw, dropped = stored
    groups: dict[Unit, list[dict]] = defaultdict(list)
    for r in raw:
        try:
            row = _typed(r)
            u = _unit_of(row, cfg) if (row["failed"] in (0, 1) and _numbers_or_empty(row)
                                       and isinstance(row["session"], int) and row["session"] >= 1) else None
        except (KeyError, ValueError):
            u = None
        if u is None:
            dropped += 1
        else:
            groups[u].append(row)
    kept = {}
    for u, rows in groups.items():
        algos = [r["algorithm"] for r in rows]
        if len(algos) == len(set(algos)) and set(algos) == set(_algorithms(u, cfg)):
            kept[u] = rows
        else:
            dropped += len(rows)
    say_resumed("vcemu vcsched", out, len(kept), len(_units(cfg)), "instances", dropped)
    return kept


def _sessions(out: Path, conf: dict[str, Any], kept: dict[Unit, list[dict]] | None, jobs: int) -> list[dict[str, Any]]:
    """``config.json``'s ``"sessions"``: every earlier session of the run this one continues (as the stored
    ``config.json`` describes them; a number only a kept row knows is listed without details), then this one,
    numbered one past the highest of them.

    Each session is written to ``config.json`` as it starts, before it solves anything, and stays listed whatever
    it finishes: numbering from the kept rows alone gave a session that finished no instance (killed, interrupted)
    the number of the next one, so results.csv would credit run times to the wrong host and ``--jobs``. This run
    continues the stored one when it keeps rows of its journal (``kept``, checked against ``conf``), or when the
    stored ``config.json`` is unfinished with the same settings and code (a session that finished nothing); a run
    that starts over (``kept`` None) or follows a finished one is session 1."""
    from coordinator.resumable import settings_as_now, stale_reason

    earlier: dict[int, dict[str, Any]] = {}
    if kept is not None:
        old = stored_config(out)
        if old is not None and (kept or old.get("complete") is False) \
                and stale_reason(settings_as_now(old, _stored_as_now), conf, NOT_RESULTS) is None \
                and isinstance(old.get("sessions"), list):
            earlier = {s["session"]: s for s in old["sessions"]
                       if isinstance(s, dict) and type(s.get("session")) is int and s["session"] >= 1}
    for rows in (kept or {}).values():
        for r in rows:
            earlier.setdefault(r["session"], {"session": r["session"]})
    now = {"session": max(earlier, default=0) + 1,
           "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "host": platform.node(),
           "cpus": os.cpu_count(), "jobs": jobs}
    return [earlier[n] for n in sorted(earlier)] + [now]


def _run_all(cfg: ExperimentConfig, jobs: int, journal_path: Path, kept: dict[Unit, list[dict]],
             session: int = 1, finished: list[Unit] | None = None) -> list[dict]:
    """Solve every instance not in ``kept``, appending each one's rows, marked with ``session``, to the journal as
    it finishes (and its unit to ``finished``, when given: what an interrupted run can say it kept); all rows,
    sorted. Ctrl-C stops the workers at once and raises KeyboardInterrupt (the journal keeps what finished)."""
    from tqdm import tqdm

    units = [u for u in _units(cfg) if u not in kept]
    rows: list[dict] = [r for rs in kept.values() for r in rs]
    ex = ProcessPoolExecutor(max_workers=jobs, initializer=_quiet_worker, initargs=(cfg,))
    interrupted = False
    try:
        with Journal(journal_path, FIELDS, rows) as journal:
            futs = {ex.submit(run_instance, u, cfg): u for u in units}
            for f in tqdm(as_completed(futs), total=len(units) + len(kept), initial=len(kept), desc="vcsched instances",
                          unit="inst", file=sys.stderr, disable=None):  # (no bar off a terminal)
                done = [{**r, "session": session} for r in f.result()]
                journal.append(done)
                rows.extend(done)
                if finished is not None:
                    finished.append(futs[f])
    except KeyboardInterrupt:
        interrupted = True
        for proc in list((getattr(ex, "_processes", None) or {}).values()):
            proc.terminate()
        raise
    finally:
        ex.shutdown(wait=not interrupted, cancel_futures=True)
    order = {a: i for i, a in enumerate(("LP", *ALL_ALGOS))}
    rows.sort(
        key=lambda r: (r["set"], r["tasks"], r["slack"], r["cv_mem"], r["cv_cpu"], r["instance"], order[r["algorithm"]])
    )
    return rows


# ---- analysis -------------------------------------------------------------------------------------------


def _f(v: str) -> float | None:
    return None if v == "" else float(v)


def _by_instance(rows: Iterable[dict]) -> dict[tuple, dict[str, dict]]:
    out: dict[tuple, dict[str, dict]] = defaultdict(dict)
    for r in rows:
        out[(r["tasks"], r["slack"], r["cv_mem"], r["cv_cpu"], r["instance"])][r["algorithm"]] = r
    return out


def degradation_table(rows: list[dict], algos: Iterable[str] = MCB) -> list[dict]:
    """% degradation from best (Sec. 4.2.1): per instance, 100 * (best - y) / best among ``algos``,
    averaged (and maximised) over the instances each algorithm solved. Sorted by average."""
    present = {r["algorithm"] for r in rows}
    algos = tuple(a for a in algos if a in present)
    degs: dict[str, list[float]] = {a: [] for a in algos}
    for per in _by_instance(rows).values():
        ys = {a: _f(per[a]["min_yield"]) for a in algos if a in per and per[a]["failed"] == 0}
        ys = {a: y for a, y in ys.items() if y is not None}
        if not ys:
            continue
        best = max(ys.values())
        if best <= 0:
            continue
        for a, y in ys.items():
            degs[a].append(100.0 * (best - y) / best)
    table = [
        {
            "algorithm": a,
            "avg_deg_pct": float(np.mean(d)) if d else math.nan,
            "max_deg_pct": float(np.max(d)) if d else math.nan,
            "solved": len(d),
        }
        for a, d in degs.items()
    ]
    return sorted(table, key=lambda r: (math.isnan(r["avg_deg_pct"]), r["avg_deg_pct"]))


def gap_to_lp(rows: list[dict], algo: str = "MCB8") -> dict[float, tuple[float, int]]:
    """Per slack: mean of 100 * (LP - y) / LP over instances ``algo`` solved, and their count."""
    acc: dict[float, list[float]] = defaultdict(list)
    for per in _by_instance(rows).values():
        if algo not in per or "LP" not in per or per[algo]["failed"] or per["LP"]["failed"]:
            continue
        lp = float(per["LP"]["min_yield"])
        y = float(per[algo]["min_yield"])
        acc[per[algo]["slack"]].append(100.0 * (lp - y) / lp)
    return {s: (float(np.mean(v)), len(v)) for s, v in sorted(acc.items())}


def milp_time_limits(rows: list[dict]) -> dict[str, int]:
    """How many MILP rows there are and how many stopped at ``--milp-time-limit`` (status ``time_limit``): those
    rows depend on the machine's speed and load (the limit is wall-clock time), so only the others are
    reproducible."""
    milp = [r for r in rows if r["algorithm"] == "MILP"]
    return {"instances": len(milp), "time_limit": sum(r.get("status") == "time_limit" for r in milp)}


def summary(rows: list[dict]) -> list[dict]:
    acc: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        acc[(r["algorithm"], r["slack"])].append(r)
    out = []
    for (algo, slack), rs in sorted(acc.items()):
        ok = [r for r in rs if not r["failed"]]
        mins = [float(r["min_yield"]) for r in ok if r["min_yield"] != ""]
        avgs = [float(r["avg_yield"]) for r in ok if r["avg_yield"] != ""]
        out.append(
            {
                "algorithm": algo,
                "slack": slack,
                "instances": len(rs),
                "failure_rate": (len(rs) - len(ok)) / len(rs),
                "min_yield": float(np.mean(mins)) if mins else math.nan,
                "avg_yield": float(np.mean(avgs)) if avgs else math.nan,
                "seconds": float(np.mean([float(r["seconds"]) for r in rs])),
                "sessions": len({r.get("session", "") for r in rs}),
            }
        )
    return out


def flags_given(conf: Mapping[str, Any], set_name: str) -> list[str]:
    """The flags of a stored config ``conf`` that change the results of set ``set_name`` and that the figures' notes
    do not name otherwise (set, instances, seed, slacks and algorithms are named there), where they are not the
    defaults: ``--search fast``, ``--backtrack-limit-large 1000`` (code review: the notes named none). The large
    set's two flags are the large set's only (``--large-instances`` is in its note's instance count)."""
    named = ("sets", "instances", "seed", "algorithms", "slacks", "large_instances",
             *(("backtrack_limit_large",) if set_name != "large" else ()))
    return figure_flags(conf, asdict(ExperimentConfig()), SETTINGS, named)


def _large_flag(value: int | None, default: int | None, large: bool) -> int | None:
    """A large-set flag as stored: None without a large set (it changes nothing then), and None where it equals the
    value it defaults to (``--instances``, ``--backtrack-limit``), so that giving the default explicitly is not
    "other settings" on a rerun (``--large-instances 1`` with ``--instances 1`` was refused; reproducibility review)."""
    return value if large and value != default else None


def _large_flags_dropped(conf: dict[str, Any]) -> dict[str, Any]:
    """A stored config's large-set flags as this version stores them (:func:`_large_flag`): an older vcsched stored
    them with ``--set small`` too, and the very same command was refused (code review), and stored them where they
    equalled their defaults."""
    large = "large" in (conf.get("sets") or ())
    fix = {"large_instances": "instances", "backtrack_limit_large": "backtrack_limit"}
    return {**conf, **{k: _large_flag(conf[k], conf.get(d), large) for k, d in fix.items() if k in conf}}


def _accuracy_as_run(conf: dict[str, Any]) -> dict[str, Any]:
    """A stored config with the accuracy its run used: :data:`OLD_ACCURACY` where it stored none (no key, or null),
    as every vcsched before :data:`ACCURACY` ran by default; otherwise as stored."""
    return {**conf, "accuracy": OLD_ACCURACY} if conf.get("accuracy") is None else conf


def _set_flag(sets: Any) -> str:
    """A config's ``sets`` as ``--set`` gives them (a refusal shows it): small, large or both."""
    names = sorted(sets) if isinstance(sets, list) else []
    return "both" if names == ["large", "small"] else ",".join(names) if names else str(sets)


def _stored_as_now(conf: dict[str, Any]) -> dict[str, Any]:
    """A stored config as this version would have written it for the same run (the ``as_now`` of
    :func:`coordinator.resumable.other_settings_refusal`, of the journal's read and of :func:`_sessions`): its
    large-set flags as now stored (:func:`_large_flags_dropped`), and its accuracy as it ran
    (:func:`_accuracy_as_run`). A run made with the old default accuracy, 0.01, is thereby one with other settings
    than a run with the default now: refused into its ``--out`` (naming ``--accuracy``), never mixed with it."""
    return _accuracy_as_run(_large_flags_dropped(conf))


def _listed(values: Iterable[float]) -> str:
    """Settings values as a figure's note gives them: ``0.3, 0.6``; four or more evenly spaced ones as a range,
    ``0.1 to 0.9 by 0.1`` (``%g``)."""
    vs = sorted(values)
    steps = [b - a for a, b in zip(vs, vs[1:], strict=False)]
    if len(vs) >= 4 and all(math.isclose(d, steps[0], rel_tol=1e-6, abs_tol=1e-9) for d in steps):
        return f"{vs[0]:g} to {vs[-1]:g} by {steps[0]:.6g}"
    return ", ".join(f"{v:g}" for v in vs)


def _names(algos: list[str]) -> str:
    """Algorithms as a note lists them: MCB1-MCB7 for a run of consecutive MCBs, GR/SG otherwise."""
    mcb = [MCB.index(a) for a in algos if a in MCB]
    if len(mcb) >= 3 and len(mcb) == len(algos) and mcb == list(range(mcb[0], mcb[-1] + 1)):
        return f"{MCB[mcb[0]]}-{MCB[mcb[-1]]}"
    return "/".join(algos)


def _settings_lines(rows: list[dict], set_name: str, seed: Any) -> list[str]:
    """What a vcsched figure says of the run that drew it: the set, its specifications (task counts, slacks and
    CVs of the rows), instances per specification and in all, and the seed (config.json's)."""
    tasks = sorted({int(r["tasks"]) for r in rows})
    hosts = sorted({int(r["hosts"]) for r in rows if r.get("hosts") not in (None, "")})
    slacks = {float(r["slack"]) for r in rows}
    cvm, cvc = {float(r["cv_mem"]) for r in rows}, {float(r["cv_cpu"]) for r in rows}
    specs = {(r["tasks"], r["slack"], r["cv_mem"], r["cv_cpu"]) for r in rows}
    per_spec: dict[tuple, set] = defaultdict(set)
    for r in rows:
        per_spec[(r["tasks"], r["slack"], r["cv_mem"], r["cv_cpu"])].add(r["instance"])
    counts = sorted({len(v) for v in per_spec.values()})
    total = sum(len(v) for v in per_spec.values())
    each = (str(counts[0]) if len(counts) == 1 else f"{counts[0]}-{counts[-1]}") if counts else "0"
    cvs = (f"CV memory and CPU {_listed(cvm)} each" if cvm == cvc
           else f"CV memory {_listed(cvm)}, CV CPU {_listed(cvc)}")
    host_text = f"{'/'.join(map(str, hosts))} hosts, " if hosts else ""
    return [f"{set_name} set: {host_text}{'/'.join(map(str, tasks))} tasks; memory slack {_listed(slacks)}; {cvs}",
            f"{each} instance{'' if each == '1' else 's'} per specification x {count(len(specs), 'specification')} "
            f"({count(len(tasks), 'task count')} x {count(len(slacks), 'slack')} x "
            f"{count(len(cvm) * len(cvc), 'CV pair')}) = {count(total, 'instance')}; "
            f"seed {'not recorded' if seed is None else seed}"]


def _runtime_lines(algos: list[str]) -> list[str]:
    """The run-time figures' note: which algorithms run compiled and which in Python, so that a reader compares the
    implementations' times, not the algorithms' (figures review: MCB8 came out faster than GR/SG, the reverse of
    seed 002 Sec. 4)."""
    from coordinator.policies.mcb8_kernel import mcb8_pack

    kinds: dict[str, list[str]] = {"Compiled": [], "Plain Python": []}
    if "MCB8" in algos:
        kinds["Compiled" if mcb8_pack is not None else "Plain Python"].append(
            "MCB8" + (" (numba)" if mcb8_pack is not None else ""))
    if slow := [a for a in algos if a in MCB and a != "MCB8"]:
        kinds["Plain Python"].append(_names(slow))
    if greedy := [a for a in algos if a in GREEDY_VARIANTS]:
        kinds["Plain Python"].append(_names(greedy))
    if "MILP" in algos:
        kinds["Compiled"].append("MILP (HiGHS solver)")
    parts = [f"{kind}: {', '.join(names)}." for kind, names in kinds.items() if names]
    if rr := [a for a in algos if a in ("RRND", "RRNZ")]:
        parts.append(f"{_names(rr)}: LP relaxation (HiGHS) + rounding in Python.")
    lines = [" ".join(["Run time: mean CPU time per instance.", *parts[:2]])]
    if len(parts) > 1:
        lines.append(" ".join([*parts[2:], "The times compare implementations, not algorithms"
                               + (":" if greedy and "MCB8" in algos else ".")]))
        if greedy and "MCB8" in algos:
            lines.append("seed 002 Sec. 4 has the greedy algorithms faster than MCB8 (15-20 ms vs. nearly 0.5 s for "
                         "500 tasks).")
    return lines


def _plots(rows: list[dict], outdir: Path, set_name: str, parallel: bool, seed: Any = None,
           given: Sequence[str] = ()) -> list[Path]:
    """The set's figures (``mcb_*.png``, ``all_*.png``). Each series has its own colour and marker, the same for an
    algorithm in every figure of its group, and a legend label saying which earlier series it equals (and hides):
    ``SGB (= SG)``. Each figure names its settings at its bottom (``seed``: config.json's, as the caller knows it)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summ = summary(rows)
    present = {r["algorithm"] for r in rows}
    paths = []
    label = f"{set_name} instances" + (", parallel jobs" if parallel else "")
    groups = {"mcb": [a for a in MCB if a in present], "all": [a for a in OVERALL if a in present]}
    all_tasks = {r["tasks"] for r in rows}
    suffix = {}
    for a in present:  # e.g. RRND/RRNZ run only on the smaller instances of the large set
        ts = {r["tasks"] for r in rows if r["algorithm"] == a}
        suffix[a] = "" if ts == all_tasks else f" ({'/'.join(str(t) for t in sorted(ts))} tasks only)"
    settings = _settings_lines(rows, set_name, seed) + ([f"other flags given: {' '.join(given)}"] if given else [])
    metrics = [("min_yield", "Minimum yield"), ("avg_yield", "Average yield"), ("failure_rate", "Failure rate")]

    def draw(ax: Any, series: dict[str, list[tuple[float, float]]], algos: list[str]) -> None:
        labels = coinciding_labels(series)
        for a, pts in series.items():
            i = algos.index(a)  # (an algorithm's colour and marker are the same in every figure of the group)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], color=f"C{i % 10}", marker=marker(i), ms=6,
                    markerfacecolor="none", markeredgewidth=1.3, lw=max(0.8, 2.2 - 0.15 * len(ax.lines)),
                    label=labels[a] + suffix[a], ls="--" if a in ("LP", "MILP") else "-")

    def save(fig: Any, ax: Any, note: list[str], name: str) -> None:
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:  # (none on the MCB plots of a run without MCB)
            ax.legend(fontsize=7, ncol=2)
        fig.tight_layout(rect=settings_note(fig, "\n".join(note)))
        paths.append(save_figure(fig, outdir / name, dpi=110))
        plt.close(fig)

    for g, algos in groups.items():
        if not algos:  # (a run of --algorithms GR,SG drew four empty mcb_*.png, with their notes; review)
            continue
        for key, title in metrics:
            fig, ax = plt.subplots(figsize=(7, 5))
            series = {}
            for a in algos:  # (the LP's average yield is its minimum yield: run_instance)
                pts = sorted((r["slack"], r[key]) for r in summ if r["algorithm"] == a)
                if pts and not all(math.isnan(v) for _, v in pts):
                    series[a] = pts
            draw(ax, series, algos)
            ax.set_xlabel("memory slack")
            ax.set_ylabel(title.lower())
            ax.set_title(f"{title} vs. slack ({label})")
            note = list(settings)
            if key != "failure_rate":  # (the LP's line is over another instance set than the MILP's: review)
                note.append("Each algorithm's mean over the instances it solved"
                            + ("; LP: over the instances whose LP is feasible" if "LP" in series else ""))
            else:
                note.append("Failure rate: share of the instances each algorithm ran that it did not solve")
            save(fig, ax, note, f"{g}_{key}.png")
        fig, ax = plt.subplots(figsize=(7, 5))
        series = {}
        for a in algos:
            if a == "LP":
                continue
            t: dict[int, list[float]] = defaultdict(list)
            for r in rows:
                if r["algorithm"] == a:
                    t[r["tasks"]].append(float(r["seconds"]))
            if t:
                series[a] = [(x, 1000 * float(np.mean(t[x]))) for x in sorted(t)]
        draw(ax, series, algos)
        ax.set_xlabel("number of tasks")
        ax.set_ylabel("run time (ms)")
        ax.set_yscale("log")
        ax.set_title(f"Run time vs. number of tasks ({label})")
        if series:
            plain_log_ticks(ax.yaxis)
        save(fig, ax, [*settings, *_runtime_lines(list(series))], f"{g}_runtime.png")
    return paths


def _write_csv(path: Path, rows: list[dict]) -> None:
    buf = io.StringIO(newline="")
    if rows:
        w = csv.DictWriter(buf, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    write_text(path, buf.getvalue())


def _instance_key(r: dict) -> tuple:
    """What names one instance in results.csv (every algorithm's row of it shares these)."""
    return (r["hosts"], r["tasks"], r["slack"], r["cv_mem"], r["cv_cpu"], r["instance"])


def _overall_rows(rows: list[dict]) -> list[str]:
    """The lines of :func:`overall_lines`' table for ``rows``: per algorithm, over all slacks."""
    summ = {r["algorithm"]: r for r in summary([dict(r, slack=0) for r in rows])}
    lines = []
    for a in ("LP", *ALL_ALGOS):
        if a in summ:
            s = summ[a]
            # The LP bound is not timed; its average yield is its minimum yield (run_instance; "-" in the rows of
            # an older vcsched, which left it empty)
            avg = "     -" if math.isnan(s["avg_yield"]) else f"{s['avg_yield']:.4f}"
            low = "     -" if math.isnan(s["min_yield"]) else f"{s['min_yield']:.4f}"
            took = f"{'-':>9}" if a == "LP" else f"{1000 * s['seconds']:9.3f} ms"
            lines.append(f"   {a:<6} {s['instances']:>5}  fail {100 * s['failure_rate']:5.1f}%  min {low}  avg {avg}  "
                         f"time {took}")
    return lines


def overall_lines(rows: list[dict], set_name: str) -> list[str]:
    """The console's failure rate, mean minimum and average yield and mean run time per algorithm, with the number
    of instances each ran. The randomized roundings run only on instances of at most ``--rr-max-tasks`` tasks (the
    MILP only on the small set): where the algorithms ran on different instances, the table is given again on the
    instances every one of them ran, so that no mean is compared with a mean over other instances (on a 1-instance
    large set, RRNZ's mean average yield over its 100-task instances, 0.89, stood beside MCB8's 0.59 over all
    twelve, where MCB8 had 0.9986 on those same instances)."""
    lines = [f"-- {set_name} set: instances / failure rate / mean min yield / mean avg yield / mean run time "
             "(all slacks)", *_overall_rows(rows)]
    ran: dict[str, set[tuple]] = defaultdict(set)
    for r in rows:
        ran[r["algorithm"]].add(_instance_key(r))
    if len({frozenset(v) for v in ran.values()}) > 1:
        common = set.intersection(*ran.values())
        tasks = sorted({k[1] for k in common}, key=float)
        if common:
            n = len(common)
            lines.append(f"-- {set_name} set: the same on the {n} instance{'' if n == 1 else 's'} every algorithm ran "
                         f"({'/'.join(map(str, tasks))} tasks)")
            lines += _overall_rows([r for r in rows if _instance_key(r) in common])
        else:
            lines.append(f"-- {set_name} set: no instance was run by every algorithm: the means above are over "
                         "different instances")
    return lines


def _report(rows: list[dict], outdir: Path, set_name: str, parallel: bool, seed: Any = None,
            given: Sequence[str] = ()) -> dict[str, Any]:
    outdir.mkdir(parents=True, exist_ok=True)
    _write_csv(outdir / "results.csv", rows)
    _write_csv(outdir / "summary.csv", summary(rows))
    table = degradation_table(rows)
    _write_csv(outdir / "degradation.csv", table)
    _plots(rows, outdir, set_name, parallel, seed, given)
    print(f"\n== {set_name} set: % degradation from best among MCB1-MCB8 (Table {1 if set_name == 'small' else 7})")
    print(f"{'algorithm':<10}{'avg':>8}{'max':>9}{'solved':>8}")
    for r in table:
        print(f"{r['algorithm']:<10}{r['avg_deg_pct']:>8.2f}{r['max_deg_pct']:>9.2f}{r['solved']:>8}")
    gaps = gap_to_lp(rows, "MCB8")
    print(f"-- {set_name} set: MCB8 minimum yield below the LP bound, mean % per slack (solved instances)")
    mcb8_run = "MCB8" in {r["algorithm"] for r in rows}
    print("   " + ("  ".join(f"{s:.1f}:{g:.2f}%({n})" for s, (g, n) in gaps.items()) if mcb8_run
                   else "not run (MCB8 not selected)"))
    hi = [g for s, (g, n) in gaps.items() if s >= 0.3 - 1e-9 for _ in range(n)]
    for line in overall_lines(rows, set_name):
        print(line)
    milp = milp_time_limits(rows)
    if milp["instances"]:
        print(f"-- {set_name} set: the MILP stopped at its time limit (status time_limit) on {milp['time_limit']} of "
              f"{milp['instances']} instances"
              + ("; those rows depend on the machine's speed and load, and another run can differ"
                 if milp["time_limit"] else ""))
    res = {
        "degradation": table,
        "mcb8_gap_to_lp_by_slack": {str(s): g for s, (g, _) in gaps.items()},
        "mcb8_gap_to_lp_slack_ge_0.3": float(np.mean(hi)) if hi else None,
        "best_avg_degradation": table[0]["algorithm"] if table else None,
        "milp": milp,
    }
    if not mcb8_run:
        vs_lp = "not run (MCB8 not selected)"
    elif not hi:
        vs_lp = "no instance at slack >= 0.3 solved by MCB8"
    else:
        vs_lp = f"{res['mcb8_gap_to_lp_slack_ge_0.3']:.2f}% below"
    print(f"-- lowest average degradation: {res['best_avg_degradation'] or 'none (no MCB run)'}; "
          f"MCB8 vs LP at slack >= 0.3: {vs_lp}")
    write_json(outdir / "checks.json", res, indent=1, sort_keys=False)
    return res


def _parser() -> argparse.ArgumentParser:
    p = Parser(prog="vcemu vcsched", description="Run the VCSCHED instance sets of seed 002 Sec. 4.",
               epilog=TIMING_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--set", choices=("small", "large", "both"), default="both",
                   help="instance set: small (4 hosts), large (64 hosts) or both (default both)")
    p.add_argument("--instances", type=int, default=10,
                   help="instances per specification, >= 1 (paper: 10 per small-set specification, 1,440 in all, "
                   "and 100 per large-set one, 10,800 in all; default 10)")
    p.add_argument("--large-instances", type=int, default=None,
                   help="--instances for the large set, >= 1 (default: --instances)")
    p.add_argument("--seed", type=int, default=0, help="seed of every instance, >= 0 (default 0)")
    p.add_argument("--out", default="results/vcsched",
                   help="output directory, one folder per set in it (default results/vcsched)")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                   help="worker processes, >= 1 and at most 4 per core (default: this machine's cores)")
    p.add_argument("--algorithms", default=",".join(ALL_ALGOS),
                   help="comma list, of " + ", ".join(ALL_ALGOS) + " (any case; default: all; the LP bound is "
                   "always included)")
    p.add_argument("--accuracy", type=float, default=ACCURACY,
                   help="MCB yield search: stop once the interval of yields is at most this wide, in (0, 1) "
                   f"(default {ACCURACY:g}). vcemu's choice: 002 Sec. 3.4 gives no tolerance; 0.01 (001's, the "
                   "default before) is ~4%% of the large set's yield bound and held MCB8 ~3%% below the LP bound")
    p.add_argument("--search", choices=("paper", "fast"), default="paper",
                   help="MCB yield search variant (default paper)")
    p.add_argument("--backtrack-limit", type=int, default=500_000,
                   help="GB/SGB placement attempts (Sec. 3.3; default 500000)")
    p.add_argument("--backtrack-limit-large", type=int, default=None,
                   help="--backtrack-limit for the large set (default: the same)")
    p.add_argument("--milp-time-limit", type=float, default=60.0,
                   help="wall-clock seconds per MILP (small set; default 60). Where it binds (status time_limit) "
                   "the row depends on the machine's speed and load: MILP rows are reproducible only where it "
                   "does not; the report counts them")
    p.add_argument(
        "--rr-max-tasks",
        type=int,
        default=100,
        help="run RRND/RRNZ only up to this many tasks (their LP takes ~50 s at 500 tasks; default 100)",
    )
    p.add_argument("--parallel-jobs", action="store_true", help="Sec. 5: parallel jobs (Lublin job sizes)")
    p.add_argument("--slacks", default=",".join(str(s) for s in SLACKS),
                   help="memory slacks, comma-separated, each in [0, 1) and given once; an instance depends on its "
                   f"slack's value, not its place in the list (default {','.join(str(s) for s in SLACKS)})")
    p.add_argument("--replot", action="store_true", help="redo tables and plots from --out's results.csv")
    return p


def _typed(r: dict) -> dict:
    """A row read back from CSV with :func:`_row`'s types (the rest stay strings, as written)."""
    for k in ("hosts", "tasks", "instance", "failed"):
        r[k] = int(r[k])
    if r.get("session"):  # (results.csv of a vcemu before sessions has none)
        r["session"] = int(r["session"])
    for k in ("slack", "cv_mem", "cv_cpu"):
        r[k] = float(r[k])
    return r


def _load_rows(path: Path) -> list[dict]:
    with path.open(newline="") as fh:
        return [_typed(r) for r in csv.DictReader(fh)]


def _replot(out: Path) -> int:
    conf = json.loads((out / "config.json").read_text()) if (out / "config.json").exists() else {}
    if conf.get("complete") is False:
        print(f"vcemu vcsched: --replot: the run in {out} did not finish (config.json says complete: false); "
              "run its command again to finish it", file=sys.stderr)
        return 2
    done = 0
    for s in ("small", "large"):
        f = out / s / "results.csv"
        if f.exists():
            _report(_load_rows(f), out / s, s, bool(conf.get("parallel_jobs", False)), conf.get("seed"),
                    flags_given(conf, s))
            done += 1
    if not done:
        print(f"vcemu vcsched: --replot: no results.csv under {out}/small or {out}/large", file=sys.stderr)
        return 2
    return 0


@releasing_out_locks
def vcsched_main(argv: list[str]) -> int:
    """Entry point of ``vcemu vcsched``. Returns a process exit code."""

    args = _parser().parse_args(argv)
    if args.replot:
        return _replot(Path(args.out))
    given = [a.strip() for a in args.algorithms.split(",") if a.strip()]
    algos = tuple(a.upper() for a in given)  # (any case: "mcb8")
    bad = [g for g, a in zip(given, algos, strict=True) if a not in ALL_ALGOS]
    if bad:
        print(f"vcemu vcsched: --algorithms: unknown {', '.join(bad)}; known: {', '.join(ALL_ALGOS)}", file=sys.stderr)
        return 2
    twice = sorted({a for a in algos if algos.count(a) > 1})  # (each ran twice per instance, and a resume kept none)
    if twice:
        print(f"vcemu vcsched: --algorithms: each value once, got {', '.join(twice)} more than once", file=sys.stderr)
        return 2
    try:
        slacks = tuple(float(s) for s in args.slacks.split(","))
    except ValueError:
        print(f"vcemu vcsched: --slacks: expected comma-separated numbers, got {args.slacks!r}", file=sys.stderr)
        return 2
    bad_slacks = [s for s in slacks if not 0.0 <= s < 1.0]
    keys = [seed_key(s) for s in slacks]
    twice = sorted({s for s, key in zip(slacks, keys, strict=True) if keys.count(key) > 1})
    checks = (  # refused here, not by a worker's traceback once the run is under way
        ("--instances", args.instances, args.instances >= 1, "must be >= 1"),
        ("--large-instances", args.large_instances, args.large_instances is None or args.large_instances >= 1,
         "must be >= 1"),
        # SeedSequence takes only non-negative entropy
        ("--seed", args.seed, args.seed >= 0, "must be >= 0"),
        # the search halves an interval of yields in [0, 1] until it is narrower than this
        ("--accuracy", args.accuracy, math.isfinite(args.accuracy) and 0 < args.accuracy < 1,
         "must be a finite number > 0 and < 1"),
        ("--slacks", args.slacks, not bad_slacks, "every slack must be in [0, 1)"),
        # one slack's instances are seeded by its value: given twice, it would be solved twice and counted twice
        ("--slacks", args.slacks, not twice, f"each slack may be given once ({', '.join(map(str, twice))} repeated)"),
        ("--jobs", args.jobs, 1 <= args.jobs <= max_workers(),
         f"must be >= 1 and <= {max_workers()} (worker processes, not jobs: 4 per core)"),
        ("--backtrack-limit", args.backtrack_limit, args.backtrack_limit >= 1, "must be >= 1"),
        ("--backtrack-limit-large", args.backtrack_limit_large,
         args.backtrack_limit_large is None or args.backtrack_limit_large >= 1, "must be >= 1"),
        ("--milp-time-limit", args.milp_time_limit, math.isfinite(args.milp_time_limit) and args.milp_time_limit > 0,
         "must be a finite number > 0"),
    )
    line = first_refusal("vcemu vcsched", checks)
    if line is not None:
        print(line, file=sys.stderr)
        return 2
    sets = ("small", "large") if args.set == "both" else (args.set,)
    large = "large" in sets  # (the large set's flags change nothing without it: a rerun adding one was refused)
    cfg = ExperimentConfig(
        sets=sets,
        instances=args.instances,
        large_instances=_large_flag(args.large_instances, args.instances, large),
        seed=args.seed,
        # Each in one order whatever the order given (an instance depends on its settings' values, never their
        # places): a resume with --slacks or --algorithms reordered found "other settings" and dropped its work.
        algorithms=tuple(a for a in ALL_ALGOS if a in algos),
        accuracy=args.accuracy,
        search=args.search,
        backtrack_limit=args.backtrack_limit,
        backtrack_limit_large=_large_flag(args.backtrack_limit_large, args.backtrack_limit, large),
        milp_time_limit=args.milp_time_limit,
        rr_max_tasks=args.rr_max_tasks,
        parallel_jobs=args.parallel_jobs,
        slacks=tuple(sorted(slacks)),
    )
    try:
        out = usable_out_dir(args.out, command="vcsched")
        claim_out(out, "vcsched")  # held until this command returns: one run at a time in --out
    except ValueError as exc:
        print(f"vcemu vcsched: {exc}", file=sys.stderr)
        return 2
    conf = asdict(cfg)
    conf["argv"] = list(argv)
    conf["paper"] = "Casanova et al., Resource Allocation using Virtual Clusters, RR-6692 (seed 002), Sec. 4-5"
    conf["code"] = code_version()
    conf["complete"] = False
    if (refusal := other_settings_refusal(out, conf, SETTINGS, JOURNAL, "vcemu vcsched",
                                          unordered=("slacks", "algorithms"), as_now=_stored_as_now,
                                          results=tuple(f"{s}/results.csv" for s in SETS),
                                          shown={"sets": _set_flag})) is not None:
        print(refusal, file=sys.stderr)
        return 2
    try:
        for s in cfg.sets:  # each set's results go to a folder of its own: checked now, not after the work
            usable_out_dir(out / s)
    except ValueError as exc:
        print(f"vcemu vcsched: {exc}", file=sys.stderr)
        return 2
    kept = resume_rows(out, conf, cfg)
    if kept is None:  # (config.json is replaced below, atomically: never removed, so a journal never lacks it)
        clear_outputs(out, [JOURNAL])
    conf["sessions"] = _sessions(out, conf, kept, args.jobs)  # this one recorded before it solves anything
    session = conf["sessions"][-1]["session"]
    for s in SETS:
        clear_outputs(out / s, SET_OUTPUTS)
    write_json(out / "config.json", conf, indent=1, sort_keys=False)
    t0 = time.perf_counter()
    finished: list[Unit] = []
    try:  # SIGTERM as Ctrl-C: the workers stopped, and the line below (it ended at once, saying nothing)
        with signals_interrupt():
            rows = _run_all(cfg, args.jobs, out / JOURNAL, kept or {}, session, finished)
    except KeyboardInterrupt:
        done, total = len(kept or {}) + len(finished), len(_units(cfg))
        print(f"vcemu vcsched: interrupted; {done} of {total} instances finished" + (
            f", kept in {out / JOURNAL}: run the same command again to continue" if done else
            ": nothing to keep; run the same command again to start"), file=sys.stderr)
        return 130
    for s in cfg.sets:
        _report([r for r in rows if r["set"] == s], out / s, s, cfg.parallel_jobs, cfg.seed, flags_given(conf, s))
    write_json(out / "config.json", {**conf, "complete": True}, indent=1, sort_keys=False)
    (out / JOURNAL).unlink(missing_ok=True)
    timed = sorted({r["session"] for r in rows})
    if len(timed) > 1:
        # config.json lists every session: say why some number has no row, lest it look like lost results
        idle = [str(s["session"]) for s in conf["sessions"] if s["session"] not in timed]
        print(f"\nvcemu vcsched: this run was resumed: its run times were measured in sessions "
              f"{', '.join(map(str, timed))}"
              + (f" (session{'s' if len(idle) > 1 else ''} {', '.join(idle)} timed none of them)" if idle else "")
              + "; compare them within one session (the session column of results.csv; "
              "config.json's sessions say when, where and with what --jobs each ran)")
    print(
        f"\nwrote {out}/config.json and {', '.join(f'{out}/{s}/' for s in cfg.sets)} "
        f"in {time.perf_counter() - t0:.1f} s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(vcsched_main(sys.argv[1:]))
