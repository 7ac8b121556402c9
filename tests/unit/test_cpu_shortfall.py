"""A noisy neighbour: the agent says when the machine gives a host's busy tasks less CPU than their shares.

Before, a live run on a machine whose other processes outweighed the agent's reservation (review h217: two busy loops
in a cgroup of weight 262,144, or 64 other agents' tasks) slowed the jobs with no word from the agent: replay blamed
start-ups and restarts, and only a 1-s gauge over every task (idle servers and start-ups included) showed it."""

from __future__ import annotations

import logging
import time

import pytest

from node_agent.agent import AgentCore, HostSpec
from node_agent.dutycycle import DutyCycleDriver
from node_agent.shortfall import CpuShortfall
from tests.unit.test_agent_metrics import _samples


def test_a_window_charged_under_nine_tenths_of_its_allocation_is_warned_of_once_a_minute() -> None:
    s = CpuShortfall(window_s=10.0, load=lambda: 3.0)
    for t in range(1, 11):  # 10 s of a 0.3-core allocation charged 0.15 core
        s.add("h0", 1.0, 0.3, 0.15, float(t))
        s.add("h1", 1.0, 0.3, 0.29, float(t))  # 97%: the quota's own jitter, not warned of
    assert s.check(9.5) == []  # the window began at 0 (its first interval's start): not over yet
    lines = s.check(11.0)
    assert len(lines) == 1 and lines[0].startswith("host h0: ") and "50% of the 0.273 allocated" in lines[0], lines
    assert "load 3.0" in lines[0]
    for t in range(12, 23):
        s.add("h0", 1.0, 0.3, 0.15, float(t))
    assert s.check(23.0) == []  # within REPEAT_S of the last warning
    for t in range(80, 91):
        s.add("h0", 1.0, 0.3, 0.15, float(t))
    assert len(s.check(91.0)) == 1  # it lasts: said again
    assert s.totals()["h0"] == pytest.approx((0.3 * 32, 0.15 * 32))


def test_a_window_not_yet_ended_or_with_too_little_allocation_is_not_judged() -> None:
    s = CpuShortfall(window_s=10.0)
    s.add("h0", 1.0, 3.0, 0.0, 1.0)
    assert s.check(5.0) == []  # window (from 0) not over
    s2 = CpuShortfall(window_s=10.0)
    s2.add("h0", 1.0, 0.01, 0.0, 1.0)
    assert s2.check(11.0) == []  # 10 ms of CPU: below a quota's granularity


def test_the_agent_warns_and_exports_when_a_running_task_is_charged_less_than_its_share(
        caplog: pytest.LogCaptureFixture) -> None:
    """A real dgemm task (duty cycle: no root needed) whose charged CPU is read at 0.3 of what it got, as if the
    machine withheld the rest."""
    driver = DutyCycleDriver()
    real = driver.cpu_usage_s
    driver.cpu_usage_s = lambda name: 0.3 * real(name)  # type: ignore[method-assign]
    core = AgentCore("pytest-shortfall", [HostSpec("h", 0.2, 1 << 30)], driver, {"dgemm": 1000.0})
    core.shortfall.window_s = 1.0
    try:
        with caplog.at_level(logging.WARNING, logger="vcemu.agent"):
            core.start_task("t/0", "h", "dgemm", cpu_share=1.0, cpu_need=1.0, work_seconds=600.0,
                            memory_bytes=16 << 20)
            deadline = time.monotonic() + 30.0
            while not any("host h: its running tasks were charged" in r.getMessage() for r in caplog.records):
                assert time.monotonic() < deadline, "no shortfall warning in 30 s"
                time.sleep(0.1)
        (said,) = [r.getMessage() for r in caplog.records if "its running tasks were charged" in r.getMessage()][:1]
        assert said.endswith("holds them less exactly than a cgroup's quota")  # (duty cycle here: said so)
        got = _samples(core)
        allocated = got['vcemu_agent_host_busy_cpu_allocated_seconds_total{host="h"}']
        charged = got['vcemu_agent_host_busy_cpu_charged_seconds_total{host="h"}']
        assert allocated > 0.1 and charged < 0.5 * allocated, (allocated, charged)
    finally:
        core.shutdown()
