"""An output directory of ``vcemu oppcost``, ``vcemu vcsched`` and ``vcemu apc`` always describes one run: a new
run removes the previous one's files and writes its config (``"complete": false``) before any work, a killed
run resumes from its journal with the results of an uninterrupted run, and pool workers die with a SIGKILLed
parent.

The work functions are swapped for module-level wrappers that log, from the worker processes, which units ran
and what the output directory held at that moment (what a kill at that moment would leave)."""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from coordinator.apc import experiment as apc
from coordinator.oppcost import experiment as oc
from coordinator.vcsched import experiment as vc

ROOT = Path(__file__).resolve().parents[2]
_RUN_EXECUTION = oc.run_execution
_RUN_INSTANCE = vc.run_instance
_LOG = "VCEMU_TEST_RESULT_DIRS_LOG"
_OUT = "VCEMU_TEST_RESULT_DIRS_OUT"


def _log(unit: object) -> None:
    out = Path(os.environ[_OUT])
    conf = json.loads((out / "config.json").read_text())
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    with open(os.environ[_LOG], "a") as f:
        f.write(json.dumps({"unit": unit, "seed": conf["seed"], "complete": conf.get("complete"), "files": files})
                + "\n")


def _logged_execution(cfg: oc.Config, k: int) -> dict[str, float]:
    _log(k)
    return _RUN_EXECUTION(cfg, k)


def _logged_instance(u: vc.Unit, cfg: vc.ExperimentConfig) -> list[dict]:
    _log([u.tasks, cfg.slacks[u.slack_i], vc.CVS[u.cvm_i], vc.CVS[u.cvc_i], u.k])
    return _RUN_INSTANCE(u, cfg)


@pytest.fixture
def watch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[Path], Callable[[], list[dict]]]:
    """``watch(out)``: from now on log every execution / instance run into ``out``; returns the log's reader."""
    log = tmp_path / "log.jsonl"

    def start(out: Path) -> Callable[[], list[dict]]:
        monkeypatch.setenv(_OUT, str(out))
        monkeypatch.setenv(_LOG, str(log))
        monkeypatch.setattr(oc, "run_execution", _logged_execution)
        monkeypatch.setattr(vc, "run_instance", _logged_instance)
        return lambda: [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    return start


def _csv_rows(path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(path.read_text(), newline="")))


def _journal(rows: list[dict[str, str]], fields: list[str], tail: str = "") -> str:
    buf = io.StringIO(newline="")
    w = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue() + tail


def _same_outputs(a: Path, b: Path) -> None:
    for name in ("executions.csv", "table2.csv"):
        assert (b / name).read_bytes() == (a / name).read_bytes(), name
    sa, sb = (json.loads((d / "summary.json").read_text()) for d in (a, b))
    for s in (sa, sb):  # (a run resumed after a kill does not know the killed run's time)
        s.pop("wall_seconds"), s.pop("executions_without_wall_time")
    assert sb == sa
    ca, cb = (json.loads((d / "config.json").read_text()) for d in (a, b))
    ca.pop("argv"), cb.pop("argv")
    assert cb == ca and cb["complete"] is True
    assert not (b / "executions.partial.csv").exists()


OPPCOST = ["--executions", "4", "--jobs", "1", "--duration", "300"]


def test_oppcost_resume_keeps_checked_rows_runs_only_the_rest_and_equals_an_uninterrupted_run(
        tmp_path: Path, watch: Callable, capsys: pytest.CaptureFixture[str]) -> None:
    a, out = tmp_path / "a", tmp_path / "b"
    assert oc.oppcost_main([*OPPCOST, "--out", str(a)]) == 0
    log = watch(out)
    out.mkdir()
    # a killed run of the same command: its config (unfinished), executions 2 and 0 finished, a row of
    # execution 1 that is not this run's (wrong seed), and execution 3's line cut short by the kill
    conf = json.loads((a / "config.json").read_text())
    (out / "config.json").write_text(json.dumps({**conf, "complete": False}))
    rows = {int(r["execution"]): r for r in _csv_rows(a / "executions.csv")}
    fields = list(rows[0])
    last = _journal([rows[3]], fields).splitlines()[1]
    (out / "executions.partial.csv").write_text(
        _journal([rows[2], rows[0], {**rows[1], "seed": "99"}], fields, tail=last[: len(last) // 2]))
    (out / "summary.json").write_text('{"executions": 60}\n')  # written by nobody in this run
    capsys.readouterr()
    assert oc.oppcost_main([*OPPCOST, "--out", str(out)]) == 0
    assert "resuming the unfinished run" in capsys.readouterr().err
    ran = log()
    assert sorted(r["unit"] for r in ran) == [1, 3]
    for r in ran:  # what a kill during the resumed run would leave: its own config, unfinished, and no summary
        assert r["complete"] is False and r["seed"] == 1 and "summary.json" not in r["files"]
    _same_outputs(a, out)


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_oppcost_unfinished_run_with_other_settings_is_refused_and_kept(
        tmp_path: Path, watch: Callable, capsys: pytest.CaptureFixture[str]) -> None:
    """Crash-and-resume review: a rerun with one setting changed said "starting over" and removed the finished
    executions (as vcsched and apc did); ``vcemu sweep`` refused. Now all four refuse, naming the flag."""
    out = tmp_path / "b"
    assert oc.oppcost_main([*OPPCOST, "--out", str(out)]) == 0  # seed 1, finished
    conf = json.loads((out / "config.json").read_text())
    (out / "config.json").write_text(json.dumps({**conf, "complete": False}))
    (out / "executions.partial.csv").write_text((out / "executions.csv").read_text())
    before = _tree(out)
    log = watch(out)
    capsys.readouterr()
    assert oc.oppcost_main([*OPPCOST, "--seed", "2", "--out", str(out)]) == 2
    assert capsys.readouterr().err == (f"vcemu oppcost: {out} holds an unfinished run with other settings (--seed 1 "
                                       f"stored, 2 now); give another --out, or remove {out} to replace it\n")
    assert log() == [] and _tree(out) == before
    assert oc.oppcost_main([*OPPCOST, "--out", str(out)]) == 0  # the same settings: resumed
    assert "resuming the unfinished run" in capsys.readouterr().err


def _children(pid: int) -> list[int]:
    kids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            kids.append(int(stat.parent.name))
    return kids


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_oppcost_sigkilled_run_leaves_no_workers_and_resumes_to_the_uninterrupted_results(tmp_path: Path) -> None:
    """The reviewer's case: a finished run of 2 executions, then a run of more executions SIGKILLed into the same
    --out (a run of other settings is refused now). The kill leaves that run's config, unfinished, no results of the
    finished run, and no live workers; the same command again keeps the finished executions and ends with an
    uninterrupted run's results."""
    argv = ["--executions", "6", "--jobs", "2", "--duration", "1000", "--seed", "100"]
    out, ref = tmp_path / "b", tmp_path / "a"
    assert oc.oppcost_main(["--executions", "2", "--jobs", "1", "--duration", "1000", "--seed", "100",
                            "--out", str(out)]) == 0
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    code = "import sys; from coordinator.oppcost.experiment import oppcost_main; sys.exit(oppcost_main(sys.argv[1:]))"
    proc = subprocess.Popen([sys.executable, "-c", code, *argv, "--out", str(out)], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    workers: list[int] = []
    try:
        deadline = time.monotonic() + 60
        journal = out / "executions.partial.csv"
        while time.monotonic() < deadline and proc.poll() is None:
            if journal.exists() and journal.read_text().count("\n") >= 5:  # header, the 2 kept, 2 of this run's
                break
            time.sleep(0.02)
        assert proc.poll() is None, "the run ended before it could be killed"
        workers = _children(proc.pid)
        assert workers
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(map(_alive, workers)):
            time.sleep(0.05)
        assert not [w for w in workers if _alive(w)], "pool workers outlived their SIGKILLed parent"
    finally:
        for pid in [proc.pid, *workers]:  # nothing this test started outlives it, even when it fails
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        proc.wait()
    conf = json.loads((out / "config.json").read_text())
    assert conf["seed"] == 100 and conf["complete"] is False
    assert not (out / "summary.json").exists() and not (out / "executions.csv").exists()
    assert oc.oppcost_main([*argv, "--out", str(out)]) == 0
    assert oc.oppcost_main([*argv, "--out", str(ref)]) == 0
    _same_outputs(ref, out)


VCSCHED = ["--set", "small", "--instances", "1", "--slacks", "0.3,0.7", "--jobs", "1", "--algorithms", "MCB8,GR"]


def test_vcsched_removes_old_results_and_resumes_from_its_journal(
        tmp_path: Path, watch: Callable, capsys: pytest.CaptureFixture[str]) -> None:
    a, out = tmp_path / "a", tmp_path / "b"
    assert vc.vcsched_main([*VCSCHED, "--out", str(a)]) == 0
    log = watch(out)
    # an older run's results (both sets), then a killed run of this command: 20 instances finished, the 21st
    # with only its LP row, the 22nd's first line cut short
    for name in ("small/results.csv", "small/mcb_min_yield.png", "large/results.csv", "large/checks.json"):
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_text("an older run's\n")
    conf = json.loads((a / "config.json").read_text())
    (out / "config.json").write_text(json.dumps({**conf, "complete": False}))
    rows = _csv_rows(a / "small" / "results.csv")
    key = lambda r: [int(r["tasks"]), float(r["slack"]), float(r["cv_mem"]), float(r["cv_cpu"]), int(r["instance"])]  # noqa: E731
    keys = list({tuple(key(r)): None for r in rows})
    kept = [r for r in rows if tuple(key(r)) in keys[:20]]
    lp_only = [r for r in rows if tuple(key(r)) == keys[20]][:1]
    cut = _journal([r for r in rows if tuple(key(r)) == keys[21]][:1], list(rows[0])).splitlines()[1]
    (out / "results.partial.csv").write_text(_journal(kept + lp_only, list(rows[0]), tail=cut[:10]))
    assert vc.vcsched_main(["--replot", "--out", str(out)]) == 2  # an unfinished run is not reported
    capsys.readouterr()
    assert vc.vcsched_main([*VCSCHED, "--out", str(out)]) == 0
    assert "20 of 32 instances kept" in capsys.readouterr().err
    ran = log()
    assert sorted(tuple(r["unit"]) for r in ran) == sorted(keys[20:])
    for r in ran:  # what a kill would leave: this run's config, unfinished, and none of the older results
        assert r["complete"] is False
        assert r["files"] == [".lock", "config.json", "results.partial.csv"]  # (.lock: this run's, held)
    # CPU times vary, and the rows solved now are timed in another session than the kept ones
    strip = lambda rs: [{k: v for k, v in r.items() if k not in ("seconds", "session")} for r in rs]  # noqa: E731
    assert strip(_csv_rows(out / "small" / "results.csv")) == strip(rows)
    assert [r for r in _csv_rows(out / "small" / "results.csv") if tuple(key(r)) in keys[:20]] == kept
    assert not (out / "large").exists() or not list((out / "large").iterdir())
    assert json.loads((out / "config.json").read_text())["complete"] is True
    assert not (out / "results.partial.csv").exists()


APC_ALL = ["--exp1-jobs", "6", "--exp2-jobs", "5", "--exp2-iats", "200", "--exp2-algorithms", "apc",
           "--exp3-horizon", "3000"]


def test_apc_run_of_one_experiment_leaves_none_of_an_earlier_runs_files(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "apc"
    assert apc.apc_main([*APC_ALL, "--out", str(out)]) == 0
    (out / "live").mkdir()
    (out / "live" / "live_cycles.csv").write_text("an earlier --live run's\n")
    (out / "notes.txt").write_text("not the command's\n")
    seen: list[set[str]] = []
    one = apc.experiment_one

    def watched(o: Path, *args: object) -> dict:
        seen.append({str(p.relative_to(o)) for p in o.rglob("*") if p.is_file()})
        assert json.loads((o / "config.json").read_text())["complete"] is False
        return one(o, *args)

    monkeypatch.setattr(apc, "experiment_one", watched)
    assert apc.apc_main([*APC_ALL, "--experiments", "one", "--out", str(out)]) == 0
    # a kill here leaves only this run's config, unfinished, and its journal (of the earlier run's simulations)
    assert seen == [{".lock", "config.json", "notes.txt", apc.JOURNAL}]  # (.lock: this run's, held)
    files = {str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()}
    assert files == {".lock", "config.json", "summary.json", "exp1_cycles.csv", "exp1_jobs.csv", "fig2_exp1.png",
                     "notes.txt", apc.JOURNAL}
    assert json.loads((out / "config.json").read_text())["complete"] is True
    summary = json.loads((out / "summary.json").read_text(), parse_constant=lambda c: pytest.fail(f"{c} in JSON"))
    assert set(summary) == {"code", "one"}


APC_UNITS = ["--exp1-jobs", "6", "--exp2-jobs", "5", "--exp2-iats", "200,100", "--exp2-algorithms", "apc,fcfs",
             "--exp3-horizon", "3000"]


def _without_wall_times(d: Path) -> tuple[list[dict[str, str]], dict]:
    """``exp2_summary.csv`` and ``summary.json`` without Experiment Two's ``wall_s`` (measured: it varies)."""
    rows = [{k: v for k, v in r.items() if k != "wall_s"} for r in _csv_rows(d / "exp2_summary.csv")]
    summary = json.loads((d / "summary.json").read_text())
    for r in summary["two"]["rows"]:
        r.pop("wall_s")
    return rows, summary


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_apc_sigkilled_run_resumes_skipping_journalled_simulations_to_the_uninterrupted_outputs(
        tmp_path: Path, simulations: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """A real ``vcemu apc`` SIGKILLed after three of its eight simulations: the same command again runs only
    the other five and writes, byte for byte, what an uninterrupted run writes (all CSVs and figures;
    Experiment Two's ``wall_s`` aside, each simulation's measured time)."""
    ref, out = tmp_path / "a", tmp_path / "b"
    assert apc.apc_main([*APC_UNITS, "--out", str(ref)]) == 0
    every = list(simulations)
    assert len(every) == 8
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    # The run holds before its fourth simulation (so the kill lands there however busy the machine is) and
    # says so through a file.
    code = """if True:
        import pathlib, sys, time
        import coordinator.apc.experiment as e
        run, calls = e.simulate_unit, []
        def held(*args, **kwargs):
            calls.append(1)
            if len(calls) == 4:
                pathlib.Path(sys.argv[1]).write_text("held")
                time.sleep(3600)
            return run(*args, **kwargs)
        e.simulate_unit = held
        sys.exit(e.apc_main(sys.argv[2:]))
    """
    held = tmp_path / "held"
    proc = subprocess.Popen([sys.executable, "-c", code, str(held), *APC_UNITS, "--out", str(out)], cwd=ROOT,
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    journal = out / apc.JOURNAL
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None and not held.exists():
            time.sleep(0.01)
        assert held.exists() and proc.poll() is None, "the run never reached its fourth simulation"
        proc.send_signal(signal.SIGKILL)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    assert json.loads((out / "config.json").read_text())["complete"] is False
    assert not (out / "summary.json").exists()
    kept = [r["unit"] for r in _csv_rows(journal) if r["record"] == "end"]
    assert kept == every[:3]
    simulations.clear()
    capsys.readouterr()
    assert apc.apc_main([*APC_UNITS, "--out", str(out)]) == 0
    assert f"{len(kept)} of 8 simulations kept" in capsys.readouterr().err
    assert simulations == every[len(kept):]
    names = sorted(p.name for p in ref.iterdir())
    assert sorted(p.name for p in out.iterdir()) == names
    for name in names:  # (the journals hold each simulation's measured wall time)
        if name not in ("config.json", "summary.json", "exp2_summary.csv", apc.JOURNAL):
            assert (out / name).read_bytes() == (ref / name).read_bytes(), name
    assert _without_wall_times(out) == _without_wall_times(ref)
    ca, cb = (json.loads((d / "config.json").read_text()) for d in (ref, out))
    assert {k: v for k, v in cb.items() if k not in ("argv", "out")} == \
        {k: v for k, v in ca.items() if k not in ("argv", "out")}
    assert cb["complete"] is True
    assert [r["unit"] for r in _csv_rows(journal) if r["record"] == "end"] == every  # kept for later runs


def test_apc_interrupted_run_keeps_its_journal_and_a_run_with_other_settings_is_refused(
        tmp_path: Path, simulations: list[str], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "apc"
    argv = ["--experiments", "one,two", *APC_UNITS[:6], "--exp2-algorithms", "apc", "--out", str(out)]
    real = apc.simulate_unit

    def ctrl_c_in_the_second(key: str, *args: object, **kwargs: object) -> object:
        if simulations:  # (the fixture logs each simulation that starts)
            raise KeyboardInterrupt
        return real(key, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(apc, "simulate_unit", ctrl_c_in_the_second)
    assert apc.apc_main(argv) == 130
    assert "run the same command again to continue" in capsys.readouterr().err
    assert json.loads((out / "config.json").read_text())["complete"] is False
    assert {r["unit"] for r in _csv_rows(out / apc.JOURNAL)} == {"exp1 apc"}
    monkeypatch.setattr(apc, "simulate_unit", real)
    simulations.clear()
    before = _tree(out)
    assert apc.apc_main([*argv, "--seed", "1", "--cycle", "300"]) == 2
    assert capsys.readouterr().err == (f"vcemu apc: {out} holds an unfinished run with other settings (--cycle 600.0 "
                                       f"stored, 300.0 now; --seed 0 stored, 1 now); give another --out, or remove "
                                       f"{out} to replace it\n")
    assert simulations == [] and _tree(out) == before


# ---- the code that wrote a journal ----------------------------------------------------------------------------------


def _as_other_code(out: Path, record: str) -> None:
    """Make ``out/config.json`` say its journal was written by other code: an older vcemu's, which recorded no
    code (``none``), or code of another source fingerprint (``other``)."""
    conf = json.loads((out / "config.json").read_text())
    conf.pop("code", None)
    if record == "other":
        conf["code"] = {"version": "0.1.0", "git_commit": None, "git_dirty": None, "source_sha256": "0" * 64}
    (out / "config.json").write_text(json.dumps({**conf, "complete": False}))


@pytest.mark.parametrize("record", ["none", "other"])
def test_oppcost_journal_of_other_code_is_not_reused(tmp_path: Path, watch: Callable, record: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "b"
    assert oc.oppcost_main([*OPPCOST, "--out", str(out)]) == 0
    _as_other_code(out, record)
    (out / "executions.partial.csv").write_text((out / "executions.csv").read_text())  # all four finished
    log = watch(out)
    capsys.readouterr()
    assert oc.oppcost_main([*OPPCOST, "--out", str(out)]) == 0
    (line,) = [x for x in capsys.readouterr().err.splitlines() if "vcemu oppcost:" in x]
    assert "holds the journal of a run of other code" in line and line.endswith("; starting over")
    assert "with other settings" not in line
    assert sorted(r["unit"] for r in log()) == [0, 1, 2, 3]


@pytest.mark.parametrize("record", ["none", "other"])
def test_vcsched_journal_of_other_code_is_not_reused(tmp_path: Path, watch: Callable, record: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "b"
    argv = [*VCSCHED[:5], "0.3", *VCSCHED[6:], "--out", str(out)]  # one slack: 16 instances
    assert vc.vcsched_main(argv) == 0
    _as_other_code(out, record)
    (out / "results.partial.csv").write_text((out / "small" / "results.csv").read_text())
    log = watch(out)
    capsys.readouterr()
    assert vc.vcsched_main(argv) == 0
    assert "holds the journal of a run of other code" in capsys.readouterr().err
    assert len(log()) == 16


@pytest.mark.parametrize("record", ["none", "other"])
def test_apc_journal_of_other_code_is_not_reused(tmp_path: Path, simulations: list[str], record: str,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "apc"
    argv = ["--experiments", "one,two", *APC_UNITS[:6], "--exp2-algorithms", "apc", "--out", str(out)]
    real = apc.simulate_unit

    def ctrl_c_in_the_second(key: str, *args: object, **kwargs: object) -> object:
        if simulations:
            raise KeyboardInterrupt
        return real(key, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(apc, "simulate_unit", ctrl_c_in_the_second)
    assert apc.apc_main(argv) == 130  # Experiment One is journalled
    monkeypatch.setattr(apc, "simulate_unit", real)
    _as_other_code(out, record)
    simulations.clear()
    capsys.readouterr()
    assert apc.apc_main(argv) == 0
    assert "holds the journal of a run of other code" in capsys.readouterr().err
    assert simulations == ["exp1 apc", "exp2 apc iat=200.0", "exp2 apc iat=100.0"]


# ---- apc: a rerun with other --experiments keeps the simulations it does not run -----------------------------------


def test_apc_reruns_with_other_experiments_reuse_every_journalled_simulation_with_their_settings(
        tmp_path: Path, simulations: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "apc"
    common = [*APC_UNITS[:6], "--exp2-algorithms", "apc", "--exp3-horizon", "1200", "--out", str(out)]
    two = ["exp2 apc iat=200.0", "exp2 apc iat=100.0"]

    def run(experiments: str, *extra: str) -> list[str]:
        simulations.clear()
        assert apc.apc_main(["--experiments", experiments, *common, *extra]) == 0
        return list(simulations)

    assert run("one") == ["exp1 apc"]
    assert run("one,two") == two  # Experiment One's simulation is reused
    assert "1 of 3 simulations kept" in capsys.readouterr().err
    assert run("two") == []
    err = capsys.readouterr().err
    assert "2 of 2 simulations kept, 1 more kept for later runs (not in this one)" in err
    assert run("one", "--exp2-jobs", "4") == []  # not lost by the run of Experiment Two alone
    assert run("one,two") == []  # ... and that run's --exp2-jobs 4 did not touch Experiment Two's
    assert run("one", "--exp1-jobs", "5") == ["exp1 apc"]  # its own setting changed: run again, in its place
    assert run("one,two", "--exp1-jobs", "5", "--exp3-horizon", "600") == []  # another experiment's: reused
    assert run("one,two") == ["exp1 apc"]
    ends = [r["unit"] for r in _csv_rows(out / apc.JOURNAL) if r["record"] == "end"]
    assert sorted(ends) == sorted(["exp1 apc", *two])  # one entry per simulation
    capsys.readouterr()
    simulations.clear()  # what every simulation depends on: refused (it started over, and dropped them all)
    assert apc.apc_main(["--experiments", "one,two", *common, "--seed", "3"]) == 2
    assert "holds a finished run with other settings (--seed 0 stored, 3 now)" in capsys.readouterr().err
    assert simulations == []


def test_apc_reused_simulations_give_the_outputs_of_a_fresh_run(tmp_path: Path, simulations: list[str]) -> None:
    ref, out = tmp_path / "a", tmp_path / "b"
    argv = [*APC_UNITS[:6], "--exp2-algorithms", "apc"]
    assert apc.apc_main(["--experiments", "one", *argv, "--out", str(out)]) == 0
    assert apc.apc_main(["--experiments", "two", *argv, "--out", str(out)]) == 0
    simulations.clear()
    assert apc.apc_main(["--experiments", "one,two", *argv, "--out", str(out)]) == 0
    assert simulations == []
    assert apc.apc_main(["--experiments", "one,two", *argv, "--out", str(ref)]) == 0
    for name in ("exp1_cycles.csv", "exp1_jobs.csv", "exp2_jobs.csv", "fig2_exp1.png", "fig3_met.png"):
        assert (out / name).read_bytes() == (ref / name).read_bytes(), name
    assert _without_wall_times(out) == _without_wall_times(ref)


# ---- vcsched: which session timed each row -------------------------------------------------------------------------


def test_vcsched_resumed_run_says_which_session_timed_each_row(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, out = tmp_path / "a", tmp_path / "b"
    argv = [*VCSCHED[:5], "0.3", *VCSCHED[6:]]  # one slack: 16 instances
    assert vc.vcsched_main([*argv, "--out", str(a)]) == 0
    out.mkdir()
    conf = json.loads((a / "config.json").read_text())
    (out / "config.json").write_text(json.dumps({**conf, "complete": False}))
    rows = _csv_rows(a / "small" / "results.csv")
    first = [r for r in rows if r["tasks"] in ("6", "8")]  # 8 instances finished by the first session
    (out / "results.partial.csv").write_text(_journal(first, list(rows[0])))
    capsys.readouterr()
    assert vc.vcsched_main([*argv, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "its run times were measured in sessions 1, 2" in printed
    got = _csv_rows(out / "small" / "results.csv")
    assert {(r["tasks"], r["session"]) for r in got} == {("6", "1"), ("8", "1"), ("10", "2"), ("12", "2")}
    assert [r for r in got if r["session"] == "1"] == first  # kept as timed then
    sessions = json.loads((out / "config.json").read_text())["sessions"]
    assert [s["session"] for s in sessions] == [1, 2]
    assert sessions[0] == conf["sessions"][0]  # the first session as its own run recorded it
    assert {"started", "host", "cpus", "jobs"} <= set(sessions[1]) and sessions[1]["jobs"] == 1
    assert {r["sessions"] for r in _csv_rows(out / "small" / "summary.csv")} == {"2"}
    assert {r["session"] for r in _csv_rows(a / "small" / "results.csv")} == {"1"}  # an uninterrupted run: one
    assert "`session` column says which session timed each row" in vc._parser().format_help()


def test_a_rerun_is_refused_only_for_settings_and_only_where_there_is_work_to_keep(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Second review: informational config keys (the paper's reference, a derived table, a key an older vcemu did
    not write) were compared as settings, refusing a rerun of the very same command for good; and a run stopped
    before its first result (oppcost's own "lower them" advice) refused its corrected rerun, with nothing to keep."""
    out = tmp_path / "b"
    assert oc.oppcost_main([*OPPCOST, "--out", str(out)]) == 0
    conf = json.loads((out / "config.json").read_text())
    old = {k: v for k, v in conf.items() if k != "window"}  # as an older vcemu, without a setting, wrote it
    (out / "config.json").write_text(json.dumps({**old, "paper": "another reference", "plot_first": 7,
                                                 "cluster": [], "mix": {}}))
    capsys.readouterr()
    assert oc.oppcost_main([*OPPCOST, "--out", str(out)]) == 0, capsys.readouterr().err
    # nothing finished: a journal of its header alone, unfinished; a rerun with another --beta goes on
    (out / "config.json").write_text(json.dumps({**conf, "complete": False}))
    (out / "executions.csv").unlink()
    (out / oc.JOURNAL).write_text(",".join(oc.FIELDS) + "\n")
    assert oc.oppcost_main([*OPPCOST, "--beta", "3", "--out", str(out)]) == 0, capsys.readouterr().err
    assert json.loads((out / "config.json").read_text())["beta"] == 3
