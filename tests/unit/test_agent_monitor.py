"""The agent's monitor survives a task whose poll raises: that task fails with the error in its message, and
every other task keeps progressing. (Before, the exception ended the monitor thread, and with it every
task's progress and completion on the agent, without a word to the coordinator.)"""

from __future__ import annotations

import time

import psutil

from node_agent.agent import AgentCore, HostSpec
from node_agent.dutycycle import DutyCycleDriver
from node_agent.runner import State
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
