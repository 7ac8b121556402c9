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


class _Refusing:
    """A simulated backend whose agent of ``short`` hosts refuses starts for want of space while ``full`` holds (a
    full /dev/shm there), as the live backend's BackendError says it (``short``: every host of the agent)."""

    def __init__(self, short: tuple[str, ...], refusals: int = 10**9) -> None:
        from coordinator.backends.sim import SimBackend

        self.backend = SimBackend()
        self.backend.retry_after = 0.01  # type: ignore[attr-defined]
        self.short, self.refusals, self.starts = short, refusals, []  # type: list[tuple[float, tuple[str, ...]]]
        start = self.backend.start

        def refusing(spec, hosts, cpu, progress=0.0):  # type: ignore[no-untyped-def]
            from coordinator.backends.base import BackendError

            self.starts.append((self.backend.now(), tuple(hosts)))
            if self.refusals > 0 and set(hosts) & set(self.short):
                self.refusals -= 1
                error = BackendError(f"StartTask on {hosts[0]}: RESOURCE_EXHAUSTED: agent out of space in /dev/shm",
                                     True, backoff=True)
                error.short = self.short
                raise error
            return start(spec, hosts, cpu, progress)

        self.backend.start = refusing  # type: ignore[method-assign]


def test_a_host_whose_agent_is_short_is_shown_full_and_the_job_goes_to_another() -> None:
    """The refused job went back to the refusing host at every retry (it still looked free to the policy) until it
    failed after ten refusals, while another host stood idle: the policy now sees that agent's hosts as full for a
    while, and the job starts on the idle one at its first retry."""
    from coordinator.engine import SHORT_HOST_DOUBLINGS_MIN

    r = _Refusing(short=("h0", "h1"))
    engine = Engine(get_policy("greedy"), r.backend, [Host("h0", 1.0, 1.0), Host("h1", 1.0, 1.0), Host("h2", 1.0, 1.0)])
    engine.arrive(JobSpec("a", 0.0, 1, 0.5, 0.01, 10.0))
    engine.step(until=0.005)
    assert r.starts == [(0.0, ("h0",))] and engine.jobs["a"].state is JobState.PENDING
    assert {h: mark[:2] for h, mark in engine._short.items()} == {
        h: (0.01 * 2**SHORT_HOST_DOUBLINGS_MIN, 1) for h in ("h0", "h1")}
    assert [h.name for h in engine.snapshot().hosts] == ["h2"]  # (nothing of ours is placed on h0 or h1)
    engine.run([])
    assert r.starts == [(0.0, ("h0",)), (0.01, ("h2",))]
    assert engine.jobs["a"].state is JobState.DONE and engine.jobs["a"].hosts == ("h2",)


def test_a_short_host_keeps_what_runs_there_and_takes_nothing_new_until_its_wait_has_passed() -> None:
    """Shown full, not left out, while a task of ours is placed there: with its placed tasks' memory as its whole
    memory, so that what runs there keeps its place and nothing new fits; shown as it is once the wait has passed,
    and the policy asked again then (a Tick for a policy with no period, which would otherwise wait for the next
    submission or completion), when the second job starts there."""
    from coordinator.engine import SHORT_HOST_DOUBLINGS_MIN

    r = _Refusing(short=("h0",), refusals=0)
    engine = Engine(get_policy("greedy"), r.backend, [Host("h0", 1.0, 1.0)])
    engine.arrive(JobSpec("a", 0.0, 1, 0.25, 0.3, 100.0))
    engine.step(until=0.0)
    engine.step(until=1.0)
    r.refusals = 1
    engine.arrive(JobSpec("b", 1.0, 1, 0.25, 0.3, 10.0))
    engine.step(until=1.0)
    assert engine.jobs["b"].state is JobState.PENDING and engine.jobs["a"].state is JobState.RUNNING
    wait = 0.01 * 2**SHORT_HOST_DOUBLINGS_MIN
    snap = engine.snapshot()
    assert [(h.name, h.cpu, round(h.mem, 9)) for h in snap.hosts] == [("h0", 1.0, 0.3)]
    engine.step(until=1.0 + wait - 0.001)
    assert engine.jobs["b"].state is JobState.PENDING and r.starts[-1] == (1.0, ("h0",))
    engine.step(until=1.0 + wait + 0.001)
    assert r.starts[-1] == (1.0 + wait, ("h0",)) and engine.jobs["b"].state is JobState.RUNNING
    assert [(h.name, h.mem) for h in engine.snapshot().hosts] == [("h0", 1.0)]
    assert engine._short == {}  # (its start got through: the host's refusals in a row end there)


def test_each_refusal_in_a_row_on_a_short_host_doubles_its_wait() -> None:
    """One host, an agent that stays short: the job is offered to the host again only as each wait passes, the
    waits doubling (from SHORT_HOST_DOUBLINGS_MIN doublings of retry_after) up to RETRY_DOUBLINGS_MAX, and it fails
    after RETRY_BACKOFF_TRIES refusals in a row, as before."""
    from coordinator.engine import RETRY_BACKOFF_TRIES, RETRY_DOUBLINGS_MAX, SHORT_HOST_DOUBLINGS_MIN

    r = _Refusing(short=("h0",))
    engine = Engine(get_policy("greedy"), r.backend, [Host("h0", 1.0, 1.0)])
    engine.run([JobSpec("a", 0.0, 1, 0.5, 0.01, 10.0)])
    assert engine.jobs["a"].state is JobState.FAILED
    assert len(r.starts) == RETRY_BACKOFF_TRIES + 1
    gaps = [round(b[0] - a[0], 6) for a, b in zip(r.starts, r.starts[1:], strict=False)]
    assert gaps == [round(0.01 * 2 ** min(SHORT_HOST_DOUBLINGS_MIN + i, RETRY_DOUBLINGS_MAX), 6)
                    for i in range(RETRY_BACKOFF_TRIES)]


def test_the_live_backend_names_every_host_of_the_short_agent() -> None:
    """A refusal for want of the machine's resources is the agent's, not the host's: the error names all of its
    hosts (an agent emulating two hosts with one full /dev/shm), and no other agent's."""
    from coordinator.backends.base import BackendError

    def full(path: str, *a, **k):  # type: ignore[no-untyped-def]
        raise OSError(errno.ENOSPC, "No space left on device", path)

    short = AgentCore("rv-short", [HostSpec("s0", 1.0, 1 << 30), HostSpec("s1", 1.0, 1 << 30)], DutyCycleDriver(),
                      {"dgemm": 1000.0})
    other = AgentCore("rv-other", [HostSpec("o0", 1.0, 1 << 30)], DutyCycleDriver(), {"dgemm": 1000.0})
    try:
        with backend_on(AgentServicer(short), AgentServicer(other)) as backend:
            import pytest

            with pytest.MonkeyPatch.context() as mp:
                mp.setattr(progress, "create", full)
                try:
                    backend.start(JobSpec("a", 0.0, 1, 0.5, 0.01, 10.0, "dgemm"), ["s1"], 0.5)
                except BackendError as exc:
                    error = exc
                else:
                    raise AssertionError("the start was not refused")
            assert error.backoff and error.unreachable
            assert sorted(error.short) == ["s0", "s1"]
    finally:
        short.shutdown()
        other.shutdown()


def test_refusals_of_one_plan_mark_the_short_host_once() -> None:
    """A plan that starts several jobs on a short host meets a refusal for each: one mark and one line, not a
    doubling and a line per job (the second was refused before the first's mark could keep it away)."""
    from coordinator.engine import SHORT_HOST_DOUBLINGS_MIN
    from coordinator.plan import Plan, Start

    r = _Refusing(short=("h0",))
    engine = Engine(get_policy("greedy"), r.backend, [Host("h0", 1.0, 1.0), Host("h1", 1.0, 1.0)])
    for job in ("a", "b", "c"):
        engine.arrive(JobSpec(job, 0.0, 1, 0.25, 0.1, 10.0))
    engine.apply(Plan([Start(job, ("h0",), 0.25) for job in ("a", "b", "c")]))
    assert [h for _, h in r.starts] == [("h0",)] * 3
    assert {h: mark[:2] for h, mark in engine._short.items()} == {"h0": (0.01 * 2**SHORT_HOST_DOUBLINGS_MIN, 1)}
    engine.run([])
    assert all(engine.jobs[j].state is JobState.DONE and engine.jobs[j].hosts == ("h1",) for j in "abc")


def test_a_job_refused_by_a_short_agent_runs_on_another_agent() -> None:
    """Through gRPC, two real agents: the one the policy picks first has a full /dev/shm (its task files cannot be
    made); the job is refused there once, and starts and ends on the other agent's host instead of being refused
    there ten times and failing."""
    agents = [AgentCore(f"rv-{name}", [HostSpec(f"{name}0", 1.0, 1 << 30)], DutyCycleDriver(), {"dgemm": 1000.0})
              for name in ("full", "roomy")]
    create = progress.create
    tried: list[str] = []

    def full_on_the_first(path: str) -> None:
        tried.append(path)
        if "rv-full" in path:
            raise OSError(errno.ENOSPC, "No space left on device", path)
        create(path)

    import pytest

    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(progress, "create", full_on_the_first)
            with backend_on(*(AgentServicer(a) for a in agents)) as backend:
                engine = Engine(get_policy("greedy"), backend, [Host("full0", 1.0, 1.0), Host("roomy0", 1.0, 1.0)])
                engine.arrive(JobSpec("a", 0.0, 1, 0.5, 0.01, 0.3, "dgemm"))
                end = time.monotonic() + 20.0
                while engine.jobs["a"].state is not JobState.DONE and time.monotonic() < end:
                    engine.step(until=backend.now() + 0.2)
                rec = engine.jobs["a"]
                assert rec.state is JobState.DONE and rec.hosts == ("roomy0",), (rec.state, rec.hosts, rec.message)
                assert sum("rv-full" in p for p in tried) == 1, tried
    finally:
        for a in agents:
            a.shutdown()


def test_a_resume_refused_for_want_of_resources_marks_the_agents_hosts_too() -> None:
    """Not only a start: a resume (a new start of a checkpointed task) or a move refused RESOURCE_EXHAUSTED says the
    same of the machine, and its hosts are kept from new tasks for a while (code review: only a pending job's start
    marked them)."""
    from coordinator.backends.base import BackendError
    from coordinator.engine import SHORT_HOST_DOUBLINGS_MIN
    from coordinator.plan import Pause, Plan, Resume, Start

    r = _Refusing(short=("h0",), refusals=0)
    engine = Engine(get_policy("greedy-pmtn"), r.backend, [Host("h0", 1.0, 1.0), Host("h1", 1.0, 1.0)])
    engine.arrive(JobSpec("p", 0.0, 1, 0.5, 0.2, 100.0))
    engine.apply(Plan((Start("p", ("h0",), 0.5),)))
    engine.apply(Plan((Pause("p"),)))

    def refused(job, hosts, cpu):  # type: ignore[no-untyped-def]
        error = BackendError("StartTask on h0: RESOURCE_EXHAUSTED: agent out of space in /dev/shm", True, backoff=True)
        error.short = ("h0",)
        raise error

    r.backend.resume = refused  # type: ignore[method-assign]
    engine.apply(Plan((Resume("p", ("h0",), 0.5),)))
    assert {h: mark[:2] for h, mark in engine._short.items()} == {"h0": (0.01 * 2**SHORT_HOST_DOUBLINGS_MIN, 1)}
    assert engine.jobs["p"].state is JobState.PENDING  # (requeued with its progress, as before)
