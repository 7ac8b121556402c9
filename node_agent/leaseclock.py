"""The clock of an agent's lease: CLOCK_BOOTTIME where the system has it, else CLOCK_MONOTONIC.

Why not ``time.monotonic()``: CLOCK_MONOTONIC stands still while the system is suspended (a laptop's lid closed, a
host put to sleep, ``systemctl suspend``), and a lease counted on it outlived the silence it stands for: an agent whose
host slept for a minute woke with the rest of its lease still to run, while its coordinator, hearing nothing, had
declared it lost and started its jobs elsewhere; its tasks, running again at the wake-up, ran beside their restarted
copies until that rest ran out. CLOCK_BOOTTIME is CLOCK_MONOTONIC plus the time suspended (equal to it on a system that
never slept), and system-wide, as the fencer (another process) needs. Only the lease reads it: its deadline, its
renewals (the registrar's sending times, the clock a Status reply gives and the next poll echoes), the agent's start
and uptime, and a modeled task's progress, which stops at the lease's end. Every wait and timeout of the agent stays
on ``time.monotonic()``.
"""

from __future__ import annotations

import time

_CLOCK = getattr(time, "CLOCK_BOOTTIME", None)


def now() -> float:
    """Seconds on the lease's clock (see the module docstring)."""
    return time.clock_gettime(_CLOCK) if _CLOCK is not None else time.monotonic()
