"""A Pause whose freeze fails leaves the task running, really: the freezer is thawed again, not left to
reach FROZEN later under a task the agent reports (and the coordinator believes) running."""

from __future__ import annotations

import pytest

from node_agent.cgroups import CgroupError
from node_agent.dutycycle import DutyCycleDriver
from node_agent.runner import State, Task, TaskSpec


class SlowFreezer(DutyCycleDriver):
    """Freezes, then reports the freeze timed out, as the v1 driver does when FROZEN is not reached in time."""

    def freeze(self, name: str) -> None:
        super().freeze(name)
        raise CgroupError(f"{name}/freezer.state did not reach FROZEN")


def test_a_failed_freeze_is_undone_and_the_task_stays_running(tmp_path) -> None:  # type: ignore[no-untyped-def]
    driver = SlowFreezer()
    try:
        spec = TaskSpec(task_id="t/0", host="h", host_cores=1.0, workload="dgemm", cpu_share=0.5, cpu_need=0.5,
                        work_seconds=1.0, memory_bytes=0)
        task = Task(spec, driver, units_per_core_second=1000.0, workdir=str(tmp_path))
        driver.create(task.cgroup)
        task.state = State.RUNNING
        with pytest.raises(CgroupError, match="did not reach FROZEN"):
            task.pause()
        assert task.state is State.RUNNING
        assert not driver._groups[task.cgroup].frozen, "the freezer was left to freeze a task reported running"
    finally:
        driver.close()
