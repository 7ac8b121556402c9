"""The no-cgroups fallback (``--no-cgroups``): CPU limits by SIGSTOP/SIGCONT duty cycling.

Same interface as the cgroup drivers, so the runner does not know the difference. One thread runs
100 ms periods: at the start of a period it continues every unpaused process, and stops each limited
process after ``cores * period`` of wall time. This caps a process at its share (a single-process task
uses at most one core) but, unlike a CFS quota, grants wall time rather than CPU time: on a busy machine
a task gets less than its share. CPU and memory use come from /proc (psutil). Memory limits cannot be
enforced without cgroups; they are recorded only.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from dataclasses import dataclass, field

import psutil

from node_agent.cgroups import CgroupDriver

PERIOD_S = 0.1


@dataclass
class _Group:
    pids: set[int] = field(default_factory=set)
    cores: float = 1.0
    frozen: bool = False
    memory_limit: int = 0
    last_cpu_s: float = 0.0


def _signal(pids: set[int], sig: signal.Signals) -> None:
    for pid in list(pids):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


class DutyCycleDriver(CgroupDriver):
    """Throttles with signals from a background thread; call :meth:`close` to stop the thread."""

    mode = "duty-cycle"

    def __init__(self) -> None:
        self._groups: dict[str, _Group] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="duty-cycle", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=1.0)

    def _loop(self) -> None:
        while not self._stop.is_set():
            start = time.monotonic()
            with self._lock:  # continued under the lock: a freeze between the two would be undone for good
                running = [(n, g) for n, g in self._groups.items() if not g.frozen]
                for _, g in running:
                    _signal(g.pids, signal.SIGCONT)
            for name, g in sorted((x for x in running if x[1].cores < 1.0), key=lambda x: x[1].cores):
                delay = start + g.cores * PERIOD_S - time.monotonic()
                if delay > 0 and self._stop.wait(delay):
                    return
                with self._lock:
                    if self._groups.get(name) is g and not g.frozen and g.cores < 1.0:
                        _signal(g.pids, signal.SIGSTOP)
            self._stop.wait(max(0.0, start + PERIOD_S - time.monotonic()))

    def dirs(self, name: str | None = None) -> list[str]:
        return []

    def create(self, name: str) -> None:
        with self._lock:
            self._groups.setdefault(name, _Group())

    def add_pid(self, name: str, pid: int) -> None:
        with self._lock:
            self._groups[name].pids.add(pid)

    def set_cpu(self, name: str, cores: float) -> None:
        with self._lock:
            self._groups[name].cores = cores

    def set_memory_limit(self, name: str, limit_bytes: int) -> None:
        with self._lock:
            self._groups[name].memory_limit = limit_bytes

    def freeze(self, name: str) -> None:
        with self._lock:
            g = self._groups[name]
            g.frozen = True
            _signal(g.pids, signal.SIGSTOP)

    def thaw(self, name: str) -> None:
        with self._lock:
            g = self._groups.get(name)
            if g is not None:
                g.frozen = False
                _signal(g.pids, signal.SIGCONT)

    def _procs(self, name: str) -> list[psutil.Process]:
        procs = []
        for pid in self.pids(name):
            with contextlib.suppress(psutil.Error):
                procs.append(psutil.Process(pid))
        return procs

    def cpu_usage_s(self, name: str) -> float:
        total = 0.0
        for p in self._procs(name):
            with contextlib.suppress(psutil.Error):
                t = p.cpu_times()
                total += t.user + t.system
        g = self._groups[name]
        g.last_cpu_s = max(g.last_cpu_s, total)  # an exited process keeps its last reading
        return g.last_cpu_s

    def memory_usage(self, name: str) -> int:
        total = 0
        for p in self._procs(name):
            with contextlib.suppress(psutil.Error):
                total += p.memory_info().rss
        return total

    def pids(self, name: str) -> list[int]:
        with self._lock:
            g = self._groups.get(name)
            pids = sorted(g.pids) if g else []
        return [p for p in pids if psutil.pid_exists(p)]

    def remove(self, name: str) -> None:
        with self._lock:
            self._groups.pop(name, None)

    def cleanup(self, remove_parent: bool) -> list[str]:
        with self._lock:
            names = list(self._groups)
        for name in names:
            self.kill_all(name)
            self.remove(name)
        return names
