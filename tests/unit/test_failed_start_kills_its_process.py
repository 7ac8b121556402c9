"""A start whose program started, then could not be put in its group (the driver's add_pid fails): the start answers
its error once the process is killed and the task forgotten, and the id can be started again (no task left known,
no process left running). AgentCore.start_tasks' end_pending branch and _end_failed_start run in no unit test."""

from __future__ import annotations

import psutil

from node_agent.agent import AgentCore, HostSpec
from node_agent.cgroups import CgroupError
from node_agent.dutycycle import DutyCycleDriver


class _NoJoin(DutyCycleDriver):
    def __init__(self) -> None:
        super().__init__()
        self.fail = True

    def add_pid(self, name: str, pid: int) -> None:
        if self.fail:
            self.pid = pid
            raise CgroupError(f"{name}/cgroup.procs: No space left on device")
        super().add_pid(name, pid)


def test_a_start_failing_after_its_process_started_kills_it_and_frees_the_id() -> None:
    driver = _NoJoin()
    core = AgentCore("pytest-failed-start", [HostSpec("h", 1.0, 1 << 30)], driver, {"dgemm": 1000.0})
    try:
        [result] = core.start_tasks([_start("t/0")])
        assert isinstance(result, Exception) and "No space left" in str(result), result
        assert not psutil.pid_exists(driver.pid) or psutil.Process(driver.pid).status() == psutil.STATUS_ZOMBIE
        _, tasks = core.status()
        assert tasks == [], tasks
        assert core._ending == {}
        driver.fail = False
        [view] = core.start_tasks([_start("t/0")])
        assert not isinstance(view, Exception), view
        core.stop("t/0")
    finally:
        core.shutdown()


def _start(task_id: str):  # type: ignore[no-untyped-def]
    from node_agent.agent import TaskStart

    return TaskStart(task_id, "h", "dgemm", 0.5, 0.5, 5.0, 1 << 20)
