"""The ``transactional`` workload as an agent task: a request server in the task's cgroup, measured from outside.

Seed 003 Sec. 3.3 manages transactional applications by their response time against a goal ``tau``
(relative performance ``u = (tau - t) / tau``), measured by the request router in front of the
application (Sec. 3.1). Here:

* **The server** (``python -m workloads.transactional agent-serve``) is the task's process, started with
  the same two-step protocol as dgemm (:class:`node_agent.runner.Task`): it joins the task's cgroup before
  it does anything, has the whole host during its boot phase, and serves its first request only after
  the task's share is in force. Its share is the cgroup's CFS quota (SetShare), Pause is the freezer.
  Each request is a fixed CPU-bound loop, so response time follows the share.
* **The load generator** (``python -m workloads.transactional generate``) plays the request router: the
  agent starts it once the server is up, as a separate process *outside* the task's cgroup (in the
  agent's own), so that the share limits the server only. Inside the quota the client would be
  throttled with the server: its arrivals would be late and its time-stamps taken late, and a cut share
  would show partly as a slower client rather than as the server's response time. It is a process, not a
  thread of the agent, so that the agent's gRPC and monitor threads do not hold the GIL while it takes
  time-stamps. Its CPU is not charged to any emulated host (it is the emulated cluster's clients).
  Arrivals are Poisson at ``rate_rps`` (a task parameter; SetLoad changes it); each client connection
  carries one request at a time, and an arrival waits for a free connection (that wait counts).
* **Measurements**: the generator publishes, every 0.2 s, the mean and 95th percentile response time
  and the throughput of the requests completed in the last ``window_seconds``; Status reports them
  (``TaskStatus.service``) with their age.
* **Pause** (Pause, and the agent's own fencing, :func:`node_agent.runner.fence`): the server's cgroup is
  frozen and the generator is paused with it, by a ``pause`` line on its stdin (``resume`` after the thaw).
  A paused generator makes no arrivals, sends no requests and idles (no CPU), and its clock stops: the
  pause is cut out of its measurements (:class:`workloads.transactional.LoadGenerator`). Its arrivals
  resume on their schedule in running time, without a catch-up burst; a request held across the pause is
  charged its running time only; the window is the last ``window_seconds`` of *running* time, so right
  after a resume the figures carry on from those before the pause. While paused the figures stand still
  (the generator still publishes them, so their age stays fresh: it is alive, and nothing arrives).
  Told on stdin, rather than stopped with SIGSTOP or frozen in a cgroup of its own, because the generator
  must know where the pause lies to cut it out (a stopped process cannot see it, and a note sent after
  SIGCONT races with the arrivals it would have to hold back); because a paused generator must still read
  SetLoad's ``rate`` lines (a stopped one would leave them in the pipe until it filled, and the agent's
  write then blocked under its lock); and because it must still see its agent die (a stopped process
  outlives its agent for good: it is in no task's cgroup, so nothing would clean it up). The price: the
  pause takes effect when the generator reads the line, a few milliseconds after the freeze. Stop kills it
  with SIGKILL whether paused or not.

Progress and checkpoint: the task has no work to finish. It stays RUNNING until Stop (or FAILED if the
server dies); ``work_seconds`` and ``start_progress`` are ignored, progress is 0 and Checkpoint returns 0.
A migration is therefore a fresh start of a stateless server elsewhere: nothing is carried over, and
the requests in flight at the old instance are lost with it. The progress channel counts requests
answered (``units_done``), for operators.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import subprocess
import time
from dataclasses import dataclass, replace

from node_agent.cgroups import CgroupDriver
from node_agent.runner import State, Task, TaskSpec, TaskView
from workloads.registry import child_env, command

NAME = "transactional"
#: How long Stop waits for the generator after SIGKILL.
_REAP_S = 5.0


@dataclass(frozen=True)
class TransactionalParams:
    """A transactional task's parameters (``vcemu.v1.TransactionalSpec``); see :meth:`checked`."""

    rate_rps: float = 20.0
    work: int = 20_000
    window_seconds: float = 2.0
    seed: int = 0

    def checked(self) -> TransactionalParams:
        """Self, or ValueError naming the bad field."""
        if not (math.isfinite(self.rate_rps) and self.rate_rps > 0):
            raise ValueError(f"transactional.rate_rps: must be > 0 requests/s, got {self.rate_rps}")
        if self.work < 1:
            raise ValueError(f"transactional.work: must be >= 1 loop iteration per request, got {self.work}")
        if not (math.isfinite(self.window_seconds) and 0 < self.window_seconds <= 60):
            raise ValueError(f"transactional.window_seconds: must be in (0, 60], got {self.window_seconds}")
        return self


@dataclass(frozen=True)
class ServiceView:
    """The generator's latest figures (see ``vcemu.v1.ServiceStats``)."""

    window_seconds: float
    response_time_mean_s: float
    response_time_p95_s: float
    throughput_rps: float
    rate_rps: float
    completed: int
    dropped: int
    outstanding: int
    age_seconds: float


class TransactionalTask(Task):
    """A :class:`Task` whose program is the request server, plus the load generator process."""

    _STDOUT = subprocess.PIPE  # the server prints its port
    BUSY = False  # (it waits for requests: its charged CPU says nothing of what the machine withholds)

    def __init__(self, spec: TaskSpec, driver: CgroupDriver, workdir: str, params: TransactionalParams) -> None:
        super().__init__(spec, driver, 1.0, workdir, "cpu-time")
        self.params = params.checked()
        self.rate = params.rate_rps
        self.port = 0
        self._gen: subprocess.Popen[str] | None = None
        self._stats_path = self._path + ".stats"

    def _argv(self) -> list[str]:
        return command(NAME, "agent-serve", "--work", str(self.params.work), "--progress", self._path + ".progress",
                       "--memory-bytes", str(self.spec.memory_bytes), "--wait-go")

    def _cpu_fraction(self) -> float:
        return 0.0  # no work to finish: never DONE by CPU time

    def rate_delta(self) -> tuple[int, float]:
        """Nothing: requests are not calibrated units, and must not enter the agent's rate estimates."""
        return 0, 0.0

    def poll(self) -> None:
        super().poll()
        if self.state in (State.RUNNING, State.PAUSED) and self._gen is None and self._ready:
            self._start_generator()

    def _start_generator(self) -> None:
        """Read the server's port (printed before it reported ready) and start the generator."""
        assert self._proc is not None and self._proc.stdout is not None
        line = self._proc.stdout.readline()
        try:
            self.port = int(json.loads(line)["port"])
        except (ValueError, KeyError, TypeError):
            def failed() -> None:
                self.state, self.exit_code = State.FAILED, -1
                self.message = f"workload {NAME} failed: the server printed {line[:100]!r} instead of its port"

            self._ended(failed)
            return
        p = self.params
        paused = ["--paused"] if self.state is State.PAUSED else []  # (a Pause came before the server was up)
        self._gen = subprocess.Popen(
            command(NAME, "generate", "--port", str(self.port),
                    "--rate", repr(self.rate), "--window", repr(p.window_seconds), "--seed", str(p.seed),
                    "--stats", self._stats_path, *paused),
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True,
            env=child_env(), start_new_session=True, close_fds=True)

    def set_rate(self, rate: float) -> None:
        """The generator's new arrival rate (taken at its next arrival; a paused generator takes it at once
        and arrives at it once resumed)."""
        self.rate = rate
        self._tell(f"rate {rate!r}")

    def pause(self) -> None:
        """Freeze the server, then pause the generator (see the module docstring). A freeze that fails raises
        with the generator left running, as the server is."""
        super().pause()
        if self.state is State.PAUSED:
            self._tell("pause")

    def resume(self) -> None:
        """Thaw the server, then resume the generator, so that its first requests find the server running."""
        super().resume()
        if self.state in (State.RUNNING, State.STARTING):
            self._tell("resume")

    def _tell(self, line: str) -> None:
        """Send the generator one command line. Does not block: the generator reads its stdin at all times,
        paused or not. A generator that has died is left to :meth:`poll` and Stop."""
        if self._gen is not None and self._gen.stdin is not None and not self.state.finished:
            with contextlib.suppress(BrokenPipeError, OSError):
                self._gen.stdin.write(line + "\n")
                self._gen.stdin.flush()

    def _release(self, strict: bool = False) -> None:
        gen, self._gen = self._gen, None
        if gen is not None:
            with contextlib.suppress(ProcessLookupError):
                gen.kill()  # no state to flush: its figures are in the stats file
            with contextlib.suppress(subprocess.TimeoutExpired):
                gen.wait(timeout=_REAP_S)
            if gen.stdin is not None:
                with contextlib.suppress(OSError):
                    gen.stdin.close()
        if self._proc is not None and self._proc.stdout is not None:
            self._proc.stdout.close()
        for path in (self._stats_path, self._stats_path + ".tmp"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        super()._release(strict)

    def service(self) -> ServiceView | None:
        """The generator's latest figures, or None before its first publication or after the end."""
        if self._gen is None:
            return None
        try:
            with open(self._stats_path) as f:
                d = json.load(f)
        except (OSError, ValueError):
            return None
        return ServiceView(
            window_seconds=float(d["window_seconds"]), response_time_mean_s=float(d["mean_s"]),
            response_time_p95_s=float(d["p95_s"]), throughput_rps=float(d["throughput_rps"]),
            rate_rps=float(d["rate_rps"]), completed=int(d["completed"]), dropped=int(d["dropped"]),
            outstanding=int(d["outstanding"]), age_seconds=max(0.0, time.monotonic() - float(d["t"])))

    def view(self) -> TaskView:
        return replace(super().view(), progress=0.0, service=self.service())
