"""``vcemu apc``: Experiments One, Two and Three of seed 003 Sec. 5 in simulation (and Three, shortened, live).

Written to ``--out`` (default ``results/apc``):

* ``exp1_cycles.csv``, ``exp1_jobs.csv``, ``fig2_exp1.png`` - average hypothetical RP over time and the
  actual RP of each job at completion (Fig. 2), with the 0.63 maximum;
* ``exp2_jobs.csv``, ``exp2_summary.csv``, ``fig3_met.png``, ``fig4_changes.png``, ``fig5_distance.png`` -
  per inter-arrival time and algorithm (``--exp2-algorithms``, by default all four: apc, edf, fcfs and
  edf-repack, EDF placing every job anew each cycle): share of jobs meeting their goal (Fig. 3), jobs suspended,
  resumed or migrated (Fig. 4), distance to the goal at completion by goal factor (Fig. 5);
* ``exp3_cycles.csv``, ``fig6_rp.png``, ``fig7_cpu.png`` - dynamic sharing vs static partitions of 9 and
  6 transactional nodes: RP (transactional actual, batch hypothetical) and CPU per workload (Figs. 6, 7);
* ``live/`` with ``--live`` (see :mod:`coordinator.apc.live`);
* ``config.json`` - the arguments and seed that reproduce the run; ``summary.json`` - the headline figures; both
  record the code that ran (``"code"``: :func:`vcemu.provenance.code_version`);
* ``simulations.journal.csv`` - the finished simulations, and ``simulation.checkpoint.json`` - the state of the
  simulation under way, if it has run long enough to save it (both below).

``--out`` always describes one run. At the start the command removes every file above that an earlier run left
(whichever experiments it ran; only these names, and ``live/``'s) except the journal and the checkpoint, which it
removes only if it starts over (below), and writes ``config.json`` with ``"complete": false``, set to true after
``summary.json``; every file is replaced atomically.

Each finished simulation (Experiment One's run, one (inter-arrival time, algorithm) cell of Experiment Two, one
configuration of Experiment Three) is appended to the journal ``simulations.journal.csv`` (flushed to disk) with the
per-job and per-cycle records the reports are drawn from and the settings it depends on, so a run that is killed or
interrupted (Ctrl-C: exit code 130) loses no finished simulation: rerun the same command and it keeps them
(checking each) and runs only the rest, with the outputs of an uninterrupted run (Experiment Two's ``wall_s`` is
each simulation's own, measured when it ran). The journal stays after the run, so a later run reuses every
simulation it shares with earlier ones: ``--experiments one`` then ``--experiments one,two`` simulates Experiment
One once, and a run that needs a simulation with other settings (``--exp1-jobs``, ``--exp2-jobs`` and the cell's
inter-arrival time and algorithm, ``--exp3-horizon``) runs it again in its place. The simulations a run does not
need are kept for later runs, but only the 40 used last (:data:`MAX_CARRIED`, more than a default run's 36; the
journal lists its simulations least recently used first): without that bound the journal would keep every
Experiment Two cell (about 190 KB at 800 jobs) of every ``--exp2-iats`` ever run in ``--out``. A run with another
``--seed`` or ``--cycle`` (which every simulation depends on) than the stored ``config.json`` is refused, naming
them, and ``--out`` left as it was (:func:`coordinator.resumable.other_settings_refusal`: it started over, and
dropped every simulation). A run starts over if ``--out`` holds no journal, or if the code differs (its source
fingerprint), which it says: it removes the journal and the checkpoint. The live part is not resumed: a rerun runs
it again in full.

A kill does not lose the whole simulation it interrupts, only what that simulation did since its last checkpoint.
The simulation under way saves its state to ``simulation.checkpoint.json`` (atomically) at the end of the first
control cycle that ends 10 s of wall clock (:data:`CHECKPOINT_SECONDS`) or more after its start or its last save,
with its key, its settings and the code's source fingerprint; a rerun that runs that simulation continues from the
saved cycle, and removes the file once the simulation is journalled. A save that fails (a full disk, say) is a
warning, not an error: the simulation goes on, and tries again 10 s later. A checkpoint whose state does not fit the
simulation it names (edited or damaged) is removed with a warning, and that simulation runs from its start. The
simulator draws no random numbers, and the state (:class:`coordinator.apc.sim.SimState`: the time, the jobs in the
system and their progress, the placement, the suspended jobs, the transactional app's nodes and the records so far)
is everything it carries from one cycle to the next, so a continued simulation writes exactly the outputs and
journal rows of an uninterrupted one (its measured ``seconds`` are those up to the checkpoint plus those after it).
There is one checkpoint file: a simulation that runs past 10 s saves over another's. A kill therefore loses at most
10 s plus one control cycle of the simulation it interrupts, if its saves succeed (a simulation quicker than 10 s
never saves, and is run again in full). Measured at the default settings on this project's 2-core development
machine: EDF and FCFS cells and the static configurations take 0.1 to 0.3 s, an APC cell of Experiment Two 6 s
(inter-arrival 200 s) to 18 s (50 s), Experiment One 7.5 s (the whole ``--experiments one`` 8.5 s, and
``--experiments two --exp2-iats 50`` with its four algorithms 20 s), and Experiment Three's dynamic configuration
34 s over 217 cycles of 0.15 s on average and 1.5 s at most (its 5 longest 0.4 to 1.5 s), so a kill there loses at
most about 12 s instead of up to 34 s. A save writes everything recorded so far (about 140 KB at the end of that
simulation, 180 to 200 KB for an Experiment Two cell of 800 jobs) and took 2 to 4 ms (the JSON encoding 2 to 3 ms of
it; each final state saved five times in a row): at most one every 10 s.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import json
import math
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from coordinator.apc.sim import SimConfig, SimResult, SimState, SimulationStuck, horizon_cycles, simulate
from coordinator.apc.workloads import (
    EXP1_MEAN_IAT,
    EXP3_INITIAL,
    cluster,
    describe,
    exp1_jobs,
    exp2_jobs,
    exp3_app,
    exp3_jobs,
    shortest_relative_goal,
)
from coordinator.figures import coinciding_labels, marker, settings_note
from coordinator.flagcheck import first_refusal
from coordinator.policies.apc import Costs
from coordinator.policies.apc_rpf import Job
from coordinator.resumable import (
    Journal,
    claim_out,
    other_settings_refusal,
    releasing_out_locks,
    say_resumed,
    unfinished_rows,
)
from vcemu.cliargs import Parser, doc_text, usable_out_dir
from vcemu.outputs import clear_outputs, json_safe, save_figure, stored_config, write_json, write_text
from vcemu.provenance import code_version, fingerprint_of
from vcemu.signals import signals_interrupt

PAPER = "Carrera et al., Enabling resource sharing between transactional and batch workloads using dynamic " \
        "application placement (seed 003), Sec. 5"
ALGOS = ("apc", "edf", "fcfs", "edf-repack")
COLORS = {"apc": "tab:blue", "edf": "tab:orange", "fcfs": "tab:green", "edf-repack": "tab:red"}
#: Every file the command writes in ``--out``: what a new run removes first.
OUTPUTS = ("config.json", "summary.json", "exp1_cycles.csv", "exp1_jobs.csv", "fig2_exp1.png", "exp2_jobs.csv",
           "exp2_summary.csv", "fig3_met.png", "fig4_changes.png", "fig5_distance.png", "exp3_cycles.csv",
           "fig6_rp.png", "fig7_cpu.png")
#: The journal of finished simulations (see the module docstring); a new run removes it only if it starts over.
JOURNAL = "simulations.journal.csv"
#: The state of the simulation under way, saved every :data:`CHECKPOINT_SECONDS` (see :class:`Units`); a new run
#: removes it, with the journal, only if it starts over.
CHECKPOINT = "simulation.checkpoint.json"
#: How often (wall clock, at the end of a control cycle) the simulation under way saves its state: what a kill
#: loses of it at most, besides the cycle it interrupts. Each save writes everything the simulation has recorded
#: so far (see the module docstring for what that costs).
CHECKPOINT_SECONDS = 10.0
#: How many simulations that a run does not need its journal keeps for later runs, those used last: without a bound
#: the journal would grow by every Experiment Two cell (one per inter-arrival time and algorithm, about 190 KB at
#: 800 jobs) of every ``--exp2-iats`` ever run in ``--out``. More than a default run's 36, so that a run of some
#: of them costs a later default run none.
MAX_CARRIED = 40
#: The journal of a vcemu before the journal was kept (removed: its code recorded no source fingerprint).
OLD_JOURNAL = "simulations.partial.csv"
#: The journal's columns: the simulation (:func:`unit_keys`), the kind of record (``cycle``, ``job``, and ``end``
#: last, with the wall-clock seconds, the change counts, how many records precede it and the simulation's
#: settings, :func:`unit_settings`) and the record as JSON.
#: One row per record, not one per simulation: Python's csv module refuses a field over 128 KiB, which one
#: simulation's records exceed at the paper's sizes.
FIELDS = ("unit", "record", "data")
#: Settings in ``config.json`` that a stored run may differ in and still keep its journal: those that change no
#: simulation, and those that only some simulations depend on (each journalled simulation records its own,
#: :func:`unit_settings`, and is reused only by a run with the same). ``--seed`` and ``--cycle`` are not here.
#: The settings every simulation depends on (the others are each simulation's, kept with it in the journal): a run
#: with others into an ``--out`` that holds work is refused (:func:`coordinator.resumable.other_settings_refusal`).
SETTINGS = {"seed": "--seed", "cycle": "--cycle"}
NOT_RESULTS = ("argv", "complete", "out", "experiments", "live", "live_seconds", "live_agent", "live_token_file",
               "exp1_jobs", "exp2_jobs", "exp2_iats", "exp2_algorithms", "exp3_horizon")
#: The longest ``--cycle`` [s]. A job can wait a whole control cycle before APC first places it, and its relative
#: performance (eq. 2) is then about 1 - T / its relative goal; APC compares values only down to -1000
#: (:mod:`coordinator.policies.apc`'s floor), below which placing a job and leaving it queued look alike. At
#: ``--cycle 1e8`` every Experiment One job (relative goal 47,520 s) was there: APC placed none and the run never
#: ended (5e7 did the same; 4.7e7 finished). 100 times the shortest relative goal of the experiments' jobs (780 s,
#: Experiment Two's) keeps a job that waited one cycle at about -100 at worst: ten cycles before APC loses sight of it.
MAX_CYCLE = 100 * shortest_relative_goal()
#: The most jobs an experiment's stream may draw (Experiment Two's: :func:`exp2_draws`): a million took 4.5 s and
#: 0.5 GB to draw on 2 cores; ``--exp2-iats 1e-9`` tried to allocate 72.8 TiB for 8e14.
MAX_DRAWS = 1_000_000
#: The most control cycles an experiment may simulate (:func:`_size_checks`): the defaults' runs take 217 to about
#: 540; an APC cycle took 0.15 s on average in Experiment Three, so this is hours already, and a cycle's row about
#: 0.5 KB in memory and 0.2 KB in every checkpoint save.
MAX_CYCLES = 1_000_000
#: ``--live-seconds`` when not given (it may be given only with ``--live``).
LIVE_SECONDS = 40.0
#: What :func:`coordinator.apc.live.live_experiment_three` writes in ``--out``/live (not imported from there: it
#: needs gRPC, and only ``--live`` does).
LIVE_OUTPUTS = ("config.json", "live_cycles.csv", "fig_live.png")
#: Each experiment's files among :data:`OUTPUTS`: what a run of other experiments replaces (:func:`replaced_note`).
EXPERIMENT_OUTPUTS = {"one": ("exp1_cycles.csv", "exp1_jobs.csv", "fig2_exp1.png"),
                      "two": ("exp2_jobs.csv", "exp2_summary.csv", "fig3_met.png", "fig4_changes.png",
                              "fig5_distance.png"),
                      "three": ("exp3_cycles.csv", "fig6_rp.png", "fig7_cpu.png")}


def replaced_note(out: Path, exps: Sequence[str], live: bool, kept: bool) -> str | None:
    """The line saying which earlier results in ``out`` a run of ``exps`` (and ``--live`` or not) removes and does
    not write again, and, if their simulations are ``kept`` in the journal, how to have them back; None if none.
    ``--out`` describes one run, so the README's ``--live --experiments three`` after a full run removed
    Experiments One and Two's files, silently (README walk-through review)."""
    gone = [e for e, names in EXPERIMENT_OUTPUTS.items() if e not in exps and any((out / n).exists() for n in names)]
    live_gone = not live and (out / "live" / "live_cycles.csv").exists()
    if not gone and not live_gone:
        return None
    what = [f"Experiment{'s' if len(gone) > 1 else ''} {' and '.join(e.capitalize() for e in gone)}"] if gone else []
    what += ["the live run (live/)"] if live_gone else []
    every = ",".join(e for e in EXPERIMENT_OUTPUTS if e in exps or e in gone)
    # (with the earlier run's flags for them: a simulation is reused only with its own settings, and --exp1-jobs 5
    # left out ran Experiment One again; review)
    argv = (stored_config(out) or {}).get("argv")
    flags = " ".join(map(str, argv)) if isinstance(argv, list) else ""
    back = (f"; the experiments' simulations stay in {JOURNAL}: --experiments {every}, with the flags the earlier "
            f"run gave them ({'vcemu apc ' + flags if flags else 'see its config.json'}), writes them again without "
            "simulating them anew" if gone and kept else "")
    return (f"vcemu apc: {out} holds {' and '.join(what)} of an earlier run, which this run removes (--out describes "
            f"one run){back}")


def _write_csv(path: Path, rows: Iterable[dict[str, Any]]) -> None:
    rows = list(rows)
    buf = io.StringIO(newline="")
    if rows:
        keys: list[str] = []
        for r in rows:
            keys += [k for k in r if k not in keys]
        w = csv.DictWriter(buf, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)
    write_text(path, buf.getvalue())


# --------------------------------------------------------------------------- units of work (the journal)


def simulate_unit(key: str, cfg: SimConfig, jobs: list[Job], total: int, per: str = "job",
                  state: SimState | None = None, checkpoint: Callable[[SimState], None] | None = None) -> SimResult:
    """Simulation ``key`` (shown on its progress bar of ``total`` completed jobs, or cycles with ``per="cycle"``),
    from ``state`` if given, calling ``checkpoint`` after each cycle (:func:`coordinator.apc.sim.simulate`)."""
    if state is None:
        start = 0
    elif per == "job":
        start = state.completed
    else:  # one cycle record per control cycle simulated
        start = len(state.result.cycles)
    # (no bar when stderr is no terminal: a log kept carriage-return bars and padded blank lines)
    with tqdm(total=total, initial=start, desc=key, unit=per, leave=False, file=sys.stderr, disable=None) as bar:
        def tick(done: int, _t: float) -> None:
            bar.update(done - bar.n if per == "job" else 1)
        return simulate(cfg, jobs, tick, state, checkpoint)


def _key_one() -> str:
    return "exp1 apc"


def _key_two(iat: float, algo: str) -> str:
    return f"exp2 {algo} iat={iat!r}"  # repr: two inter-arrival times never share a key


def _key_three(name: str) -> str:
    return f"exp3 {name}"


def unit_keys(exps: Iterable[str], iats: Iterable[float], algos: Iterable[str]) -> list[str]:
    """The simulations a run of ``exps`` consists of, in the order it runs them (no duplicates)."""
    exps = set(exps)
    keys: list[str] = []
    if "one" in exps:
        keys.append(_key_one())
    if "two" in exps:
        keys += [_key_two(iat, algo) for iat in iats for algo in algos]
    if "three" in exps:
        keys += [_key_three(name) for name, _ in EXP3_CONFIGS]
    return list(dict.fromkeys(keys))


def unit_settings(key: str, args: argparse.Namespace) -> dict[str, Any]:
    """The settings simulation ``key`` depends on besides the key itself (which names the experiment, and for
    Experiment Two the inter-arrival time and algorithm) and the code: recorded with it in the journal, and
    compared before it is reused."""
    own = {"exp1": "exp1_jobs", "exp2": "exp2_jobs", "exp3": "exp3_horizon"}[key.split(" ", 1)[0]]
    return {"seed": args.seed, "cycle": args.cycle, own: getattr(args, own)}


@dataclass(frozen=True)
class Finished:
    """A finished simulation as the reports use it: its records, how long it took (wall clock) and the settings
    it was run with (:func:`unit_settings`; empty for a library caller's)."""

    result: SimResult
    seconds: float
    settings: Mapping[str, Any] = field(default_factory=dict)


def _json(x: Any) -> str:
    return json.dumps(x, separators=(",", ":"))


def _encode(key: str, f: Finished, cycles: bool) -> list[dict[str, str]]:
    """The journal rows of simulation ``key``. JSON keeps ints and floats apart and writes floats (NaN and
    infinities too) so that they read back equal, which is what makes a resumed run's outputs an uninterrupted
    run's, byte for byte. ``cycles=False`` leaves the per-cycle records out."""
    recs = [("cycle", c) for c in (f.result.cycles if cycles else [])] + [("job", j) for j in f.result.jobs]
    end = {"seconds": f.seconds, "changes": dict(f.result.changes), "cycles": len(recs) - len(f.result.jobs),
           "jobs": len(f.result.jobs), "settings": dict(f.settings)}
    return [{"unit": key, "record": kind, "data": _json(rec)} for kind, rec in [*recs, ("end", end)]]


def _decode(rows: Sequence[Mapping[str, str]]) -> Finished | None:
    """One simulation's journal rows (in order) back as :func:`_encode` wrote them, or None if they do not
    check out (cut short by a kill, or not written by it): the simulation is then run again."""
    recs: dict[str, list[Any]] = {"cycle": [], "job": [], "end": []}
    try:
        for r in rows:
            recs[r["record"]].append(json.loads(r["data"]))
    except (KeyError, ValueError):
        return None
    if len(recs["end"]) != 1 or rows[-1]["record"] != "end" or not all(
            isinstance(x, dict) for x in recs["cycle"] + recs["job"] + recs["end"]):
        return None
    end = recs["end"][0]
    seconds, changes, settings = end.get("seconds"), end.get("changes"), end.get("settings")
    if not (isinstance(seconds, float) and math.isfinite(seconds) and seconds >= 0 and isinstance(changes, dict)
            and all(isinstance(v, int) for v in changes.values()) and isinstance(settings, dict)
            and end.get("cycles") == len(recs["cycle"]) and end.get("jobs") == len(recs["job"])):
        return None
    return Finished(SimResult(recs["cycle"], recs["job"], Counter(changes)), seconds, settings)


class Units:
    """The simulations of one run: those earlier runs with the same settings finished (kept from the journal),
    and each new one, appended to the journal as it finishes with its ``settings`` (by key,
    :func:`unit_settings`). Without a journal (a library caller), every simulation just runs.

    With a ``checkpoint`` file, the simulation under way saves its state there (atomically) at the end of the
    first control cycle that ends ``every`` seconds (wall clock, default :data:`CHECKPOINT_SECONDS`) or more after
    its start or its last save, with its key, its settings and the source fingerprint ``code``; a simulation that
    finds its own state there continues from it, and removes the file once journalled (or, if a kill came between
    the two, when a later run takes it from the journal). So a kill loses at most ``every`` seconds and a cycle of
    the simulation under way; one that is quicker than ``every`` never saves."""

    def __init__(self, journal: Journal | None = None, kept: Mapping[str, Finished] | None = None,
                 settings: Mapping[str, Mapping[str, Any]] | None = None, checkpoint: Path | None = None,
                 code: str | None = None, every: float | None = None) -> None:
        self._journal = journal
        self._done: dict[str, Finished] = dict(kept or {})
        self._settings = dict(settings or {})
        self._checkpoint, self._code = checkpoint, code
        self._every = CHECKPOINT_SECONDS if every is None else every
        self._under_way: str | None = None  # the simulation being run, until it is journalled

    def has(self, key: str) -> bool:
        """Whether simulation ``key`` is finished (so its jobs need not be generated)."""
        return key in self._done

    def run(self, key: str, cfg: SimConfig, jobs: list[Job], total: int, per: str = "job",
            cycles: bool = True) -> Finished:
        """Simulation ``key``: the kept one, or run now and journalled. ``cycles=False`` leaves the per-cycle
        records out of the journal, for a report that does not use them (the returned result has them)."""
        owner = self._owner(key)
        if key in self._done:
            # A kill after the journal append and before the unlink below leaves this simulation's checkpoint: the
            # run that takes the simulation from the journal removes it, else it stays in --out for good.
            if self._checkpoint is not None and self._checkpoint_owner() == owner:
                self._checkpoint.unlink(missing_ok=True)
            return self._done[key]
        settings = self._settings.get(key, {})
        state, before = self._resume(owner, cfg, jobs) or (None, 0.0)
        if state is not None:
            print(f"vcemu apc: {key}: continuing from its checkpoint, {len(state.result.cycles)} control cycles in "
                  f"(simulated time {state.t:g} s)", file=sys.stderr)
        mine = state is not None  # whether the checkpoint file is this simulation's, to remove once it is done
        failed = False  # whether a save of this simulation failed (said once, not every cycle)
        t0 = last = time.perf_counter()

        def save(s: SimState) -> None:
            # A checkpoint only shortens a rerun: a save that fails (disk full, permissions) must not end the
            # simulation. The next is tried ``every`` seconds later; the file keeps what it held (atomic writes).
            nonlocal last, mine, failed
            if self._checkpoint is None or time.perf_counter() - last < self._every:
                return
            seconds = before + time.perf_counter() - t0
            try:
                write_text(self._checkpoint, _json({**owner, "seconds": seconds, "state": s.to_json()}))
            except OSError as exc:
                if not failed:
                    print(f"vcemu apc: warning: {key}: cannot save its checkpoint in {self._checkpoint} ({exc}); "
                          "going on without it (a kill would lose more of this simulation)", file=sys.stderr)
                failed = True
            else:
                mine = True
            last = time.perf_counter()

        self._under_way = key
        res = simulate_unit(key, cfg, jobs, total, per, state, save)
        done = self._done[key] = Finished(res, before + time.perf_counter() - t0, settings)
        if self._journal is not None:
            self._journal.append(_encode(key, done, cycles))
        self._under_way = None
        if mine and self._checkpoint is not None:  # (another simulation's stays, for a run that needs it)
            self._checkpoint.unlink(missing_ok=True)
        return done

    def under_way(self) -> tuple[str, bool] | None:
        """The simulation under way (interrupted, if asked from an exception handler) and whether the checkpoint
        file holds its state, so that a rerun continues it; None if no simulation is under way. For the message
        of an interrupted run, which must not promise a checkpoint that is not there or is another simulation's."""
        if self._under_way is None:
            return None
        return self._under_way, self._checkpoint_owner() == self._owner(self._under_way)

    def _owner(self, key: str) -> dict[str, Any]:
        """What a checkpoint of simulation ``key`` is of (its key, settings and the code), as JSON reads it back:
        a checkpoint is continued, or removed, only by the simulation it is of."""
        return json.loads(_json({"unit": key, "settings": self._settings.get(key, {}), "code": self._code}))

    def _checkpoint_owner(self) -> dict[str, Any] | None:
        """The owner (:meth:`_owner`) recorded in the checkpoint file; None if there is none or it is unreadable."""
        if self._checkpoint is None:
            return None
        try:
            data = json.loads(self._checkpoint.read_text())
        except (OSError, ValueError):
            return None
        return {k: data.get(k) for k in ("unit", "settings", "code")} if isinstance(data, dict) else None

    def _resume(self, owner: Mapping[str, Any], cfg: SimConfig, jobs: list[Job]) -> tuple[SimState, float] | None:
        """The state in the checkpoint file and the wall-clock seconds the simulation had taken when it was saved,
        if the file is of the simulation ``owner`` (key, settings and code) run with ``cfg`` on ``jobs``; None if
        there is none or it is another simulation's (left for a run that needs it): the simulation then starts
        from the start. A file that is no checkpoint (not JSON) or whose state does not fit the simulation it
        names (edited or damaged: atomic writes leave neither) is removed with a warning, so that it makes no
        rerun crash or record wrong results (:meth:`SimState.from_json` checks the state)."""
        if self._checkpoint is None:
            return None
        try:
            data = json.loads(self._checkpoint.read_text())
        except FileNotFoundError:
            return None
        except OSError as exc:  # (not removed: it may be readable again, and whose it is is not known)
            print(f"vcemu apc: warning: cannot read the checkpoint {self._checkpoint} ({exc}); {owner['unit']} "
                  "starts from its start", file=sys.stderr)
            return None
        except ValueError as exc:
            return self._discard(f"is not JSON ({exc})", owner)
        if not isinstance(data, dict):
            return self._discard("is not a JSON object", owner)
        if {k: data.get(k) for k in owner} != owner:
            return None
        try:
            seconds = data["seconds"]
            if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 <= seconds < math.inf:
                raise ValueError(f"seconds {seconds!r}")
            return SimState.from_json(data["state"], cfg, jobs), float(seconds)
        except (KeyError, TypeError, ValueError) as exc:
            return self._discard(f"does not fit the simulation it names ({type(exc).__name__}: {exc})", owner)

    def _discard(self, why: str, owner: Mapping[str, Any]) -> None:
        """Remove the checkpoint file, which ``why`` says cannot be continued, with a warning: simulation
        ``owner`` starts from its start. Returns None, what :meth:`_resume` returns then."""
        print(f"vcemu apc: warning: the checkpoint {self._checkpoint} {why}: removed; {owner['unit']} starts from "
              "its start", file=sys.stderr)
        if self._checkpoint is not None:
            with contextlib.suppress(OSError):  # (then a later save replaces it, or a start over removes it)
                self._checkpoint.unlink(missing_ok=True)
        return None


@dataclass(frozen=True)
class Journalled:
    """What :func:`resume_units` keeps of the journal: ``kept``, the simulations this run needs that were run with
    its settings (by key, in the run's order: their journal rows, as read, and what they decode to); ``carried``,
    the rows of the (at most :data:`MAX_CARRIED`) simulations this run does not need, written back for later
    runs, least recently used first."""

    kept: dict[str, tuple[list[dict[str, str]], Finished]]
    carried: list[dict[str, str]]

    def rows(self) -> list[dict[str, str]]:
        """The journal's rows to write back: the carried simulations', then the kept ones (the run appends those it
        runs after them), so that the journal lists its simulations least recently used first."""
        return self.carried + [r for rows, _ in self.kept.values() for r in rows]


def resume_units(out: Path, config: dict[str, Any], keys: list[str],
                 settings: Mapping[str, Mapping[str, Any]]) -> Journalled | None:
    """What the journal in ``out`` holds for a run with ``config`` that needs simulations ``keys`` with
    ``settings`` (by key, :func:`unit_settings`), or None if the run starts over: there is no journal, or it was
    written with another ``--seed``, ``--cycle`` or code (with a line on stderr,
    :func:`coordinator.resumable.unfinished_rows`). The caller then removes the checkpoint with the journal: one
    rule for every start over, so that no checkpoint outlives the journal of its run (without a journal, another
    simulation's checkpoint would stay in ``out`` for good, never continued). Rows that do not check out and
    simulations of ``keys`` run with other settings are dropped: those simulations run again. Of the others (not in
    ``keys``) the :data:`MAX_CARRIED` used last are carried, and the older ones dropped."""
    # (without a journal too: a finished run of an older vcemu, which kept none, is replaced saying so)
    stored = unfinished_rows(out, JOURNAL, FIELDS, config, NOT_RESULTS, "vcemu apc",
                             results=("exp1_cycles.csv", "exp2_jobs.csv", "exp3_cycles.csv"))
    if stored is None or not (out / JOURNAL).exists():
        return None
    raw, dropped = stored
    groups: dict[str, list[dict[str, str]]] = {}
    for r in raw:
        groups.setdefault(r["unit"], []).append(r)
    wanted = set(keys)
    kept: dict[str, tuple[list[dict[str, str]], Finished]] = {}
    others: list[list[dict[str, str]]] = []  # in the journal's order: least recently used first
    replaced: list[str] = []  # the simulations of this run's that the journal holds with other settings
    for key, rows in groups.items():
        f = _decode(rows)
        if f is not None and key not in wanted:
            others.append(rows)
        elif f is not None and f.settings == json.loads(json.dumps(dict(settings[key]))):
            kept[key] = (rows, f)
        elif f is not None:
            replaced.append(key)
        else:
            dropped += len(rows)
    cut = max(0, len(others) - MAX_CARRIED)
    old, others = others[:cut], others[cut:]
    carried = [f"{len(others)} more kept for later runs (not in this one)"] if others else []
    if old:
        carried.append(f"{len(old)} used longer ago dropped (at most {MAX_CARRIED} are kept beyond a run's own)")
    # (one simulation per key: a run with other settings of it, such as --exp1-jobs, runs it again in its place)
    named = sorted(replaced)[:3] + ([f"{len(replaced) - 3} more"] if len(replaced) > 3 else [])
    said = (f"{len(replaced)} to run again, the journal's being of other settings ({', '.join(named)})"
            if replaced else "")
    say_resumed("vcemu apc", out, len(kept), len(keys), "simulations", dropped, "unreadable",
                source="from the journal", carried=", ".join(carried), replaced=said)
    return Journalled({k: kept[k] for k in keys if k in kept}, [r for rows in others for r in rows])


# --------------------------------------------------------------------------- Experiment One


def experiment_one(out: Path, seed: int, jobs: int, T: float, units: Units | None = None) -> dict[str, Any]:
    res = (units or Units()).run(_key_one(), SimConfig(cluster(), "apc", T, Costs(), stop_after_completed=jobs),
                                 exp1_jobs(jobs, seed), jobs).result
    _write_csv(out / "exp1_cycles.csv", res.cycles)
    _write_csv(out / "exp1_jobs.csv", res.jobs)
    # 003 Sec. 5.1: "when no jobs are queued, the hypothetical relative performance is 0.63". Over the cycles with
    # an empty queue and jobs running (the first cycles have none: their NaN made max() NaN, written null)
    empty = [c["hyp_rp_mean"] for c in res.cycles if c["queued"] == 0 and not math.isnan(c["hyp_rp_mean"])]
    hyp_rp_when_empty_queue = max(empty, default=math.nan)
    plot_exp1(out, res, seed, jobs, T, hyp_rp_when_empty_queue, len(empty))
    rps = [j["rp"] for j in res.jobs]
    return {"jobs_completed": len(res.jobs), "max_rp": max(rps), "mean_rp": float(np.mean(rps)),
            "min_rp": min(rps), "placement_changes": res.job_changes, "changes": dict(res.changes),
            "max_queued": max(c["queued"] for c in res.cycles),
            "hyp_rp_when_empty_queue": hyp_rp_when_empty_queue}


def _cluster_text() -> str:
    """The simulated cluster, for the figures' settings notes."""
    nodes = cluster()
    return f"{len(nodes)} nodes of {nodes[0].cpu:,.0f} MHz and {nodes[0].memory:,.0f} MB"


def plot_exp1(out: Path, res: SimResult, seed: int, jobs: int, T: float, hyp_rp_when_empty_queue: float,
              empty_cycles: int) -> None:
    """Fig. 2 from Experiment One's result: the average hypothetical RP each cycle and each job's actual RP at
    completion, against 003's 0.63 (its hypothetical RP with no job queued), beside which ours peaks at
    ``hyp_rp_when_empty_queue`` (the most over the ``empty_cycles`` cycles with an empty queue and jobs running)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.9))
    ax.plot([c["time"] for c in res.cycles], [c["hyp_rp_mean"] for c in res.cycles], lw=1.2,
            label="average hypothetical RP (each cycle)")
    ax.scatter([j["completion"] for j in res.jobs], [j["rp"] for j in res.jobs], s=5, c="tab:red",
               label="actual RP at completion")
    ours = ("no cycle here had an empty queue and jobs running" if math.isnan(hyp_rp_when_empty_queue) else
            f"ours at most {hyp_rp_when_empty_queue:.4f}")
    ax.axhline(1 - 1 / 2.7, ls="--", c="grey", lw=0.8,
               label=f"003's 0.63: hypothetical RP with no job queued ({ours})")
    ax.set_xlabel("time [s]")
    ax.set_ylabel("relative performance")
    ax.set_title(f"Experiment One: {jobs} identical jobs, 25 nodes, T = {T:g} s")
    ax.legend(loc="lower left")
    ax.xaxis.set_major_formatter(_thousands())
    empty = ("no control cycle had an empty queue and jobs running" if math.isnan(hyp_rp_when_empty_queue) else
             f"with an empty queue ({empty_cycles} control cycles) the average hypothetical RP peaks at "
             f"{hyp_rp_when_empty_queue:.4f}, not 003's 0.63 (dashed line)")
    rect = settings_note(fig, f"seed {seed}, {jobs} completions, control cycle T = {T:g} s, {_cluster_text()}, "
                              f"placement changes cost time (Costs' defaults)\n{empty}")
    fig.tight_layout(rect=rect)
    save_figure(fig, out / "fig2_exp1.png", dpi=120)
    plt.close(fig)


def _thousands() -> Any:
    """A tick formatter writing numbers with thousands separators (``300,000``)."""
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda x, _pos=None: f"{x:,.0f}" if x == round(x) else f"{x:,g}")


# --------------------------------------------------------------------------- Experiment Two


def exp2_draws(jobs: int, iat: float) -> float:
    """How many jobs Experiment Two draws (the whole part) for a run of ``jobs`` completions at mean inter-arrival
    time ``iat``: three times as many, or more, enough to keep arriving for 1000 s per completion. A float, inf
    for an ``iat`` near 0, so that :func:`apc_main` can refuse too many before drawing any."""
    return jobs * max(3.0, 1000.0 / iat)


def experiment_two(out: Path, seed: int, jobs: int, iats: tuple[float, ...], T: float,
                   algos: tuple[str, ...] = ALGOS, units: Units | None = None) -> dict[str, Any]:
    units = units or Units()
    summary, all_jobs = [], []
    for iat in iats:
        stream: list[Job] | None = None  # generated only if a cell of this iat is not kept
        for algo in algos:
            key = _key_two(iat, algo)
            if stream is None and not units.has(key):
                stream = exp2_jobs(int(exp2_draws(jobs, iat)), seed, iat)
            done = units.run(key, SimConfig(cluster(), algo, T, Costs.none(), stop_after_completed=jobs),
                             stream or [], jobs, cycles=False)
            res = done.result
            summary.append({"inter_arrival_s": iat, "algorithm": algo, "completed": len(res.jobs),
                            "met_pct": 100 * res.met_fraction, "suspends": res.changes["suspend"],
                            "resumes": res.changes["resume"], "migrations": res.changes["migrate"],
                            "placement_changes": res.job_changes, "wall_s": round(done.seconds, 1)})
            all_jobs += [{"inter_arrival_s": iat, "algorithm": algo, **j} for j in res.jobs]
    _write_csv(out / "exp2_summary.csv", summary)
    _write_csv(out / "exp2_jobs.csv", all_jobs)
    plot_exp2(out, summary, all_jobs, iats, algos, seed=seed, jobs=jobs, T=T)
    return {"rows": summary}


#: Fig. 5's distances are on a symlog axis, linear within +-this many seconds.
SYMLOG_LINTHRESH = 1000.0


def _symlog_margins(ax: Any, ys: Sequence[float], linthresh: float, margin: float = 0.06) -> None:
    """Put ``ax``'s y axis on a symlog scale with limits ``margin`` (of the axis height) beyond ``ys``' extremes in
    the scale's own coordinates, so that no point sits on an edge, half cut off (the scale's autoscaling put the
    largest distances right on the top edge), and major ticks at 0, half the linear range and the powers of ten
    outside it (the scale's own, at +-100, crowded 0's label)."""
    from matplotlib.ticker import FixedLocator, FuncFormatter

    ax.set_yscale("symlog", linthresh=linthresh)
    finite = [float(y) for y in ys if math.isfinite(float(y))]
    if not finite:
        return
    tr = ax.yaxis.get_transform()
    lo, hi = tr.transform(np.array([[min(finite + [0.0])], [max(finite + [0.0])]]))[:, 0]
    pad = margin * ((hi - lo) or 1.0)
    bottom, top = tr.inverted().transform(np.array([[lo - pad], [hi + pad]]))[:, 0]
    ax.set_ylim(bottom, top)
    decades = range(int(math.log10(linthresh)), int(math.log10(max(abs(bottom), abs(top), linthresh))) + 1)
    ticks = sorted({0.0, linthresh / 2, -linthresh / 2, *(s * 10.0 ** k for k in decades for s in (1, -1))})
    ax.yaxis.set_major_locator(FixedLocator([t for t in ticks if bottom <= t <= top]))

    def label(y: float, _pos: int | None = None) -> str:  # 10^k as the scale's own labels; others plain
        if y == 0:
            return "0"
        sign, k = "\N{MINUS SIGN}" if y < 0 else "", round(math.log10(abs(y)))
        if abs(y) >= linthresh and math.isclose(abs(y), 10.0 ** k):
            return f"$\\mathdefault{{{sign}10^{{{k}}}}}$"
        return f"{sign}{abs(y):g}"

    ax.yaxis.set_major_formatter(FuncFormatter(label))


def fig5_iats(iats: Sequence[float]) -> list[float]:
    """The inter-arrival times Fig. 5 has a panel for, at most two of those run: the paper's 200 s and 50 s where run
    (in that order), then the others in the order given (``--exp2-iats 100,200`` showed only 200 s)."""
    paper = [i for i in (200.0, 50.0) if i in iats]
    return (paper + [i for i in iats if i not in paper])[:2]


def exp2_settings(seed: int | None, jobs: int | None, T: float | None) -> str:
    """The settings note of Experiment Two's figures: those given (a library caller may give none)."""
    parts = [f"seed {seed}" if seed is not None else "", f"{jobs} completions per run" if jobs is not None else "",
             f"control cycle T = {T:g} s" if T is not None else ""]
    return ", ".join([p for p in parts if p] + [_cluster_text(), "placement changes cost no time"])


def coinciding_points(series: Mapping[str, Sequence[tuple[float, float]]], labels: Mapping[str, str]) -> list[str]:
    """Lines saying at which inter-arrival times the points of series that differ elsewhere lie on one another (at
    200 s the four algorithms met the same share of goals, one marker over the other): those whose ``labels``
    (:func:`coordinator.figures.coinciding_labels`) already say they equal another throughout are no news."""
    root = {name: label.split(" (= ", 1)[1][:-1] if " (= " in label else name for name, label in labels.items()}
    xs = sorted({x for points in series.values() for x, _ in points})
    where: dict[tuple[str, ...], list[str]] = {}  # the series that coincide -> where, and at what value
    for x in xs:
        at = {name: y for name, points in series.items() for px, y in points if px == x and math.isfinite(y)}
        groups: list[list[str]] = []
        for name, y in at.items():
            group = next((g for g in groups if math.isclose(at[g[0]], y, rel_tol=1e-9, abs_tol=1e-12)), None)
            if group is None:
                groups.append([name])
            else:
                group.append(name)
        for group in groups:
            if len({root[n] for n in group}) > 1:
                where.setdefault(tuple(group), []).append(f"{x:g} s ({at[group[0]]:.4g})")
    return [f"{', '.join(group[:-1])} and {group[-1]} coincide at {', '.join(spots)}" for group, spots in where.items()]


def plot_exp2(out: Path, summary: Sequence[Mapping[str, Any]], all_jobs: Sequence[Mapping[str, Any]],
              iats: Sequence[float], algos: Sequence[str], *, seed: int | None = None, jobs: int | None = None,
              T: float | None = None) -> None:
    """Figs. 3-5 from Experiment Two's summary rows and per-job rows (as written to ``exp2_summary.csv`` and
    ``exp2_jobs.csv``), each with a note of the ``seed``, the completions per run (``jobs``) and the control cycle
    ``T`` that produced them. Fig. 5 has a panel for each of the paper's 200 s and 50 s that was run, and fills up
    to two panels with the other inter-arrival times run, in the order given (:func:`fig5_iats`). In Figs. 3 and 4
    each algorithm has its own marker, and one whose points are an earlier one's says so in the legend
    ("EDF-REPACK (= EDF)"): the line drawn last hid the other."""
    import matplotlib.pyplot as plt

    note = exp2_settings(seed, jobs, T)
    for key, fname, ylabel, title, extra in (
            ("met_pct", "fig3_met.png", "jobs that met their goal [%]", "Experiment Two: jobs meeting the goal", ""),
            ("placement_changes", "fig4_changes.png", "suspended + resumed + migrated (sum)",
             "Experiment Two: placement changes, the sum of\njobs suspended, resumed and migrated",
             "\nthe three apart: columns suspends, resumes, migrations of exp2_summary.csv")):
        fig, ax = plt.subplots(figsize=(7, 4.8))
        series = {algo.upper(): [(float(r["inter_arrival_s"]), float(r[key])) for r in summary
                                 if r["algorithm"] == algo] for algo in algos}
        labels = coinciding_labels(series)
        # Each algorithm its own marker and dash, drawn wider first, and a label naming the one it equals: lines with
        # the same values (EDF and EDF-REPACK meet the same goals at every rate) showed as one (APC review).
        dashes = ("-", "--", "-.", ":")
        for k, (algo, (name, points)) in enumerate(zip(algos, series.items(), strict=True)):
            ax.plot([x for x, _ in points], [y for _, y in points], ls=dashes[k % len(dashes)], marker=marker(k),
                    c=COLORS[algo], label=labels[name], lw=2.6 - 0.5 * k, ms=9 - 1.5 * k, alpha=0.85,
                    mfc="none" if k % 2 else COLORS[algo])
        ax.set_xlabel("mean inter-arrival time [s]")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend()
        rect = settings_note(fig, "\n".join([note, *coinciding_points(series, labels)]) + extra)
        fig.tight_layout(rect=rect)
        save_figure(fig, out / fname, dpi=120)
        plt.close(fig)
    shown = fig5_iats(iats)
    fig, axes = plt.subplots(1, len(shown), figsize=(6 * len(shown) + 1.2, 4.5), squeeze=False)
    offsets = {"apc": -0.3, "edf": -0.1, "fcfs": 0.1, "edf-repack": 0.3}
    factors = sorted({j["goal_factor"] for j in all_jobs})
    for ax, iat in zip(axes[0], shown, strict=True):
        for algo in algos:
            js = [j for j in all_jobs if j["inter_arrival_s"] == iat and j["algorithm"] == algo]
            x = [factors.index(j["goal_factor"]) + offsets[algo] for j in js]
            rng = np.random.default_rng(0)
            ax.scatter(np.array(x) + rng.uniform(-0.08, 0.08, len(x)), [j["distance"] for j in js], s=4,
                       c=COLORS[algo], alpha=0.5, label=algo.upper())
        ax.axhline(0, c="k", lw=0.7)
        ax.set_xticks(range(len(factors)), [f"{f:g}" for f in factors])
        ax.set_xlabel("relative goal factor")
        ax.set_ylabel("distance to goal at completion [s] (> 0: early)")
        _symlog_margins(ax, [j["distance"] for j in all_jobs if j["inter_arrival_s"] == iat], SYMLOG_LINTHRESH)
        ax.set_title(f"Experiment Two, mean inter-arrival {iat:g} s")
    # one legend for both panels, beside them: inside, it covered the goal-factor-4 points
    axes[0][-1].legend(markerscale=3, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)
    rect = settings_note(fig, note)
    fig.tight_layout(rect=rect)
    save_figure(fig, out / "fig5_distance.png", dpi=120)
    plt.close(fig)


# --------------------------------------------------------------------------- Experiment Three

EXP3_CONFIGS = (("dynamic", ()), ("static 9 TA + 16 batch", 9), ("static 6 TA + 19 batch", 6))


def experiment_three(out: Path, seed: int, T: float, horizon: float, units: Units | None = None) -> dict[str, Any]:
    units = units or Units()
    nodes = cluster()
    jobs = exp3_jobs(seed)
    app = exp3_app()
    cycles: list[dict[str, Any]] = []
    summary: dict[str, Any] = {}
    for name, static in EXP3_CONFIGS:
        static_nodes = tuple(n.id for n in nodes[:static]) if static else ()
        cfg = SimConfig(nodes, "apc" if not static else "fcfs", T, Costs(), apps=(app,),
                        static_app_nodes=static_nodes, horizon=horizon)
        res = units.run(_key_three(name), cfg, jobs, horizon_cycles(horizon, T), per="cycle").result
        for c in res.cycles:
            cycles.append({"config": name, **c})
        summary[name] = {**exp3_means(res.cycles),
                         "jobs_completed": len(res.jobs),
                         "jobs_rp_at_completion_mean": _mean([j["rp"] for j in res.jobs]),
                         "jobs_met_pct": 100 * res.met_fraction, "placement_changes": res.job_changes}
    _write_csv(out / "exp3_cycles.csv", cycles)
    plot_exp3(out, cycles, seed=seed, T=T, horizon=horizon,
              jobs=sum(j.submit < horizon for j in jobs))
    return summary


def exp3_means(cycles: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Experiment Three's means over its control cycles: the transactional app's RP over all of them; the batch
    jobs' hypothetical RP (Sec. 4.2) and the lower of the two over the cycles that have long-running jobs (a cycle
    without one has no batch RP). Counting those cycles as the app's RP alone made the mean of the minima (0.332)
    larger than the batch mean beside it (0.297; figures review)."""
    ta = np.array([c["web_rp"] for c in cycles], dtype=float)
    hyp = np.array([c["hyp_rp_mean"] for c in cycles], dtype=float)
    mixed = ~np.isnan(hyp)
    return {"ta_rp_mean": _mean(ta), "batch_hyp_rp_mean": _mean(hyp[mixed]),
            "min_of_both_mean": _mean(np.minimum(ta[mixed], hyp[mixed])),
            "cycles": len(ta), "cycles_with_long_running_jobs": int(mixed.sum())}


def _mean(xs: Any) -> float:
    """The mean, NaN (without numpy's "Mean of empty slice" warning) when there is nothing to average: a short
    horizon may end before any job completes."""
    xs = np.asarray(xs, dtype=float)
    return float(np.mean(xs)) if xs.size else math.nan


def _num(x: float, fmt: str) -> str:
    """``x`` formatted, or ``n/a`` for NaN (nothing was measured)."""
    return "n/a" if math.isnan(x) else format(x, fmt)


def exp3_settings(seed: int | None, T: float | None, horizon: float | None, jobs: int | None) -> str:
    """The settings note of Experiment Three's figures: those given (a library caller may give none)."""
    parts = [f"seed {seed}" if seed is not None else "",
             "" if jobs is None else f"{jobs} long-running jobs submitted within the horizon ({EXP3_INITIAL} at t = 0)",
             f"control cycle T = {T:g} s" if T is not None else "",
             f"horizon {horizon:,.0f} s" if horizon is not None else ""]
    return ", ".join([p for p in parts if p] + [_cluster_text()]) + (
        "\nstatic partitions: the transactional app on the first 9 or 6 nodes, the jobs FCFS on the others; "
        "placement changes cost time (Costs' defaults)")


def plot_exp3(out: Path, cycles: list[dict[str, Any]], *, seed: int | None = None, T: float | None = None,
              horizon: float | None = None, jobs: int | None = None) -> None:
    """Figs. 6 and 7 from Experiment Three's per-cycle rows (as written to ``exp3_cycles.csv``), each with a note of
    the settings that produced them: the ``seed``, the long-running ``jobs`` submitted within the ``horizon`` and the
    control cycle ``T``. Fig. 7's CPU is in MHz, as in the CSV, written with thousands separators."""
    import matplotlib.pyplot as plt

    note = exp3_settings(seed, T, horizon, jobs)
    for fname, title, ylabel, series in (
            ("fig6_rp.png", "Experiment Three: relative performance", "relative performance",
             (("web_rp", "transactional (actual)"), ("hyp_rp_mean", "long-running (hypothetical)"))),
            ("fig7_cpu.png", "Experiment Three: CPU allocated [MHz]", "CPU [MHz]",
             (("web_cpu_mhz", "transactional"), ("batch_cpu_mhz", "long-running")))):
        fig, axes = plt.subplots(len(EXP3_CONFIGS), 1, figsize=(9, 8.5), sharex=True, sharey=True)
        for ax, (name, _) in zip(axes, EXP3_CONFIGS, strict=True):
            rows = [c for c in cycles if c["config"] == name]
            for key, label in series:
                ax.plot([c["time"] for c in rows], [c[key] for c in rows], lw=1.2, label=label)
            ax.set_title(name, fontsize=10)
            ax.set_ylabel(ylabel, fontsize=9)
            ax.grid(alpha=0.3)
            ax.xaxis.set_major_formatter(_thousands())
            if fname == "fig6_rp.png":
                low = min(float(c[k]) for c in cycles for k, _ in series if math.isfinite(float(c[k])))
                ax.set_ylim(max(-3.0, low - 0.1), 0.8)
            else:  # 300,000 MHz, not 300000
                ax.yaxis.set_major_formatter(_thousands())
        # beside the first panel: inside, it covered the start of the long-running line
        axes[0].legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0, fontsize=8)
        axes[-1].set_xlabel("time [s]")
        fig.suptitle(title)
        rect = settings_note(fig, note)
        fig.tight_layout(rect=rect)
        save_figure(fig, out / fname, dpi=120)
        plt.close(fig)


# --------------------------------------------------------------------------- CLI


def _size_checks(args: argparse.Namespace, exps: Sequence[str], iats: Sequence[float]) -> list[tuple]:
    """Refusals (for :func:`coordinator.flagcheck.first_refusal`) of runs too large to end: a ``--cycle`` above
    :data:`MAX_CYCLE` (``1e8`` ran for ever, placing nothing), job streams of more than :data:`MAX_DRAWS` jobs
    (``--exp2-iats 1e-9`` tried to allocate 72.8 TiB), and experiments that would simulate more than
    :data:`MAX_CYCLES` control cycles, each naming the flag of the experiment that runs: ``--exp2-iats 1e7`` passed
    every check and would have simulated about 13 million cycles (7 GB of rows), ``--exp3-horizon 1e12`` or
    ``--cycle 1e-3`` about as long (review). The cycle estimates are the arrivals' span over the cycle (the runs end
    soon after their last arrivals at the default loads) and Experiment Three's horizon; only well-formed values
    are estimated (the checks beside these refuse the others)."""
    goal, most = shortest_relative_goal(), MAX_DRAWS
    out: list[tuple] = [
        ("--cycle", args.cycle, not args.cycle > MAX_CYCLE,
         f"must be at most {MAX_CYCLE:g} s, 100 times the shortest relative goal of the experiments' jobs ({goal:g} "
         f"s): a job may wait a cycle before APC first places it, and with its relative performance then below -1000 "
         f"(about -T / {goal:g} s) APC cannot tell placing it from not (the run may never end)"),
        # (Experiment One draws its jobs at once too: 1e13 of them tried to allocate 72.8 TiB; review)
        ("--exp1-jobs", args.exp1_jobs, args.exp1_jobs <= most, f"must be at most {most:,} (jobs drawn)"),
        ("--exp2-jobs", args.exp2_jobs, 3 * args.exp2_jobs <= most,
         f"must be at most {most // 3:,} (Experiment Two draws at least three times as many jobs, at most {most:,})"),
    ]
    many = [i for i in iats if math.isfinite(i) and i > 0 and exp2_draws(args.exp2_jobs, i) > most]
    # (named with --exp2-jobs: a large --exp2-jobs alone was refused as "--exp2-iats ... got 50", the default; review)
    out.append(("--exp2-iats", ",".join(f"{i:g}" for i in many), not many,
                f"must each be at least {1000.0 * args.exp2_jobs / most:g} s with --exp2-jobs {args.exp2_jobs} "
                f"(Experiment Two draws max(3, 1000 / the inter-arrival time) jobs per completion, at most {most:,}; "
                "lower --exp2-jobs or raise the inter-arrival times)"))
    T = args.cycle
    if not (math.isfinite(T) and T > 0):
        return out
    bound = f"must leave at most {MAX_CYCLES:,} control cycles of --cycle {T:g} s to simulate"
    if "one" in exps and args.exp1_jobs >= 1:
        n = args.exp1_jobs * EXP1_MEAN_IAT / T
        out.append(("--exp1-jobs", args.exp1_jobs, n <= MAX_CYCLES,
                    f"{bound} (about --exp1-jobs x {EXP1_MEAN_IAT:g} s of arrivals / T: {n:,.0f})"))
    if "two" in exps and args.exp2_jobs >= 1:
        long = [i for i in iats if math.isfinite(i) and args.exp2_jobs * i / T > MAX_CYCLES]
        out.append(("--exp2-iats", ",".join(f"{i:g}" for i in long), not long,
                    f"{bound} (about --exp2-jobs {args.exp2_jobs} x the inter-arrival time / T)"))
    if "three" in exps and math.isfinite(args.exp3_horizon) and args.exp3_horizon > 0:
        n = horizon_cycles(args.exp3_horizon, T)
        out.append(("--exp3-horizon", args.exp3_horizon, n <= MAX_CYCLES, f"{bound} (horizon / T: {n:,})"))
    return out


def _parser() -> argparse.ArgumentParser:
    # The module docstring up to the files it writes; how a run resumes (the rest of it) is for the README's reader
    # and the code's: --help is not the place for 40 lines on journals and checkpoints.
    what = doc_text(__doc__).split("\n--out always describes one run.")[0].rstrip().replace(" (both below).", ".")
    p = Parser(prog="vcemu apc", description=what + "\n\nA run first removes these files of an earlier run "
               "in --out (whichever experiments it ran), but for the journal,\nfrom which it reuses the "
               "simulations it needs. A run killed or interrupted keeps its finished simulations (and the "
               "one\nunder way, to its last checkpoint): run the same command again.",
               formatter_class=argparse.RawDescriptionHelpFormatter)  # (arguments wrapped)
    p.add_argument("--experiments", default="one,two,three",
                   help="comma-separated subset of one,two,three (or 1,2,3; default %(default)s)")
    p.add_argument("--out", default="results/apc",
                   help="results folder; a rerun there reuses its journalled simulations (default %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="seed of the job streams (default %(default)s)")
    p.add_argument("--cycle", type=float, default=600.0, help=f"control cycle T [s] (003: 600; at most {MAX_CYCLE:g})")
    p.add_argument("--exp1-jobs", type=int, default=800,
                   help="completions in Experiment One (003: 800; see --exp2-jobs)")
    p.add_argument("--exp2-jobs", type=int, default=800,
                   help="completions per run (003: 800). A run ends with the control cycle in which that many jobs "
                   "have completed, so it may count a few more: every job of that cycle is scored")
    p.add_argument("--exp2-iats", default="50,75,100,150,200,250,300,400",
                   help="mean inter-arrival times [s] (default %(default)s: 003 Sec. 5.2 uses \"eight different "
                   "inter-arrival times, ranging from 50s to 400s\" and names 50, 100, 150 and 200; 75, 250 and 300 "
                   "are vcemu's choice)")
    p.add_argument("--exp2-algorithms", default="apc,edf,fcfs,edf-repack",
                   help="subset of apc,edf,fcfs,edf-repack: edf keeps running jobs on their nodes, edf-repack "
                        "places every job first fit in deadline order every cycle (default %(default)s)")
    p.add_argument("--exp3-horizon", type=float, default=130_000.0,
                   help="simulated seconds of Experiment Three (> 0; default %(default)g)")
    p.add_argument("--live", action="store_true",
                   help="also run a shortened Experiment Three live (never resumed: a rerun runs it again in full)")
    # (no default here: given without --live it is refused, LIVE_SECONDS otherwise)
    p.add_argument("--live-seconds", type=float, default=None,
                   help=f"length of the live run [s], with --live (at least 2; default {LIVE_SECONDS:g})")
    p.add_argument("--live-agent", metavar="HOST:PORT", default=None,
                   help="with --live, run the live experiment on this running `vcemu agent` (its first host); "
                        "default: an in-process agent with one 1-core host")
    p.add_argument("--live-token-file", metavar="FILE", default=None,
                   help="with --live-agent: the agent's bearer token (the --token-file it was given)")
    return p


@releasing_out_locks
def apc_main(argv: list[str]) -> int:
    """Entry point of ``vcemu apc``. Returns a process exit code."""
    args = _parser().parse_args(argv)
    numbers = {"1": "one", "2": "two", "3": "three"}  # (any case, and the experiments' numbers: "One", "3")
    given = [e.strip() for e in args.experiments.split(",") if e.strip()]
    exps = [numbers.get(e, e.lower()) for e in given]
    bad = [g for g, e in zip(given, exps, strict=True) if e not in ("one", "two", "three")]
    if bad:
        print(f"vcemu apc: --experiments: unknown {', '.join(bad)}; known: one, two, three", file=sys.stderr)
        return 2
    if not exps and not args.live:  # (with --live alone, the live experiment runs)
        print(f"vcemu apc: --experiments: nothing to run, got {args.experiments!r}; give a comma-separated subset of "
              "one,two,three (or --live)", file=sys.stderr)
        return 2
    try:
        iats = tuple(float(x) for x in args.exp2_iats.split(","))
    except ValueError:
        print(f"vcemu apc: --exp2-iats: expected comma-separated numbers, got {args.exp2_iats!r}", file=sys.stderr)
        return 2
    algos = tuple(a.strip().lower() for a in args.exp2_algorithms.split(",") if a.strip())
    if not algos or any(a not in ALGOS for a in algos):
        print(f"vcemu apc: --exp2-algorithms: expected a subset of {','.join(ALGOS)}, got {args.exp2_algorithms!r}",
              file=sys.stderr)
        return 2
    # A value given twice ran twice, and its rows came twice into exp2_summary.csv and exp2_jobs.csv (review)
    for flag, values in (("--experiments", exps), ("--exp2-iats", iats), ("--exp2-algorithms", algos)):
        twice = sorted({f"{v:g}" if isinstance(v, float) else v for v in values if values.count(v) > 1})
        if twice:
            print(f"vcemu apc: {flag}: each value once, got {', '.join(twice)} more than once", file=sys.stderr)
            return 2
    # Everything is refused here, before anything is written in --out: not by a traceback (or an empty result) later.
    checks = [  # numpy's SeedSequence, which seeds the job streams, takes only non-negative entropy
              ("--seed", args.seed, args.seed >= 0, "must be >= 0"),
              ("--cycle", args.cycle, math.isfinite(args.cycle) and args.cycle > 0, "must be a finite number > 0"),
              ("--exp1-jobs", args.exp1_jobs, args.exp1_jobs >= 1, "must be >= 1"),
              ("--exp2-jobs", args.exp2_jobs, args.exp2_jobs >= 1, "must be >= 1"),
              ("--exp2-iats", args.exp2_iats, all(math.isfinite(i) and i > 0 for i in iats),
               "must be finite numbers > 0")]
    checks += _size_checks(args, exps, iats)
    # (checked whether or not they are used: an --exp3-horizon of -1 without Experiment Three was taken without a
    # word; --live-seconds and --live-agent without --live were ignored, and config.json recorded them as run)
    checks.append(("--exp3-horizon", args.exp3_horizon, math.isfinite(args.exp3_horizon) and args.exp3_horizon > 0,
                   "must be a finite number > 0 (simulated seconds)"))
    checks += [(flag, value, args.live or value is None, "needs --live (without it no live experiment runs)")
               for flag, value in (("--live-seconds", args.live_seconds), ("--live-agent", args.live_agent),
                                  ("--live-token-file", args.live_token_file))]
    from coordinator.apc.live import LiveConfig

    cycle = LiveConfig().T
    seconds = LIVE_SECONDS if args.live_seconds is None else args.live_seconds
    checks.append(("--live-seconds", seconds, math.isfinite(seconds) and seconds >= cycle,
                   f"must be a finite number >= {cycle:g} (one control cycle of the live run)"))
    line = first_refusal("vcemu apc", checks)
    if line is not None:
        print(line, file=sys.stderr)
        return 2
    args.live_seconds = seconds if args.live else None  # (what config.json records and the live run takes; a run
    # without --live recorded 40.0 beside "live": false, as if it had run that long)
    if args.live_token_file is not None and args.live_agent is None:
        print("vcemu apc: --live-token-file: needs --live-agent (the in-process agent wants no token)",
              file=sys.stderr)
        return 2
    from vcemu.cliargs import read_token

    # (kept off args, whose every entry config.json records: code review, the token was written there in clear)
    token = read_token(args.live_token_file, "--live-token-file")  # (unreadable or empty: exit status 2)
    if args.live and args.live_agent is not None:
        from coordinator.apc.live import LiveAgentError, check_agent

        try:
            check_agent(args.live_agent, token=token)
        except LiveAgentError as exc:
            print(f"vcemu apc: {exc}", file=sys.stderr)
            return 2

    try:
        out = usable_out_dir(args.out, command="apc")
        claim_out(out, "apc")  # held until this command returns: one run at a time in --out
    except ValueError as exc:
        print(f"vcemu apc: {exc}", file=sys.stderr)
        return 2
    config = {**vars(args), "argv": list(argv), "paper": PAPER, "workloads": describe(), "code": code_version(),
              "complete": False,
              # the names as run, not as typed ("One", "FCFS"): argv keeps those
              "experiments": ",".join(exps), "exp2_algorithms": ",".join(algos)}
    keys = unit_keys(exps, iats, algos)
    settings = {k: unit_settings(k, args) for k in keys}
    if (refusal := other_settings_refusal(out, config, SETTINGS, JOURNAL, "vcemu apc",
                                          results=("exp1_cycles.csv", "exp2_jobs.csv", "exp3_cycles.csv"))) is not None:
        print(refusal, file=sys.stderr)
        return 2
    stored = resume_units(out, config, keys, settings)
    if (note := replaced_note(out, exps, args.live, kept=stored is not None)) is not None:
        print(note, file=sys.stderr)
    # config.json is replaced below, atomically, never removed: a kill at any moment leaves no journal without
    # the config it belongs to
    clear_outputs(out, [n for n in OUTPUTS if n != "config.json"] + [OLD_JOURNAL]
                  + ([JOURNAL, CHECKPOINT] if stored is None else []))
    clear_outputs(out / "live", LIVE_OUTPUTS)
    write_json(out / "config.json", config, indent=1, sort_keys=False)
    summary: dict[str, Any] = {"code": config["code"]}
    # SIGTERM as Ctrl-C (a KeyboardInterrupt): the simulations say what they keep, and the live part stops its agent
    # and tasks. Killed at once, it left its cgroups and its /dev/shm files to the next live run's sweep (review).
    with signals_interrupt():
        return _run(out, args, exps, iats, algos, config, settings, stored, summary, token)


def _run(out: Path, args: argparse.Namespace, exps: list[str], iats: tuple[float, ...], algos: tuple[str, ...],
         config: dict[str, Any], settings: dict[str, dict[str, Any]], stored: Journalled | None,
         summary: dict[str, Any], token: str | None = None) -> int:
    """:func:`apc_main` once its arguments are checked and --out is ready: the simulations, then the live part
    (``token``: the live agent's, from --live-token-file)."""
    units: Units | None = None
    try:
        with Journal(out / JOURNAL, FIELDS, stored.rows() if stored else []) as journal:
            units = Units(journal, {k: f for k, (_, f) in (stored.kept if stored else {}).items()}, settings,
                          out / CHECKPOINT, fingerprint_of(config))
            _simulations(out, args, exps, iats, algos, units, summary)
    except KeyboardInterrupt:
        under_way = units.under_way() if units is not None else None
        if under_way is None:
            also = ""
        elif under_way[1]:
            also = f" (and the one under way, {under_way[0]}, as of its last checkpoint in {out / CHECKPOINT})"
        else:
            also = f" (the one under way, {under_way[0]}, saved no checkpoint: it runs again from its start)"
        print(f"vcemu apc: interrupted; the finished simulations are kept in {out / JOURNAL}{also}: run the same "
              "command again to continue", file=sys.stderr)
        return 130
    except SimulationStuck as exc:  # (a traceback before; the finished simulations stay journalled)
        under_way = units.under_way() if units is not None else None
        print(f"vcemu apc: {under_way[0] + ': ' if under_way else ''}{exc}", file=sys.stderr)
        return 1
    if args.live:
        from coordinator.apc.live import LiveAgentError, live_experiment_three

        try:
            summary["live"] = live_experiment_three(out / "live", args.live_seconds, agent=args.live_agent,
                                                    token=token)
        except LiveAgentError as exc:  # the agent went away after the check: keep the simulated results
            print(f"vcemu apc: {exc}", file=sys.stderr)
            summary["live"] = {"error": str(exc)}
            write_json(out / "summary.json", json_safe(summary), indent=1, sort_keys=False, default=_json_default)
            print(f"written to {out}/ (without the live experiment: config.json stays \"complete\": false; the same "
                  "command again reuses the simulations and runs only the live part)")
            return 1
        print("\n".join(live_summary(summary["live"])))
        if summary["live"].get("interrupted"):
            write_json(out / "summary.json", json_safe(summary), indent=1, sort_keys=False, default=_json_default)
            print(f"vcemu apc: interrupted in the live part; the simulations' results and the live cycles measured so "
                  f"far are written to {out}/ (config.json stays \"complete\": false; the same command again reuses "
                  "the simulations and runs the live part in full)", file=sys.stderr)
            return 130
    write_json(out / "summary.json", json_safe(summary), indent=1, sort_keys=False, default=_json_default)
    write_json(out / "config.json", {**config, "complete": True}, indent=1, sort_keys=False)
    print(f"written to {out}/")  # (the journal stays: later runs reuse its simulations)
    return 0


def _simulations(out: Path, args: argparse.Namespace, exps: list[str], iats: tuple[float, ...],
                 algos: tuple[str, ...], units: Units, summary: dict[str, Any]) -> None:
    """The simulated experiments of ``exps``, each reported (files, and a few lines) as soon as it is done;
    their summaries go into ``summary``."""
    if "one" in exps:
        summary["one"] = s = experiment_one(out, args.seed, args.exp1_jobs, args.cycle, units)
        print(f"Experiment One: {s['jobs_completed']} jobs, max RP {s['max_rp']:.4f} (paper 0.63), mean RP "
              f"{s['mean_rp']:.4f}, suspends+resumes+migrations {s['placement_changes']} (paper 0)")
    if "two" in exps:
        summary["two"] = s = experiment_two(out, args.seed, args.exp2_jobs, iats, args.cycle, algos, units)
        print(f"Experiment Two (each run ends with the control cycle that brings it to {args.exp2_jobs} completions):")
        print("\n".join(exp2_table(s["rows"])))
    if "three" in exps:
        summary["three"] = s = experiment_three(out, args.seed, args.cycle, args.exp3_horizon, units)
        print("Experiment Three (means over the control cycles: the transactional RP over all of them, the batch "
              "hypothetical RP and the lower of the two over those with long-running jobs):")
        for name, v in s.items():
            met = "n/a (none completed)" if math.isnan(v["jobs_met_pct"]) else f"{v['jobs_met_pct']:.0f}%"
            print(f"  {name:<24} transactional RP {_num(v['ta_rp_mean'], '.3f')}  batch hypothetical RP "
                  f"{_num(v['batch_hyp_rp_mean'], '.3f')}  min of both {_num(v['min_of_both_mean'], '.3f')}  "
                  f"({v['cycles_with_long_running_jobs']} of {v['cycles']} cycles)  jobs met {met}")


def exp2_table(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The lines of Experiment Two's table (its summary rows, :func:`experiment_two`), each column as wide as its
    widest entry: numbers right-aligned, the algorithm left-aligned (``edf-repack`` overflowed a fixed width)."""
    columns = (("iat [s]", ">", lambda r: f"{r['inter_arrival_s']:g}"), ("algo", "<", lambda r: r["algorithm"]),
               ("met %", ">", lambda r: _num(r["met_pct"], ".1f")),
               ("changes", ">", lambda r: str(r["placement_changes"])))
    cells = [[head for head, _, _ in columns]] + [[cell(r) for _, _, cell in columns] for r in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    return ["  " + " ".join(f"{text:{align}{width}}" for text, (_, align, _), width in zip(line, columns, widths,
                                                                                         strict=True)).rstrip()
            for line in cells]


def _ms(seconds: float) -> str:
    return "n/a" if math.isnan(seconds) else f"{1000 * seconds:.1f} ms"


def live_summary(live: dict[str, Any]) -> list[str]:
    """A few lines on the live run (what :func:`coordinator.apc.live.live_experiment_three` returned): what
    ran and for how long, the transactional app's measured response time against its goal, the CPU APC
    gave it, and where APC left the batch jobs. Without them a user sees the live run only in its files."""
    if "skipped" in live:
        return [f"Live Experiment Three: skipped ({live['skipped']})"]
    rows = live.get("rows") or []
    if not rows:
        return ["Live Experiment Three: no control cycle completed"]
    rates = [r["rate_rps"] for r in rows]
    steps = [f"{x:g}" for i, x in enumerate(rates) if i == 0 or x != rates[i - 1]]
    cores = f"{live['cores']:g} core{'' if live['cores'] == 1 else 's'}"
    length = (f"interrupted after {len(rows) * live['cycle_s']:g} of {live['seconds']:g} s" if live.get("interrupted")
              else f"in {live['seconds']:g} s")
    lines = [f"Live Experiment Three (shortened) on agent host {live['host']} ({cores}): {len(rows)} control "
             f"cycles of {live['cycle_s']:g} s {length}, request rate {' -> '.join(steps)} req/s"]
    served = [r for r in rows if math.isfinite(r["measured_rt_s"]) and r["throughput_rps"] > 0]
    weight = sum(r["throughput_rps"] for r in served)  # the mean over requests, not over cycles
    mean_rt = sum(r["measured_rt_s"] * r["throughput_rps"] for r in served) / weight if weight else math.nan
    p95 = max((r["measured_p95_s"] for r in served if math.isfinite(r["measured_p95_s"])), default=math.nan)
    rp = [r["app_rp_measured"] for r in rows if "app_rp_measured" in r] or [math.nan]
    given = [r["app_cores_next"] for r in rows if "app_cores_next" in r]  # APC's decisions, not the initial share
    used = sum(r["app_cpu_measured_cores"] for r in rows) / len(rows)
    tput = weight / len(served) if served else math.nan
    lines.append(f"  transactional: response time {_ms(mean_rt)} mean (goal {_ms(live['goal_s'])}), worst cycle's "
                 f"p95 {_ms(p95)}, throughput {_num(tput, '.1f')} req/s mean, RP "
                 f"{_num(sum(rp) / len(rp), '.2f')} mean (min {_num(min(rp), '.2f')})")
    by_apc = (f"given {min(given):.2f}-{max(given):.2f} cores by APC" if given
              else "APC made no decision (no cycle measured a response time)")
    lines.append(f"  transactional CPU: {rows[0]['app_cores']:.2f} cores at the start, {by_apc}, used {used:.2f} on "
                 "average")
    jobs = sorted({k[:-len("_rp_predicted")] for r in rows for k in r if k.endswith("_rp_predicted")} - {"app"})
    last = next((r for r in reversed(rows) if "app_rp_predicted" in r), None)
    if jobs and last is not None:
        lines.append("  batch jobs at the last cycle: " + ", ".join(
            f"{j} RP {last[f'{j}_rp_predicted']:.2f} (predicted) on {last[f'{j}_cores_next']:.2f} cores"
            for j in jobs))
    return lines


def _json_default(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    return str(x)
