"""SIGTERM and SIGINT set a stop Event without taking its lock in the handler (vcemu.signals): a second signal
whose handler ran inside the first one's ``Event.set`` waited for the lock its own thread held, and the process
(an agent sent SIGTERM three times while starting) hung until SIGKILL. Each check runs in a process of its own,
with a deadline: on the old handlers it hangs."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

NESTED = """
import signal, threading
{setup}
handler = signal.getsignal(signal.SIGTERM)
with stop._cond:  # held, as by a first handler inside Event.set when the second signal comes
    handler(signal.SIGTERM, None)
assert stop.wait(5), "the signal did not set the event"
print("ok")
"""


@pytest.mark.parametrize("setup", [
    "from node_agent.cli import _signals_set\nstop = threading.Event()\n_signals_set(stop).__enter__()",
    "from coordinator.servers import signals_set\nstop = threading.Event()\nsignals_set(stop)",
], ids=["agent", "coordinator"])
def test_a_signal_that_comes_while_the_event_is_being_set_does_not_hang(setup: str) -> None:
    try:
        p = subprocess.run([sys.executable, "-c", NESTED.format(setup=setup)], cwd=ROOT, capture_output=True,
                           text=True, timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail("the handler waited for the Event's lock that its own thread held: a hang")
    assert (p.returncode, p.stdout.strip()) == (0, "ok"), p.stderr


def test_the_relay_ends_and_the_old_handlers_are_back_once_restored() -> None:
    code = """
import os, signal, threading, time
from vcemu.signals import set_on_signals
stop = threading.Event()
restore = set_on_signals(stop, (signal.SIGUSR1,))
os.kill(os.getpid(), signal.SIGUSR1)
assert stop.wait(5)
restore()
assert signal.getsignal(signal.SIGUSR1) is signal.SIG_DFL
deadline = time.monotonic() + 5
while any(t.name == "signal-relay" for t in threading.enumerate()) and time.monotonic() < deadline:
    time.sleep(0.01)
assert not any(t.name == "signal-relay" for t in threading.enumerate()), "the relay thread is still there"
print("ok")
"""
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert (p.returncode, p.stdout.strip()) == (0, "ok"), p.stderr


def test_an_interrupt_python_swallowed_in_a_weakref_callback_is_delivered_again() -> None:
    """Operator review: a SIGTERM to ``vcemu up`` while it started raised its KeyboardInterrupt inside an import's
    module-lock weakref callback, where Python prints "Exception ignored" and runs on: up kept running (1 run in
    21), and a second SIGTERM ended it with status 0. The swallowed interrupt is now sent again."""
    import gc
    import time
    import weakref

    from vcemu.signals import signals_interrupt

    class Thing:
        pass

    def callback(_ref: object) -> None:
        signal.raise_signal(signal.SIGTERM)
        for _ in range(10_000):  # (the handler runs here, inside the callback)
            pass

    unraisable = sys.unraisablehook
    with pytest.raises(KeyboardInterrupt), signals_interrupt():
        thing = Thing()
        ref = weakref.ref(thing, callback)
        del thing  # the callback runs: its KeyboardInterrupt is ignored, and the signal sent again
        gc.collect()
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:  # interrupted within 10 ms or so
            time.sleep(0.01)
    assert ref() is None and sys.unraisablehook is unraisable


def test_an_interrupt_swallowed_just_before_the_context_ends_is_raised_as_it_ends() -> None:
    """Review: the signal sent again could come after the context had given the handlers back (a KeyboardInterrupt
    outside it, or a SIGTERM's default action). Swallowed and not yet sent again when the context ends: raised
    there, and nothing comes after it."""
    import time
    import weakref

    from vcemu.signals import RESEND_AFTER_S, signals_interrupt

    class Thing:
        pass

    def callback(_ref: object) -> None:
        signal.raise_signal(signal.SIGINT)
        for _ in range(10_000):
            pass

    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt), signals_interrupt():
        thing = Thing()
        ref = weakref.ref(thing, callback)
        del thing  # swallowed, and the context ends at once
    assert ref() is None and signal.getsignal(signal.SIGINT) is before
    time.sleep(10 * RESEND_AFTER_S)  # no signal comes after: pytest would have stopped here (its SIGINT handler)
