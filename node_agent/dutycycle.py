"""The no-cgroups fallback (``--no-cgroups``): CPU limits by SIGSTOP/SIGCONT duty cycling.

Same interface as the cgroup drivers, so the runner does not know the difference. One thread runs
100 ms periods: at the start of a period it continues every unpaused process, and stops each limited
process after ``cores * period`` of wall time. This caps a process at its share (a single-process task
uses at most one core) but, unlike a CFS quota, grants wall time rather than CPU time: on a busy machine
a task gets less than its share. CPU and memory use come from /proc (psutil). Memory limits cannot be
enforced without cgroups, and are ignored.

The agent's fencer (:mod:`node_agent.fencer`) must be able to stop the tasks while the agent itself does not run,
and there is no freezer to share with it: once the agent gives the driver its work directory
(:meth:`DutyCycleDriver.attach_workdir`), the driver keeps a directory per group there with the group's processes
(pid and start time), and takes a group the fencer has marked fenced as frozen: it keeps its processes stopped, and
only :meth:`~DutyCycleDriver.thaw` removes the mark.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

import psutil

from node_agent.cgroups import CgroupDriver, _proc_stat
from node_agent.fencer import FENCED, write_pids

PERIOD_S = 0.1


@dataclass
class _Group:
    #: The group's processes, each with its start time (0: unread) for the fencer, which must never signal a
    #: reused pid.
    pids: dict[int, int] = field(default_factory=dict)
    cores: float = 1.0
    frozen: bool = False
    last_cpu_s: float = 0.0


def _signal(pids: Iterable[int], sig: signal.Signals) -> None:
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
        #: Where the groups are shared with the fencer (None until :meth:`attach_workdir`: no fencer).
        self._fence_dir: str | None = None
        self._thread = threading.Thread(target=self._loop, name="duty-cycle", daemon=True)
        self._thread.start()

    def attach_workdir(self, workdir: str) -> None:
        """Share the groups with a fencer, in ``workdir``/fence (see the module docstring)."""
        path = os.path.join(workdir, "fence")
        os.makedirs(path, exist_ok=True)
        with self._lock:
            self._fence_dir = path
            for name, g in self._groups.items():
                self._publish(name, g)

    def fencer_args(self) -> list[str] | None:
        return None if self._fence_dir is None else ["--duty", self._fence_dir]

    def _group_dir(self, name: str) -> str | None:
        return None if self._fence_dir is None else os.path.join(self._fence_dir, name)

    def _publish(self, name: str, g: _Group) -> None:
        """(Under the lock.) The group's processes, for the fencer."""
        if (d := self._group_dir(name)) is not None:
            os.makedirs(d, exist_ok=True)
            write_pids(d, g.pids)

    def _fenced(self, name: str) -> bool:
        """Whether the fencer has marked the group (its lease ran out while the agent did not run)."""
        d = self._group_dir(name)
        return d is not None and os.path.exists(os.path.join(d, FENCED))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=1.0)

    def _loop(self) -> None:
        while not self._stop.is_set():
            start = time.monotonic()
            with self._lock:  # continued under the lock: a freeze between the two would be undone for good
                running = []
                for n, g in self._groups.items():
                    if g.frozen:
                        continue
                    if self._fenced(n):  # stopped by the fencer, perhaps continued just before its mark: again
                        _signal(g.pids, signal.SIGSTOP)
                        continue
                    running.append((n, g))
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
            if name not in self._groups:
                self._groups[name] = g = _Group()
                self._publish(name, g)

    def add_pid(self, name: str, pid: int) -> None:
        with self._lock:
            g = self._groups[name]
            g.pids[pid] = stat[1] if (stat := _proc_stat(pid)) is not None else 0
            self._publish(name, g)

    def set_cpu(self, name: str, cores: float, reserved: bool = True) -> None:
        with self._lock:  # (a duty cycle has no weights: ``reserved`` changes nothing)
            self._groups[name].cores = cores

    def set_memory_limit(self, name: str, limit_bytes: int) -> None:
        """Nothing: a memory limit cannot be enforced without cgroups (see the module docstring)."""

    def freeze(self, name: str) -> None:
        with self._lock:
            g = self._groups[name]
            g.frozen = True
            _signal(g.pids, signal.SIGSTOP)

    def thaw(self, name: str) -> None:
        with self._lock:
            g = self._groups.get(name)
            if g is not None:
                if (d := self._group_dir(name)) is not None:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(os.path.join(d, FENCED))
                g.frozen = False
                _signal(g.pids, signal.SIGCONT)

    def is_frozen(self, name: str) -> bool:
        with self._lock:
            g = self._groups.get(name)
            return g is not None and (g.frozen or self._fenced(name))

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

    def pids(self, name: str) -> list[int]:
        with self._lock:
            g = self._groups.get(name)
            pids = sorted(g.pids) if g else []
        return [p for p in pids if psutil.pid_exists(p)]

    def remove(self, name: str) -> None:
        with self._lock:
            self._groups.pop(name, None)
            if (d := self._group_dir(name)) is not None:
                for _ in range(3):  # (a fencer marking it meanwhile may leave a file behind the first pass)
                    shutil.rmtree(d, ignore_errors=True)
                    if not os.path.exists(d):
                        break

    def cleanup(self, remove_parent: bool) -> list[str]:
        with self._lock:
            names = list(self._groups)
        for name in names:
            self.kill_all(name)
            self.remove(name)
        return names
