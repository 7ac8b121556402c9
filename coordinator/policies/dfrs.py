"""Dynamic fractional resource scheduling policies of seed 001 Sec. III.

GREEDY (Sec. III-A) maps each new job's tasks greedily (lowest CPU load with room in memory), gives all
running jobs the max-min yield 1/max(1, Λ) and then improves the average yield; a job that does not fit
is postponed with bounded exponential backoff. It never preempts. The preemptive, migrating and
MCB8-based variants (GREEDY-PMTN, GREEDY-PMTN-MIGR, DYNMCB8*) build on the same helpers.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import ClassVar

from coordinator.metrics import priority
from coordinator.model import Complete, JobSpec, JobState, JobView, Snapshot, Stimulus, Submit, Tick
from coordinator.plan import Action, Defer, Pause, Plan, Resume, SetShare, Start
from coordinator.policies.base import (
    EPS,
    add_use,
    backoff_delay,
    greedy_placement,
    max_min_yields,
    memory_room,
    placement_use,
)


def reshare(snap: Snapshot, placements: dict[str, tuple[str, ...]], new: Collection[str] = ()) -> list[Action]:
    """SetShare actions that move every running job to the max-min + average-yield fractions (not the ``new``
    jobs, which the caller starts)."""
    specs = {j: snap.jobs[j].spec for j in placements}
    cpus = max_min_yields(placements, specs, snap.hosts)
    actions: list[Action] = []
    for job, cpu in cpus.items():
        if job in new:
            continue
        if abs(snap.jobs[job].cpu - cpu) > EPS:
            actions.append(SetShare(job, cpu))
    return actions


@dataclass(frozen=True)
class Greedy:
    """GREEDY of 001 Sec. III-A: no preemption, backoff min(2^12, 2^count) s for jobs that do not fit."""

    name: str = "greedy"
    backoff_cap_exponent: int = 12
    #: Never pauses nor moves a running job: the engine may show a host that takes no new task as one whose memory
    #: its placed tasks fill (``Engine._visible_hosts``).
    keeps_placements: ClassVar[bool] = True

    @property
    def period(self) -> float | None:
        return None

    def decide(self, snap: Snapshot, stim: Stimulus) -> Plan:
        running = snap.running
        placements = {j.id: j.hosts for j in running}
        job_id = stim.job if isinstance(stim, (Submit, Tick)) else None
        if job_id is not None and snap.jobs[job_id].state is JobState.PENDING:
            job = snap.jobs[job_id]
            plan = self._start_fitting(snap, placements, [job])
            if plan is None:
                return Plan((Defer(job_id, snap.now + backoff_delay(job.attempts + 1, self.backoff_cap_exponent)),))
            return plan
        if isinstance(stim, Tick) and job_id is None:
            # The live engine's word that hosts were added (``Engine.add_hosts``; the simulator sends none to
            # GREEDY, whose cluster is fixed, as 001's is): each pending job that now fits starts, the rest keep
            # their backoff (new capacity sat idle until each one's backoff ran out, up to 2^12 s).
            plan = self._start_fitting(snap, placements, snap.pending)
            return plan if plan is not None else Plan(tuple(reshare(snap, placements)))
        if isinstance(stim, Complete) or job_id is None:
            return Plan(tuple(reshare(snap, placements)))
        return Plan()

    @staticmethod
    def _start_fitting(snap: Snapshot, placements: dict[str, tuple[str, ...]], jobs: list[JobView]) -> Plan | None:
        """Start each of ``jobs`` that fits, in order, with GREEDY's mapping (lowest CPU load with room in
        memory), and give every placed job its max-min + average-yield share; None if none fits."""
        specs = {j: snap.jobs[j].spec for j in placements}
        started: list[str] = []
        use = placement_use(snap.hosts, placements, specs)  # (kept as jobs are placed: ``add_use``)
        for job in jobs:
            hosts = greedy_placement(job.spec, snap.hosts, use)
            if hosts is None:
                continue
            specs[job.id] = job.spec
            placements[job.id] = hosts
            add_use(use, hosts, job.spec)
            started.append(job.id)
        if not started:
            return None
        cpus = max_min_yields(placements, specs, snap.hosts)
        return Plan((*reshare(snap, placements, new=started), *(Start(j, placements[j], cpus[j]) for j in started)))


def _by_priority(snap: Snapshot, jobs: list[JobView]) -> list[JobView]:
    """Increasing priority (001 Sec. III-A); ties go to the later-submitted job first."""
    return sorted(
        jobs,
        key=lambda j: (priority(j.flow_time(snap.now), j.vt), -j.spec.submit_time, j.id),
    )


@dataclass(frozen=True)
class GreedyPmtn:
    """GREEDY-PMTN and GREEDY-PMTN-MIGR of 001 Sec. III-A: every new job is admitted at once.

    If the new job does not fit, running jobs are marked for pausing in increasing priority until it
    would fit; the marked ones are then reconsidered in decreasing priority and left running if the new
    job still fits without pausing them. At every event, paused jobs are resumed in decreasing priority
    wherever GREEDY's mapping finds room. With ``migrate`` (GREEDY-PMTN-MIGR) the jobs paused in this
    event are among those candidates, so they may be resumed on other hosts at once: a migration. One
    resumed on exactly its old hosts is simply left running.
    """

    name: str = "greedy-pmtn"
    migrate: bool = False

    @property
    def period(self) -> float | None:
        return None

    def decide(self, snap: Snapshot, stim: Stimulus) -> Plan:
        running = {j.id: j for j in snap.running}
        placements = {j: v.hosts for j, v in running.items()}
        paused = snap.paused
        # (the jobs a placement here can hold: every job's spec was a pass over the whole backlog at each decision)
        specs = {j.id: j.spec for j in (*running.values(), *paused)}
        victims: list[str] = []
        new: str | None = None
        job_id = stim.job if isinstance(stim, (Submit, Tick)) else None
        if job_id is not None and snap.jobs[job_id].state is JobState.PENDING:
            new = job_id
            spec = specs[new] = snap.jobs[new].spec
            hosts = greedy_placement(spec, snap.hosts, placement_use(snap.hosts, placements, specs))
            if hosts is None:
                victims = self._victims(snap, spec, placements, specs)
                for v in victims:
                    del placements[v]
                hosts = greedy_placement(spec, snap.hosts, placement_use(snap.hosts, placements, specs))
            if hosts is None:  # cannot happen for a validated job on an empty cluster; be safe anyway
                return Plan((Defer(new, snap.now + backoff_delay(snap.jobs[new].attempts + 1)),))
            placements[new] = hosts

        candidates = list(paused)
        if self.migrate:
            candidates += [running[v] for v in victims]
        resumed: list[str] = []
        # The hosts' use, kept as each job is placed (``add_use``: the same sums, in the same order, as
        # ``placement_use`` over the grown placement, which was computed again for each of up to ~1,000 paused jobs)
        use = placement_use(snap.hosts, placements, specs)
        # A candidate whose task wants more memory than any host has free fits nowhere, now or later in this
        # decision (the use only grows): such candidates, most of a long backlog on a full cluster, are neither
        # sorted nor tried (``greedy_placement``'s own test, on the same sums: the same jobs resume).
        room = memory_room(snap.hosts, use)
        for job in reversed(_by_priority(snap, [j for j in candidates if room + EPS >= j.spec.mem])):
            if room + EPS < job.spec.mem:
                continue
            hosts = greedy_placement(job.spec, snap.hosts, use)
            if hosts is not None:
                placements[job.id] = hosts
                add_use(use, hosts, job.spec)
                room = memory_room(snap.hosts, use)
                resumed.append(job.id)
        # A victim given back exactly its hosts was never really moved: keep it running.
        kept = {v for v in victims if v in resumed and sorted(placements[v]) == sorted(running[v].hosts)}
        for v in kept:
            placements[v] = running[v].hosts

        cpus = max_min_yields(placements, {j: specs[j] for j in placements}, snap.hosts)
        actions: list[Action] = [Pause(v) for v in victims if v not in kept]
        for job, cpu in cpus.items():
            if job in running and (job not in victims or job in kept) and abs(running[job].cpu - cpu) > EPS:
                actions.append(SetShare(job, cpu))
        if new is not None:
            actions.append(Start(new, placements[new], cpus[new]))
        actions += [Resume(j, placements[j], cpus[j]) for j in resumed if j not in kept]
        return Plan(tuple(actions))

    @staticmethod
    def _victims(
        snap: Snapshot, spec: JobSpec, placements: dict[str, tuple[str, ...]], specs: dict[str, JobSpec]
    ) -> list[str]:
        def fits_without(paused: list[str]) -> bool:
            rest = {j: h for j, h in placements.items() if j not in paused}
            return greedy_placement(spec, snap.hosts, placement_use(snap.hosts, rest, specs)) is not None

        marked: list[str] = []
        for job in _by_priority(snap, [snap.jobs[j] for j in placements]):
            marked.append(job.id)
            if fits_without(marked):
                break
        for job in reversed(list(marked)):  # decreasing priority: keep whoever memory allows
            trial = [m for m in marked if m != job]
            if fits_without(trial):
                marked = trial
        return marked


def greedy_pmtn_migr() -> GreedyPmtn:
    return GreedyPmtn(name="greedy-pmtn-migr", migrate=True)
