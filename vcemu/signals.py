"""Signals: a relay that sets a :class:`threading.Event`, safely against a second signal (:func:`set_on_signals`),
and the commands' Ctrl-C and SIGTERM handling (:func:`signals_interrupt`, :func:`signals_deferred`).

Why not ``signal.signal(SIGTERM, lambda *_: stop.set())``: Python runs a handler in the main thread between two
bytecodes, so it can run *inside* another handler's ``Event.set``, which holds the Event's lock (not reentrant)
while it notifies the waiters. A second SIGTERM (``timeout`` after a ``kill``, a supervisor's retry, Ctrl-C twice)
then waits for that lock in the thread that holds it: the process hangs for good and only SIGKILL ends it, leaving
its tasks and cgroups (seen: an agent sent SIGTERM three times while starting, stuck in ``Condition.__enter__``).
Here the handler only writes a byte to a pipe (no lock at all), and a thread of its own reads it and sets the Event.
"""

from __future__ import annotations

import _thread
import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

__all__ = ["INTERRUPTED", "set_on_signals", "signals_deferred", "signals_interrupt"]


def set_on_signals(event: threading.Event, signals: Iterable[int] = (signal.SIGINT, signal.SIGTERM),
                   keep_ignored: bool = False) -> Callable[[], None]:
    """From now on each of ``signals`` sets ``event`` (from the main thread only, as ``signal.signal`` requires),
    except, with ``keep_ignored``, one that is ignored now, which stays ignored. Returns a function that puts the
    earlier handlers back and ends the relay."""
    r, w = os.pipe()
    os.set_blocking(w, False)

    def relay() -> None:
        with contextlib.suppress(OSError):
            while os.read(r, 64):  # b"" once the write end is closed (restore)
                event.set()
        os.close(r)

    def handler(_signum: int, _frame: object) -> None:
        with contextlib.suppress(OSError):  # a full pipe already holds a wake-up
            os.write(w, b"s")

    threading.Thread(target=relay, name="signal-relay", daemon=True).start()
    old: dict[int, object] = {}
    for sig in signals:
        if keep_ignored and signal.getsignal(sig) is signal.SIG_IGN:
            continue
        old[sig] = signal.signal(sig, handler)

    def restore() -> None:
        for sig, previous in old.items():
            signal.signal(sig, previous)  # type: ignore[arg-type]
        with contextlib.suppress(OSError):
            os.close(w)

    return restore


#: How long after a swallowed interrupt :func:`signals_interrupt` sends its signal again.
RESEND_AFTER_S = 0.01

#: The exit status of a command stopped by Ctrl-C or SIGTERM (the shell's 128 + SIGINT, for either signal).
INTERRUPTED = 130


@contextlib.contextmanager
def signals_interrupt() -> Iterator[None]:
    """Within: SIGINT and SIGTERM raise KeyboardInterrupt in the main thread, and the handlers are given back
    after (for a caller in this process, such as a test). A command that spawns agents needs SIGTERM as well as
    Ctrl-C to unwind through its ``finally`` blocks: the agents run in sessions of their own, so the default
    SIGTERM, ending the process at once, would leave them retrying a dead coordinator for ever. (They also stop
    on their own once this process is gone: ``vcemu agent --parent-pid``.) A signal the caller ignores stays
    ignored: a shell starts a background job (``vcemu up &``) with SIGINT ignored, so that a Ctrl-C meant for the
    command in the foreground does not reach it.

    Only in this process: a process forked from it (a pool's worker, before its initializer has set its own
    handlers) that gets one of these signals exits at once (status 128 + the signal) instead. Raised there, the
    KeyboardInterrupt could unwind out of multiprocessing's child code into this command's own, and the worker
    would run the rest of the command as a second copy of it."""
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    owner = os.getpid()
    hook = sys.unraisablehook

    #: "active" until the context ends; "due": re-sends scheduled and not yet sent; "signal": the last one handled
    #: (no lock: the hook may run in the main thread anywhere, even where it would hold one; single dict operations
    #: are atomic under the GIL).
    state = {"active": True, "due": 0, "signal": signal.SIGTERM}

    def interrupt(signum: int, _frame: object) -> None:
        if os.getpid() != owner:
            os._exit(128 + signum)
        state["signal"] = signum
        raise KeyboardInterrupt

    def resend(signum: int) -> None:
        time.sleep(RESEND_AFTER_S)
        if state["active"]:  # (past the context's end: the exit raises it instead, below)
            state["due"] -= 1
            os.kill(owner, signum)

    def swallowed(unraisable: Any) -> None:
        """A KeyboardInterrupt of :func:`interrupt` that Python ignored: raised while the main thread ran a weakref
        callback or a ``__del__`` (an import's module-lock callback, in ``vcemu up``'s start-up: it printed
        "Exception ignored" and ran on; operator review, 1 run in 21). The signal is sent again a moment later,
        from a thread (``_thread``'s: ``threading``'s start takes a lock this thread may hold here), so that its
        handler runs once that callback has returned."""
        tb = unraisable.exc_traceback
        while tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
        if isinstance(unraisable.exc_value, KeyboardInterrupt) and tb is not None \
                and tb.tb_frame.f_code is interrupt.__code__:
            state["due"] += 1
            _thread.start_new_thread(resend, (state["signal"],))
            return
        hook(unraisable)

    for sig, handler in handlers.items():
        if handler is not signal.SIG_IGN:
            signal.signal(sig, interrupt)
    sys.unraisablehook = swallowed
    try:
        yield
    finally:
        state["active"] = False
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        sys.unraisablehook = hook  # (last: an interrupt swallowed until the handlers are back is still seen)
    if state["due"] > 0:  # swallowed within, not yet sent again (review: it fired after the context had ended)
        raise KeyboardInterrupt


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """Within: SIGINT and SIGTERM are held, then raised as KeyboardInterrupt on the way out, for work that must
    finish once begun (stopping the agents: a user's second Ctrl-C would otherwise leave them running). A signal
    the caller ignores stays ignored, as in :func:`signals_interrupt`."""
    caught: list[int] = []
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    for sig, handler in handlers.items():
        if handler is not signal.SIG_IGN:
            signal.signal(sig, lambda signum, _frame: caught.append(signum))
    try:
        yield
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    if caught:
        raise KeyboardInterrupt
