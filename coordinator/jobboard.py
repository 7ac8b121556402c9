"""The jobs as the coordinator's read-only calls show them, kept apart from the engine's lock.

The engine loop holds ``Engine.lock`` for a whole turn: a decision and its plan, whose every action is an agent
RPC and, with ``--state``, a committed transaction. A burst of share changes held it for 17.7 s (26,540 SetShares
for 4,097 jobs; scale review), and ``vcemu status``, ``vcemu jobs`` and the Prometheus scrape, which took the same
lock, waited that long or ran out of time. A :class:`JobBoard` is a copy of every job's record that the engine
updates, under its lock, at each change a reader shows (``Engine.job_listeners``: a transition, a pending job's
note, a restore, a move), and that readers take under a lock of its own, held for a dictionary update or a copy,
never for an RPC. Like a database replica that applies each committed change: a reader sees every job as of its
last change, each job whole (a row is made from a record that has taken the whole change), and never waits for the
engine's turn. A change reaches the board after the transition listeners have run (with ``--state``, after its
commit), so a reader never sees a state that a crash could take back.

What a row does not hold is a running job's progress, which changes between transitions: readers take it from the
backend (``LiveBackend.progress_seen``), as last reported by the agents.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from coordinator.model import Host, JobSpec, JobState

if TYPE_CHECKING:
    from coordinator.engine import Engine, JobRecord

__all__ = ["JobBoard", "JobRow"]


@dataclass(frozen=True, slots=True)
class JobRow:
    """One job as of its last change: the fields of ``JobRecord`` that a reader shows."""

    spec: JobSpec
    state: JobState
    hosts: tuple[str, ...]
    cpu: float
    vt: float
    first_start: float | None
    end: float | None
    message: str

    @classmethod
    def of(cls, rec: JobRecord | JobRow) -> JobRow:
        return cls(rec.spec, rec.state, rec.hosts, rec.cpu, rec.vt, rec.first_start, rec.end, rec.message)


class JobBoard:
    """Every job's :class:`JobRow`, in submission order (jobs are never removed), with the count per state and the
    running jobs kept as rows change. Thread-safe; no method waits for anything but the board's own lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rows: dict[str, JobRow] = {}
        self._running: dict[str, JobRow] = {}
        self._counts: dict[JobState, int] = dict.fromkeys(JobState, 0)

    @classmethod
    def of(cls, engine: Engine) -> JobBoard:
        """A board of ``engine``'s jobs, kept up to date by it from now on."""
        board = cls()
        with engine.lock:
            board.put_all(engine.jobs.values())
            engine.job_listeners.append(board.put)
        return board

    def put(self, rec: JobRecord | JobRow) -> None:
        """Take the job's record as it is now (a new job goes last)."""
        row = JobRow.of(rec)
        job = row.spec.id
        with self._lock:
            old = self._rows.get(job)
            self._rows[job] = row
            if old is not None:
                self._counts[old.state] -= 1
            self._counts[row.state] += 1
            if row.state is JobState.RUNNING:
                self._running[job] = row
            elif old is not None and old.state is JobState.RUNNING:
                del self._running[job]

    def put_all(self, recs: Iterable[JobRecord | JobRow]) -> None:
        for rec in recs:
            self.put(rec)

    def get(self, job: str) -> JobRow | None:
        return self._rows.get(job)  # (one dictionary read: atomic)

    def __len__(self) -> int:
        return len(self._rows)

    def unfinished(self) -> int:
        """The number of jobs not finished: pending, running or paused."""
        with self._lock:
            return sum(n for state, n in self._counts.items() if not state.finished)

    def counts_and_running(self) -> tuple[dict[JobState, int], list[JobRow]]:
        """The number of jobs in each state (every state present) and the running jobs (in the order they last
        changed), as of one moment: ClusterStatus and the scrape show both."""
        with self._lock:
            return dict(self._counts), list(self._running.values())

    def page(self, start: int, after: str, limit: int | None,
             state: JobState | None = None) -> tuple[list[JobRow], int, str, bool]:
        """A page of ListJobs: up to ``limit`` rows (``state``'s only, if given) of the jobs scanned from position
        ``start`` on, the position after and the id of the last job scanned (``start`` and ``after`` when none was),
        and whether jobs remain past it. ``after`` is the id of the job at ``start - 1`` (none for 0); ValueError if
        it is not (the page token of another job list)."""
        with self._lock:
            if not 0 <= start <= len(self._rows):
                raise ValueError(f"no position {start} among {len(self._rows)} jobs")
            rest = itertools.islice(self._rows.items(), max(start - 1, 0), None)
            if start and next(rest)[0] != after:
                raise ValueError(f"the job at position {start - 1} is not {after!r}")
            rows: list[JobRow] = []
            end, last = start, after
            for job, row in rest:
                if limit is not None and len(rows) == limit:
                    break
                end, last = end + 1, job
                if state is None or row.state is state:
                    rows.append(row)
            return rows, end, last, end < len(self._rows)


def hosts_used(running: Iterable[JobRow], hosts: Iterable[Host]) -> dict[str, tuple[float, float]]:
    """Each host's CPU and memory allocated to the running jobs, as fractions of its capacity (a job's cpu and mem
    are in units of the reference host, as Host.cpu and Host.mem are): what ClusterStatus and the metrics show."""
    cap = {h.name: h for h in hosts}
    cpu = dict.fromkeys(cap, 0.0)
    mem = dict.fromkeys(cap, 0.0)
    for row in running:
        for h in row.hosts:
            if h in cap:  # (a host lost since the row was made: its jobs are being requeued)
                cpu[h] += row.cpu
                mem[h] += row.spec.mem
    return {name: (cpu[name] / h.cpu, mem[name] / h.mem) for name, h in cap.items()}
