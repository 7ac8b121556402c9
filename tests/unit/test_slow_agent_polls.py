"""Slow agents (a link of high latency, gray-failure review): the Status round asked them one after another, under
the backend's lock, so each slow agent added its delay to every round, and every start, end and decision on the
healthy agents waited for it. They are asked at once now: each slow agent's poll starts before any has answered."""

from __future__ import annotations

import threading
import time

from tests.unit.scripted_agent import TableAgent, backend_on


class SlowAgent(TableAgent):
    """Answers its Status polls ``delay`` seconds late (within the poll's deadline), noting when each came and went."""

    def __init__(self, agent_id: str, hosts: tuple[str, ...], delay: float, log: list[tuple[str, float]]) -> None:
        super().__init__(agent_id, hosts)
        self.delay, self.log, self.lock = delay, log, threading.Lock()

    def Status(self, request, context):  # noqa: N802
        with self.lock:
            self.log.append(("in", time.monotonic()))
        time.sleep(self.delay)
        with self.lock:
            self.log.append(("out", time.monotonic()))
        return super().Status(request, context)


def test_a_poll_round_asks_every_agent_before_it_waits_for_any(monkeypatch) -> None:
    from coordinator.backends import live

    monkeypatch.setattr(live, "IDLE_POLL_S", 0.0)  # (agents that run nothing are asked at every round, as busy ones)
    log: list[tuple[str, float]] = []
    slow = [SlowAgent(f"s{i}", (f"s{i}-h0",), 0.5, log) for i in range(3)]
    with backend_on(TableAgent("fast", ("f-h0",)), *slow) as backend:
        backend.poll()  # (connections made)
        log.clear()
        backend.poll()
        assert all(not h.silent for h in backend.agents.values()), "an agent's poll went unanswered"
        came = [t for what, t in log if what == "in"]
        went = [t for what, t in log if what == "out"]
        assert len(came) == len(went) == 3
        # One after another, each came after the one before had gone (0.5 s later): a round took the sum.
        assert max(came) < min(went), f"polls came {[round(t - min(came), 2) for t in came]} s after the first"


def test_an_agent_that_leaves_its_polls_unanswered_is_asked_again_after_a_wait_that_doubles(monkeypatch) -> None:
    """Each unanswered poll held the round, and the engine's lock, for the poll's deadline (1 s); an agent whose
    heartbeats get through while the coordinator's calls do not is never declared lost, and was asked at every round
    (every 0.1 s): the lock held 10 s in 11. It is asked again after SILENT_POLL_S, doubled with each poll in a row
    it leaves unanswered (here shortened to 0.3 s), and at every round again once it answers."""
    from coordinator.backends import live

    monkeypatch.setattr(live, "FAST_TIMEOUT_S", 0.3)
    monkeypatch.setattr(live, "SILENT_POLL_S", 0.3)
    monkeypatch.setattr(live, "IDLE_POLL_S", 0.0)  # (agents that run nothing are asked at every round, as busy ones)
    log: list[tuple[str, float]] = []
    slow = SlowAgent("s", ("s-h0",), 0.0, log)
    with backend_on(TableAgent("fast", ("f-h0",)), slow) as backend:
        backend.poll()
        handle = backend.agents["s"]
        assert not handle.silent

        def asked() -> int:
            with slow.lock:
                return sum(what == "in" for what, _ in log)

        slow.delay = 0.6  # past the poll's deadline
        backend.poll()
        assert handle.silent and handle.misses == 1 and asked() == 2
        backend.poll()  # at once: not asked, not waited for
        assert asked() == 2
        time.sleep(0.35)
        backend.poll()  # its wait has passed: asked, unanswered again, the next wait twice as long
        assert asked() == 3 and handle.misses == 2
        assert 0.3 < handle.next_poll - time.monotonic() <= 0.6  # (0.3 s doubled)
        slow.delay = 0.0
        time.sleep(0.65)
        backend.poll()
        assert asked() == 4 and not handle.silent and handle.misses == 0
        backend.poll()
        assert asked() == 5  # (answered: asked at every round again)


def test_a_half_open_connection_to_an_agent_is_replaced_after_two_unanswered_polls(monkeypatch) -> None:
    """The coordinator's connection to an agent left half-open (nothing forwarded either way, nothing closed) while
    new connections got through: gRPC kept it, every poll waited out its deadline on it, and the agent's heartbeats
    kept it registered, its jobs shown running with their progress frozen (3 min 16 s in the gray-failure review's
    live run). After two polls in a row unanswered, its channel is made anew, and the agent is heard again."""
    from coordinator.backends import live
    from tests.unit.scripted_agent import serve
    from tests.unit.stall_proxy import StallProxy

    monkeypatch.setattr(live, "FAST_TIMEOUT_S", 0.3)
    monkeypatch.setattr(live, "SILENT_POLL_S", 0.05)
    monkeypatch.setattr(live, "IDLE_POLL_S", 0.0)  # (agents that run nothing are asked at every round, as busy ones)
    server, address = serve(TableAgent("x", ("h0",)))
    proxy = StallProxy(address)
    backend = live.LiveBackend()
    try:
        backend.add_agent(proxy.address)
        backend.poll()
        handle = backend.agents["x"]
        assert not handle.silent and proxy.accepted == 1
        proxy.stall_existing()
        backend.poll()
        assert handle.silent  # (unanswered on the stalled connection)
        deadline = time.monotonic() + 10.0
        while handle.silent and time.monotonic() < deadline:
            time.sleep(0.06)
            backend.poll()
        assert not handle.silent and handle.misses == 0, f"not heard again in 10 s ({proxy.accepted} connections)"
        assert proxy.accepted == 2
    finally:
        backend.close()
        proxy.close()
        server.stop(0)


def test_a_silent_agents_orphans_wait_with_its_polls() -> None:
    """An orphan's Stop on a silent agent costs the round (and the engine's lock) a deadline, as its poll did: while
    its next poll is not due, its orphans are not tried either (gray-failure review: healthy hosts idle beside waiting
    jobs, the log full of failing Stops to the silent agent). Once it is due, they are."""
    import time as clock

    from coordinator.backends import live

    x = TableAgent("x", ("h0",))
    x.record_stops = True
    with backend_on(x) as backend:
        backend.poll()
        handle = backend.agents["x"]
        backend._orphans.append(live._Task("job-1.0", "h0"))
        handle.silent, handle.next_poll = True, clock.monotonic() + 60.0
        assert backend._stop_orphans() is False
        assert [c for c in x.calls if c[0] in ("Stop", "StopTasks")] == [], "a Stop was sent to the silent agent"
        assert backend._stop_orphans(asked={"x"}) is True  # (the round this call follows asked it)
        assert [c for c in x.calls if c[0] in ("Stop", "StopTasks")] == [("Stop", ("job-1.0",))]
        backend._orphans.append(live._Task("job-2.0", "h0"))
        handle.next_poll = 0.0  # (its poll is due)
        assert backend._stop_orphans() is True
        assert [c for c in x.calls if c[0] in ("Stop", "StopTasks")][1:] == [("Stop", ("job-2.0",))]


def test_an_agent_that_runs_nothing_is_asked_once_a_second_and_at_every_round_once_a_task_starts_on_it() -> None:
    """Scale review: every round (every 0.1 s) asked every agent, busy or idle, and 64 idle agents cost the
    coordinator a third of a core and themselves about one more, on 2 cores; healthy agents were declared lost, their
    heartbeats unanswered by the starved coordinator. One that runs nothing is asked every IDLE_POLL_S."""
    from coordinator.backends import live
    from coordinator.model import JobSpec

    log: list[tuple[str, float]] = []
    idle = SlowAgent("idle", ("i-h0",), 0.0, log)
    with backend_on(TableAgent("busy", ("b-h0",)), idle) as backend:

        def asked() -> int:
            with idle.lock:
                return sum(what == "in" for what, _ in log)

        backend.poll()
        answered = backend.agents["idle"].last_seen
        assert asked() == 1
        rounds = 0
        while time.monotonic() - answered < 0.8 * live.IDLE_POLL_S:  # rounds within the second: not asked again
            backend.poll()
            rounds += 1
            assert asked() == 1
            time.sleep(0.1)
        assert rounds >= 3
        time.sleep(max(0.0, answered + live.IDLE_POLL_S - time.monotonic()))
        backend.poll()  # a second since its answer: asked
        assert asked() == 2
        backend.start(JobSpec("a", 0.0, 1, 1.0, 0.1, 10.0), ["i-h0"], 1.0)  # a task on it: asked at every round
        for n in (3, 4, 5):
            backend.poll()
            assert asked() == n


class _Done:
    """A call's answer, at once."""

    def result(self) -> str:
        return "ok"


class _Fn:
    """An RPC method whose calls note their deadlines."""

    def __init__(self) -> None:
        self.timeouts: list[float] = []

    def future(self, request, timeout):  # noqa: ANN001, ANN201
        self.timeouts.append(timeout)
        return _Done()


def test_a_call_to_an_idle_agent_between_its_polls_is_not_cut_to_one_short_attempt() -> None:
    """Review h218: an agent that runs nothing is polled once a second (IDLE_POLL_S), so its last answer can be
    older than SILENT_AFTER_S (2 s) when a task is started on it (one round held 1 s by a silent agent's poll after
    the second is enough), and _retry then gave the healthy agent's start one short attempt, as to an agent that
    stopped answering."""
    from coordinator.backends import live

    with backend_on(TableAgent("idle", ("i-h0",))) as backend:
        backend.poll()
        handle = backend.agents["idle"]
        assert handle.idle_until > 0 and not handle.silent  # it answered, running nothing
        # Its last answer 2.2 s ago: the 1 s of IDLE_POLL_S, then a round held 1 s by a silent agent's poll
        handle.last_seen = time.monotonic() - (live.SILENT_AFTER_S + 0.2)
        handle.idle_until = handle.last_seen + live.IDLE_POLL_S
        fn = _Fn()
        backend._retry(fn, None, host="i-h0")
        assert fn.timeouts == [backend.rpc_timeout / live.RPC_ATTEMPTS], fn.timeouts
