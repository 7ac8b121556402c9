"""Warm spare workload processes, so that a task's start does not wait for Python and numpy to load.

Why: a task's program was started at its StartTask, and its interpreter's start and numpy's import took 0.12 to
0.19 s (the median of 6 starts, idle and with both cores busy, on this project's 2-core VM) before the task
could run. A resume pays it again (seed 001 Sec. II-B's preemption: a pause checkpoints and stops the job, a
resume starts it again), and in a replay compressed K-fold each such wait counts K times over in trace time.

A spare is a workload program started ahead with ``--spare`` (:mod:`workloads.program`): it has imported numpy
and waits for its task's arguments on stdin. A start takes one (:meth:`Spares.take`), puts it in the task's cgroup
and sends it its arguments and the go byte (:meth:`node_agent.runner.Task.start`); from there on it is the task's
program exactly as a cold-started one would be. What changes for the task: its import ran in the agent's cgroup,
so neither its CPU nor numpy's pages are charged to the task. Neither was part of its work (its boot phase, the
module docstring of :mod:`node_agent.runner`, runs at the whole host's capacity and is not counted), and its
memory limit keeps the interpreter's allowance.

The pool is refilled by a thread of its own after each take, so that a burst of starts takes the ready spares and
then starts cold, never waiting for a refill. A spare that dies before it is taken is replaced, up to
:data:`MAX_DEATHS` per workload; after that the workload's tasks all start cold (logged once, with the spare's last
words). An agent that dies leaves its spares nothing to read: they exit at the end of their stdin (status 3).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import subprocess
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass

from workloads.registry import child_env, command

log = logging.getLogger(__name__)

#: Spares kept of each workload by ``vcemu agent`` (``--spares``): a plan that resumes a few jobs at once on an agent
#: takes two before it starts cold; each idle spare holds about 30 MB (the interpreter and numpy).
DEFAULT_SPARES = 2
#: Spares of one workload that may die before being taken before the workload gets no more.
MAX_DEATHS = 3
#: How often an idle pool checks that its spares are alive (a dead one is replaced without waiting for a take).
CHECK_S = 5.0


@dataclass
class Spare:
    """A started program waiting for its task, and the file its stderr goes to (a start renames it the task's)."""

    proc: subprocess.Popen[bytes]
    stderr_path: str

    def kill(self) -> None:
        """End it and reap it: EOF first (it exits 3), SIGKILL if it is still there."""
        with contextlib.suppress(OSError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        with contextlib.suppress(OSError):
            self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5.0)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.stderr_path)


class Spares:
    """Up to ``per_workload`` spares of each of ``workloads``, started in ``workdir`` (their stderr files)."""

    def __init__(self, workdir: str, workloads: Iterable[str], per_workload: int) -> None:
        if per_workload < 0:
            raise ValueError(f"spares: must be a whole number >= 0, got {per_workload}")
        self._workdir = workdir
        self._per = per_workload
        self._lock = threading.Lock()
        self._ready: dict[str, list[Spare]] = {w: [] for w in workloads} if per_workload > 0 else {}
        self._deaths = dict.fromkeys(self._ready, 0)
        self._numbers = itertools.count()
        self._closed = False
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        if self._ready:
            self._thread = threading.Thread(target=self._fill_loop, name="spares", daemon=True)
            self._thread.start()

    def take(self, workload: str) -> Spare | None:
        """A live spare of ``workload``, now the caller's, or None (none ready: a cold start). Never waits for one."""
        with self._lock:
            pool = self._ready.get(workload)
            spare = None
            while pool and spare is None:
                candidate = pool.pop(0)
                if candidate.proc.poll() is None:
                    spare = candidate
                else:
                    self._died(workload, candidate)
        if workload in self._ready:
            self._wake.set()
        return spare

    def ready(self, workload: str) -> int:
        """How many spares of ``workload`` wait (live or not: checked at a take)."""
        with self._lock:
            return len(self._ready.get(workload, ()))

    def wait_filled(self, timeout: float) -> bool:
        """Wait until every workload still given spares has its full count (tests, and a caller that would start
        many tasks at once). True if they do."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                if all(len(pool) >= self._per for w, pool in self._ready.items() if self._deaths[w] < MAX_DEATHS):
                    return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)

    def close(self) -> None:
        """Stop refilling and end every spare not taken. Idempotent."""
        with self._lock:
            self._closed = True
            left = [s for pool in self._ready.values() for s in pool]
            for pool in self._ready.values():
                pool.clear()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10.0)
        for spare in left:
            spare.kill()

    # ---- the refill thread ---------------------------------------------------------------------------------------

    def _fill_loop(self) -> None:
        while True:
            self._wake.clear()
            for workload in list(self._ready):
                while True:
                    with self._lock:
                        if self._closed:
                            return
                        pool = self._ready[workload]
                        for dead in [s for s in pool if s.proc.poll() is not None]:
                            pool.remove(dead)
                            self._died(workload, dead)
                        if len(pool) >= self._per or self._deaths[workload] >= MAX_DEATHS:
                            break
                    spare = self._start(workload)  # (outside the lock: a take never waits for a start)
                    if spare is None:
                        break
                    with self._lock:
                        if self._closed:
                            spare.kill()
                            return
                        self._ready[workload].append(spare)
            self._wake.wait(CHECK_S)

    def _start(self, workload: str) -> Spare | None:
        path = os.path.join(self._workdir, f"spare-{workload}-{next(self._numbers)}.stderr")
        try:
            with open(path, "wb") as err:
                # (named by a path in the agent's directory, as a task's program by its --progress: what a restarted
                # agent kills of a dead one's, see node_agent.agent._remove_old_workdirs)
                proc = subprocess.Popen(command(workload, "--spare", path), stdin=subprocess.PIPE,
                                        stdout=subprocess.DEVNULL, stderr=err, env=child_env(), start_new_session=True,
                                        close_fds=True)
        except OSError as exc:
            with self._lock:
                self._deaths[workload] = MAX_DEATHS
            log.warning("cannot start a spare %s program (%s): its tasks start cold", workload, exc)
            return None
        return Spare(proc, path)

    def _died(self, workload: str, spare: Spare) -> None:
        """(Under the lock.) ``spare`` ended before it was taken: counted, and said once the workload gets no more."""
        self._deaths[workload] += 1
        if self._deaths[workload] == MAX_DEATHS:
            words = ""
            with contextlib.suppress(OSError), open(spare.stderr_path, "rb") as f:
                words = f.read()[-500:].decode("utf-8", "replace").strip()
            log.warning("%d spare %s programs ended before a task took them (the last with status %s%s): its tasks "
                        "start cold from now on", MAX_DEATHS, workload, spare.proc.returncode,
                        f": {words}" if words else "")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(spare.stderr_path)
