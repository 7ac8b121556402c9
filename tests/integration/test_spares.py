"""Spare workload programs (node_agent.spares): started ahead, taken by a task's start, refilled, ended.

Real processes throughout; the tasks run under the duty-cycle driver (no cgroups needed) and, where root can
open cgroups, under real cgroups too. No timing is asserted: what a spare saves is measured by hand (the module
docstring), not here."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from node_agent import spares as spares_mod
from node_agent.cgroups import CgroupDriver, open_driver
from node_agent.dutycycle import DutyCycleDriver
from node_agent.runner import State, Task, TaskSpec
from node_agent.spares import MAX_DEATHS, Spares
from workloads.registry import child_env, command

from .conftest import cgroups_unusable, end_processes

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def _until(what: str, cond: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.fixture
def pool(tmp_path: Path) -> Iterator[Spares]:
    p = Spares(str(tmp_path), ["dgemm", "arraycycle"], 2)
    yield p
    p.close()


def test_the_pool_fills_gives_each_spare_once_refills_and_ends_them_at_close(pool: Spares, tmp_path: Path) -> None:
    assert pool.ready("dgemm") == 0 and pool._thread is None  # nothing started before a workload is asked for
    assert pool.take("dgemm") is None  # the first start of a workload is cold, and starts its spares
    assert pool.wait_filled("dgemm", 30)
    assert pool.ready("dgemm") == 2 and pool.ready("arraycycle") == 0 and pool.ready("modeled") == 0
    first = pool.take("dgemm")
    assert first is not None and first.proc.poll() is None
    # Named on its command line by a file of the agent's directory (a restarted agent finds a dead one's so).
    argv = psutil.Process(first.proc.pid).cmdline()
    assert argv[argv.index("--spare") + 1] == first.stderr_path and first.stderr_path.startswith(str(tmp_path))
    second = pool.take("dgemm")
    assert second is not None and second.proc.pid != first.proc.pid
    assert pool.take("transactional") is None  # not one of the pool's: started cold
    assert pool.wait_filled("dgemm", 30) and pool.ready("dgemm") == 2  # refilled in the background
    waiting = list(pool._ready["dgemm"])
    for spare in waiting:  # each joined the pool once ready: it has said so, and points its stdout nowhere
        assert os.readlink(f"/proc/{spare.proc.pid}/fd/1") == os.devnull
    pool.close()
    for spare in waiting:  # the ones not taken are killed and reaped, and leave no file
        assert spare.proc.poll() is not None and not os.path.exists(spare.stderr_path)
    assert first.proc.poll() is None  # a taken spare is its taker's
    assert pool.take("dgemm") is None and pool.ready("dgemm") == 0
    for taken in (first, second):
        taken.kill()


def _spare(workload: str, tmp_path: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(command(workload, "--spare", str(tmp_path / "s")), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=child_env())


def test_a_spare_says_ready_then_exits_3_at_the_end_of_its_input_and_2_on_arguments_it_cannot_take(
        tmp_path: Path) -> None:
    unused = _spare("dgemm", tmp_path)
    out, err = unused.communicate(b"", timeout=30)
    assert unused.returncode == 3 and out == spares_mod.READY, (out, err)
    for line, why in ((b'{"units": 1}\n', b"JSON list of strings"), (b'["--spare", "x"]\n', b"cannot be --spare")):
        bad = _spare("arraycycle", tmp_path)
        out, err = bad.communicate(line, timeout=30)
        assert bad.returncode == 2 and why in err and out == spares_mod.READY, (bad.returncode, out, err)


def test_a_spare_given_its_task_runs_it_as_a_cold_started_program_would(tmp_path: Path) -> None:
    """Arguments, the go byte, the ready report, the run byte, its units, exit 0: the protocol of workloads.program."""
    from workloads import progress

    channel = str(tmp_path / "t.progress")
    progress.create(channel)
    proc = _spare("dgemm", tmp_path)
    assert proc.stdin is not None and proc.stdout is not None
    assert proc.stdout.read(1) == spares_mod.READY
    proc.stdin.write(json.dumps(["--units", "50", "--progress", channel, "--memory-bytes", "0", "--wait-go"]).encode()
                     + b"\ng")
    proc.stdin.flush()
    reader = progress.ProgressReader(channel)
    _until("the spare never reported ready", lambda: reader.read().ready, 30)
    proc.stdin.write(b"r")
    proc.stdin.close()
    assert proc.wait(timeout=30) == 0, proc.stderr.read() if proc.stderr else ""
    assert reader.read().units == 50
    reader.close()


def _drivers() -> list[object]:
    out: list[object] = ["duty-cycle"]
    out.append(pytest.param("cgroups", marks=pytest.mark.skipif(cgroups_unusable() is not None,
                                                                reason=f"{cgroups_unusable()}")))
    return out


@pytest.mark.parametrize("kind", _drivers())
def test_a_task_started_from_a_spare_runs_in_its_group_to_done_and_its_stderr_is_the_tasks(kind: str,
                                                                                          tmp_path: Path) -> None:
    driver: CgroupDriver = DutyCycleDriver() if kind == "duty-cycle" else open_driver(f"pytest-spares-{os.getpid()}")
    pool = Spares(str(tmp_path), ["dgemm"], 1)
    try:
        assert pool.take("dgemm") is None and pool.wait_filled("dgemm", 30)
        spare_pid = pool._ready["dgemm"][0].proc.pid
        spec = TaskSpec(task_id="t/0", host="h", host_cores=1.0, workload="dgemm", cpu_share=0.5, cpu_need=0.5,
                        work_seconds=0.4, memory_bytes=16 << 20)
        task = Task(spec, driver, units_per_core_second=1000.0, workdir=str(tmp_path))
        task.spares = pool
        task.start()
        assert task._proc is not None and task._proc.pid == spare_pid  # the spare, not a new process
        assert spare_pid in driver.pids(task.cgroup)  # in the task's group before its go byte
        assert os.path.exists(os.path.join(str(tmp_path), task.cgroup + ".stderr"))
        _until("the task never finished", lambda: (task.poll(), task.state.finished)[1], 60)
        assert task.state is State.DONE, task.message
        task.stop()
        assert _gone(spare_pid)
        assert pool.wait_filled("dgemm", 30) and pool._ready["dgemm"][0].proc.pid != spare_pid
    finally:
        pool.close()
        driver.cleanup(remove_parent=True)
        driver.close()


def test_spares_that_die_are_replaced_until_a_workload_has_lost_too_many(tmp_path: Path, caplog) -> None:
    pool = Spares(str(tmp_path), ["dgemm"], 1)
    try:
        with caplog.at_level(logging.WARNING, logger=spares_mod.__name__):
            assert pool.take("dgemm") is None
            for k in range(MAX_DEATHS):
                assert pool.wait_filled("dgemm", 30), f"no spare after {k} deaths"
                victim = pool._ready["dgemm"][0]
                victim.proc.send_signal(signal.SIGKILL)
                victim.proc.wait(timeout=10)
                if k < MAX_DEATHS - 1:
                    _until("a dead spare was not replaced",
                           lambda v=victim: pool.ready("dgemm") == 1 and pool._ready["dgemm"][0] is not v, 30)
            assert pool.take("dgemm") is None  # the last dead one is not handed out
            time.sleep(0.3)
            assert pool.ready("dgemm") == 0 and pool.take("dgemm") is None  # and none is started again
        said = [r.getMessage() for r in caplog.records]
        assert len(said) == 1 and f"{MAX_DEATHS} spare dgemm programs in a row ended before a task took them" in said[0]
        assert "status -9" in said[0], said
        assert "start cold" in said[0]
    finally:
        pool.close()


_DYING_AGENT = """
import sys, time
from node_agent.spares import Spares
pool = Spares(sys.argv[1], ["dgemm", "arraycycle"], 2)
for w in ("dgemm", "arraycycle"):
    assert pool.take(w) is None and pool.wait_filled(w, 30)
print(" ".join(str(s.proc.pid) for w in ("dgemm", "arraycycle") for s in pool._ready[w]), flush=True)
time.sleep(600)
"""


def test_the_spares_of_an_agent_killed_with_kill_9_exit_by_themselves(tmp_path: Path) -> None:
    agent = subprocess.Popen([sys.executable, "-c", _DYING_AGENT, str(tmp_path)], cwd=ROOT, stdout=subprocess.PIPE,
                             text=True)
    pids: list[int] = []
    try:
        assert agent.stdout is not None
        pids = [int(p) for p in agent.stdout.readline().split()]
        assert len(pids) == 4
        agent.kill()
        agent.wait()
        _until("a spare outlived its agent", lambda: all(_gone(p) for p in pids), 30)
    finally:
        end_processes(agent, pids)


def test_an_agent_counts_its_program_starts_by_whether_a_spare_was_taken() -> None:
    """The first start of a workload is cold and starts its spares; the next takes one (vcemu_agent_program_starts)."""
    from node_agent.agent import AgentCore, HostSpec

    core = AgentCore(f"pytest-spares-count-{os.getpid()}", [HostSpec("h", 1.0, 1 << 30)], DutyCycleDriver(),
                     {"dgemm": 1000.0}, spares=1)
    try:
        zero = {("dgemm", "cold"): 0, ("dgemm", "spare"): 0, ("transactional", "cold"): 0}
        assert core.program_starts() == zero  # a series for each from the start
        core.start_task("a/0", "h", "dgemm", cpu_share=0.1, cpu_need=0.1, work_seconds=600.0, memory_bytes=0)
        assert core.program_starts() == {**zero, ("dgemm", "cold"): 1}  # (0 from the start)
        assert core._spares.wait_filled("dgemm", 30)
        core.start_task("b/0", "h", "dgemm", cpu_share=0.1, cpu_need=0.1, work_seconds=600.0, memory_bytes=0)
        assert core.program_starts() == {**zero, ("dgemm", "cold"): 1, ("dgemm", "spare"): 1}
        assert core._tasks["b/0"].started_from == "spare"
    finally:
        core.shutdown()


def test_a_refill_thread_that_cannot_start_leaves_starts_cold_and_the_pool_closable(tmp_path: Path, monkeypatch,
                                                                                    caplog) -> None:
    def no_thread(self: object) -> None:
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(spares_mod.threading.Thread, "start", no_thread)
    pool = Spares(str(tmp_path), ["dgemm"], 1)
    with caplog.at_level(logging.WARNING, logger=spares_mod.__name__):
        assert pool.take("dgemm") is None and pool.take("dgemm") is None
    assert pool._thread is None and "cannot start the spares' refill thread" in caplog.text
    pool.close()  # (it joined a thread never started, which raised: the agent's shutdown then killed no task)
