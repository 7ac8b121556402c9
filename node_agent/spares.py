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

A workload gets spares from its first start on (that one starts cold): an agent that runs only modeled tasks, or
only one workload, starts none of the others'. The pool is refilled by a thread of its own after each take, so that
a burst of starts takes the ready spares and then starts cold, never waiting for a refill; a spare joins the pool
once it says it is ready (its import done). A spare that dies before it is taken is replaced; after
:data:`MAX_DEATHS` such deaths in a row (no take between them) its workload's tasks all start cold (logged once,
with the spare's last words). An agent that dies leaves its spares nothing to read: they exit at the end of their
stdin (status 3).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import logging
import os
import select
import subprocess
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass

from vcemu.cliargs import whole_in
from workloads.program import SPARE_READY
from workloads.registry import child_env, command

log = logging.getLogger(__name__)

#: Spares kept of each workload by ``vcemu agent`` (``--spares``): a plan that resumes a few jobs at once on an agent
#: takes two before it starts cold; each idle spare holds about 30 MB (the interpreter and numpy).
DEFAULT_SPARES = 2
#: Most spares of a workload an agent keeps.
MAX_SPARES = 16
#: Spares of one workload that may die before being taken, in a row, before the workload gets no more.
MAX_DEATHS = 3
#: How often an idle pool checks that its spares are alive (a dead one is replaced without waiting for a take), and
#: how long its refill waits after an unexpected error.
CHECK_S = 5.0
#: What a spare writes on its stdout once it is ready.
READY = SPARE_READY
#: How long the refill waits for a spare's ready byte before it kills it (about 0.2 s of CPU, more on a loaded
#: machine): a spare that hangs must not stop the refill of every workload.
READY_TIMEOUT_S = 60.0


@dataclass
class Spare:
    """A started program waiting for its task, and the file its stderr goes to (a start renames it the task's)."""

    proc: subprocess.Popen[bytes]
    stderr_path: str

    def kill(self) -> None:
        """End it (SIGKILL: it holds nothing of a task's) and reap it. Killed before its pipes are closed: the refill
        may be reading its stdout, and a close would wait for that read, which ends with the process."""
        with contextlib.suppress(OSError):
            self.proc.kill()
        for pipe in (self.proc.stdin, self.proc.stdout):
            with contextlib.suppress(OSError):
                if pipe is not None:
                    pipe.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5.0)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.stderr_path)


class Spares:
    """Up to ``per_workload`` spares of each of ``workloads`` that has been asked for, started in ``workdir`` (their
    stderr files)."""

    def __init__(self, workdir: str, workloads: Iterable[str], per_workload: int) -> None:
        if not 0 <= per_workload <= MAX_SPARES:
            raise ValueError(f"spares: must be in 0..{MAX_SPARES}, got {per_workload}")
        self._workdir = workdir
        self._per = per_workload
        self._lock = threading.Lock()
        self._ready: dict[str, list[Spare]] = {w: [] for w in workloads} if per_workload > 0 else {}
        self._wanted: list[str] = []  # the workloads asked for (a take): the pool keeps theirs full
        self._deaths = dict.fromkeys(self._ready, 0)
        self._starting: Spare | None = None  # the spare the refill waits for (close() kills it)
        self._numbers = itertools.count()
        self._closed = False
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def take(self, workload: str) -> Spare | None:
        """A live spare of ``workload``, now the caller's, or None (none ready: a cold start). Never waits for one.
        The first call for a workload starts its spares."""
        dead: list[Spare] = []
        with self._lock:
            if workload not in self._ready or self._closed:
                return None
            pool = self._ready[workload]
            spare = None
            while pool and spare is None:
                candidate = pool.pop(0)
                if candidate.proc.poll() is None:
                    spare = candidate
                    self._deaths[workload] = 0  # spares of it do work: its deaths so far were not in a row
                else:
                    self._died(workload, candidate)
                    dead.append(candidate)
            if workload not in self._wanted:
                self._wanted.append(workload)
            if self._thread is None:
                thread = threading.Thread(target=self._fill_loop, name="spares", daemon=True)
                try:
                    thread.start()
                except RuntimeError as exc:  # (no thread to be had: this start goes on, cold or not, and so do later)
                    log.warning("cannot start the spares' refill thread (%s): tasks start cold", exc)
                else:
                    self._thread = thread
        self._wake.set()
        for gone in dead:
            gone.kill()  # (dead already: this closes its pipes and removes its file, outside the lock)
        if spare is not None and spare.proc.stdout is not None:
            spare.proc.stdout.close()  # (its stdout is /dev/null now: it pointed it there after its ready byte)
        return spare

    def ready(self, workload: str) -> int:
        """How many spares of ``workload`` wait (live or not: checked at a take)."""
        with self._lock:
            return len(self._ready.get(workload, ()))

    def wait_filled(self, workload: str, timeout: float) -> bool:
        """Wait until ``workload`` has its full count of ready spares (tests). True if it does."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                if len(self._ready.get(workload, ())) >= self._per:
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
            if self._starting is not None:
                left.append(self._starting)  # (its refill, reading its ready byte, then finds it gone)
        self._wake.set()
        for spare in left:
            spare.kill()
        if self._thread is not None:  # (only a thread that started is kept)
            self._thread.join(timeout=10.0)

    # ---- the refill thread ---------------------------------------------------------------------------------------

    def _fill_loop(self) -> None:
        while True:
            self._wake.clear()
            try:
                if not self._fill():
                    return
            except Exception:  # (not to end the thread, and with it every refill, without a word)
                log.exception("refilling the spare workload programs failed; trying again in %g s", CHECK_S)
            self._wake.wait(CHECK_S)

    def _fill(self) -> bool:
        """Bring each workload asked for to its count (dead spares replaced). False once the pool is closed."""
        with self._lock:
            wanted = list(self._wanted)
        for workload in wanted:
            while True:
                with self._lock:
                    if self._closed:
                        return False
                    pool = self._ready[workload]
                    dead = [s for s in pool if s.proc.poll() is not None]
                    for gone in dead:
                        pool.remove(gone)
                        self._died(workload, gone)
                    full = len(pool) >= self._per or self._deaths[workload] >= MAX_DEATHS
                for gone in dead:
                    gone.kill()  # (outside the lock, as every spare's end)
                if full:
                    break
                spare = self._start(workload)  # (outside the lock: a take never waits for a start)
                if spare is None:
                    break  # (counted; tried again at the next take or check, not at once: a cause may pass)
                with self._lock:
                    closed = self._closed
                    if not closed:
                        self._ready[workload].append(spare)
                if closed:
                    spare.kill()
                    return False
        return True

    def _start(self, workload: str) -> Spare | None:
        """Start a spare and wait for its ready byte; None if it could not start or died first (counted)."""
        path = os.path.join(self._workdir, f"spare-{workload}-{next(self._numbers)}.stderr")
        try:
            with open(path, "wb") as err:
                # (named by a path in the agent's directory, as a task's program by its --progress: what a restarted
                # agent kills of a dead one's, see node_agent.agent._remove_old_workdirs)
                proc = subprocess.Popen(command(workload, "--spare", path), stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=err, env=child_env(), start_new_session=True,
                                        close_fds=True)
        except OSError as exc:
            log.warning("cannot start a spare %s program: %s", workload, exc)
            with self._lock:
                self._died(workload, None)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            return None
        spare = Spare(proc, path)
        with self._lock:
            if self._closed:
                closed = True
            else:
                closed, self._starting = False, spare
        if closed:
            spare.kill()
            return None
        try:
            assert proc.stdout is not None
            readable, _, _ = select.select([proc.stdout], [], [], READY_TIMEOUT_S)
            said = proc.stdout.read(len(READY)) if readable else b""
        except (OSError, ValueError):  # (closed by close(), which is killing it)
            said = b""
        with self._lock:
            self._starting = None
            if said != READY and not self._closed:
                proc.poll()
                self._died(workload, spare)
        if said != READY:
            spare.kill()
            return None
        return spare

    def _died(self, workload: str, spare: Spare | None) -> None:
        """(Under the lock.) ``spare`` ended before it was taken (or, None, could not be started): counted, and said
        once when the workload gets no more. Its caller then ends it (:meth:`Spare.kill`: pipes closed, file removed),
        outside the lock."""
        self._deaths[workload] += 1
        if self._deaths[workload] == MAX_DEATHS:
            words = ""
            if spare is not None:
                with contextlib.suppress(OSError), open(spare.stderr_path, "rb") as f:
                    words = f.read()[-500:].decode("utf-8", "replace").strip()
            status = f" (the last with status {spare.proc.returncode}{': ' + words if words else ''})" if spare else ""
            log.warning("%d spare %s programs in a row ended before a task took them%s: its tasks start cold from now "
                        "on", MAX_DEATHS, workload, status)


def add_agent_spares(parser: argparse.ArgumentParser) -> None:
    """``--agent-spares N`` of the commands that start their own agents (``up``, ``demo``, ``replay``): passed to each
    as ``vcemu agent --spares N`` (:mod:`node_agent.spares`); None if not given, and each agent process is then passed
    the agent's default (:func:`coordinator.servers.start_local_cluster`), each Ray agent actor (``--ray``) none
    (:class:`node_agent.ray_actor.HostAgentActor`)."""
    parser.add_argument("--agent-spares", type=whole_in(0, MAX_SPARES), default=None, metavar="N",
                        help=f"each agent keeps N programs of each workload started ahead (vcemu agent --spares; "
                             f"0: none, each start cold; default {DEFAULT_SPARES}, 0 with --ray): an idle spare holds "
                             "about 30 MB")
