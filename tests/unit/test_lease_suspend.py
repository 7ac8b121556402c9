"""An agent's lease counts the time its host was suspended (:mod:`node_agent.leaseclock`, CLOCK_BOOTTIME).

On CLOCK_MONOTONIC, which stands still while the system sleeps, an agent whose host slept for a minute woke with the
rest of its lease to run, while its coordinator, hearing nothing, had declared it lost and restarted its jobs
elsewhere: its tasks, thawed by the wake-up, ran beside their copies. Here the sleep is the lease clock running on
while ``time.monotonic()`` did not (the test takes no longer than a moment of it); no process is started.
"""

from __future__ import annotations

import pytest

from node_agent import leaseclock
from node_agent.agent import AgentCore, HostSpec
from node_agent.dutycycle import DutyCycleDriver
from node_agent.runner import ModeledTask, TaskSpec


def test_the_lease_clock_is_boottime_and_never_behind_monotonic() -> None:
    import time

    assert leaseclock.now() >= time.monotonic() - 1e-3


def test_a_lease_runs_out_over_a_suspend(monkeypatch: pytest.MonkeyPatch) -> None:
    core = AgentCore("pytest-lease-suspend", [HostSpec("h", 1.0, 1 << 30)], DutyCycleDriver(), {})
    try:
        awake = leaseclock.now()
        core.renew_lease(5.0, awake)
        assert core._lease_ran_out() is None and core.lease_left() > 4.0
        monkeypatch.setattr(leaseclock, "now", lambda: awake + 60.0)  # the host slept 60 s
        assert core._lease_ran_out() == pytest.approx(awake + 5.0), "the lease outlived a minute's sleep"
        assert core.lease_left() == 0.0
    finally:
        monkeypatch.undo()
        core.shutdown()


def test_a_modeled_task_is_credited_up_to_the_leases_end_across_a_suspend(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its progress and the lease's end are on one clock: a task at full share credited until its lease ran out,
    5 s into a 60-s sleep, not 0 s (a lease clock that ran while its own did not) nor 60 s."""
    t = [1000.0]
    monkeypatch.setattr(leaseclock, "now", lambda: t[0])
    spec = TaskSpec("m", "h", 1.0, "modeled", cpu_share=1.0, cpu_need=1.0, work_seconds=100.0, memory_bytes=0)
    task = ModeledTask(spec, lease_ran_out=lambda: 1005.0 if t[0] > 1005.0 else None)
    task.start()
    t[0] = 1060.0
    task.poll()
    assert task.view().progress == pytest.approx(0.05, abs=1e-6)
