"""Dynamic fractional resource scheduling policies of seed 001 Sec. III.

GREEDY (Sec. III-A) maps each new job's tasks greedily (lowest CPU load with room in memory), gives all
running jobs the max-min yield 1/max(1, Λ) and then improves the average yield; a job that does not fit
is postponed with bounded exponential backoff. It never preempts. The preemptive, migrating and
MCB8-based variants (GREEDY-PMTN, GREEDY-PMTN-MIGR, DYNMCB8*) build on the same helpers.
"""

from __future__ import annotations

from dataclasses import dataclass

from coordinator.model import Complete, JobState, Snapshot, Stimulus, Submit, Tick
from coordinator.plan import Action, Defer, Plan, SetShare, Start
from coordinator.policies.base import EPS, backoff_delay, greedy_placement, host_use, max_min_yields


def reshare(snap: Snapshot, placements: dict[str, tuple[str, ...]], new: str | None = None) -> list[Action]:
    """SetShare actions that move every running job to the max-min + average-yield fractions."""
    specs = {j: snap.jobs[j].spec for j in placements}
    cpus = max_min_yields(placements, specs, snap.hosts)
    actions: list[Action] = []
    for job, cpu in cpus.items():
        if job == new:
            continue
        if abs(snap.jobs[job].cpu - cpu) > EPS:
            actions.append(SetShare(job, cpu))
    return actions


@dataclass(frozen=True)
class Greedy:
    """GREEDY of 001 Sec. III-A: no preemption, backoff min(2^12, 2^count) s for jobs that do not fit."""

    name: str = "greedy"
    backoff_cap_exponent: int = 12

    @property
    def period(self) -> float | None:
        return None

    def decide(self, snap: Snapshot, stim: Stimulus) -> Plan:
        running = snap.running
        placements = {j.id: j.hosts for j in running}
        job_id = stim.job if isinstance(stim, (Submit, Tick)) else None
        if job_id is not None and snap.jobs[job_id].state is JobState.PENDING:
            job = snap.jobs[job_id]
            hosts = greedy_placement(job.spec, snap.hosts, host_use(snap.hosts, running))
            if hosts is None:
                delay = backoff_delay(job.attempts + 1, self.backoff_cap_exponent)
                return Plan((Defer(job_id, snap.now + delay),))
            placements[job_id] = hosts
            specs = {j: snap.jobs[j].spec for j in placements}
            cpu = max_min_yields(placements, specs, snap.hosts)[job_id]
            return Plan((*reshare(snap, placements, new=job_id), Start(job_id, hosts, cpu)))
        if isinstance(stim, Complete) or job_id is None:
            return Plan(tuple(reshare(snap, placements)))
        return Plan()
