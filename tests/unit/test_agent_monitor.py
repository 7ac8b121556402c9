"""The agent's monitor survives a task whose poll raises: that task fails with the error in its message, and
every other task keeps progressing. (Before, the exception ended the monitor thread, and with it every
task's progress and completion on the agent, without a word to the coordinator.)"""

from __future__ import annotations

import time
from collections.abc import Iterator

import psutil
import pytest

from node_agent.agent import AgentCore, HostSpec, TaskStart
from node_agent.dutycycle import DutyCycleDriver
from node_agent.runner import State, Task
from workloads import modeled


def _wait(cond, timeout: float = 5.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_a_task_whose_poll_raises_fails_alone_and_the_monitor_goes_on() -> None:
    core = AgentCore("pytest-monitor", [HostSpec("h", 1.0, 1 << 30)], DutyCycleDriver(), {})
    try:
        for task_id in ("bad", "good"):
            core.start_task(task_id, "h", modeled.NAME, cpu_share=0.5, cpu_need=0.5, work_seconds=1.0,
                            memory_bytes=0)

        def broken() -> None:
            raise OSError("simulated: cgroup file vanished")

        core._tasks["bad"].poll = broken  # type: ignore[method-assign]
        assert _wait(lambda: core._tasks["bad"].state is State.FAILED), "the broken task was not failed"
        assert "OSError: simulated: cgroup file vanished" in core._tasks["bad"].message
        # The monitor thread is alive and the other task runs to its end: 1 s of work at half a core.
        assert _wait(lambda: core._tasks["good"].state is State.DONE, timeout=10.0), core._tasks["good"].state
        assert core._monitor.is_alive()
    finally:
        core.shutdown()


def test_a_task_aborted_for_a_raising_poll_leaves_no_process() -> None:
    """The abort kills the task's process: a FAILED task whose program ran on would use CPU and memory the
    agent counts as free (and, without cgroups, with no limit at all once its group is dropped)."""
    driver = DutyCycleDriver()
    core = AgentCore("pytest-monitor-abort", [HostSpec("h", 1.0, 1 << 30)], driver, {"dgemm": 1000.0})
    try:
        view = core.start_task("t/0", "h", "dgemm", cpu_share=0.5, cpu_need=0.5, work_seconds=60.0,
                               memory_bytes=16 << 20)
        assert psutil.pid_exists(view.pid)
        task = core._tasks["t/0"]

        def broken() -> None:
            raise OSError("simulated: progress channel unreadable")

        task.poll = broken  # type: ignore[method-assign]
        failed = core.task("t/0")
        assert failed.state is State.FAILED and "progress channel unreadable" in failed.message
        assert _wait(lambda: not psutil.pid_exists(view.pid)
                     or psutil.Process(view.pid).status() == psutil.STATUS_ZOMBIE), "the process was left running"
        assert _wait(lambda: "t/0" not in core._ending), "the abort never ended"
        assert driver.pids(task.cgroup) == []
        assert core.stop("t/0").state is State.FAILED
    finally:
        core.shutdown()


class _FakeFreezer(DutyCycleDriver):
    """A driver with a freezer that is a set (and a tree on disk for the fencer to look at)."""

    def __init__(self, parent: str) -> None:
        super().__init__()
        self.parent, self.frozen = parent, set()

    def fencer_args(self) -> list[str]:
        return ["--v2", self.parent]

    def is_frozen(self, name: str) -> bool:
        return name in self.frozen

    def freeze(self, name: str) -> None:
        self.frozen.add(name)

    def thaw(self, name: str) -> None:
        self.frozen.discard(name)


def test_a_task_frozen_by_a_fencer_is_fenced_even_once_that_fencer_is_gone(tmp_path) -> None:
    """Review: once the fencer had been stopped (its lease file could not be written), a task it had frozen stayed
    frozen for good, reported running, with nothing to say why."""
    driver = _FakeFreezer(str(tmp_path))
    core = AgentCore("pytest-adopt", [HostSpec("h", 1.0, 1 << 30)], driver, {"dgemm": 1000.0})
    try:
        core._stop_fencer()
        with core._lock:
            task = core._new_task(TaskStart("t/0", "h", "dgemm", 0.5, 0.5, 60.0, 0))
            assert isinstance(task, Task)
            task.state = State.RUNNING
            core._tasks["t/0"] = task
            driver.frozen.add(task.cgroup)  # what a fencer did while the agent did not run
        assert _wait(lambda: core.task("t/0").fenced), core.task("t/0")
        assert core.task("t/0").state is State.PAUSED
        with core._lock:
            task.state = State.DONE  # (never started: nothing to stop)
    finally:
        core.shutdown()


def test_a_fencer_that_exits_is_said_and_started_again(tmp_path, caplog) -> None:
    """Review: a fencer that died (or could not start) left the agent believing itself fenced, and said nothing."""
    import logging

    core = AgentCore("pytest-refence", [HostSpec("h", 1.0, 1 << 30)], _FakeFreezer(str(tmp_path)), {})
    try:
        first = core._fencer
        assert first is not None and first.poll() is None
        with caplog.at_level(logging.ERROR):
            first.kill()
            assert _wait(lambda: core._fencer is not None and core._fencer is not first), "not started again"
        assert "the fencer exited with status -9; starting it again" in caplog.text
        assert core._fencer.poll() is None
    finally:
        core.shutdown()
    assert core._fencer is None


@pytest.fixture
def slow_rounds(monkeypatch) -> Iterator[AgentCore]:  # type: ignore[no-untyped-def]
    """An agent whose monitor's rounds are 30 s apart (so only its boot polls can end a boot in a test), and a task
    ``t/0`` of a dgemm program, started."""
    from node_agent import agent as agent_mod

    monkeypatch.setattr(agent_mod, "POLL_INTERVAL_S", 30.0)
    core = AgentCore("pytest-monitor-boot", [HostSpec("h", 1.0, 1 << 30)], DutyCycleDriver(), {"dgemm": 1000.0})
    try:
        yield core
    finally:
        core.shutdown()


def _start(core: AgentCore) -> None:
    core.start_task("t/0", "h", "dgemm", cpu_share=0.5, cpu_need=0.5, work_seconds=600.0, memory_bytes=0)


def test_a_booting_task_is_polled_between_the_monitors_rounds(slow_rounds: AgentCore) -> None:
    """A boot ends at the poll after the program reports ready. With rounds 30 s apart, only the booting tasks' own
    polls (every BOOT_POLL_S) can end it: the task runs within seconds, and then is no longer polled between rounds."""
    core = slow_rounds
    _start(core)
    assert core._booting == {"t/0"}
    assert _wait(lambda: core._tasks["t/0"].state is State.RUNNING, timeout=15.0), core._tasks["t/0"].state
    assert _wait(lambda: not core._booting, timeout=5.0)


def test_a_task_paused_while_it_booted_and_resumed_is_polled_between_rounds_again(slow_rounds: AgentCore) -> None:
    core = slow_rounds
    _start(core)
    core.pause("t/0")  # before its program can have booted (a start takes over 0.1 s)
    assert core._tasks["t/0"].state is State.PAUSED
    assert _wait(lambda: not core._booting, timeout=5.0)  # a paused task is not polled between rounds
    core.resume("t/0")
    assert core._tasks["t/0"].state is State.STARTING and core._booting == {"t/0"}
    assert _wait(lambda: core._tasks["t/0"].state is State.RUNNING, timeout=15.0), core._tasks["t/0"].state


def test_no_boot_ends_between_rounds_once_the_lease_has_run_out(slow_rounds: AgentCore, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The round fences first; a boot poll then would set a task running, unfenced, for up to a round."""
    core = slow_rounds
    monkeypatch.setattr(core, "_lease_ran_out", lambda: 1.0)  # (ran out at monotonic 1.0)
    _start(core)
    time.sleep(2.0)  # its program has booted (about 0.2 s), and would have been set running
    assert core._tasks["t/0"].state is State.STARTING and core._booting == {"t/0"}
    monkeypatch.setattr(core, "_lease_ran_out", lambda: None)
    assert _wait(lambda: core._tasks["t/0"].state is State.RUNNING, timeout=15.0), core._tasks["t/0"].state
