"""Signals that set a :class:`threading.Event`, safely against a second signal.

Why not ``signal.signal(SIGTERM, lambda *_: stop.set())``: Python runs a handler in the main thread between two
bytecodes, so it can run *inside* another handler's ``Event.set``, which holds the Event's lock (not reentrant)
while it notifies the waiters. A second SIGTERM (``timeout`` after a ``kill``, a supervisor's retry, Ctrl-C twice)
then waits for that lock in the thread that holds it: the process hangs for good and only SIGKILL ends it, leaving
its tasks and cgroups (seen: an agent sent SIGTERM three times while starting, stuck in ``Condition.__enter__``).
Here the handler only writes a byte to a pipe (no lock at all), and a thread of its own reads it and sets the Event.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterable

__all__ = ["set_on_signals"]


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
