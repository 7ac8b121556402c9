"""``vcemu sweep``'s figures (figures review): fig1, table1 and table2 name the traces behind them (how many per point,
which Lublin seeds and HPC2N weeks), the jobs per trace, the hosts and the penalty; coinciding lines of fig1 say which
they equal; table2 gives n and no number in scientific notation. Built from hand-made cells: no simulation runs."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

import coordinator.sweep_report as report
from coordinator.metrics import MOVE_COUNTING
from tests.unit.figure_capture import note_of

CFG = {"algorithms": ["fcfs", "greedy-pmtn", "dynmcb8-per", "dynmcb8-stretch-per"], "penalties": [0.0, 300.0],
       "traces": 2, "jobs": 100, "loads": [0.5, 0.8], "unscaled": 0, "hosts": 128, "hpc2n_weeks": [10, 11, 12, 20],
       "max_jobs": None, "job_scale": 1.0, "seed": 5}


def _cell(trace: str, group: str, load: float, alg: str, pen: float, ms: float, **kw: Any) -> dict[str, Any]:
    hpc2n = group == "hpc2n"
    return {"trace": trace, "group": group, "load": load, "algorithm": alg, "penalty": pen, "max_stretch": ms,
            "status": "ok" if not math.isnan(ms) else "timeout", "counting": MOVE_COUNTING,
            "hosts": 120 if hpc2n else 128, "jobs": (300 + len(trace)) if hpc2n else 100,
            **{f: 0.0 for f in report.COST_FIELDS}, **kw}


def _cells() -> list[dict[str, Any]]:
    """Two Lublin traces (seeds 5, 6) at loads 0.5 and 0.8 and HPC2N weeks 10-12 and 20, at penalties 0 and 300;
    dynmcb8-stretch-per's max stretch is dynmcb8-per's everywhere."""
    out = []
    stretch = {"fcfs": 40.0, "greedy-pmtn": 2.0, "dynmcb8-per": 3.0, "dynmcb8-stretch-per": 3.0}
    traces = [(f"lublin-s{s}-l{load:.2f}", "scaled", load) for s in (5, 6) for load in (0.5, 0.8)]
    traces += [(f"hpc2n-w{w:03d}", "hpc2n", 0.4) for w in (10, 11, 12, 20)]
    for pen in (0.0, 300.0):
        for trace, group, load in traces:
            for alg, ms in stretch.items():
                costs = {"pmtn_gb_s": 4.61e-05, "mig_gb_s": 0.59, "pmtn_per_hour": 0.4, "mig_per_job": 2.5} \
                    if alg != "fcfs" else {}
                out.append(_cell(trace, group, load, alg, pen, ms * (1 + load), **costs))
    return out


@pytest.fixture
def drawn(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The figures the report saves, by file name (not written: kept for the test to read)."""
    figures: dict[str, Any] = {}

    def save(fig: Any, path: Path, **_kw: Any) -> Path:
        figures[path.name] = fig
        return path

    monkeypatch.setattr(report, "save_figure", save)
    return figures


def _reports(tmp_path: Path, drawn: dict[str, Any], cfg: dict[str, Any] = CFG) -> dict[str, Any]:
    report.write_reports(_cells(), cfg, tmp_path)
    assert {"fig1.png", "table1_p0.png", "table1_p300.png", "table2_p0.png", "table2_p300.png"} <= set(drawn)
    return drawn


def test_fig1_tells_its_coinciding_lines_apart(tmp_path: Path, drawn: dict[str, Any]) -> None:
    fig = _reports(tmp_path, drawn)["fig1.png"]
    legend = [t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()]
    assert legend == ["FCFS", "GREEDY-PMTN", "DYNMCB8-PER", "DYNMCB8-STRETCH-PER (= DYNMCB8-PER)"]
    for ax in fig.axes:
        markers = [line.get_marker() for line in ax.lines]
        assert len(set(markers)) == len(markers) == 4


def test_fig1_names_the_traces_per_point_jobs_seeds_hosts_and_penalties(tmp_path: Path, drawn: dict[str, Any]) -> None:
    note = note_of(_reports(tmp_path, drawn)["fig1.png"])
    for part in ("scaled: 2 Lublin traces per load (seeds 5-6) x 2 loads (0.5, 0.8) = 4 traces", "100 jobs per trace",
                 "128 hosts", "rescheduling penalties 0, 300 s"):
        assert part in note, (part, note)
    assert "HPC2N" not in note  # (Fig. 1 draws the scaled traces only)


def test_table1_names_its_groups_traces_weeks_jobs_hosts_and_penalty(tmp_path: Path, drawn: dict[str, Any]) -> None:
    note = note_of(_reports(tmp_path, drawn)["table1_p300.png"])
    for part in ("scaled: 2 Lublin traces per load (seeds 5-6)", "HPC2N: 4 weeks (weeks 10-12, 20)",
                 "310 jobs per trace, 120 hosts", "100 jobs per trace, 128 hosts", "rescheduling penalty 300 s"):
        assert part in note, (part, note)


def test_table2_gives_n_its_settings_and_no_scientific_notation(tmp_path: Path, drawn: dict[str, Any]) -> None:
    fig = _reports(tmp_path, drawn)["table2_p300.png"]
    assert "(n = 2 traces per algorithm)" in fig._suptitle.get_text()  # the two Lublin traces at load 0.8
    note = note_of(fig)
    for part in ("scaled: 2 Lublin traces per load (seeds 5-6) x 1 load (0.8) = 2 traces", "100 jobs per trace",
                 "128 hosts", "rescheduling penalty 300 s"):
        assert part in note, (part, note)
    labels = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert labels and not [x for x in labels if "e-" in x or "e+" in x], labels
    # 4.61e-05 GB/s beside 0.59: the bandwidth panel in MB/s, 0.0461 and 590
    bandwidth = next(ax for ax in fig.axes if ax.get_title().startswith("bandwidth"))
    assert bandwidth.get_title() == "bandwidth (MB/s)"
    assert {"0.0461", "590"} <= {t.get_text() for t in bandwidth.texts}


def test_table2_puts_n_under_each_algorithm_where_they_differ(tmp_path: Path, drawn: dict[str, Any]) -> None:
    t2 = [{"algorithm": a, "n": n, "other_counting": 0,
           **{f"{f}_{k}": 0.5 for f in report.COST_FIELDS for k in ("avg", "max")}}
          for a, n in (("greedy-pmtn", 3), ("dynmcb8-per", 2))]
    assert report._plot_table2(tmp_path / "t2.png", t2, 300.0) is not None
    fig = drawn["t2.png"]
    ticks = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert ticks == ["GREEDY-PMTN\n(n=3)", "DYNMCB8-PER\n(n=2)"]


def test_value_labels_have_no_exponent() -> None:
    assert report._value_label(4.61141e-05) == "0.0000461"
    assert report._value_label(0.590036) == "0.59" and report._value_label(5120.4) == "5,120"
    assert report._value_label(math.nan) == ""
