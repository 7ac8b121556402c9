"""``vcemu vcsched``'s figures (figures review): coinciding series told apart, the settings on every figure, the
run-time note naming what runs compiled and what in Python, the yields' note on the instances behind each mean, and
plain numbers on the run-time axis. Built from hand-made rows: no solver runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import coordinator.vcsched.experiment as experiment
from tests.unit.figure_capture import note_of

CVS = (0.25, 0.75)


def _rows() -> list[dict[str, Any]]:
    """A small set: 6 and 8 tasks, slacks 0.3 and 0.6, every CV pair, 2 instances each (32 instances). MCB3 and
    MCB4 give MCB2's yields, SGB gives SG's; RRNZ runs on the 6-task instances only; the LP bound is above all."""
    rows = []
    yields = {"MCB2": 0.70, "MCB3": 0.70, "MCB4": 0.70, "MCB8": 0.80, "GR": 0.60, "SG": 0.65, "SGB": 0.65,
              "RRNZ": 0.50, "MILP": 0.85, "LP": 0.90}
    seconds = {"MCB2": 0.0003, "MCB3": 0.00031, "MCB4": 0.00032, "MCB8": 0.0001, "GR": 0.00006, "SG": 0.00006,
               "SGB": 0.00005, "RRNZ": 0.002, "MILP": 0.05, "LP": 0.0}
    for tasks in (6, 8):
        for slack in (0.3, 0.6):
            for cvm in CVS:
                for cvc in CVS:
                    for k in range(2):
                        for algo, y in yields.items():
                            if algo == "RRNZ" and tasks > 6:
                                continue
                            rows.append({
                                "set": "small", "hosts": 4, "tasks": tasks, "slack": slack, "cv_mem": cvm,
                                "cv_cpu": cvc, "instance": k, "algorithm": algo, "failed": 0,
                                "min_yield": f"{y + slack / 10:.6f}",
                                # (the LP's average yield is its minimum yield: experiment.run_instance)
                                "avg_yield": f"{y + slack / 10:.6f}" if algo == "LP" else f"{y + 0.1:.6f}",
                                "seconds": f"{seconds[algo] * tasks / 6:.6f}", "status": "", "session": 1})
    return rows


@pytest.fixture
def figures(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, Any]:
    """The figures ``_plots`` draws, by file name (not written: kept for the test to read)."""
    drawn: dict[str, Any] = {}

    def save(fig: Any, path: Path, **_kw: Any) -> Path:
        drawn[path.name] = fig
        return path

    monkeypatch.setattr(experiment, "save_figure", save)
    experiment._plots(_rows(), tmp_path, "small", False, 7)
    return drawn


def _legend(fig: Any) -> list[str]:
    (ax,) = fig.axes
    return [t.get_text() for t in ax.get_legend().get_texts()]


def test_every_figure_is_drawn(figures: dict[str, Any]) -> None:
    assert set(figures) == {f"{g}_{k}.png" for g in ("mcb", "all")
                            for k in ("min_yield", "avg_yield", "failure_rate", "runtime")}


def test_coinciding_series_say_which_they_equal_and_keep_their_suffix(figures: dict[str, Any]) -> None:
    """MCB2 and MCB3 lay under MCB4, SG under SGB: the legend now says which line equals (and hides) which."""
    assert _legend(figures["mcb_min_yield.png"]) == ["MCB2", "MCB3 (= MCB2)", "MCB4 (= MCB2)", "MCB8"]
    labels = _legend(figures["all_min_yield.png"])
    assert "SGB (= SG)" in labels and "SG" in labels
    assert "RRNZ (6 tasks only)" in labels  # (the suffix of an algorithm run on some instances only, kept)
    # every algorithm fails on none: the failure-rate lines all coincide with the first one's
    assert _legend(figures["all_failure_rate.png"])[1:] == [
        f"{a} (= MCB8)" + (" (6 tasks only)" if a == "RRNZ" else "")
        for a in ("GR", "SG", "SGB", "RRNZ", "MILP", "LP")]


def test_each_series_has_its_own_marker_and_the_bounds_stay_dashed(figures: dict[str, Any]) -> None:
    for name, fig in figures.items():
        (ax,) = fig.axes
        markers = [line.get_marker() for line in ax.lines]
        assert len(set(markers)) == len(markers), (name, markers)
        styles = {line.get_label().split()[0]: line.get_linestyle() for line in ax.lines}
        assert all(s == ("--" if a in ("LP", "MILP") else "-") for a, s in styles.items()), (name, styles)
    # an algorithm keeps its marker in every figure of its group
    def by_algo(name: str) -> dict[str, str]:
        return {line.get_label().split()[0]: line.get_marker() for line in figures[name].axes[0].lines}
    assert by_algo("all_min_yield.png")["SG"] == by_algo("all_runtime.png")["SG"]


def test_every_figure_names_its_settings(figures: dict[str, Any]) -> None:
    for name, fig in figures.items():
        note = note_of(fig)
        for part in ("small set: 4 hosts, 6/8 tasks", "memory slack 0.3, 0.6", "CV memory and CPU 0.25, 0.75 each",
                     "2 instances per specification x 16 specifications", "= 32 instances", "seed 7"):
            assert part in note, (name, part, note)


def test_the_yield_figures_say_over_which_instances_each_mean_is(figures: dict[str, Any]) -> None:
    for name in ("all_min_yield.png", "all_avg_yield.png"):
        assert "Each algorithm's mean over the instances it solved; LP: over the instances whose LP is feasible" in (
            note_of(figures[name]))
    for name in ("mcb_min_yield.png", "mcb_avg_yield.png"):  # (no LP line in these)
        note = note_of(figures[name])
        assert "Each algorithm's mean over the instances it solved" in note and "LP:" not in note


def test_the_runtime_notes_say_what_runs_compiled_and_what_in_python(figures: dict[str, Any]) -> None:
    """MCB8 came out faster than GR/SG: its numba kernel against plain Python, the reverse of seed 002 Sec. 4."""
    note = " ".join(note_of(figures["all_runtime.png"]).split("\n"))
    assert "Plain Python: GR/SG/SGB" in note and "Compiled: MCB8 (numba), MILP" in note
    assert "RRNZ: LP relaxation (HiGHS) + rounding in Python" in note
    assert "compare implementations, not algorithms" in note and "15-20 ms" in note
    note = " ".join(note_of(figures["mcb_runtime.png"]).split("\n"))
    assert "Compiled: MCB8 (numba)" in note and "Plain Python: MCB2-MCB4" in note
    assert "compare implementations, not algorithms" in note


def test_the_runtime_axis_shows_plain_numbers(figures: dict[str, Any]) -> None:
    """mcb_runtime.png's axis, under a decade, read 2x10^-1, 3x10^-1 (its minor ticks' labels)."""
    (ax,) = figures["mcb_runtime.png"].axes
    assert ax.get_yscale() == "log"
    major, minor = ax.yaxis.get_major_formatter(), ax.yaxis.get_minor_formatter()
    assert major(0.1, 0) == "0.1" and major(10.0, 0) == "10"
    assert minor(0.2, 0) == "0.2" and minor(0.3, 0) == "0.3"
    (ax,) = figures["all_runtime.png"].axes  # three decades and more: no minor labels to crowd the axis
    assert ax.yaxis.get_minor_formatter()(0.2, 0) == ""
    assert ax.yaxis.get_major_formatter()(100.0, 0) == "100"


def test_a_replot_passes_the_stored_seed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """``--replot`` draws from results.csv, and names config.json's seed on the figures."""
    import json

    out = tmp_path / "run"
    (out / "small").mkdir(parents=True)
    experiment._write_csv(out / "small" / "results.csv", _rows())
    (out / "config.json").write_text(json.dumps({"seed": 11, "complete": True, "parallel_jobs": False}))
    notes: list[str] = []
    monkeypatch.setattr(experiment, "save_figure", lambda fig, path, **_k: notes.append(note_of(fig)) or path)
    assert experiment._replot(out) == 0
    assert len(notes) == 8 and all("seed 11" in " ".join(n.split()) for n in notes)  # (lines wrapped)


def test_the_notes_name_the_flags_given_that_change_results(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Code review: a run with --backtrack-limit-large 1000 (or --search fast) drew figures that did not say so."""
    import json

    out = tmp_path / "run"
    (out / "small").mkdir(parents=True)
    experiment._write_csv(out / "small" / "results.csv", _rows())
    conf = {"seed": 3, "complete": True, "parallel_jobs": False, "search": "fast", "milp_time_limit": 5.0,
            "backtrack_limit": 500000, "large_instances": None}
    (out / "config.json").write_text(json.dumps(conf))
    assert experiment.flags_given(conf, "small") == ["--search fast", "--milp-time-limit 5"]
    both = {**conf, "backtrack_limit_large": 1000, "large_instances": 2}  # (the large set's, on its figures only)
    assert experiment.flags_given(both, "small") == ["--search fast", "--milp-time-limit 5"]
    assert experiment.flags_given(both, "large") == ["--search fast", "--backtrack-limit-large 1000",
                                                     "--milp-time-limit 5"]
    notes: list[str] = []
    monkeypatch.setattr(experiment, "save_figure", lambda fig, path, **_k: notes.append(note_of(fig)) or path)
    assert experiment._replot(out) == 0
    assert len(notes) == 8
    assert all("other flags given: --search fast --milp-time-limit 5" in " ".join(n.split()) for n in notes)


def test_a_run_without_mcb_draws_no_mcb_figures(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Code review: --algorithms GR,SG drew the four mcb_*.png figures empty."""
    drawn: list[str] = []
    monkeypatch.setattr(experiment, "save_figure", lambda fig, path, **_k: drawn.append(path.name) or path)
    experiment._plots([r for r in _rows() if not r["algorithm"].startswith("MCB")], tmp_path, "small", False, 7)
    assert drawn and not any(name.startswith("mcb_") for name in drawn), drawn
