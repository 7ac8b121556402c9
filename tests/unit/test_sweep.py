"""``vcemu sweep``: one cell, the per-cell guard, 001's aggregation (Table I, Fig. 1, Table II), config errors."""

from __future__ import annotations

import csv
import math
import time
import warnings

import pytest

from coordinator.metrics import MOVE_COUNTING
from coordinator.model import JobSpec
from coordinator.sweep import _parse_args, config_from_args, run_cell
from coordinator.sweep_report import fig1, table1, table2, with_degradation

# Two jobs on one host: b (need 1.0, 60% memory) cannot share with a (60% memory) and waits.
JOBS = [JobSpec("a", 0.0, 1, 1.0, 0.6, 100.0), JobSpec("b", 10.0, 1, 1.0, 0.6, 50.0)]


def test_a_cell_is_scored_with_the_trace_metrics():
    r = run_cell(JOBS, "fcfs", 0.0, 1)
    assert r["status"] == "ok" and r["completed"] == 2
    assert r["max_stretch"] == pytest.approx((150 - 10) / 50)  # b waits 90 s, runs 50 s
    assert r["preemptions"] == r["migrations"] == 0
    assert r["utilisation"] == pytest.approx(150 / 150)  # the host is never idle from 0 to 150
    assert r["decisions"] >= 2


def test_a_cell_records_the_max_stretch_under_both_readings_of_the_30_s_bound():
    """A 5 s job run at once: stretch 1 with the run time bounded too ([31]), 30 / 5 = 6 with the turn-around time
    alone bounded (001's words read literally); b's 140 / 50 = 2.8 is the same under both."""
    r = run_cell([*JOBS, JobSpec("c", 200.0, 1, 1.0, 0.6, 5.0)], "fcfs", 0.0, 1)
    assert r["max_stretch"] == pytest.approx(2.8) and r["max_literal_stretch"] == pytest.approx(6.0)


def test_a_cells_time_starts_after_the_workers_warm_up(monkeypatch):
    """A worker's first cell took the policies' imports and kernel loads into its time (0.17 s for a 0.014 s FCFS
    cell) and timed out under a limit the others kept (reproducibility review): the warm-up runs first."""
    import coordinator.warmup

    calls = []
    monkeypatch.setattr(coordinator.warmup, "warm_kernels", lambda: calls.append(time.sleep(1.0)) or 1.0)
    r = run_cell(JOBS, "fcfs", 0.0, 1, timeout_s=1.0)
    assert calls and r["status"] == "ok" and r["wall_s"] < 1.0


def test_the_per_cell_guard_turns_a_slow_cell_into_a_timeout():
    r = run_cell(JOBS, "dynmcb8-asap-per", 300.0, 1, timeout_s=0.0)
    assert r["status"] == "timeout" and math.isnan(r["max_stretch"]) and "exceeded" in r["error"]


def _row(trace, group, load, alg, ms, **kw):
    base = {"trace": trace, "group": group, "load": load, "algorithm": alg, "penalty": 300.0, "max_stretch": ms,
            "status": "ok" if not math.isnan(ms) else "timeout", "counting": MOVE_COUNTING}
    return {**base, **{f: 0.0 for f in ("pmtn_gb_s", "mig_gb_s", "pmtn_per_hour", "mig_per_hour",
                                          "pmtn_per_job", "mig_per_job")}, **kw}


def test_aggregation_follows_001_section_v():
    rows = with_degradation([
        _row("t1", "scaled", 0.7, "easy", 40.0), _row("t1", "scaled", 0.7, "greedy-pmtn", 4.0, pmtn_per_hour=10.0),
        _row("t2", "scaled", 0.7, "easy", 9.0), _row("t2", "scaled", 0.7, "greedy-pmtn", 3.0, pmtn_per_hour=30.0),
        _row("t3", "scaled", 0.1, "easy", 2.0), _row("t3", "scaled", 0.1, "greedy-pmtn", math.nan),
        _row("w1", "hpc2n", 0.5, "easy", 5.0), _row("w1", "hpc2n", 0.5, "greedy-pmtn", 5.0),
    ])
    deg = {(r["trace"], r["algorithm"]): r["degradation"] for r in rows}
    assert deg[("t1", "easy")] == 10.0 and deg[("t1", "greedy-pmtn")] == 1.0 and deg[("t2", "easy")] == 3.0
    # t3's greedy-pmtn cell timed out: the best on t3 is unknown, so neither cell there has a factor
    assert math.isnan(deg[("t3", "easy")]) and math.isnan(deg[("t3", "greedy-pmtn")])
    assert [r["left_out"] for r in rows if r["trace"] == "t3"] == [True, False]  # easy's ok cell; the timeout
    t1 = {r["algorithm"]: r for r in table1(rows, ["easy", "greedy-pmtn"], 300.0)}
    assert t1["easy"]["scaled_avg"] == 6.5 and t1["easy"]["scaled_max"] == 10.0
    assert t1["easy"]["scaled_std"] == pytest.approx(3.5)  # population std of 10 and 3
    assert (t1["easy"]["scaled_n"], t1["easy"]["scaled_failed"], t1["easy"]["scaled_left_out"]) == (3, 0, 1)
    assert t1["greedy-pmtn"]["scaled_avg"] == 1.0 and t1["greedy-pmtn"]["scaled_failed"] == 1
    assert t1["greedy-pmtn"]["scaled_left_out"] == 0
    assert t1["easy"]["hpc2n_avg"] == 1.0 and t1["easy"]["hpc2n_n"] == 1
    f = {d["load"]: d for d in fig1(rows, ["easy", "greedy-pmtn"], 300.0, [0.1, 0.7])}
    assert f[0.7]["easy"] == 6.5 and math.isnan(f[0.1]["easy"]) and math.isnan(f[0.1]["greedy-pmtn"])
    t2 = table2(rows, ["easy", "greedy-pmtn"], 300.0)
    assert [r["algorithm"] for r in t2] == ["greedy-pmtn"]  # batch algorithms neither preempt nor migrate
    assert t2[0]["n"] == 2 and t2[0]["pmtn_per_hour_avg"] == 20.0 and t2[0]["pmtn_per_hour_max"] == 30.0
    # a cell stored by an older vcemu, which counted moves another way, is left out of Table II and counted
    old = {**_row("t4", "scaled", 0.8, "greedy-pmtn", 2.0, pmtn_per_hour=99.0), "counting": None}
    (t2,) = table2([*rows, old], ["greedy-pmtn"], 300.0)
    assert (t2["n"], t2["other_counting"], t2["pmtn_per_hour_max"]) == (2, 1, 30.0)


@pytest.mark.parametrize(("argv", "message"), [
    (["--algorithms", "fcfs,nope"], "--algorithms: unknown policy 'nope'"),
    (["--loads", "0.5,x"], "--loads"),
    (["--penalties", "-1"], "--penalties"),
    (["--hpc2n-weeks", "a-b"], "--hpc2n-weeks"),
    (["--job-scale", "0"], "--job-scale"),
    (["--hosts", "8"], r"--hosts: nodes: .* nodes must be >= 10"),
])
def test_bad_settings_are_refused_by_name(argv, message):
    with pytest.raises(SystemExit, match=message):
        config_from_args(_parse_args(argv))


def test_table1_beside_the_paper_ranks_both_columns():
    from coordinator.sweep_report import PAPER_TABLE1_P300, table1_vs_paper

    t1 = []
    for alg, avg in (("fcfs", 200.0), ("greedy-pmtn", 1.5), ("dynmcb8-asap-per", 2.0)):
        row = {"algorithm": alg}
        for g in ("scaled", "unscaled", "hpc2n"):
            row.update({f"{g}_n": 1 if g == "scaled" else 0, f"{g}_avg": avg if g == "scaled" else float("nan"),
                        f"{g}_max": 2 * avg if g == "scaled" else float("nan")})
        t1.append(row)
    out = {r["algorithm"]: r for r in table1_vs_paper(t1)}
    assert out["fcfs"]["scaled_paper_avg"] == PAPER_TABLE1_P300["fcfs"]["scaled"][0] == 435.32
    assert [out[a]["scaled_avg_rank"] for a in ("greedy-pmtn", "dynmcb8-asap-per", "fcfs")] == [1, 2, 3]
    # the paper: ASAP-PER 2.62 < GREEDY-PMTN 9.45 < FCFS 435.32
    assert [out[a]["scaled_paper_avg_rank"] for a in ("dynmcb8-asap-per", "greedy-pmtn", "fcfs")] == [1, 2, 3]
    assert "unscaled_avg_rank" not in out["fcfs"]  # no traces in the group: no rank


# ---- reports of sweeps whose cells failed, or that lack a group ------------------------------------------------


def _report(rows, tmp_path, loads=(0.7,), traces=1):
    from coordinator.sweep_report import write_reports

    cfg = {"algorithms": sorted({r["algorithm"] for r in rows}), "penalties": [300.0], "traces": traces,
           "loads": list(loads)}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        paths = write_reports(rows, cfg, tmp_path)
    return {p.name for p in paths}, [str(w.message) for w in caught]


def test_reports_of_a_sweep_whose_cells_all_failed_are_written_without_plots(tmp_path, capsys):
    """Every cell timed out (--cell-timeout 0.001): the tables are written, the log-scaled plots are not drawn
    (matplotlib refuses an axis with no positive value), each said in one line; no matplotlib warning."""
    rows = [_row("t1", "scaled", 0.7, a, math.nan) for a in ("fcfs", "greedy-pmtn")]
    names, caught = _report(rows, tmp_path)
    assert {"cells.csv", "degradation.csv", "table1_p300.csv", "table1_vs_paper_p300.csv", "fig1_p300.csv"} <= names
    assert not names & {"table1_p300.png", "fig1.png", "table2_p300.png", "table2_p300.csv"}
    err = capsys.readouterr().err
    assert "vcemu sweep: table1_p300.png not drawn: no cell of penalty 300 has a max stretch" in err
    assert "vcemu sweep: fig1.png not drawn: no scaled trace's cell has a max stretch" in err
    assert not caught, caught
    with (tmp_path / "table1_p300.csv").open() as fh:
        assert [r["scaled_failed"] for r in csv.DictReader(fh)] == ["1", "1"]


def test_a_group_without_values_gets_no_panel(tmp_path, capsys):
    """The HPC2N cells all failed, the scaled ones did not: Table I's plot shows the scaled traces alone."""
    rows = [_row("t1", "scaled", 0.7, "fcfs", 4.0), _row("t1", "scaled", 0.7, "greedy-pmtn", 2.0),
            _row("w1", "hpc2n", 0.5, "fcfs", math.nan), _row("w1", "hpc2n", 0.5, "greedy-pmtn", math.nan)]
    names, caught = _report(rows, tmp_path)
    assert {"table1_p300.png", "fig1.png", "table2_p300.png"} <= names and not caught
    assert "not drawn" not in capsys.readouterr().err


def test_a_plot_that_fails_is_said_and_the_other_reports_are_written(tmp_path, capsys, monkeypatch):
    import coordinator.sweep_report as report

    def broken(path, *args):
        raise RuntimeError("a bug in the plot")

    monkeypatch.setattr(report, "_plot_table1", broken)
    rows = [_row("t1", "scaled", 0.7, "fcfs", 4.0), _row("t1", "scaled", 0.7, "greedy-pmtn", 2.0)]
    names, _ = _report(rows, tmp_path)
    assert "vcemu sweep: warning: table1_p300.png not drawn: RuntimeError: a bug in the plot" in capsys.readouterr().err
    assert {"table1_p300.csv", "table1_vs_paper_p300.csv", "table2_p300.png", "fig1.png"} <= names


def test_table1_vs_paper_keeps_its_rank_columns_when_the_first_algorithm_has_no_average(tmp_path):
    # (fcfs timed out on t1 and t2, so that it has no average; greedy-pmtn has one as that of an older vcemu's
    # reports, whose factors counted the cells that finished: the columns must not depend on which has one)
    from coordinator.sweep_report import TABLE1_VS_PAPER_FIELDS, _write_csv, table1, table1_vs_paper

    rows = [{**_row(t, "scaled", 0.7, a, ms), "degradation": d} for t in ("t1", "t2")
            for a, ms, d in (("fcfs", math.nan, math.nan), ("greedy-pmtn", 2.0, 1.0))]
    _write_csv(tmp_path / "table1_vs_paper_p300.csv", table1_vs_paper(table1(rows, ["fcfs", "greedy-pmtn"], 300.0)),
               TABLE1_VS_PAPER_FIELDS)
    with (tmp_path / "table1_vs_paper_p300.csv").open() as fh:
        reader = csv.DictReader(fh)
        got = {r["algorithm"]: r for r in reader}
    assert "scaled_avg_rank" in reader.fieldnames and "hpc2n_paper_avg_rank" in reader.fieldnames
    assert got["greedy-pmtn"]["scaled_avg_rank"] == "1" and got["fcfs"]["scaled_avg_rank"] == ""
    assert got["fcfs"]["scaled_paper_avg_rank"] == "2"  # the paper: GREEDY-PMTN 9.45 < FCFS 435.32


def test_table2_is_left_out_when_no_scaled_trace_has_load_07(tmp_path, capsys):
    rows = [_row("t1", "scaled", 0.5, "fcfs", 4.0), _row("t1", "scaled", 0.5, "greedy-pmtn", 2.0)]
    names, _ = _report(rows, tmp_path, loads=(0.5,))
    assert not names & {"table2_p300.csv", "table2_p300.png"} and "table1_p300.png" in names
    assert ("vcemu sweep: no table2_p300: no ok cell of a preempting algorithm on a scaled trace of load >= 0.7"
            in capsys.readouterr().err)


def test_a_failed_cell_with_a_max_stretch_over_its_completed_jobs_is_no_result():
    """run_cell used to store a cell whose jobs did not all complete as ``error`` with the max stretch of those
    that did: it was then the "best" of its trace and averaged into Table I."""
    rows = with_degradation([_row("t1", "scaled", 0.7, "fcfs", 10.0),
                             _row("t1", "scaled", 0.7, "easy", 2.0, status="error")])
    deg = {r["algorithm"]: r["degradation"] for r in rows}
    assert math.isnan(deg["fcfs"]) and math.isnan(deg["easy"])
    t1 = {r["algorithm"]: r for r in table1(rows, ["fcfs", "easy"], 300.0)}
    assert math.isnan(t1["easy"]["scaled_avg"]) and t1["easy"]["scaled_failed"] == 1
    assert math.isnan(t1["fcfs"]["scaled_avg"]) and t1["fcfs"]["scaled_left_out"] == 1


def test_a_missing_cell_changes_no_other_algorithms_factor():
    """Code review: a cell absent from the reports (lost by Ray, not yet run with --report-only, stored by other
    code) made the best of the others "best": EASY 1.0 where it is 2.5 with DYNMCB8's cell there."""
    algs = ["fcfs", "easy", "dynmcb8"]
    rows = [_row("t1", "scaled", 0.9, "fcfs", 10.0), _row("t1", "scaled", 0.9, "easy", 5.0),
            _row("t1", "scaled", 0.9, "dynmcb8", 2.0)]
    assert {r["algorithm"]: r["degradation"] for r in with_degradation(rows, algs)}["easy"] == 2.5
    part = with_degradation(rows[:2], algs)
    assert all(math.isnan(r["degradation"]) and r["left_out"] for r in part)
    from coordinator.sweep_report import incomplete_instances

    assert incomplete_instances(rows[:2], algs) == {("t1", 300.0)} and incomplete_instances(rows, algs) == set()


def test_a_timed_out_cell_changes_no_other_algorithms_factor():
    """Reproducibility review: with one algorithm's cell timed out (a wall-clock limit, so it varies from run to
    run), the best of the others set their factors: EASY was "best" at 1.0 where it was 151 with every cell done,
    and FCFS 3.43 where it was 518. Such a trace is now left out of every algorithm's factors, so the tables
    do not change with which cell happened to time out."""
    done = [_row("t1", "scaled", 0.9, "fcfs", 518.0), _row("t1", "scaled", 0.9, "easy", 151.0),
            _row("t1", "scaled", 0.9, "dynmcb8", 1.0), _row("t2", "scaled", 0.9, "fcfs", 4.0),
            _row("t2", "scaled", 0.9, "easy", 2.0), _row("t2", "scaled", 0.9, "dynmcb8", 1.0)]
    dynmcb8_timed_out = [r if (r["trace"], r["algorithm"]) != ("t1", "dynmcb8") else
                         _row("t1", "scaled", 0.9, "dynmcb8", math.nan) for r in done]
    algs = ["fcfs", "easy", "dynmcb8"]
    full = {r["algorithm"]: r for r in table1(with_degradation(done), algs, 300.0)}
    part = {r["algorithm"]: r for r in table1(with_degradation(dynmcb8_timed_out), algs, 300.0)}
    assert full["easy"]["scaled_avg"] == pytest.approx((151 + 2) / 2)
    # on t2 alone: the same factors as t2 gives in the full sweep, whatever timed out on t1
    assert [part[a]["scaled_avg"] for a in algs] == [4.0, 2.0, 1.0]
    assert [part[a]["scaled_left_out"] for a in algs] == [1, 1, 0] and part["dynmcb8"]["scaled_failed"] == 1


def test_a_cell_whose_jobs_did_not_all_complete_stores_no_max_stretch(monkeypatch):
    import dataclasses

    import coordinator.metrics as metrics

    real = metrics.summarize
    monkeypatch.setattr(metrics, "summarize", lambda results: dataclasses.replace(real(results), completed=1))
    r = run_cell(JOBS, "fcfs", 0.0, 1)
    assert r["status"] == "error" and r["error"] == "1 jobs did not complete"
    assert math.isnan(r["max_stretch"]) and math.isnan(r["mean_stretch"]) and math.isnan(r["max_plain_stretch"])
    assert r["completed_max_stretch"] == pytest.approx((150 - 10) / 50)  # kept apart, for a look


# ---- settings refused before any work, each flag on its own line with its value (new-user review) ---------------


@pytest.mark.parametrize(("argv", "line"), [
    # numpy's "expected non-negative integer", which named no flag
    (["--traces", "1", "--jobs", "5", "--seed", "-1"], "vcemu sweep: --seed: must be >= 0, got -1"),
    # NaN passed `cell_timeout <= 0` and went into config.json as NaN (not strict JSON); -3 GB nodes were taken
    (["--cell-timeout", "nan"], "vcemu sweep: --cell-timeout: must be a finite number of seconds > 0, got nan"),
    (["--cell-timeout", "inf"], "vcemu sweep: --cell-timeout: must be a finite number of seconds > 0, got inf"),
    (["--host-memory-gb", "-3"], "vcemu sweep: --host-memory-gb: must be a finite number > 0, got -3.0"),
    (["--host-memory-gb", "nan"], "vcemu sweep: --host-memory-gb: must be a finite number > 0, got nan"),
    (["--penalties", "0,nan"],
     "vcemu sweep: --penalties: every penalty must be a finite number >= 0 (seconds) and at most 1e+09 (a job's "
     "longest work), got nan"),
    # a preempted job's blocked_until overflowed to inf at 1e308: the cell never ended (input review)
    (["--penalties", "0,1e308"],
     "vcemu sweep: --penalties: every penalty must be a finite number >= 0 (seconds) and at most 1e+09 (a job's "
     "longest work), got 1e+308"),
    (["--loads", "0.5,inf"], "vcemu sweep: --loads: every load must be a finite number > 0, got inf"),
    # one flag per line, with its value: was "--jobs >= 2, --hosts >= 1, --workers >= 1, --cell-timeout > 0 required"
    (["--jobs", "1"], "vcemu sweep: --jobs: must be >= 2, got 1"),
    (["--hosts", "0"], "vcemu sweep: --hosts: must be >= 1, got 0"),
    (["--workers", "0"], "vcemu sweep: --workers: must be >= 1, got 0"),
    (["--cell-timeout", "0"], "vcemu sweep: --cell-timeout: must be a finite number of seconds > 0, got 0.0"),
    # an empty grid: "0 cells ... in 0.0 s", a table of nan, exit status 0
    (["--traces", "0"], "vcemu sweep: no trace to run: --traces 0, --unscaled 0 and --hpc2n-weeks '' give none"),
    (["--loads", ","], "vcemu sweep: no trace to run: --loads ',' (no load), --unscaled 0 and --hpc2n-weeks ''"),
    (["--algorithms", ","], "vcemu sweep: --algorithms: no algorithm in ','; nothing to run"),
    (["--penalties", ""], "vcemu sweep: --penalties: no penalty in ''; nothing to run"),
])
def test_bad_settings_are_refused_one_flag_per_line_before_anything_is_made(tmp_path, capsys, monkeypatch, argv,
                                                                           line):
    import coordinator.sweep as sweep
    from coordinator.sweep import sweep_main

    def ran(*_a, **_k):
        raise AssertionError("the sweep went past its settings checks")

    monkeypatch.setattr(sweep, "build_traces", ran)  # no trace built, no Ray started for settings to refuse
    monkeypatch.setattr(sweep, "ray_init", ran)
    out = tmp_path / "out"
    assert sweep_main(["--out", str(out), "--hpc2n-weeks", "", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(line) and len(err.strip().splitlines()) == 1, err
    assert not out.exists()  # refused before the folder, config.json or Ray


def test_an_empty_grid_is_refused_only_when_nothing_names_a_trace():
    from coordinator.sweep import _parse_args, config_from_args

    assert config_from_args(_parse_args(["--traces", "0", "--unscaled", "1", "--hpc2n-weeks", ""]))["unscaled"] == 1
    assert config_from_args(_parse_args(["--traces", "0", "--hpc2n-weeks", "3"]))["hpc2n_weeks"] == [3]
    # --report-only takes the stored sweep's settings: its own flags need name no trace
    assert config_from_args(_parse_args(["--traces", "0", "--report-only"]))["traces"] == 0


def test_tied_averages_share_a_rank():
    """HPC2N weeks where six algorithms all had degradation 1.0 were ranked 1 to 6 in table1_vs_paper_p300.csv, by
    the order of the rows: ties now share the best of their ranks ("1224"), in our columns and the paper's."""
    from coordinator.sweep_report import table1_vs_paper

    avgs = {"fcfs": 1.0, "easy": 1.0, "greedy": 1.0 + 1e-12, "greedy-pmtn": 1.5, "dynmcb8": float("nan"),
            "dynmcb8-asap-per": 3.0}
    t1 = [{"algorithm": a, **{f"{g}_{k}": v if g == "hpc2n" else float("nan") for g in ("scaled", "unscaled", "hpc2n")
                              for k in ("avg", "max")},
           **{f"{g}_n": 1 for g in ("scaled", "unscaled", "hpc2n")}} for a, v in avgs.items()]
    out = {r["algorithm"]: r for r in table1_vs_paper(t1)}
    # 1 + 1e-12 prints as 1 in the CSV: tied with the 1.0s, not ranked below them
    assert {a: out[a].get("hpc2n_avg_rank") for a in avgs} == {
        "fcfs": 1, "easy": 1, "greedy": 1, "greedy-pmtn": 4, "dynmcb8": None, "dynmcb8-asap-per": 5}
    # the paper's unscaled column has a tie too: GREEDY-PMTN and DYNMCB8-ASAP-PER both 3.28
    assert out["greedy-pmtn"]["unscaled_paper_avg_rank"] == out["dynmcb8-asap-per"]["unscaled_paper_avg_rank"] == 1
    from coordinator.sweep_report import competition_ranks

    assert competition_ranks({"a": 2.0, "b": 1.0, "c": 2.0, "d": 3.0}) == {"a": 2, "b": 1, "c": 2, "d": 4}


def _drawn(monkeypatch: pytest.MonkeyPatch) -> list:
    """The figures the report functions save (not written: kept open for the test to read)."""
    import coordinator.sweep_report as report

    figures: list = []
    monkeypatch.setattr(report, "save_figure", lambda fig, path, **_k: figures.append(fig))
    monkeypatch.setattr(report._pyplot(), "close", lambda *_a: None)  # (pyplot: kept open, read by the test)
    return figures


def test_table1_bars_rise_from_1_carry_their_values_and_count_traces_in_words(monkeypatch, tmp_path) -> None:
    """User review: the log axis began at about 1.1 on an HPC2N-only sweep, so a factor of 1.4 drew almost no
    bar and no 10^0 tick; the title said "n=1 traces"."""
    from pathlib import Path

    from coordinator.sweep_report import _plot_table1

    figures = _drawn(monkeypatch)
    row = {"algorithm": "fcfs", **{f"{g}_{k}": math.nan for g in ("scaled", "unscaled") for k in ("avg", "max")},
           **{f"{g}_n": 0 for g in ("scaled", "unscaled")}, "hpc2n_avg": 88.6, "hpc2n_max": 88.6, "hpc2n_n": 1}
    rows = [row, {**row, "algorithm": "greedy-pmtn", "hpc2n_avg": 1.4, "hpc2n_max": 1.4}]
    assert _plot_table1(Path(tmp_path / "t1.png"), rows, 300.0) is not None
    (ax,) = [a for a in figures[0].axes if a.get_title()]
    assert ax.get_title().endswith("(1 trace)")
    assert ax.get_ylim()[0] == 1.0
    assert [t.get_text() for t in ax.texts] == ["88.6", "1.4"]
    figures.clear()
    assert _plot_table1(Path(tmp_path / "t1.png"), [{**row, "hpc2n_avg": 5120.4}], 300.0) is not None
    assert [t.get_text() for a in figures[0].axes for t in a.texts] == ["5,120"]  # (it read "5.12e+03")
    # The average's label stands above the maximum's marker, not on the bar's top where the marker struck it
    # through (helper review), and the axis leaves it room.
    figures.clear()
    assert _plot_table1(Path(tmp_path / "t1.png"), [{**row, "hpc2n_avg": 3.0, "hpc2n_max": 3.2, "hpc2n_n": 2}],
                        300.0) is not None
    (ax,) = [a for a in figures[0].axes if a.get_title()]
    (label,) = ax.texts
    assert label.get_text() == "3" and label.xy == (0, 3.2) and ax.get_ylim()[1] > 3.2


def test_table1_under_001_s_literal_words_is_written_beside_the_reading_the_policies_use(tmp_path, capsys):
    """``max_literal_stretch`` (only the turn-around time bounded, fidelity review) gives its own Table I files,
    degradation factors against the best under that reading; cells of an older vcemu, without it, give none."""
    rows = [_row("w1", "hpc2n", 0.5, "easy", 10.0, max_literal_stretch=300.0),
            _row("w1", "hpc2n", 0.5, "greedy-pmtn", 2.0, max_literal_stretch=30.0),
            _row("w2", "hpc2n", 0.5, "easy", 4.0, max_literal_stretch=60.0),
            _row("w2", "hpc2n", 0.5, "greedy-pmtn", 4.0, max_literal_stretch=120.0)]
    names, _ = _report(rows, tmp_path, traces=0)
    assert {"table1_literal_p300.csv", "table1_literal_vs_paper_p300.csv"} <= names
    with (tmp_path / "table1_literal_p300.csv").open() as fh:
        lit = {r["algorithm"]: r for r in csv.DictReader(fh)}
    with (tmp_path / "table1_p300.csv").open() as fh:
        ours = {r["algorithm"]: r for r in csv.DictReader(fh)}
    assert (float(lit["easy"]["hpc2n_avg"]), float(lit["greedy-pmtn"]["hpc2n_avg"])) == (5.5, 1.5)  # (10+1)/2, (1+2)/2
    assert (float(ours["easy"]["hpc2n_avg"]), float(ours["greedy-pmtn"]["hpc2n_avg"])) == (3.0, 1.0)  # (5+1)/2, 1
    older = [{k: v for k, v in r.items() if k != "max_literal_stretch"} for r in rows]
    (tmp_path / "older").mkdir()
    names, _ = _report(older, tmp_path / "older", traces=0)
    assert "table1_p300.csv" in names and not any("literal" in n for n in names)


def test_a_report_with_unscaled_traces_says_their_column_is_not_comparable_with_001s(tmp_path, capsys):
    """Our Lublin arrival process runs the unscaled traces at about a third of 001's load (fidelity review): said
    when the sweep has them, and only then."""
    rows = [_row("u1", "unscaled", 0.5, "easy", 4.0), _row("u1", "unscaled", 0.5, "greedy-pmtn", 2.0)]
    _report(rows, tmp_path, traces=0)
    assert "the unscaled traces run at about a third of the load of 001's" in capsys.readouterr().err
    (tmp_path / "scaled").mkdir()
    _report([{**r, "group": "scaled"} for r in rows], tmp_path / "scaled", traces=0)
    assert "unscaled" not in capsys.readouterr().err
