"""What a policy returns: a Plan, an ordered list of actions for the engine to apply.

Actions name jobs, not processes: the engine turns them into backend calls (one per task) and
records every transition. ``cpu`` is always the per-task CPU fraction of a host (yield x need).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar


@dataclass(frozen=True)
class Start:
    """Start a pending job with one host per task (hosts may repeat) and a per-task CPU fraction."""

    job: str
    hosts: tuple[str, ...]
    cpu: float


@dataclass(frozen=True)
class SetShare:
    """Change a running job's per-task CPU fraction."""

    job: str
    cpu: float


@dataclass(frozen=True)
class Pause:
    """Suspend a running job; it keeps its progress and releases its CPU (and, for the model, memory)."""

    job: str


@dataclass(frozen=True)
class Resume:
    """Resume a paused job on the given hosts (the same ones or others: a migration by pause/resume)."""

    job: str
    hosts: tuple[str, ...]
    cpu: float


@dataclass(frozen=True)
class Migrate:
    """Move one task of a running job from its host to ``dst`` (live: checkpoint, stop, restart)."""

    job: str
    task: int
    dst: str


@dataclass(frozen=True)
class Move:
    """Move some tasks of a running job at once: task ``i`` then runs on ``hosts[i]``; a task whose host is
    unchanged stays where it is (live: only the others are checkpointed, stopped and restarted).

    One action for what would be one ``Migrate`` per moving task: a repacking moves a job's tasks in one
    decision (seed 001 Sec. III-B), and counts as one migration of that job (001 Table II).
    """

    job: str
    hosts: tuple[str, ...]


@dataclass(frozen=True)
class Defer:
    """Reconsider a pending job at time ``until`` (GREEDY's bounded exponential backoff)."""

    job: str
    until: float


Action = Start | SetShare | Pause | Resume | Migrate | Move | Defer


@dataclass(frozen=True)
class Plan:
    actions: tuple[Action, ...] = ()

    def __iter__(self):
        return iter(self.actions)

    def __len__(self) -> int:
        return len(self.actions)

    def __bool__(self) -> bool:
        return bool(self.actions)


# ---- fast construction --------------------------------------------------------------------------------
# A frozen dataclass's __init__ sets each field through object.__setattr__; these build the very same
# objects (equal, same fields, same type) by writing the instance's __dict__, which is what a repacking
# needs: a 1,000-job DYNMCB8 simulation makes 30,000 actions. None of these classes has __slots__ or a
# __post_init__ (a unit test checks each helper against its constructor).

_new = object.__new__
_P = TypeVar("_P", Start, Resume)


def _placing(cls: type[_P], job: str, hosts: tuple[str, ...], cpu: float) -> _P:
    a = _new(cls)
    d = a.__dict__
    d["job"] = job
    d["hosts"] = hosts
    d["cpu"] = cpu
    return a


def start(job: str, hosts: tuple[str, ...], cpu: float) -> Start:
    """``Start(job, hosts, cpu)``."""
    return _placing(Start, job, hosts, cpu)


def resume(job: str, hosts: tuple[str, ...], cpu: float) -> Resume:
    """``Resume(job, hosts, cpu)``."""
    return _placing(Resume, job, hosts, cpu)


def set_share(job: str, cpu: float) -> SetShare:
    """``SetShare(job, cpu)``."""
    a = _new(SetShare)
    d = a.__dict__
    d["job"] = job
    d["cpu"] = cpu
    return a


def pause(job: str) -> Pause:
    """``Pause(job)``."""
    a = _new(Pause)
    a.__dict__["job"] = job
    return a


def move(job: str, hosts: tuple[str, ...]) -> Move:
    """``Move(job, hosts)``."""
    a = _new(Move)
    d = a.__dict__
    d["job"] = job
    d["hosts"] = hosts
    return a
