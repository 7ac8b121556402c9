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


def test_a_job_refused_for_want_of_resources_ten_times_in_a_row_fails_saying_so() -> None:
    """A shortage that lasts (the refused host still looks free to the policy, which places the job there again)
    must not keep the job pending for good: after RETRY_BACKOFF_TRIES refusals in a row, each wait doubled, it fails."""
    from coordinator.backends.base import BackendError
    from coordinator.backends.sim import SimBackend
    from coordinator.engine import RETRY_BACKOFF_TRIES, RETRY_DOUBLINGS_MAX

    class Exhausted(SimBackend):
        retry_after = 0.01
        starts: list[float] = []

        def start(self, spec, hosts, cpu, progress=0.0):  # type: ignore[no-untyped-def]
            self.starts.append(self.now())
            raise BackendError("StartTask on h0: RESOURCE_EXHAUSTED: agent out of space in /dev/shm/x", True,
                               backoff=True)

    backend = Exhausted()
    engine = Engine(get_policy("greedy"), backend, [Host("h0", 1.0, 1.0)])
    engine.run([JobSpec("a", 0.0, 1, 0.5, 0.01, 10.0)])
    rec = engine.jobs["a"]
    assert rec.state is JobState.FAILED and rec.message.endswith(
        f"(refused so {RETRY_BACKOFF_TRIES + 1} times in a row: given up)"), rec.message
    gaps = [round(b - a, 6) for a, b in zip(backend.starts, backend.starts[1:], strict=False)]
    assert gaps == [round(0.01 * 2 ** min(i, RETRY_DOUBLINGS_MAX), 6) for i in range(RETRY_BACKOFF_TRIES)]
