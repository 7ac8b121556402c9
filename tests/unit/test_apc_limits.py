"""``vcemu apc`` ends: a ``--cycle`` too long for APC to place anything is refused, a simulation that can no longer
change stops with an error instead of looping for ever, an Experiment Two stream too large to draw is refused before
anything is drawn, and Experiment Three's progress bar counts the cycles it runs."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from coordinator.apc import experiment as apc
from coordinator.apc.sim import SimConfig, SimulationStuck, horizon_cycles, simulate
from coordinator.apc.workloads import cluster, exp1_jobs
from coordinator.policies.apc import Costs
from coordinator.policies.apc_rpf import Job, Stage


def _at_most(cycles: int) -> Any:
    """A progress callback that fails the test once a simulation has run more than ``cycles`` cycles: a run that
    loops for ever fails in a moment, not at the suite's timeout."""
    seen = [0]

    def tick(_done: int, _t: float) -> None:
        seen[0] += 1
        assert seen[0] <= cycles, f"still running after {cycles} control cycles"
    return tick


def _no_simulation(monkeypatch: pytest.MonkeyPatch) -> None:
    def ran(key: str, *_a: Any, **_k: Any) -> None:
        raise AssertionError(f"{key} was simulated: the flags were not refused first")
    monkeypatch.setattr(apc, "simulate_unit", ran)


def _one_line(err: str, start: str) -> str:
    err = err.strip()
    assert err.startswith(start) and "\n" not in err and "Traceback" not in err, err
    return err


# --------------------------------------------------------------------------- a cycle too long, a run that is stuck


def test_apc_at_a_cycle_of_1e8_raises_that_it_is_stuck_instead_of_looping_for_ever() -> None:
    """User review: ``vcemu apc --experiments one --exp1-jobs 5 --cycle 1e8`` never ended, every cycle 0 completed,
    0 running, 5 queued. Every job's relative performance is below APC's floor of -1000 placed or not, so APC
    places none; nothing is left to arrive, and the loop stopped only on completions."""
    cfg = SimConfig(cluster(), "apc", 1e8, Costs(), stop_after_completed=5)
    with pytest.raises(SimulationStuck, match=r"apc placed none of the 5 queued jobs for 10 control cycles in a row"):
        simulate(cfg, exp1_jobs(5, 0), _at_most(100))


def test_a_job_too_big_for_every_node_stops_the_baselines_too() -> None:
    nodes = cluster(1)
    big = Job("big", 0.0, 1e4, (Stage(1e5, 1000.0, 2 * nodes[0].memory),))
    for policy in ("fcfs", "edf"):
        with pytest.raises(SimulationStuck, match=f"{policy} placed none of the 1 queued jobs"):
            simulate(SimConfig(nodes, policy, 600.0, stop_after_completed=1), [big], _at_most(100))


def test_the_guard_waits_while_a_job_is_still_to_arrive_and_leaves_runs_with_a_horizon_alone() -> None:
    """A job that fits no node queued for 15 cycles while another is still to arrive is no stuck run: the other
    arrives, runs and completes. A run with a horizon ends there whatever it places (Experiment Three's cycles are
    results up to it)."""
    nodes = cluster(1)
    big = Job("big", 0.0, 1e5, (Stage(1e5, 1000.0, 2 * nodes[0].memory),))
    late = Job("late", 15 * 600.0 - 1, 1e5, (Stage(1e5, 1000.0, 100.0),))
    res = simulate(SimConfig(nodes, "edf", 600.0, stop_after_completed=1), [big, late], _at_most(100))
    assert [j["id"] for j in res.jobs] == ["late"] and len(res.cycles) == 16
    res = simulate(SimConfig(nodes, "fcfs", 600.0, horizon=30 * 600.0), [big], _at_most(100))
    assert len(res.cycles) == 30 and not res.jobs


def test_a_cycle_above_the_bound_is_refused_and_runs_at_the_bound_finish(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The bound is 100 times the shortest relative goal of the experiments' jobs (780 s): a job that waited a
    whole cycle is still far above the floor APC compares down to. Experiment One, whose jobs' relative goal is
    47,520 s, hung from a cycle of about 5e7 s."""
    out = tmp_path / "out"
    real = apc.simulate_unit
    _no_simulation(monkeypatch)
    assert apc.apc_main(["--experiments", "one", "--exp1-jobs", "5", "--cycle", "1e8", "--out", str(out)]) == 2
    _one_line(capsys.readouterr().err, "vcemu apc: --cycle: must be at most 78000 s, 100 times the shortest "
                                       "relative goal of the experiments' jobs (780 s)")
    assert not out.exists()
    assert apc.MAX_CYCLE == 78_000.0
    monkeypatch.setattr(apc, "simulate_unit", real)
    assert apc.apc_main(["--experiments", "one", "--exp1-jobs", "5", "--cycle", "78000", "--out", str(out)]) == 0
    for iat in (50.0, 400.0):  # (Experiment Two's jobs include the shortest relative goal)
        res = simulate(SimConfig(cluster(), "apc", apc.MAX_CYCLE, Costs.none(), stop_after_completed=10),
                       apc.exp2_jobs(int(apc.exp2_draws(10, iat)), 0, iat), _at_most(100))
        assert len(res.jobs) >= 10


def test_a_stuck_simulation_ends_the_command_with_one_line_and_status_1(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Past the --cycle check (raised here), a simulation that cannot end is named in one line, not a traceback."""
    monkeypatch.setattr(apc, "MAX_CYCLE", 1e9)
    out = tmp_path / "out"
    assert apc.apc_main(["--experiments", "one", "--exp1-jobs", "5", "--cycle", "1e8", "--out", str(out)]) == 1
    err = _one_line(capsys.readouterr().err, "vcemu apc: exp1 apc: stuck at simulated time 1e+09 s: apc placed "
                                             "none of the 5 queued jobs for 10 control cycles in a row")
    assert "never reach its 5 completions" in err, err


# --------------------------------------------------------------------------- Experiment Two's stream


def test_an_exp2_stream_too_large_to_draw_is_refused_before_anything_is_drawn(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """User review: ``--exp2-jobs 10 --exp2-iats 1e-9`` tried to allocate 72.8 TiB for 1e13 jobs, a traceback (and
    ``--exp1-jobs 1e13`` the same, review)."""
    def drawn(n: int, *_: Any) -> list[Job]:
        raise AssertionError(f"drew a stream of {n} jobs")

    monkeypatch.setattr(apc, "exp2_jobs", drawn)
    _no_simulation(monkeypatch)
    out = tmp_path / "out"
    argv = ["--experiments", "two", "--exp2-algorithms", "fcfs", "--out", str(out)]
    for flags, start in (
            (["--exp2-jobs", "10", "--exp2-iats", "1e-9"], "vcemu apc: --exp2-iats: must each be at least 0.01 s "
             "with --exp2-jobs 10"),
            (["--exp2-iats", "50,0.5,5e-324"], "vcemu apc: --exp2-iats: must each be at least 0.8 s with "
             "--exp2-jobs 800"),
            (["--exp1-jobs", "10000000000000"], "vcemu apc: --exp1-jobs: must be at most 1,000,000"),
            (["--exp2-jobs", "400000", "--exp2-iats", "400"], "vcemu apc: --exp2-jobs: must be at most 333,333")):
        assert apc.apc_main([*argv, *flags]) == 2, flags
        err = _one_line(capsys.readouterr().err, start)
        assert err.endswith({"1e-9": "got 1e-09", "50,0.5,5e-324": "got 0.5,4.94066e-324",
                             "400": "got 400000", "10000000000000": "got 10000000000000"}[flags[-1]]), err
        assert not out.exists()
    assert apc.exp2_draws(10, 0.01) == apc.MAX_DRAWS  # (at the bound: drawn)
    assert apc.exp2_draws(800, 50.0) == 16_000  # the paper's settings, as drawn before


# --------------------------------------------------------------------------- Experiment Three's progress bar


def test_experiment_three_counts_on_its_progress_bar_the_cycles_it_runs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """User review: the bar's total was 33 at --exp3-horizon 20000 (horizon // cycle) while 34 cycles ran: every
    cycle starting before the horizon runs."""
    totals: dict[str, tuple[int, int]] = {}
    real = apc.simulate_unit

    def logged(key: str, cfg: SimConfig, jobs: list[Job], total: int, *a: Any, **k: Any) -> Any:
        res = real(key, cfg, jobs, total, *a, **k)
        totals[key] = (total, len(res.cycles))
        return res

    monkeypatch.setattr(apc, "simulate_unit", logged)
    monkeypatch.setattr(apc, "save_figure", lambda *_a, **_k: None)
    apc.experiment_three(tmp_path, 0, 600.0, 1500.0)
    assert totals == {apc._key_three(name): (3, 3) for name, _ in apc.EXP3_CONFIGS}
    assert horizon_cycles(20_000.0, 600.0) == 34
    # at cycles that are not whole seconds too (a sum of 0.3 s cycles drifted below 1,500 s: one more cycle ran)
    for horizon, T in ((1500.0, 0.3), (1.0, 0.1), (0.3, 0.1), (1200.0, 600.0), (599.9, 0.7)):
        ran = simulate(SimConfig(cluster(1), "fcfs", T, horizon=horizon), []).cycles
        assert horizon_cycles(horizon, T) == len(ran), (horizon, T)


def test_experiments_that_would_simulate_too_many_cycles_are_refused_naming_the_experiments_flag(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Review: ``--exp2-iats 1e7`` passed every check and would have simulated about 13 million cycles; a horizon of
    1e12 s or a cycle of 1 ms as long. Each is refused before anything runs, naming the flag of the experiment that
    runs; the same flags for an experiment that does not run are not judged."""
    _no_simulation(monkeypatch)
    out = tmp_path / "out"
    for flags, start, got in (
            (["--experiments", "two", "--exp2-iats", "50,1e7"], "vcemu apc: --exp2-iats: must leave at most "
             "1,000,000 control cycles of --cycle 600 s", "got 1e+07"),
            (["--experiments", "three", "--exp3-horizon", "1e12"], "vcemu apc: --exp3-horizon: must leave at most",
             "got 1000000000000.0"),
            (["--experiments", "one", "--cycle", "0.1"], "vcemu apc: --exp1-jobs: must leave at most 1,000,000 "
             "control cycles of --cycle 0.1 s", "(about --exp1-jobs x 260 s of arrivals / T: 2,080,000), got 800")):
        assert apc.apc_main([*flags, "--out", str(out)]) == 2, flags
        assert _one_line(capsys.readouterr().err, start).endswith(got)
        assert not out.exists()
    lines = list(apc._size_checks(apc._parser().parse_args(["--exp3-horizon", "1e12"]), ["one", "two"], (50.0,)))
    assert "--exp3-horizon" not in [flag for flag, *_ in lines] and all(ok for _, _, ok, _ in lines)


def test_experiment_threes_lower_of_both_is_over_the_cycles_that_have_both() -> None:
    """Figures review: a cycle with no long-running job counted in the mean of the minima as the app's RP alone,
    so the printed "min of both" (0.332) was above the batch mean beside it (0.297)."""
    nan = float("nan")
    cycles = [{"web_rp": 0.6, "hyp_rp_mean": 0.2}, {"web_rp": 0.1, "hyp_rp_mean": 0.4},
              {"web_rp": 0.66, "hyp_rp_mean": nan}, {"web_rp": 0.66, "hyp_rp_mean": nan}]
    means = apc.exp3_means(cycles)
    assert means["ta_rp_mean"] == pytest.approx((0.6 + 0.1 + 0.66 + 0.66) / 4)
    assert means["batch_hyp_rp_mean"] == pytest.approx(0.3)
    assert means["min_of_both_mean"] == pytest.approx((0.2 + 0.1) / 2)  # (was (0.2 + 0.1 + 0.66 + 0.66) / 4)
    assert (means["cycles"], means["cycles_with_long_running_jobs"]) == (4, 2)
    none = apc.exp3_means([{"web_rp": 0.5, "hyp_rp_mean": nan}])
    assert math.isnan(none["batch_hyp_rp_mean"]) and math.isnan(none["min_of_both_mean"])


def test_a_run_of_other_experiments_says_which_earlier_results_it_removes(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """README walk-through: the README's ``--live --experiments three`` after a full run removed Experiments One
    and Two's files without a word. It says so now, and how to have them back from the journal."""
    out = tmp_path / "apc"
    assert apc.apc_main(["--experiments", "one", "--exp1-jobs", "5", "--out", str(out)]) == 0
    assert (out / "fig2_exp1.png").exists()
    capsys.readouterr()
    assert apc.apc_main(["--experiments", "three", "--exp3-horizon", "1500", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert (f"vcemu apc: {out} holds Experiment One of an earlier run, which this run removes (--out describes one "
            f"run); the experiments' simulations stay in {apc.JOURNAL}: --experiments one,three, with the flags the "
            f"earlier run gave them (vcemu apc --experiments one --exp1-jobs 5 --out {out}), writes them again "
            "without simulating them anew") in err, err
    assert not (out / "fig2_exp1.png").exists() and (out / "fig6_rp.png").exists()
    capsys.readouterr()
    assert apc.apc_main(["--experiments", "one,three", "--exp1-jobs", "5", "--exp3-horizon", "1500",
                         "--out", str(out)]) == 0
    assert "which this run removes" not in capsys.readouterr().err
    assert (out / "fig2_exp1.png").exists() and (out / "fig6_rp.png").exists()


def test_the_removal_note_names_the_live_run_and_leaves_out_the_journal_when_it_is_gone(tmp_path: Path) -> None:
    for name in ("exp2_summary.csv", "fig6_rp.png"):
        (tmp_path / name).write_text("")
    (tmp_path / "live").mkdir()
    (tmp_path / "live" / "live_cycles.csv").write_text("")
    note = apc.replaced_note(tmp_path, ["one"], live=False, kept=False)
    assert note == (f"vcemu apc: {tmp_path} holds Experiments Two and Three and the live run (live/) of an earlier "
                    "run, which this run removes (--out describes one run)")
    assert apc.replaced_note(tmp_path, ["two", "three"], live=True, kept=True) is None


def test_the_live_apps_demand_is_at_least_the_profiled_work_of_a_request() -> None:
    """README walk-through: under a CFS quota the measured response time stays low until the app nears its quota;
    fitted through it, the demand came out ~10 times too small, and APC cut the app until it saturated (RP -11), in
    a cycle of cuts and rises. The work a request takes, profiled over the cycle, is the demand's floor."""
    from coordinator.apc.live import app_model

    # 20 req/s of 1.25 Mcycles each (25 MHz) at 34 MHz: 3.6 ms measured (bursts at full speed), where M/M/1 with
    # the real demand says 1.25 / (34 - 25) = 139 ms
    fitted = app_model(34.0, 0.0036, 20.0, math.nan, saturation=1000.0)
    assert fitted.demand == pytest.approx(0.0036 * 34.0 / (1 + 0.0036 * 20.0))  # (not profiled: the fit alone)
    floored = app_model(34.0, 0.0036, 20.0, 1.25, saturation=1000.0)
    assert floored.demand == 1.25 and floored.rate == 20.0
    assert floored.response_time(34.0) == pytest.approx(1.25 / 9.0)
    # a measurement where queueing shows keeps the fitted demand, above the profiled one
    queued = app_model(30.0, 0.5, 20.0, 1.25, saturation=1000.0)
    assert queued.demand == pytest.approx(0.5 * 30.0 / (1 + 0.5 * 20.0)) and queued.demand > 1.25
