"""Batch baselines of seed 001 Sec. IV-B: whole, exclusive nodes, one task per node, full CPU need.

FCFS holds jobs in a queue and starts them strictly in submission order as nodes become free: a job
that does not fit blocks every job behind it (no backfilling; EASY is the backfilling variant).
"""

from __future__ import annotations

from dataclasses import dataclass

from coordinator.model import Snapshot, Stimulus
from coordinator.plan import Action, Plan, Start


@dataclass(frozen=True)
class FCFS:
    name: str = "fcfs"

    @property
    def period(self) -> float | None:
        return None

    def decide(self, snap: Snapshot, stim: Stimulus) -> Plan:
        busy = {h for j in snap.running for h in j.hosts}
        free = [h.name for h in snap.hosts if h.name not in busy]
        actions: list[Action] = []
        for job in snap.pending:
            if job.spec.tasks > len(free):
                break
            hosts, free = tuple(free[: job.spec.tasks]), free[job.spec.tasks :]
            actions.append(Start(job.id, hosts, job.spec.cpu_need))
        return Plan(tuple(actions))
