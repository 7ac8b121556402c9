"""What ``vcemu apc``'s figures say beside their data (figures review): every figure names the seed, sizes and
control cycle that produced it; Figs. 3 and 4 give each algorithm its own marker and say which one a series
equals; Fig. 2 says that its 0.63 line is 003's value and where ours peaks; Fig. 4 says that it plots a sum and
where its parts are; Fig. 7 writes its MHz with thousands separators. Drawn from small hand-made results."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from coordinator.apc import experiment as apc
from coordinator.apc.sim import SimResult
from tests.unit.figure_capture import note_of, record_figures


def _legend_labels(ax: Any) -> list[str]:
    legend = ax.get_legend()
    assert legend is not None
    return [t.get_text() for t in legend.get_texts()]


class _Units:
    """What the experiments ask of their Units, with made-up finished simulations (by key)."""

    def __init__(self, results: dict[str, SimResult]) -> None:
        self._results = results

    def has(self, key: str) -> bool:
        return True

    def run(self, key: str, *_: Any, **__: Any) -> apc.Finished:
        return apc.Finished(self._results[key], 1.0)


def _exp2_results() -> dict[str, SimResult]:
    """EDF and EDF-REPACK meet the same goals at every inter-arrival time (EDF-REPACK drawn last hid EDF); at 200 s
    all four do. APC, FCFS and EDF make no change at 200 s either."""
    out = {}
    for iat in (50.0, 200.0):
        for algo in apc.ALGOS:
            met = {"apc": 8, "edf": 9, "fcfs": 4, "edf-repack": 9}[algo] if iat == 50.0 else 10
            jobs = [{"id": f"j{i}", "goal_factor": 1.3, "distance": 100.0 if i < met else -100.0,
                     "met": float(i < met)} for i in range(10)]
            changes = (Counter(suspend=3, resume=2, migrate=1) if algo == "edf-repack" or iat == 50.0
                       else Counter())
            out[apc._key_two(iat, algo)] = SimResult([], jobs, changes)
    return out


def test_figs3_to_5_name_their_settings_and_fig3_says_which_algorithms_coincide(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    figures = record_figures(monkeypatch, apc)
    apc.experiment_two(tmp_path, 5, 40, (50.0, 200.0), 300.0, apc.ALGOS,
                       _Units(_exp2_results()))  # type: ignore[arg-type]
    for name in ("fig3_met.png", "fig4_changes.png", "fig5_distance.png"):
        note = note_of(figures[name])
        assert "seed 5" in note and "40 completions per run" in note and "T = 300 s" in note, (name, note)
        assert "25 nodes" in note, name
    ax = figures["fig3_met.png"].axes[0]
    assert _legend_labels(ax) == ["APC", "EDF", "FCFS", "EDF-REPACK (= EDF)"]
    assert len({line.get_marker() for line in ax.get_lines()}) == 4  # each its own marker
    # and where series that differ elsewhere meet: at 200 s all four met every goal, one marker over the other
    assert "APC, EDF, FCFS and EDF-REPACK coincide at 200 s (100)" in note_of(figures["fig3_met.png"])
    assert "APC, EDF, FCFS and EDF-REPACK coincide at 50 s (6)" in note_of(figures["fig4_changes.png"])
    ax4 = figures["fig4_changes.png"].axes[0]
    assert _legend_labels(ax4) == ["APC", "EDF (= APC)", "FCFS (= APC)", "EDF-REPACK"]


def test_fig4_says_it_plots_the_sum_and_where_its_parts_are(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    figures = record_figures(monkeypatch, apc)
    apc.experiment_two(tmp_path, 0, 10, (50.0, 200.0), 600.0, apc.ALGOS, _Units(_exp2_results()))  # type: ignore[arg-type]
    fig = figures["fig4_changes.png"]
    ax = fig.axes[0]
    assert "sum" in ax.get_ylabel() + ax.get_title()
    said = ax.get_ylabel() + ax.get_title() + note_of(fig)
    header = (tmp_path / "exp2_summary.csv").read_text().splitlines()[0].split(",")
    for column in ("suspends", "resumes", "migrations"):  # the CSV's own names for the parts
        assert column in header and column in said
    assert "exp2_summary.csv" in said


def _exp1_result() -> SimResult:
    """Cycles whose average hypothetical RP is at most 0.624 with an empty queue (0.629 with jobs queued is not
    what 003's sentence is about), and a few completions."""
    cycles = [{"time": 600.0 * k, "queued": 0 if k % 2 else 3, "hyp_rp_mean": (0.624 if k == 3 else 0.62)
               if k % 2 else 0.629} for k in range(1, 12)]
    cycles.insert(0, {"time": 0.0, "queued": 0, "hyp_rp_mean": float("nan")})
    jobs = [{"id": f"j{k}", "completion": 700.0 * k, "rp": 0.6 + 0.002 * k} for k in range(1, 9)]
    return SimResult(cycles, jobs, Counter())


def test_fig2_says_the_line_is_003s_value_and_where_ours_peaks(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    figures = record_figures(monkeypatch, apc)
    summary = apc.experiment_one(tmp_path, 3, 8, 600.0,
                                 _Units({apc._key_one(): _exp1_result()}))  # type: ignore[arg-type]
    assert summary["hyp_rp_when_empty_queue"] == 0.624  # (the number itself is the summary's, unchanged)
    fig = figures["fig2_exp1.png"]
    note = note_of(fig)
    assert "seed 3" in note and "8 completions" in note and "T = 600 s" in note and "25 nodes" in note
    said = " ".join(_legend_labels(fig.axes[0])) + note
    assert "003" in said and "0.63" in said and "no job queued" in said
    assert "0.6240" in said  # ours, with an empty queue


def _exp3_cycles() -> list[dict[str, Any]]:
    rows = []
    for name, _ in apc.EXP3_CONFIGS:
        for k in range(10):
            rows.append({"config": name, "time": 600.0 * k, "web_rp": 0.66, "hyp_rp_mean": 0.63 - 0.01 * k,
                         "web_cpu_mhz": 130_000.0, "batch_cpu_mhz": 23_400.0 + 30_000.0 * k})
    return rows


def test_figs6_and_7_name_their_settings_and_fig7_separates_thousands(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    figures = record_figures(monkeypatch, apc)
    apc.plot_exp3(tmp_path, _exp3_cycles(), seed=4, T=600.0, horizon=20_000.0, jobs=31)
    for name in ("fig6_rp.png", "fig7_cpu.png"):
        note = note_of(figures[name])
        assert "seed 4" in note and "31 long-running jobs" in note and "T = 600 s" in note, (name, note)
        assert "horizon 20,000 s" in note and "25 nodes" in note
    ax = figures["fig7_cpu.png"].axes[0]
    ticks = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
    assert "MHz" in ax.get_ylabel()
    assert any("," in t for t in ticks) and not any(t.replace("\N{MINUS SIGN}", "").isdigit() and len(t) > 3
                                                     for t in ticks), ticks


class _Exp3Units:
    """Experiment Three's three simulations, each the hand-made cycles of its configuration."""

    def run(self, key: str, *_: Any, **__: Any) -> apc.Finished:
        name = key.split(" ", 1)[1]
        cycles = [{k: v for k, v in c.items() if k != "config"} for c in _exp3_cycles() if c["config"] == name]
        return apc.Finished(SimResult(cycles, [], Counter()), 1.0)


def test_experiment_three_passes_its_settings_to_its_figures(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    figures = record_figures(monkeypatch, apc)
    apc.experiment_three(tmp_path, 2, 300.0, 5000.0, _Exp3Units())  # type: ignore[arg-type]
    note = note_of(figures["fig7_cpu.png"])
    assert "seed 2" in note and "T = 300 s" in note and "horizon 5,000 s" in note and "long-running jobs" in note
