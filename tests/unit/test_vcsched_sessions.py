"""Every session of a ``vcemu vcsched`` run (each start of the command on one ``--out``) has its own number,
recorded in ``config.json`` when it starts: a session that finished no instance (killed or interrupted first) keeps
its number, so the next one does not reuse it and results.csv's ``session`` never points at another session's
details (when, on which host, with what ``--jobs``)."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from coordinator.vcsched import experiment as vc

ROOT = Path(__file__).resolve().parents[2]
#: One slack, one instance per specification, two heuristics: 16 small instances, a second or two.
ARGV = ["--set", "small", "--instances", "1", "--slacks", "0.3", "--jobs", "1", "--algorithms", "MCB8,GR"]

#: A ``vcemu vcsched`` whose instances never finish: it is killed with nothing but its config.json and the
#: journal's header written.
_STALLED = """
import sys, time
from coordinator.vcsched import experiment as vc

def stalled(u, cfg):
    time.sleep(3600)

vc.run_instance = stalled
sys.exit(vc.vcsched_main(sys.argv[1:]))
"""


def _sessions(out: Path) -> list[dict]:
    return json.loads((out / "config.json").read_text())["sessions"]


def _row_sessions(out: Path) -> set[str]:
    with (out / "small" / "results.csv").open(newline="") as fh:
        return {r["session"] for r in csv.DictReader(fh)}


def _kill_before_any_row(out: Path) -> None:
    """Run the command in a process of its own and SIGKILL it (and its workers) once its journal is open."""
    proc = subprocess.Popen([sys.executable, "-c", _STALLED, *ARGV, "--out", str(out)], cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not (out / vc.JOURNAL).exists():
            assert proc.poll() is None, f"the stalled run ended with {proc.returncode}"
            assert time.monotonic() < deadline, "the stalled run did not open its journal"
            time.sleep(0.05)
    finally:
        group = [p for p in psutil.process_iter() if _group_of(p.pid) == proc.pid]
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        # Its workers too, which hold the --out lock: they die a moment after the leader on a loaded machine, and
        # the next run found the lock held ("another vcemu vcsched (pid N) is using ...").
        _, alive = psutil.wait_procs(group, timeout=30)
        assert not alive, f"workers of the killed run still alive after 30 s: {alive}"  # (review h214)
    assert (out / vc.JOURNAL).read_text().count("\n") == 1  # the header: no instance finished


def _group_of(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def test_a_killed_session_that_finished_nothing_keeps_its_number(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    _kill_before_any_row(out)
    killed = _sessions(out)
    assert [s["session"] for s in killed] == [1]  # recorded when it started
    assert vc.vcsched_main([*ARGV, "--out", str(out)]) == 0
    sessions = _sessions(out)
    assert [s["session"] for s in sessions] == [1, 2]
    assert sessions[0] == killed[0]  # as the killed session recorded itself
    assert _row_sessions(out) == {"2"}  # every row timed by the second session, and said so


def test_an_interrupted_session_that_finished_nothing_keeps_its_number(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Ctrl-C before the first instance finished, twice, then a session that finishes them all: number 3."""
    out = tmp_path / "out"

    def interrupted(cfg: vc.ExperimentConfig, jobs: int, journal: Path, kept: dict, session: int = 1,
                    finished: list | None = None) -> list[dict]:
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(vc, "_run_all", interrupted)
        assert vc.vcsched_main([*ARGV, "--out", str(out)]) == 130
        assert vc.vcsched_main([*ARGV, "--out", str(out)]) == 130
    # (it said the finished instances were kept when there were none)
    err = capsys.readouterr().err
    assert err.count("interrupted; 0 of 16 instances finished: nothing to keep") == 2, err
    assert [s["session"] for s in _sessions(out)] == [1, 2]
    assert vc.vcsched_main([*ARGV, "--out", str(out)]) == 0
    assert [s["session"] for s in _sessions(out)] == [1, 2, 3]
    assert _row_sessions(out) == {"3"}


def test_a_resume_after_a_session_that_finished_nothing_says_which_sessions_timed_its_rows(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Session 1 finished 8 instances, session 2 none: the third session's rows say 3, and the message names
    sessions 1 and 3."""
    a, out = tmp_path / "a", tmp_path / "out"
    assert vc.vcsched_main([*ARGV, "--out", str(a)]) == 0
    conf = json.loads((a / "config.json").read_text())
    second = {**conf["sessions"][0], "session": 2, "jobs": 7}
    out.mkdir()
    (out / "config.json").write_text(json.dumps({**conf, "complete": False, "sessions": [conf["sessions"][0], second]}))
    with (a / "small" / "results.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    with (out / vc.JOURNAL).open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]), lineterminator="\n")
        w.writeheader()
        w.writerows(r for r in rows if r["tasks"] in ("6", "8"))
    capsys.readouterr()
    assert vc.vcsched_main([*ARGV, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "its run times were measured in sessions 1, 3 (session 2 timed none of them)" in printed
    sessions = _sessions(out)
    assert [s["session"] for s in sessions] == [1, 2, 3]
    assert sessions[:2] == [conf["sessions"][0], second]
    assert _row_sessions(out) == {"1", "3"}


def test_a_new_run_into_the_same_out_starts_at_one(tmp_path: Path) -> None:
    """A finished run's sessions are not continued by the next run (it solves everything again), nor are those of a
    run with other settings that finished nothing (it is not refused: there is nothing to keep); one that finished
    something is refused, and changes nothing."""
    out = tmp_path / "out"
    assert vc.vcsched_main([*ARGV, "--out", str(out)]) == 0
    assert vc.vcsched_main([*ARGV, "--out", str(out)]) == 0
    assert [s["session"] for s in _sessions(out)] == [1]
    before = (out / "config.json").read_text()
    assert vc.vcsched_main([*ARGV, "--seed", "5", "--out", str(out)]) == 2  # a finished run
    assert (out / "config.json").read_text() == before
    _kill_before_any_row(out)
    assert vc.vcsched_main([*ARGV, "--seed", "5", "--out", str(out)]) == 0
    assert [s["session"] for s in _sessions(out)] == [1] and _row_sessions(out) == {"1"}


def unfinished(out: Path, conf: dict) -> None:
    """``out`` as a run killed after every instance leaves it: ``conf`` stored unfinished, its rows in the journal."""
    (out / "config.json").write_text(json.dumps({**conf, "complete": False}))
    with (out / "small" / "results.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    with (out / vc.JOURNAL).open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]), lineterminator="\n")
        w.writeheader()
        w.writerows(rows)


def test_a_rerun_with_its_slacks_or_algorithms_in_another_order_is_the_same_run(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Crash-and-resume review: ``--slacks 0.4,0.2`` after ``--slacks 0.2,0.4`` was a run "with other settings"
    (and dropped the finished instances), though an instance depends on its slack's value, not its place."""
    out = tmp_path / "out"
    argv = ["--set", "small", "--instances", "1", "--jobs", "1", "--out", str(out)]
    assert vc.vcsched_main([*argv, "--slacks", "0.3,0.7", "--algorithms", "MCB8,GR"]) == 0
    unfinished(out, json.loads((out / "config.json").read_text()))
    capsys.readouterr()
    assert vc.vcsched_main([*argv, "--slacks", "0.7,0.3", "--algorithms", "GR,MCB8"]) == 0
    err = capsys.readouterr().err
    assert "other settings" not in err and "resuming the unfinished run" in err, err
    conf = json.loads((out / "config.json").read_text())
    assert conf["slacks"] == [0.3, 0.7] and conf["algorithms"] == ["MCB8", "GR"]


def test_the_large_sets_flags_are_no_settings_of_a_small_run(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """Second review: ``--large-instances`` or ``--backtrack-limit-large`` added to a ``--set small`` run (where
    they change nothing) made its rerun "a finished run with other settings", refused."""
    out = tmp_path / "out"
    assert vc.vcsched_main([*ARGV, "--out", str(out)]) == 0
    capsys.readouterr()
    assert vc.vcsched_main([*ARGV, "--out", str(out), "--large-instances", "3", "--backtrack-limit-large", "9"]) == 0
    err = capsys.readouterr().err
    assert "other settings" not in err, err
    conf = json.loads((out / "config.json").read_text())
    assert conf["large_instances"] is None and conf["backtrack_limit_large"] is None


def test_an_older_runs_large_set_flags_without_the_large_set_are_no_other_settings(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Code review: an older vcsched stored --large-instances with --set small; this version stores none there, and
    refused the very same command as "a finished run with other settings (--large-instances)"."""
    out = tmp_path / "out"
    assert vc.vcsched_main([*ARGV, "--out", str(out)]) == 0
    conf = json.loads((out / "config.json").read_text())
    (out / "config.json").write_text(json.dumps({**conf, "large_instances": 2, "backtrack_limit_large": 9}))
    capsys.readouterr()
    assert vc.vcsched_main([*ARGV, "--out", str(out), "--large-instances", "2", "--backtrack-limit-large", "9"]) == 0
    assert "other settings" not in capsys.readouterr().err


def test_the_large_sets_flags_given_at_their_defaults_are_no_other_settings(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Reproducibility review: ``--large-instances 1`` with ``--instances 1`` (the value it defaults to), or
    ``--backtrack-limit-large 500000``, added to a rerun of a finished large-set run was refused as "other settings",
    though the results are the same; so was an older config that stored them at those values."""
    out = tmp_path / "out"
    argv = ["--set", "large", "--instances", "1", "--slacks", "0.5", "--jobs", "1", "--algorithms", "GR",
            "--out", str(out)]
    assert vc.vcsched_main(argv) == 0
    capsys.readouterr()
    assert vc.vcsched_main([*argv, "--large-instances", "1", "--backtrack-limit-large", "500000"]) == 0
    assert "other settings" not in capsys.readouterr().err
    conf = json.loads((out / "config.json").read_text())
    assert conf["large_instances"] is None and conf["backtrack_limit_large"] is None
    (out / "config.json").write_text(json.dumps({**conf, "large_instances": 1, "backtrack_limit_large": 500000}))
    assert vc.vcsched_main(argv) == 0
    assert "other settings" not in capsys.readouterr().err
    assert vc.vcsched_main([*argv, "--large-instances", "2"]) == 2  # another value is other settings still
    assert "--large-instances" in capsys.readouterr().err
