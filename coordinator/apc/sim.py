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
  all their CPU (up to saturation), and runs the batch policy on the other nodes;
* a run without a horizon that can no longer change (:data:`IDLE_CYCLES` cycles in a row in which the policy
  placed no job although jobs were queued and none was still to arrive) raises :class:`SimulationStuck`: it would
  never reach its completions.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

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
#: How many control cycles in a row a run without a horizon may place no job while jobs are queued and none is still
#: to arrive before :func:`simulate` gives up on it (:class:`SimulationStuck`). Then nothing can change any more: the
#: baselines decide from the queue alone, which no longer changes, and on an idle cluster APC places every job
#: whose relative performance it can tell from leaving it queued, which time only lowers. One such cycle would prove
#: it for the policies here; ten leave room. APC placed nothing at ``--cycle 1e8`` (every job's relative
#: performance below the -1000 it compares down to) and the run never ended.
IDLE_CYCLES = 10


class SimulationStuck(RuntimeError):
    """A run that would never end: the policy places no job and nothing is left that could change that."""


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


@dataclass
class SimState:
    """Everything :func:`simulate` carries from one control cycle to the next, at the start of a cycle.

    The simulator draws no random numbers and its config and arrivals are given, so a run continued from a
    state saved between two cycles (:meth:`to_json`, :meth:`from_json`) makes the same decisions and the same
    records, in the same order, as the run that saved it: that is what lets ``vcemu apc`` resume a killed
    simulation where it checkpointed it instead of from the start."""

    t: float = 0.0
    arrived: int = 0  # how many of the arrivals (sorted by submission) have entered the system
    completed: int = 0
    jobs: dict[str, Job] = field(default_factory=dict)  # those in the system, in order of arrival
    placement: dict[str, str] = field(default_factory=dict)
    suspended: set[str] = field(default_factory=set)
    apps: dict[str, TransactionalApp] = field(default_factory=dict)
    result: SimResult = field(default_factory=SimResult)

    def to_json(self) -> dict[str, Any]:
        """The state as JSON values. A job is saved as its id and progress and an app as the nodes of its
        instances: :func:`simulate` changes nothing else of them, and the rest comes back from the run's
        arrivals and config. Orders are kept (lists of pairs, not sets) where the policies see them."""
        return {"t": self.t, "arrived": self.arrived, "completed": self.completed,
                "jobs": [[jid, j.done] for jid, j in self.jobs.items()],
                "placement": [[jid, nid] for jid, nid in self.placement.items()],
                "suspended": sorted(self.suspended),
                "apps": [[aid, sorted(a.nodes)] for aid, a in self.apps.items()],
                "cycles": self.result.cycles, "records": self.result.jobs, "changes": dict(self.result.changes)}

    @classmethod
    def from_json(cls, data: dict[str, Any], cfg: SimConfig, arrivals: Iterable[Job]) -> SimState:
        """The state :meth:`to_json` saved during a run of ``cfg`` on ``arrivals``. Raises ValueError (or
        KeyError, TypeError) if ``data`` does not fit them, or is not a state :func:`simulate` can reach: a state
        that parses but was edited or damaged would otherwise crash the simulation, hang it (a NaN time never
        reaches the horizon) or, worse, make it record wrong results (jobs arriving twice, say)."""
        pending = sorted(arrivals, key=lambda j: (j.submit, j.id))
        order = {j.id: i for i, j in enumerate(pending)}
        by_id = {j.id: j for j in pending}
        app_of = {a.id: a for a in cfg.apps}
        node_ids = {n.id for n in cfg.nodes}
        if not isinstance(data, dict):
            raise TypeError("the state is not a JSON object")
        jobs = {jid: replace(by_id[jid], done=float(done)) for jid, done in data["jobs"]}  # KeyError: other arrivals
        t, arrived, completed = data["t"], data["arrived"], data["completed"]
        cycles, records, changes = data["cycles"], data["records"], data["changes"]
        if not (_is_int(arrived) and 0 <= arrived <= len(pending) and _is_int(completed)):
            raise ValueError("the state is not of this run's arrivals")
        if not (isinstance(cycles, list) and all(isinstance(c, dict) for c in cycles) and isinstance(records, list)
                and all(isinstance(r, dict) for r in records) and len(records) == completed):
            raise ValueError("the state's records are not a list of one per cycle and one per completed job")
        if not (isinstance(t, (int, float)) and math.isclose(t, len(cycles) * cfg.T, rel_tol=1e-9, abs_tol=1e-6)):
            raise ValueError(f"the state's time {t!r} is not its {len(cycles)} cycles of {cfg.T:g} s")
        if not (isinstance(changes, dict) and all(isinstance(k, str) and _is_int(v) and v >= 0
                                                  for k, v in changes.items())):
            raise ValueError("the state's change counts are not counts")
        if (len(jobs) != len(data["jobs"]) or any(order[jid] >= arrived for jid in jobs)
                or [order[jid] for jid in jobs] != sorted(order[jid] for jid in jobs)
                or completed != arrived - len(jobs)
                or not all(math.isfinite(j.done) and j.done >= 0 for j in jobs.values())):
            raise ValueError("the state's jobs are not those of its arrivals that have not completed, in order")
        placement = {jid: nid for jid, nid in data["placement"]}
        suspended = set(data["suspended"])
        if not (set(placement) <= set(jobs) and set(placement.values()) <= node_ids and suspended <= set(jobs)
                and not suspended & set(placement)):
            raise ValueError("the state places or suspends jobs it does not hold, or on nodes the run does not have")
        apps = {aid: _with_nodes(app_of[aid], frozenset(nodes)) for aid, nodes in data["apps"]}
        if set(apps) != set(app_of) or not all(a.nodes <= node_ids for a in apps.values()):
            raise ValueError("the state is not of this run's apps")
        return cls(float(t), arrived, completed, jobs, placement, suspended, apps,
                   SimResult(list(cycles), list(records), Counter(changes)))


def horizon_cycles(horizon: float, T: float) -> int:
    """How many control cycles :func:`simulate` runs to ``horizon``: one starting at each multiple ``k * T`` below
    it (the last may end after the horizon), so 34 for 20,000 s of 600 s cycles, not 20,000 // 600 = 33."""
    n = max(0, math.ceil(horizon / T))  # (the division may round either way: k * T is what the simulator compares)
    while n > 0 and (n - 1) * T >= horizon:
        n -= 1
    while n * T < horizon:
        n += 1
    return n


def _is_int(x: Any) -> bool:
    """Whether ``x`` is a JSON integer (bool is an int to Python, not to JSON)."""
    return isinstance(x, int) and not isinstance(x, bool)


def simulate(cfg: SimConfig, arrivals: Iterable[Job], progress: Callable[[int, float], None] | None = None,
             state: SimState | None = None, checkpoint: Callable[[SimState], None] | None = None) -> SimResult:
    """Run ``arrivals`` (sorted by submission time) through ``cfg``'s policy, cycle by cycle: from the start,
    or from ``state`` (saved by an earlier run of the same ``cfg`` and ``arrivals``). ``checkpoint`` is called
    after each cycle with the state the next one starts from (the live object: save it before returning).

    Raises :class:`SimulationStuck` if a run without a horizon can no longer change (:data:`IDLE_CYCLES`). The
    count of such cycles is not part of the state: a continued run counts them afresh, and so gives up at most
    that many cycles later than an uninterrupted one (a stuck run records nothing)."""
    pending = sorted(arrivals, key=lambda j: (j.submit, j.id))
    goal_factor = {j.id: j.relative_goal / j.min_remaining_time() for j in pending}
    min_exec = {j.id: j.min_remaining_time() for j in pending}
    static = set(cfg.static_app_nodes)
    batch_nodes = tuple(n for n in cfg.nodes if n.id not in static)
    app_cpu_static = sum(n.cpu for n in cfg.nodes if n.id in static)
    s = state or SimState(apps={a.id: a for a in cfg.apps})
    res = s.result
    idle = 0  # cycles in a row that placed no job with jobs queued and none to arrive (IDLE_CYCLES)
    while True:
        while s.arrived < len(pending) and pending[s.arrived].submit <= s.t + 1e-9:
            s.jobs[pending[s.arrived].id] = pending[s.arrived]
            s.arrived += 1
        t, jobs, apps = s.t, s.jobs, s.apps
        if cfg.horizon is not None and t >= cfg.horizon:
            break
        if cfg.stop_after_completed is not None and s.completed >= cfg.stop_after_completed:
            break
        if not jobs and s.arrived >= len(pending) and cfg.horizon is None:
            break
        state_now = ApcState(t, batch_nodes, tuple(jobs.values()), dict(s.placement), frozenset(s.suspended),
                             tuple(apps.values()) if not static else ())
        d: Decision
        if cfg.policy == "apc":
            d = apc_place(state_now, cfg.T, cfg.costs, cfg.tolerance)
        elif cfg.policy in ("edf", "edf-repack"):
            d = edf_place(state_now, sticky=cfg.policy == "edf")
        else:
            d = fcfs_place(state_now)
        idle = idle + 1 if cfg.horizon is None and jobs and not d.placement and s.arrived >= len(pending) else 0
        if idle >= IDLE_CYCLES:  # (a run with a horizon ends there, and its idle cycles are results up to it)
            raise SimulationStuck(
                f"stuck at simulated time {t:g} s: {cfg.policy} placed none of the {len(jobs)} queued jobs for "
                f"{idle} control cycles in a row on an idle cluster, with none still to arrive, so nothing can change "
                f"and the run would never reach its {cfg.stop_after_completed} completions")
        if static:
            app_cpu = {a: min(apps[a].model.saturation, app_cpu_static) for a in apps}
        else:
            app_cpu = {a: d.app_cpu(a) for a in apps}
            apps = s.apps = {a: _with_nodes(apps[a], d.app_nodes.get(a, frozenset())) for a in apps}
        batch_cpu = d.batch_cpu()
        hyp_mean, hyp_min = _hypothetical_mean(jobs.values(), t, batch_cpu)
        cycle_changes: Counter[str] = Counter()
        for jid in jobs:
            kind = change_kind(jid, state_now, d.placement.get(jid))
            if kind:
                cycle_changes[kind] += 1
        res.changes.update(cycle_changes)
        done_now: list[str] = []
        delays = change_delays(state_now, d.placement, cfg.costs)
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
        s.suspended |= {jid for jid in s.placement if jid not in d.placement}
        s.suspended -= set(d.placement)
        s.placement = {jid: nid for jid, nid in d.placement.items() if jid not in done_now}
        for jid in done_now:
            del jobs[jid]
            s.suspended.discard(jid)
        s.completed += len(done_now)
        row: dict[str, float] = {
            "time": t, "jobs_in_system": len(jobs) + len(done_now), "running": len(d.placement),
            "queued": len(jobs) + len(done_now) - len(d.placement), "completed": s.completed,
            "batch_cpu_mhz": batch_cpu, "hyp_rp_mean": hyp_mean, "hyp_rp_min": hyp_min,
            "starts": cycle_changes["start"], "suspends": cycle_changes["suspend"],
            "resumes": cycle_changes["resume"], "migrations": cycle_changes["migrate"]}
        for a, cpu in app_cpu.items():
            row[f"{a}_cpu_mhz"] = cpu
            row[f"{a}_rp"] = apps[a].rp(cpu)
        res.cycles.append(row)
        if progress is not None:
            progress(s.completed, t)
        s.t = len(res.cycles) * cfg.T  # (not t + T: a sum of T that are not whole drifts from k * T, cycle by cycle)
        if checkpoint is not None:
            checkpoint(s)
    return res


def _with_nodes(app: TransactionalApp, nodes: frozenset[str]) -> TransactionalApp:
    return replace(app, nodes=frozenset(nodes))
