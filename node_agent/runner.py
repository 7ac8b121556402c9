"""The process runner: one task = one workload process in its own cgroup.

A task's process joins its cgroup before it computes: it is started with ``--wait-go`` and blocks on
stdin before importing numpy; the runner adds its pid to the cgroup, then sends the go byte. So the
import, the allocation and every multiplication are limited and accounted. Or, where the agent keeps spares
(:mod:`node_agent.spares`), it is a program started ahead that has imported numpy already (outside the task's
cgroup) and gets its arguments with the go byte: its allocation and every multiplication are.

Under ``units`` progress, work is converted into the program's units with a calibration made once per agent and
workload (units per CPU-second of one core, measured unthrottled): a task that needs ``cpu_need`` of a host with ``C``
cores for ``work_seconds`` at full speed does ``work_seconds * cpu_need * C * rate`` units, less the
fraction ``start_progress`` already done elsewhere.

Progress is measured one of two ways (``progress_by``):

* ``cpu-time`` (the default): a task is done when its cgroup has charged it ``work_seconds * cpu_need *
  C`` CPU-seconds since its boot phase ended (less ``start_progress``); the agent then ends the process.
  This is the model's own unit of work (seed 001 Sec. II-B: work is run time at full speed, i.e.
  CPU-seconds at the task's need), so a live job takes as long as its simulation says whatever this
  machine's speed per CPU-second does. On a virtual machine that speed drifts by 10-40% over minutes
  (see :meth:`node_agent.agent.AgentCore._update_rates`), which in ``units`` mode turns directly into
  run-time error. The program still counts its multiplications or array passes (``units_done``).
* ``units``: a task is done when the program has done its calibrated number of units (multiplications
  for dgemm) and exits by itself.

Boot phase: until the program reports ready (interpreter started, numpy imported, memory allocated) its
cgroup's quota is the whole host's capacity, and the task's share applies from then on. Start-up is not
part of a job's work: at a share of 0.1 core it would otherwise take seconds (writing a 500 MB ballast
alone is a quarter of a CPU-second), and a live run would lag its simulation by that much per start.
The host may therefore use more than its allocated shares while tasks start, and more than its capacity:
each starting task may use up to the host's capacity beside the others' shares (the operator review saw a 0.3-core host
at 2.6 times its capacity for 3 s with two tasks starting). The model has no start-up cost, so that CPU is
taken from the machine's slack, outside the emulated host: where a running task's group weighs its share's
reservation, an agent's booting tasks together weigh one ordinary process (``set_cpu(..., reserved=False)``,
:class:`node_agent.cgroups.CpuWeights`), so that a burst of starts takes neither the running tasks' shares nor the
CPU the coordinator, the agent and a user's commands need, and still gets what one busy process would. Splitting
only the host's unallocated capacity among starting tasks was tried (session 19): no host went above its
capacity, but a task that starts or resumes on a fully allocated host then boots at its share, and the demo's
live-against-simulated median flow-time difference went from 0.079 to 0.189 (target 0.15; one run of each, back
to back).

Memory limit rule: ``memory_bytes`` (what the program allocates) + :data:`INTERPRETER_ALLOWANCE_BYTES`
for the interpreter, numpy and OpenBLAS (about 35 MB resident, plus their file pages, which v1 charges
to the first cgroup that reads them). A spare's interpreter and numpy were charged to the agent's group before it
joined the task's (neither cgroup version moves a process's charges with it), so such a task has that much more
room under the same limit: the limit is on what the task's program allocates, not on the interpreter's exact size.
"""

from __future__ import annotations

import collections
import contextlib
import enum
import json
import logging
import math
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING

import psutil

from node_agent import cgroups, leaseclock
from node_agent.cgroups import CgroupDriver, CgroupError, safe_name
from workloads import modeled, progress
from workloads.registry import CALIBRATION_MEMORY_BYTES, child_env, command

log = logging.getLogger("vcemu.agent")

if TYPE_CHECKING:
    from node_agent.spares import Spares
    from node_agent.transactional import ServiceView

INTERPRETER_ALLOWANCE_BYTES = 64 << 20
#: Window over which ``cpu_measured`` is computed.
CPU_WINDOW_S = 1.0
CALIBRATION_SECONDS = 1.5
#: The wait between a kill's first rounds (:meth:`Task._kill`), doubled each round up to the last.
KILL_ROUND_FIRST_S = 0.001
KILL_ROUND_MAX_S = 0.01
#: How a task's progress is measured (see the module docstring); the first is the default.
PROGRESS_MODES = ("cpu-time", "units")


class State(enum.Enum):
    """Task states; the names match ``vcemu.v1.TaskState`` without its ``TASK_STATE_`` prefix."""

    STARTING = 1
    RUNNING = 2
    PAUSED = 3
    DONE = 4
    FAILED = 5
    STOPPED = 6

    @property
    def finished(self) -> bool:
        return self in (State.DONE, State.FAILED, State.STOPPED)


_CALIBRATION: dict[str, float] = {}
_CALIBRATION_LOCK = threading.Lock()


def calibrate(workload: str, seconds: float = CALIBRATION_SECONDS) -> float:
    """Units per CPU-second of one core for ``workload``, measured once per process and cached.

    The program runs unthrottled and counts against its own CPU time, so other load on the machine
    makes the measurement take longer but does not bias it."""
    with _CALIBRATION_LOCK:
        if workload not in _CALIBRATION:
            mem = CALIBRATION_MEMORY_BYTES if workload == "arraycycle" else 0
            out = subprocess.run(
                command(workload, "--calibrate", str(seconds), "--memory-bytes", str(mem)),
                env=child_env(), capture_output=True, text=True, timeout=60, check=False)
            if out.returncode != 0:
                raise RuntimeError(f"calibration of {workload} failed: {out.stderr.strip()[-500:]}")
            _CALIBRATION[workload] = float(json.loads(out.stdout.splitlines()[-1])["units_per_cpu_second"])
        return _CALIBRATION[workload]


def calibrated_rates(workloads: Collection[str], path: str | None = None) -> dict[str, float]:
    """Each of ``workloads``' rate (:func:`calibrate`), or, with ``path``, the rates an earlier agent process
    calibrated and wrote there, if it holds one for each (``vcemu agent --rates-file``); otherwise they are
    measured and written there (atomically) for the next process.

    Why: calibrating takes an agent about 4 s before it serves (two workloads, 1.5 CPU-s each, and a program's
    start-up each). ``vcemu up`` starts a killed agent again under its id, and the coordinator requeues its
    jobs from their progress once it registers, or declares its hosts lost 6 s after its last heartbeat: with a
    calibration to measure, a restart registered 5.3 s after the kill on an idle machine, close enough to 6 s
    that a loaded one lost it (session 37 measured it). The machine is the same, so are its rates. A file that
    cannot be read, or holds no valid rate for a workload, is warned about and measured again."""
    if path is not None:
        try:
            rates = _stored_rates(path, workloads)
        except FileNotFoundError:
            pass
        except Exception as exc:  # whatever the file holds (a huge integer, deep nesting), the agent measures
            log.warning("--rates-file %s: %s; calibrating again", path, _why(exc))
        else:
            log.info("calibration read from %s (an earlier process of this agent measured it)", path)
            return rates
    rates = {w: calibrate(w) for w in workloads}
    if path is not None:
        _write_rates(path, rates)
    return rates


def _stored_rates(path: str, workloads: Collection[str]) -> dict[str, float]:
    """The rates in the file at ``path``, one for each of ``workloads``; ValueError (or the reader's error) if it
    does not hold them."""
    with open(path, encoding="utf-8") as f:
        stored = json.load(f)
    if not isinstance(stored, dict):
        raise ValueError(f"not an object of rates (a JSON {type(stored).__name__})")
    rates: dict[str, float] = {}
    for w in workloads:
        if w not in stored:
            raise ValueError(f"no rate for {w}")
        r = stored[w]
        try:
            rate = float(r) if isinstance(r, int | float) and not isinstance(r, bool) else math.nan
        except OverflowError:  # (an integer of hundreds of digits)
            rate = math.inf
        if not (math.isfinite(rate) and rate > 0):
            raise ValueError(f"the rate of {w} is not a positive number: {json.dumps(r)[:40]}")
        rates[w] = rate
    return rates


def _write_rates(path: str, rates: dict[str, float]) -> None:
    """``rates`` to ``path`` atomically (:func:`vcemu.outputs.write_json`: a new temporary file beside it,
    made by mkstemp, renamed over it, removed on failure); on failure a warning."""
    from vcemu.outputs import write_json

    try:
        write_json(path, rates)
    except OSError as exc:
        log.warning("--rates-file %s: cannot write the calibration there (%s): a restart calibrates again",
                    path, exc.strerror or exc)


def _why(exc: BaseException) -> str:
    """A rates file's fault, in a few words."""
    if isinstance(exc, OSError):
        return str(exc.strerror or exc)
    if isinstance(exc, json.JSONDecodeError):
        return f"not JSON ({exc.msg}, line {exc.lineno})"
    if isinstance(exc, ValueError):
        return str(exc)
    return f"unreadable ({type(exc).__name__})"


@dataclass(frozen=True)
class TaskSpec:
    """A validated StartTask request, with its host's capacity."""

    task_id: str
    host: str
    host_cores: float
    workload: str
    cpu_share: float
    cpu_need: float
    work_seconds: float
    memory_bytes: int
    start_progress: float = 0.0


@dataclass(frozen=True)
class TaskView:
    """A consistent snapshot of a task, for Status replies and metrics."""

    task_id: str
    host: str
    workload: str
    state: State
    progress: float
    cpu_share: float
    cpu_measured: float  # fraction of the host over the last CPU_WINDOW_S
    cpu_seconds: float
    memory_bytes: int
    exit_code: int
    message: str
    pid: int
    units_done: int
    #: A transactional task's measured response time and throughput (:mod:`node_agent.transactional`).
    service: ServiceView | None = None
    #: Why processes of the task outlived its last kill, or "" (see :attr:`Task.kill_failed`).
    kill_failed: str = ""
    #: The agent froze the task itself, its lease having run out (see :func:`fence`).
    fenced: bool = False


def fence(task: Task | ModeledTask, why: str) -> bool:
    """Freeze a task that runs (or starts) on the agent's own authority, its lease having run out
    (:meth:`node_agent.agent.AgentCore.renew_lease`); returns whether it did. The task is then PAUSED with
    ``fenced`` set to ``why``, which only its next Resume or Pause clears: the agent never thaws it by itself,
    since only the coordinator knows whether the job still runs here or has been started elsewhere."""
    if task.state not in (State.STARTING, State.RUNNING):
        return False
    task.pause()
    task.fenced = why
    return True


def _fence_note(task: Task | ModeledTask) -> str:
    """Why the agent froze the task itself, while it is so frozen: its view's ``fenced`` and part of its message
    (a fenced task that has since finished, failed or been stopped is no longer fenced)."""
    return task.fenced if task.state is State.PAUSED else ""


def _signal_name(number: int) -> str:
    """``SIGKILL`` for 9; ``signal 40`` for a signal :class:`signal.Signals` does not name (the real-time signals
    between SIGRTMIN and SIGRTMAX), whose ValueError failed the task's poll ("agent error while polling the task")."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _joined(*parts: str) -> str:
    """A task's message: its parts that are not empty, joined."""
    return "; ".join(filter(None, parts))


def target_units(spec: TaskSpec, units_per_core_second: float) -> int:
    """The units of work still to do (see the module docstring)."""
    full = spec.work_seconds * spec.cpu_need * spec.host_cores * units_per_core_second
    return max(1, round(full * (1.0 - spec.start_progress)))


class Task:
    """One task's process, cgroup and progress channel. Not thread-safe: the agent serialises calls.

    A kill can take seconds (a frozen v1 task ignores SIGKILL until its freezer thaws; at most
    :data:`~node_agent.cgroups.KILL_TIMEOUT_S`). With ``defer_kills`` (the agent's tasks), the kills :meth:`poll`
    and :meth:`start` would make (a task done with its work, a start that failed with its process started) are
    left to :meth:`end`, which the agent calls outside its lock: the task is marked finished and ``end_pending``
    meanwhile. Without it (a caller that drives a task directly), they are made at once.

    A kill that fails leaves :attr:`kill_failed` set until a later one succeeds or :meth:`recheck_kill` finds the
    processes gone: they are alive (frozen, most likely) and hold the task's memory, finished or not; its view
    reports their memory and says so."""

    #: Leave the kill of a task that ended in :meth:`poll` or :meth:`start` to :meth:`end`.
    defer_kills = False
    #: Where :meth:`start` takes a program started ahead (the agent's pool), or None: always started cold.
    spares: Spares | None = None
    #: How :meth:`start` got the program: "spare" or "cold" ("" before it did).
    started_from = ""

    def __init__(self, spec: TaskSpec, driver: CgroupDriver, units_per_core_second: float, workdir: str,
                 progress_by: str = PROGRESS_MODES[0]):
        if progress_by not in PROGRESS_MODES:
            raise ValueError(f"progress_by: must be one of {', '.join(PROGRESS_MODES)}, got {progress_by!r}")
        if progress_by == "units" and not units_per_core_second > 0:
            # (review h214: an agent opened under cpu-time progress calibrates nothing, its rates 0: a task switched to
            # units progress then had a target of 1 unit and was "done" at its first multiplication)
            raise ValueError(f"progress_by units: no calibrated rate for {spec.workload} (got {units_per_core_second})")
        self.spec = spec
        self.progress_by = progress_by
        #: CPU-seconds the task must be charged after its boot phase (``cpu-time`` mode).
        self.cpu_target = spec.work_seconds * spec.cpu_need * spec.host_cores * (1.0 - spec.start_progress)
        self._cpu_run0: float | None = None
        self.cpu_share = spec.cpu_share
        self.state = State.STARTING
        self.target = target_units(spec, units_per_core_second)
        self.cgroup = safe_name(spec.task_id)
        self._driver = driver
        self._path = os.path.join(workdir, self.cgroup)
        self._proc: subprocess.Popen[bytes] | None = None
        self._ps: psutil.Process | None = None
        self._reader: progress.ProgressReader | None = None
        self._ready = False  # the program reported ready (its boot phase is done on its side)
        #: The agent ended the boot phase (the task's share applied, the run byte sent). Not the same as
        #: ``_ready``: a Pause can come between the program's report and the poll that acts on it.
        self._booted = False
        #: The write of the task's share at its boot's end failed: it still has its boot's quota (its host's
        #: capacity), so every poll writes it again until it holds (or a SetShare's write does).
        self._share_unwritten = False
        self._units = 0
        self._cpu_s = 0.0
        self._rss = 0
        self._samples: collections.deque[tuple[float, float]] = collections.deque()
        self.exit_code = 0
        self.message = ""
        #: Finished, with its processes still to be killed and what it holds released by :meth:`end`.
        self.end_pending = False
        #: Why the last kill of its processes failed: they live on ("" if none did, or they have died since).
        self.kill_failed = ""
        #: Why the agent froze it itself (:func:`fence`), until a Resume or a Pause; "" if it did not.
        self.fenced = ""
        self._rate_mark: tuple[int, float] | None = None
        self._given_mark: tuple[float, float, float] | None = None  # (t, CPU-seconds, share): see cpu_given_delta

    # ------------------------------------------------------------------ lifecycle
    #: The program's stdout (a subclass that reads it sets ``subprocess.PIPE``).
    _STDOUT: int = subprocess.DEVNULL
    #: The program computes without pause while it runs (dgemm, arraycycle), so it is charged its whole quota unless
    #: the machine withholds it (:mod:`node_agent.shortfall`); a server waiting for requests is not.
    BUSY = True

    def _args(self) -> list[str]:
        """The program's arguments (the start protocol of :mod:`workloads.program`)."""
        units = self.target if self.progress_by == "units" else 0  # 0: until the agent ends it
        return ["--units", str(units), "--progress", self._path + ".progress",
                "--memory-bytes", str(self.spec.memory_bytes), "--wait-go"]

    def _argv(self) -> list[str]:
        """The program's command line."""
        return command(self.spec.workload, *self._args())

    def start(self) -> None:
        """Create the cgroup, start the process (or take a spare: :mod:`node_agent.spares`), put it in the cgroup,
        then let it compute."""
        d, name = self._driver, self.cgroup
        d.create(name)
        try:
            d.set_cpu(name, self.spec.host_cores, reserved=False)  # boot phase: see the module docstring
            d.set_memory_limit(name, self.spec.memory_bytes + INTERPRETER_ALLOWANCE_BYTES)
            progress.create(self._path + ".progress")
            first = self._launch()
            self._ps = psutil.Process(self._proc.pid)  # type: ignore[union-attr]
            self._reader = progress.ProgressReader(self._path + ".progress")
            assert self._proc is not None and self._proc.stdin is not None
            self._proc.stdin.write(first + b"g")
            self._proc.stdin.flush()
        except BaseException as e:
            if self.defer_kills and self._proc is not None:  # a process to kill, which may take seconds
                self.fail(f"workload {self.spec.workload} failed to start: {type(e).__name__}: {e}")
                self.end_pending = True
                raise
            with contextlib.suppress(Exception):  # the start's own error is the one to report
                self._kill()
            self._release()
            raise
        self._sample(time.monotonic())

    def _launch(self) -> bytes:
        """Put the task's program in its cgroup: a spare if one is ready (its arguments are then the first thing to
        send it, returned), else a process started now (nothing to send before the go byte). Either is the task's
        from here on: a failure to put it in the cgroup fails the start, and :meth:`start` kills it."""
        spare = self.spares.take(self.spec.workload) if self.spares is not None and self._STDOUT == subprocess.DEVNULL \
            else None
        if spare is not None:
            self._proc, self.started_from = spare.proc, "spare"
            os.replace(spare.stderr_path, self._path + ".stderr")
            self._driver.add_pid(self.cgroup, spare.proc.pid)
            return json.dumps(self._args()).encode() + b"\n"
        with open(self._path + ".stderr", "wb") as err:
            self._proc = subprocess.Popen(
                self._argv(), stdin=subprocess.PIPE, stdout=self._STDOUT,
                stderr=err, env=child_env(), start_new_session=True, close_fds=True)
        self.started_from = "cold"
        self._driver.add_pid(self.cgroup, self._proc.pid)
        return b""

    def set_share(self, share: float) -> None:
        self._given_mark = None  # (the interval the change falls in is not counted: cpu_given_delta)
        if not self.state.finished and self._booted:
            self._driver.set_cpu(self.cgroup, share * self.spec.host_cores)
            self._share_written(share)
        self.cpu_share = share

    def _write_share(self) -> None:
        """The task's own share, at its boot's end and after a failed write: a task left with its boot's quota
        would run at up to its host's capacity, beside the other tasks' reservations."""
        try:
            self._driver.set_cpu(self.cgroup, self.cpu_share * self.spec.host_cores)
        except CgroupError as e:
            if not self._share_unwritten:
                log.warning("task %s: its share of %.3f could not be set at its boot's end (%s); tried again at each "
                            "poll", self.spec.task_id, self.cpu_share, e)
            self._share_unwritten = True
        else:
            self._share_written(self.cpu_share)

    def _share_written(self, share: float) -> None:
        """A write of the task's share held: the retry after a failed one at its boot's end ends, and is said."""
        if self._share_unwritten:
            log.info("task %s: its share of %.3f is set", self.spec.task_id, share)
        self._share_unwritten = False

    def pause(self) -> None:
        if self.state in (State.STARTING, State.RUNNING):
            try:
                self._driver.freeze(self.cgroup)
            except CgroupError:
                # The freezer may still be FREEZING and reach FROZEN later, under a task we report running
                # (the caller is told the pause failed): undo it, so the state we report is the real one.
                with contextlib.suppress(CgroupError):
                    self._driver.thaw(self.cgroup)
                raise
            self.state = State.PAUSED
        self.fenced = ""  # (a fenced task paused by its coordinator is a paused task)

    def resume(self) -> None:
        if self.state is State.PAUSED:
            self._driver.thaw(self.cgroup)
            # Back to STARTING unless the boot phase was ended: the next poll then applies the share and
            # sends the run byte, without which the program would wait on stdin for ever.
            self.state = State.RUNNING if self._booted else State.STARTING
        self.fenced = ""

    def stop(self) -> None:
        """Thaw, kill, reap, remove the cgroup. A finished task only has its resources released (and its
        processes killed, if an earlier kill of an abort failed). Raises CgroupError if its processes outlive
        :data:`~node_agent.cgroups.KILL_TIMEOUT_S` or its cgroup cannot be removed: the caller must not
        forget the task then, and may stop it again."""
        if not self.state.finished:
            self.poll()
        self._kill()  # at once if nothing is left
        self.end_pending = False
        if not self.state.finished:
            self.state = State.STOPPED
            self.message = "stopped"
        self._release(strict=True)

    def fail(self, message: str) -> None:
        """Mark the task failed, before :meth:`abort` kills it (the agent reports it failed meanwhile)."""
        self.state, self.message, self._rss = State.FAILED, message, 0

    def abort(self, message: str) -> None:
        """Fail the task now: kill its processes and release what it holds, without polling it first
        (:meth:`stop` polls, and the agent aborts a task whose poll raises). Each step is best effort: what
        a failed kill leaves is killed again by :meth:`stop`."""
        self.fail(message)
        with contextlib.suppress(Exception):
            self._kill()
            self.end_pending = False
        with contextlib.suppress(Exception):
            self._release()

    def end(self) -> None:
        """Kill the processes of a task left ``end_pending`` (see the class docstring) and release what it holds.
        Raises CgroupError if they outlive :data:`~node_agent.cgroups.KILL_TIMEOUT_S`: what is left is then killed
        by :meth:`stop` (not by the agent's next poll: a kill that failed is not retried unasked)."""
        self.end_pending = False
        self._kill()
        self._release()

    def _ended(self, record: Callable[[], None]) -> None:
        """End a task that :meth:`poll` found finished: ``record`` sets how (state, exit code, message). Its
        processes are killed and what it holds is released around it, or, with ``defer_kills``, left to
        :meth:`end`. A kill that fails raises CgroupError, the task left as it was."""
        if self.defer_kills:
            record()
            self._rss = 0
            self.end_pending = True
            return
        self._kill()
        record()
        self._rss = 0
        self._release()

    def _release_stdin(self, message: bytes = b"") -> None:
        """Send the program its last word on stdin (the run byte, or nothing: EOF) and close it."""
        stdin = self._proc.stdin if self._proc is not None else None
        if stdin is not None and not stdin.closed:
            with contextlib.suppress(BrokenPipeError, OSError):
                if message:
                    stdin.write(message)
                    stdin.flush()
                stdin.close()

    def _kill(self) -> None:
        """Kill the task's processes: SIGKILL them all and thaw the group (a frozen v1 task ignores SIGKILL
        until thawed), again and again until the program is reaped and the group is empty. Raises CgroupError
        naming the survivors if they outlive :data:`~node_agent.cgroups.KILL_TIMEOUT_S` (a freezer that will
        not thaw, a process in uninterruptible sleep); a later call tries again. The rounds are 1 ms apart at
        first, then up to 10 ms: a killed program is usually gone within a few milliseconds (its group's CPU limit
        lifted, :func:`node_agent.cgroups._kill_and_thaw`), and a Stop waits for this."""
        deadline = time.monotonic() + cgroups.KILL_TIMEOUT_S
        pause = KILL_ROUND_FIRST_S
        while True:
            with contextlib.suppress(CgroupError):
                self._driver.kill_all(self.cgroup)
            if self._proc is not None and self._proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    self._proc.kill()
            left = self._survivors()
            if not left:
                self.kill_failed, self._rss = "", 0
                return
            if time.monotonic() > deadline:
                self.kill_failed = (f"its processes {', '.join(map(str, left))} did not die within "
                                    f"{cgroups.KILL_TIMEOUT_S:g} s of SIGKILL (frozen, or in uninterruptible sleep?)")
                if self._ps is not None:  # what they hold (the program's; its memory was counted as 0 once it ended)
                    with contextlib.suppress(psutil.Error):
                        self._rss = self._ps.memory_info().rss
                raise CgroupError(f"task {self.spec.task_id}: {self.kill_failed}")
            time.sleep(pause)
            pause = min(KILL_ROUND_MAX_S, 2 * pause)

    def _survivors(self) -> list[int]:
        """The task's processes still alive: its program (reaped here if it has died) and any left in its cgroup."""
        alive = self._proc is not None and self._proc.poll() is None
        return ([self._proc.pid] if alive else []) + [  # type: ignore[union-attr]
            p for p in self._driver.pids(self.cgroup) if self._proc is None or p != self._proc.pid]

    def _release(self, strict: bool = False) -> None:
        """Remove the cgroup and the channel files (idempotent). ``strict``: raise CgroupError if the cgroup
        cannot be removed (after the rest is released), rather than leave it behind unsaid."""
        self._release_stdin()
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        error = None
        try:
            self._driver.remove(self.cgroup)
        except CgroupError as e:
            error = e
        for suffix in (".progress", ".stderr"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._path + suffix)
        if error is not None and strict:
            raise error

    # ------------------------------------------------------------------ monitoring
    def _sample(self, now: float) -> None:
        with contextlib.suppress(CgroupError):
            self._cpu_s = max(self._cpu_s, self._driver.cpu_usage_s(self.cgroup))
        self._samples.append((now, self._cpu_s))
        while len(self._samples) > 2 and self._samples[1][0] <= now - CPU_WINDOW_S:
            self._samples.popleft()

    def poll(self) -> None:
        """Read progress, CPU and memory; detect the end of the process (DONE or FAILED)."""
        if self.state.finished or self._proc is None:
            return
        now = time.monotonic()
        if self._reader is not None:
            s = self._reader.read()
            self._units, self._ready = max(self._units, s.units), self._ready or s.ready
        if self.state is State.STARTING and self._ready:
            self.state, self._booted = State.RUNNING, True
            self._write_share()  # the boot phase is over: the task's own share (its failure: retried below)
            self._release_stdin(b"r")
        elif self._share_unwritten:
            self._write_share()
        self._sample(now)
        if self.state is State.RUNNING and self._cpu_run0 is None:
            self._cpu_run0 = self._cpu_s
        if self._ps is not None:
            with contextlib.suppress(psutil.Error):
                self._rss = self._ps.memory_info().rss
        rc = self._proc.poll()
        if rc is not None:
            self._finish(rc)
        elif self.state in (State.RUNNING, State.PAUSED) and self._cpu_fraction() >= 1.0:
            self._complete()  # PAUSED too: a Pause that came after the work was charged, before this poll

    def recheck_kill(self) -> None:
        """Of a task whose kill failed, finished or not: clear :attr:`kill_failed` if the processes that outlived
        it have died since (a frozen process takes the SIGKILL it was sent once thawed). Kills nothing. An
        unfinished one (its Stop's kill failed) is then stopped, not failed by the agent's own SIGKILL."""
        if not self.kill_failed:
            return
        try:
            if self._survivors():
                return
        except CgroupError:
            return
        self.kill_failed = ""
        self._rss = 0
        if not self.state.finished:  # a Stop's kill that had timed out took effect: stopped, not failed
            if self._proc is not None and self._proc.returncode is not None:
                self.exit_code = self._proc.returncode
            self.state, self.message = State.STOPPED, "stopped (its processes died after the Stop's kill timed out)"
            self._release()

    def _cpu_fraction(self) -> float:
        """Fraction of the task's CPU-seconds done since its boot phase (``cpu-time`` mode; else 0)."""
        if self.progress_by != "cpu-time" or self._cpu_run0 is None:
            return 0.0
        return (self._cpu_s - self._cpu_run0) / self.cpu_target if self.cpu_target > 0 else 1.0

    def _complete(self) -> None:
        """``cpu-time`` mode: the task has had its CPU-seconds; end the process and call it done."""
        if self._reader is not None:
            self._units = max(self._units, self._reader.read().units)

        def done() -> None:
            self.exit_code, self.state = 0, State.DONE

        self._ended(done)

    def _finish(self, rc: int) -> None:
        if self._reader is not None:
            self._units = max(self._units, self._reader.read().units)
        self.exit_code = rc
        self._rss = 0
        if rc == 0 and self.progress_by == "units" and self._units >= self.target:
            self.state = State.DONE
        else:
            self.state = State.FAILED
            self.message = self._failure_message(rc)
        self._release()

    def _failure_message(self, rc: int) -> str:
        if rc < 0:
            why = f"killed by {_signal_name(-rc)}"
            if -rc == signal.SIGKILL:
                kills = self._driver.oom_kills(self.cgroup)  # the cgroup is still there: read before _release
                if kills:
                    mem, extra = self.spec.memory_bytes, INTERPRETER_ALLOWANCE_BYTES
                    # (the kernel counts a kill in the victim's cgroup whether its limit or the whole
                    # machine ran out, so the limit is named, not blamed)
                    why += (f": out of memory, by the kernel's OOM killer (its cgroup's limit: {mem + extra} bytes, "
                            f"memory_bytes {mem} + {extra} for the interpreter)")
                elif kills == 0:
                    why += " from outside the agent (not the memory limit: its cgroup saw no OOM kill)"
                else:
                    why += " (memory limit exceeded, or killed from outside the agent)"
        else:
            why = {3: "never received the start signal", 4: "its agent went away"}.get(rc, f"exit code {rc}")
        try:
            with open(self._path + ".stderr", "rb") as f:
                tail = f.read()[-300:].decode(errors="replace").strip().splitlines()
        except OSError:
            tail = []
        return f"workload {self.spec.workload} failed: {why}" + (f": {tail[-1]}" if tail else "")

    def rate_delta(self) -> tuple[int, float]:
        """Units and CPU-seconds done since the previous call, counted only between two calls that both
        found the task computing (start-up, pauses and the end are left out)."""
        mark = (self._units, self._cpu_s) if self.state is State.RUNNING else None
        prev, self._rate_mark = self._rate_mark, mark
        if prev is None or mark is None:
            return 0, 0.0
        return mark[0] - prev[0], mark[1] - prev[1]

    def cpu_given_delta(self) -> tuple[float, float, float]:
        """Wall seconds, and CPU-seconds allocated (its share of its host's cores over that time) and charged, since
        the previous call, counted only between two calls that both found the task running at its own share,
        unfenced, with no share change between (start-up, pauses, fences and the end are left out); ``(0, 0, 0)``
        otherwise. For :class:`~node_agent.shortfall.CpuShortfall`, of :attr:`BUSY` workloads."""
        running = self.state is State.RUNNING and self._booted and not self._share_unwritten and not self.fenced
        mark = (*self._samples[-1], self.cpu_share) if running and self._samples else None
        prev, self._given_mark = self._given_mark, mark
        if prev is None or mark is None or mark[0] <= prev[0]:
            return 0.0, 0.0, 0.0
        return mark[0] - prev[0], prev[2] * self.spec.host_cores * (mark[0] - prev[0]), mark[1] - prev[1]

    def progress_sample(self) -> progress.Sample | None:
        """The program's latest (units, time) record, for rate measurements finer than :meth:`view`."""
        return self._reader.read() if self._reader is not None else None

    def view(self) -> TaskView:
        sp = self.spec
        if self.state is State.DONE:
            done = 1.0
        elif self.progress_by == "cpu-time":
            done = min(1.0, self._cpu_fraction())
        else:
            done = min(1.0, self._units / self.target)
        measured = 0.0
        if self._samples and not self.state.finished:  # (no sample before the start succeeded)
            (t0, c0), (t1, c1) = self._samples[0], self._samples[-1]
            measured = (c1 - c0) / (t1 - t0) / sp.host_cores if t1 > t0 else 0.0
        note = _fence_note(self)
        message = _joined(self.message, note)
        if self.kill_failed:
            message = _joined(message, f"{self.kill_failed}: they still hold its memory (a Stop kills them again)")
        return TaskView(
            task_id=sp.task_id, host=sp.host, workload=sp.workload, state=self.state,
            progress=sp.start_progress + done * (1.0 - sp.start_progress), cpu_share=self.cpu_share,
            cpu_measured=measured, cpu_seconds=self._cpu_s, memory_bytes=self._rss,
            exit_code=self.exit_code, message=message, pid=self._proc.pid if self._proc else 0,
            units_done=self._units, kill_failed=self.kill_failed, fenced=bool(note))


class ModeledTask:
    """A ``modeled`` task (see :mod:`workloads.modeled`): progress from share x elapsed time, no process.

    Same interface as :class:`Task`, so the agent's capacity checks, pause/resume and status are shared.

    ``lease_ran_out`` gives the :func:`leaseclock.now` the agent's lease ran out at, or None while it holds (or there is
    none): no progress is credited past it. A process task is frozen then, by the agent or by its fencer; a modeled
    one has nothing to freeze, and an agent that did not run for a while credited it with the whole while once it
    ran again (fault-injection review)."""

    def __init__(self, spec: TaskSpec, lease_ran_out: Callable[[], float | None] = lambda: None) -> None:
        self.spec = spec
        self._lease_ran_out = lease_ran_out
        self.cpu_share = spec.cpu_share
        self.state = State.RUNNING
        self.cgroup = ""
        self.target = 1
        self.exit_code = 0
        self.message = ""
        self.end_pending = False  # (no process to kill)
        self.kill_failed = ""  # (never set)
        self.fenced = ""  # see :func:`fence`
        self._progress = spec.start_progress
        # Credited on time.monotonic(), which a suspended host's does not advance (a process makes no progress then),
        # and cut at the lease's end, which is on the lease's clock (CLOCK_BOOTTIME: it runs on through a suspend)
        self._t = time.monotonic()
        self._t_lease = leaseclock.now()

    def start(self) -> None:
        self._t, self._t_lease = time.monotonic(), leaseclock.now()

    def _integrate(self) -> None:
        now, now_lease = time.monotonic(), leaseclock.now()
        if self.state is State.RUNNING:
            ran = now - self._t
            if (ran_out := self._lease_ran_out()) is not None:  # (at most until it ran out; a suspend before it
                ran = min(ran, max(0.0, min(now_lease, ran_out) - self._t_lease))  # counts on neither side of min)
            self._progress = modeled.advance(self._progress, self.cpu_share, self.spec.cpu_need,
                                             self.spec.work_seconds, ran)
            if self._progress >= 1.0:
                self.state = State.DONE
        self._t, self._t_lease = now, now_lease

    def set_share(self, share: float) -> None:
        self._integrate()
        self.cpu_share = share

    def pause(self) -> None:
        self._integrate()
        if self.state is State.RUNNING:
            self.state = State.PAUSED
        self.fenced = ""

    def resume(self) -> None:
        self._integrate()
        if self.state is State.PAUSED:
            self.state = State.RUNNING
        self.fenced = ""

    def stop(self) -> None:
        self._integrate()
        if not self.state.finished:
            self.state, self.message = State.STOPPED, "stopped"

    def fail(self, message: str) -> None:
        self.state, self.message = State.FAILED, message

    def abort(self, message: str) -> None:
        """Fail the task now (no process to kill)."""
        self.fail(message)

    def poll(self) -> None:
        self._integrate()

    def recheck_kill(self) -> None:
        """(No process: no kill to fail.)"""

    def rate_delta(self) -> tuple[int, float]:
        return 0, 0.0

    def progress_sample(self) -> progress.Sample | None:
        return None

    def view(self) -> TaskView:
        sp, note = self.spec, _fence_note(self)
        return TaskView(
            task_id=sp.task_id, host=sp.host, workload=sp.workload, state=self.state,
            progress=1.0 if self.state is State.DONE else self._progress, cpu_share=self.cpu_share,
            cpu_measured=0.0, cpu_seconds=0.0, memory_bytes=0, exit_code=0, pid=0, units_done=0,
            message=_joined(self.message, note), fenced=bool(note))
