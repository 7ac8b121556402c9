"""Whether the machine gives a host's busy tasks the CPU they were allocated.

A running dgemm or arraycycle task computes without pause, so its cgroup is charged its quota (its share of its host's
cores) unless the machine withholds it: other processes or cgroups that outweigh the agent's reservation (another
agent's tasks, a service with a high weight, a hypervisor taking the VM's cores), or, without cgroups, a duty cycle on a
busy machine. Such a task's ``cpu-time`` progress then comes slower than its share says, and its job's live time
departs from its simulation with nothing in the model to account for it. :class:`CpuShortfall` adds up, per host, the
CPU-seconds its busy tasks were allocated and were charged (the agent exports both as counters), and says when a
window's charged CPU falls below :data:`WARN_BELOW` of what was allocated.
"""

from __future__ import annotations

import os
from collections.abc import Callable

#: Wall seconds over which a host's allocated and charged CPU are compared for the warning.
WINDOW_S = 10.0
#: A window whose busy tasks were charged less than this fraction of their allocation is warned of.
WARN_BELOW = 0.9
#: Once warned of, a host is not warned of again for this long while its shortfall lasts.
REPEAT_S = 60.0
#: Windows with less allocated CPU than this (CPU-seconds) are not judged (a quota's granularity).
MIN_ALLOCATED_S = 0.05


def _load() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


class CpuShortfall:
    """Per host: the CPU-seconds its busy running tasks were allocated and charged, in total and over a window."""

    def __init__(self, window_s: float = WINDOW_S, warn_below: float = WARN_BELOW, repeat_s: float = REPEAT_S,
                 load: Callable[[], float] = _load) -> None:
        self.window_s, self.warn_below, self.repeat_s, self._load = window_s, warn_below, repeat_s, load
        self._totals: dict[str, list[float]] = {}  # host -> [allocated, charged], since the agent started
        self._window: dict[str, list[float]] = {}  # host -> [since, allocated, charged]
        self._warned: dict[str, float] = {}  # host -> when its last warning was given

    def add(self, host: str, seconds: float, allocated_s: float, charged_s: float, now: float) -> None:
        """Count a busy task's allocated and charged CPU-seconds over the ``seconds`` before ``now``."""
        total = self._totals.setdefault(host, [0.0, 0.0])
        total[0] += allocated_s
        total[1] += max(0.0, charged_s)
        w = self._window.setdefault(host, [now - seconds, 0.0, 0.0])
        w[1] += allocated_s
        w[2] += max(0.0, charged_s)

    def totals(self) -> dict[str, tuple[float, float]]:
        """Host -> (allocated, charged) CPU-seconds of its busy tasks since the agent started."""
        return {h: (a, c) for h, (a, c) in self._totals.items()}

    def check(self, now: float) -> list[str]:
        """The warnings due at ``now``: one per host whose window has ended with its busy tasks charged under
        :attr:`warn_below` of their allocation (at most one per :attr:`repeat_s` per host). Ended windows restart."""
        lines = []
        for host, (since, allocated, charged) in list(self._window.items()):
            if now - since < self.window_s:
                continue
            del self._window[host]
            if allocated < MIN_ALLOCATED_S or charged >= self.warn_below * allocated:
                continue
            if now - self._warned.get(host, -float("inf")) < self.repeat_s:
                continue
            self._warned[host] = now
            wall = now - since
            lines.append(
                f"host {host}: its running tasks were charged {charged / wall:.3f} cores over the last {wall:.0f} s, "
                f"{charged / allocated:.0%} of the {allocated / wall:.3f} allocated to them: the machine (1-minute "
                f"load {self._load():.1f}) gives them less CPU than their shares, so their jobs run slower than the "
                f"model says (vcemu_agent_host_busy_cpu_allocated/charged_seconds_total; said again after "
                f"{self.repeat_s:.0f} s if it lasts)")
        return lines
