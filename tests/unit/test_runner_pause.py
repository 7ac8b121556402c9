"""A Pause whose freeze fails leaves the task running, really: the freezer is thawed again, not left to
reach FROZEN later under a task the agent reports (and the coordinator believes) running. And a task whose share
could not be written at its boot's end does not keep its boot's quota: the next polls write it."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator

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


class FlakyQuota(DutyCycleDriver):
    """Fails the first ``failures`` writes of a CPU limit, as a cgroup file write that fails would."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures
        self.written: list[float] = []

    def set_cpu(self, name: str, cores: float, reserved: bool = True) -> None:
        if self.failures:
            self.failures -= 1
            raise CgroupError(f"{name}/cpu.cfs_quota_us: No space left on device")
        super().set_cpu(name, cores, reserved)
        self.written.append(cores)


@contextlib.contextmanager
def _booted(tmp_path, task_id: str, failures: int) -> Iterator[tuple[Task, FlakyQuota]]:  # type: ignore[no-untyped-def]
    """A task at 0.25 of a 2-core host whose program has reported the end of its boot (a sleeping process stands
    in), on a driver whose first ``failures`` CPU-limit writes fail."""
    driver = FlakyQuota(failures)
    proc = subprocess.Popen(["sleep", "30"], stdin=subprocess.PIPE)
    try:
        spec = TaskSpec(task_id=task_id, host="h", host_cores=2.0, workload="dgemm", cpu_share=0.25, cpu_need=0.25,
                        work_seconds=1.0, memory_bytes=0)
        task = Task(spec, driver, units_per_core_second=1000.0, workdir=str(tmp_path))
        driver.create(task.cgroup)
        task._proc, task._ready = proc, True
        yield task, driver
    finally:
        proc.kill()
        proc.wait()
        driver.close()


def test_a_share_not_written_at_the_boots_end_is_written_at_the_next_polls(
        tmp_path, caplog: pytest.LogCaptureFixture) -> None:  # type: ignore[no-untyped-def]
    with _booted(tmp_path, "t/0", failures=2) as (task, driver), caplog.at_level("INFO", logger="vcemu.agent"):
        task.poll()  # the boot's end: the run byte is sent, the share's write fails
        assert task.state is State.RUNNING and task._proc is not None and task._proc.stdin is not None
        assert task._proc.stdin.closed and driver.written == [] and task._share_unwritten
        task.poll()  # fails again: said once
        assert driver.written == []
        task.poll()
        assert driver.written == [0.5] and not task._share_unwritten
        task.poll()
        assert driver.written == [0.5]  # written once it held
    said = [r.getMessage() for r in caplog.records]
    assert said == [f"task t/0: its share of 0.250 could not be set at its boot's end ({task.cgroup}/cpu.cfs_quota_"
                    "us: No space left on device); tried again at each poll", "task t/0: its share of 0.250 is set"]


def test_a_share_change_after_a_failed_write_at_the_boots_end_is_the_one_written(
        tmp_path, caplog: pytest.LogCaptureFixture) -> None:  # type: ignore[no-untyped-def]
    with _booted(tmp_path, "t/1", failures=1) as (task, driver), caplog.at_level("INFO", logger="vcemu.agent"):
        task.poll()  # the write at the boot's end fails
        task.set_share(0.75)  # the coordinator's SetShare comes first: its share is written, and said
        task.poll()
    assert driver.written == [1.5] and not task._share_unwritten
    assert [r.getMessage() for r in caplog.records][-1] == "task t/1: its share of 0.750 is set"
