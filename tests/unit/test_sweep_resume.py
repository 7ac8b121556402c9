"""``vcemu sweep`` across crashes and reruns, without Ray: what is stored, what a rerun runs again, which
stored sweep a rerun may add to, and what a killed run leaves in its output directory.

Ray is replaced by :class:`FakeRay`, which runs each cell in this process when its result is asked for,
or fails the way Ray does (a crashed worker), or never finishes (for the backstop).
"""

from __future__ import annotations

import csv
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
    ``stall``: no task ever finishes; ``interrupt``: the driver is killed at the first result."""

    def __init__(self, crash: Sequence[str] = (), *, stall: bool = False, interrupt: bool = False) -> None:
        super().__init__("ray")
        self.crash, self.stall, self.interrupt = set(crash), stall, interrupt
        self.cancelled: list[_Ref] = []

    def is_initialized(self) -> bool:
        return True

    def remote(self, **_options: Any) -> Callable[[Callable[..., Any]], Any]:
        return lambda fn: types.SimpleNamespace(remote=lambda *args: _Ref(fn, args))

    def put(self, obj: Any) -> Any:
        return obj

    def wait(self, refs: list[_Ref], num_returns: int = 1, timeout: float | None = None) -> tuple[list, list]:
        return ([], refs) if self.stall else (refs[:num_returns], refs[num_returns:])

    def get(self, ref: _Ref) -> Any:
        if self.interrupt:
            raise KeyboardInterrupt
        if ref.args[1] in self.crash:
            raise WorkerCrashedError("The worker died unexpectedly while executing this task.")
        return ref.fn(*ref.args)

    def cancel(self, ref: _Ref, force: bool = False) -> None:
        self.cancelled.append(ref)


@pytest.fixture
def fake_ray(monkeypatch: pytest.MonkeyPatch) -> Callable[..., FakeRay]:
    def install(*crash: str, **kw: bool) -> FakeRay:
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
            if k in ("cell", "trace", "group", "load", "penalty", "hosts", "jobs", "code")}
    stored = {  # what an older vcemu wrote for a killed worker (no wall_s: run_cell always sets it)
        "fcfs": {"status": "error", "error": "WorkerCrashedError: The worker died", "max_stretch": None},
        "easy": {"status": "timeout", "error": "exceeded 30 s", "wall_s": 30.5, "max_stretch": None},
        "greedy": {"status": "timeout", "error": "exceeded 60 s", "wall_s": 60.2, "max_stretch": None},
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
    assert "other settings (hpc2n_sha256)" in capsys.readouterr().err
    shutil.copy(a, moved := tmp_path / "moved.swf")
    assert sweep_main([*argv, "--hpc2n", str(moved)]) == 0
    assert "1 stored, 0 to run" in capsys.readouterr().err


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


def test_a_config_write_cut_short_leaves_the_previous_config_whole(tmp_path, fake_ray, no_reports):
    out = tmp_path / "sweep"
    fake_ray()
    assert sweep_main(_argv(out)) == 0
    before = (out / "config.json").read_bytes()
    with _file_size_limit(64), pytest.raises(OSError):
        sweep_main(_argv(out, "--penalties", "0,300"))  # a new penalty: the config is written again
    assert (out / "config.json").read_bytes() == before
    assert sorted(p.name for p in out.iterdir()) == ["cells", "config.json"]  # and no temporary file


# ---- 4. reports ----------------------------------------------------------------------------------------


def test_a_killed_run_leaves_cells_and_config_but_no_stale_reports(tmp_path, fake_ray):
    out = tmp_path / "sweep"
    fake_ray()
    assert sweep_main(_argv(out, "--loads", "0.7", algorithms="fcfs,greedy-pmtn")) == 0  # Table II needs >= 0.7
    assert all((out / name).exists() for name in REPORTS)
    (out / "notes.txt").write_text("mine")
    fake_ray(interrupt=True)
    with pytest.raises(KeyboardInterrupt):  # killed while its one new cell runs
        sweep_main(_argv(out, "--loads", "0.7", algorithms="fcfs,greedy-pmtn,easy"))
    assert sorted(p.name for p in out.iterdir()) == ["cells", "config.json", "notes.txt"]
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
    from coordinator.provenance import code_version

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
    assert sweep_main(_argv(out, "--report-only")) == 0
    err = capsys.readouterr().err
    assert "1 stored cell was computed by other code" in err and "the reports leave it out" in err
    assert [r["algorithm"] for r in csv.DictReader((out / "cells.csv").open())] == ["fcfs"]
    assert sweep_main(_argv(out)) == 0
    err = capsys.readouterr().err
    assert "2 cells; 1 stored, 1 to run" in err and "it is run again" in err
    again = json.loads(path.read_text())
    assert again["max_stretch"] != 12345.0 and again["code"] == this_code
    assert [r["algorithm"] for r in csv.DictReader((out / "cells.csv").open())] == ["fcfs", "easy"]
    assert sweep_main(_argv(out)) == 0
    assert "2 cells; 2 stored, 0 to run" in capsys.readouterr().err
