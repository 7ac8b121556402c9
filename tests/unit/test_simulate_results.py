"""``vcemu simulate --out``: a simulation's results as files, beside what it prints."""

from __future__ import annotations

import csv
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.test_cli_errors import ROOT, refused, run

JOBS = [
    {"id": "a", "submit_time": 0, "tasks": 2, "cpu_need": 1.0, "memory": 0.3, "work": 100},
    {"id": "b", "submit_time": 10, "tasks": 1, "cpu_need": 0.5, "memory": 0.2, "work": 40},
    {"id": "c", "submit_time": 20, "tasks": 3, "cpu_need": 1.0, "memory": 0.5, "work": 60},
]


@pytest.fixture
def jobs(tmp_path: Path) -> Path:
    path = tmp_path / "jobs.jsonl"
    path.write_text("".join(json.dumps(j) + "\n" for j in JOBS))
    return path


def test_simulate_out_writes_config_jobs_and_the_printed_summary(jobs: Path, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "results"
    argv = ["simulate", "--policy", "greedy-pmtn", "--hosts", "3", "--penalty", "5", "--json", str(jobs)]
    code, printed, err = run([*argv, "--out", str(out)], capsys)
    assert code == 0, err
    (folder,) = out.iterdir()
    assert folder.name.endswith("-greedy-pmtn-jobs.jsonl")
    assert f"results in {folder}" in err
    config = json.loads((folder / "config.json").read_text())
    assert {k: config[k] for k in ("jobs_file", "segment", "policy", "hosts", "penalty")} == {
        "jobs_file": str(jobs), "segment": None, "policy": "greedy-pmtn", "hosts": 3, "penalty": 5.0}
    assert config["code"]["source_sha256"]
    assert config["jobs_file_sha256"] == hashlib.sha256(jobs.read_bytes()).hexdigest()  # the path may change
    summary = json.loads((folder / "summary.json").read_text())
    shown = json.loads(printed)
    assert {k: summary[k] for k in ("jobs", "completed", "max_bounded_stretch", "mean_bounded_stretch",
                                    "preemptions", "migrations")} == {
        k: shown[k] for k in ("jobs", "completed", "max_bounded_stretch", "mean_bounded_stretch", "preemptions",
                              "migrations")}
    assert summary["completed"] == 3 and summary["wall_s"] > 0
    assert (summary["policy"], summary["hosts"], summary["penalty"]) == ("greedy-pmtn", 3, 5.0)
    with (folder / "jobs.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["job"], r["tasks"], r["state"]) for r in rows] == [("a", "2", "done"), ("b", "1", "done"),
                                                                 ("c", "3", "done")]
    for r in rows:  # each row's figures hold together: wait = start - submit, stretch = (end - submit) / work
        assert float(r["wait"]) == pytest.approx(float(r["start"]) - float(r["submit"]))
        assert float(r["run"]) == pytest.approx(float(r["end"]) - float(r["start"]))
        assert float(r["stretch"]) == pytest.approx((float(r["end"]) - float(r["submit"])) / float(r["work"]))
    assert sum(int(r["preemptions"]) for r in rows) == shown["preemptions"]
    # The same run again (deterministic): the same per-job results, in a folder of its own.
    code, again, err = run([*argv, "--out", str(out)], capsys)
    assert code == 0 and again == printed
    second = next(p for p in out.iterdir() if p != folder)
    assert (second / "jobs.csv").read_text() == (folder / "jobs.csv").read_text()


def test_simulate_out_that_cannot_be_written_is_refused_before_the_run(jobs: Path, tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    code, printed, err = run(["simulate", "--policy", "greedy", str(jobs), "--out", str(blocker / "sub")], capsys)
    refused(code, err, f"vcemu simulate: --out {blocker / 'sub'}: cannot write results there")
    assert printed == ""


def _listing(root: Path) -> list[tuple[str, bytes]]:
    """Every path under ``root`` with its content (b"" for a directory), to compare a tree before and after."""
    return sorted((str(p.relative_to(root)), p.read_bytes() if p.is_file() else b"") for p in root.rglob("*"))


def test_simulate_that_fails_removes_the_folder_it_made_and_the_parents_it_created(
        jobs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import coordinator.experiments

    def broken(*_a, **_k):
        raise RuntimeError("a bug in the simulation")

    monkeypatch.setattr(coordinator.experiments, "simulate_results", broken)
    out = tmp_path / "new" / "results"  # neither exists: the run creates both
    with pytest.raises(RuntimeError, match="a bug in the simulation"):  # a bug keeps its traceback
        run(["simulate", "--policy", "greedy", str(jobs), "--out", str(out)], capsys)
    err = capsys.readouterr().err
    assert not (tmp_path / "new").exists(), _listing(tmp_path / "new")
    assert f"vcemu simulate: the run did not finish (RuntimeError); no results folder was made in {out}" in err, err


def test_simulate_interrupted_without_out_says_so(jobs: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """Ctrl-C (or SIGTERM) of a run without --out ended with status 130 and not a word."""
    import coordinator.experiments

    def interrupted(*_a, **_k):
        raise KeyboardInterrupt

    monkeypatch.setattr(coordinator.experiments, "simulate_results", interrupted)
    code, printed, err = run(["simulate", "--policy", "greedy", str(jobs)], capsys)
    assert (code, printed) == (130, "") and err.strip().endswith("vcemu simulate: interrupted"), err


def test_simulate_interrupted_leaves_an_existing_out_as_it_was(jobs: Path, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    import coordinator.experiments

    out = tmp_path / "results"
    argv = ["simulate", "--policy", "greedy", str(jobs), "--out", str(out)]
    code, _, err = run(argv, capsys)  # an earlier run's folder, which must stay as it is
    assert code == 0, err
    before = _listing(out)

    def interrupted(*_a, **_k):
        raise KeyboardInterrupt

    monkeypatch.setattr(coordinator.experiments, "simulate_results", interrupted)
    code, printed, err = run(argv, capsys)
    assert code == 130, err
    assert "Traceback" not in err and printed == ""
    assert f"vcemu simulate: interrupted; no results folder was made in {out}" in err
    assert _listing(out) == before


def test_simulate_whose_results_cannot_be_written_removes_the_partial_folder_and_still_prints(
        jobs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import errno

    import coordinator.experiments

    def disk_full(folder: Path, *args, **kwargs) -> None:
        (folder / "config.json").write_text("{}")  # the first file got through, the next did not
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(coordinator.experiments, "write_simulation", disk_full)
    out = tmp_path / "results"
    code, printed, err = run(["simulate", "--policy", "greedy", "--json", str(jobs), "--out", str(out)], capsys)
    assert code == 1, err
    assert not out.exists(), _listing(out)
    assert f"vcemu simulate: --out {out}: results not written (No space left on device); removed the unfinished " \
           "folder" in err, err
    assert json.loads(printed)["completed"] == len(JOBS)  # the run's results are not lost with the folder


def test_a_failed_run_leaves_an_out_reached_through_dotdot_as_it_was(tmp_path: Path, monkeypatch,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """``--out new/../results``, with ``results`` the user's folder and no ``new``: a failed run removed
    ``results`` itself (the unnormalised path did not exist, so it counted as made by the run) and left the
    ``new`` it had made (found by review)."""
    import coordinator.experiments

    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text(json.dumps({"id": "a", "submit_time": 0, "tasks": 1, "cpu_need": 1.0, "memory": 0.1,
                                "work": 10}) + "\n")
    mine = tmp_path / "results"
    mine.mkdir()

    def interrupted(*_a: object, **_k: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(coordinator.experiments, "simulate_results", interrupted)
    code, _, err = run(["simulate", "--policy", "greedy", str(jobs), "--out", str(tmp_path / "new" / ".." / "results")],
                       capsys)
    assert code == 130, err
    assert mine.is_dir() and not list(mine.iterdir()), "the user's folder was removed, or not emptied"
    assert not (tmp_path / "new").exists()


# ---- what config.json records of the job file ------------------------------------------------------------------


def test_config_hashes_the_bytes_the_run_parsed_not_what_the_path_holds_after(
        jobs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The hash was taken after the run, of whatever the path held by then."""
    import coordinator.experiments

    parsed = jobs.read_bytes()
    real = coordinator.experiments.simulate_results

    def edited_meanwhile(*a, **k):
        jobs.write_text("")  # someone edits the file while the simulation runs
        return real(*a, **k)

    monkeypatch.setattr(coordinator.experiments, "simulate_results", edited_meanwhile)
    out = tmp_path / "results"
    monkeypatch.chdir(tmp_path)
    code, _, err = run(["simulate", "--policy", "greedy", "--json", jobs.name, "--out", str(out)], capsys)
    assert code == 0, err
    config = json.loads(next(out.iterdir()).joinpath("config.json").read_text())
    assert config["jobs_file_sha256"] == hashlib.sha256(parsed).hexdigest()
    assert config["jobs_file"] == jobs.name and config["jobs_file_abspath"] == str(jobs)  # relative, and absolute
    assert config["swf_conversion"] is None


@pytest.mark.parametrize("name", ["/dev/stdin", "-"])
def test_config_of_jobs_read_from_stdin_hashes_them(jobs: Path, tmp_path: Path, name: str) -> None:
    """/dev/stdin read a second time after the run is empty: config.json had the empty string's hash. ``-`` is
    standard input too (it was a file named "-" that was not there)."""
    out = tmp_path / "results"
    p = subprocess.run([sys.executable, "-m", "coordinator.cli", "simulate", "--policy", "greedy", "--json",
                        name, "--out", str(out)], input=jobs.read_bytes(), capture_output=True, cwd=ROOT,
                       timeout=120)
    assert p.returncode == 0, p.stderr.decode()
    config = json.loads(next(out.iterdir()).joinpath("config.json").read_text())
    assert config["jobs_file_sha256"] == hashlib.sha256(jobs.read_bytes()).hexdigest()
    assert config["jobs_file"] == name and (config["jobs_file_abspath"] == "-") == (name == "-")
    assert next(out.iterdir()).name.endswith("-greedy-stdin")  # (the folder of "-" was "...-greedy--")
    assert json.loads(p.stdout)["completed"] == 3


@pytest.mark.parametrize("command", [["simulate", "--policy", "greedy"], ["replay"], ["submit", "--file"]])
def test_an_empty_standard_input_is_named_so(command: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """It was "no jobs in -" (a typo, to a reader)."""
    import io

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"")))
    code, _, err = run([*command, "-", *(["--out", str(tmp_path)] if command[0] != "submit" else [])], capsys)
    assert code == 2 and err.endswith(": no jobs in standard input\n"), err


def test_swf_records_the_conversion_drops_say_it_and_record_them(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """Records the conversion's rules dropped went without a word, in the output or in config.json."""
    trace = tmp_path / "drops.swf"
    trace.write_text("; MaxNodes: 4\n1 0 0 100 2 -1 -1 2 100 -1 1 1 1 -1 -1 1 -1 -1\n"
                     "2 10 0 -1 2 -1 -1 2 200 -1 0 1 1 -1 -1 1 -1 -1\n3 -1 0 50 1 -1 -1 1 50 -1 5 1 1 -1 -1 1 -1 -1\n")
    out = tmp_path / "results"
    code, _, err = run(["simulate", "--policy", "fcfs", "--json", str(trace), "--out", str(out)], capsys)
    assert code == 0, err
    assert f"vcemu simulate: {trace}: dropped 2 of 3 records: no_submit_time=1, no_run_time=1\n" in err
    config = json.loads(next(out.iterdir()).joinpath("config.json").read_text())
    assert config["swf_conversion"] == {"records": 3, "dropped": {
        "no_submit_time": 1, "no_processors": 0, "no_run_time": 1, "memory_exceeds_node": 0,
        "does_not_fit_cluster": 0}}
    trace.write_text("; MaxNodes: 4\n1 0 0 100 2 -1 -1 2 100 -1 1 1 1 -1 -1 1 -1 -1\n")
    code, _, err = run(["simulate", "--policy", "fcfs", "--json", str(trace)], capsys)
    assert code == 0 and "dropped" not in err, err


def test_a_whole_swf_trace_says_how_many_jobs_and_weeks_it_runs(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """User review: the whole HPC2N trace (no --segment) ran for minutes without a word, where a week takes
    seconds; it says what it runs and how to run a week (a segment says nothing of it)."""
    trace = tmp_path / "two-weeks.swf"
    trace.write_text("; MaxNodes: 4\n1 0 0 100 2 -1 -1 2 100 -1 1 1 1 -1 -1 1 -1 -1\n"
                     "2 700000 0 100 2 -1 -1 2 100 -1 1 1 1 -1 -1 1 -1 -1\n")
    code, _, err = run(["simulate", "--policy", "greedy", "--json", str(trace)], capsys)
    assert code == 0, err
    # (it said the whole trace "takes about as long as its weeks one by one": not so where a backlog carries from
    # week to week, the scale review measured)
    assert err == (f"vcemu simulate: {trace}: all 2 jobs of the trace, 2 weeks in one run (--segment K: week K "
                   "alone, 0..1; --segment A-B: weeks A to B); a preempting policy's backlog carries from week to "
                   "week, so this can take far longer than the weeks one by one (vcemu sweep --hpc2n-weeks runs them "
                   "week by week, as seed 001 does)\n")
    code, _, err = run(["simulate", "--policy", "greedy", "--json", "--segment", "1", str(trace)], capsys)
    assert code == 0 and err == "", err
    out = tmp_path / "results"  # weeks 0 to 1 in one run: both jobs, named and recorded as given
    code, printed, err = run(["simulate", "--policy", "greedy", "--json", "--segment", "0-1", str(trace),
                              "--out", str(out)], capsys)
    assert code == 0 and json.loads(printed)["jobs"] == 2, err
    (folder,) = out.iterdir()
    assert folder.name.endswith("-greedy-two-weeks.swf-weeks0-1")
    assert json.loads((folder / "config.json").read_text())["segment"] == "0-1"


def test_simulate_stopped_by_sigterm_says_so_and_leaves_no_folder(jobs: Path, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """Crash-and-resume review: SIGTERM ended ``simulate --out`` at once (status 143), saying nothing, and left the
    run's folder, made before the run, empty (so did kill -9: the folder is now made once the run has finished)."""
    import os
    import signal
    import time

    import coordinator.experiments

    def terminated(*_a, **_k):
        assert not any((tmp_path / "results").iterdir())  # (nothing under --out while the run goes on)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
        raise AssertionError("SIGTERM did not stop the run")

    monkeypatch.setattr(coordinator.experiments, "simulate_results", terminated)
    out = tmp_path / "results"
    code, printed, err = run(["simulate", "--policy", "greedy", str(jobs), "--out", str(out)], capsys)
    assert code == 130 and printed == "", err
    assert f"vcemu simulate: interrupted; no results folder was made in {out}" in err
    assert not out.exists()  # (made by the run, and removed again)

