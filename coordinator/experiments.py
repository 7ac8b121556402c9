"""Runs that produce results: a job list through a policy in virtual time, and their reports."""

from __future__ import annotations

import csv
import io
import json
import math
import os
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from coordinator.backends.sim import SimBackend
from coordinator.engine import Engine, Stalled
from coordinator.metrics import History, JobOutcomes, JobResult, Summary, Transition, summarize
from coordinator.model import Host, JobSpec
from coordinator.policies import get_policy
from coordinator.policy_names import thrashing
from vcemu.cliargs import format_table, yield_text
from vcemu.signals import signals_interrupt


def homogeneous_hosts(n: int, prefix: str = "h") -> list[Host]:
    return [Host(f"{prefix}{i}") for i in range(n)]


def simulate(specs: Sequence[JobSpec], policy: str, hosts: Sequence[Host], penalty: float = 0.0,
             on_finish: Callable[[], None] | None = None) -> History:
    """One deterministic simulated run of ``specs`` (submit times as given) under ``policy``, with every
    transition kept (a replay compares them with a live run's). ``on_finish`` is called as each job finishes (a
    progress bar)."""
    return _run(specs, policy, hosts, penalty, on_finish, keep_history=True)


def simulate_results(specs: Sequence[JobSpec], policy: str, hosts: Sequence[Host], penalty: float = 0.0,
                     on_finish: Callable[[], None] | None = None) -> list[JobResult]:
    """:func:`simulate`'s jobs' results, ``job_results(simulate(...))``, folded as the run goes
    (:class:`coordinator.metrics.JobOutcomes`) instead of from a kept history: a long trace's transitions
    (millions) are not held (8 HPC2N weeks of DYNMCB8, 18,090 jobs: a peak of 257 MB instead of 525 MB)."""
    outcomes = JobOutcomes()
    history = _run(specs, policy, hosts, penalty, on_finish, keep_history=False, listener=outcomes)
    return outcomes.results(history.specs)


def _run(specs: Sequence[JobSpec], policy: str, hosts: Sequence[Host], penalty: float,
         on_finish: Callable[[], None] | None, *, keep_history: bool,
         listener: Callable[[Transition], None] | None = None) -> History:
    engine = Engine(get_policy(policy), SimBackend(penalty=penalty), hosts, keep_history=keep_history)
    if listener is not None:
        engine.listeners.append(listener)
    if on_finish is not None:
        engine.listeners.append(lambda t: on_finish() if t.dst.finished and not (t.src and t.src.finished) else None)
    return engine.run(sorted(specs, key=lambda s: (s.submit_time, s.id)))


def follow_jobs(engine: Engine, bar, until: Callable[[int], bool], deadline: float,  # type: ignore[no-untyped-def]
                poll_s: float = 0.2, note: Callable[[], str] | None = None) -> int:
    """For a live run: advance ``bar`` (tqdm) with the engine's finished jobs until ``until(finished)``
    holds or the monotonic ``deadline`` passes; returns the number finished. ``note``: a text shown after the
    bar's figures, made again at every poll (replay's clock in trace time). The bar is closed however this ends:
    a Ctrl-C left it open, and the command's "interrupted" line was written on the bar's line, which tqdm then drew
    again over it (README walk-through)."""
    done = 0
    try:
        while time.monotonic() < deadline:
            with engine.lock:
                finished = sum(1 for r in engine.jobs.values() if r.state.finished)
            if note is not None:
                bar.set_postfix_str(note())
            bar.update(finished - done)
            done = finished
            if until(finished):
                break
            time.sleep(poll_s)
    finally:
        bar.close()
    return done


def busy_machine_note(load: Sequence[float], cores: int | None = None) -> str | None:
    """What a live run comparing itself with its simulation (``vcemu replay``, ``vcemu demo``) says when the
    machine's 1-minute load as it started (``load``: at its start and its end) was above its cores: other processes
    competed with the run's start-ups, agents and coordinator, and, where they outweighed an agent's reservation, with
    its tasks (noisy-neighbour review h217: a replay's jobs 9-53 % from their simulation at loads of 40-60 against 7 %
    at 18, the cause said nowhere; the agents' log says when tasks were charged less than their shares). Judged by
    the load at the start: by its end the run's own processes weigh in (a quiet 2-core VM's demo ended at 2.4,
    review h218). None otherwise."""
    cores = cores or os.cpu_count() or 1
    if not load or load[0] <= cores:
        return None
    return (f"the machine's 1-minute load was {load[0]:.1f} as the live run started ({load[-1]:.1f} at its end), on "
            f"{cores} cores: other processes competed with its tasks' start-ups, its agents and its coordinator (and "
            "with the tasks themselves where they outweighed an agent's reservation: the agents' log says so), so "
            "the live run's departures from its simulation measure the machine's load too")


def _fmt(x: float | None, digits: int = 2) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def results_table(results: Sequence[JobResult]) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = [("JOB", "STATE", "SUBMIT", "WAIT", "RUN", "STRETCH", "B.STRETCH", "YIELD")]
    for r in results:
        rows.append((
            r.job, r.state.value, _fmt(r.submit, 1), _fmt(r.wait, 1), _fmt(r.run_time, 1),
            _fmt(r.stretch), _fmt(r.bounded_stretch),
            "-" if r.final_yield is None or math.isnan(r.final_yield) else yield_text(r.final_yield),
        ))
    return rows


#: The most jobs ``simulate`` prints a row for; past it, the summary alone (the rows are in ``--out``'s jobs.csv).
MAX_TABLE_JOBS = 1000


def simulate_file(path: str, policy: str, hosts: int, penalty: float, as_json: bool,
                  segment: int | tuple[int, int] | None = None, out: str | None = None) -> int:
    """``vcemu simulate``: a job file (JSON lines, CSV, or an SWF trace week) through one policy, with a
    progress bar on a terminal; with ``out``, the results also go to a new folder under it
    (:func:`write_simulation`), named after the run's start and made once the run has finished (``out`` is made
    and checked writable before it starts): a run that fails, is interrupted (Ctrl-C, SIGTERM) or is killed leaves
    no folder, and one that fails removes the parents of ``out`` it created, saying so. A folder under ``out``
    holds a finished run (whole but for a crash while its files are written, a moment). The results still print
    when only writing them failed (exit status 1)."""
    from tqdm import tqdm

    from workloads.jobfile import JobFileError, is_swf, load_jobs, segment_text, shown, unreadable

    cluster = homogeneous_hosts(hosts)
    try:  # each job checked against the hosts and the policy's refusals (FCFS/EASY: whole nodes), naming its line
        refuse = getattr(get_policy(policy), "refuse", None)
        jobs_file = load_jobs(path, hosts=tuple(cluster), segment=segment, refuse=refuse)
    except (JobFileError, OSError, ValueError) as exc:
        print(f"vcemu simulate: {unreadable(path, exc) if isinstance(exc, OSError) else exc}", file=sys.stderr)
        return 2
    specs = jobs_file.jobs
    note = jobs_file.drop_note()
    if note is not None:  # the SWF conversion's rules removed records: said, and recorded in config.json
        print(f"vcemu simulate: {path}: {note}", file=sys.stderr)
    if not specs:
        what = f"{segment_text(segment)} of {shown(path)}" if segment is not None else shown(path)
        print(f"vcemu simulate: no jobs in {what}", file=sys.stderr)
        return 2
    if segment is None and is_swf(path):
        # (the whole HPC2N trace, 202,871 jobs on 120 hosts: FCFS 54 s, EASY 67 s; 64 of its weeks: DYNMCB8 190-250 s
        # (353 MB since results are folded as the run goes: 1.4 GB before, and 2 GB before Transition was slotted),
        # DYNMCB8-PER past 600 s, as a backlog carried from week to week grows: scale review)
        from workloads.annotate import WEEK_S

        weeks = math.floor(max(s.submit_time for s in specs) / WEEK_S) + 1
        print(f"vcemu simulate: {path}: all {len(specs):,} jobs of the trace, {weeks} week{'s' if weeks != 1 else ''} "
              f"in one run (--segment K: week K alone, 0..{weeks - 1}; --segment A-B: weeks A to B); a preempting "
              "policy's backlog carries from week to week, so this can take far longer than the weeks one by one "
              "(vcemu sweep --hpc2n-weeks runs them week by week, as seed 001 does)", file=sys.stderr)
    if not (math.isfinite(penalty) and penalty >= 0):  # the CLI refuses these; a caller in code may not
        print(f"vcemu simulate: --penalty: must be a finite number >= 0, got {penalty}", file=sys.stderr)
        return 2
    if (why := thrashing(policy, penalty)) is not None:
        print(f"vcemu simulate: warning: {why} (Ctrl-C stops it)", file=sys.stderr)
    made: list[Path] = []
    name = ""
    if out is not None:
        from vcemu.cliargs import usable_out_dir
        from workloads.jobfile import STDIN

        # (the file's name cut to fit a folder's name, 255 bytes: a 251-character one ran the whole simulation and
        # then could not write its results; input review; config.json has the whole path)
        source = "stdin" if path == STDIN else os.path.basename(path)[:100]  # (not "greedy--")
        name = f"{policy}-{source}" + ("" if segment is None else "-" + segment_text(segment).replace(" ", ""))
        if not out.strip():  # ("" is the current folder to abspath: the results went there; input review)
            print("vcemu simulate: --out: must be a folder's path, got an empty one", file=sys.stderr)
            return 2
        # Normalised first ("new/../results" is "results"): the folders it makes and may remove again are then
        # those the path names, not a "new" made on the way and a "results" the user had, taken for made.
        out = os.path.abspath(out)
        made = _missing_dirs(Path(out))
        try:  # before the run: its results must have somewhere to go, and not among another command's (a sweep's)
            usable_out_dir(out, command="simulate")
        except ValueError as exc:
            _discard_run_dir(None, made)
            print(f"vcemu simulate: {exc}", file=sys.stderr)
            return 2
    wall0, started = time.monotonic(), time.time()
    try:  # SIGTERM as Ctrl-C (it ended the run at once, saying nothing, and left the folder made before it, empty)
        with signals_interrupt(), tqdm(total=len(specs), unit="job", desc="jobs done", disable=None,
                                       file=sys.stderr, leave=False) as bar:
            results = simulate_results(specs, policy, cluster, penalty, on_finish=lambda: bar.update(1))
        summary = summarize(results)
    except BaseException as exc:  # a bug, Ctrl-C, SIGTERM: no folder claiming a run that produced nothing
        nothing = "" if out is None else f"; no results folder was made in {out}"
        if out is not None:
            _discard_run_dir(None, made)
        if isinstance(exc, KeyboardInterrupt):  # (Ctrl-C or SIGTERM: it said "(KeyboardInterrupt)" for both)
            print(f"vcemu simulate: interrupted{nothing}", file=sys.stderr)
            return 130
        if out is not None:
            print(f"vcemu simulate: the run did not finish ({type(exc).__name__}){nothing}", file=sys.stderr)
        if isinstance(exc, Stalled):  # jobs left that nothing will ever run: said, as a refused input is
            print(f"vcemu simulate: {policy} on {path}: {exc}", file=sys.stderr)
            return 1
        raise
    written = True
    if out is not None:
        from vcemu.outputs import new_run_dir

        folder: Path | None = None
        try:  # the hash of the bytes that were parsed, not of what the path holds by now
            # (one week as its index, as before; weeks A-B as "A-B", as --segment takes them)
            seg = segment if segment is None or isinstance(segment, int) else f"{segment[0]}-{segment[1]}"
            config = {**jobs_file.provenance(), "segment": seg, "policy": policy, "hosts": hosts,
                      "penalty": penalty}
            folder = new_run_dir(out, name, started)
            write_simulation(folder, config, specs, results, summary, time.monotonic() - wall0)
        except BaseException as exc:  # a full disk, the job file gone: no folder half written
            _discard_run_dir(folder, made)
            if not isinstance(exc, OSError | KeyboardInterrupt):
                raise
            why = "interrupted" if isinstance(exc, KeyboardInterrupt) else exc.strerror or exc
            removed = "" if folder is None else f"; removed the unfinished folder {folder}"
            print(f"vcemu simulate: --out {out}: results not written ({why}){removed} (the results are printed "
                  "below)", file=sys.stderr)
            written = False
        else:
            print(f"vcemu simulate: results in {folder}", file=sys.stderr)
    if as_json:
        print(json.dumps({"policy": policy, "hosts": hosts, "penalty": penalty, **summary.__dict__}))
    else:
        if len(results) <= MAX_TABLE_JOBS:
            print(format_table(results_table(results)))
        else:  # (the whole HPC2N trace printed 202,874 lines, 15 MB, before its summary: scale review)
            kept = f"are in {folder / 'jobs.csv'}" if out is not None and written and folder is not None else \
                "go to jobs.csv with --out DIR"
            print(f"(the table of each job is printed up to {MAX_TABLE_JOBS:,} jobs; this run's {len(results):,} "
                  f"{kept})")
        print(
            f"\n{policy}: {summary.completed}/{summary.jobs} done, max bounded stretch "
            f"{summary.max_bounded_stretch:.2f}, mean {summary.mean_bounded_stretch:.2f}, "
            f"{summary.preemptions} preemptions, {summary.migrations} migrations"
        )
    return 0 if written else 1


def _missing_dirs(path: Path) -> list[Path]:
    """``path`` and those of its parents that do not exist yet, innermost first: what making the run's folder
    under it creates, and so what a failed run must take away again (a folder that existed before is left)."""
    missing, p = [], path.absolute()
    while not p.exists() and p != p.parent:
        missing.append(p)
        p = p.parent
    return missing


def _discard_run_dir(folder: Path | None, made: Sequence[Path]) -> None:
    """Remove a failed run's results ``folder`` (made by this run with an exclusive mkdir, so nobody else's)
    and then the parents it ``made``, innermost first, each only if empty: a rerun then finds the output
    directory as it was, not a folder that claims a run which produced nothing. Best effort: the failure that
    brought us here is what the user must hear about."""
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)
    for d in made:
        try:
            d.rmdir()
        except FileNotFoundError:  # removed meanwhile by someone else: its parents may still be ours to remove
            continue
        except OSError:  # not empty (another run wrote there meanwhile): nor are its parents
            break


def write_simulation(folder: Path, config: dict[str, Any], specs: Sequence[JobSpec], results: Sequence[JobResult],
                     summary: Summary, wall_s: float) -> None:
    """One simulation's results in ``folder``: ``config.json`` (what was run, and the code that ran it: the run
    is deterministic, so this reproduces it), ``jobs.csv`` (each job: its request and what it got) and
    ``summary.json`` (``summary``, :func:`coordinator.metrics.summarize` of ``results``, with the run's wall
    time)."""
    from vcemu.outputs import json_safe, write_json, write_text
    from vcemu.provenance import code_version

    code = code_version()
    write_json(folder / "config.json", {**config, "code": code}, sort_keys=False)
    by_id = {s.id: s for s in specs}
    with io.StringIO(newline="") as f:
        w = csv.writer(f)
        w.writerow(["job", "tasks", "cpu_need", "memory", "work", "submit", "state", "start", "end", "wait", "run",
                    "stretch", "bounded_stretch", "final_yield", "preemptions", "migrations"])
        for r in results:  # (the columns of the printed table among them: WAIT and RUN, as there)
            s = by_id[r.job]
            w.writerow([r.job, s.tasks, s.cpu_need, s.mem, s.work, r.submit, r.state.value,
                        *("" if v is None else v
                          for v in (r.start, r.end, r.wait, r.run_time, r.stretch, r.bounded_stretch)),
                        r.final_yield, r.preemptions, r.migrations])
        write_text(folder / "jobs.csv", f.getvalue())
    # (what --json prints, which names the run first, and the wall time)
    run = {k: config[k] for k in ("policy", "hosts", "penalty") if k in config}
    write_json(folder / "summary.json", {**run, **json_safe(summary.__dict__), "wall_s": wall_s, "code": code},
               sort_keys=False)
