"""What a policy returns: a Plan, an ordered list of actions for the engine to apply.

Actions name jobs, not processes: the engine turns them into backend calls (one per task) and
records every transition. ``cpu`` is always the per-task CPU fraction of a host (yield x need).
"""

from __future__ import annotations

from dataclasses import dataclass

from coordinator.frozen import builder


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
# The same objects as the constructors make, without a frozen dataclass's per-field setattr (see
# coordinator.frozen): a 1,000-job DYNMCB8 simulation makes 30,000 actions.

start = builder(Start)
resume = builder(Resume)
set_share = builder(SetShare)
pause = builder(Pause)
move = builder(Move)
