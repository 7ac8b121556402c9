"""The backend interface: a cluster that executes actions and reports what finished.

Two implementations share it, and the engine drives both with the same code (as SimPy's Environment and
RealtimeEnvironment differ in their clock): ``sim`` advances virtual time to the next completion at once; ``live``
waits in real (optionally compressed) time while node agents run real processes. Beyond the clock, each may define
a few optional calls and flags (the live one: deferred moves, batched shares, a retry delay; the simulator: paused
progress that cannot change), listed in :class:`Backend`'s docstring, which the engine looks up and does without
where a backend has none.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from coordinator.model import JobSpec, JobState


class BackendError(RuntimeError):
    """An action the cluster could not carry out (agent refused it, agent unreachable, ...).

    ``unreachable``: the agent did not answer (deadline, connection refused, declared lost), or answered
    that the job's task is gone (it restarted). That says nothing against the job, so the engine puts it back
    in the queue with its progress instead of failing it; an agent that refused the action (bad request, no
    capacity) fails the job.

    ``hosts``: set by a backend's ``move`` cut short, each of the job's tasks' host as the failure left it (the
    tasks moved before it at their new hosts), for the engine's record of the job."""

    def __init__(self, message: str, unreachable: bool = False, backoff: bool = False) -> None:
        super().__init__(message)
        self.unreachable = unreachable
        #: (unreachable) the agent answered that it ran out of a resource of its machine: retried with a growing wait
        self.backoff = backoff
        #: (backoff) the hosts of that agent, which the engine keeps from new tasks for a while
        self.short: tuple[str, ...] = ()
        self.hosts: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Report:
    """A job the backend saw finish: DONE when all its work is done, FAILED with a message otherwise."""

    job: str
    state: JobState
    message: str = ""


class Backend(Protocol):
    """What the engine calls on a cluster: :class:`~coordinator.backends.sim.SimBackend` (virtual clock) or
    :class:`~coordinator.backends.live.LiveBackend` (agents, real clock).

    A backend may also define, and the engine looks each up with ``getattr`` (absent: the default):

    - ``paused_progress_fixed = True``: a paused job's progress cannot change, so snapshots need not read it
      (the simulator; default False: a live agent may report a paused job's progress late);
    - ``flush() -> [(job, BackendError)]``: start the tasks a plan's moves stopped, after the whole plan is
      applied (live: checkpoint and stop first, restart after, so that a host is never over-subscribed);
    - ``send_shares() -> [(job, BackendError)]``: ``set_share`` only queues the change; this sends the queued ones
      (live: one call per host), after a run of a plan's SetShare actions and before its next other action. The
      engine records a change once it is sent, and fails or requeues the jobs returned;
    - ``move(job, [(task, host), ...])``: a Move's tasks, all at once (default: ``migrate`` for each, in task
      order); a failure raises a BackendError whose ``hosts`` say where the job's tasks are (live: a job's tasks
      leave in one call per host, and :meth:`flush` starts them in one call per host);
    - ``abandon_moves()``: a plan failed part way (not a BackendError): forget the moves not yet flushed;
    - ``retry_after`` (model seconds, default 0): how long to wait before offering again a job whose Start
      could not reach its agent;
    - ``stop_unless_ended(job) -> Report | None``: a report of the job's end that :meth:`advance` made and the
      engine may not have acted on yet (live: the last poll's), which a cancel takes instead; else the job is stopped,
      atomically with that look (default: :meth:`stop`; a simulator's ``advance`` runs in the engine's own thread)."""

    def now(self) -> float: ...

    def start(self, spec: JobSpec, hosts: Sequence[str], cpu: float, progress: float = 0.0) -> None: ...

    def set_share(self, job: str, cpu: float) -> None: ...

    def pause(self, job: str) -> None: ...

    def resume(self, job: str, hosts: Sequence[str], cpu: float) -> None: ...

    def migrate(self, job: str, task: int, dst: str) -> None: ...

    def stop(self, job: str) -> None: ...

    def progress(self, job: str) -> float:
        """Fraction of the job's work done, in [0, 1]."""
        ...

    def progresses(self) -> dict[str, float]:
        """:meth:`progress` of every job the backend holds, in one call (a job absent here: 0). The engine
        reads every live job's progress at every snapshot; one call instead of one per job."""
        ...

    def advance(self, until: float) -> list[Report]:
        """Let time pass until ``until``, or less if a job finishes (or, live, if woken); return finished jobs."""
        ...

    # (The optional calls are listed in the class's docstring.)

    def wake(self) -> None:
        """Make a blocking ``advance`` return early (new work arrived). A no-op in virtual time."""
        ...
