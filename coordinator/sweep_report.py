"""The analogues of seed 001's Table I, Figure 1 and Table II from a sweep's cells (CSV + PNG).

Aggregation, as 001 Sec. V does it: a degradation factor per (trace, penalty) and algorithm (max stretch
over the best algorithm's on that trace and penalty); Table I gives its average, standard deviation
(population) and maximum over the traces of a group; Figure 1 its average per load level over the scaled
traces; Table II the average (maximum) of the preemption/migration costs over the scaled traces with
load >= 0.7, for the algorithms that preempt or migrate (only cells counted under the current
``metrics.MOVE_COUNTING`` rule). Cells that timed out or failed have no max stretch (:func:`with_degradation`
takes none from them, even one stored over the jobs that completed): they are listed in cells.csv and counted in
Table I's ``failed`` column, and their (trace, penalty) is left out of every algorithm's degradation factors
(counted in ``left_out``), since the best algorithm there is unknown. A table with no cell (Table II without a
scaled trace of load >= 0.7) is not written, and a plot with no value to show is not drawn; both are said on
stderr, as is a plot that fails, which leaves the other reports to be written.

Every report is written atomically (vcemu.outputs), and ``vcemu sweep`` removes the previous ones
(:data:`REPORT_PATTERNS`) before a run: reports are derived from the cells, and one older than them must
not pass for theirs.
"""

from __future__ import annotations

import csv
import io
import math
import statistics
import sys
from collections import defaultdict
from collections.abc import Callable, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

from coordinator.figures import coinciding_labels, count, marker, settings_note
from coordinator.metrics import MOVE_COUNTING, degradation_factors
from coordinator.policy_names import policy_order, split_name
from vcemu.outputs import save_figure, write_text

GROUPS = (("scaled", "Scaled synthetic traces"), ("unscaled", "Unscaled synthetic traces"),
          ("hpc2n", "Real-world trace (HPC2N weeks)"))
PREEMPTIVE = ("greedy-pmtn", "greedy-pmtn-migr", "dynmcb8", "dynmcb8-per", "dynmcb8-asap-per",
              "dynmcb8-stretch-per")
COST_FIELDS = ("pmtn_gb_s", "mig_gb_s", "pmtn_per_hour", "mig_per_hour", "pmtn_per_job", "mig_per_job")
CELL_FIELDS = ("cell", "trace", "group", "load", "algorithm", "penalty", "hosts", "jobs", "status", "wall_s",
               "max_stretch", "max_plain_stretch", "max_literal_stretch", "mean_stretch", "degradation", "preemptions",
               "migrations", "span_s", *COST_FIELDS, "utilisation", "underutilisation", "decisions", "decision_mean_s",
               "decision_p99_s", "decision_max_s", "error")
#: The columns of table1_p<penalty>.csv and table1_vs_paper_p300.csv, fixed: a column must not depend on which
#: algorithm comes first (a rank is missing where the average is NaN).
TABLE1_FIELDS = ("algorithm", *(f"{g}_{k}" for g, _ in GROUPS
                                 for k in ("avg", "std", "max", "n", "failed", "left_out")))
TABLE1_VS_PAPER_FIELDS = ("algorithm", *(f"{g}_{k}" for g, _ in GROUPS for k in ("n", "avg", "paper_avg", "max",
                                                                                 "paper_max")),
                          *(f"{g}_{k}_rank" for g, _ in GROUPS for k in ("avg", "paper_avg")))
TABLE2_FIELDS = ("algorithm", "n", "other_counting", *(f"{f}_{k}" for f in COST_FIELDS for k in ("avg", "max")))
#: Every file :func:`write_reports` may write in the output directory (and nothing else there: not the cells).
REPORT_PATTERNS = ("cells.csv", "degradation.csv", "table1_p*.csv", "table1_p*.png", "table1_vs_paper_p300.csv",
                   "table1_literal_p*.csv", "table1_literal_vs_paper_p300.csv", "table2_p*.csv", "table2_p*.png",
                   "fig1_p*.csv", "fig1.png")


#: 001 Table I (5-minute penalty): degradation factor avg, std, max per trace group, as printed.
PAPER_TABLE1_P300: dict[str, dict[str, tuple[float, float, float]]] = {
    "fcfs": {"scaled": (435.32, 239.37, 1470.30), "unscaled": (448.74, 238.38, 1128.44),
             "hpc2n": (469.51, 581.12, 4422.00)},
    "easy": {"scaled": (392.78, 227.85, 1454.26), "unscaled": (410.06, 226.41, 989.91),
             "hpc2n": (402.93, 500.13, 3136.92)},
    "greedy": {"scaled": (284.07, 222.33, 2288.65), "unscaled": (239.76, 217.47, 1128.32),
               "hpc2n": (134.32, 268.66, 2129.98)},
    "greedy-pmtn": {"scaled": (9.45, 41.30, 509.05), "unscaled": (3.28, 10.59, 84.16), "hpc2n": (1.72, 6.63, 89.54)},
    "greedy-pmtn-migr": {"scaled": (10.86, 46.35, 509.04), "unscaled": (3.61, 13.81, 102.69),
                         "hpc2n": (1.77, 6.87, 92.87)},
    "dynmcb8": {"scaled": (108.78, 183.77, 1435.44), "unscaled": (36.95, 32.16, 162.33),
                "hpc2n": (67.19, 229.96, 2241.83)},
    "dynmcb8-per": {"scaled": (3.55, 2.62, 16.38), "unscaled": (4.83, 3.90, 21.30), "hpc2n": (14.73, 64.41, 668.24)},
    "dynmcb8-asap-per": {"scaled": (2.62, 1.66, 12.77), "unscaled": (3.28, 2.03, 11.00),
                         "hpc2n": (4.23, 3.05, 24.68)},
    "dynmcb8-stretch-per": {"scaled": (3.59, 2.53, 16.38), "unscaled": (4.89, 3.77, 20.97),
                            "hpc2n": (16.01, 78.24, 900.45)},
}


def competition_ranks(values: dict[str, float]) -> dict[str, int]:
    """Rank by value, lowest first, ties sharing a rank ("1224" competition ranking: each value ranks one above the
    number of values below it). Values are compared as the reports write them (6 significant digits), so that two
    averages that print alike do not get two ranks; a NaN gets no rank."""
    shown = {k: float(f"{v:.6g}") for k, v in values.items() if not math.isnan(v)}
    return {k: 1 + sum(1 for w in shown.values() if w < v) for k, v in shown.items()}


def table1_vs_paper(t1: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Our Table I (5-minute penalty) beside the paper's, with each algorithm's rank by average in both
    (``<group>_avg_rank``, ``<group>_paper_avg_rank``): 1 for the lowest average, tied averages sharing the best
    of their ranks and the next rank skipped ("1224" competition ranking, :func:`competition_ranks`; e.g. six
    algorithms all at 1.0 are all 1), none where there is no average."""
    out = []
    for r in t1:
        row: dict[str, Any] = {"algorithm": r["algorithm"]}
        for g, _ in GROUPS:
            paper = PAPER_TABLE1_P300.get(r["algorithm"], {}).get(g, (math.nan,) * 3)
            row.update({f"{g}_n": r[f"{g}_n"], f"{g}_avg": r[f"{g}_avg"], f"{g}_paper_avg": paper[0],
                        f"{g}_max": r[f"{g}_max"], f"{g}_paper_max": paper[2]})
        out.append(row)
    for g, _ in GROUPS:
        for key in ("avg", "paper_avg"):
            ranks = competition_ranks({x["algorithm"]: x[f"{g}_{key}"] for x in out})
            for x in out:
                if x["algorithm"] in ranks:
                    x[f"{g}_{key}_rank"] = ranks[x["algorithm"]]
    return out


def with_degradation(rows: Sequence[dict[str, Any]], algorithms: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Each cell with its degradation factor against the best algorithm of its (trace, penalty), and only where
    every algorithm's cell of that (trace, penalty) is there (each of ``algorithms``, the sweep's) and ``ok``;
    otherwise all of them have none (NaN), and the ``ok`` ones are marked ``left_out``. 001 Sec. V divides by "the
    best algorithm for that instance": with one cell timed out, failed or missing (lost by Ray, not yet run, stored
    by other code) the best is unknown, and the best of the others gave them other factors (a cell timed out by a
    tight --cell-timeout made EASY "best" at 1.0 where it was 14.2, reproducibility review). A failed cell's max
    stretch, if it has one, is over the jobs that completed, and is never a candidate."""
    by_instance: dict[tuple[str, float], dict[str, float]] = defaultdict(dict)
    for r in rows:
        ms = r.get("max_stretch")
        by_instance[(r["trace"], r["penalty"])][r["algorithm"]] = (
            math.nan if ms is None or r.get("status") != "ok" else float(ms))
    for ms in by_instance.values():  # a missing cell counts as one without a max stretch (the instance incomplete)
        for alg in algorithms:
            ms.setdefault(alg, math.nan)
    factors: dict[tuple[str, float], dict[str, float]] = {}
    for inst, ms in by_instance.items():
        try:
            if any(math.isnan(v) for v in ms.values()):
                raise ValueError("a cell of this instance has no max stretch")
            factors[inst] = degradation_factors(ms)
        except ValueError:
            factors[inst] = {a: math.nan for a in ms}
    out = []
    for r in rows:
        inst = (r["trace"], r["penalty"])
        left_out = r.get("status") == "ok" and any(math.isnan(v) for v in by_instance[inst].values())
        out.append({**r, "degradation": factors[inst][r["algorithm"]], "left_out": left_out})
    return out


def incomplete_instances(rows: Sequence[dict[str, Any]], algorithms: Sequence[str] = ()
                         ) -> set[tuple[str, float]]:
    """The (trace, penalty) pairs with a cell that timed out or failed, or without a cell of one of ``algorithms``:
    none of their cells has a degradation factor (:func:`with_degradation`)."""
    have: dict[tuple[str, float], set[str]] = defaultdict(set)
    bad = set()
    for r in rows:
        have[(r["trace"], r["penalty"])].add(r["algorithm"])
        if r.get("status") != "ok":
            bad.add((r["trace"], r["penalty"]))
    return bad | {inst for inst, algs in have.items() if not set(algorithms) <= algs}


def _stats(xs: Sequence[float]) -> tuple[float, float, float]:
    xs = [x for x in xs if not math.isnan(x)]
    if not xs:
        return math.nan, math.nan, math.nan
    return statistics.fmean(xs), statistics.pstdev(xs), max(xs)


def table1(rows: Sequence[dict[str, Any]], algorithms: Sequence[str], penalty: float) -> list[dict[str, Any]]:
    out = []
    for alg in algorithms:
        row: dict[str, Any] = {"algorithm": alg}
        for group, _ in GROUPS:
            cells = [r for r in rows if r["algorithm"] == alg and r["penalty"] == penalty and r["group"] == group]
            avg, std, mx = _stats([r["degradation"] for r in cells])
            row.update({f"{group}_avg": avg, f"{group}_std": std, f"{group}_max": mx, f"{group}_n": len(cells),
                        f"{group}_failed": sum(1 for r in cells if r.get("status") != "ok"),
                        f"{group}_left_out": sum(1 for r in cells if r.get("left_out"))})
        out.append(row)
    return out


def fig1(rows: Sequence[dict[str, Any]], algorithms: Sequence[str], penalty: float,
         loads: Sequence[float]) -> list[dict[str, Any]]:
    out = []
    for load in loads:
        row: dict[str, Any] = {"load": load}
        for alg in algorithms:
            xs = [r["degradation"] for r in rows if r["group"] == "scaled" and r["penalty"] == penalty
                  and r["algorithm"] == alg and r["load"] is not None and abs(r["load"] - load) < 1e-9]
            row[alg] = _stats(xs)[0]
        out.append(row)
    return out


def table2(rows: Sequence[dict[str, Any]], algorithms: Sequence[str], penalty: float) -> list[dict[str, Any]]:
    out = []
    for alg in (a for a in algorithms if split_name(a)[0] in PREEMPTIVE):
        every = [r for r in rows if r["algorithm"] == alg and r["penalty"] == penalty and r["group"] == "scaled"
                 and r["load"] is not None and r["load"] >= 0.7 - 1e-9 and r.get("status") == "ok"]
        cells = [r for r in every if r.get("counting") == MOVE_COUNTING]
        # cells counted under an earlier rule (stored by an older vcemu) are left out, and counted here
        row: dict[str, Any] = {"algorithm": alg, "n": len(cells), "other_counting": len(every) - len(cells)}
        for f in COST_FIELDS:
            avg, _, mx = _stats([float(r[f]) for r in cells])
            row[f"{f}_avg"], row[f"{f}_max"] = avg, mx
        out.append(row)
    return out


def _write_csv(path: Path, rows: Sequence[dict[str, Any]], fields: Sequence[str] | None = None) -> Path:
    fields = list(fields or (rows[0].keys() if rows else []))
    buf = io.StringIO(newline="")
    w = csv.DictWriter(buf, fieldnames=fields, extrasaction="ignore")
    w.writeheader()
    for r in rows:
        w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items() if k in fields})
    return write_text(path, buf.getvalue())


def _label(alg: str) -> str:
    return alg.upper()


def _say(line: str) -> None:
    print(f"vcemu sweep: {line}", file=sys.stderr)


def _plottable(x: Any) -> bool:
    """A value a log-scaled axis can show (a degradation factor of a cell that has one)."""
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _legend(ax: Any, **kw: Any) -> None:
    """A legend, if the axes hold anything labelled (matplotlib warns on stderr otherwise)."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(**kw)


def _value_label(v: Any) -> str:
    """A bar's value, in three significant figures, whole from 1,000 up ("5,120", not "5.12e+03") and in plain
    decimals below 0.001 ("0.0000461", not "4.61e-05"); "" for a bar with none."""
    if not (isinstance(v, int | float) and math.isfinite(v)):
        return ""
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    text = f"{v:.3g}"
    return format(Decimal(text), "f") if "e" in text else text


def _span(values: Sequence[Any]) -> str:
    """Integers as a note lists them: ``100``, ``87-150`` (a range of values), ``0-3, 7`` (of weeks)."""
    vs = sorted(set(values))
    runs: list[list[int]] = []
    for v in vs:
        if runs and v == runs[-1][-1] + 1:
            runs[-1].append(v)
        else:
            runs.append([v])
    return ", ".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)


def _group_setting(group: str, cells: Sequence[dict[str, Any]], cfg: dict[str, Any]) -> str | None:
    """What the traces of ``group`` among ``cells`` are (how many, which: Lublin seeds or HPC2N weeks), their jobs and
    hosts, as a figure's note says it; None when no cell is of the group."""
    mine = [c for c in cells if c.get("group") == group]
    if not mine:
        return None
    traces = {c["trace"] for c in mine}
    seed, lublin = cfg.get("seed"), cfg.get("traces" if group == "scaled" else "unscaled")
    if isinstance(seed, int) and lublin:
        first = seed + (10_000 if group == "unscaled" else 0)  # (coordinator.sweep.build_traces' seeds)
        seeds = f"seed {first}" if lublin == 1 else f"seeds {first}-{first + lublin - 1}"
    else:
        seeds = ""
    if group == "scaled":
        per_load: dict[float, set[str]] = defaultdict(set)
        for c in mine:
            per_load[c["load"]].add(c["trace"])
        each = _span([len(v) for v in per_load.values()]).replace(", ", "/")
        text = (f"scaled: {each} Lublin trace{'' if each == '1' else 's'} per load{f' ({seeds})' if seeds else ''}"
                f" x {count(len(per_load), 'load')} ({', '.join(f'{x:g}' for x in sorted(per_load))})"
                f" = {count(len(traces), 'trace')}")
    elif group == "unscaled":
        text = f"unscaled: {count(len(traces), 'Lublin trace')}{f' ({seeds})' if seeds else ''}"
    else:
        weeks = [int(t.rsplit("-w", 1)[1]) for t in traces if t.rsplit("-w", 1)[-1].isdigit()]
        text = (f"HPC2N: {count(len(traces), 'week')}"
                + (f" (week{'' if len(weeks) == 1 else 's'} {_span(weeks)})" if weeks else ""))
    jobs = [int(c["jobs"]) for c in mine if isinstance(c.get("jobs"), int | float) and math.isfinite(c["jobs"])]
    hosts = [int(c["hosts"]) for c in mine if isinstance(c.get("hosts"), int | float)]
    if jobs:
        text += f", {min(jobs) if min(jobs) == max(jobs) else f'{min(jobs)}-{max(jobs)}'} jobs per trace"
        if cfg.get("max_jobs") and max(jobs) >= cfg["max_jobs"]:  # (said where it binds)
            text += f" (the first {cfg['max_jobs']} of a trace kept)"
    if group != "hpc2n" and cfg.get("job_scale", 1.0) != 1.0:
        text += f", job scale {cfg['job_scale']:g}"
    if hosts:
        text += f", {_span(hosts).replace(', ', '/')} hosts"
    return text


def _settings(cells: Sequence[dict[str, Any]], cfg: dict[str, Any] | None, groups: Sequence[str],
              penalty: float | None = None) -> list[str]:
    """The note of a sweep figure: per trace group shown, its traces (how many and which), jobs per trace and hosts;
    then the penalty (``None``: one panel each, said in their titles) and what failed."""
    cfg = cfg or {}
    cells = [c for c in cells if penalty is None or c.get("penalty") == penalty]
    lines = [line for g in groups if (line := _group_setting(g, cells, cfg)) is not None]
    pens = sorted({c["penalty"] for c in cells if c.get("penalty") is not None})
    last = (f"rescheduling penalty {penalty:g} s" if penalty is not None
            else f"rescheduling penalt{'ies' if len(pens) > 1 else 'y'} {', '.join(f'{p:g}' for p in pens)} s"
            + (" (one panel each)" if len(pens) > 1 else "") if pens else "")
    failed = sum(1 for c in cells if c.get("group") in groups and c.get("status") != "ok")
    if failed:
        traces = len({t for t, _ in incomplete_instances([c for c in cells if c.get("group") in groups])})
        last += (f"; {count(failed, 'cell')} timed out or failed: {'its' if traces == 1 else 'their'} "
                 f"{count(traces, 'trace')} left out of every algorithm's means")
    return [*lines, last] if last else lines


def _label_above(ax: Any, xs: Sequence[float], avg: Sequence[Any], mx: Sequence[Any], **text: Any) -> None:
    """Each bar's average written above the higher of its bar and its max marker: at the bar's top, the marker
    struck through the label wherever the maximum was close to the average (:func:`_headroom` makes room)."""
    for x, a, m in zip(xs, avg, mx, strict=True):
        label = _value_label(a)
        if not label:
            continue
        top = max(v for v in (a, m) if isinstance(v, int | float) and math.isfinite(v))
        ax.annotate(label, (x, top), xytext=(0, 4), textcoords="offset points", ha="center", va="bottom", **text)


def _headroom(ax: Any) -> None:
    """Room above the highest bar or marker for :func:`_label_above`'s labels (they were cut off at the top)."""
    if ax.get_yscale() == "log":
        low, high = ax.get_ylim()
        ax.set_ylim(low, high * (high / low) ** 0.12)  # an eighth of the decades again, above the highest
    else:
        low, high = ax.get_ylim()
        ax.set_ylim(low, high + 0.18 * (high - low))


def _plot_fig1(path: Path, panels: dict[float, list[dict[str, Any]]], algorithms: Sequence[str],
               cells: Sequence[dict[str, Any]] = (), cfg: dict[str, Any] | None = None) -> Path | None:
    """Fig. 1 with a panel per penalty that has a value to show; None (and no file) when none has. ``cells`` and
    ``cfg`` (the sweep's config) give the note of its settings: traces per point, jobs, seeds, hosts."""
    shown = {pen: data for pen, data in panels.items() if any(_plottable(d[a]) for d in data for a in algorithms)}
    if not shown:
        _say(f"{path.name} not drawn: no scaled trace's cell has a max stretch")
        return None
    plt = _pyplot()
    # (room for the legend beside the panels: with one panel, its long labels squeezed the axes, and the title was
    # cut at the left edge; review)
    fig, axes = plt.subplots(1, len(shown), figsize=(6.5 * len(shown) + 2.5, 5.4), squeeze=False, sharey=True)
    try:
        # An algorithm's label says which earlier one it equals in every panel ("DYNMCB8-STRETCH-PER (=
        # DYNMCB8-PER)"): drawn over it, it hides it
        series = {alg: [(d["load"], d[alg]) for _, data in sorted(shown.items()) for d in data] for alg in algorithms}
        labels = coinciding_labels({_label(a): pts for a, pts in series.items()})
        for ax, (pen, data) in zip(axes[0], sorted(shown.items()), strict=True):
            loads = [d["load"] for d in data]
            for i, alg in enumerate(algorithms):
                ys = [d[alg] for d in data]
                if not any(_plottable(y) for y in ys):
                    continue
                # Hollow markers, a little smaller for each later algorithm: two algorithms of equal values (the
                # GREEDY-PMTN pair at 1.0) show as nested outlines, not as one filled marker hiding the other.
                ax.plot(loads, ys, marker=marker(i), label=labels[_label(alg)], markerfacecolor="none",
                        markeredgewidth=1.4, markersize=max(4.0, 10.0 - 0.6 * i), linewidth=max(0.8, 2.0 - 0.12 * i))
            ax.set_yscale("log")
            ax.set_xlabel("offered load")
            ax.set_title(f"average degradation factor,\nrescheduling penalty {pen:g} s")
            ax.grid(True, which="both", alpha=0.3)
        axes[0][0].set_ylabel("max-stretch degradation factor (log)")
        _legend(axes[0][-1], fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        note = [*_settings([c for c in cells if c.get("penalty") in shown], cfg, ("scaled",)),
                "each point: the mean of the degradation factors (max stretch / the best algorithm's on the trace) of "
                "the scaled traces at that load"]
        fig.tight_layout(rect=settings_note(fig, "\n".join(note)))
        save_figure(fig, path, dpi=120)
    finally:
        plt.close(fig)
    return path


def _plot_table1(path: Path, t1: Sequence[dict[str, Any]], penalty: float, cells: Sequence[dict[str, Any]] = (),
                 cfg: dict[str, Any] | None = None) -> Path | None:
    """Table I's bars, a panel per trace group that has a value to show; None (and no file) when none has. ``cells``
    and ``cfg`` (the sweep's config) give the note of its settings: traces per group, jobs, seeds, hosts."""
    groups = [(g, title) for g, title in GROUPS
              if any(_plottable(r[f"{g}_avg"]) or _plottable(r[f"{g}_max"]) for r in t1)]
    if not groups:
        why = "every one timed out or failed" if any(r[f"{g}_n"] for r in t1 for g, _ in GROUPS) else "there are none"
        _say(f"{path.name} not drawn: no cell of penalty {penalty:g} has a max stretch ({why})")
        return None
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(groups), figsize=(6 * len(groups), 4.8), squeeze=False)
    try:
        for ax, (g, title) in zip(axes[0], groups, strict=True):
            algs = [r["algorithm"] for r in t1]
            avg = [r[f"{g}_avg"] for r in t1]
            mx = [r[f"{g}_max"] for r in t1]
            xs = range(len(algs))
            ax.bar(xs, avg, color="tab:blue", label="average")
            ax.scatter(xs, mx, color="tab:red", marker="_", s=300, label="maximum", zorder=3)
            ax.set_yscale("log")
            # A degradation factor is at least 1 (the best algorithm's): the bars rise from 1, with its tick shown
            # (from the axis' automatic bottom, 1.4 looked like nothing beside 1.1), and each carries its value.
            ax.set_ylim(bottom=1.0)
            _label_above(ax, list(xs), avg, mx, fontsize=7)
            _headroom(ax)
            ax.set_xticks(list(xs), [_label(a) for a in algs], rotation=45, ha="right", fontsize=8)
            n = t1[0][f"{g}_n"]
            ax.set_title(f"{title}\n({n} trace{'' if n == 1 else 's'})", fontsize=10)
            ax.grid(True, axis="y", which="both", alpha=0.3)
        axes[0][0].set_ylabel("degradation factor (log)")
        _legend(axes[0][0], fontsize=8)
        fig.suptitle(f"Table I analogue: degradation factor, penalty {penalty:g} s")
        note = [*_settings(cells, cfg, [g for g, _ in groups], penalty),
                "bar: the mean over a group's traces of an algorithm's degradation factor (max stretch / the best "
                "algorithm's on the trace); dash: the maximum"]
        fig.tight_layout(rect=settings_note(fig, "\n".join(note)))
        save_figure(fig, path, dpi=120)
    finally:
        plt.close(fig)
    return path


#: Table II's panels: the columns' suffix, the title (with a place for the unit) and its units, each with its factor
#: from the CSV's; a panel takes the first unit in which its smallest nonzero value is at least 0.01 (:func:`_unit`).
TABLE2_PANELS = (("gb_s", "bandwidth ({})", (("GB/s", 1.0), ("MB/s", 1e3), ("kB/s", 1e6), ("B/s", 1e9))),
                 ("per_hour", "occurrences {}", (("per hour", 1.0), ("per 1,000 hours", 1e3), ("per 10^6 hours", 1e6))),
                 ("per_job", "occurrences {}", (("per job", 1.0), ("per 1,000 jobs", 1e3), ("per 10^6 jobs", 1e6))))


def _unit(values: Sequence[Any], units: Sequence[tuple[str, float]]) -> tuple[str, float]:
    """The unit a panel shows ``values`` in: the first in which the smallest nonzero one is at least 0.01 (a
    bandwidth of 4.61e-05 GB/s read "4.61e-05"; it is 0.0461 MB/s)."""
    small = min((abs(v) for v in values if isinstance(v, int | float) and math.isfinite(v) and v != 0),
                default=1.0)
    return next(((u, f) for u, f in units if small * f >= 0.01), units[-1])


def _plot_table2(path: Path, t2: Sequence[dict[str, Any]], penalty: float, cells: Sequence[dict[str, Any]] = (),
                 cfg: dict[str, Any] | None = None) -> Path | None:
    """Table II's bars (linear axes), each panel in a unit that needs no exponent (:func:`_unit`); None (and no
    file) when no algorithm has a cell. ``cells`` (those Table II reads: scaled traces of load >= 0.7) and ``cfg``
    (the sweep's config) give the note of its settings; n, the cells per algorithm, is in the title (or under each
    algorithm's name where they differ)."""
    if not any(r["n"] for r in t2):
        return None
    plt = _pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(15, 5.2))
    try:
        algs = [r["algorithm"] for r in t2]
        ns = {r["n"] for r in t2}
        xs = list(range(len(algs)))
        w = 0.38
        for ax, (suffix, title, units) in zip(axes, TABLE2_PANELS, strict=True):
            unit, factor = _unit([r[f"{k}_{suffix}_{s}"] for r in t2 for k in ("pmtn", "mig") for s in ("avg", "max")],
                                 units)
            for off, kind, color in ((-w / 2, "pmtn", "tab:orange"), (w / 2, "mig", "tab:green")):
                avg = [r[f"{kind}_{suffix}_avg"] * factor for r in t2]
                mx = [r[f"{kind}_{suffix}_max"] * factor for r in t2]
                ax.bar([x + off for x in xs], avg, width=w, color=color, label=f"{kind} (avg)")
                # (each bar's value: on a linear axis a preemption rate beside a migration rate 50 times larger
                # drew no visible bar)
                ax.scatter([x + off for x in xs], mx, color="black", marker="_", s=120, zorder=3)
                _label_above(ax, [x + off for x in xs], avg, mx, fontsize=6, rotation=90)
            _headroom(ax)
            ax.set_xticks(xs, [_label(r["algorithm"]) + ("" if len(ns) == 1 else f"\n(n={r['n']})") for r in t2],
                          rotation=45, ha="right", fontsize=8)
            ax.set_title(title.format(unit))
            ax.grid(True, axis="y", alpha=0.3)
        _legend(axes[0], fontsize=8, title="bar: average, dash: max", title_fontsize=7)
        n_text = f" (n = {count(ns.pop(), 'trace')} per algorithm)" if len(ns) == 1 else " (n per algorithm)"
        fig.suptitle(f"Table II analogue: preemption/migration costs, scaled traces with load >= 0.7, "
                     f"penalty {penalty:g} s{n_text}")
        note = _settings(cells, cfg, ("scaled",), penalty)
        if other := sum(int(r.get("other_counting") or 0) for r in t2):
            note.append(f"{count(other, 'cell')} counted under an earlier move-counting rule left out")
        fig.tight_layout(rect=settings_note(fig, "\n".join(note)))
        save_figure(fig, path, dpi=120)
    finally:
        plt.close(fig)
    return path


def _plot(paths: list[Path], plot: Callable[..., Path | None], path: Path, *args: Any) -> None:
    """Draw one plot into ``paths``. A plot that fails (other than by failing to write, which is the disk's and
    stops the reports) is said on one line naming it, and the other reports are still written."""
    try:
        done = plot(path, *args)
    except OSError:
        raise
    except Exception as exc:  # noqa: BLE001 -- said, with the plot's name: the tables it shows are written
        _say(f"warning: {path.name} not drawn: {type(exc).__name__}: {exc}")
        return
    if done is not None:
        paths.append(done)


def _literal_tables(paths: list[Path], rows: Sequence[dict[str, Any]], algorithms: Sequence[str], penalty: float,
                    out: Path) -> None:
    """Table I under 001 Sec. II-B.2's words read literally (``max_literal_stretch``: only the turn-around time
    bounded, :func:`coordinator.metrics.literal_bounded_stretch`), beside the tables of the reading the policies use:
    ``table1_literal_p<penalty>.csv`` and, at 300 s, ``table1_literal_vs_paper_p300.csv``, to see which reading
    reproduces 001's. Written when the penalty's ok cells all have it (cells of an older vcemu do not)."""
    mine = [r for r in rows if r["penalty"] == penalty]
    if not mine:
        return
    if older := sum(1 for r in mine if r.get("status") == "ok" and r.get("max_literal_stretch") is None):
        _say(f"no table1_literal_p{penalty:g}: {count(older, 'cell')} of an older vcemu lack the literal max stretch "
             "(run them again to have it)")
        return
    literal = with_degradation([{**r, "max_stretch": r.get("max_literal_stretch")} for r in mine], algorithms)
    t1 = table1(literal, algorithms, penalty)
    paths.append(_write_csv(out / f"table1_literal_p{penalty:g}.csv", t1, TABLE1_FIELDS))
    if penalty == 300:
        paths.append(_write_csv(out / "table1_literal_vs_paper_p300.csv", table1_vs_paper(t1), TABLE1_VS_PAPER_FIELDS))


def write_reports(rows: Sequence[dict[str, Any]], cfg: dict[str, Any], out: Path) -> list[Path]:
    """Write cells.csv, degradation.csv and per penalty table1/table2 (CSV + PNG), fig1 (CSV + PNG). A table
    without data is not written, and a plot without a value to show not drawn (each said on stderr); returns the
    paths written."""
    algorithms = sorted(cfg["algorithms"], key=policy_order)
    raw = rows
    rows = with_degradation(rows, algorithms)
    rows = sorted(rows, key=lambda r: (r["trace"], r["penalty"], algorithms.index(r["algorithm"])))
    paths = [_write_csv(out / "cells.csv", rows, CELL_FIELDS)]
    paths.append(_write_csv(out / "degradation.csv", rows,
                            ("trace", "group", "load", "penalty", "algorithm", "max_stretch", "degradation",
                             "left_out")))
    if incomplete := incomplete_instances(rows, algorithms):
        _say(f"{count(len(incomplete), '(trace, penalty)')} with a cell that timed out, failed or is missing: every "
             "algorithm's degradation factor there is left out (the best is unknown; table1's left_out counts "
             "them)")
    if any(r["group"] == "unscaled" for r in rows):  # (fidelity review)
        _say("table1: the unscaled traces run at about a third of the load of 001's (our Lublin arrival process spans "
             "about 16 days per 1,000 jobs, 001's 4-6): their column is not comparable with 001's "
             "(workloads/lublin.py)")
    panels: dict[float, list[dict[str, Any]]] = {}
    for pen in cfg["penalties"]:
        t1 = table1(rows, algorithms, pen)
        paths.append(_write_csv(out / f"table1_p{pen:g}.csv", t1, TABLE1_FIELDS))
        _plot(paths, _plot_table1, out / f"table1_p{pen:g}.png", t1, pen, rows, cfg)
        if pen == 300:
            paths.append(_write_csv(out / "table1_vs_paper_p300.csv", table1_vs_paper(t1), TABLE1_VS_PAPER_FIELDS))
            if other := [a for a in algorithms if a not in PAPER_TABLE1_P300]:
                # (a degradation factor is against the best algorithm run on the trace, 001 Sec. V: one of these
                # may be it, where 001's best was one of its nine at T = 600 s)
                _say(f"table1_vs_paper_p300.csv: the degradation factors are against the best of every algorithm "
                     f"run, {', '.join(other)} included, which 001's Table I did not run")
        _literal_tables(paths, raw, algorithms, pen, out)
        t2 = table2(rows, algorithms, pen)
        if t2 and any(r["n"] for r in t2):
            paths.append(_write_csv(out / f"table2_p{pen:g}.csv", t2, TABLE2_FIELDS))
            heavy = [r for r in rows if r["group"] == "scaled" and r["load"] is not None and r["load"] >= 0.7 - 1e-9]
            _plot(paths, _plot_table2, out / f"table2_p{pen:g}.png", t2, pen, heavy, cfg)
        elif t2:
            _say(f"no table2_p{pen:g}: no ok cell of a preempting algorithm on a scaled trace of load >= 0.7")
        if cfg["traces"]:
            panels[pen] = fig1(rows, algorithms, pen, cfg["loads"])
            paths.append(_write_csv(out / f"fig1_p{pen:g}.csv", panels[pen], ("load", *algorithms)))
    if panels:
        _plot(paths, _plot_fig1, out / "fig1.png", panels, algorithms, rows, cfg)
    return paths


