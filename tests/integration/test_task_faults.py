"""A task's process around a Pause and around its agent's death: real processes, real cgroups (v1 here).

The races are made deterministic by driving :class:`~node_agent.runner.Task` directly, as the agent's
monitor does (one ``poll`` at a time), and choosing what happens between two polls.
"""

from __future__ import annotations

import contextlib
import glob
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import psutil
import pytest

from node_agent import runner
from node_agent.agent import HostSpec
from node_agent.cgroups import CgroupDriver, open_driver
from node_agent.runner import State, Task, TaskSpec
from node_agent.server import RunningAgent, start_agent
from vcemu.v1 import agent_pb2, agent_pb2_grpc
from workloads import progress

from .conftest import end_processes

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def driver(cgroups_required: None) -> Iterator[CgroupDriver]:
    """A cgroup driver of its own agent id; every group under it (and it) removed afterwards."""
    d = open_driver(f"pytest-taskfaults-{os.getpid()}")
    yield d
    d.cleanup(remove_parent=True)


@pytest.fixture
def workdir() -> Iterator[str]:
    with tempfile.TemporaryDirectory(prefix="vcemu-pytest-") as d:
        yield d


def _task(driver: CgroupDriver, workdir: str, share: float, work_seconds: float, task_id: str = "t/0") -> Task:
    spec = TaskSpec(task_id=task_id, host="h", host_cores=1.0, workload="dgemm", cpu_share=share, cpu_need=share,
                    work_seconds=work_seconds, memory_bytes=16 << 20)
    return Task(spec, driver, units_per_core_second=1000.0, workdir=workdir)


def _until(what: str, cond, timeout: float = 20.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def test_pause_between_ready_and_the_next_poll_then_resume_runs_the_task_at_its_share(driver, workdir) -> None:
    """The program reports ready and waits for the run byte; a Pause comes before the monitor's poll.
    Resume must still end the boot phase (share applied, run byte sent), or the task is RUNNING for
    ever without computing, at the whole host's quota."""
    task = _task(driver, workdir, share=0.5, work_seconds=3600.0)
    try:
        task.start()
        reader = progress.ProgressReader(task._path + ".progress")
        _until("the program never reported ready", lambda: reader.read().ready)
        reader.close()
        task.pause()  # no poll since start: the agent has not acted on the report yet
        task.poll()  # the monitor, while paused: it reads the report
        task.resume()
        task.poll()
        assert task.state is State.RUNNING
        cpu_dir = driver.dirs(task.cgroup)[0]
        quota = (Path(cpu_dir, "cpu.max").read_text().split()[0] if driver.mode == "cgroup-v2"  # (v2: "QUOTA PERIOD")
                 else Path(cpu_dir, "cpu.cfs_quota_us").read_text().strip())
        assert quota == "50000", "the boot-phase quota (the whole host) was left in place"
        cpu0 = driver.cpu_usage_s(task.cgroup)
        _until("the task never computed after Resume", lambda: driver.cpu_usage_s(task.cgroup) > cpu0 + 0.05, 10)
    finally:
        task.stop()
    assert not any(os.path.exists(d) for d in driver.dirs(task.cgroup))


def test_booting_tasks_weigh_one_process_together_and_a_running_one_its_share(driver, workdir) -> None:
    """While their programs boot, tasks' groups are capped at their host's capacity but weigh one ordinary process
    together, so that a burst of starts cannot take the machine from the coordinator and the agent; once a task
    runs, it weighs its share's reservation. The agent's parent group weighs the sum (cgroups.CpuWeights)."""
    v1 = driver.mode == "cgroup-v1"
    weight = "cpu.shares" if v1 else "cpu.weight"
    one, half, half_core, none = ("1024", "512", "32768", "2") if v1 else ("100", "50", "3200", "1")
    tasks = [_task(driver, workdir, share=0.5, work_seconds=3600.0, task_id=f"t/{i}") for i in range(2)]
    parent = Path(driver.dirs()[0], weight)

    def of(task: Task) -> str:
        return Path(driver.dirs(task.cgroup)[0], weight).read_text().strip()

    try:
        tasks[0].start()
        assert tasks[0].state is State.STARTING  # (a boot ends at a poll)
        group = Path(driver.dirs(tasks[0].cgroup)[0])
        quota = (group / "cpu.cfs_quota_us") if v1 else (group / "cpu.max")
        assert quota.read_text().split()[0] == "100000", "a booting task may use its whole host (1 core)"
        assert (of(tasks[0]), parent.read_text().strip()) == (one, one)
        tasks[1].start()
        assert (of(tasks[0]), of(tasks[1]), parent.read_text().strip()) == (half, half, one)
        _until("the task never left its boot phase", lambda: (tasks[0].poll(), tasks[0].state is State.RUNNING)[1],
               60)
        assert (of(tasks[0]), of(tasks[1])) == (half_core, one)
        assert parent.read_text().strip() == str(int(half_core) + int(one))
    finally:
        with contextlib.ExitStack() as stack:  # every task stopped, the first failure raised
            for task in tasks:
                stack.callback(task.stop)
    assert parent.read_text().strip() == none


def test_task_paused_after_its_work_was_charged_is_done(driver, workdir) -> None:
    """cpu-time progress: the cgroup charges the task its work, then a Pause comes before the poll that
    would have ended it. The task is done (its process ended, its cgroup removed), not left paused at
    progress 1.0, nor called STOPPED by the Stop that follows."""
    task = _task(driver, workdir, share=1.0, work_seconds=0.2)
    try:
        task.start()
        _until("the task never left its boot phase", lambda: (task.poll(), task.state is State.RUNNING)[1])
        assert task._cpu_run0 is not None
        done_at = task._cpu_run0 + task.cpu_target
        _until("the work was never charged", lambda: driver.cpu_usage_s(task.cgroup) >= done_at)
        pid = task.view().pid
        task.pause()
        task.poll()
        view = task.view()
        assert view.state is State.DONE and view.progress == 1.0, view
        assert not psutil.pid_exists(pid)
        assert not any(os.path.exists(d) for d in driver.dirs(task.cgroup))
        task.stop()
        assert task.view().state is State.DONE
    finally:
        task.stop()


def test_a_task_killed_at_its_memory_limit_says_so_and_one_killed_from_outside_says_that(
        driver, workdir, monkeypatch) -> None:
    """SIGKILL has two causes, the memory cgroup's OOM killer and someone else; the cgroup's OOM-kill
    count tells them apart, and the FAILED message names the one that happened. The OOM is made certain
    by a limit below what the interpreter needs to boot (no allowance for it, 16 MB of memory_bytes)."""
    monkeypatch.setattr(runner, "INTERPRETER_ALLOWANCE_BYTES", 0)
    oom = _task(driver, workdir, share=1.0, work_seconds=60.0)
    try:
        oom.start()
        _until("the task was never killed at its limit", lambda: (oom.poll(), oom.state.finished)[1])
        assert oom.state is State.FAILED
        assert "killed by SIGKILL: out of memory, by the kernel's OOM killer" in oom.message, oom.message
        assert f"limit: {16 << 20} bytes" in oom.message
    finally:
        oom.stop()
    monkeypatch.undo()
    shot = _task(driver, workdir, share=1.0, work_seconds=60.0)
    try:
        shot.start()
        _until("the task never left its boot phase", lambda: (shot.poll(), shot.state is State.RUNNING)[1])
        os.kill(shot.view().pid, signal.SIGKILL)
        _until("the kill was never seen", lambda: (shot.poll(), shot.state.finished)[1])
        assert shot.state is State.FAILED
        assert "killed by SIGKILL from outside the agent (not the memory limit" in shot.message, shot.message
    finally:
        shot.stop()


#: Prints its tasks' pids first (so the test can kill them whatever happens next), then "paused" once
#: both run and t/0 is paused; if that does not happen in time, says why, kills its tasks and exits 1.
_CRASHING_AGENT = """
import sys, time
from node_agent import runner
runner.calibrate = lambda workload, seconds=0.0: 1000.0  # no calibration: this agent is about to be killed
from node_agent.agent import HostSpec, open_core
core = open_core(sys.argv[1], [HostSpec("h0", 1.0, 1 << 30)], no_cgroups=True)
views = [core.start_task(f"t/{i}", "h0", "dgemm", 0.1, 0.1, 3600.0, 0) for i in range(2)]
print(" ".join(str(v.pid) for v in views), flush=True)
deadline = time.monotonic() + float(sys.argv[2])
while not all(t.state.name == "RUNNING" for t in core.status()[1]):
    tasks = core.status()[1]
    if time.monotonic() > deadline or any(t.state.finished for t in tasks):
        print("crashing agent: its tasks did not all run: "
              + "; ".join(f"{t.task_id} {t.state.name} {t.message}" for t in tasks), file=sys.stderr, flush=True)
        core.shutdown()
        sys.exit(1)
    time.sleep(0.05)
core.pause("t/0")
print("paused", flush=True)
time.sleep(600)
"""
#: Seconds the crashing agent's tasks have to start running (a dgemm program boots in about one).
_START_S = 30.0


def _line_reader(proc: subprocess.Popen[str]) -> Callable[[float], str]:
    """``next_line(timeout)``: the next line of ``proc``'s stdout without its newline, "" at its end. Read by
    a thread, so a child that says nothing fails the test at the timeout instead of blocking it."""
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        for line in proc.stdout:  # type: ignore[union-attr]
            lines.put(line.rstrip("\n"))
        lines.put("")

    threading.Thread(target=pump, daemon=True).start()

    def next_line(timeout: float) -> str:
        try:
            return lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"the crashing agent said nothing for {timeout:.0f} s") from None

    return next_line


def _alive(pid: int) -> bool:
    with contextlib.suppress(psutil.Error):
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    return False


@pytest.mark.parametrize("fencer_dies_too", [True, False])
def test_no_cgroups_agent_restarted_after_kill_9_kills_the_stopped_tasks_it_left(monkeypatch,
                                                                                  fencer_dies_too: bool) -> None:
    """Without cgroups a paused task, and a running one in the off part of its duty cycle, is SIGSTOPped:
    when its agent is killed it cannot notice (its orphan check does not run), so it stays stopped, with
    its memory, for ever. The agent's fencer, which outlives it, kills them; should it die too, an agent
    started again with the same id kills them, as it kills what a crashed agent left in cgroups."""
    from node_agent.agent import HostSpec, open_core

    agent_id = f"pytest-dc-{os.getpid()}"
    crashed = subprocess.Popen([sys.executable, "-c", _CRASHING_AGENT, agent_id, str(_START_S)], cwd=ROOT,
                               stdout=subprocess.PIPE, text=True, start_new_session=True)
    next_line = _line_reader(crashed)
    pids: list[int] = []
    try:
        line = next_line(_START_S)
        pids = [int(p) for p in line.split()]
        assert len(pids) == 2, f"the crashing agent did not start its tasks (its stderr is above): {line!r}"
        line = next_line(2 * _START_S)
        assert line == "paused", f"the crashing agent did not pause its task (its stderr is above): {line!r}"
        paused = pids[0]
        _until("the paused task was never stopped",  # SIGSTOP takes effect when the task next runs
               lambda: psutil.Process(paused).status() == psutil.STATUS_STOPPED, 5.0)
        (fencer,) = [p for p in psutil.Process(crashed.pid).children() if "node_agent.fencer" in p.cmdline()]
        if not fencer_dies_too:
            crashed.kill()
            crashed.wait()
            _until("a task the killed agent left stopped is still there", lambda: not any(map(_alive, pids)), 5.0)
            return
        # Both may die (the OOM killer, say). The fencer is stopped first: one killed first would be started again.
        fencer.suspend()
        crashed.kill()
        crashed.wait()
        fencer.kill()
        time.sleep(0.5)  # time for a running task to notice and exit, had it not been stopped
        assert _alive(paused), "the paused task died with its agent: nothing left to test"

        monkeypatch.setattr(runner, "calibrate", lambda workload, seconds=0.0: 1000.0)
        core = open_core(agent_id, [HostSpec("h0", 1.0, 1 << 30)], no_cgroups=True)
        core.shutdown()
        _until("a task the killed agent left stopped is still there", lambda: not any(map(_alive, pids)), 5.0)
    finally:
        end_processes(crashed, pids)
        for leftover in glob.glob(f"/dev/shm/vcemu-agent-{agent_id}-*") + glob.glob(
                os.path.join(tempfile.gettempdir(), f"vcemu-agent-{agent_id}-*")):
            shutil.rmtree(leftover, ignore_errors=True)  # the killed agent's, if the test failed before the restart


# ------------------------------------------------------------------ killing a task that will not die at once
@pytest.fixture
def served(cgroups_required: None, monkeypatch) -> Iterator[tuple[RunningAgent, agent_pb2_grpc.AgentStub]]:
    """An agent of its own (its parent cgroup is frozen by these tests) with one 1-core host, and a stub."""
    monkeypatch.setattr(runner, "calibrate", lambda workload, seconds=0.0: 1000.0)
    agent = start_agent([HostSpec("h0", 1.0, 1 << 30)], f"pytest-kill-{os.getpid()}")
    try:
        with grpc.insecure_channel(agent.address) as channel:
            yield agent, agent_pb2_grpc.AgentStub(channel)
    finally:
        if (freezer := _v1_parent_freezer(agent)) is not None:
            freezer.write_text("THAWED")
        agent.stop()


def _v1_parent_freezer(agent: RunningAgent) -> Path | None:
    return next((Path(d, "freezer.state") for d in agent.core.driver.dirs() if Path(d, "freezer.state").exists()), None)


def _parent_freezer(agent: RunningAgent) -> Path:
    """The agent's parent group's freezer.state: while it is FROZEN, its tasks are frozen whatever their own
    groups say, so a task cannot be thawed and ignores SIGKILL (a freezer that will not thaw, made at will).
    cgroup v1 only: a process frozen by cgroup v2's freezer still dies of SIGKILL, so there the test is skipped."""
    freezer = _v1_parent_freezer(agent)
    if freezer is None:
        pytest.skip(f"needs cgroup v1's freezer ({agent.core.driver.mode} here): a task frozen by cgroup v2's freezer "
                    "still dies of SIGKILL, so a frozen parent cannot keep a task from dying")
    return freezer


def _running_task(stub: agent_pb2_grpc.AgentStub, task_id: str) -> None:
    stub.StartTask(agent_pb2.StartTaskRequest(task_id=task_id, host="h0", workload="dgemm", cpu_share=0.3,
                                              cpu_need=0.3, work_seconds=3600.0, memory_bytes=16 << 20))
    _until(f"{task_id} never ran", lambda: _status(stub, task_id).state == agent_pb2.TASK_STATE_RUNNING)


def _status(stub: agent_pb2_grpc.AgentStub, task_id: str) -> agent_pb2.TaskStatus:
    return next(t for t in stub.Status(agent_pb2.StatusRequest()).tasks if t.task_id == task_id)


def _timed(call: Callable[[], object]) -> tuple[float, object]:
    """How long ``call`` took, and its result or its gRPC error."""
    t0 = time.monotonic()
    try:
        result: object = call()
    except grpc.RpcError as e:
        result = e
    return time.monotonic() - t0, result


def _in_thread(call: Callable[[], object]) -> tuple[threading.Thread, dict[str, object]]:
    """Run ``call`` in a thread; the dict gets its ``result`` (or gRPC error) and the ``end`` time."""
    out: dict[str, object] = {}

    def run() -> None:
        out["result"] = _timed(call)[1]
        out["end"] = time.monotonic()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def test_a_stop_waiting_for_a_frozen_task_to_die_holds_up_no_other_call(served) -> None:
    """Stop kills outside the agent's lock: while a frozen task's Stop waits for it to die, every other call
    answers at once, none acts on the task meanwhile, and a second Stop answers only when the first is done."""
    agent, stub = served
    stub.StartTask(agent_pb2.StartTaskRequest(task_id="other/0", host="h0", workload="modeled", cpu_share=0.2,
                                              cpu_need=0.2, work_seconds=3600.0))
    _running_task(stub, "t/0")
    stub.Pause(agent_pb2.TaskRef(task_id="t/0"))
    pid, dirs = agent.core.task("t/0").pid, agent.core.cgroup_dirs("t/0")
    freezer = _parent_freezer(agent)
    freezer.write_text("FROZEN")  # the task cannot be thawed, so it cannot die, until the parent thaws
    hold_s, t0 = 2.0, time.monotonic()
    threading.Timer(hold_s, lambda: freezer.write_text("THAWED")).start()
    first, stop1 = _in_thread(lambda: stub.Stop(agent_pb2.TaskRef(task_id="t/0")))
    time.sleep(0.3)  # the Stop is under way
    second, stop2 = _in_thread(lambda: stub.Stop(agent_pb2.TaskRef(task_id="t/0")))
    took, status = _timed(lambda: stub.Status(agent_pb2.StatusRequest()))
    assert took < 0.5, f"Status took {took:.2f} s while a Stop waited for its task to die"
    assert isinstance(status, agent_pb2.StatusReply)
    ending = next(t for t in status.tasks if t.task_id == "t/0")
    assert ending.state == agent_pb2.TASK_STATE_PAUSED and ending.message == "stopping"
    took, reply = _timed(lambda: stub.SetShare(agent_pb2.SetShareRequest(task_id="other/0", cpu_share=0.3)))
    assert took < 0.5 and isinstance(reply, agent_pb2.TaskReply), (took, reply)
    took, refused = _timed(lambda: stub.Resume(agent_pb2.TaskRef(task_id="t/0")))
    assert took < 0.5 and isinstance(refused, grpc.RpcError), (took, refused)
    assert refused.code() == grpc.StatusCode.FAILED_PRECONDITION and "being stopped" in refused.details()
    first.join(20)
    second.join(20)
    r1, r2 = stop1["result"], stop2["result"]
    assert isinstance(r1, agent_pb2.TaskReply) and r1.task.state == agent_pb2.TASK_STATE_STOPPED, r1
    assert stop1["end"] - t0 >= hold_s - 0.2, "the task died before its parent thawed: nothing was tested"  # type: ignore[operator]
    # The second Stop waited for the first, then found no task (not "gone" while its process still lived).
    assert isinstance(r2, grpc.RpcError) and r2.code() == grpc.StatusCode.NOT_FOUND, r2
    assert stop2["end"] >= t0 + hold_s - 0.2  # type: ignore[operator]
    assert not _alive(pid)
    assert not any(os.path.exists(d) for d in dirs)


def test_a_task_whose_kill_failed_is_not_forgotten_and_a_later_stop_kills_it(served, monkeypatch) -> None:
    """A task aborted (its poll raised) while it cannot die is failed, but its frozen process and its cgroup
    are still there: a Stop must not forget it then (nothing would ever remove them). The Stop says why it
    failed, the task stays known, and a Stop once it can die kills it and removes its cgroup."""
    from node_agent import cgroups

    monkeypatch.setattr(cgroups, "KILL_TIMEOUT_S", 1.0, raising=False)  # (raising: absent before it existed)
    agent, stub = served
    _running_task(stub, "t/0")
    stub.Pause(agent_pb2.TaskRef(task_id="t/0"))
    pid, dirs = agent.core.task("t/0").pid, agent.core.cgroup_dirs("t/0")
    freezer = _parent_freezer(agent)
    freezer.write_text("FROZEN")

    def broken() -> None:
        raise OSError("simulated: cgroup file unreadable")

    agent.core._tasks["t/0"].poll = broken  # type: ignore[method-assign]
    _until("the task was never failed", lambda: _status(stub, "t/0").state == agent_pb2.TASK_STATE_FAILED, 30.0)
    _until("its abort never ended", lambda: "t/0" not in getattr(agent.core, "_ending", {}), 30.0)
    assert _alive(pid), "the frozen task died: nothing was tested"
    _, result = _timed(lambda: stub.Stop(agent_pb2.TaskRef(task_id="t/0")))
    known = "t/0" in [t.task_id for t in stub.Status(agent_pb2.StatusRequest()).tasks]
    assert known or not (_alive(pid) or any(os.path.exists(d) for d in dirs)), \
        "Stop forgot a task whose (frozen) process and cgroup are still there"
    assert isinstance(result, grpc.RpcError) and result.code() == grpc.StatusCode.INTERNAL, result
    assert "did not die within 1 s of SIGKILL" in result.details()

    freezer.write_text("THAWED")
    reply = stub.Stop(agent_pb2.TaskRef(task_id="t/0"))
    assert reply.task.state == agent_pb2.TASK_STATE_FAILED and "simulated" in reply.task.message
    assert not _alive(pid)
    assert not any(os.path.exists(d) for d in dirs)
