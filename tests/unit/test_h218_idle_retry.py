"""Review h218: an agent that runs nothing is polled once a second (IDLE_POLL_S), so its last answer can be older
than SILENT_AFTER_S (2 s) when a task is started on it (one round held 1 s by a silent agent's poll after the second
is enough), and _retry then gave the healthy agent's start one short attempt, as to an agent that stopped answering."""

from __future__ import annotations

import time

from coordinator.backends import live
from tests.unit.scripted_agent import TableAgent, backend_on


class _Done:
    def result(self) -> str:
        return "ok"


class _Fn:
    def __init__(self) -> None:
        self.timeouts: list[float] = []

    def future(self, request, timeout):  # noqa: ANN001, ANN201
        self.timeouts.append(timeout)
        return _Done()


def test_a_call_to_an_idle_agent_between_its_polls_is_not_cut_to_one_short_attempt() -> None:
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
