"""A control-cycle simulator for APC runs (003 Sec. 5).

Why not the DFRS engine and its simulator backend: APC's model is different in kind. Its jobs have
completion-time goals and multi-stage profiles in absolute MHz/Mcycles/MB on nodes of different sizes,
transactional apps are long-lived sets of instances with a response-time model, decisions are made once
per control cycle ``T`` (not on every event), and placement changes cost time linear in a VM's memory
footprint. The engine's model (fractions of identical hosts, yields, event-driven policies) would have
to be bent out of shape to hold this, so the APC runs get this small simulator, which calls the same
pure policies (:mod:`coordinator.policies.apc`) the live driver calls.

Semantics, per cycle ``[t, t + T)``:

* jobs that arrived by ``t`` are in the system (a job arriving mid-cycle waits for the next cycle);
* the policy returns a placement and load distribution, held constant for the cycle;
* a job that starts, resumes or migrates makes no progress for the change's duration (boot 3.6 s;
  resume 0.0333 s/MB, migrate 0.0132 s/MB of its stage's memory), and a job placed on a node that a
  job is being suspended from also waits for that suspension (0.0353 s/MB) to free the memory (the same
  :func:`~coordinator.policies.apc.change_delays` APC forecasts with); costs can be switched off, as in
  Experiment Two ("we did not consider the cost of the various types of placement changes");
* a job completes at the exact instant its remaining work is done (stages change speed caps in-cycle);
* a static partition (Experiment Three's baselines) gives the transactional app a fixed set of nodes and
  all their CPU (up to saturation), and runs the batch policy on the other nodes.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

import numpy as np

from coordinator.policies.apc import (
    ApcState,
    Costs,
    Decision,
    Node,
    apc_place,
    change_delays,
    change_kind,
    edf_place,
    fcfs_place,
)
from coordinator.policies.apc_rpf import Hypothetical, Job, TransactionalApp

POLICIES = ("apc", "edf", "edf-repack", "fcfs")


@dataclass(frozen=True)
class SimConfig:
    """One simulated run."""

    nodes: tuple[Node, ...]
    policy: str = "apc"
    T: float = 600.0
    costs: Costs = field(default_factory=Costs)
    apps: tuple[TransactionalApp, ...] = ()
    static_app_nodes: tuple[str, ...] = ()  # non-empty: static partition, apps own these nodes
    stop_after_completed: int | None = None
    horizon: float | None = None
    tolerance: float = 0.01

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"policy must be one of {POLICIES}, got {self.policy!r}")
        if self.T <= 0:
            raise ValueError(f"T must be > 0, got {self.T}")
        if self.stop_after_completed is None and self.horizon is None:
            raise ValueError("set stop_after_completed or horizon (or both)")
        unknown = set(self.static_app_nodes) - {n.id for n in self.nodes}
        if unknown:
            raise ValueError(f"static_app_nodes: unknown nodes {sorted(unknown)}")


@dataclass
class SimResult:
    """Per-cycle records, per-job outcomes and change counts of a run."""

    cycles: list[dict[str, float]] = field(default_factory=list)
    jobs: list[dict[str, float | str]] = field(default_factory=list)
    changes: Counter[str] = field(default_factory=Counter)

    @property
    def met_fraction(self) -> float:
        return float(np.mean([j["met"] for j in self.jobs])) if self.jobs else math.nan

    @property
    def job_changes(self) -> int:
        return self.changes["suspend"] + self.changes["resume"] + self.changes["migrate"]


def _hypothetical_mean(jobs: Iterable[Job], now: float, omega_g: float) -> tuple[float, float]:
    """(mean, min) hypothetical RP of ``jobs`` at ``now`` given aggregate allocation ``omega_g``; values
    below -10 are clipped to -10 for the mean (a starved queue would otherwise dominate a plot)."""
    h = Hypothetical.build(list(jobs), now)
    if not h.ids:
        return math.nan, math.nan
    u = h.at(omega_g)[1]
    return float(np.mean(np.maximum(u, -10.0))), float(np.min(u))


def simulate(cfg: SimConfig, arrivals: Iterable[Job], progress: Callable[[int, float], None] | None = None
             ) -> SimResult:
    """Run ``arrivals`` (sorted by submission time) through ``cfg``'s policy, cycle by cycle."""
    pending = sorted(arrivals, key=lambda j: (j.submit, j.id))
    goal_factor = {j.id: j.relative_goal / j.min_remaining_time() for j in pending}
    min_exec = {j.id: j.min_remaining_time() for j in pending}
    res = SimResult()
    static = set(cfg.static_app_nodes)
    batch_nodes = tuple(n for n in cfg.nodes if n.id not in static)
    app_cpu_static = sum(n.cpu for n in cfg.nodes if n.id in static)
    jobs: dict[str, Job] = {}
    placement: dict[str, str] = {}
    suspended: set[str] = set()
    apps = {a.id: a for a in cfg.apps}
    t, i = 0.0, 0
    completed = 0
    while True:
        while i < len(pending) and pending[i].submit <= t + 1e-9:
            jobs[pending[i].id] = pending[i]
            i += 1
        if cfg.horizon is not None and t >= cfg.horizon:
            break
        if cfg.stop_after_completed is not None and completed >= cfg.stop_after_completed:
            break
        if not jobs and i >= len(pending) and cfg.horizon is None:
            break
        state = ApcState(t, batch_nodes, tuple(jobs.values()), dict(placement), frozenset(suspended),
                         tuple(apps.values()) if not static else ())
        d: Decision
        if cfg.policy == "apc":
            d = apc_place(state, cfg.T, cfg.costs, cfg.tolerance)
        elif cfg.policy in ("edf", "edf-repack"):
            d = edf_place(state, sticky=cfg.policy == "edf")
        else:
            d = fcfs_place(state)
        if static:
            app_cpu = {a: min(apps[a].model.saturation, app_cpu_static) for a in apps}
        else:
            app_cpu = {a: d.app_cpu(a) for a in apps}
            apps = {a: _with_nodes(apps[a], d.app_nodes.get(a, frozenset())) for a in apps}
        batch_cpu = d.batch_cpu()
        hyp_mean, hyp_min = _hypothetical_mean(jobs.values(), t, batch_cpu)
        cycle_changes: Counter[str] = Counter()
        for jid in jobs:
            kind = change_kind(jid, state, d.placement.get(jid))
            if kind:
                cycle_changes[kind] += 1
        res.changes.update(cycle_changes)
        done_now: list[str] = []
        delays = change_delays(state, d.placement, cfg.costs)
        for jid in d.placement:
            j = jobs[jid]
            delay = delays[jid]
            nj, off = j.advanced(d.job_speed[jid], max(0.0, cfg.T - delay))
            jobs[jid] = nj
            if off is not None:
                end = t + delay + off
                done_now.append(jid)
                res.jobs.append({"id": jid, "submit": j.submit, "goal": j.goal, "completion": end,
                                 "rp": j.rp(end), "distance": j.goal - end, "met": float(end <= j.goal + 1e-6),
                                 "goal_factor": round(goal_factor[jid], 3), "min_exec": round(min_exec[jid], 1)})
        suspended |= {jid for jid in placement if jid not in d.placement}
        suspended -= set(d.placement)
        placement = {jid: nid for jid, nid in d.placement.items() if jid not in done_now}
        for jid in done_now:
            del jobs[jid]
            suspended.discard(jid)
        completed += len(done_now)
        row: dict[str, float] = {
            "time": t, "jobs_in_system": len(jobs) + len(done_now), "running": len(d.placement),
            "queued": len(jobs) + len(done_now) - len(d.placement), "completed": completed,
            "batch_cpu_mhz": batch_cpu, "hyp_rp_mean": hyp_mean, "hyp_rp_min": hyp_min,
            "starts": cycle_changes["start"], "suspends": cycle_changes["suspend"],
            "resumes": cycle_changes["resume"], "migrations": cycle_changes["migrate"]}
        for a, cpu in app_cpu.items():
            row[f"{a}_cpu_mhz"] = cpu
            row[f"{a}_rp"] = apps[a].rp(cpu)
        res.cycles.append(row)
        if progress is not None:
            progress(completed, t)
        t += cfg.T
    return res


def _with_nodes(app: TransactionalApp, nodes: frozenset[str]) -> TransactionalApp:
    return replace(app, nodes=frozenset(nodes))
