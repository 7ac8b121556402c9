"""A start the agent refuses for want of its machine's resources (RESOURCE_EXHAUSTED): kept pending, retried with a
growing wait (code review of session 42's fixes)."""
from __future__ import annotations

import errno
import logging
import time

from coordinator.engine import Engine
from coordinator.model import Host, JobSpec, JobState
from coordinator.policies import get_policy
from node_agent.agent import AgentCore, HostSpec
from node_agent.dutycycle import DutyCycleDriver
from node_agent.server import AgentServicer
from tests.unit.scripted_agent import backend_on
from workloads import progress


def test_a_start_that_always_finds_no_room_is_retried_with_a_growing_wait_and_said_once(monkeypatch, caplog) -> None:
    """/dev/shm stays full (or the agent's own ENOMEM/EAGAIN never passes): the job was offered again every poll
    interval, for good, with a StartTask, a journal write and (the path named the attempt's task id) a log line
    each time: 28 attempts and 28 lines in 3 s."""
    calls: list[str] = []

    def full(path: str, *a, **k):  # type: ignore[no-untyped-def]
        calls.append(path)
        raise OSError(errno.ENOSPC, "No space left on device", path)

    monkeypatch.setattr(progress, "create", full)
    core = AgentCore("rv-full", [HostSpec("h0", 1.0, 1 << 30)], DutyCycleDriver(), {"dgemm": 1000.0})
    try:
        with backend_on(AgentServicer(core)) as backend:
            engine = Engine(get_policy("greedy"), backend, [Host("h0", 1.0, 1.0)])
            engine.arrive(JobSpec("a", 0.0, 1, 0.5, 0.01, 10.0, "dgemm"))
            caplog.set_level(logging.WARNING)
            end = time.monotonic() + 3.0
            while time.monotonic() < end:
                engine.step(until=backend.now() + 0.5)
            said = [r.getMessage() for r in caplog.records if "stays pending" in r.getMessage()]
            assert engine.jobs["a"].state is JobState.PENDING
            assert len(calls) < 10, f"{len(calls)} attempts in 3 s: no backoff"
            assert len(said) == 1, said
    finally:
        core.shutdown()
