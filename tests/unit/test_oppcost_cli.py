"""``vcemu oppcost``'s command line at its edges: seeds it refuses, an ``--out`` it cannot use, executions without
jobs, a simulation that cannot finish, an interrupt before anything finished."""

from __future__ import annotations

import csv
import json
import os
import signal
import statistics
from pathlib import Path

import pytest

from coordinator.oppcost import experiment as oc
from vcemu.signals import signals_interrupt
from workloads.oppcost_mix import MixConfig, generate

QUICK = ["--executions", "1", "--jobs", "1", "--duration", "100"]


def _one_line(err: str, start: str) -> None:
    err = err.strip()
    assert err.startswith(start) and "\n" not in err and "Traceback" not in err, err


@pytest.mark.parametrize(("argv", "flag"), [(["--seed", "-2"], "--seed"), (["--explain", "-1"], "--explain")])
def test_negative_seeds_are_refused_naming_the_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                    argv: list[str], flag: str) -> None:
    """random.Random(-s) is random.Random(s): a negative seed repeated a positive one's executions."""
    assert generate(-2, cfg=MixConfig(duration=100)) == generate(2, cfg=MixConfig(duration=100))  # why
    out = tmp_path / "out"
    assert oc.oppcost_main([*QUICK, *argv, "--out", str(out)]) == 2
    _one_line(capsys.readouterr().err, f"vcemu oppcost: {flag}: must be >= 0")
    assert not out.exists()


def test_an_out_it_cannot_write_is_refused_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A file, or a path under a file, as --out: exit 2 and one line, not a traceback."""
    afile = tmp_path / "afile"
    afile.write_text("")
    for out in (afile, afile / "sub"):
        assert oc.oppcost_main([*QUICK, "--out", str(out)]) == 2
        _one_line(capsys.readouterr().err, f"vcemu oppcost: --out {out}: cannot write results there")


def test_executions_without_jobs_are_left_out_of_the_per_execution_statistics(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """With a 10 s arrival window seeds 1..6 give 1, 0, 1, 2, 0, 0 processes: the three empty executions stay in
    executions.csv but the averages, median, wins and figures count the other three (they gave NaN averages and a
    wrong median; with no job at all, a ZeroDivisionError). A window shorter than the mean inter-arrival time is
    refused."""
    assert [len(generate(s, cfg=MixConfig(duration=10))) for s in range(1, 7)] == [1, 0, 1, 2, 0, 0]
    out = tmp_path / "out"
    assert oc.oppcost_main(["--executions", "6", "--jobs", "1", "--duration", "10", "--out", str(out)]) == 0
    assert "3 of 6 executions had no job" in capsys.readouterr().out
    with (out / "executions.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["jobs"] for r in rows] == ["1", "0", "1", "2", "0", "0"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["executions"] == 6 and summary["executions_without_jobs"] == 3
    for name in oc.METHODS:
        means = [float(r[f"{name}_mean"]) for r in rows if r["jobs"] != "0"]
        t = summary["table2"][name]
        assert t["by_execution"] == pytest.approx(sum(means) / 3)
        assert t["median_by_execution"] == pytest.approx(statistics.median(means))
        assert t["by_job"] == pytest.approx(sum(float(r[f"{name}_sum"]) for r in rows) / 4)
    assert all(0 <= v <= 3 for v in summary["wins"].values())

    empty = tmp_path / "empty"  # seed 2's single execution has no job at all
    assert oc.oppcost_main(["--executions", "1", "--seed", "2", "--jobs", "1", "--duration", "10",
                            "--out", str(empty)]) == 0
    summary = json.loads((empty / "summary.json").read_text())
    assert summary["executions_without_jobs"] == 1 and summary["table2"]["pvm"]["by_execution"] is None
    assert len(list(empty.glob("fig*.png"))) == 4
    capsys.readouterr()
    assert oc.oppcost_main(["--executions", "1", "--duration", "5", "--out", str(tmp_path / "short")]) == 2
    _one_line(capsys.readouterr().err, "vcemu oppcost: --duration: must be a finite number >= 10 (s, the job mix's")
    assert oc.oppcost_main(["--executions", "1", "--duration", "0", "--out", str(tmp_path / "zero")]) == 2
    _one_line(capsys.readouterr().err, "vcemu oppcost: --duration: must be a finite number >= 10")  # one rule


def test_a_simulation_past_its_time_cap_ends_in_one_line_and_keeps_the_finished_executions(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--beta 1e9: seed 13's stream has a process larger than any machine, which then thrashes for ~1e9 s per CPU
    second, past the simulator's cap; seed 12's has none. Exit 1 with one line naming execution 1, its seed and the
    flags that slow processes (it was a worker's RuntimeError traceback); execution 0 stays in the journal."""
    streams = {s: generate(s, cfg=MixConfig(duration=100)) for s in (12, 13)}
    assert max(p.mem for p in streams[12]) < 128 < max(p.mem for p in streams[13])
    out = tmp_path / "out"
    argv = ["--executions", "2", "--seed", "12", "--jobs", "1", "--duration", "100", "--beta", "1e9", "--out", str(out)]
    assert oc.oppcost_main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("vcemu oppcost: execution 1 (seed 13): ") and "max_time" in err
    assert "--beta 1e+09" in err and "--migration-fixed" in err and f"kept in {out / oc.JOURNAL}" in err
    with (out / oc.JOURNAL).open(newline="") as fh:
        assert [r["execution"] for r in csv.DictReader(fh)] == ["0"]
    assert json.loads((out / "config.json").read_text())["complete"] is False
    assert not (out / "summary.json").exists()
    assert oc.oppcost_main(["--explain", "13", "--duration", "100", "--migration-fixed", "1e300"]) == 1
    _one_line(capsys.readouterr().err, "vcemu oppcost: --explain 13: ")


def test_an_interrupt_before_any_execution_finished_exits_130(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """Ctrl-C (or SIGTERM) before the first execution finished: 130 like any interrupt, saying nothing finished
    (it was 1 and "summarising the 0 finished executions")."""

    def interrupted(futures: object) -> object:
        raise KeyboardInterrupt

    monkeypatch.setattr(oc, "as_completed", interrupted)
    out = tmp_path / "out"
    assert oc.oppcost_main([*QUICK, "--out", str(out)]) == 130
    err = capsys.readouterr().err
    assert "nothing finished yet" in err and "summarising" not in err
    assert json.loads((out / "config.json").read_text())["complete"] is False


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_sigterm_in_a_just_forked_worker_ends_it_instead_of_running_the_commands_code() -> None:
    """A pool worker is forked with the command's SIGTERM handler and keeps it until its initializer resets it. The
    command terminates its workers when interrupted, possibly right after forking them: the handler must end such a
    worker (exit 128 + SIGTERM), not raise KeyboardInterrupt, which could unwind into the command's own code and run
    the rest of it (seen once here: a second copy of pytest finishing the test session)."""

    with signals_interrupt():  # what oppcost_main runs its pool under
        handler = signal.getsignal(signal.SIGTERM)
        assert callable(handler)
        with pytest.raises(KeyboardInterrupt):  # in the command's own process: Ctrl-C
            handler(signal.SIGTERM, None)
        pid = os.fork()
        if pid == 0:  # the worker, before its initializer
            code = 1
            try:
                handler(signal.SIGTERM, None)
            except KeyboardInterrupt:
                code = 99
            finally:
                os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 128 + signal.SIGTERM


def test_more_executions_keep_a_finished_runs_and_run_only_the_new_ones(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Going from 300 to 400 executions ran all 400 again (the stored run's settings differed in ``executions``),
    though execution k depends on seed + k alone (found by review). Fewer keep the first ones."""
    out = tmp_path / "out"
    args = ["--jobs", "1", "--duration", "30", "--out", str(out)]
    assert oc.oppcost_main(["--executions", "3", *args]) == 0
    three = (out / "executions.csv").read_text().splitlines()
    ran: list[int] = []
    real = oc.run_execution

    def counted(cfg, k):  # noqa: ANN001, ANN202 - the pool's callable, in this process (jobs 1 forks)
        ran.append(k)
        return real(cfg, k)

    monkeypatch.setattr(oc, "run_execution", counted)
    monkeypatch.setattr(oc, "ProcessPoolExecutor", _InlinePool)
    capsys.readouterr()
    assert oc.oppcost_main(["--executions", "5", *args]) == 0
    assert ran == [3, 4]
    assert f"vcemu oppcost: resuming the finished run in {out}: 3 of 5 executions kept" in capsys.readouterr().err
    five = (out / "executions.csv").read_text().splitlines()
    assert five[:4] == three and len(five) == 6
    fresh = tmp_path / "fresh"  # the same 5 in one go: the same rows
    assert oc.oppcost_main(["--executions", "5", "--jobs", "1", "--duration", "30", "--out", str(fresh)]) == 0
    assert (fresh / "executions.csv").read_text().splitlines() == five
    ran.clear()
    capsys.readouterr()
    assert oc.oppcost_main(["--executions", "2", *args]) == 0
    assert ran == [] and (out / "executions.csv").read_text().splitlines() == five[:3]
    assert "2 of 2 executions kept, 3 past --executions 2 left out" in capsys.readouterr().err


class _InlinePool:
    """ProcessPoolExecutor's interface, running each call in this process (so that a test can count them)."""

    def __init__(self, *_, **__) -> None:
        pass

    def submit(self, fn, *args):  # noqa: ANN001, ANN202
        from concurrent.futures import Future

        fut: Future = Future()
        fut.set_result(fn(*args))
        return fut

    def shutdown(self, *_, **__) -> None:
        pass


@pytest.mark.parametrize("window", ["6", "99", "0"])
def test_a_window_beyond_the_other_machines_is_refused_naming_the_flag(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], window: str) -> None:
    """Each of the 6 machines hears from 5 others at most: --window 99 ran as --window 5 while config.json
    recorded 99. 5 is the largest accepted (see the --window 5 run below)."""
    out = tmp_path / "out"
    assert oc.oppcost_main([*QUICK, "--window", window, "--out", str(out)]) == 2
    _one_line(capsys.readouterr().err, f"vcemu oppcost: --window: must be a finite number >= 1 and <= 5 (each of "
                                       f"the 6 machines hears from the 5 others at most), got {window}")
    assert not out.exists()
    assert oc.oppcost_main([*QUICK, "--window", "5", "--out", str(out)]) == 0
    assert json.loads((out / "config.json").read_text())["window"] == 5


def test_a_resumed_run_keeps_the_wall_time_of_the_executions_it_keeps(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Rerunning a finished run printed 'wall 0.0 s' and wrote wall_seconds 0.0 over the 7.5 s it had measured. Now
    a rerun that runs nothing keeps the earlier figure; one that runs more adds its own time to it; one that keeps
    fewer executions keeps their share (by count); one whose earlier run left no summary.json (killed) counts only
    its own time and says how many executions that leaves out. Each says what its figure is made of."""
    out = tmp_path / "out"
    args = ["--jobs", "1", "--duration", "30", "--out", str(out)]

    def earlier(seconds: float) -> None:  # as if the run in out had taken that long
        summary = json.loads((out / "summary.json").read_text())
        (out / "summary.json").write_text(json.dumps({**summary, "wall_seconds": seconds}))

    def wall() -> float:
        return json.loads((out / "summary.json").read_text())["wall_seconds"]

    assert oc.oppcost_main(["--executions", "3", *args]) == 0
    earlier(7.5)
    capsys.readouterr()
    assert oc.oppcost_main(["--executions", "3", *args]) == 0
    assert wall() == 7.5
    assert ("wall 7.5 s (7.5 s recorded by the earlier run for the 3 executions kept; no execution ran this time)"
            in capsys.readouterr().out)
    assert oc.oppcost_main(["--executions", "3", *args]) == 0  # and again: it does not creep
    assert wall() == 7.5

    assert oc.oppcost_main(["--executions", "4", *args]) == 0
    assert wall() >= 7.5
    assert "(7.5 s recorded by the earlier run for the 3 executions kept; " in capsys.readouterr().out

    earlier(8.0)
    assert oc.oppcost_main(["--executions", "2", *args]) == 0
    assert wall() == 4.0
    assert ("wall 4.0 s (4.0 s recorded by the earlier run for the 2 executions kept, their share of the 4 it had; "
            "no execution ran this time)" in capsys.readouterr().out)

    (out / "summary.json").unlink()  # as a killed run leaves it
    assert oc.oppcost_main(["--executions", "3", *args]) == 0
    assert wall() < 4.0  # (this run's own: one execution)
    assert ("not counting the 2 executions kept whose time no summary.json recorded (a run killed before writing "
            "it)" in capsys.readouterr().out)
    # ... and so does its summary.json (crash-and-resume review: wall_seconds alone read as the whole run's time),
    # which the next run reads as the time of 1 execution, not of 3
    assert json.loads((out / "summary.json").read_text())["executions_without_wall_time"] == 2
    one = wall()
    assert oc.oppcost_main(["--executions", "4", *args]) == 0
    assert json.loads((out / "summary.json").read_text())["executions_without_wall_time"] == 2
    printed = capsys.readouterr().out
    assert wall() >= one and f"({one:.1f} s recorded by the earlier run for the 1 executions kept; " in printed
    assert "not counting the 2 executions kept whose time no summary.json recorded" in printed


def test_an_empty_out_is_refused_not_taken_for_the_current_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """``--out ''`` wrote every result into the current directory and exited 0 (user review), as ``vcemu apc`` did
    before it refused it."""
    monkeypatch.chdir(tmp_path)
    assert oc.oppcost_main([*QUICK, "--out", ""]) == 2
    _one_line(capsys.readouterr().err, "vcemu oppcost: --out: must be a folder's path, got an empty one")
    assert list(tmp_path.iterdir()) == []
    assert oc.oppcost_main(["--explain", "1", "--duration", "100", "--out", ""]) == 0  # (it writes nothing)
    assert list(tmp_path.iterdir()) == []


def test_fewer_executions_than_a_stored_run_warn_that_the_rest_are_deleted(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--executions 4`` then ``--executions 2`` into the same --out dropped executions 2 and 3 without a word
    (user review). The outputs still describe the 2 asked for; one line warns that the other 2 are gone for good
    (the journal keeps only this run's executions, so a later run with more runs them again). Likewise from an
    unfinished run's journal. Nothing is said when none is left out."""
    out = tmp_path / "out"
    args = ["--jobs", "1", "--duration", "30", "--out", str(out)]
    assert oc.oppcost_main(["--executions", "4", *args]) == 0
    capsys.readouterr()
    assert oc.oppcost_main(["--executions", "2", *args]) == 0
    (warning,) = [x for x in capsys.readouterr().err.splitlines() if "warning" in x]
    assert warning == ("vcemu oppcost: warning: --executions 2: this run's outputs leave out the 2 stored executions "
                       "past it (2-3); they are deleted, not kept: a later run with more executions runs them again")
    assert [r["execution"] for r in csv.DictReader((out / "executions.csv").open(newline=""))] == ["0", "1"]
    assert oc.oppcost_main(["--executions", "2", *args]) == 0
    assert "warning" not in capsys.readouterr().err
    assert oc.oppcost_main(["--executions", "1", *args]) == 0
    assert ("vcemu oppcost: warning: --executions 1: this run's outputs leave out the 1 stored execution past it (1); "
            "it is deleted" in capsys.readouterr().err)

    assert oc.oppcost_main(["--executions", "4", *args]) == 0
    lines = (out / "executions.csv").read_text().splitlines(keepends=True)
    (out / oc.JOURNAL).write_text("".join(lines[:3] + lines[4:]))  # as an interrupted run of 4 leaves it: 0, 1, 3
    conf = json.loads((out / "config.json").read_text())
    (out / "config.json").write_text(json.dumps({**conf, "complete": False}))
    capsys.readouterr()
    assert oc.oppcost_main(["--executions", "1", *args]) == 0
    assert ("vcemu oppcost: warning: --executions 1: this run's outputs leave out the 2 stored executions past it "
            "(1, 3); they are deleted" in capsys.readouterr().err)
    assert oc.oppcost_main(["--executions", "4", *args]) == 0  # run again, not taken from anywhere
    assert "1 of 4 executions kept" in capsys.readouterr().err


class _CountingPool(_InlinePool):
    """:class:`_InlinePool` that records how many executions were handed to it ahead of the results taken."""

    def __init__(self, *_, **__) -> None:
        self.ahead = 0
        self.most_ahead = 0

    def submit(self, fn, *args):  # noqa: ANN001, ANN202
        fut = super().submit(fn, *args)
        real_result = fut.result

        def result(*a, **kw):  # noqa: ANN002, ANN003, ANN202
            self.ahead -= 1
            return real_result(*a, **kw)

        fut.result = result
        self.ahead += 1
        self.most_ahead = max(self.most_ahead, self.ahead)
        return fut


def test_executions_are_handed_to_the_pool_a_few_at_a_time(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every execution was submitted up front: ``--executions 1000000`` grew to 1.5 GB in 30 s before the first
    finished (user review). At most :data:`~coordinator.oppcost.experiment.AHEAD` per worker are in the pool ahead
    of the results taken, and the one being taken (its successor is submitted first); the results are those of the
    same run in worker processes."""
    pools: list[_CountingPool] = []

    def counting(*args, **kwargs) -> _CountingPool:  # noqa: ANN002, ANN003
        pools.append(_CountingPool(*args, **kwargs))
        return pools[-1]

    args = ["--executions", "12", "--duration", "30"]
    assert oc.oppcost_main([*args, "--jobs", "1", "--out", str(tmp_path / "ref")]) == 0
    monkeypatch.setattr(oc, "ProcessPoolExecutor", counting)
    assert oc.oppcost_main([*args, "--jobs", "2", "--out", str(tmp_path / "out")]) == 0
    assert pools[0].most_ahead == 2 * oc.AHEAD + 1 < 12
    for name in ("executions.csv", "table2.csv"):
        assert (tmp_path / "out" / name).read_bytes() == (tmp_path / "ref" / name).read_bytes()


def test_a_stored_run_with_other_settings_is_named_as_finished_or_unfinished(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A finished run has no journal, yet a rerun with other settings said --out "holds the journal of a run with
    other settings" (user review); an unfinished run's journal is still named as such."""
    out = tmp_path / "out"
    args = [*QUICK, "--out", str(out)]
    assert oc.oppcost_main(args) == 0
    capsys.readouterr()
    assert oc.oppcost_main([*args, "--seed", "2"]) == 2  # refused, naming the flag (it started over)
    _one_line(capsys.readouterr().err,
              f"vcemu oppcost: {out} holds a finished run with other settings (--seed 1 stored, 2 now); give another "
              f"--out, or "
              f"remove {out} to replace it")
    (out / oc.JOURNAL).write_text((out / "executions.csv").read_text())  # as an interrupted run leaves it
    conf = json.loads((out / "config.json").read_text())
    (out / "config.json").write_text(json.dumps({**conf, "complete": False}))
    assert oc.oppcost_main([*args, "--beta", "3"]) == 2
    _one_line(capsys.readouterr().err,
              f"vcemu oppcost: {out} holds an unfinished run with other settings (--beta 10.0 stored, 3.0 now); give "
              f"another --out, or "
              f"remove {out} to replace it")


def test_a_damaged_config_beside_finished_results_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                                            ) -> None:
    """Input review: config.json cut in half, then a rerun with another seed "started over" and replaced the six
    finished executions."""
    out = tmp_path / "out"
    assert oc.oppcost_main([*QUICK, "--out", str(out)]) == 0
    before = (out / "executions.csv").read_text()
    text = (out / "config.json").read_text()
    (out / "config.json").write_text(text[: len(text) // 2])
    capsys.readouterr()
    assert oc.oppcost_main([*QUICK, "--seed", "7", "--out", str(out)]) == 2
    assert "config.json cannot be read" in capsys.readouterr().err
    assert (out / "executions.csv").read_text() == before


def test_table2_averages_by_execution_by_job_and_the_median_worked_by_hand() -> None:
    """004 Sec. 5 / Table 2: by execution = unweighted mean of the executions' averages; by job = over all jobs."""
    # executions (jobs, average, sum, migrations): (1, 2, 2, 3), (3, 4, 12, 0), (0, NaN, 0, 0), (2, 9, 18, 3)
    # counted: the three with jobs. By execution (2 + 4 + 9) / 3 = 5; by job (2 + 12 + 18) / 6 = 16/3; median 4;
    # migrations per execution 6 / 3 = 2.
    cols = ((1, 2.0, 2.0, 3), (3, 4.0, 12.0, 0), (0, float("nan"), 0.0, 0), (2, 9.0, 18.0, 3))
    rows = [{"execution": k, "seed": k + 1, "jobs": jobs,
             **{f"{name}_{key}": v for name in oc.METHODS
                for key, v in (("mean", mean), ("sum", total), ("migrations", mig))}}
            for k, (jobs, mean, total, mig) in enumerate(cols)]
    for name in oc.METHODS:
        assert oc.summarize(rows)[name] == pytest.approx(
            {"by_execution": 5.0, "by_job": 16 / 3, "median_by_execution": 4.0, "migrations_per_execution": 2.0})
