"""``vcemu oppcost``: seed 004's simulation study (Sec. 5.1) — N seeded executions of PVM, E-PVM, Mosix and
E-Mosix on identical job streams, the two averages of Table 2 and the scatter plots of Figs. 3-6.

Execution ``k`` uses seed ``seed + k`` for its job stream (:func:`workloads.oppcost_mix.generate`) and for the
methods' random choices, so any execution can be rerun alone. Executions run in worker processes (``--jobs``),
which end if the command is killed (:func:`coordinator.resumable.die_with_parent`), and are handed to them a few at
a time (:data:`AHEAD` per worker), not all at once (a queue whose memory grew with ``--executions``).

Outputs in ``--out``: ``executions.csv`` (one row per execution: jobs, and per method mean slowdown, slowdown
sum and migrations; a "job" in these counts and averages is one process: each component of a parallel job counts
as a job of its own, our reading of Sec. 5.1's "average slowdown over all of the jobs", as the simulations score
each process; ``--explain`` says how many processes came of how many submitted jobs), ``table2.csv`` /
``summary.json`` (average slowdown by execution and by job, as Table 2, and
the median over executions; ``summary.json`` also counts, for each pair of Figs. 3-6, the executions each method
wins), ``config.json`` (everything needed to reproduce the run, and the code that ran it: ``"code"``, as
:func:`vcemu.provenance.code_version` records it, also in ``summary.json``), ``fig3..fig6_*.png``.

The directory always describes one run. At the start the command removes its previous outputs (only the names
above) and writes ``config.json`` with ``"complete": false``; it becomes true once every result is written. Every
file is replaced atomically. Each finished execution is appended to ``executions.partial.csv`` (flushed to disk),
so a run that is killed, or interrupted by Ctrl-C or SIGTERM (the finished executions are then summarised,
``summary.json`` says ``"interrupted": true`` and the exit code is 130), loses nothing: rerun the same command and
it keeps those executions and runs only the missing ones, with the same results as an uninterrupted run. A
finished run is kept the same way when the command is run again with more ``--executions`` (execution k depends
on ``seed + k`` alone): only the new ones run. With fewer ``--executions`` the outputs describe those asked for: the
stored executions past them are deleted (a later run with more runs them again), and a warning says how many. If the
settings differ from the stored ``config.json`` (anything but ``--jobs`` and ``--executions``), the run is refused,
naming the flags, and ``--out`` is left as it was (:func:`coordinator.resumable.other_settings_refusal`: it started
over, deleting what was finished); if only the code does (its source fingerprint), it says so and starts over.
Interrupted before any execution finished, it says so and exits 130 too.

``summary.json``'s ``wall_seconds`` is the wall-clock time spent on its executions, whichever runs ran them: a
resumed run adds its own time to the figure the run it resumes recorded in ``summary.json`` (all of it, or the
kept executions' share of it, by count, when it kept fewer than that run had), and says so. A run killed before it
wrote ``summary.json`` recorded no time: the executions kept from it are not counted, and the command says how many,
as ``summary.json`` does (``executions_without_wall_time``).

An execution whose stream has no job (arrivals are uniform in [0, 20) s apart, so a ``--duration`` of a few tens of
seconds leaves some streams empty) has no average slowdown: it is kept in ``executions.csv`` (``jobs`` 0, means
``nan``) but left out of every per-execution statistic (the averages and median by execution, migrations per
execution, the wins, the figures), and the command says how many; ``summary.json`` counts them
(``"executions_without_jobs"``). A ``--duration`` below the mix's mean inter-arrival time (10 s), where most
streams would be empty, is refused.

Seeds are non-negative (``--seed``, ``--explain``): Python's ``random.Random(-s)`` is ``random.Random(s)``, so
executions of seeds -2..2 would repeat each other.

A simulation that passes its time cap (:class:`coordinator.oppcost.sim.SimulationTooLong`, 1e9 simulated seconds:
processes slowed by a huge ``--beta`` or held in transit by huge ``--migration-fixed`` / ``--migration-per-mb``)
ends the command with one line naming the execution, its seed and those flags, and exit code 1; the executions
finished before it stay in the journal. No upper bound on those flags is imposed instead: whether the cap is reached
depends on the stream (its work and memory draws are heavy-tailed), not on a value a flag could be checked
against."""

from __future__ import annotations

import argparse
import csv
import io
import itertools
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from coordinator.figures import count, flags_given, plain_log_ticks, settings_note
from coordinator.oppcost.sim import SimulationTooLong, simulate
from coordinator.policies.opportunity_cost import (
    COST_LOADS,
    DEFAULT_BETA,
    DEFAULT_THRESHOLD,
    DEFAULT_WINDOW,
    FITS,
    METHODS,
    Machine,
    View,
    make_method,
    out_of_memory,
)
from coordinator.resumable import (
    Journal,
    claim_out,
    die_with_parent,
    other_settings_refusal,
    releasing_out_locks,
    say_resumed,
    unfinished_rows,
)
from vcemu.cliargs import Parser, max_workers, usable_out_dir
from vcemu.outputs import clear_outputs, json_safe, save_figure, write_json, write_text
from vcemu.provenance import code_version
from vcemu.signals import signals_interrupt
from workloads.oppcost_mix import CLUSTER, CLUSTER_NAMES, MixConfig, generate

#: Figs. 3-6 of 004: (x method, y method).
FIGURES = (("fig3", "pvm", "e-pvm"), ("fig4", "mosix", "e-mosix"), ("fig5", "mosix", "e-pvm"),
           ("fig6", "e-pvm", "e-mosix"))
LABELS = {"pvm": "PVM", "e-pvm": "Enhanced PVM", "mosix": "Mosix", "e-mosix": "Enhanced Mosix"}
#: The columns of ``executions.csv`` (and of the journal), in :func:`run_execution`'s order.
FIELDS = ("execution", "seed", "jobs", *(f"{m}_{c}" for m in METHODS for c in ("mean", "sum", "migrations")))
JOURNAL = "executions.partial.csv"
#: Every file the command writes in ``--out``: what a new run removes first (``config.json`` aside: it is
#: replaced, atomically, and a kill between a removal and the rewrite must not orphan the journal).
OUTPUTS = ("executions.csv", JOURNAL, "table2.csv", "summary.json",
           *(f"{f}_{xm}_vs_{ym}.png" for f, xm, ym in FIGURES))
#: Settings in ``config.json`` that do not change any result: a stored run that differs only in these resumes.
#: ``executions`` too: execution k depends on ``seed + k`` alone, so a run of 400 keeps a run's first 300.
NOT_RESULTS = ("jobs", "argv", "complete", "executions")
#: The config keys set by flags that change results, and their flags: a run with others into an ``--out`` that holds
#: work is refused (:func:`coordinator.resumable.other_settings_refusal`).
SETTINGS = {"seed": "--seed", "beta": "--beta", "window": "--window", "threshold": "--threshold",
            "interval": "--interval", "scale": "--scale", "cost_load": "--cost-load", "fit": "--fit",
            "split_memory": "--whole-memory-per-component", "migration_fixed": "--migration-fixed",
            "migration_per_mb": "--migration-per-mb", "duration": "--duration", "memory": "--memory"}
#: A setting's stored value as its flag is given, where that is not the value (a refusal shows it): split_memory is
#: what --whole-memory-per-component turns off.
SHOWN = {"split_memory": lambda split: "not given" if split else "given"}
#: Executions handed to the pool per worker ahead of the results taken: enough to keep every worker busy, few enough
#: that memory does not grow with ``--executions`` (all submitted up front, 1,000,000 took 1.5 GB in 30 s before the
#: first finished).
AHEAD = 4


@dataclass(frozen=True)
class Config:
    executions: int = 300
    seed: int = 1
    jobs: int = 2
    beta: float = DEFAULT_BETA
    window: int = DEFAULT_WINDOW
    threshold: float = DEFAULT_THRESHOLD
    interval: float = 1.0
    scale: str = "peak"
    cost_load: str = "count"
    fit: str = "none"
    split_memory: bool = True
    migration_fixed: float = 0.0
    migration_per_mb: float = 0.0
    duration: float = 10_000.0
    plot_first: int = 1000
    #: memory of each machine of :data:`CLUSTER`, MB, in its order (004's Table 1 is not in our text; see
    #: :func:`cluster`); None keeps the documented guess
    memory: tuple[float, ...] | None = None

    def cluster(self) -> tuple[Machine, ...]:
        """The six machines: :data:`CLUSTER`'s speeds with ``memory`` if given. Only the memories' ratios to
        the largest matter (a job's memory is drawn as a percentage of the largest machine's, Sec. 5), so
        ``--memory`` is the knob for a sensitivity study over the missing Table 1."""
        if self.memory is None:
            return CLUSTER
        return tuple(Machine(speed=m.speed, mem=mb) for m, mb in zip(CLUSTER, self.memory, strict=True))


def run_execution(cfg: Config, k: int) -> dict[str, float]:
    """One execution: all four methods on the stream of seed ``cfg.seed + k``."""
    seed = cfg.seed + k
    cluster = cfg.cluster()
    stream = generate(seed, cluster, MixConfig(duration=cfg.duration, split_memory=cfg.split_memory))
    row: dict[str, float] = {"execution": k, "seed": seed, "jobs": len(stream)}
    for name in METHODS:
        method = make_method(name, beta=cfg.beta, window=cfg.window, threshold=cfg.threshold,
                             cost_load=cfg.cost_load, scale=cfg.scale, fit=cfg.fit)
        res = simulate(stream, cluster, method, seed, interval=cfg.interval, migration_fixed=cfg.migration_fixed,
                       migration_per_mb=cfg.migration_per_mb)
        row[f"{name}_mean"] = res.mean_slowdown
        row[f"{name}_sum"] = sum(res.slowdowns)
        row[f"{name}_migrations"] = res.migrations
    return row


def finished_executions(pool: ProcessPoolExecutor, cfg: Config, todo: Iterable[int],
                        ahead: int) -> Iterator[tuple[int, Future]]:
    """``(k, future)`` for each execution ``k`` of ``todo`` as it finishes, with at most ``ahead`` of them in
    ``pool`` at a time: the next is submitted as each one is taken, before it is yielded, so the workers keep busy."""
    todo = iter(todo)
    pending = {pool.submit(run_execution, cfg, k): k for k in itertools.islice(todo, ahead)}
    while pending:
        fut = next(as_completed(pending))
        k = pending.pop(fut)
        for nxt in itertools.islice(todo, 1):
            pending[pool.submit(run_execution, cfg, nxt)] = nxt
        yield k, fut


def with_jobs(rows: list[dict[str, float]]) -> list[dict[str, float]]:
    """The executions that had at least one job: the only ones with an average slowdown (an empty stream's is NaN),
    so the only ones per-execution statistics count."""
    return [r for r in rows if r["jobs"] > 0]


def summarize(rows: list[dict[str, float]]) -> dict[str, dict[str, float]]:
    """Table 2: the unweighted mean over executions, and the mean over all jobs of all executions; also the median
    over executions (a few executions can carry a mean, see the policy module's docstring). Executions without a
    job are left out (:func:`with_jobs`); NaN throughout when no execution had one."""
    counted = with_jobs(rows)
    jobs = sum(r["jobs"] for r in counted)
    if not counted:
        return {name: dict.fromkeys(("by_execution", "by_job", "median_by_execution", "migrations_per_execution"),
                                    math.nan) for name in METHODS}
    return {name: {"by_execution": sum(r[f"{name}_mean"] for r in counted) / len(counted),
                   "by_job": sum(r[f"{name}_sum"] for r in counted) / jobs,
                   "median_by_execution": statistics.median(r[f"{name}_mean"] for r in counted),
                   "migrations_per_execution": sum(r[f"{name}_migrations"] for r in counted) / len(counted)}
            for name in METHODS}


def wins(rows: list[dict[str, float]]) -> dict[str, int]:
    """For each pair of Figs. 3-6 (x, y): in how many executions (with jobs) y's average slowdown is below x's (y
    wins)."""
    return {f"{ym}<{xm}": sum(r[f"{ym}_mean"] < r[f"{xm}_mean"] for r in with_jobs(rows)) for _, xm, ym in FIGURES}


#: 004's Table 2 orderings of the average slowdown by execution, as (figure, x method, y method): y's is below x's
#: there (E-PVM below PVM, E-Mosix below Mosix).
TABLE2_ORDERINGS = (("fig3", "pvm", "e-pvm"), ("fig4", "mosix", "e-mosix"))
SHORT = {"pvm": "PVM", "e-pvm": "E-PVM", "mosix": "Mosix", "e-mosix": "E-Mosix"}
#: What ``--help`` says of the default machine memories (``--memory``), in its words.
MEMORY_GUESS = "a guess, 004's Table 1 is not in our text"


def table2_ordering(rows: list[dict[str, float]], xm: str, ym: str, sep: str = "; ", subject: str = "this run") -> str:
    """Whether the executions ``rows`` (those with jobs count) show 004's Table 2 ordering "``ym``'s average slowdown
    by execution below ``xm``'s": 004's, ``sep``, the ``subject``'s (a figure's: the executions it shows, which may
    be fewer than the run's), with both averages and (unless ``sep`` breaks the line, for a figure that says it
    already) the executions where ``ym``'s is below (under x = y in the pair's figure); n/a where an average is not
    a number."""
    counted = with_jobs(rows)
    paper = f"004 Table 2: {SHORT[ym]} below {SHORT[xm]} by execution{sep}{subject}: "
    if not counted:
        return paper + "n/a (no execution with jobs)"
    x = sum(r[f"{xm}_mean"] for r in counted) / len(counted)
    y = sum(r[f"{ym}_mean"] for r in counted) / len(counted)
    if not (math.isfinite(x) and math.isfinite(y)):  # (a NaN average was "equal")
        return paper + f"n/a ({y:.3f} vs {x:.3f})"
    # equal to the digits shown, not to the last bit: 1.0 against 1.0 + 1e-12 was "above (1.000 vs 1.000)"
    side = ("equal, unlike 004" if f"{y:.3f}" == f"{x:.3f}" else
            "below, as in 004" if y < x else "above, unlike 004")
    below = sum(r[f"{ym}_mean"] < r[f"{xm}_mean"] for r in counted)
    plural = "" if len(counted) == 1 else "s"
    count = "" if "\n" in sep else f"; {below} of {len(counted)} execution{plural} below x = y"
    return f"{paper}{side} ({y:.3f} vs {x:.3f}{count})"


def memory_note(cfg: Config, sep: str = ": ") -> str:
    """The machines' memory sizes, ``sep``, and whether they are the documented guess (no ``--memory``)."""
    sizes = ",".join(f"{m.mem:g}" for m in cfg.cluster())
    why = f"{MEMORY_GUESS} (--memory to change)" if cfg.memory is None else "as given (--memory)"
    return f"machine memory {sizes} MB ({','.join(CLUSTER_NAMES)}){sep}{why}"


def settings_text(cfg: Config | None, rows: list[dict[str, float]]) -> str:
    """The settings note of Figs. 3-6: the seeds of the executions ``rows`` shown, the thrashing factor, the
    flags given that change results (``--fit``, ``--scale``, ``--cost-load``, ...) and the machines' memory."""
    seeds = sorted(int(r["seed"]) for r in rows)
    if not seeds:
        first = "no execution"
    elif len(seeds) == 1:
        first = f"seed {seeds[0]}"
    else:
        first = (f"seeds {seeds[0]}-{seeds[-1]}" if seeds[-1] - seeds[0] + 1 == len(seeds) else
                 f"seeds {seeds[0]} to {seeds[-1]}, with gaps")
    if cfg is None:
        return first
    first += f" (execution k: seed {cfg.seed} + k), thrashing factor beta {cfg.beta:g}"
    given = flags_given(asdict(cfg), asdict(Config()), SETTINGS, named=("seed", "beta", "memory"))
    return "\n".join([first, *([f"other flags given: {' '.join(given)}"] if given else []),
                      memory_note(cfg, ":\n" if cfg.memory is None else ": ")])


def plot(rows: list[dict[str, float]], out: Path, first: int, cfg: Config | None = None,
         interrupted: bool = False) -> list[Path]:
    """Figs. 3-6 of the first ``first`` executions ``rows``, each with a note of the settings ``cfg`` that produced
    them (:func:`settings_text`); Figs. 3 and 4 also say whether the run shows 004's Table 2 ordering of their pair
    (:func:`table2_ordering`). ``interrupted``: the note says the run is unfinished (the figures of a run stopped
    part way looked final: the review)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator, NullFormatter

    finished = len(rows)  # (all of them: the figures show the first ``first``)
    shown = sorted(rows, key=lambda r: r["execution"])[:first]
    rows = with_jobs(shown)
    empty = len(shown) - len(rows)
    count = f"{len(rows)} execution{'' if len(rows) == 1 else 's'}" + (
        f" ({empty} without jobs left out)" if empty else "")
    note = settings_text(cfg, shown)
    if interrupted:
        of = f" of {cfg.executions} executions" if cfg is not None else " executions"
        note = f"INTERRUPTED: {finished}{of} finished; run the same command again to finish\n{note}"
    paths = []
    for fig_name, xm, ym in FIGURES:
        xs, ys = [r[f"{xm}_mean"] for r in rows], [r[f"{ym}_mean"] for r in rows]
        fig, ax = plt.subplots(figsize=(6, 6))
        ax.scatter(xs, ys, s=10, alpha=0.6, color="tab:blue", edgecolors="none")
        lo, hi = (min(xs + ys) * 0.9, max(xs + ys) * 1.1) if rows else (1.0, 10.0)
        ax.plot([lo, hi], [lo, hi], color="0.6", linewidth=1, label="x = y")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        below = sum(y < x for x, y in zip(xs, ys, strict=True))
        ax.set_xlabel(f"{LABELS[xm]}: average slowdown of the execution")
        ax.set_ylabel(f"{LABELS[ym]}: average slowdown of the execution")
        paper = [table2_ordering(rows, a, b, ";\n", "the executions shown") for f, a, b in TABLE2_ORDERINGS
                 if f == fig_name]
        ax.set_title("\n".join([f"{fig_name[:3].capitalize()}. {fig_name[3:]}: {LABELS[ym]} vs {LABELS[xm]}",
                                f"{count}; {below} below x = y ({LABELS[ym]} better)", *paper]), fontsize=10)
        for axis in (ax.xaxis, ax.yaxis):
            plain_log_ticks(axis)
            if math.log10(hi / lo) < 0.3:  # too narrow for two ticks at k * 10**n: evenly spaced ones instead
                axis.set_major_locator(MaxNLocator(nbins=5))
                axis.set_minor_formatter(NullFormatter())
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(loc="best")  # (fixed at the upper left, it hid the points there: code review)
        rect = settings_note(fig, note)
        fig.tight_layout(rect=rect)
        path = save_figure(fig, out / f"{fig_name}_{xm}_vs_{ym}.png", dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths


def explain(cfg: Config, seed: int, top: int = 5) -> list[str]:
    """What happened in the execution of job-stream seed ``seed`` (``vcemu oppcost --explain SEED``): its largest
    jobs by memory, and per method the mean slowdown, makespan, migrations, final ``L`` and how many machines had
    run out of memory (Sec. 2) when each process arrived. Used to find what carries an average."""
    cluster = cfg.cluster()
    stream = generate(seed, cluster, MixConfig(duration=cfg.duration, split_memory=cfg.split_memory))
    jobs: dict[int, list] = {}
    for p in stream:
        jobs.setdefault(p.job, []).append(p)
    lines = [f"seed {seed}: {len(stream)} processes of {len(jobs)} jobs; cluster memory "
             f"{sum(m.mem for m in cluster):.0f} MB ({', '.join(f'{m.mem:.0f}' for m in cluster)})",
             "largest jobs by memory (processes x MB each, CPU s each, arrival s):"]
    for ps in sorted(jobs.values(), key=lambda ps: -sum(p.mem for p in ps))[:top]:
        lines.append(f"  job {ps[0].job}: {len(ps)} x {ps[0].mem:.1f} MB = {sum(p.mem for p in ps):.0f} MB, "
                     f"{ps[0].work:.1f} s, at {ps[0].arrival:.0f}")
    lines.append(f"{'method':<9}{'mean':>10}{'makespan':>10}{'migr':>7}{'L':>7}  machines out of memory at arrivals "
                 f"(count of arrivals with 0..{len(cluster)})")
    for name in METHODS:
        method = make_method(name, beta=cfg.beta, window=cfg.window, threshold=cfg.threshold,
                             cost_load=cfg.cost_load, scale=cfg.scale, fit=cfg.fit)
        hist = [0] * (len(cluster) + 1)

        def count(now: float, view: View, dst: int, hist: list[int] = hist) -> None:
            hist[sum(out_of_memory(view.lm(i), m.mem) for i, m in enumerate(view.machines))] += 1

        res = simulate(stream, cluster, method, seed, interval=cfg.interval, migration_fixed=cfg.migration_fixed,
                       migration_per_mb=cfg.migration_per_mb, observe=count)
        scale = f"{method.scale.L:.0f}" if name.startswith("e-") else "-"
        lines.append(f"{name:<9}{res.mean_slowdown:>10.2f}{res.makespan:>10.0f}{res.migrations:>7}{scale:>7}  {hist}")
    return lines


def config_json(cfg: Config, argv: list[str], complete: bool = False) -> dict:
    """``config.json``: the settings, the cluster and job mix they give, the command line, the code that runs, and
    whether the run finished."""
    return {**asdict(cfg), "cluster": [{"name": n, "speed": m.speed, "mem_mb": m.mem}
                                       for n, m in zip(CLUSTER_NAMES, cfg.cluster(), strict=True)],
            "mix": asdict(MixConfig(duration=cfg.duration, split_memory=cfg.split_memory)), "argv": argv,
            "code": code_version(), "complete": complete}


def _number(text: str) -> int | float:
    try:
        return int(text)
    except ValueError:
        return float(text)


def _journal_row(raw: dict[str, str], cfg: Config) -> dict[str, float] | None:
    """A journal row back as :func:`run_execution` returned it (ints stay ints, floats round-trip exactly, so
    the outputs equal an uninterrupted run's), or None if it is not an execution of this run."""
    try:
        row = {k: _number(v) for k, v in raw.items()}
    except ValueError:
        return None
    k = row["execution"]
    if not (isinstance(k, int) and 0 <= k < cfg.executions and row["seed"] == cfg.seed + k
            and isinstance(row["jobs"], int) and row["jobs"] >= 0):
        return None
    return row


def resume_rows(out: Path, config: dict, cfg: Config) -> list[dict[str, float]] | None:
    """The finished executions of the run in ``out``, if its settings are those of ``config`` but for the number
    of executions: an unfinished run's (its journal), or a finished run's (``executions.csv``; so that 300
    executions can be taken to 400 without running the 300 again). None (with a line on stderr) if ``out`` holds
    a run with other settings. Rows that do not check out are dropped, to be run again; rows past
    ``--executions`` are left out, and deleted (the journal is rewritten with the rows kept, and the run's outputs
    removed): a line on stderr warns of it, as the outputs of a run of fewer executions no longer hold them."""
    finished = not (out / JOURNAL).exists() and (out / "executions.csv").exists()
    stored = unfinished_rows(out, "executions.csv" if finished else JOURNAL, FIELDS, config, NOT_RESULTS,
                             "vcemu oppcost", "the results of a finished run" if finished else "the journal of a run",
                             as_now=_memory_as_now)
    if stored is None:
        return None
    raw, dropped = stored
    rows: dict[int, dict[str, float]] = {}
    beyond: set[int] = set()
    for r in raw:
        row = _journal_row(r, replace(cfg, executions=2**62))
        if row is not None and row["execution"] >= cfg.executions:
            beyond.add(int(row["execution"]))
        elif row is None or row["execution"] in rows:
            dropped += 1
        else:
            rows[int(row["execution"])] = row
    say_resumed("vcemu oppcost", out, len(rows), cfg.executions, "executions", dropped,
                source="the finished run" if finished else "the unfinished run",
                carried=f"{len(beyond)} past --executions {cfg.executions} left out" if beyond else "")
    if beyond:
        low, high = min(beyond), max(beyond)
        # (an unfinished run's journal may have gaps: "between 1 and 3" read as if 2 were among them; review)
        span = (f"{low}-{high}" if high - low + 1 == len(beyond) > 1 else ", ".join(map(str, sorted(beyond)))
                if len(beyond) <= 5 else f"from {low} to {high}, with gaps")
        them = (f"the {len(beyond)} stored executions past it ({span}); they are" if len(beyond) > 1 else
                f"the 1 stored execution past it ({span}); it is")
        print(f"vcemu oppcost: warning: --executions {cfg.executions}: this run's outputs leave out {them} deleted, "
              "not kept: a later run with more executions runs them again", file=sys.stderr)
    if finished and rows:  # into the journal before the run's outputs, executions.csv among them, are cleared
        Journal(out / JOURNAL, FIELDS, [rows[k] for k in sorted(rows)]).close()
    return [rows[k] for k in sorted(rows)]


@dataclass(frozen=True)
class EarlierWall:
    """What the run a resumed run keeps executions of recorded of its wall-clock time (:func:`earlier_wall`):
    ``seconds`` attributed to the ``known`` kept executions (its ``wall_seconds`` for its ``of`` executions, or
    their share by count when fewer are kept), and how many kept executions' time is ``unknown``."""

    seconds: float = 0.0
    known: int = 0
    of: int = 0
    unknown: int = 0

    def describe(self, now: float | None) -> str:
        """The wall time said at the end of a run that took ``now`` seconds itself (None: it ran no execution)."""
        if not (self.known or self.unknown):
            return f"wall {now or 0.0:.1f} s"
        parts = []
        if self.known:
            share = "" if self.known == self.of else f", their share of the {self.of} it had"
            parts.append(f"{self.seconds:.1f} s recorded by the earlier run for the {self.known} executions kept"
                         f"{share}")
        parts.append("no execution ran this time" if now is None else f"{now:.1f} s this run")
        text = f"wall {self.seconds + (now or 0.0):.1f} s ({'; '.join(parts)})"
        if self.unknown:
            text += (f", not counting the {self.unknown} executions kept whose time no summary.json recorded (a run "
                     "killed before writing it)")
        return text


def earlier_wall(out: Path, kept: int) -> EarlierWall:
    """The wall-clock time the run in ``out`` spent on the ``kept`` executions a resumed run takes from it: its
    ``summary.json`` (written by a finished or interrupted run; a run removes it when it starts, so it is the last
    run's) records ``wall_seconds`` for its ``executions``. None recorded (a killed run, or an unreadable file):
    every kept execution's time is unknown."""
    if not kept:
        return EarlierWall()
    try:
        old = json.loads((out / "summary.json").read_text())
    except (OSError, ValueError):
        return EarlierWall(unknown=kept)
    seconds = old.get("wall_seconds") if isinstance(old, dict) else None
    count = old.get("executions") if isinstance(old, dict) else None
    untimed = old.get("executions_without_wall_time", 0) if isinstance(old, dict) else 0
    if (isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 <= seconds < math.inf
            or isinstance(count, bool) or not isinstance(count, int) or count < 1
            or isinstance(untimed, bool) or not isinstance(untimed, int) or not 0 <= untimed < count):
        return EarlierWall(unknown=kept)
    timed = count - untimed  # (its wall_seconds covers these: the others' time was unknown to it too)
    # The untimed ones are among those kept (they were kept from a killed run by the run that wrote this summary,
    # and a run keeps the lowest-numbered executions): only the kept beyond them are credited with a time.
    known = max(0, min(kept, count) - untimed)
    return EarlierWall(seconds * known / timed, known, timed, kept - known)


def _csv_text(header: list[str], rows: list[list]) -> str:
    buf = io.StringIO(newline="")
    w = csv.writer(buf)
    w.writerow(header)
    w.writerows(rows)
    return buf.getvalue()



def _memory_setting(memory: Sequence[float] | None) -> tuple[float, ...] | None:
    """``--memory`` as stored: None for the default table given explicitly too, so that a rerun naming it is not
    "other settings" than a run without it (it was refused, though both draw the same; reproducibility review)."""
    if memory is None or tuple(float(x) for x in memory) == tuple(m.mem for m in CLUSTER):
        return None
    return tuple(memory)


def _memory_as_now(conf: dict[str, Any]) -> dict[str, Any]:
    """A stored config's ``memory`` as this version stores it (:func:`_memory_setting`)."""
    return {**conf, "memory": _memory_setting(conf.get("memory"))} if "memory" in conf else conf


def _memory(text: str) -> tuple[float, ...]:
    """``--memory``: one positive number of MB per machine of :data:`CLUSTER`, in its order."""
    parts = text.split(",")
    if len(parts) != len(CLUSTER):
        raise argparse.ArgumentTypeError(f"needs {len(CLUSTER)} values ({', '.join(CLUSTER_NAMES)}), got {len(parts)}")
    out = []
    for name, part in zip(CLUSTER_NAMES, parts, strict=True):
        try:
            mb = float(part)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name}: {part!r} is not a number of MB") from None
        if not (mb > 0 and math.isfinite(mb)):
            raise argparse.ArgumentTypeError(f"{name}: memory must be a positive number of MB, got {part!r}")
        out.append(mb)
    return tuple(out)


def _parser() -> argparse.ArgumentParser:
    p = Parser(prog="vcemu oppcost", description="Seed 004 Sec. 5.1: PVM, E-PVM, Mosix and "
               "E-Mosix on identical seeded job streams (Table 2, Figs. 3-6).")
    p.add_argument("--executions", type=int, default=300, help="number of executions (default 300)")
    p.add_argument("--seed", type=int, default=1,
                   help="seed of execution 0, >= 0; execution k uses seed+k (default 1)")
    p.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                   help="worker processes (default: 2, or 1 on a one-core machine)")
    p.add_argument("--out", default="results/oppcost", help="output directory (default results/oppcost)")
    p.add_argument("--beta", type=float, default=DEFAULT_BETA,
                   help=f"thrashing slowdown factor, >= 1 (default {DEFAULT_BETA:g})")
    p.add_argument("--window", type=int, default=DEFAULT_WINDOW,
                   help=f"nodes a Mosix node hears from per interval, 1 to {len(CLUSTER) - 1} (default "
                   f"{DEFAULT_WINDOW})")
    p.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD,
                   help=f"Mosix relative-load threshold (default {DEFAULT_THRESHOLD:g})")
    p.add_argument("--interval", type=float, default=1.0,
                   help="Mosix information/migration interval, s (default 1)")
    p.add_argument("--scale", choices=("peak", "current"), default="peak",
                   help="L = power of two above the largest CPU load so far in the run (peak, default) or now")
    p.add_argument("--cost-load", choices=COST_LOADS, default="count",
                   help="load in the cost's CPU term and in L: process count per speed (count, default: 004 Sec. 2/4), "
                   "thrashing effective load (effective), or effective in the term with L from counts "
                   "(effective-count-scale)")
    p.add_argument("--fit", choices=FITS, default="none",
                   help="E-Mosix under Mosix's memory limit: moves only to a node where the process fits "
                   "(migrations), also new processes where one fits (all), or no limit (none; default)")
    p.add_argument("--whole-memory-per-component", action="store_true",
                   help="each component of a parallel job holds the job's whole memory (default: divided)")
    p.add_argument("--migration-fixed", type=float, default=0.0, help="seconds in transit per migration (default 0)")
    p.add_argument("--migration-per-mb", type=float, default=0.0, help="extra transit seconds per MB (default 0)")
    p.add_argument("--duration", type=float, default=10_000.0,
                   help=f"arrival window, s, >= {MixConfig().mean_interarrival:g} (default 10000)")
    p.add_argument("--memory", type=_memory, default=None, metavar="MB,...",
                   help=f"memory of the {len(CLUSTER)} machines ({', '.join(CLUSTER_NAMES)}), MB, comma-separated "
                   f"(default {','.join(f'{m.mem:g}' for m in CLUSTER)}: a guess, 004's Table 1 is not in our text)")
    p.add_argument("--explain", type=int, metavar="SEED", default=None,
                   help="instead of a study, print what happens in the execution of this job-stream seed (>= 0)")
    return p


def _too_long(exc: SimulationTooLong, what: str, cfg: Config) -> str:
    """The one line that reports a simulation past its time cap: ``what`` (execution and seed), the cause, and the
    flags that slow processes that much."""
    return (f"vcemu oppcost: {what}: {exc}; processes this slow come from the thrashing factor --beta {cfg.beta:g} or "
            f"the migration transit time --migration-fixed {cfg.migration_fixed:g} / --migration-per-mb "
            f"{cfg.migration_per_mb:g}: lower them")


@releasing_out_locks
def oppcost_main(argv: list[str]) -> int:
    """Entry point of ``vcemu oppcost``; returns an exit code (2 for bad arguments, 1 for a simulation that cannot
    finish, 130 when interrupted)."""

    args = _parser().parse_args(argv)
    most = max_workers()
    checks = [("--executions", args.executions >= 1, ">= 1"),
              ("--jobs", 1 <= args.jobs <= most, f">= 1 and <= {most} (worker processes, not jobs: 4 per core)"),
              ("--beta", args.beta >= 1, ">= 1"),
              # (a larger window was taken as all the others, while config.json recorded the value given)
              ("--window", 1 <= args.window <= len(CLUSTER) - 1,
               f">= 1 and <= {len(CLUSTER) - 1} (each of the {len(CLUSTER)} machines hears from the "
               f"{len(CLUSTER) - 1} others at most)"),
              ("--threshold", args.threshold >= 0, ">= 0"), ("--interval", args.interval > 0, "> 0"),
              ("--migration-fixed", args.migration_fixed >= 0, ">= 0"),
              ("--migration-per-mb", args.migration_per_mb >= 0, ">= 0"),
              # (below the mix's mean inter-arrival time most executions would have no job)
              ("--duration", args.duration >= MixConfig().mean_interarrival,
               f">= {MixConfig().mean_interarrival:g} (s, the job mix's mean inter-arrival time)")]
    for flag, ok, rule in checks:
        value = getattr(args, flag[2:].replace("-", "_"))
        if not ok or not math.isfinite(value):
            print(f"vcemu oppcost: {flag}: must be a finite number {rule}, got {value!r}", file=sys.stderr)
            return 2
    for flag, seed in (("--seed", args.seed), ("--explain", args.explain)):
        if seed is not None and seed < 0:
            print(f"vcemu oppcost: {flag}: must be >= 0 (random.Random(-s) draws what random.Random(s) does, so a "
                  f"negative seed repeats a positive one), got {seed}", file=sys.stderr)
            return 2
    cfg = Config(executions=args.executions, seed=args.seed, jobs=args.jobs, beta=args.beta, window=args.window,
                 threshold=args.threshold, interval=args.interval, scale=args.scale,
                 cost_load=args.cost_load, fit=args.fit, split_memory=not args.whole_memory_per_component,
                 migration_fixed=args.migration_fixed, migration_per_mb=args.migration_per_mb,
                 duration=args.duration, memory=_memory_setting(args.memory))
    if args.explain is not None:
        try:
            lines = explain(cfg, args.explain)
        except SimulationTooLong as exc:
            print(_too_long(exc, f"--explain {args.explain}", cfg), file=sys.stderr)
            return 1
        print("\n".join(lines))
        return 0
    try:
        out = usable_out_dir(args.out, command="oppcost")
        claim_out(out, "oppcost")  # held until this command returns: one run at a time in --out
    except ValueError as exc:
        print(f"vcemu oppcost: {exc}", file=sys.stderr)
        return 2
    from tqdm import tqdm

    config = config_json(cfg, argv)
    journal = JOURNAL if (out / JOURNAL).exists() else "executions.csv"
    if (refusal := other_settings_refusal(out, config, SETTINGS, journal, "vcemu oppcost",
                                          as_now=_memory_as_now, results=("executions.csv",),
                                          shown=SHOWN)) is not None:
        print(refusal, file=sys.stderr)
        return 2
    kept = resume_rows(out, config, cfg)
    before = earlier_wall(out, len(kept or []))  # (read before summary.json is removed)
    clear_outputs(out, [n for n in OUTPUTS if n != JOURNAL or kept is None])
    write_json(out / "config.json", config)
    t0 = time.monotonic()
    rows: list[dict[str, float]] = list(kept or [])
    done = {int(r["execution"]) for r in rows}
    todo = (k for k in range(cfg.executions) if k not in done)  # (a generator: --executions 1000000 is no list)
    interrupted = False
    failed: str | None = None
    with signals_interrupt():  # SIGTERM as Ctrl-C here; a just-forked worker that gets either exits
        pool = ProcessPoolExecutor(max_workers=cfg.jobs, initializer=die_with_parent)
        try:
            with Journal(out / JOURNAL, FIELDS, rows) as journal:
                for k, fut in tqdm(finished_executions(pool, cfg, todo, AHEAD * cfg.jobs), total=cfg.executions,
                                   initial=len(rows), desc="oppcost executions", unit="exec",
                                   disable=None):  # (no bar off a terminal)
                    try:
                        rows.append(fut.result())
                    except SimulationTooLong as exc:
                        failed = _too_long(exc, f"execution {k} (seed {cfg.seed + k})", cfg)
                        break
                    journal.append(rows[-1:])
        except KeyboardInterrupt:
            interrupted = True
            if rows:
                print(f"vcemu oppcost: interrupted; summarising the {len(rows)} finished executions (run the same "
                      "command again to continue)", file=sys.stderr)
            else:
                print("vcemu oppcost: interrupted; nothing finished yet (run the same command again to start)",
                      file=sys.stderr)
        finally:
            if interrupted or failed:  # stop the workers now rather than wait for their current executions
                for proc in list((getattr(pool, "_processes", None) or {}).values()):
                    proc.terminate()
            pool.shutdown(wait=not (interrupted or failed), cancel_futures=True)
    if failed:
        print(failed + (f"; the {len(rows)} finished executions are kept in {out / JOURNAL}" if rows else ""),
              file=sys.stderr)
        return 1
    if not rows:
        return 130
    # (a run that ran no execution, all kept, adds nothing: its summary has the earlier run's figure, not one that
    # grows by a fraction of a second every time the command is run again)
    wall = time.monotonic() - t0 if len(done) < cfg.executions else None
    rows.sort(key=lambda r: r["execution"])
    write_text(out / "executions.csv", _csv_text(list(FIELDS), [[r[f] for f in FIELDS] for r in rows]))
    table = summarize(rows)
    counted = with_jobs(rows)
    # (each row says over how many of the executions asked for: an interrupted run's table looked final)
    write_text(out / "table2.csv", _csv_text(
        ["method", "avg_slowdown_by_execution", "avg_slowdown_by_job", "median_slowdown_by_execution",
         "migrations_per_execution", "executions", "requested_executions"],
        [[name, f"{t['by_execution']:.4f}", f"{t['by_job']:.4f}", f"{t['median_by_execution']:.4f}",
          f"{t['migrations_per_execution']:.1f}", len(rows), cfg.executions]
         for name, t in ((n, table[n]) for n in METHODS)]))
    summary = {"executions": len(rows), "requested_executions": cfg.executions, "interrupted": interrupted,
               "executions_without_jobs": len(rows) - len(counted),
               "jobs": int(sum(r["jobs"] for r in rows)), "wall_seconds": round(before.seconds + (wall or 0.0), 1),
               # executions whose time wall_seconds leaves out (kept from a run killed before it wrote its summary)
               "executions_without_wall_time": before.unknown,
               "table2": table, "wins": wins(rows), "code": config["code"]}
    write_json(out / "summary.json", json_safe(summary), sort_keys=False)
    figs = plot(rows, out, cfg.plot_first, cfg, interrupted)
    if len(counted) < len(rows):
        print(f"{len(rows) - len(counted)} of {len(rows)} executions had no job (--duration {cfg.duration:g} s; jobs "
              f"arrive {2 * MixConfig().mean_interarrival:g} s apart at most): they are left out of the statistics by "
              "execution, the wins and the figures")
    print("average slowdown (004 Table 2: the mean of each execution's average, and the mean over every job), "
          "the median execution's, and migrations per execution")
    print(f"{'method':<10}{'by execution':>15}{'by job':>12}{'median':>10}{'migrations/exec':>18}")
    for name in METHODS:
        t = table[name]
        print(f"{LABELS[name]:<16}{t['by_execution']:>9.3f}{t['by_job']:>12.3f}{t['median_by_execution']:>10.3f}"
              f"{t['migrations_per_execution']:>18.1f}")
    print("executions won (lower average slowdown): "
          + ", ".join(f"{LABELS[k.split('<')[0]]} over {LABELS[k.split('<')[1]]} {v}/{len(counted)}"
                      for k, v in summary["wins"].items()))
    for _, xm, ym in TABLE2_ORDERINGS:  # where this run goes with 004's Table 2, or against it
        print(table2_ordering(rows, xm, ym))
    print(memory_note(cfg))
    if not interrupted:  # the run is finished: say so, then drop the journal it no longer needs
        write_json(out / "config.json", config_json(cfg, argv, complete=True))
        (out / JOURNAL).unlink(missing_ok=True)
    print(f"{count(len(rows), 'execution')}, {summary['jobs']} jobs, {before.describe(wall)}; wrote "
          f"{out}/executions.csv, table2.csv, summary.json, config.json, {', '.join(p.name for p in figs)}")
    return 130 if interrupted else 0
