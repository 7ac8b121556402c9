"""Batch baselines of seed 001 Sec. IV-B: whole, exclusive nodes, one task per node, full CPU need.

FCFS holds jobs in a queue and starts them strictly in submission order as nodes become free: a job
that does not fit blocks every job behind it. EASY backfilling gives the queue's head a reservation at
the earliest time it could start under FCFS and lets later jobs start now if they do not delay it —
they end before the reservation, or use only nodes the head will not need. EASY needs run-time
estimates: perfect ones (the job's work) by default, as 001 assumes, or the users' requested times.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from coordinator.model import Host, JobSpec, JobView, Snapshot, Stimulus
from coordinator.plan import Action, Plan, Start


def _free_nodes(snap: Snapshot) -> list[str]:
    busy = {h for j in snap.running for h in j.hosts}
    return [h.name for h in snap.hosts if h.name not in busy]


def refuse_oversized(spec: JobSpec, hosts: tuple[Host, ...]) -> tuple[str, str] | None:
    """(field, reason) if a batch scheduler can never run the job: one task per whole node."""
    if spec.tasks > len(hosts):
        return "tasks", f"{spec.tasks} tasks need {spec.tasks} whole nodes; the cluster has {len(hosts)}"
    return None


@dataclass(frozen=True)
class FCFS:
    name: str = "fcfs"

    refuse = staticmethod(refuse_oversized)
    #: The plan depends on the queue and the free nodes only, whichever job a Submit names, and a second
    #: decision on its own result starts nothing new: the engine may decide once for a burst of submissions.
    decides_on_state: ClassVar[bool] = True
    #: Never pauses nor moves a running job (``Engine._visible_hosts``).
    keeps_placements: ClassVar[bool] = True

    @property
    def period(self) -> float | None:
        return None

    def decide(self, snap: Snapshot, stim: Stimulus) -> Plan:
        free = _free_nodes(snap)
        actions: list[Action] = []
        for job in snap.pending:
            if job.spec.tasks > len(free):
                break
            hosts, free = tuple(free[: job.spec.tasks]), free[job.spec.tasks :]
            actions.append(Start(job.id, hosts, job.spec.cpu_need))
        return Plan(tuple(actions))


@dataclass(frozen=True)
class Easy:
    """EASY backfilling (001 Sec. IV-B, after Lifka's EASY). ``user_estimates`` uses ``spec.estimate``."""

    name: str = "easy"
    user_estimates: bool = False

    refuse = staticmethod(refuse_oversized)
    #: The plan depends on the queue and the free nodes only, whichever job a Submit names, and a second
    #: decision on its own result starts nothing new: the engine may decide once for a burst of submissions.
    decides_on_state: ClassVar[bool] = True
    #: Never pauses nor moves a running job (``Engine._visible_hosts``).
    keeps_placements: ClassVar[bool] = True

    @property
    def period(self) -> float | None:
        return None

    def _estimate(self, job: JobView) -> float:
        if self.user_estimates and job.spec.estimate is not None:
            return job.spec.estimate
        return job.spec.work

    def decide(self, snap: Snapshot, stim: Stimulus) -> Plan:
        now = snap.now
        free = _free_nodes(snap)
        queue = snap.pending
        actions: list[Action] = []
        while queue and queue[0].spec.tasks <= len(free):  # plain FCFS while the head fits
            job = queue.pop(0)
            hosts, free = tuple(free[: job.spec.tasks]), free[job.spec.tasks :]
            actions.append(Start(job.id, hosts, job.spec.cpu_need))
        if not queue:
            return Plan(tuple(actions))

        # Reservation for the head: the earliest time enough nodes are free, given predicted ends.
        head = queue[0]
        started = {a.job: now for a in actions if isinstance(a, Start)}
        ends = sorted(
            (max(now, (j.first_start if j.first_start is not None else now) + self._estimate(j)), len(j.hosts))
            for j in snap.running
        )
        ends += sorted((now + self._estimate(snap.jobs[j]), snap.jobs[j].spec.tasks) for j in started)
        ends.sort()
        available, shadow = len(free), now
        for end, nodes in ends:
            if available >= head.spec.tasks:
                break
            available += nodes
            shadow = end
        extra = available - head.spec.tasks  # nodes free at the shadow time that the head leaves over

        for job in queue[1:]:
            n = job.spec.tasks
            if n > len(free):
                continue
            ends_in_time = now + self._estimate(job) <= shadow
            if ends_in_time or n <= extra:
                if not ends_in_time:
                    extra -= n
                hosts, free = tuple(free[:n]), free[n:]
                actions.append(Start(job.id, hosts, job.spec.cpu_need))
        return Plan(tuple(actions))
