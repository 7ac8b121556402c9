"""``vcemu up`` stopped by Ctrl-C or SIGTERM while its cluster is still starting: the agent processes it spawned
(in sessions of their own, so the terminal's Ctrl-C does not reach them) are stopped with it, and the user reads
one line, not a traceback. A real coordinator; the agents are stand-ins that never register (``sleep``), so the
signal always lands while ``up`` waits for them."""

from __future__ import annotations

import os
import signal
import subprocess
import threading

import pytest

import coordinator.servers
import vcemu.signals
from tests.unit.test_cli_errors import run


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_up_interrupted_while_starting_stops_its_agents_without_a_traceback(
        sig: signal.Signals, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    spawned: list[subprocess.Popen] = []

    def spawn_agent(*_a, **_k) -> subprocess.Popen:
        proc = subprocess.Popen(["sleep", "60"], start_new_session=True)  # as the real one: out of our session
        spawned.append(proc)
        threading.Timer(0.5, os.kill, (os.getpid(), sig)).start()  # while `up` waits for it to register
        return proc

    monkeypatch.setattr(coordinator.servers, "spawn_agent", spawn_agent)
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        code, printed, err = run(["up", "--hosts", "1", "--port", "0", "--no-cgroups"], capsys)
        assert code == 130, err
        assert "Traceback" not in err, err
        assert err.strip().splitlines()[-1] == ("vcemu up: interrupted while starting; the coordinator and the "
                                                "agents it started are stopped"), err
        assert "coordinator on" not in printed
        assert len(spawned) == 1 and spawned[0].poll() == -signal.SIGTERM  # stopped by up, not left to run
        assert {s: signal.getsignal(s) for s in before} == before  # this process's handlers are given back
    finally:
        for proc in spawned:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_a_signal_the_caller_ignores_stays_ignored() -> None:
    """A shell starts ``vcemu up &`` with SIGINT ignored, so that a Ctrl-C meant for the foreground command does not
    reach the background one; ``signals_interrupt`` turned it back into a KeyboardInterrupt (found by review)."""
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with vcemu.signals.signals_interrupt():
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            term_handler = signal.getsignal(signal.SIGTERM)  # SIGTERM raises KeyboardInterrupt here
            assert callable(term_handler)
            with pytest.raises(KeyboardInterrupt):
                term_handler(signal.SIGTERM, None)
            with vcemu.signals.signals_deferred():
                assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        term = signal.getsignal(signal.SIGTERM)
        try:  # and once up is running (signals_set: the clean stop), as the review found it was not
            coordinator.servers.signals_set(threading.Event())
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) not in (term, signal.SIG_IGN)
        finally:
            signal.signal(signal.SIGTERM, term)
    finally:
        signal.signal(signal.SIGINT, before)
