"""The agent's state: its emulated hosts and their tasks, request validation, and the monitor loop.

No gRPC here: :class:`AgentCore` raises :class:`AgentError` with a status-code name, and the server maps
it onto gRPC. One lock serialises requests and the monitor, which keeps capacity checks exact (two
concurrent StartTasks cannot both take the last half of a host). Killing a task's processes is not done
under it (it can take seconds: a frozen v1 task ignores SIGKILL until its freezer thaws): Stop, the abort of
a task whose poll raised, the end of a task done with its work (or whose transactional server failed), a
start that failed with the task's process started, and the agent's shutdown (every task) mark the task as
ending, kill outside the lock, then forget or report it. An ending task is reported as it was when its end
began (Stop: message "stopping"; shutdown: "stopping: the agent is shutting down"; the others: finished, DONE
or FAILED with the reason), still holds its memory and share, and is left alone by every other call (a second
Stop waits for the first, then finds no task; a StartTask of its id waits for the end, then finds the id taken
or, after a Stop or a failed start, free). A failed StartTask answers once its task's processes are dead (its
task forgotten), with the start's error. A task whose kill failed (its processes outlived
:data:`~node_agent.cgroups.KILL_TIMEOUT_S`: frozen, most likely) stays known and keeps its memory counted, finished
or not, until they are gone (a Stop kills them again); Status reports their memory and why, in its message (and
the metrics count such tasks).

Refusals (``code``: when):
  INVALID_ARGUMENT: empty task_id; unknown workload; cpu_share or cpu_need outside (0, 1]; work_seconds
    <= 0 (except for workload transactional, which ignores it); memory_bytes < 0 or above the host's
    capacity; start_progress outside [0, 1); cpu_need of a host that would need more than one core (the
    workload programs are single processes); a transactional spec with a bad field, or one given for
    another workload; SetLoad with rate_rps <= 0.
  NOT_FOUND: unknown host; unknown task_id.
  ALREADY_EXISTS: a task with this task_id is known (finished tasks stay known until Stop; one that is
    ending is waited for, then looked at again).
  FAILED_PRECONDITION: the host's running shares would exceed 1 (StartTask, SetShare, Resume); the
    host's memory would be over-committed (StartTask; paused tasks keep their memory); SetLoad on a task
    that is not transactional; SetShare, Pause, Resume or SetLoad on a task a Stop (or the agent's shutdown)
    is ending.
  UNAVAILABLE: StartTask once the agent's shutdown has begun.
Requests on a finished task (SetShare, Pause, Resume) are accepted and change nothing; the reply's state
says it is finished, which a coordinator racing a completion wants rather than an error.

The batch calls (:meth:`AgentCore.set_shares`, :meth:`~AgentCore.start_tasks`, :meth:`~AgentCore.stop_tasks`) answer
each request as its single call would, in order; StartTasks stops at its first failure other than ALREADY_EXISTS.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field, replace

import psutil

from node_agent import cgroups, leaseclock
from node_agent.cgroups import CgroupDriver, CgroupError
from node_agent.fencer import write_lease
from node_agent.runner import ModeledTask, State, Task, TaskSpec, TaskView, fence
from node_agent.shortfall import CpuShortfall
from node_agent.spares import MAX_SPARES, Spares
from node_agent.transactional import NAME as TRANSACTIONAL
from node_agent.transactional import TransactionalParams, TransactionalTask
from vcemu.limits import shown
from vcemu.processes import stop_processes
from workloads import modeled
from workloads.registry import PROGRAMS, child_env

log = logging.getLogger("vcemu.agent")
SHARE_EPS = 1e-6
POLL_INTERVAL_S = 0.1
#: Between its rounds, the monitor polls the tasks whose programs are booting this often: a boot ends at the poll
#: after the program reports ready (the task's share is applied, and it is told to run), which at
#: :data:`POLL_INTERVAL_S` alone came 50 ms after the report on average, for nothing.
BOOT_POLL_S = 0.01
SHUTTING_DOWN = "the agent is shutting down"
#: CPU-seconds of task time per update of a workload's rate estimate, and the update's weight.
RATE_UPDATE_CPU_S = 1.0
RATE_SMOOTHING = 0.5


#: Processes and threads a task's start must leave free under the agent's pids limit: its gRPC server, its monitor and
#: a task's end start threads as they go, and at the limit the agent aborted (grpc: "Failed to start lifeguard
#: thread", SIGABRT) or went on answering nothing while it heartbeat (exhaustion review).
PIDS_HEADROOM = 8


def _check_pids_room() -> None:
    """Refuse a start (RESOURCE_EXHAUSTED: the coordinator keeps the job) that would leave the agent fewer than
    :data:`PIDS_HEADROOM` processes or threads under its pids limit."""
    room = cgroups.pids_room()
    if room is not None and room[2] - room[1] < PIDS_HEADROOM + 1:
        where, current, limit = room
        raise AgentError("RESOURCE_EXHAUSTED", f"agent out of processes: {current} of the {limit} its pids cgroup "
                         f"{where} allows are in use, and {PIDS_HEADROOM} are kept for the agent's own threads; "
                         "retry once tasks have ended")


class AgentError(Exception):
    """A refused request; ``code`` is a gRPC status code name."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class HostSpec:
    name: str
    cpu_cores: float
    memory_bytes: int


@dataclass(frozen=True)
class TaskStart:
    """One StartTask request's fields (:meth:`AgentCore.start_tasks`)."""

    task_id: str
    host: str
    workload: str
    cpu_share: float
    cpu_need: float
    work_seconds: float
    memory_bytes: int
    start_progress: float = 0.0
    transactional: TransactionalParams | None = None


@dataclass(frozen=True)
class HostView:
    name: str
    cpu_cores: float
    memory_bytes: int
    cpu_allocated: float
    cpu_measured: float
    memory_used_bytes: int


_ACTIVE = (State.STARTING, State.RUNNING)


@dataclass
class _Ending:
    """A task whose processes are being killed outside the agent's lock (see the module docstring)."""

    view: TaskView  # what the agent reports for it meanwhile
    #: What is ending it, completing "task 'ID' ..." in the refusal of a call that would act on it.
    why: str
    done: threading.Event = field(default_factory=threading.Event)

    @classmethod
    def finished(cls, view: TaskView) -> _Ending:
        """The end of a task that has finished (its work done, failed, or stopped), its processes being killed."""
        if view.state is State.DONE:
            what = "has finished its work"
        elif view.state is State.FAILED:
            what = f"has failed ({view.message})" if view.message else "has failed"
        else:
            what = "has been stopped"
        return cls(view, f"{what}; its processes are being killed")


class AgentCore:
    """The hosts and tasks of one agent process."""

    def __init__(self, agent_id: str, hosts: list[HostSpec], driver: CgroupDriver,
                 units_per_core_second: dict[str, float], progress_by: str = "cpu-time", spares: int = 0) -> None:
        self.agent_id = agent_id
        #: How tasks measure progress: "cpu-time" or "units" (see :mod:`node_agent.runner`).
        self.progress_by = progress_by
        self.hosts = {h.name: h for h in hosts}
        self.driver = driver
        self.mode = driver.mode
        self.rates = dict(units_per_core_second)
        self._rate_acc: dict[str, list[float]] = {w: [0.0, 0.0] for w in self.rates}
        #: Per host, the CPU its busy tasks were allocated and charged (:mod:`node_agent.shortfall`).
        self.shortfall = CpuShortfall()
        self.workloads = sorted([*(w for w in PROGRAMS if w in self.rates), modeled.NAME, TRANSACTIONAL])
        self.started = leaseclock.now()  # (the lease's clock: Status echoes it, and uptime counts a suspend)
        self._tasks: dict[str, Task | ModeledTask] = {}
        self._ending: dict[str, _Ending] = {}
        #: Tasks started whose programs may still boot, polled every ``boot_poll_s`` between the monitor's rounds
        #: (:meth:`_monitor_loop`; ``vcemu bench boot`` sets it to :data:`POLL_INTERVAL_S` for none).
        self._booting: set[str] = set()
        self.boot_poll_s = BOOT_POLL_S
        #: Programs started, by (workload, "spare" or "cold"): how often a start found a spare (:meth:`program_starts`).
        self._program_starts: dict[tuple[str, str], int] = {}
        #: Started tasks that have ended, by the state they ended in (the agent forgets a task at its Stop, so the
        #: tasks it knows cannot tell how many ended), and the ids of the started tasks not counted there yet:
        #: each is counted once, the first time the agent sees it finished (:meth:`_count_end`).
        self._ended = {s: 0 for s in State if s.finished}
        self._unended: set[str] = set()
        self._lock = threading.Lock()
        #: While a batch runs (:meth:`set_shares`, :meth:`start_tasks`): the CPU share in use on each host it has
        #: checked (``_check_cpu``), and (:meth:`start_tasks`) the memory (:meth:`_memory_used`).
        self._used: dict[str, float] | None = None
        self._memory: dict[str, int] | None = None
        self._stop = threading.Event()
        self._closers: list[Callable[[], None]] = []
        #: The lease (see :meth:`renew_lease`): its length, and the :func:`leaseclock.now` it runs out at (None: none).
        #: A lock of its own: a renewal must not wait for the agent's lock, which calls hold while they start a
        #: program or wait on a freezer (up to seconds), or the registrar's next heartbeat would wait with it.
        self._lease_lock = threading.Lock()
        self._lease_s = 0.0
        self._lease_until: float | None = None
        self._lease_unwritten = False  # the last write of the lease file failed (see _publish_lease)
        shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
        self._workdir = tempfile.mkdtemp(prefix=f"vcemu-agent-{agent_id}-", dir=shm)
        #: The lease's deadline for the fencer (:mod:`node_agent.fencer`), which freezes the tasks when it has
        #: passed even if this process does not run (SIGSTOP); None where the driver has no freezer.
        self._lease_file = os.path.join(self._workdir, "lease")
        driver.attach_workdir(self._workdir)
        #: The driver has a freezer (or a stand-in for one: :mod:`node_agent.dutycycle`), so tasks may be frozen by
        #: a fencer (this agent's, or an earlier one's).
        self._freezer = driver.fencer_args() is not None
        self._fencer_starts = 0
        self._fencer: subprocess.Popen[bytes] | None = self._start_fencer()
        self._spares_for = [w for w in PROGRAMS if w in self.rates]  # the workloads whose programs have spares
        #: Programs started ahead, ``spares`` per workload program once it has had a start (0: none; see
        #: :mod:`node_agent.spares`). Made last: it starts no process until the first start of a workload program.
        self._spares = Spares(self._workdir, self._spares_for, spares)
        self._monitor = threading.Thread(target=self._monitor_loop, name="agent-monitor", daemon=True)
        self._monitor.start()

    def _start_fencer(self) -> subprocess.Popen[bytes] | None:
        """Start :mod:`node_agent.fencer` for a driver with a freezer (in a session of its own: a terminal's stop
        of the agent's group must not stop it too). None without a freezer, or if it cannot start (logged: the
        agent then fences from its monitor only, as it did before the fencer)."""
        args = self.driver.fencer_args()
        if args is None or self._fencer_starts >= FENCER_STARTS:
            return None
        self._fencer_starts += 1
        try:
            with self._lease_lock:
                write_lease(self._lease_file, self._lease_until)
            # (child_env: the import path that finds this package wherever the agent was started from)
            return subprocess.Popen(
                [sys.executable, "-m", "node_agent.fencer", "--lease", self._lease_file, "--agent-pid",
                 str(os.getpid()), *args], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                env=child_env(), start_new_session=True, close_fds=True)
        except OSError as e:
            log.error("cannot start the fencer (%s): a task of this agent runs on while the agent itself does "
                      "not run (stopped), past its lease", e)
            return None

    def _stop_fencer(self, why: str = "") -> None:
        """Stop the fencer: at shutdown, waiting for it; or, with ``why``, when its lease file cannot be kept
        current (it would freeze tasks on a stale deadline), without waiting: this runs under the lease lock,
        which every renewal needs. For good: it is not started again."""
        fencer, self._fencer = self._fencer, None
        if fencer is None:
            return
        self._fencer_starts = FENCER_STARTS
        if why:
            log.error("stopping the fencer: %s; a task of this agent now runs on while the agent itself does not "
                      "run (stopped), past its lease", why)
            threading.Thread(target=stop_processes, args=([fencer], 2.0), name="fencer-stop", daemon=True).start()
            return
        stop_processes([fencer], 2.0)

    def _watch_fencer(self) -> None:
        """(Monitor.) A fencer that exited by itself (it could not start, or was killed) is said, and started
        again, up to :data:`FENCER_STARTS` times in all: the agent must not believe itself fenced when it is not."""
        fencer = self._fencer
        if fencer is None or fencer.poll() is None:
            return
        self._fencer = None
        again = self._fencer_starts < FENCER_STARTS
        log.error("the fencer exited with status %s; %s", fencer.returncode,
                  "starting it again" if again else "not again: a task of this agent now runs on while the agent "
                  "itself does not run (stopped), past its lease")
        if again:
            self._fencer = self._start_fencer()

    # ------------------------------------------------------------------ requests
    def start_task(self, task_id: str, host: str, workload: str, cpu_share: float, cpu_need: float,
                   work_seconds: float, memory_bytes: int, start_progress: float = 0.0,
                   transactional: TransactionalParams | None = None, expires_at: float | None = None) -> TaskView:
        """Start a task. A ``transactional`` task runs until stopped: ``work_seconds`` and
        ``start_progress`` are ignored for it (see :mod:`node_agent.transactional`)."""
        outcome = self.start_tasks([TaskStart(task_id, host, workload, cpu_share, cpu_need, work_seconds,
                                              memory_bytes, start_progress, transactional)], expires_at)[0]
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    def start_tasks(self, starts: Sequence[TaskStart], expires_at: float | None = None) -> list[TaskView | Exception]:
        """Start each task in turn, until one fails (a task that already exists does not stop the others: an
        earlier attempt of the same batch started it); one result per start tried, its task's view or the error
        that start alone would have raised (the last result, if any is). Under one hold of the lock, each start
        checks its host's CPU and memory in use summed once for the batch and kept up to date as it goes: a
        pass over the agent's tasks per start made a job of n tasks n passes (10,000 tasks on 4 hosts took 26 s
        here, one at a time). The running sums add each new task's share and memory last, as a fresh sum over the
        tasks in their order would: the same figures (on Python 3.12 and later, whose ``sum`` of floats is
        compensated, a fresh CPU sum may differ in its last bit, far inside :data:`SHARE_EPS`). The lock is let go
        (and the sums made again) to wait for a task of a start's id that is ending, to kill the processes of a
        start that failed (its task forgotten before the failure is answered, as for a single start), and after
        each start of a process (tens of milliseconds, which the agent's Status and monitor would otherwise wait
        for many of in a row: for processes the saving is in calls, the pass being small beside the start).
        ``expires_at`` (monotonic): the caller's deadline; a start not begun by then is refused DEADLINE_EXCEEDED,
        not made: the caller has given up on it, may have stopped its id (NOT_FOUND, taken for stopped) and started
        the job elsewhere, and a start that waited out the lock made a second copy (concurrency review)."""
        results: list[TaskView | Exception] = []
        k = 0
        while k < len(starts):
            wait: _Ending | None = None
            failed: tuple[Task | ModeledTask, _Ending, BaseException] | None = None
            with self._lock:
                self._used, self._memory = {}, {}
                try:
                    while k < len(starts):
                        start = starts[k]
                        try:
                            if expires_at is not None and time.monotonic() >= expires_at:
                                raise AgentError("DEADLINE_EXCEEDED", f"task_id: {shown(start.task_id)} not started: "
                                                 "the caller's deadline passed while the start waited for the agent")
                            start = self._checked(start)
                            if start.workload != modeled.NAME:
                                _check_pids_room()
                            if self._stop.is_set():
                                raise AgentError("UNAVAILABLE", f"agent {self.agent_id}: {SHUTTING_DOWN}")
                            wait = self._ending.get(start.task_id)
                            if wait is not None:
                                break  # a task of this id is ending: wait for it, then look again
                            task = self._new_task(start)
                        except AgentError as e:
                            results.append(e)
                            k += 1
                            if e.code == "ALREADY_EXISTS":
                                continue
                            return results
                        except Exception as e:  # (making a task's cgroup, say: that start's failure, as alone)
                            results.append(e)
                            return results
                        try:
                            task.start()
                        except BaseException as e:
                            if not task.end_pending:
                                if not isinstance(e, Exception):
                                    raise
                                results.append(e)
                                return results
                            # Its process is started, and to be killed: outside the lock, holding the id meanwhile.
                            self._tasks[start.task_id] = task
                            ending = self._ending[start.task_id] = _Ending.finished(task.view())
                            failed = task, ending, e
                            break
                        self._tasks[start.task_id] = task
                        self._unended.add(start.task_id)
                        self._count_in(task)
                        if isinstance(task, Task):
                            key = (task.spec.workload, task.started_from)
                            self._program_starts[key] = self._program_starts.get(key, 0) + 1
                            if task.state is State.STARTING:
                                self._booting.add(start.task_id)
                        _task_log(task, "task start %s host=%s workload=%s progress=%.4f", start.task_id,
                                  start.host, start.workload, start.start_progress)
                        results.append(task.view())
                        k += 1
                        if not isinstance(task, ModeledTask):
                            break  # a process started (~20 ms): the lock is let go for the agent's other calls
                finally:
                    self._used = self._memory = None
            if wait is not None:
                wait.done.wait()
            elif failed is not None:
                self._end_failed_start(starts[k].task_id, *failed)
                if not isinstance(failed[2], Exception):
                    raise failed[2]
                results.append(failed[2])
                return results
        return results

    def _end_failed_start(self, task_id: str, task: Task | ModeledTask, ending: _Ending,
                          failure: BaseException) -> None:
        """Kill the processes of a start that failed after its process started (outside the lock), then forget
        its task, unless the kill failed (it stays known, failed, for a Stop)."""
        log.info("task start %s failed: %s", task_id, failure)
        killed = False
        try:
            task.end()
            killed = True
        except Exception:
            log.exception("killing task %s after its start failed failed; it stays known (failed), for a Stop",
                          task_id)
        finally:
            with self._lock:
                self._ending.pop(task_id, None)
                if killed:
                    self._tasks.pop(task_id, None)
            ending.done.set()

    def _checked(self, start: TaskStart) -> TaskStart:
        """The checks of a start that need no state: the start, its transactional parameters completed."""
        if not start.task_id:
            raise AgentError("INVALID_ARGUMENT", "task_id: must not be empty")
        # (security review: a newline in an id split the agent's and the coordinator's log lines. Spaces are taken,
        # and any length the request's size allows: the coordinator's ids are "<job>/<index>[.<attempt>]", and a job
        # file's ids may hold spaces and be long; code review)
        if not start.task_id.isprintable():
            raise AgentError("INVALID_ARGUMENT", "task_id: must be printable (no newline, tab or other control "
                             f"character), got {shown(start.task_id)}")
        if start.workload not in self.workloads:
            raise AgentError("INVALID_ARGUMENT", f"workload: unknown workload {shown(start.workload)}; "
                             f"this agent runs {', '.join(self.workloads)}")
        _check_fraction("cpu_share", start.cpu_share)
        _check_fraction("cpu_need", start.cpu_need)
        if start.workload == TRANSACTIONAL:
            try:
                start = replace(start, transactional=(start.transactional or TransactionalParams()).checked())
            except ValueError as e:
                raise AgentError("INVALID_ARGUMENT", str(e)) from None
        elif start.transactional is not None:
            raise AgentError("INVALID_ARGUMENT", f"transactional: set for workload {start.workload}; it applies to "
                             f"workload {TRANSACTIONAL} only")
        elif not (math.isfinite(start.work_seconds) and start.work_seconds > 0):
            raise AgentError("INVALID_ARGUMENT", f"work_seconds: must be > 0, got {start.work_seconds}")
        if not 0.0 <= start.start_progress < 1.0:
            raise AgentError("INVALID_ARGUMENT", f"start_progress: must be in [0, 1), got {start.start_progress}")
        return start

    def _new_task(self, start: TaskStart) -> Task | ModeledTask:
        """The checks of a start that need the agent's state (under the lock), and its task, not started."""
        h = self._host(start.host)
        if start.task_id in self._tasks:
            raise AgentError("ALREADY_EXISTS", f"task_id: task {shown(start.task_id)} already exists on this agent")
        memory_bytes = start.memory_bytes
        if not 0 <= memory_bytes <= h.memory_bytes:
            raise AgentError("INVALID_ARGUMENT", f"memory_bytes: {memory_bytes} is outside "
                             f"[0, {h.memory_bytes}] (the memory of host {h.name})")
        if start.cpu_need * h.cpu_cores > 1.0 + SHARE_EPS and start.workload != modeled.NAME:
            raise AgentError("INVALID_ARGUMENT", f"cpu_need: {start.cpu_need} of host {h.name} is "
                             f"{start.cpu_need * h.cpu_cores:.3g} cores, but workload {start.workload} is a single "
                             "process and uses at most 1 core")
        self._check_cpu(h, start.cpu_share, exclude=None)
        used = self._memory_used(h.name)
        if used + memory_bytes > h.memory_bytes:
            raise AgentError("FAILED_PRECONDITION", f"memory_bytes: host {h.name} has "
                             f"{h.memory_bytes - used} bytes free, the task needs {memory_bytes}")
        spec = TaskSpec(task_id=start.task_id, host=h.name, host_cores=h.cpu_cores, workload=start.workload,
                        cpu_share=start.cpu_share, cpu_need=start.cpu_need, work_seconds=start.work_seconds,
                        memory_bytes=memory_bytes, start_progress=start.start_progress)
        if start.workload == modeled.NAME:  # computed, no process (workloads/modeled.py)
            return ModeledTask(spec, self._lease_ran_out)
        task: Task
        if start.transactional is not None:  # a request server and its load generator
            task = TransactionalTask(spec, self.driver, self._workdir, start.transactional)
        else:
            task = Task(spec, self.driver, self.rates[start.workload], self._workdir, self.progress_by)
            task.spares = self._spares
        task.defer_kills = True  # kills that may take seconds are made outside the lock
        return task

    def _memory_used(self, host: str) -> int:
        """The memory the host's live tasks hold (modeled tasks reserve memory too): summed once per host in a
        batch of starts (:meth:`start_tasks`)."""
        if self._memory is None:
            return sum(t.spec.memory_bytes for t in self._live(host))
        used = self._memory.get(host)
        if used is None:
            used = self._memory[host] = sum(t.spec.memory_bytes for t in self._live(host))
        return used

    def _count_in(self, task: Task | ModeledTask) -> None:
        """(A batch of starts.) Add a task just started to its host's running sums, or have them made again if it
        has already finished (a fresh sum would count it only while it holds resources)."""
        host = task.spec.host
        for sums, value in ((self._used, task.cpu_share), (self._memory, task.spec.memory_bytes)):
            if sums is not None and host in sums:
                if task.state in _ACTIVE:
                    sums[host] += value
                else:
                    del sums[host]

    def set_share(self, task_id: str, cpu_share: float) -> TaskView:
        _check_fraction("cpu_share", cpu_share)
        return self._apply(task_id, lambda t: t.set_share(cpu_share), share=cpu_share)

    def set_shares(self, shares: Sequence[tuple[str, float]]) -> list[TaskView | Exception]:
        """:meth:`set_share` for each (task id, share) in turn, under one hold of the lock; each result is the task's
        view, or the AgentError (or cgroup or OS error) that request alone would have raised. A raise is checked
        against its host's CPU in use summed once for the batch and kept up to date as it goes: a pass over the
        host's tasks per raise made the raises after a job ended on a host of n tasks n passes (249 raises beside
        1,000 tasks: 93 ms). Two differences, both on the strict side and both rare (the coordinator sends a refused
        change again alone): the running sum may differ from a fresh one in its last bit, which matters only for a
        raise to within a rounding of the capacity's edge; and a task a Stop is ending outside the lock meanwhile is
        still counted."""
        results: list[TaskView | Exception] = []
        with self._lock:
            self._used = {}
            try:
                for task_id, share in shares:
                    try:
                        _check_fraction("cpu_share", share)
                        results.append(self._apply_locked(task_id, lambda t, s=share: t.set_share(s), share=share))
                    except AgentError as e:
                        results.append(e)
                    except (CgroupError, OSError) as e:
                        self._used = {}  # (a change may have been half made: sums again)
                        results.append(e)
            finally:
                self._used = None
        return results

    def set_load(self, task_id: str, rate_rps: float) -> TaskView:
        """Change a transactional task's request arrival rate."""
        if not (math.isfinite(rate_rps) and rate_rps > 0):
            raise AgentError("INVALID_ARGUMENT", f"rate_rps: must be > 0 requests/s, got {rate_rps}")
        with self._lock:
            task = self._task(task_id)
            if (ending := self._ending.get(task_id)) is not None:
                return self._ending_reply(task_id, ending)
            if not isinstance(task, TransactionalTask):
                raise AgentError("FAILED_PRECONDITION", f"task_id: task {shown(task_id)} runs workload "
                                 f"{task.spec.workload}, which takes no load; only {TRANSACTIONAL} does")
            task.set_rate(rate_rps)
            return task.view()

    def pause(self, task_id: str) -> TaskView:
        return self._apply(task_id, lambda t: t.pause())

    def resume(self, task_id: str) -> TaskView:
        """Thaw a paused task, or one the agent fenced (:meth:`renew_lease`)."""
        def resume(task: Task) -> None:
            task.resume()
            if task.state is State.STARTING and not isinstance(task, ModeledTask):
                self._booting.add(task_id)  # paused while it booted: it boots on, polled as it does

        return self._apply(task_id, resume, share=-1.0)

    def renew_lease(self, lease_s: float, since: float) -> None:
        """Renew the lease the coordinator grants: ``lease_s`` seconds from ``since`` (the :func:`leaseclock.now` at
        which the agent sent the Heartbeat or RegisterAgent that was answered, or made the Status reply that the
        coordinator's next poll says it received); ``lease_s`` <= 0 removes it (a coordinator that grants none).

        Why (fencing): a coordinator declares an agent lost after some seconds without a sign of life from it, and
        starts its jobs elsewhere. An agent cut off from it by the network, alive, would run them on: two copies of
        one job, each taking the CPU and memory of the cluster the experiment measures. So the coordinator grants
        a lease shorter than that silence (:attr:`coordinator.service.CoordinatorServer.lease_s`), counted by each
        side from a point the other's count cannot precede, and the agent's monitor freezes every task that runs
        (:func:`~node_agent.runner.fence`) once the lease has run out: before the coordinator can start a second
        copy. Frozen, not killed: if the coordinator comes back in time (or restarts and adopts the tasks), its
        next poll resumes them, and nothing of their work is lost; if it declared the agent lost, it stops them.
        The deadline also goes to the fencer (:mod:`node_agent.fencer`), which freezes them if this process itself
        does not run then."""
        with self._lease_lock:
            if lease_s <= 0:
                self._lease_s, self._lease_until = 0.0, None
                self._publish_lease()
                return
            until = since + lease_s
            if self._lease_until is not None and lease_s == self._lease_s:
                until = max(until, self._lease_until)  # (renewals from two threads may arrive out of order)
            self._lease_s, self._lease_until = lease_s, until
            self._publish_lease()

    def _publish_lease(self) -> None:
        """(Under the lease lock.) The lease's deadline for the fencer, before any reply says the lease holds."""
        if self._fencer is None:
            return
        try:
            write_lease(self._lease_file, self._lease_until)
        except OSError as e:
            # No lease file reads as no lease (fencer.read_lease): the fencer then freezes nothing on a stale deadline,
            # and takes the next one that can be written. It was stopped for good instead: a /dev/shm full for a
            # moment left the agent without its fencer until it restarted (exhaustion review).
            try:
                os.unlink(self._lease_file)
            except FileNotFoundError:
                pass
            except OSError:
                self._stop_fencer(f"its lease file {self._lease_file} cannot be written ({e.strerror}) nor removed")
                return
            if not self._lease_unwritten:
                log.error("the lease file %s cannot be written (%s): the fencer fences nothing until it can be (the "
                          "agent's own monitor still does)", self._lease_file, e.strerror)
            self._lease_unwritten = True
            return
        if self._lease_unwritten:
            self._lease_unwritten = False
            log.warning("the lease file %s is written again: the fencer fences again", self._lease_file)

    def stop(self, task_id: str) -> TaskView:
        """Stop and forget a task (its id may then be reused, e.g. when a job migrates back). Its processes are
        killed outside the agent's lock, the task marked as ending meanwhile (see the module docstring). If
        they cannot be killed, the error is raised and the task stays known, to be stopped again."""
        while True:
            with self._lock:
                task = self._task(task_id)
                ending = self._ending.get(task_id)
                if ending is None:
                    view = task.view()
                    if not view.state.finished:
                        view = replace(view, message="stopping")
                    ending = self._ending[task_id] = _Ending(view, "is being stopped")
                    break
            ending.done.wait()  # another Stop, or an abort, is killing it: then look again
        forget = False
        try:
            task.stop()
            forget = True
        finally:
            with self._lock:
                self._ending.pop(task_id, None)
                self._count_end(task_id, task)
                if forget:
                    self._tasks.pop(task_id, None)  # (gone already if the agent shut down meanwhile)
            ending.done.set()
        _task_log(task, "task stop %s state=%s", task_id, task.state.name.lower())
        return task.view()

    def stop_tasks(self, task_ids: Sequence[str]) -> list[TaskView | Exception]:
        """:meth:`stop` for each id in turn; each result the task's view, or the error that Stop alone would have
        raised. One call for a job's tasks as the job ends: a Stop per task made a job of 10,000 tasks on 4 hosts
        take 8.6 s to cancel, nearly all of it in the calls (the agent's own stops take 0.28 s)."""
        results: list[TaskView | Exception] = []
        for task_id in task_ids:
            try:
                results.append(self.stop(task_id))
            except Exception as e:
                results.append(e)
        return results

    def task(self, task_id: str) -> TaskView:
        with self._lock:
            task = self._task(task_id)
            if (ending := self._ending.get(task_id)) is not None:
                return ending.view
            self._poll(task_id, task)
            return task.view()

    def status(self) -> tuple[list[HostView], list[TaskView]]:
        """Fresh readings (each task is polled now, so a client timing CPU deltas gets exact figures)."""
        with self._lock:
            tasks = []
            for task_id, t in list(self._tasks.items()):
                if (ending := self._ending.get(task_id)) is None:
                    self._poll(task_id, t)
                    ending = self._ending.get(task_id)  # its poll may have begun its abort
                tasks.append(t.view() if ending is None else ending.view)
        hosts = []
        for h in self.hosts.values():
            mine = [t for t in tasks if t.host == h.name]
            hosts.append(HostView(
                name=h.name, cpu_cores=h.cpu_cores, memory_bytes=h.memory_bytes,
                cpu_allocated=sum(t.cpu_share for t in mine if t.state in _ACTIVE),
                cpu_measured=sum(t.cpu_measured for t in mine),
                memory_used_bytes=sum(t.memory_bytes for t in mine)))
        return hosts, tasks

    def shutdown(self) -> None:
        """Kill every task (thawed first), remove every cgroup of this agent and its parent. Idempotent.

        As a Stop's, the kills are made outside the agent's lock, and all at once (:meth:`_stop_at_shutdown`): a
        task that cannot die holds its own kill up to :data:`~node_agent.cgroups.KILL_TIMEOUT_S`, not the others',
        so the shutdown waits about one such time however many tasks are stuck, not one per task. Every task is
        marked as ending (an unfinished one reported with message "stopping: the agent is shutting down"), then
        killed and forgotten; so, once they have ended, are the tasks that Stops under way left known (their kill
        failed). A kill that fails is logged, and what it left is killed again as the cgroups are removed. Meanwhile
        Status answers, a call that would change one of them is refused or changes nothing as for a Stop, a Stop
        of one waits for its end then finds no task, and a StartTask is refused (UNAVAILABLE)."""
        if self._stop.is_set():
            return
        self._stop.set()  # (under the lock from here on, StartTask refuses)
        self._spares.close()
        self._monitor.join(timeout=2.0)
        self._stop_fencer()  # (it would freeze what the shutdown is killing)

        def ours() -> list[tuple[str, Task | ModeledTask, _Ending]]:
            """Mark every task not already ending as ending, for the shutdown (under the lock)."""
            batch = []
            for task_id, task in self._tasks.items():
                if task_id in self._ending:
                    continue
                view = task.view()
                if not view.state.finished:
                    view = replace(view, message=f"stopping: {SHUTTING_DOWN}")
                ending = self._ending[task_id] = _Ending(view, f"is being stopped: {SHUTTING_DOWN}")
                batch.append((task_id, task, ending))
            return batch

        with self._lock:
            others = list(self._ending.values())  # Stops, aborts and failed starts under way: not ours to kill
            mine = ours()
            unfinished = sum(1 for _, task, _ in mine if not task.view().state.finished)  # (Stops under way aside)
        self._stop_at_shutdown(mine)
        for e in others:  # they end within their kill's time limit (each in a thread of its own: together)
            e.done.wait(cgroups.KILL_TIMEOUT_S + 5.0)
        with self._lock:  # what they left known (a Stop whose kill failed keeps its task): stopped once more
            left = ours()
        self._stop_at_shutdown(left)
        with self._lock:
            self._tasks.clear()
            self._unended.clear()
        removed = "cgroups and work directory" if self.driver.mode.startswith("cgroup") else "work directory"
        try:  # (no task left to act on: outside the lock too)
            self.driver.cleanup(remove_parent=True)
        except (CgroupError, OSError) as e:  # the next agent to start removes them (their owner has ended)
            log.error("cannot remove this agent's cgroups at shutdown: %s", e)
            removed = "work directory (not the cgroups: above)"
        self.driver.close()
        shutil.rmtree(self._workdir, ignore_errors=True)
        for close in self._closers:
            close()
        # (a SIGTERM'd agent said nothing of what it stopped; operator review)
        log.info("shut down: %d unfinished task%s stopped, %s removed", unfinished, "" if unfinished == 1 else "s",
                 removed)

    def _stop_at_shutdown(self, batch: list[tuple[str, Task | ModeledTask, _Ending]]) -> None:
        """Stop the tasks the shutdown has marked as ending, each in a thread of its own (a modeled task, which has
        no process to wait for, here), and forget each as its stop ends, whether it failed (logged: the cgroups'
        removal kills what is left) or not. One after another, N tasks that cannot die would hold the shutdown
        N x :data:`~node_agent.cgroups.KILL_TIMEOUT_S`; together, about one. Returns when they have all ended, or
        after that time and a margin (a stop that hangs beyond its kill's limit is logged and left to end alone)."""

        def stop(task_id: str, task: Task | ModeledTask, ending: _Ending) -> None:
            try:
                task.stop()
            except Exception:  # the cleanup kills what is left again
                log.exception("stopping task %s at shutdown failed", task_id)
            finally:
                with self._lock:
                    self._ending.pop(task_id, None)
                    self._count_end(task_id, task)
                    self._unended.discard(task_id)  # (a stop that failed: forgotten all the same)
                    self._tasks.pop(task_id, None)
                ending.done.set()

        threads = []
        for task_id, task, ending in batch:
            if isinstance(task, ModeledTask):
                stop(task_id, task, ending)
                continue
            thread = threading.Thread(target=stop, args=(task_id, task, ending), name=f"shutdown-{task_id}",
                                      daemon=True)
            try:
                thread.start()
            except RuntimeError:  # no thread to be had (a thread limit): stop it here, then
                stop(task_id, task, ending)
                continue
            threads.append(thread)
        deadline = time.monotonic() + cgroups.KILL_TIMEOUT_S + 5.0
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        if late := [t.name.removeprefix("shutdown-") for t in threads if t.is_alive()]:
            log.error("stopping tasks %s at shutdown had not ended after %g s; their cgroups are removed regardless",
                      ", ".join(late), cgroups.KILL_TIMEOUT_S + 5.0)

    # ------------------------------------------------------------------ helpers
    def _apply(self, task_id: str, action: Callable[[Task], None], share: float | None = None) -> TaskView:
        """Run ``action`` on a task; if it (re)claims CPU (``share``: a new share, or -1 for the task's
        current one on Resume), check the host's capacity first."""
        with self._lock:
            return self._apply_locked(task_id, action, share)

    def _apply_locked(self, task_id: str, action: Callable[[Task], None], share: float | None = None) -> TaskView:
        task = self._task(task_id)
        if (ending := self._ending.get(task_id)) is not None:
            return self._ending_reply(task_id, ending)
        if share is not None and not task.state.finished:
            claims = task.state in _ACTIVE or share < 0  # a paused task claims CPU only on Resume
            # A cut releases CPU (checking it would only refuse a cut on a host over its capacity), and costs
            # no pass over the host's tasks: a job started on a host of n re-shares the other n - 1 downward.
            if claims and not (0 <= share <= task.cpu_share):
                need = task.cpu_share if share < 0 else share
                self._check_cpu(self.hosts[task.spec.host], need, exclude=task)
        before = task.state, task.cpu_share
        action(task)
        used, host = self._used, task.spec.host
        if used is not None and host in used:  # (a batch's sum: kept, or summed again at its next check)
            if task.state is before[0]:
                if task.state in _ACTIVE:
                    used[host] += task.cpu_share - before[1]
            else:
                del used[host]
        return task.view()

    @staticmethod
    def _ending_reply(task_id: str, ending: _Ending) -> TaskView:
        """A request that would change an ending task: one that has already finished (done or failed, its
        processes being killed) is accepted and changes nothing; one a Stop is ending is refused."""
        if ending.view.state.finished:
            return ending.view
        raise AgentError("FAILED_PRECONDITION", f"task_id: task {shown(task_id)} {ending.why}")

    def _poll(self, task_id: str, task: Task | ModeledTask) -> None:
        """Poll a task (under the lock). If its poll raised, fail it now and kill it in a thread of its own,
        marked as ending (see :func:`_poll`); so too if the poll found it finished with processes to kill (its
        work done: ``end_pending``)."""
        why = _poll(task)
        if why is not None:
            task.fail(why)
            self._end_outside(task_id, task, lambda: task.abort(why))
        elif task.end_pending:
            self._end_outside(task_id, task, task.end)
        self._count_end(task_id, task)

    def _count_end(self, task_id: str, task: Task | ModeledTask) -> None:
        """(Under the lock.) Count a started task that is finished, once. Called by every poll (the monitor's
        polls every task not ending each round, so a task finished by any request is counted within a round) and
        as a Stop or the shutdown ends one, before it is forgotten. A finished state is final."""
        if task.state.finished and task_id in self._unended:
            self._unended.discard(task_id)
            self._ended[task.state] += 1

    def tasks_ended(self) -> dict[State, int]:
        """How many started tasks have ended, by the state they ended in (DONE, FAILED, STOPPED)."""
        with self._lock:
            return dict(self._ended)

    def program_starts(self) -> dict[tuple[str, str], int]:
        """How many task programs this agent has started, by (workload, "spare" or "cold"): a start that took a
        spare (:mod:`node_agent.spares`) or started the program then. A start that failed is not counted."""
        with self._lock:
            # each program workload's series from the start, at 0: a counter that first appears at 1 reads as no
            # increase() (metrics review)
            zero = dict.fromkeys(((w, how) for w in self._spares_for for how in ("spare", "cold")), 0)
            zero[TRANSACTIONAL, "cold"] = 0  # (a server never starts from a spare: its stdout is a pipe)
            return {**zero, **self._program_starts}

    def _end_outside(self, task_id: str, task: Task | ModeledTask, kill: Callable[[], None]) -> None:
        """Mark a finished task as ending (reported as it is now) and ``kill`` it in a thread of its own, outside
        the lock (held by the caller). A kill that fails is logged: the task stays known, finished, its memory
        counted, and a Stop kills it again."""
        ending = self._ending[task_id] = _Ending.finished(task.view())

        def end(locked: bool = False) -> None:
            try:
                kill()
            except Exception:
                log.exception("killing the processes of task %s (%s) failed; its memory stays counted, and a Stop "
                              "kills them again", task_id, task.state.name.lower())
            else:
                if task.kill_failed:  # (an abort's kill is best effort: it raises nothing)
                    log.error("killing the processes of task %s (%s) failed: %s; its memory stays counted, and a "
                              "Stop kills them again", task_id, task.state.name.lower(), task.kill_failed)
            finally:
                if locked:
                    self._ending.pop(task_id, None)
                else:
                    with self._lock:
                        self._ending.pop(task_id, None)
                ending.done.set()

        try:
            threading.Thread(target=end, name=f"end-{task_id}", daemon=True).start()
        except RuntimeError:  # "can't start new thread" (a pids limit reached): killed here, under the lock, rather
            # than never: the task stayed in _ending for good, every Stop of it waited for ever, and the exception
            # ended the monitor thread (exhaustion review)
            log.warning("no thread for the end of task %s (%s): killed here, under the agent's lock", task_id,
                        "the process or thread limit is reached")
            end(locked=True)

    def _check_cpu(self, h: HostSpec, share: float, exclude: Task | ModeledTask | None) -> None:
        if self._used is None:
            used = sum(t.cpu_share for t in self._live(h.name) if t.state in _ACTIVE and t is not exclude)
        else:  # a batch (:meth:`set_shares`): the host's sum, made once
            total = self._used.get(h.name)
            if total is None:
                total = self._used[h.name] = sum(t.cpu_share for t in self._live(h.name) if t.state in _ACTIVE)
            # (the task whose request this is: unfinished and not ending, so among the host's live tasks)
            used = total - (exclude.cpu_share if exclude is not None and exclude.state in _ACTIVE else 0.0)
        if used + share > 1.0 + SHARE_EPS:
            raise AgentError("FAILED_PRECONDITION", f"cpu_share: host {h.name} has {1.0 - used:.6g} of its "
                             f"CPU unallocated, the request needs {share:.6g}")

    def _live(self, host: str) -> list[Task]:
        """The host's tasks that hold resources: unfinished ones, ending ones (their processes may live), and
        finished ones whose processes outlived their kill (``kill_failed``: frozen, they still hold their memory)."""
        return [t for task_id, t in self._tasks.items()
                if t.spec.host == host and (not t.state.finished or task_id in self._ending or t.kill_failed)]

    def _host(self, name: str) -> HostSpec:
        try:
            return self.hosts[name]
        except KeyError:
            raise AgentError("NOT_FOUND", f"host: no host {shown(name)} on agent {self.agent_id} (hosts: "
                             f"{', '.join(self.hosts)})") from None

    def _task(self, task_id: str) -> Task:
        try:
            return self._tasks[task_id]
        except KeyError:
            raise AgentError("NOT_FOUND", f"task_id: no task {shown(task_id)} on agent {self.agent_id}") from None

    def _monitor_loop(self) -> None:
        """Every :data:`POLL_INTERVAL_S`, a round: the lease, the fencer, and a poll of every task; in between, every
        ``boot_poll_s`` (:data:`BOOT_POLL_S`), a poll of the booting tasks only, if any (without the lock if not)."""
        next_round = time.monotonic() + POLL_INTERVAL_S
        failing = ""  # the last failed round's error, said with its traceback once until a round succeeds
        while not self._stop.wait(min(self.boot_poll_s, max(0.0, next_round - time.monotonic()))):
            if time.monotonic() < next_round:
                if self._booting:
                    with self._lock:
                        self._poll_booting()
                continue
            try:
                self._round()
            except Exception as exc:  # the monitor (fencing, the tasks' ends) must outlive one bad round (exhaustion
                # review: a thread it could not start ended it, and with it every later fence and poll, with no word
                # but a traceback on stderr). Said once while the same failure repeats (10 tracebacks a second: review)
                if f"{type(exc).__name__}: {exc}" != failing:
                    failing = f"{type(exc).__name__}: {exc}"
                    log.exception("a monitor round failed; the next one runs as usual (said again once it changes)")
            else:
                if failing:
                    log.warning("monitor rounds succeed again (after %s)", failing)
                failing = ""
            # From the round's end, as before the boot polls: a round of 10,000 tasks on a loaded machine can take
            # most of POLL_INTERVAL_S, and the agent's calls must get the lock between two (review).
            next_round = time.monotonic() + POLL_INTERVAL_S

    def _round(self) -> None:
        """The monitor's round: the lease and the fencer first, then a poll of every task and the rate estimates."""
        with self._lock:
            self._fence_if_expired()  # first: the lease's deadline must not wait for the polls of every task
            self._adopt_fences()  # (after: a task the agent fences itself is not put down to the fencer)
            self._watch_fencer()
            for task_id, task in list(self._tasks.items()):
                if task_id in self._ending:
                    continue  # another thread is killing it
                self._poll(task_id, task)
                if task_id in self._ending:
                    continue
                if isinstance(task, Task) and task.BUSY:
                    seconds, allocated, charged = task.cpu_given_delta()
                    if allocated > 0:
                        self.shortfall.add(task.spec.host, seconds, allocated, charged, time.monotonic())
                if self.progress_by != "units":  # (no rate is read under cpu-time)
                    continue
                units, cpu = task.rate_delta()
                if cpu > 0:
                    acc = self._rate_acc.setdefault(task.spec.workload, [0.0, 0.0])
                    acc[0] += units
                    acc[1] += cpu
            self._update_rates()
            for line in self.shortfall.check(time.monotonic()):
                # (review h218: without cgroups the duty cycle's own inexactness alone can hold a task to 60-90 %)
                log.warning("%s%s", line, "; shares here are held by duty-cycle throttling (--no-cgroups), which "
                            "holds them less exactly than a cgroup's quota" if self.mode == "duty-cycle" else "")

    def _poll_booting(self) -> None:
        """(Under the lock.) Poll each booting task (:meth:`_poll`), and forget those no longer booting. Not once the
        lease has run out: the next round fences first (a boot ended now would set a task running unfenced)."""
        if self._lease_ran_out() is not None:
            return
        for task_id in list(self._booting):
            if self._is_booting(task_id):
                self._poll(task_id, self._tasks[task_id])
            if not self._is_booting(task_id):
                self._booting.discard(task_id)

    def _is_booting(self, task_id: str) -> bool:
        """(Under the lock.) Is the task known, not ending, and its program still booting?"""
        task = self._tasks.get(task_id)
        return task is not None and task_id not in self._ending and task.state is State.STARTING

    def _lease_ran_out(self) -> float | None:
        """The :func:`leaseclock.now` the lease ran out at, or None while it holds or there is none (read without the
        lease lock: one attribute read, taken by tasks under the agent's lock)."""
        until = self._lease_until
        return until if until is not None and leaseclock.now() > until else None

    def lease_left(self) -> float:
        """Seconds until the lease runs out (0 if it has), or -1 if the agent holds none."""
        with self._lease_lock:
            if self._lease_until is None:
                return -1.0
            return max(0.0, self._lease_until - leaseclock.now())

    def _adopt_fences(self) -> None:
        """(Under the lock.) A task that runs, as far as this agent knows, but whose group is frozen was frozen by
        the fencer while this process did not run (:mod:`node_agent.fencer`): it is fenced, as if by
        :meth:`_fence_if_expired`, and only the coordinator's Resume thaws it. Looked at every round, whatever the
        lease says now: the fencer may have frozen it just before a renewal."""
        if not self._freezer:
            return
        adopted = self._fence_tasks(
            "fenced: the agent did not run while its lease ran out (its fencer froze it); a Resume thaws it",
            lambda task: (isinstance(task, Task) and task.state in (State.STARTING, State.RUNNING)
                          and self.driver.is_frozen(task.cgroup)))
        if adopted:
            log.warning("the fencer froze %d task(s) while this agent did not run, its lease having run out: %s",
                        len(adopted), ", ".join(adopted))

    def _fence_if_expired(self) -> None:
        """(Under the lock.) Once the lease has run out, freeze every task that runs (see :meth:`renew_lease`); a
        task whose freeze fails is tried again at the next round."""
        with self._lease_lock:
            lease_s, until = self._lease_s, self._lease_until
        if until is None or leaseclock.now() <= until:
            return
        fenced = self._fence_tasks(
            f"fenced: the agent's lease ran out ({lease_s:g} s without word from its coordinator); a Resume thaws it")
        if fenced:
            log.warning("lease ran out (%g s without word from the coordinator): froze %d task(s) until it resumes "
                        "them: %s", lease_s, len(fenced), ", ".join(fenced))

    def _fence_tasks(self, why: str, which: Callable[[Task | ModeledTask], bool] = lambda _task: True) -> list[str]:
        """(Under the lock.) :func:`~node_agent.runner.fence` each task (``which`` of them) that is not ending, with
        ``why``; returns the ids of those it froze. One whose freeze fails is logged, and tried again next round."""
        fenced = []
        for task_id, task in self._tasks.items():
            if task_id in self._ending or not which(task):
                continue
            try:
                if fence(task, why):
                    fenced.append(task_id)
            except (CgroupError, OSError) as e:
                log.error("task %s cannot be fenced (%s): %s; trying again", task_id, why.split(";")[0], e)
        return fenced

    def _update_rates(self) -> None:
        """Keep each workload's units per CPU-second current from the running tasks themselves.

        (Read under ``units`` progress only.) The start-up calibration runs alone and unthrottled; tasks run
        throttled, beside each other, on cores that share caches and memory bandwidth (and, on a virtual machine, a
        host), where a CPU-second does 10-40% less work and drifts over minutes. A new task's target is computed
        from this running estimate (an exponential average over every CPU-second of task time), so
        a job's work costs what it costs on the cluster as it is now. Shares are untouched.
        """
        for workload, acc in self._rate_acc.items():
            if acc[1] >= RATE_UPDATE_CPU_S and acc[0] > 0:
                measured = acc[0] / acc[1]
                self.rates[workload] += RATE_SMOOTHING * (measured - self.rates[workload])
                acc[0] = acc[1] = 0.0

    def sample(self, task_id: str) -> tuple[float, int, float, float]:
        """``(t, units, units_t, cpu_seconds)`` of a task now: its latest progress record (units done as of
        ``units_t``) and its cgroup CPU time as of ``t``. For benchmarks that fit rates."""
        with self._lock:
            task = self._task(task_id)
            if (ending := self._ending.get(task_id)) is not None:
                raise AgentError("FAILED_PRECONDITION", f"task_id: task {shown(task_id)} {ending.why}")
            s = task.progress_sample()
            cpu = self.driver.cpu_usage_s(task.cgroup)
            t = time.monotonic()
        return t, (s.units if s else 0), (s.t if s else t), cpu

    def cpu_given(self) -> dict[str, tuple[float, float]]:
        """Host -> (allocated, charged) CPU-seconds of its busy running tasks since the agent started
        (:mod:`node_agent.shortfall`)."""
        with self._lock:
            return self.shortfall.totals()

    def cgroup_dirs(self, task_id: str) -> list[str]:
        """The cgroup directories of a task (for tests and operators)."""
        with self._lock:
            return self.driver.dirs(self._task(task_id).cgroup)


def _poll(task: Task | ModeledTask) -> str | None:
    """Poll a task; log its end once (the agent-side record of what ran, for operators and fault tests).
    Returns why the task must be aborted, or None.

    An unexpected error fails that task, to be aborted by the caller (its processes killed, what it holds
    released) rather than escape: escaping, it would end the monitor thread, and with it every task's
    progress and completion on this agent, silently. A failed task is reported, so its job is failed or
    retried where it can be seen. A finished task keeps its end (its poll has nothing left to do)."""
    was = task.state
    if task.kill_failed:  # processes that outlived a kill: have they died since? (even if its poll raises)
        with contextlib.suppress(Exception):
            task.recheck_kill()
    try:
        task.poll()
    except Exception as exc:  # a bug or an unforeseen OS error: this task's, not the agent's
        if was.finished:
            return None
        log.exception("polling task %s failed; failing the task", task.spec.task_id)
        log.info("task end %s state=failed", task.spec.task_id)
        return f"agent error while polling the task: {type(exc).__name__}: {exc}"
    if task.state.finished and not was.finished:
        _task_log(task, "task end %s state=%s", task.spec.task_id, task.state.name.lower())
    return None


def _task_log(task: Task | ModeledTask, message: str, *args: object) -> None:
    """A task's start, end or stop: INFO for a workload program's, DEBUG for a modeled task's (no process; a scale
    run starts thousands: a soak test's log grew 3 MB an hour, 99% of it these lines)."""
    log.log(logging.DEBUG if isinstance(task, ModeledTask) else logging.INFO, message, *args)


def _check_fraction(field: str, value: float) -> None:
    if not (math.isfinite(value) and 0.0 < value <= 1.0):
        raise AgentError("INVALID_ARGUMENT", f"{field}: must be in (0, 1], got {value}")


def open_core(agent_id: str, hosts: list[HostSpec], no_cgroups: bool = False,
              progress_by: str = "cpu-time", spares: int = 0, rates_file: str | None = None) -> AgentCore:
    """Claim the agent id, remove what dead agents left in cgroups (:func:`_sweep_cgroups`), probe cgroups (or
    use duty cycling if ``no_cgroups``), calibrate the workloads if ``progress_by`` is ``units``, and return a
    running core.

    ``spares``: spare programs kept per workload (:mod:`node_agent.spares`): ``vcemu agent`` keeps
    :data:`~node_agent.spares.DEFAULT_SPARES`; an agent inside another command (a benchmark measuring CPU shares,
    ``apc --live``) none, unless it asks.

    Raises :class:`~node_agent.cgroups.CgroupUnavailable` if cgroups are needed but not writable, and ValueError for
    a ``spares`` out of range (before anything is claimed). ``rates_file`` (``units`` progress): where an earlier
    process of this agent wrote its calibration, read instead of measuring it again, or where this one writes it
    (:func:`~node_agent.runner.calibrated_rates`)."""
    if not 0 <= spares <= MAX_SPARES:
        raise ValueError(f"spares: must be in 0..{MAX_SPARES}, got {spares}")
    from node_agent.cgroups import open_driver
    from node_agent.dutycycle import DutyCycleDriver
    from node_agent.runner import calibrated_rates

    locks = [_lock_agent_id(agent_id)]
    try:
        locks.append(_claim_cgroups(agent_id, wait_s=CGROUPS_CLAIM_WAIT_S))
        _sweep_cgroups(agent_id, strict=not no_cgroups)  # a --no-cgroups agent too: cgroup runs may precede it
        driver: CgroupDriver = DutyCycleDriver() if no_cgroups else open_driver(agent_id)
        _remove_old_workdirs(agent_id)
        # Only ``units`` progress needs the programs' rates before a task starts (its target in units); under
        # ``cpu-time`` (the default) a task is done when charged its CPU-seconds, and no rate is read. Calibrating
        # anyway took every agent start about 4 s (two workloads, 1.5 CPU-s each, and a program's start-up each),
        # more with several agents starting at once on a loaded machine.
        rates = (calibrated_rates(PROGRAMS, rates_file) if progress_by == "units" else dict.fromkeys(PROGRAMS, 0.0))
    except BaseException:
        for lock in locks:
            lock.close()
        raise
    core = AgentCore(agent_id, hosts, driver, rates, progress_by, spares)
    core._closers.extend(lock.close for lock in locks)
    return core


#: How long a starting agent waits for another agent that is removing the cgroups a dead agent of its id left.
CGROUPS_CLAIM_WAIT_S = 60.0


def remove_dead_agents_leftovers(agent_ids: Iterable[str]) -> None:
    """Remove what agents of these ids left if they are gone: their cgroup subtrees (processes killed, frozen
    ones thawed first) and their work directories (and the workload processes using them). For ``vcemu up``,
    ``demo`` and ``replay`` once their agents have stopped: an agent killed mid-run (kill -9, the OOM killer) left
    its tasks' cgroups and work directory until the next agent of its id started. An id whose agent lives (it
    holds the id's cgroups claim for good) is left alone, as :func:`_sweep_cgroups` leaves it; every failure is
    logged."""
    ids = set(agent_ids)
    _sweep_cgroups(None, strict=False, only=ids)
    for agent_id in sorted(ids):  # an agent without cgroups (--no-cgroups) leaves its work directory alone
        claim = _try_claim(f"vcemu-cgroups-{agent_id}")
        if claim is None:
            continue
        try:
            _remove_old_workdirs(agent_id)
        except OSError as e:
            log.warning("cannot remove the work directories agent %s left: %s", agent_id, e)
        finally:
            claim.close()


def _sweep_cgroups(agent_id: str | None, strict: bool, only: Collection[str] | None = None) -> None:
    """Remove the cgroup subtrees (their processes killed, frozen ones thawed first) of this agent id and of
    every agent whose owner process is dead, beside this agent's own in each hierarchy, and their work
    directories; leave live agents' alone.

    Several agents with different ids run on one machine (a local cluster's), and one killed with SIGKILL
    leaves its tasks behind, frozen ones holding their memory for ever. Its subtree records its owner
    (:class:`~node_agent.cgroups.Owner`: pid and start time, so a reused pid is not taken for it); a subtree
    whose owner has ended is removed while holding that id's cgroups claim, which every live agent holds for
    good (so no agent of that id starts meanwhile). A subtree with no owner recorded (an older agent's) or
    whose owner cannot be judged (another pid namespace) is left to an agent of its own id. This agent's own
    id's leftovers are removed whoever made them: it holds the id.

    ``strict``: a failure on this agent's own id's leftovers raises (a cgroup-mode agent would reuse them);
    otherwise every failure is logged and the agent starts. ``only``: the ids to look at (default: every one)."""
    from node_agent.cgroups import agent_parents, owners, remove_groups

    for other, parents in agent_parents().items():
        if only is not None and other not in only:
            continue
        mine = other == agent_id
        claim = None if mine else _try_claim(f"vcemu-cgroups-{other}")
        if not mine and claim is None:
            continue  # its agent lives (or another agent is removing it now)
        try:
            recorded = owners(parents)
            if not mine and (not recorded or any(o.alive() is not False for o in recorded)):
                continue
            try:
                left = remove_groups(parents, remove_parent=True)
            except (CgroupError, OSError) as e:
                if mine and strict:
                    raise CgroupError(f"cannot remove what an earlier agent {agent_id} left: {e}") from e
                log.warning("cannot remove the cgroups agent %s left: %s", other, e)
                continue
            if mine:
                if left:
                    log.warning("removed %d task cgroups (and their processes) left by a crashed agent %s: %s",
                                len(left), agent_id, ", ".join(left))
                continue
            _remove_old_workdirs(other)  # its transactional load generators ran outside its cgroups
            log.warning("removed the cgroups of agent %s (process %s, ended): %d task cgroups (and their "
                        "processes)%s", other, ", ".join(str(o.pid) for o in recorded), len(left),
                        ": " + ", ".join(left) if left else "")
        finally:
            if claim is not None:
                claim.close()


#: How many times an agent starts its fencer (:mod:`node_agent.fencer`) before it gives up on it.
FENCER_STARTS = 3


def _remove_old_workdirs(agent_id: str) -> None:
    """Remove the progress-channel directories a crashed agent with this id left, and kill the workload
    processes that still use them (we hold the id's lock, so none of them belongs to a live agent).

    The processes matter without cgroups (``--no-cgroups``): no task cgroup finds them, and a task that
    the duty cycle or a Pause had stopped (SIGSTOP) when its agent died never runs its orphan check, so
    it would stay, holding its memory, for ever. Every workload process names a file of its agent's
    directory on its command line (``--progress``; a spare's ``--spare``; the transactional generator's ``--stats``)."""
    old: list[str] = []
    for base in ("/dev/shm", tempfile.gettempdir()):
        with contextlib.suppress(OSError):
            for name in os.listdir(base):
                rest = name.removeprefix(f"vcemu-agent-{agent_id}-")  # mkdtemp's 8-letter suffix, no '-'
                if rest != name and len(rest) == 8 and "-" not in rest:
                    old.append(os.path.join(base, name) + os.sep)
    if old:
        for p in psutil.process_iter(["cmdline"]):
            if any(arg.startswith(d) for arg in p.info["cmdline"] or () for d in old):
                with contextlib.suppress(psutil.Error):
                    p.kill()  # SIGKILL ends a stopped process too (a frozen one was thawed by the cgroup cleanup)
    for d in old:
        shutil.rmtree(d, ignore_errors=True)


def _lock_agent_id(agent_id: str) -> socket.socket:
    """Claim ``agent_id`` on this machine while the agent lives: start-up removes the leftover cgroups of
    its id, which must never be those of another live agent. The claim is an abstract unix socket name,
    which the kernel releases when the process dies (no lock file to go stale or litter)."""
    sock = _try_claim(f"vcemu-agent-{agent_id}")
    if sock is None:
        raise AgentIdInUse(f"--agent-id: agent id {agent_id!r} is in use by another running agent "
                           "on this machine")
    return sock


def _try_claim(name: str) -> socket.socket | None:
    """Bind the abstract unix socket ``name`` (a claim the kernel drops when its process dies), or None if
    another process holds it."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(f"\0{name}")
    except OSError:
        sock.close()
        return None
    return sock


def _claim_cgroups(agent_id: str, wait_s: float) -> socket.socket:
    """Claim the cgroup subtree of ``agent_id`` for this agent's life, after the id itself: another agent
    holds it only while it removes what a dead agent of this id left (:func:`_sweep_cgroups`), so wait."""
    deadline = time.monotonic() + wait_s
    while (sock := _try_claim(f"vcemu-cgroups-{agent_id}")) is None:
        if time.monotonic() > deadline:
            raise AgentIdInUse(f"--agent-id: the cgroups of agent id {agent_id!r} were still being removed by "
                               f"another agent after {wait_s:g} s")
        time.sleep(0.05)
    return sock


#: The ids this process's local clusters hold for their agent processes (:func:`reserve_agent_id`).
_RESERVED: dict[str, socket.socket] = {}


def reserve_agent_id(base: str) -> str:
    """``base``, or ``base-1``, ``base-2``, ... : the first id no live agent on this machine has claimed and no
    other local cluster has reserved, reserved for this process until :func:`release_agent_ids`. A local
    cluster's agents take the same ids run after run, so that each cleans up what a killed predecessor of its id
    left (cgroups, processes, work directories), and a second cluster beside a running one takes the next. The
    reservation (an abstract unix socket, dropped by the kernel with this process) keeps the id from another
    cluster between the pick and the agent's own claim as it starts, and while ``vcemu up`` waits to start a dead
    agent of that id again: without it, a second ``up`` or ``demo`` started then found the id free, and the
    restart failed."""
    for n in range(1000):
        agent_id = base if n == 0 else f"{base}-{n}"
        if agent_id in _RESERVED:
            continue
        reservation = _try_claim(_reservation_name(agent_id))
        if reservation is None:
            continue
        try:
            _lock_agent_id(agent_id).close()
        except AgentIdInUse:  # (an agent started by hand with this id)
            reservation.close()
            continue
        except BaseException:  # (Ctrl-C): not left held by this process
            reservation.close()
            raise
        _RESERVED[agent_id] = reservation
        return agent_id
    raise AgentIdInUse(f"--agent-id: every id from {base!r} to {base}-999 is in use on this machine")


def _reservation_name(agent_id: str) -> str:
    """The abstract socket name of ``agent_id``'s reservation: not ``vcemu-agent-`` and a name, which an agent
    with that name as its id would claim (``reserved-agent0`` is a valid id)."""
    return f"vcemu-reserve-{agent_id}"


def release_agent_ids(ids: Iterable[str]) -> None:
    """Give up the reservations :func:`reserve_agent_id` made for ``ids`` (once their agents are stopped)."""
    for agent_id in ids:
        if (reservation := _RESERVED.pop(agent_id, None)) is not None:
            reservation.close()


class AgentIdInUse(RuntimeError):
    """Another live agent on this machine has the same id."""
