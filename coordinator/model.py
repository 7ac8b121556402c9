"""The cluster model every policy, backend and metric shares.

Units follow seed 001 Sec. II-B: a task's CPU need (alpha) and memory are fractions of one host; a
job's ``work`` is its run time in seconds when every task gets its full CPU need. All tasks of a job
have the same need and memory and receive the same CPU fraction, so a job has one *yield*
(allocated fraction / need) and progresses at that rate (001 Sec. II-B.1 and II-B.2).

Everything here is a value: a policy receives a frozen :class:`Snapshot` and cannot change it.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType

from vcemu.limits import shown

#: The 30 s bound of bounded stretch and of the priority (001 Sec. II-B.2, III-A). 001 bounds the flow time
#: ("replaced by the maximum of the turn-around time and of a threshold value"); bounded stretch here bounds the
#: run time it divides by too, as 001's reference [31] does (:mod:`coordinator.metrics` says why).
STRETCH_BOUND_S = 30.0

#: Workload programs a job may name (the node agent's registry runs exactly these).
KNOWN_WORKLOADS = ("dgemm", "arraycycle", "modeled")
#: ``submit_time`` and ``work`` must be below this (1e12 s, about 31,700 years; Unix times in seconds pass).
#: Any finite float is not enough: at 1e308 a submit time plus a work overflows to inf, and at 1e300 a
#: clock of that size no longer moves when a second is added, so the simulator never finishes. Below
#: 1e12 s the clock still resolves 0.2 ms. Job files (:mod:`workloads.jobfile`) and the gRPC API alike.
MAX_SECONDS = 1e12
#: The smallest CPU need and memory a task may have (fractions of a host), and the least work a job may have (s).
#: Any number above 0 is not enough: at 5e-324 a host's memory over a task's is infinite (the capacity check
#: raised OverflowError, answered as UNKNOWN and taking a whole batch with it), and a job's stretch over such a
#: work is infinite. No real job comes near: a byte of a 1 GiB host is 9.3e-10 of it.
MIN_FRACTION = 1e-9
MIN_WORK_S = 1e-6


class JobState(StrEnum):
    """pending -> running <-> paused -> done / failed / cancelled (DESIGN.md, the engine's state machine), and
    running or paused -> pending when a live job's host is lost (:meth:`Engine.requeue`: its vt and first start
    are kept, so a policy sees a pending job that has run)."""

    PENDING = "pending"
    RUNNING = "running"
    PAUSED = "paused"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def finished(self) -> bool:
        return self in (JobState.DONE, JobState.FAILED, JobState.CANCELLED)


class InvalidJob(ValueError):
    """A job spec that can never run; ``field`` names the offending field."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(f"{field_name}: {message}")
        self.field = field_name
        self.reason = message  # what is wrong, without the field's name


@dataclass(frozen=True)
class Host:
    """An emulated host. ``cpu`` and ``mem`` are capacities relative to a reference host (1.0)."""

    name: str
    cpu: float = 1.0
    mem: float = 1.0


@dataclass(frozen=True)
class JobSpec:
    """What a user submits. Needs are per task; ``work`` is seconds at full speed (yield 1)."""

    id: str
    submit_time: float
    tasks: int
    cpu_need: float
    mem: float
    work: float
    workload: str = "dgemm"
    #: A user's run-time estimate (SWF "requested time"), for EASY with user estimates; None if unknown.
    estimate: float | None = None
    #: The user's name for a job submitted to a live coordinator (a job file's id), beside the id the coordinator
    #: gives it; "" if none (a file's or a trace's job has its own id).
    name: str = ""

    def validate(self, hosts: tuple[Host, ...] | None = None) -> None:
        """Refuse a job that can never run, naming the field (001 Sec. II-B.1 constraints)."""
        if not isinstance(self.tasks, int) or self.tasks < 1:
            raise InvalidJob("tasks", f"must be a whole number >= 1, got {self.tasks!r}")
        if not (isinstance(self.cpu_need, (int, float)) and math.isfinite(self.cpu_need)) or not (
            0.0 < self.cpu_need <= 1.0
        ):
            raise InvalidJob("cpu_need", f"must be in (0, 1] (a fraction of one host), got {self.cpu_need!r}")
        if self.cpu_need < MIN_FRACTION:
            raise InvalidJob("cpu_need", f"must be at least {MIN_FRACTION:g} of a host, got {self.cpu_need!r}")
        if not (isinstance(self.mem, (int, float)) and math.isfinite(self.mem)) or not (0.0 < self.mem <= 1.0):
            raise InvalidJob("memory", f"must be in (0, 1] (a fraction of one host's memory), got {self.mem!r}")
        if self.mem < MIN_FRACTION:
            raise InvalidJob("memory", f"must be at least {MIN_FRACTION:g} of a host's memory, got {self.mem!r}")
        if not (isinstance(self.work, (int, float)) and math.isfinite(self.work)) or self.work <= 0.0:
            raise InvalidJob("work_seconds", f"must be a finite number > 0, got {self.work!r}")
        if self.work < MIN_WORK_S:
            raise InvalidJob("work_seconds", f"must be at least {MIN_WORK_S:g} s, got {self.work!r}")
        if self.work >= MAX_SECONDS:
            raise InvalidJob("work_seconds", f"must be below {MAX_SECONDS:g} s (about 31,700 years), got {self.work!r}")
        if not self.submit_time < MAX_SECONDS:
            raise InvalidJob("submit_time", f"must be below {MAX_SECONDS:g} s, got {self.submit_time!r}")
        if self.workload not in KNOWN_WORKLOADS:
            known = ", ".join(KNOWN_WORKLOADS)
            raise InvalidJob("workload", f"unknown workload {shown(self.workload)}; known: {known}")
        if hosts is not None:
            # Hosts counted by memory size: a cluster has few sizes, and every submission is checked against it
            # (one pass over 128 hosts per job was 4 % of the 1,000-job DFRS simulation).
            sizes = Counter([h.mem for h in hosts])
            biggest = max(sizes, default=0.0)
            if self.mem > biggest + 1e-12:
                raise InvalidJob("memory", f"{self.mem} per task is more than any host has ({biggest})")
            # (tasks per host capped at the job's: a host's count is a float first, and floor() of a huge one is slow)
            capacity = sum(n * min(math.floor(min(m / self.mem + 1e-9, 1e18)), self.tasks) for m, n in sizes.items())
            if self.tasks > capacity:
                raise InvalidJob(
                    "tasks",
                    f"{self.tasks} tasks of memory {self.mem} can never fit: the cluster holds at most {capacity}",
                )


@dataclass(frozen=True)
class JobView:
    """A job as a policy sees it at one instant.

    ``hosts`` holds the host of each task while the job is placed (running or, for a paused job, where
    it last ran). ``cpu`` is the CPU fraction each task receives; ``vt`` is the virtual time (the
    integral of the yield, 001 Sec. III-A), which equals the seconds of full-speed work done.
    ``attempts`` counts failed scheduling attempts (GREEDY's backoff, 001 Sec. III-A).
    """

    spec: JobSpec
    state: JobState
    hosts: tuple[str, ...] = ()
    cpu: float = 0.0
    vt: float = 0.0
    attempts: int = 0
    first_start: float | None = None

    @property
    def id(self) -> str:
        return self.spec.id

    @property
    def yield_(self) -> float:
        return self.cpu / self.spec.cpu_need if self.state is JobState.RUNNING else 0.0

    def flow_time(self, now: float) -> float:
        return now - self.spec.submit_time


def _submission_order(j: JobView) -> tuple[float, str]:
    return j.spec.submit_time, j.id


@dataclass(frozen=True)
class Snapshot:
    """An immutable view of the cluster handed to a policy with one stimulus."""

    now: float
    hosts: tuple[Host, ...]
    jobs: Mapping[str, JobView] = field(default_factory=lambda: MappingProxyType({}))
    #: The running jobs of ``jobs``, if the maker knows them (the engine does): :attr:`running` is then read without
    #: a pass over every job (under GREEDY with a backlog of 1,000 jobs, that pass was a third of each decision).
    known_running: tuple[JobView, ...] | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.jobs, MappingProxyType):
            object.__setattr__(self, "jobs", MappingProxyType(dict(self.jobs)))

    def in_state(self, *states: JobState) -> list[JobView]:
        """Jobs in the given states, in submission order (ties broken by id)."""
        if self.known_running is not None and states == (JobState.RUNNING,):
            return sorted(self.known_running, key=_submission_order)
        return sorted((j for j in self.jobs.values() if j.state in states), key=_submission_order)

    @property
    def running(self) -> list[JobView]:
        return self.in_state(JobState.RUNNING)

    @property
    def paused(self) -> list[JobView]:
        return self.in_state(JobState.PAUSED)

    @property
    def pending(self) -> list[JobView]:
        return self.in_state(JobState.PENDING)


# ---- stimuli: the one event a policy reacts to -------------------------------------------------------


@dataclass(frozen=True)
class Submit:
    job: str


@dataclass(frozen=True)
class Complete:
    job: str


@dataclass(frozen=True)
class Tick:
    """"Decide on the state as it is": a policy's period elapsed, or (for a policy without one) hosts were added
    (:meth:`Engine.add_hosts`); with ``job`` set, the end of that job's backoff. A host lost in a live run reaches
    the policy as a ``Submit`` of each job it held, requeued (:meth:`Engine.lose_hosts`)."""

    job: str | None = None


Stimulus = Submit | Complete | Tick
