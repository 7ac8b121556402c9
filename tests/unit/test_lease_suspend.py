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


def _modeled(monkeypatch: pytest.MonkeyPatch, ran_out_at: float | None) -> tuple[ModeledTask, list[float]]:
    """A modeled task at full share of 100 s of work, its clocks moved by the test: [monotonic, lease clock]."""
    from node_agent import runner

    clocks = [1000.0, 5000.0]
    monkeypatch.setattr(runner.time, "monotonic", lambda: clocks[0])
    monkeypatch.setattr(leaseclock, "now", lambda: clocks[1])
    spec = TaskSpec("m", "h", 1.0, "modeled", cpu_share=1.0, cpu_need=1.0, work_seconds=100.0, memory_bytes=0)
    task = ModeledTask(spec, lease_ran_out=lambda: None if ran_out_at is None or clocks[1] <= ran_out_at
                       else ran_out_at)
    task.start()
    return task, clocks


def test_a_modeled_task_makes_no_progress_while_its_host_is_suspended(monkeypatch: pytest.MonkeyPatch) -> None:
    """A suspend moves the lease clock (CLOCK_BOOTTIME) and not the monotonic one: a process makes no progress then,
    and a modeled task is credited none (code review: on the lease clock it was credited the sleep up to the lease's
    end, all of it with no lease)."""
    task, clocks = _modeled(monkeypatch, ran_out_at=None)
    clocks[1] += 60.0  # slept 60 s
    task.poll()
    assert task.view().progress == 0.0
    clocks[0] += 10.0
    clocks[1] += 10.0  # awake again: 10 s of work
    task.poll()
    assert task.view().progress == pytest.approx(0.10, abs=1e-9)


def test_a_modeled_task_is_credited_up_to_its_leases_end(monkeypatch: pytest.MonkeyPatch) -> None:
    """No suspend: 60 s pass on both clocks and the lease ran out 5 s in (on the lease clock): 5 s credited."""
    task, clocks = _modeled(monkeypatch, ran_out_at=5005.0)
    clocks[0] += 60.0
    clocks[1] += 60.0
    task.poll()
    assert task.view().progress == pytest.approx(0.05, abs=1e-9)
