"""Batch baselines of seed 001 Sec. IV-B: whole, exclusive nodes, one task per node, full CPU need (on hosts of
unequal size, a job takes the first free nodes whose memory holds a task, in order, and runs at the smallest CPU among
them: a slow node taken first sets the whole job's yield, as 001's "assigns them to nodes in order" would).

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
from coordinator.policies.base import EPS


def _free_nodes(snap: Snapshot) -> list[Host]:
    busy = {h for j in snap.running for h in j.hosts}
    return [h for h in snap.hosts if h.name not in busy]


def _holds(host: Host, spec: JobSpec) -> bool:
    """Whether one task of ``spec`` fits in ``host``'s memory (the engine's and GREEDY's slack)."""
    return host.mem + EPS >= spec.mem


def _take(free: list[Host], spec: JobSpec) -> tuple[tuple[str, ...], float, list[Host]] | None:
    """The first ``spec.tasks`` free nodes whose memory holds a task, the CPU each task gets there (its need, or the
    smallest of those nodes' CPU: on hosts of unequal size a task of need 1 on a half-core node runs at yield 0.5, as
    README says), and the nodes left free; None if too few fit. On 001's equal hosts: the first ``tasks`` free nodes
    at the job's full need, as before."""
    fit = [h for h in free if _holds(h, spec)][: spec.tasks]
    if len(fit) < spec.tasks:
        return None
    taken = {h.name for h in fit}
    return (tuple(h.name for h in fit), min(spec.cpu_need, min(h.cpu for h in fit)),
            [h for h in free if h.name not in taken])


def refuse_oversized(spec: JobSpec, hosts: tuple[Host, ...]) -> tuple[str, str] | None:
    """(field, reason) if a batch scheduler can never run the job: one task per whole node whose memory holds it."""
    if spec.tasks > len(hosts):
        return "tasks", f"{spec.tasks} tasks need {spec.tasks} whole nodes; the cluster has {len(hosts)}"
    holding = sum(1 for h in hosts if _holds(h, spec))
    if spec.tasks > holding:
        return "tasks", (f"{spec.tasks} tasks of memory {spec.mem:g} need {spec.tasks} whole nodes that hold one; "
                         f"the cluster has {holding}")
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
    #: Never places a task on a node where one runs: a host the engine keeps from new tasks (``Engine._visible_hosts``)
    #: is shown with its own memory while a task of ours runs there (its reservation counts the nodes that hold the
    #: head by that memory).
    exclusive_nodes: ClassVar[bool] = True

    @property
    def period(self) -> float | None:
        return None

    def decide(self, snap: Snapshot, stim: Stimulus) -> Plan:
        free = _free_nodes(snap)
        actions: list[Action] = []
        for job in snap.pending:
            took = _take(free, job.spec)
            if took is None:
                break
            hosts, cpu, free = took
            actions.append(Start(job.id, hosts, cpu))
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
    #: Never places a task on a node where one runs: a host the engine keeps from new tasks (``Engine._visible_hosts``)
    #: is shown with its own memory while a task of ours runs there (its reservation counts the nodes that hold the
    #: head by that memory).
    exclusive_nodes: ClassVar[bool] = True

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
        while queue and (took := _take(free, queue[0].spec)) is not None:  # plain FCFS while the head fits
            job = queue.pop(0)
            hosts, cpu, free = took
            actions.append(Start(job.id, hosts, cpu))
        if not queue:
            return Plan(tuple(actions))

        # Reservation for the head: the earliest time enough nodes that hold its tasks are free, given predicted ends
        # (an estimate is of the run at full need: on a node of less CPU, the run takes it over the job's yield).
        head = queue[0]
        names = {h.name: h for h in snap.hosts}

        def nodes(on: tuple[str, ...]) -> int:
            return sum(1 for h in on if _holds(names[h], head.spec))

        started = {a.job: a for a in actions if isinstance(a, Start)}
        ends = sorted(
            (max(now, (j.first_start if j.first_start is not None else now) + self._estimate(j) / j.yield_),
             nodes(j.hosts))
            for j in snap.running
        )
        ends += sorted((now + self._estimate(snap.jobs[j]) / (a.cpu / snap.jobs[j].spec.cpu_need), nodes(a.hosts))
                       for j, a in started.items())
        ends.sort()
        available, shadow = sum(1 for h in free if _holds(h, head.spec)), now
        for end, n in ends:
            if available >= head.spec.tasks:
                break
            available += n
            shadow = end
        extra = available - head.spec.tasks  # nodes free at the shadow time that the head leaves over

        for job in queue[1:]:
            took = _take(free, job.spec)
            if took is None:
                continue
            hosts, cpu, rest = took
            ends_in_time = now + self._estimate(job) / (cpu / job.spec.cpu_need) <= shadow
            n = nodes(hosts)
            if ends_in_time or n <= extra:
                if not ends_in_time:
                    extra -= n
                free = rest
                actions.append(Start(job.id, hosts, cpu))
        return Plan(tuple(actions))
