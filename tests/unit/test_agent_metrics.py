"""The agent's own metrics (node_agent.server.AgentCollector), read from a stand-in core, or from a real one
running modeled tasks (no processes) with the duty-cycle driver."""

from __future__ import annotations

import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry, generate_latest

from node_agent.agent import AgentCore, HostSpec
from node_agent.dutycycle import DutyCycleDriver
from node_agent.runner import State
from node_agent.server import AgentCollector
from workloads import modeled


class _Core:
    mode = "cgroup-v1"
    agent_id = "a0"

    def __init__(self, lease_left: float) -> None:
        self._left = lease_left

    def status(self) -> tuple[list, list]:
        return [], []

    def lease_left(self) -> float:
        return self._left

    def tasks_ended(self) -> dict[State, int]:
        return {}

    def program_starts(self) -> dict[tuple[str, str], int]:
        return {("dgemm", "spare"): 3, ("dgemm", "cold"): 1}

    def cpu_given(self) -> dict[str, tuple[float, float]]:
        return {}


def test_program_starts_are_counted_by_workload_and_by_whether_a_spare_was_taken() -> None:
    got = {k: v for k, v in _samples(_Core(-1.0)).items() if k.startswith("vcemu_agent_program_starts")}
    assert got == {'vcemu_agent_program_starts_total{source="cold",workload="dgemm"}': 1.0,
                   'vcemu_agent_program_starts_total{source="spare",workload="dgemm"}': 3.0}


def _samples(core: _Core | AgentCore) -> dict[str, float]:
    registry = CollectorRegistry()
    registry.register(AgentCollector(core))  # type: ignore[arg-type]
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in generate_latest(registry).decode().splitlines() if line.startswith("vcemu_agent_")}


def test_the_lease_left_shows_whether_the_coordinator_is_still_heard() -> None:
    """Operator review: an idle agent's metrics were identical before and 10 s after its coordinator was killed."""
    assert _samples(_Core(3.5))['vcemu_agent_lease_remaining_seconds{agent="a0"}'] == 3.5
    assert _samples(_Core(0.0))['vcemu_agent_lease_remaining_seconds{agent="a0"}'] == 0.0  # run out: tasks fenced
    assert not any(k.startswith("vcemu_agent_lease_remaining_seconds") for k in _samples(_Core(-1.0)))  # none held


def test_the_cgroup_mode_is_one_info_series() -> None:
    """An _info metric is one series of value 1: the modes not in use were exported as series of 0."""
    assert {k: v for k, v in _samples(_Core(-1.0)).items() if k.startswith("vcemu_agent_cgroup_mode_info")} == {
        'vcemu_agent_cgroup_mode_info{mode="cgroup-v1"}': 1.0}


def _wait(what: str, cond: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def _tasks(core: AgentCore) -> dict[str, float]:
    """The task series of a scrape: ``state -> value`` for the gauge, ``ended:state -> value`` for the counter."""
    out = {}
    for key, value in _samples(core).items():
        if key.startswith(("vcemu_agent_tasks{", "vcemu_agent_tasks_ended_total{")):
            state = key.split('state="')[1].rstrip('"}')
            out[("ended:" if "_ended_total" in key else "") + state] = value
    return out


def test_ended_tasks_are_counted_once_by_the_state_they_ended_in() -> None:
    """Operator review: the agent forgets a task at its Stop, so ``vcemu_agent_tasks{state="done"|"failed"|
    "stopped"}`` read 0 almost always. The gauge now covers unfinished states, and a counter counts each started
    task once, by its final state: at its end (a finished task the coordinator has not stopped yet included), not
    again at its Stop, and again for a new task that reuses a stopped one's id."""
    core = AgentCore("pytest-metrics-ended", [HostSpec("h", 1.0, 1 << 30)], DutyCycleDriver(), {})

    def start(task_id: str, work: float = 3600.0) -> None:
        core.start_task(task_id, "h", modeled.NAME, cpu_share=0.2, cpu_need=0.2, work_seconds=work,
                        memory_bytes=0)

    try:
        for task_id in ("runs", "pauses", "stops", "fails"):
            start(task_id)
        core.pause("pauses")
        assert _tasks(core) == {"starting": 0, "running": 3, "paused": 1, "ended:done": 0, "ended:failed": 0,
                                "ended:stopped": 0}
        start("done", work=0.2)  # 0.2 s of work at its full need (after the look above: a stall cannot end it first)
        core.stop("stops")

        def broken() -> None:
            raise OSError("simulated: progress unreadable")

        core._tasks["fails"].poll = broken  # type: ignore[method-assign]
        _wait("the done and failed tasks", lambda: core.task("done").state is State.DONE
              and core.task("fails").state is State.FAILED)
        ended = {"ended:done": 1, "ended:failed": 1, "ended:stopped": 1}
        assert _tasks(core) == {"starting": 0, "running": 1, "paused": 1} | ended  # done and failed: still known
        for task_id in ("done", "fails"):  # the coordinator releases them: counted already
            core.stop(task_id)
        assert _tasks(core) == {"starting": 0, "running": 1, "paused": 1} | ended
        start("stops")  # a job that migrates back reuses its task's id
        core.stop("stops")
        assert _tasks(core)["ended:stopped"] == 2
    finally:
        core.shutdown()
