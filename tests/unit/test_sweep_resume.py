"""``vcemu sweep`` across crashes and reruns, without Ray: what is stored, what a rerun runs again, which
stored sweep a rerun may add to, and what a killed run leaves in its output directory.

Ray is replaced by :class:`FakeRay`, which runs each cell in this process when its result is asked for,
or fails the way Ray does (a crashed worker), or never finishes (for the backstop).
"""

from __future__ import annotations

import csv
import dataclasses
import json
import re
import resource
import shutil
import signal
import sys
import time
import types
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from coordinator import sweep
from coordinator.model import JobSpec
from coordinator.sweep import run_cell, sweep_main
from coordinator.sweep_report import write_reports
from workloads.swf import parse_record, write_swf

REPORTS = ("cells.csv", "degradation.csv", "table1_p300.csv", "table1_p300.png", "table2_p300.csv",
           "table2_p300.png", "fig1_p300.csv", "fig1.png")


class WorkerCrashedError(Exception):
    """What ``ray.get`` raises for a task whose worker died (kill -9, OOM killer)."""


class _Ref:
    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.fn, self.args = fn, args


class FakeRay(types.ModuleType):
    """The part of Ray that ``sweep.run_cells`` uses. ``crash``: algorithms whose worker dies;
    ``stall``: no task ever finishes; ``interrupt``: Ctrl-C reaches the driver at the first result (or, an int,
    after that many); ``on_get``: called before each result is computed."""

    def __init__(self, crash: Sequence[str] = (), *, stall: bool = False, interrupt: bool | int = False,
                 on_get: Callable[[int], None] | None = None) -> None:
        super().__init__("ray")
        self.crash, self.stall = set(crash), stall
        self.interrupt = (0 if interrupt is True else None) if isinstance(interrupt, bool) else interrupt
        self.on_get, self.gets = on_get, 0
        self.cancelled: list[_Ref] = []
        self.shut_down = False

    def is_initialized(self) -> bool:
        return True

    def remote(self, **_options: Any) -> Callable[[Callable[..., Any]], Any]:
        return lambda fn: types.SimpleNamespace(remote=lambda *args: _Ref(fn, args))

    def put(self, obj: Any) -> Any:
        return obj

    def wait(self, refs: list[_Ref], num_returns: int = 1, timeout: float | None = None) -> tuple[list, list]:
        return ([], refs) if self.stall else (refs[:num_returns], refs[num_returns:])

    def get(self, ref: _Ref) -> Any:
        self.gets += 1
        if self.on_get is not None:
            self.on_get(self.gets)
        if self.interrupt is not None and self.gets > self.interrupt:
            raise KeyboardInterrupt
        if ref.args[1] in self.crash:
            raise WorkerCrashedError("The worker died unexpectedly while executing this task.")
        return ref.fn(*ref.args)

    def cancel(self, ref: _Ref, force: bool = False) -> None:
        self.cancelled.append(ref)

    def shutdown(self) -> None:
        self.shut_down = True


@pytest.fixture
def fake_ray(monkeypatch: pytest.MonkeyPatch) -> Callable[..., FakeRay]:
    def install(*crash: str, **kw: Any) -> FakeRay:
        fake = FakeRay(crash, **kw)
        monkeypatch.setitem(sys.modules, "ray", fake)
        return fake
    return install


@pytest.fixture
def no_reports(monkeypatch: pytest.MonkeyPatch) -> None:
    """Skip the reports (matplotlib) where a test is about the cells."""
    monkeypatch.setattr("coordinator.sweep_report.write_reports", lambda rows, cfg, out: [])


def _argv(out: Path, *extra: str, algorithms: str = "fcfs,easy") -> list[str]:
    return ["--out", str(out), "--algorithms", algorithms, "--penalties", "300", "--traces", "1", "--jobs", "6",
            "--loads", "0.5", "--cell-timeout", "60", "--no-progress", *extra]


def _cell(out: Path, alg: str) -> Path:
    (path,) = (out / "cells").glob(f"*__{alg}__p300.json")
    return path


@contextmanager
def _file_size_limit(nbytes: int) -> Iterator[None]:
    """Writes past ``nbytes`` into any file fail (EFBIG), as a full disk or a kill would cut them short."""
    old = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, old[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, old)
        signal.signal(signal.SIGXFSZ, handler)


# ---- 1. infrastructure failures are not results ---------------------------------------------------------


def test_a_worker_crash_is_not_stored_and_a_rerun_runs_the_cell(tmp_path, capsys, fake_ray, no_reports):
    out = tmp_path / "sweep"
    fake_ray("easy")
    assert sweep_main(_argv(out)) == 1  # a cell of this run was lost: not a success
    err = capsys.readouterr().err
    assert "1 cell failed for infrastructure reasons and was not stored; run again to retry it" in err
    assert "WorkerCrashedError" in err
    assert not list((out / "cells").glob("*__easy__*"))
    assert json.loads(_cell(out, "fcfs").read_text())["status"] == "ok"

    fake_ray()
    assert sweep_main(_argv(out)) == 0
    assert "2 cells; 1 stored, 1 to run" in capsys.readouterr().err
    assert json.loads(_cell(out, "easy").read_text())["status"] == "ok"


def test_the_backstop_cancels_overdue_cells_without_storing_them(tmp_path, capsys, fake_ray, no_reports,
                                                                 monkeypatch):
    clock = iter(range(0, 10**9, 1000))  # every look at the clock is 1000 s later: past the backstop at once
    monkeypatch.setattr(sweep, "time", types.SimpleNamespace(monotonic=lambda: float(next(clock)),
                                                             perf_counter=time.perf_counter))
    fake = fake_ray(stall=True)
    assert sweep_main(_argv(out := tmp_path / "sweep")) == 1
    assert len(fake.cancelled) == 2
    assert not list((out / "cells").glob("*.json"))
    assert "2 cells failed for infrastructure reasons and were not stored" in capsys.readouterr().err


def test_a_rerun_runs_ray_failures_stored_by_an_older_vcemu_and_timeouts_under_a_smaller_limit(
        tmp_path, capsys, fake_ray, no_reports):
    out = tmp_path / "sweep"
    algs = "fcfs,easy,greedy,greedy-pmtn"
    fake_ray()
    assert sweep_main(_argv(out, algorithms=algs)) == 0
    base = {k: v for k, v in json.loads(_cell(out, "fcfs").read_text()).items()
            if k in ("cell", "trace", "group", "load", "penalty", "hosts", "jobs", "code", "settings")}
    stored = {  # what an older vcemu wrote for a killed worker (no wall_s: run_cell always sets it)
        "fcfs": {"status": "error", "error": "WorkerCrashedError: The worker died", "max_stretch": None},
        "easy": {"status": "timeout", "error": "exceeded 30 s", "wall_s": 30.5, "timeout_s": 30.0,
                 "max_stretch": None},
        "greedy": {"status": "timeout", "error": "exceeded 60 s", "wall_s": 60.2, "timeout_s": 60.0,
                   "max_stretch": None},
        "greedy-pmtn": {"status": "error", "error": "ValueError: bad plan", "wall_s": 0.1, "max_stretch": None},
    }
    for alg, rec in stored.items():
        _cell(out, alg).write_text(json.dumps({**base, "algorithm": alg, **rec}))
    assert sweep_main(_argv(out, algorithms=algs)) == 0
    assert "4 cells; 2 stored, 2 to run" in capsys.readouterr().err  # the Ray failure, and the 30 s timeout
    assert json.loads(_cell(out, "greedy").read_text())["status"] == "timeout"  # same limit: kept
    assert sweep_main(_argv(out, "--retry-failed", algorithms=algs)) == 0
    assert "4 cells; 2 stored, 2 to run" in capsys.readouterr().err
    assert all(json.loads(_cell(out, a).read_text())["status"] == "ok" for a in stored)


def test_memory_exhaustion_is_the_machines_failure_not_the_cells(monkeypatch):
    import coordinator.policies as policies

    real = policies.get_policy

    class Failing:
        def __init__(self, exc: BaseException) -> None:
            self._inner, self._exc = real("fcfs"), exc

        def __getattr__(self, name: str) -> Any:
            return getattr(self._inner, name)

        def decide(self, snap: Any, stim: Any) -> Any:
            raise self._exc

    jobs = [JobSpec("a", 0.0, 1, 1.0, 0.6, 100.0), JobSpec("b", 10.0, 1, 1.0, 0.6, 50.0)]
    monkeypatch.setattr(policies, "get_policy", lambda name: Failing(ValueError("bad plan")))
    r = run_cell(jobs, "fcfs", 0.0, 1)  # the policy's own, deterministic failure: a result
    assert r["status"] == "error" and r["error"] == "ValueError: bad plan" and "wall_s" in r
    monkeypatch.setattr(policies, "get_policy", lambda name: Failing(MemoryError()))
    with pytest.raises(MemoryError):  # raised, so that Ray reports it and the sweep leaves the cell unstored
        run_cell(jobs, "fcfs", 0.0, 1)


# ---- 2. the HPC2N trace file is part of the settings ----------------------------------------------------


def _swf(path: Path, run_time: int) -> Path:
    write_swf(path, [parse_record(f"{i} {100 * i} 0 {run_time} 2 -1 -1 2 60 -1 1 1 1 -1 -1 1 -1 -1")
                     for i in (1, 2, 3)], [" MaxNodes: 240"])
    return path


def test_another_hpc2n_file_is_refused_the_same_file_elsewhere_is_not(tmp_path, capsys, fake_ray, no_reports):
    a, b = _swf(tmp_path / "a.swf", 50), _swf(tmp_path / "b.swf", 70)
    out = tmp_path / "sweep"
    argv = ["--out", str(out), "--algorithms", "fcfs", "--penalties", "0", "--traces", "0", "--hpc2n-weeks", "0",
            "--no-progress"]
    fake_ray()
    assert sweep_main([*argv, "--hpc2n", str(a)]) == 0
    assert sweep_main([*argv, "--hpc2n", str(b)]) == 2  # same path or not, other jobs: other results
    assert ("other settings (the HPC2N file's contents (--hpc2n) differ from the stored sweep's); give the HPC2N file "
            "it was made with (--hpc2n) to resume it, or use another --out") \
        in capsys.readouterr().err
    shutil.copy(a, moved := tmp_path / "moved.swf")
    assert sweep_main([*argv, "--hpc2n", str(moved)]) == 0
    assert "1 stored, 0 to run" in capsys.readouterr().err


def _two_weeks(path: Path, run_time: int = 50) -> Path:
    """An SWF log of two 1-week segments with 3 jobs each."""
    write_swf(path, [parse_record(f"{i} {t} 0 {run_time} 2 -1 -1 2 60 -1 1 1 1 -1 -1 1 -1 -1")
                     for i, t in enumerate((100, 200, 300, 604_900, 605_000, 605_100), 1)], [" MaxNodes: 240"])
    return path


def test_a_sweep_is_extended_by_more_hpc2n_weeks_of_the_same_file(tmp_path, capsys, fake_ray, no_reports):
    """Each week depends on the HPC2N file alone: a rerun naming other weeks runs them beside the stored ones (the
    union, as for Lublin traces), where it was refused as "other settings (hpc2n_weeks)"; one naming none keeps the
    stored weeks, on the stored file while it is still the one they ran."""
    swf = _two_weeks(tmp_path / "log.swf")
    out = tmp_path / "sweep"
    argv = ["--out", str(out), "--algorithms", "fcfs", "--penalties", "0", "--hpc2n", str(swf), "--no-progress"]
    fake_ray()
    assert sweep_main([*argv, "--traces", "0", "--hpc2n-weeks", "0"]) == 0
    capsys.readouterr()
    assert sweep_main([*argv, "--traces", "0", "--hpc2n-weeks", "1"]) == 0
    err = capsys.readouterr().err
    assert "the stored sweep has more --hpc2n-weeks than this command names: this run covers their union " \
           "(--traces 0, --unscaled 0, --loads 0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9, --hpc2n-weeks 0,1)" in err, err
    assert "2 cells; 1 stored, 1 to run" in err, err
    assert json.loads((out / "config.json").read_text())["hpc2n_weeks"] == [0, 1]
    lublin = ["--traces", "1", "--loads", "0.5", "--hpc2n", str(tmp_path / "elsewhere.swf")]
    assert sweep_main([*argv[:-3], "--no-progress", *lublin]) == 0  # no weeks named: the stored file's
    err = capsys.readouterr().err
    assert "3 cells; 2 stored, 1 to run" in err and f"--hpc2n-weeks 0,1 of {swf})" in err, err
    assert json.loads((out / "config.json").read_text())["hpc2n"] == str(swf)
    _two_weeks(swf, run_time=70)  # the stored weeks' file is another now: refused, not run on it
    assert sweep_main([*argv[:-3], "--no-progress", *lublin]) == 2
    assert (f"vcemu sweep: the stored sweep's HPC2N weeks ran on {swf}, which is another file now; name them with "
            "--hpc2n-weeks and --hpc2n of the file they ran, or use another --out") in capsys.readouterr().err


def test_a_sweep_of_hpc2n_weeks_alone_is_resumed_naming_no_trace(tmp_path, capsys, fake_ray, no_reports):
    """``--traces 0`` with no weeks named resumes a stored sweep of HPC2N weeks (the run covers the stored traces);
    it was refused as "no trace to run" before the stored sweep was read. Into an empty --out it still is."""
    swf = _two_weeks(tmp_path / "log.swf")
    out = tmp_path / "sweep"
    argv = ["--out", str(out), "--algorithms", "fcfs", "--penalties", "0", "--traces", "0", "--no-progress"]
    fake_ray()
    assert sweep_main([*argv, "--hpc2n", str(swf), "--hpc2n-weeks", "0,1"]) == 0
    capsys.readouterr()
    assert sweep_main(argv) == 0
    err = capsys.readouterr().err
    assert "2 cells; 2 stored, 0 to run" in err and f"--hpc2n-weeks 0,1 of {swf})" in err, err
    assert sweep_main([*argv[:1], str(tmp_path / "empty"), *argv[2:]]) == 2
    assert "vcemu sweep: no trace to run: --traces 0, --unscaled 0 and --hpc2n-weeks" in capsys.readouterr().err
    assert not (tmp_path / "empty").exists()


def test_hpc2n_weeks_that_are_all_skipped_leave_no_trace_and_are_refused(tmp_path, capsys, fake_ray):
    """Weeks with fewer than 2 jobs are skipped: when every week named is, the grid is empty, which ran as a sweep
    of "0 cells ... in 0.0 s" with tables of nan, exit status 0."""
    swf = tmp_path / "sparse.swf"
    write_swf(swf, [parse_record(f"{i} {t} 0 50 2 -1 -1 2 60 -1 1 1 1 -1 -1 1 -1 -1")
                    for i, t in ((1, 100), (2, 1_300_000), (3, 1_300_100))], [" MaxNodes: 240"])  # weeks: 1, 0, 2 jobs
    out = tmp_path / "sweep"
    fake_ray()
    argv = ["--out", str(out), "--algorithms", "fcfs", "--penalties", "0", "--traces", "0", "--hpc2n", str(swf),
            "--no-progress"]
    assert sweep_main([*argv, "--hpc2n-weeks", "0,1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == ("vcemu sweep: no trace to run: every week of --hpc2n-weeks '0,1' was skipped (fewer than 2 "
                       "jobs), and --traces and --unscaled give none"), err
    assert not (out / "config.json").exists() and not list(out.glob("*.csv"))
    assert sweep_main([*argv, "--hpc2n-weeks", "0-2"]) == 0  # week 2 has two jobs


# ---- 3. config.json ------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["", '{"traces": 1, "jobs"', "[1, 2]"])
def test_an_unreadable_config_is_a_clear_error_naming_the_file(tmp_path, capsys, text, no_reports):
    out = tmp_path / "sweep"
    out.mkdir()
    (out / "config.json").write_text(text)
    assert sweep_main(_argv(out)) == 2  # refused, no traceback
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"vcemu sweep: {out / 'config.json'}: ")
    assert (out / "config.json").read_text() == text  # left for the user to look at


def test_a_config_write_cut_short_leaves_the_previous_config_whole(tmp_path, capsys, fake_ray, no_reports):
    out = tmp_path / "sweep"
    fake_ray()
    assert sweep_main(_argv(out)) == 0
    before = (out / "config.json").read_bytes()
    capsys.readouterr()
    with _file_size_limit(64):
        assert sweep_main(_argv(out, "--penalties", "0,300")) == 1  # a new penalty: the config is written again
    err = capsys.readouterr().err
    assert f"vcemu sweep: cannot write in {out} (File too large: " in err and "no cell run" in err
    assert "Traceback" not in err
    assert (out / "config.json").read_bytes() == before
    assert sorted(p.name for p in out.iterdir()) == [".lock", "cells", "config.json"]  # and no temporary file


# ---- 4. reports ----------------------------------------------------------------------------------------


def test_a_killed_run_leaves_cells_and_config_but_no_stale_reports(tmp_path, fake_ray):
    out = tmp_path / "sweep"
    fake_ray()
    assert sweep_main(_argv(out, "--loads", "0.7", algorithms="fcfs,greedy-pmtn")) == 0
    assert all((out / name).exists() for name in REPORTS)
    (out / "notes.txt").write_text("mine")
    fake_ray(interrupt=True)
    # interrupted (Ctrl-C) while its one new cell runs
    assert sweep_main(_argv(out, "--loads", "0.7", algorithms="fcfs,greedy-pmtn,easy")) == 130
    assert sorted(p.name for p in out.iterdir()) == [".lock", "cells", "config.json", "notes.txt"]
    assert len(list((out / "cells").glob("*.json"))) == 2
    assert json.loads((out / "config.json").read_text())["algorithms"] == ["fcfs", "easy", "greedy-pmtn"]


def test_a_ray_cluster_that_cannot_be_joined_leaves_the_folder_as_it_was(tmp_path, capsys, fake_ray, monkeypatch):
    """Joining Ray comes before anything in the folder changes: a refused --address (one line, status 2) leaves
    the stored sweep's reports and config, not a folder stripped of its tables until the next good run."""
    out = tmp_path / "sweep"
    fake_ray()
    assert sweep_main(_argv(out)) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    assert {"cells.csv", "degradation.csv", "table1_p300.csv", "config.json"} <= set(before)

    def refused(address, workers):
        raise SystemExit(f"vcemu sweep: --address {address}: no Ray cluster answers there")

    monkeypatch.setattr(sweep, "ray_init", refused)
    assert sweep_main(_argv(out, "--address", "10.0.0.9:6379", algorithms="fcfs,easy,greedy")) == 2
    assert "--address 10.0.0.9:6379: no Ray cluster answers there" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before


@pytest.mark.parametrize(("limit", "name"), [(100, "cells.csv"), (4096, "table1_p300.png")])
def test_a_report_write_cut_short_leaves_the_previous_file_whole(tmp_path, limit, name):
    rows = [{"cell": f"t__{a}__p300", "trace": "t", "group": "scaled", "load": 0.7, "algorithm": a,
             "penalty": 300.0, "status": "ok", "max_stretch": ms, "counting": "x"}
            for a, ms in (("fcfs", 4.0), ("greedy-pmtn", 2.0))]
    cfg = {"algorithms": ["fcfs", "greedy-pmtn"], "penalties": [300.0], "traces": 0, "loads": [0.7]}
    old = {"cells.csv": b"old cells\n", "table1_p300.png": b"old png"}
    for n, data in old.items():
        (tmp_path / n).write_bytes(data)
    with _file_size_limit(limit), pytest.raises(OSError):
        write_reports(rows, cfg, tmp_path)
    assert (tmp_path / name).read_bytes() == old[name]
    assert not list(tmp_path.glob("*.tmp")) and not list(tmp_path.glob(".*.tmp"))


# ---- 5. values that would give two cells one id ---------------------------------------------------------


@pytest.mark.parametrize(("argv", "message"), [
    (["--loads", "0.851,0.852"], r"--loads: 0\.851 and 0\.852 are both l0\.85 in cell ids"),
    (["--loads", "0.5,0.5"], r"--loads: 0\.5 and 0\.5"),
    (["--penalties", "1234567,1234568"], r"--penalties: 1234567\.0 and 1234568\.0 are both p1\.23457e\+06 in"),
])
def test_values_that_share_an_id_are_refused(argv, message):
    with pytest.raises(SystemExit, match=message):
        sweep.config_from_args(sweep._parse_args(argv))


def test_a_penalty_that_shares_an_id_with_a_stored_one_is_refused(tmp_path, capsys, fake_ray, no_reports):
    out = tmp_path / "sweep"
    fake_ray()
    assert sweep_main(_argv(out)) == 0
    capsys.readouterr()
    assert sweep_main(_argv(out, "--penalties", "300.0000001")) == 2
    assert re.search(r"--penalties .*300\.0 and 300\.0000001 are both p300 in", capsys.readouterr().err)
    assert json.loads((out / "config.json").read_text())["penalties"] == [300.0]


# ---- 6. the code that computed a cell ------------------------------------------------------------------------------


def test_config_and_cells_record_the_code(tmp_path, fake_ray, no_reports):
    from vcemu.provenance import code_version

    out = tmp_path / "sweep"
    fake_ray()
    assert sweep_main(_argv(out)) == 0
    assert json.loads((out / "config.json").read_text())["code"] == code_version()
    assert json.loads(_cell(out, "fcfs").read_text())["code"] == code_version()["source_sha256"]


@pytest.mark.parametrize("record", ["none", "other"])
def test_cells_of_other_code_are_run_again_and_never_reported(tmp_path, capsys, fake_ray, record):
    """An older vcemu's cells (no fingerprint) or another version's: run again, whatever their status, and
    left out of the reports when they cannot be (--report-only)."""
    out = tmp_path / "sweep"
    fake_ray()
    assert sweep_main(_argv(out)) == 0
    this_code = json.loads(_cell(out, "fcfs").read_text()).get("code")
    path = _cell(out, "easy")
    cell = json.loads(path.read_text())
    cell.pop("code", None)
    if record == "other":
        cell["code"] = "0" * 64
    path.write_text(json.dumps({**cell, "max_stretch": 12345.0}))  # what that code computed
    capsys.readouterr()
    assert sweep_main(_argv(out, "--report-only")) == 1  # a cell is missing from the reports
    err = capsys.readouterr().err
    assert "1 stored cell was computed by other code" in err and "the reports leave it out" in err
    assert "2 cells; 1 stored, 1 missing" in err
    assert [r["algorithm"] for r in csv.DictReader((out / "cells.csv").open())] == ["fcfs"]
    assert sweep_main(_argv(out)) == 0
    err = capsys.readouterr().err
    assert "2 cells; 1 stored, 1 to run" in err and "it is run again" in err
    again = json.loads(path.read_text())
    assert again["max_stretch"] != 12345.0 and again["code"] == this_code
    assert [r["algorithm"] for r in csv.DictReader((out / "cells.csv").open())] == ["fcfs", "easy"]
    assert sweep_main(_argv(out)) == 0
    assert "2 cells; 2 stored, 0 to run" in capsys.readouterr().err


# ---- 7. one sweep at a time in an --out; cells carry their settings -------------------------------------------


@contextmanager
def _held(path: Path) -> Iterator[None]:
    """An exclusive flock on ``path``, as another sweep running into that --out holds it."""
    import fcntl
    import os

    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.write(fd, b"4242\n")
        yield
    finally:
        os.close(fd)


def test_a_second_sweep_into_an_out_in_use_is_refused_and_touches_nothing(tmp_path, capsys, fake_ray, no_reports):
    """Two sweeps started at once into a new --out: the one that comes second is refused in one line (status 2)
    before it reads or writes anything, the first one's temporary cell files included."""
    out = tmp_path / "sweep"
    (out / "cells").mkdir(parents=True)
    (out / "cells" / ".x__fcfs__p300.json.abc.tmp").write_text("{")  # the first run's write in progress
    fake_ray()
    with _held(out / ".lock"):
        assert sweep_main(_argv(out, "--jobs", "5")) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line == (f"vcemu sweep: another vcemu sweep (pid 4242) is using {out}; wait for it to end, or use "
                    "another --out")
    assert sorted(p.name for p in out.rglob("*")) == [".lock", ".x__fcfs__p300.json.abc.tmp", "cells"]
    assert sweep_main(_argv(out)) == 0  # once it has ended


def test_the_lock_is_held_from_the_config_check_to_the_end(tmp_path, capsys, fake_ray, no_reports, monkeypatch):
    """The race of two sweeps into a new --out: the second starts while the first joins Ray (after its config check,
    before it writes its config), or while its cells run: refused, and every cell is of the first's settings."""
    out = tmp_path / "sweep"
    second: list[int] = []
    started: list[bool] = []
    real_init = sweep.ray_init

    def slow_init(address, workers):  # joining Ray takes seconds: the second run starts meanwhile
        if not started:
            started.append(True)
            second.append(sweep_main(_argv(out, "--jobs", "5")))
        real_init(address, workers)

    monkeypatch.setattr(sweep, "ray_init", slow_init)
    fake_ray(on_get=lambda n: second.append(sweep_main(_argv(out, "--max-jobs", "4"))) if n == 1 else None)
    assert sweep_main(_argv(out)) == 0
    assert second == [2, 2] and capsys.readouterr().err.count("another vcemu sweep") == 2
    assert {json.loads(p.read_text())["jobs"] for p in (out / "cells").glob("*.json")} == {6}
    assert json.loads((out / "config.json").read_text())["jobs"] == 6


def test_a_cell_stored_with_other_settings_is_run_again_and_left_out_of_the_reports(tmp_path, capsys, fake_ray):
    """A cell another sweep wrote under the same id with other settings (--jobs 5 here; cell ids leave --jobs,
    --max-jobs, --hosts and --host-memory-gb out) is never taken for this sweep's."""
    out, other = tmp_path / "sweep", tmp_path / "other"
    fake_ray()
    assert sweep_main(_argv(out)) == 0
    assert sweep_main(_argv(other, "--jobs", "5")) == 0
    shutil.copy(_cell(other, "easy"), _cell(out, "easy"))
    capsys.readouterr()
    assert sweep_main(_argv(out, "--report-only")) == 1
    err = capsys.readouterr().err
    assert "1 stored cell was computed with other settings than this sweep's" in err
    assert "the reports leave it out" in err and "2 cells; 1 stored, 1 missing" in err
    assert [r["algorithm"] for r in csv.DictReader((out / "cells.csv").open())] == ["fcfs"]
    assert sweep_main(_argv(out)) == 0
    err = capsys.readouterr().err
    assert "2 cells; 1 stored, 1 to run" in err and "it is run again" in err
    assert json.loads(_cell(out, "easy").read_text())["jobs"] == 6
    assert [r["jobs"] for r in csv.DictReader((out / "cells.csv").open())] == ["6", "6"]


def test_the_settings_digest_covers_what_cell_ids_leave_out():
    cfg = sweep.config_from_args(sweep._parse_args(["--traces", "1", "--loads", "0.5"]))
    cfg["hpc2n_sha256"] = None
    (tr,) = sweep.build_traces({**cfg, "jobs": 6})
    base = sweep.cell_settings({**cfg, "jobs": 6}, tr, 300.0)
    assert sweep.cell_settings({**cfg, "jobs": 6, "workers": 1, "cell_timeout": 1.0}, tr, 300.0) == base
    for change in ({"jobs": 7}, {"max_jobs": 5}, {"job_scale": 2.0}):
        assert sweep.cell_settings({**cfg, "jobs": 6, **change}, tr, 300.0) != base, change
    for other in (dataclasses.replace(tr, hosts=64), dataclasses.replace(tr, host_memory_gb=4.0),
                  dataclasses.replace(tr, load=0.501)):
        assert sweep.cell_settings({**cfg, "jobs": 6}, other, 300.0) != base
    assert sweep.cell_settings({**cfg, "jobs": 6}, tr, 300.0000001) != base  # both p300 in the id


# ---- 8. unusable --out, a cell that cannot be stored, Ctrl-C -------------------------------------------------------


def test_an_out_that_cannot_hold_results_is_refused_in_one_line(tmp_path, capsys, fake_ray, no_reports):
    fake_ray()  # (refused before Ray: should it not be, no real one starts)
    (afile := tmp_path / "afile").write_text("x")
    assert sweep_main(_argv(afile)) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"vcemu sweep: --out {afile}: cannot write results there: ")
    (tmp_path / "sweep").mkdir()
    (tmp_path / "sweep" / "cells").write_text("x")  # OUT is fine, OUT/cells is not a directory
    assert sweep_main(_argv(tmp_path / "sweep")) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"vcemu sweep: --out {tmp_path / 'sweep' / 'cells'}: cannot write results there: ")


def test_a_cell_that_cannot_be_stored_stops_the_run_cleanly(tmp_path, capsys, fake_ray, monkeypatch):
    """A full disk (or an immutable cells/) at the second cell: the run stops with one line naming the file and
    the error, cancels the cell still running, keeps the first one, and a rerun resumes."""
    import errno

    import vcemu.outputs as outputs

    real, writes = outputs.write_json, []

    def full_disk(path, obj, **kw):
        writes.append(path)
        if Path(path).parent.name == "cells" and sum(Path(p).parent.name == "cells" for p in writes) == 2:
            raise OSError(errno.ENOSPC, "No space left on device", str(path) + ".tmp")
        return real(path, obj, **kw)

    out = tmp_path / "sweep"
    fake = fake_ray()
    monkeypatch.setattr(outputs, "write_json", full_disk)
    assert sweep_main(_argv(out, algorithms="fcfs,easy,greedy")) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    easy = out / "cells" / "lublin-s1-l0.50__easy__p300.json"
    assert f"vcemu sweep: cannot store {easy} (No space left on device); stopped: 1 of 3 cells stored" in err
    assert len(fake.cancelled) == 1 and fake.shut_down
    assert [p.name.split("__")[1] for p in (out / "cells").glob("*.json")] == ["fcfs"]
    monkeypatch.setattr(outputs, "write_json", real)
    assert sweep_main(_argv(out, algorithms="fcfs,easy,greedy")) == 0
    assert "3 cells; 1 stored, 2 to run" in capsys.readouterr().err


def test_ctrl_c_says_what_is_stored_shuts_ray_down_and_exits_130(tmp_path, capsys, fake_ray, no_reports):
    out = tmp_path / "sweep"
    fake = fake_ray(interrupt=1)  # after the first cell's result
    assert sweep_main(_argv(out, algorithms="fcfs,easy,greedy")) == 130
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == "vcemu sweep: interrupted: 1 of 3 cells stored; run the same command again to resume"
    assert "Traceback" not in err and fake.shut_down
    fake_ray()
    assert sweep_main(_argv(out, algorithms="fcfs,easy,greedy")) == 0
    assert "3 cells; 1 stored, 2 to run" in capsys.readouterr().err


def test_sigterm_stops_a_sweep_as_ctrl_c_does(tmp_path, capsys, fake_ray, no_reports):
    import os

    out = tmp_path / "sweep"
    fake = fake_ray(on_get=lambda n: os.kill(os.getpid(), signal.SIGTERM) if n == 2 else None)
    before = signal.getsignal(signal.SIGTERM)
    assert sweep_main(_argv(out, algorithms="fcfs,easy,greedy")) == 130
    assert capsys.readouterr().err.splitlines()[-1].startswith("vcemu sweep: interrupted: 1 of 3 cells stored")
    assert fake.shut_down and signal.getsignal(signal.SIGTERM) is before  # the caller's handler is back


# ---- 9. --report-only reads a sweep ------------------------------------------------------------------------------


def test_report_only_of_a_folder_without_a_sweep_creates_nothing(tmp_path, capsys):
    for out in (tmp_path / "new", tmp_path):
        assert sweep_main(_argv(out, "--report-only")) == 2
        (line,) = capsys.readouterr().err.splitlines()
        assert line == f"vcemu sweep: --report-only: {out} holds no sweep (no config.json, no stored cells); " \
                       "nothing to report"
    assert not list(tmp_path.iterdir())


def test_report_only_of_cells_without_a_config_that_names_no_trace_is_refused(tmp_path, capsys, fake_ray,
                                                                             no_reports):
    """Stored cells, no config.json and ``--traces 0``: it reported "0 cells; 0 stored", wrote empty tables and
    exited 0, leaving the stored cells out (review)."""
    out = tmp_path / "sweep"
    fake_ray()  # (asked for and never installed, the first run started a real local Ray: CI once timed it out)
    assert sweep_main(_argv(out, algorithms="fcfs")) == 0
    (out / "config.json").unlink()
    capsys.readouterr()
    assert sweep_main([*_argv(out, "--report-only", algorithms="fcfs"), "--traces", "0"]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "vcemu sweep: --report-only: no trace to report: the command (there is no config.json) names none; give the "
        "--traces, --unscaled or --hpc2n-weeks its cells ran")
    assert sweep_main(_argv(out, "--report-only", algorithms="fcfs")) == 0  # naming them reports the cell


def test_report_only_words_what_it_leaves_out_and_exits_1_when_cells_are_missing(tmp_path, capsys, fake_ray):
    out = tmp_path / "sweep"
    fake_ray()
    assert sweep_main(_argv(out, algorithms="fcfs,easy,greedy")) == 0
    _cell(out, "easy").write_text("{bad")
    _cell(out, "greedy").unlink()
    config = (out / "config.json").read_bytes()
    capsys.readouterr()
    assert sweep_main(_argv(out, "--report-only", algorithms="fcfs,easy,greedy,greedy-pmtn")) == 1
    err = capsys.readouterr().err
    assert ", 2 to run" not in err and "it is run again" not in err
    assert err.count("unreadable cell") == 1 and "unreadable cell (" in err and "; the reports leave it out" in err
    # the stored sweep's algorithms, not the flag's: greedy-pmtn was never part of it
    assert "3 cells; 1 stored, 2 missing (the reports leave them out; run without --report-only to run them)" in err
    assert (out / "config.json").read_bytes() == config  # settings never run are not recorded
    assert [r["algorithm"] for r in csv.DictReader((out / "cells.csv").open())] == ["fcfs"]


def test_report_only_takes_the_stored_sweeps_settings(tmp_path, capsys, fake_ray):
    """``--report-only`` with flags other than the sweep's (their defaults, say) was refused: "holds a sweep with
    other settings ...; use another --out", wrong advice for a command that runs nothing (diff review)."""
    out = tmp_path / "sweep"
    fake_ray()
    assert sweep_main(_argv(out)) == 0
    capsys.readouterr()
    assert sweep_main(["--out", str(out), "--report-only", "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert "other settings" not in err and "2 cells; 2 stored" in err, err
    assert sorted(r["algorithm"] for r in csv.DictReader((out / "cells.csv").open())) == ["easy", "fcfs"]


# ---- 10. timeouts, duplicate weeks, resuming with fewer algorithms ---------------------------------------------


def test_a_timeout_is_run_again_under_a_larger_limit_than_it_had_not_than_it_ran():
    """A cell stopped at a 0.001 s limit can have run 1.38 s (the limit is checked at each decision): a rerun at
    1 s has a larger limit, and runs it."""
    code, settings = "c" * 64, "s" * 16
    stored = {"status": "timeout", "wall_s": 1.38, "timeout_s": 0.001, "code": code, "settings": settings}
    assert sweep._to_run(stored, 1.0, False, code, settings)
    assert not sweep._to_run(stored, 0.001, False, code, settings)
    jobs = [JobSpec("a", 0.0, 1, 1.0, 0.6, 100.0), JobSpec("b", 10.0, 1, 1.0, 0.6, 50.0)]
    assert run_cell(jobs, "fcfs", 0.0, 1, timeout_s=0.0)["timeout_s"] == 0.0


def test_a_week_named_twice_is_refused():
    with pytest.raises(SystemExit, match=r"--hpc2n-weeks: week 10 given twice in '10,10-11'"):
        sweep._weeks("10,10-11")
    with pytest.raises(SystemExit, match=r"weeks 3, 4 given twice"):
        sweep._weeks("2-4,3-5")


def test_a_resume_with_fewer_algorithms_says_it_runs_the_union(tmp_path, capsys, fake_ray, no_reports):
    out = tmp_path / "sweep"
    fake_ray()
    assert sweep_main(_argv(out)) == 0
    capsys.readouterr()
    assert sweep_main(_argv(out, "--penalties", "0", algorithms="fcfs")) == 0
    err = capsys.readouterr().err
    assert "= 4 cells; 2 stored, 2 to run" in err
    assert (f"{out} holds a sweep of more algorithms or penalties than this command names: this run covers their "
            "union, fcfs, easy at penalties 0, 300 (3 cells more than the command's own)") in err
    assert sweep_main(_argv(out, "--penalties", "0,300")) == 0
    assert "holds a sweep of more" not in capsys.readouterr().err  # the command names all of it


def test_a_finished_sweep_is_extended_by_more_traces_or_loads_and_reordered_loads_are_the_same(
        tmp_path, capsys, fake_ray, no_reports):
    """Traces depend on their seed and load alone: a rerun with more --traces or --loads runs the new ones beside the
    stored (the union, as for algorithms), where it was refused as "other settings (traces)"; and --loads 0.7,0.5 is
    the sweep of 0.5,0.7 (refused as "(loads)"; reproducibility review)."""
    out = tmp_path / "sweep"
    fake_ray()
    assert sweep_main(_argv(out)) == 0  # 1 trace at load 0.5, 2 algorithms: 2 cells
    capsys.readouterr()
    assert sweep_main(_argv(out, "--traces", "2", "--loads", "0.5,0.7")) == 0
    assert "= 8 cells; 2 stored, 6 to run" in capsys.readouterr().err
    assert sweep_main(_argv(out, "--loads", "0.7,0.5", "--traces", "2")) == 0
    assert "= 8 cells; 8 stored, 0 to run" in capsys.readouterr().err
    assert sweep_main(_argv(out)) == 0  # the first command again: the union, said, and nothing to run
    err = capsys.readouterr().err
    assert "the stored sweep has more --traces, --loads than this command names: this run covers their union " \
           "(--traces 2, --unscaled 0, --loads 0.5,0.7)" in err and "8 stored, 0 to run" in err, err
    assert json.loads((out / "config.json").read_text())["loads"] == [0.5, 0.7]
    assert sweep_main(_argv(out, "--jobs", "7")) == 2  # what changes every trace still refuses
    assert "other settings (--jobs 6 stored, 7 now); give --jobs 6 to resume it" in capsys.readouterr().err


def test_extending_a_sweep_keeps_its_cells_apart_and_adds_only_loads_of_lublin_traces(
        tmp_path, capsys, fake_ray, no_reports):
    """Diff review of the union: a load sharing a cell id with a stored one (0.501 and 0.5 are both l0.50) is refused
    (its cells overwrote the stored ones and were reported twice); a sweep of no Lublin trace adds none of the nine
    default loads its config lists; loads in another order are not "more"."""
    out = tmp_path / "sweep"
    fake_ray()
    assert sweep_main(_argv(out)) == 0
    capsys.readouterr()
    assert sweep_main(_argv(out, "--loads", "0.501")) == 2
    assert "--loads (with the stored sweep's): 0.5 and 0.501 are both l0.50 in cell ids" in capsys.readouterr().err
    unscaled = tmp_path / "unscaled"
    assert sweep_main(_argv(unscaled, "--traces", "0", "--unscaled", "1")) == 0
    capsys.readouterr()
    assert sweep_main(_argv(unscaled, "--unscaled", "1")) == 0  # 1 Lublin trace at 0.5 beside the unscaled one
    err = capsys.readouterr().err
    assert "2 traces x 2 algorithms x 1 penalties = 4 cells; 2 stored, 2 to run" in err, err
    both = tmp_path / "both"
    assert sweep_main(_argv(both, "--loads", "0.5,0.7")) == 0
    capsys.readouterr()
    assert sweep_main(_argv(both, "--loads", "0.7,0.5")) == 0
    err = capsys.readouterr().err
    assert "has more" not in err and "4 stored, 0 to run" in err, err


def test_report_only_warns_when_the_hpc2n_file_is_not_the_one_the_cells_ran(tmp_path, capsys, fake_ray, no_reports):
    """A sweep whose HPC2N file has changed since: --report-only reports the stored cells, and now says the file at
    that path is another (it said nothing; a rerun is refused by the file's digest)."""
    trace = _swf(tmp_path / "a.swf", 50)
    out = tmp_path / "sweep"
    argv = ["--out", str(out), "--algorithms", "fcfs", "--penalties", "0", "--traces", "0", "--hpc2n-weeks", "0",
            "--hpc2n", str(trace), "--no-progress"]
    fake_ray()
    assert sweep_main(argv) == 0
    assert sweep_main(["--out", str(out), "--report-only", "--no-progress"]) == 0
    assert "warning" not in capsys.readouterr().err
    _swf(trace, 70)
    assert sweep_main(["--out", str(out), "--report-only", "--no-progress"]) == 0
    assert f"warning: {trace} is not the HPC2N file the stored cells ran" in capsys.readouterr().err
    trace.unlink()
    assert sweep_main(["--out", str(out), "--report-only", "--no-progress"]) == 2  # no trace to report on
    err = capsys.readouterr().err
    assert "cannot be read now" in err and "the reports are of" not in err, err


def test_a_sweep_whose_cells_all_time_out_still_reports_and_hints(tmp_path, capsys, fake_ray, monkeypatch):
    """--cell-timeout 0.001 on every cell: the reports that have data, the summary and the --retry-failed hint are
    written, no traceback; --report-only too."""
    def timed_out(specs, algorithm, penalty, hosts, timeout_s, host_memory_gb):
        return run_cell(specs, algorithm, penalty, hosts, timeout_s=0.0, host_memory_gb=host_memory_gb)

    monkeypatch.setattr(sweep, "_remote_run_cell", timed_out)
    out = tmp_path / "sweep"
    fake_ray()
    argv = _argv(out, "--loads", "0.7", algorithms="fcfs,greedy-pmtn")
    assert sweep_main(argv) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and "table1_p300.png not drawn" in err
    assert "2 cells (2 timed out or failed;" in err and "--retry-failed runs them again" in err
    assert (out / "table1_p300.csv").exists() and (out / "cells.csv").exists()
    assert sweep_main([*argv, "--report-only"]) == 0  # every cell is stored: the reports cover them all
    assert "Traceback" not in capsys.readouterr().err


def test_an_out_on_a_file_system_without_locks_is_used_with_a_warning(tmp_path, capsys, monkeypatch) -> None:
    """NFS without lockd answers flock with ENOLCK: sweeps ran there before the lock existed, and still do, with
    a warning that a second sweep at the same time would not be noticed (the diff review)."""
    import errno
    import fcntl

    def no_locks(_fd: int, _op: int) -> None:
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    with sweep.out_lock(tmp_path):
        pass
    assert "cannot lock" in capsys.readouterr().err

    def refused(_fd: int, _op: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(fcntl, "flock", refused)
    with pytest.raises(SystemExit, match="cannot lock"), sweep.out_lock(tmp_path):
        pass


def test_a_rerun_with_another_result_setting_is_told_the_stored_values_that_resume_it(tmp_path, capsys, fake_ray):
    """README walk-through: ``--traces 0`` on a sweep stored with ``--jobs 6`` said "other settings (jobs); use
    another --out", leaving the user to find the flag and its stored value."""
    out = tmp_path / "sweep"
    fake_ray()
    assert sweep_main(_argv(out)) == 0
    capsys.readouterr()
    assert sweep_main(["--out", str(out), "--traces", "0", "--seed", "4", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert (f"vcemu sweep: {out} holds a sweep with other settings (--jobs 6 stored, 1000 now; --seed 1 stored, "
            "4 now); give --jobs 6, --seed 1 to resume it, or use another --out") in err, err
    assert sweep_main(["--out", str(out), "--traces", "0", "--jobs", "6", "--max-jobs", "3", "--job-scale", "0.1",
                       "--no-progress"]) == 2  # (a stored None is left out, not given; a float exactly)
    assert ("(--max-jobs none stored, 3 now; --job-scale 1.0 stored, 0.1 now); give no --max-jobs, --job-scale "
            "1.0 to resume it") in capsys.readouterr().err
    assert sweep_main(["--out", str(out), "--traces", "0", "--jobs", "6", "--algorithms", "fcfs,easy", "--penalties",
                       "300", "--no-progress"]) == 0
    capsys.readouterr()
    # naming neither --algorithms nor --penalties resumes the stored ones, not the defaults' nine and 0,300
    # (reproducibility review: such a rerun ran 18 cells where 2 were stored, and changed the best on each trace)
    assert sweep_main(["--out", str(out), "--traces", "0", "--jobs", "6", "--no-progress"]) == 0
    # the closing line tells the cells run now from those stored (it gave the run's time for all of them)
    assert "2 cells (0 timed out or failed; none run now, 2 stored by earlier runs)" in capsys.readouterr().err
    assert sweep_main(_argv(out, algorithms="fcfs,easy,greedy")) == 0
    assert "3 cells (0 timed out or failed; 1 run now in " in capsys.readouterr().err


def test_a_rerun_says_which_library_versions_its_stored_cells_came_from(tmp_path, capsys, fake_ray, no_reports):
    """Reproducibility review: a resume compares the source alone and rewrote config.json with this run's library
    versions, so cells kept from another numpy passed for this one's: it says so now."""
    out = tmp_path / "sweep"
    fake_ray()
    assert sweep_main(_argv(out)) == 0
    conf = json.loads((out / "config.json").read_text())
    conf["code"]["libraries"]["numpy"] = "1.0.0"
    (out / "config.json").write_text(json.dumps(conf))
    capsys.readouterr()
    assert sweep_main(_argv(out)) == 0
    err = capsys.readouterr().err
    assert "vcemu sweep: note: the run that last wrote" in err and "numpy 1.0.0, now" in err, err
    assert sweep_main(_argv(out)) == 0  # (this run wrote config.json again: the same versions, nothing said)
    assert "note:" not in capsys.readouterr().err


def test_reports_cut_short_by_a_full_disk_are_all_removed(tmp_path, capsys, fake_ray, monkeypatch):
    """Storage-fault review: on a disk that filled while the reports were written, cells.csv, degradation.csv and a
    table1 CSV stayed without the others, and the run said it "wrote no reports". A folder holds all of a run's
    reports or none; --report-only writes them once there is room."""
    import errno
    import os

    from coordinator import sweep_report

    out = tmp_path / "sweep"
    fake_ray()
    real, written = sweep_report.write_text, []

    def fills_up(path, text):  # type: ignore[no-untyped-def]
        if len(written) == 2:  # (the third report)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        written.append(path)
        return real(path, text)

    monkeypatch.setattr(sweep_report, "write_text", fills_up)
    sweep_main(_argv(out))
    err = capsys.readouterr()
    assert "cannot write the reports in" in err.err and "wrote no reports" in err.err + err.out
    assert len(written) == 2 and not [p for pattern in sweep_report.REPORT_PATTERNS for p in out.glob(pattern)]
    monkeypatch.setattr(sweep_report, "write_text", real)
    assert sweep_main(_argv(out, "--report-only")) == 0
    assert all((out / name).exists() for name in ("cells.csv", "degradation.csv", "table1_p300.csv", "fig1.png"))
