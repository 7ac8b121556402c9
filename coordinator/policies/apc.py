"""The application placement controller (APC) of seed 003, and its baselines EDF and FCFS (Sec. 5.2).

One call of :func:`apc_place` is one control cycle of length ``T`` (003 Sec. 3.1): it takes the current
placement and returns a new placement of jobs and transactional instances on nodes with a CPU
allocation, maximising the increasingly sorted vector of relative performance (Sec. 3.2: max-min, then
keep improving the others) while preferring fewer placement changes.

Our reading of the placement loop (003 Sec. 3.2 "Algorithm outline", after [18]):

* **Nodes** are visited one at a time, those with the most free memory first (ties by id). For each
  node, the best configuration found is committed before the next node is visited. (A departure: 003 says
  the order of nodes, instances and applications "is driven by relative performance functions"; for nodes it
  gives no rule, and memory is what decides whether an instance fits at all.)
* **Instances to remove**: the instances on the node are ordered by relative performance, most
  satisfied first (for jobs, u_max now; for transactional apps, their RP at the current allocation);
  configuration k removes the first k of them, k = 0 .. (number of instances): linear cardinality.
* **Applications to place**: for each configuration, applications not on the node (queued or suspended
  jobs, jobs removed from *other* nodes earlier in this cycle, transactional apps without an instance
  here) are tried in order of increasing relative performance (least satisfied first), and each one
  that fits the node's memory is added unless it makes the configuration worse (then it is undone);
  every prefix of additions is a candidate. A transactional instance the configuration removed from this
  node is tried again last (003's inner loop "iterates over all applications"): an app ranks above the jobs,
  so it is removed in every configuration that removes a job, and without this its CPU on the node sat idle
  where the same job changes with the app kept were strictly better (3 of 217 cycles of Experiment Three's
  dynamic configuration, app RP 0.199 and 0.292 where 0.365 was open; fidelity review). A job removed here is
  not offered back: the removals stay prefixes of the satisfaction order (the last one put back is the
  configuration removing one instance fewer), and only the app's case is widened.
* **Load distribution** of a candidate (:func:`distribute`): transactional apps and the batch workload
  are equalised (bisection on the common level u such that an app's u_a equals the batch jobs'
  hypothetical level at the CPU left to them); free CPU goes first to apps, then apps squeeze jobs down
  to their minimum speeds; within a node, jobs share their CPU in proportion to their hypothetical
  allocations (Sec. 4.2), capped at their stage's maximum speed.
* **Evaluation** (:func:`evaluate`, Sec. 4.2 "Evaluating placement decisions"): each job advances by
  its allocation over ``T`` (less the time a start, resume or migration takes, if costs are on), then
  the hypothetical RPF at ``now + T`` with the same aggregate batch allocation gives each job's u; a
  job that completes inside the cycle gets its actual eq. 2 value; apps get eq. 1 at their allocation.
  When costs are on, a job that is not running after the cycle has the resume (or boot) time it will
  need added to its remaining time, and a job placed on a node that a suspended job is leaving waits
  for that suspension to finish (:func:`change_delays`): a preemption's whole price is in the forecast.
* **Two passes**: the loop over the nodes runs twice per cycle. The first pass only adds applications
  (configuration k = 0 on every node); the second is the full loop with removals. Without the first
  pass, the node visited first (the one with the most free memory) would set aside its most satisfied
  job to make room for a waiting one although later nodes had room for the waiting job; the job set
  aside is then placed on a later node, a migration that buys nothing. This is our reading of "APC
  employs heuristics that aim to minimize the number of changes" (Sec. 3.2): remove only to make room
  that does not exist. In Experiment Two it took the changes at a 150 s inter-arrival time from 98
  (50 migrations) to 6, at 50 s from 628 to 466, with the share of jobs meeting their goal unchanged.
* **Comparison**: candidate A beats B if, scanning both sorted vectors from the lowest value, the first
  prefix sum (the sum of the k lowest values) that differs by more than ``tolerance`` (default 0.01) is
  higher in A (:func:`better`); the last prefix sum is the whole sum. Without a tolerance this is 003's
  extended max-min order (Sec. 3.2); with one, gains each below it still add up from the bottom. We
  compared entry by entry before, and then a queued job was never started on a transactional app's node
  in Experiment Three: the job's CPU, spread by the hypothetical RPF over every job, raised each job by a
  few thousandths, while the app, far above the jobs, lost more than the tolerance in its one entry. Jobs
  queued beside free memory slots while the app stayed near its maximum, against Sec. 5.3 ("reduce the
  allocation for the transactional workload and give that CPU power instead to the long-running
  workload, until the relative performance each achieves is equalized"). In Experiment Two (50 s, 800
  jobs) prefix sums took the jobs suspended, resumed or migrated from 466 to 554 and the share meeting
  its goal from 87.4 to 86.2 %. The incumbent (the
  current placement) is replaced only by a strictly better candidate, so among equally good ones the
  one with fewer changes wins; and a candidate that suspends or migrates ``k`` more jobs than the
  incumbent must be better by ``(1 + k) * tolerance`` (our reading of "APC employs heuristics that aim
  to minimize the number of changes", Sec. 3.2: a disruption must pay for itself; without it the
  fluid hypothetical model, which ignores that a suspended job must wait for memory to resume, trades
  a nearly finished job for several newcomers whose forecast each gains a fraction of one cycle).
  This is how the worked example of Sec. 4.3 reads: in S1 the two options
  are both "0.7" (0.69 vs 0.69/0.71) and the unchanged one is kept.

Baselines (Sec. 5.2): EDF, preemptive, chooses the jobs to run in order of completion-time goal (first
fit) and suspends the rest; the chosen jobs that were running keep their nodes, so EDF does not migrate
jobs merely because a new deadline reordered the list; FCFS, non-preemptive, starts queued jobs in
submission order and stops at the first that does not fit.
Both use first fit (node order), give each job its stage's maximum speed, and keep a job on the
node it runs on when it still fits there.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from coordinator.policies.apc_rpf import DEFAULT_SAMPLES, Hypothetical, Job, TransactionalApp

_FLOOR = -1e3  # stands in for -inf when comparing vectors (no placement decision hinges below it)


@dataclass(frozen=True)
class Node:
    """A physical machine: CPU capacity (MHz, all processors together) and memory (MB)."""

    id: str
    cpu: float
    memory: float

    def __post_init__(self) -> None:
        if self.cpu <= 0 or self.memory <= 0:
            raise ValueError(f"node {self.id}: cpu and memory must be > 0, got {self.cpu}, {self.memory}")


@dataclass(frozen=True)
class Costs:
    """Durations of placement changes (003 Sec. 5): linear in the VM's memory footprint (s per MB), and a
    fixed boot time. While a change is in progress the job makes no progress: our reading, 003 gives only how long
    each change takes (its migrations are "live"; a job stalled through its whole migration, about 57 s for 4,320
    MB, is the pessimistic side). No default experiment depends on it measurably: Experiment Two runs without
    costs and Experiment Three's dynamic configuration migrates once."""

    suspend: float = 0.0353
    resume: float = 0.0333
    migrate: float = 0.0132
    boot: float = 3.6

    @staticmethod
    def none() -> Costs:
        return Costs(0.0, 0.0, 0.0, 0.0)

    def delay(self, kind: str, memory: float) -> float:
        """Seconds a job is stalled by change ``kind`` ('start', 'resume', 'migrate', '' for none)."""
        return {"start": self.boot, "resume": self.resume * memory, "migrate": self.migrate * memory}.get(kind, 0.0)


@dataclass(frozen=True)
class ApcState:
    """What APC sees at the start of a cycle. ``placement`` maps running jobs to nodes; jobs absent from it
    are queued (never ran) or, if in ``suspended``, suspended. Apps carry their instance nodes."""

    now: float
    nodes: tuple[Node, ...]
    jobs: tuple[Job, ...]
    placement: Mapping[str, str] = field(default_factory=dict)
    suspended: frozenset[str] = frozenset()
    apps: tuple[TransactionalApp, ...] = ()


@dataclass(frozen=True)
class Changes:
    """Placement changes of a decision against the state it was made from."""

    starts: int = 0
    resumes: int = 0
    suspends: int = 0
    migrations: int = 0
    instance_starts: int = 0
    instance_stops: int = 0

    @property
    def job_changes(self) -> int:
        """Suspends, resumes and migrations: the changes Fig. 4 counts (a first start is not a change)."""
        return self.suspends + self.resumes + self.migrations

    @property
    def total(self) -> int:
        return self.starts + self.job_changes + self.instance_starts + self.instance_stops


@dataclass(frozen=True)
class Decision:
    """A placement with its load distribution, its predicted relative performance and its changes."""

    placement: dict[str, str]  # job -> node
    app_nodes: dict[str, frozenset[str]]
    job_speed: dict[str, float]  # MHz per placed job
    app_speed: dict[str, dict[str, float]]  # app -> node -> MHz
    rp: dict[str, float]  # predicted relative performance per job and app
    changes: Changes
    vector: tuple[float, ...] = ()

    def batch_cpu(self) -> float:
        return float(sum(self.job_speed.values()))

    def app_cpu(self, app: str) -> float:
        return float(sum(self.app_speed.get(app, {}).values()))


# --------------------------------------------------------------------------- comparison


def better(a: tuple[float, ...], b: tuple[float, ...], tolerance: float) -> bool:
    """True if sorted vector ``a`` beats ``b``: scanning from the lowest entry, the first prefix sum (the sum
    of the ``k`` lowest values) that differs by more than ``tolerance`` is higher in ``a``.

    With no tolerance this is 003's extended max-min order (Sec. 3.2): the first differing prefix sum is
    the first differing entry, with the same sign. With one, gains that are each below it add up from the
    bottom of the vector before a larger change higher up is looked at: the hypothetical RPF (Sec. 4.2)
    spreads one job's CPU over every job, so starting a queued job raises each job a little, while the CPU
    it takes from a transactional app lowers that app's one value by more (module docstring,
    "Comparison"). The last prefix sum is the whole sum: a change that shifts one application's value
    across many positions of the vector is decided by it when no lower prefix differs."""
    sa = sb = 0.0
    for x, y in zip(a, b, strict=True):
        sa, sb = sa + max(x, _FLOOR), sb + max(y, _FLOOR)
        if sa > sb + tolerance:
            return True
        if sa < sb - tolerance:
            return False
    return False


def change_kind(job: str, state: ApcState, node: str | None) -> str:
    """'start', 'resume', 'migrate', 'suspend' or '' for job ``job`` going to ``node`` (None: not placed)."""
    cur = state.placement.get(job)
    if node is None:
        return "suspend" if cur is not None else ""
    if cur is None:
        return "resume" if job in state.suspended else "start"
    return "migrate" if cur != node else ""


def change_delays(state: ApcState, placement: Mapping[str, str], costs: Costs) -> dict[str, float]:
    """Seconds each placed job is stalled this cycle: its own start/resume/migration, plus the suspensions
    of jobs leaving its node (their memory is only free once their suspension has completed)."""
    jobs = {j.id: j for j in state.jobs}
    stall: dict[str, float] = {}
    for jid, nid in state.placement.items():
        if jid in jobs and jid not in placement:
            stall[nid] = stall.get(nid, 0.0) + costs.suspend * jobs[jid].stage().memory
    out: dict[str, float] = {}
    for jid, nid in placement.items():
        kind = change_kind(jid, state, nid)
        out[jid] = costs.delay(kind, jobs[jid].stage().memory) + (stall.get(nid, 0.0) if kind else 0.0)
    return out


def count_changes(state: ApcState, placement: Mapping[str, str], app_nodes: Mapping[str, frozenset[str]]) -> Changes:
    kinds = [change_kind(j.id, state, placement.get(j.id)) for j in state.jobs]
    ist = sum(len(app_nodes.get(a.id, frozenset()) - a.nodes) for a in state.apps)
    isp = sum(len(a.nodes - app_nodes.get(a.id, frozenset())) for a in state.apps)
    return Changes(kinds.count("start"), kinds.count("resume"), kinds.count("suspend"), kinds.count("migrate"),
                   ist, isp)


# --------------------------------------------------------------------------- load distribution


@dataclass
class _Ctx:
    """Per-cycle precomputation shared by all candidates."""

    state: ApcState
    T: float
    costs: Costs
    tolerance: float
    samples: tuple[float, ...]
    jobs: dict[str, Job]
    nodes: dict[str, Node]
    h_now: Hypothetical
    index: dict[str, int]
    rem: np.ndarray
    goal: np.ndarray
    rel: np.ndarray
    minrem_unplaced: np.ndarray  # min remaining time at now + T for a job that does not run this cycle
    split_memo: dict[tuple, dict[str, float]] = field(default_factory=dict)  # app/batch split by capacities


def _context(state: ApcState, T: float, costs: Costs, tolerance: float, samples: tuple[float, ...]) -> _Ctx:
    live = [j for j in state.jobs if not j.finished]
    h = Hypothetical.build(live, state.now, samples)
    return _Ctx(state, T, costs, tolerance, samples, {j.id: j for j in live}, {n.id: n for n in state.nodes}, h,
                {j.id: i for i, j in enumerate(live)}, h.remaining.copy(), h.goal.copy(), h.rel.copy(),
                np.array([j.min_remaining_time() for j in live], dtype=float))


def _share(total: float, weights: list[float], lo: list[float], hi: list[float]) -> list[float] | None:
    """Split ``total`` in proportion to ``weights`` with each part in [lo, hi] (water-filling); None if
    even the minimums do not fit. Parts never exceed ``hi`` even if ``total`` is larger."""
    n = len(weights)
    if sum(lo) > total + 1e-9:
        return None
    out = [0.0] * n
    fixed = [False] * n
    left = total
    for _ in range(n + 1):
        free = [i for i in range(n) if not fixed[i]]
        if not free:
            break
        wsum = sum(max(weights[i], 1e-9) for i in free)
        changed = False
        for i in free:
            v = left * max(weights[i], 1e-9) / wsum
            if v >= hi[i]:
                out[i], fixed[i], changed = hi[i], True, True
                left -= hi[i]
        if changed:
            continue
        for i in free:
            v = left * max(weights[i], 1e-9) / wsum
            if v < lo[i]:
                out[i], fixed[i], changed = lo[i], True, True
                left -= lo[i]
        if changed:
            continue
        for i in free:
            out[i] = left * max(weights[i], 1e-9) / wsum
        break
    # A part fixed at its maximum early stays there when later parts are raised to their minimums: the parts then
    # add up to more than ``total`` (weights 1, 1, bounds [0, 200] and [1000, 1000] of 1000 MHz gave 200 + 1000).
    # Then the exact split: the level lam at which the parts clip(lam * w, lo, hi) add up to ``total``.
    # And a part raised to its minimum in a pass is taken from ``left`` before the pass's next parts are weighed
    # against the old ``wsum``: those then fall below their minimums too, and CPU is left over (weights 2, 2, 2,
    # minimums 500, 300, 100 of 1000 MHz gave 500 + 300 + 100). Only with minimums: without, the split is exact.
    tol = 1e-9 * max(1.0, total)
    if (sum(out) > total + tol or sum(out) < min(total, sum(hi)) - tol
            or any(not lo[i] - 1e-9 <= out[i] <= hi[i] + 1e-9 for i in range(n))):
        return _clipped_share(total, [max(w, 1e-9) for w in weights], lo, hi)
    return out


def _clipped_share(total: float, weights: list[float], lo: list[float], hi: list[float]) -> list[float]:
    """The parts ``clip(lam * w_i, lo_i, hi_i)`` whose sum is ``total`` (``hi`` if even those are less; the caller
    has checked that the ``lo`` fit). Their sum grows piecewise linearly with lam, bending where a part reaches a
    bound: found between the two bends where it crosses ``total``."""
    n = len(weights)
    if sum(hi) <= total:
        return list(hi)

    def parts(lam: float) -> list[float]:
        return [min(hi[i], max(lo[i], lam * weights[i])) for i in range(n)]

    bends = sorted({0.0, *(lo[i] / weights[i] for i in range(n)), *(hi[i] / weights[i] for i in range(n))})
    prev = 0.0
    for lam in bends:
        if sum(parts(lam)) >= total:
            lo_sum, hi_sum = sum(parts(prev)), sum(parts(lam))
            frac = 0.0 if hi_sum <= lo_sum else (total - lo_sum) / (hi_sum - lo_sum)
            return parts(prev + frac * (lam - prev))  # (linear between two bends)
        prev = lam
    return list(hi)


def distribute(ctx: _Ctx, placement: Mapping[str, str], app_nodes: Mapping[str, frozenset[str]]
               ) -> tuple[dict[str, float], dict[str, dict[str, float]]] | None:
    """The load distribution L of a placement (see the module docstring); None if infeasible (memory,
    or minimum speeds that do not fit)."""
    by_node: dict[str, list[Job]] = {n: [] for n in ctx.nodes}
    mem = {n: 0.0 for n in ctx.nodes}
    for jid, nid in placement.items():
        j = ctx.jobs[jid]
        by_node[nid].append(j)
        mem[nid] += j.stage().memory
    apps = [a for a in ctx.state.apps if app_nodes.get(a.id)]
    for a in apps:
        for nid in app_nodes[a.id]:
            mem[nid] += a.memory
    if any(mem[n] > ctx.nodes[n].memory + 1e-6 for n in mem):
        return None
    jcap = {n: min(ctx.nodes[n].cpu, sum(j.stage().max_speed for j in js)) for n, js in by_node.items()}
    jmin = {n: sum(j.stage().min_speed for j in js) for n, js in by_node.items()}
    if any(jmin[n] > ctx.nodes[n].cpu + 1e-6 for n in jmin):
        return None
    free = {n: ctx.nodes[n].cpu - jcap[n] for n in ctx.nodes}
    squeeze = {n: jcap[n] - jmin[n] for n in ctx.nodes}
    # free capacity and squeezable job CPU per app, nodes shared between apps split evenly
    hosting: dict[str, int] = {}
    for a in apps:
        for nid in app_nodes[a.id]:
            hosting[nid] = hosting.get(nid, 0) + 1
    app_free = {a.id: sum(free[n] / hosting[n] for n in app_nodes[a.id]) for a in apps}
    app_sq = {a.id: sum(squeeze[n] / hosting[n] for n in app_nodes[a.id]) for a in apps}
    job_total = sum(jcap.values())

    def app_take(u: float) -> dict[str, float]:
        """CPU each app takes to reach level u; an app that cannot reach u even with all it could get takes
        all of it if that improves its RP at all (max-min favours the worst off), else only free CPU."""
        out = {}
        for a in apps:
            most = min(a.model.saturation, app_free[a.id] + app_sq[a.id])
            need = a.speed_for(u)
            if need <= most:
                out[a.id] = need
            else:
                out[a.id] = most if math.isfinite(a.rp(most)) else min(most, app_free[a.id])
        return out

    def batch_cpu(take: dict[str, float]) -> float:
        return job_total - sum(max(0.0, take[a.id] - app_free[a.id]) for a in apps)

    take = {a.id: min(a.model.saturation, app_free[a.id] + app_sq[a.id]) for a in apps}
    key = (round(job_total, 3), tuple(round(app_free[a.id], 3) for a in apps),
           tuple(round(app_sq[a.id], 3) for a in apps))
    if apps and ctx.h_now.ids and key in ctx.split_memo:
        take = dict(ctx.split_memo[key])
    elif apps and ctx.h_now.ids:
        # the highest u at which every app reaches u (or its maximum) and the batch level stays >= u
        lo, hi = -20.0, 1.0
        if ctx.h_now.level(batch_cpu(app_take(lo))) < lo:
            hi = lo
        for _ in range(16):  # resolution 21 / 2**16 in u: far below the comparison tolerance
            mid = (lo + hi) / 2
            if ctx.h_now.level(batch_cpu(app_take(mid))) >= mid:
                lo = mid
            else:
                hi = mid
        take = app_take(lo)
        # extension of max-min: free capacity the batch cannot use goes to the apps (up to saturation)
        take = {a.id: max(take[a.id], min(a.model.saturation, app_free[a.id])) for a in apps}
        ctx.split_memo[key] = dict(take)
    # spread each app's allocation over its nodes: free CPU first, then squeezed job CPU
    app_speed: dict[str, dict[str, float]] = {}
    job_room = {n: ctx.nodes[n].cpu for n in ctx.nodes}
    for a in apps:
        want = take[a.id]
        per: dict[str, float] = {}
        nodes = sorted(app_nodes[a.id])
        fshare = sum(free[n] / hosting[n] for n in nodes)
        from_free = min(want, fshare)
        for n in nodes:
            per[n] = from_free * (free[n] / hosting[n]) / fshare if fshare > 0 else 0.0
        rest = want - from_free
        sq = sum(squeeze[n] / hosting[n] for n in nodes)
        for n in nodes:
            per[n] += rest * (squeeze[n] / hosting[n]) / sq if sq > 0 else 0.0
            job_room[n] -= per[n]
        app_speed[a.id] = per
    omega_h, _ = ctx.h_now.at(sum(min(job_room[n], jcap[n]) for n in ctx.nodes))
    job_speed: dict[str, float] = {}
    for n, js in by_node.items():
        if not js:
            continue
        parts = _share(max(0.0, job_room[n]), [float(omega_h[ctx.index[j.id]]) for j in js],
                       [j.stage().min_speed for j in js], [j.stage().max_speed for j in js])
        if parts is None:
            return None
        for j, v in zip(js, parts, strict=True):
            job_speed[j.id] = v
    return job_speed, app_speed


def evaluate(ctx: _Ctx, placement: Mapping[str, str], app_nodes: Mapping[str, frozenset[str]]) -> Decision | None:
    """Distribute load, predict every application's relative performance (module docstring), or None."""
    dist = distribute(ctx, placement, app_nodes)
    if dist is None:
        return None
    job_speed, app_speed = dist
    now, T = ctx.state.now, ctx.T
    rem, minrem = ctx.rem.copy(), ctx.minrem_unplaced.copy()
    finished: dict[str, float] = {}
    delays = change_delays(ctx.state, placement, ctx.costs)
    for jid, j in ctx.jobs.items():  # a job left off must later resume (or boot): it will pay that time
        if jid not in placement:
            i = ctx.index[jid]
            ran = jid in ctx.state.suspended or jid in ctx.state.placement
            minrem[i] += ctx.costs.resume * j.stage().memory if ran else ctx.costs.boot
    for jid, v in job_speed.items():
        j = ctx.jobs[jid]
        delay = delays[jid]
        nj, off = j.advanced(v, max(0.0, T - delay))
        i = ctx.index[jid]
        if off is not None:
            finished[jid] = j.rp(now + delay + off)
        rem[i], minrem[i] = nj.remaining, nj.min_remaining_time()
    keep = np.array([jid not in finished for jid in ctx.h_now.ids], dtype=bool)
    ids = tuple(jid for jid in ctx.h_now.ids if jid not in finished)
    h = Hypothetical.from_arrays(ids, rem[keep], ctx.goal[keep], ctx.rel[keep], minrem[keep], now + T, ctx.samples)
    _, u = h.at(float(sum(job_speed.values())))
    rp = dict(zip(ids, (float(x) for x in u), strict=True))
    rp.update(finished)
    for a in ctx.state.apps:
        rp[a.id] = a.rp(sum(app_speed.get(a.id, {}).values()))
    vector = tuple(sorted(rp.values()))
    return Decision(dict(placement), {a.id: frozenset(app_nodes.get(a.id, frozenset())) for a in ctx.state.apps},
                    job_speed, app_speed, rp, count_changes(ctx.state, placement, app_nodes), vector)


# --------------------------------------------------------------------------- the placement loop


def apc_place(state: ApcState, T: float, costs: Costs | None = None, tolerance: float = 0.01,
              samples: tuple[float, ...] = DEFAULT_SAMPLES) -> Decision:
    """One APC control cycle (see the module docstring for the loop and its reading of 003)."""
    if T <= 0:
        raise ValueError(f"control cycle T must be > 0, got {T}")
    ctx = _context(state, T, Costs.none() if costs is None else costs, tolerance, samples)
    placement = {j: n for j, n in state.placement.items() if j in ctx.jobs and n in ctx.nodes}
    app_nodes = {a.id: frozenset(n for n in a.nodes if n in ctx.nodes) for a in state.apps}
    best = evaluate(ctx, placement, app_nodes)
    if best is None:  # the current placement no longer fits (a stage changed memory): start from empty
        placement = {}
        best = evaluate(ctx, placement, app_nodes)
        if best is None:  # the apps' instances alone do not fit: no placement of the jobs can help
            over = sorted(n for n in ctx.nodes if sum(a.memory for a in state.apps if n in app_nodes[a.id])
                          > ctx.nodes[n].memory + 1e-6)
            raise ValueError(f"node {over[0] if over else '?'}: the transactional instances placed on it need more "
                             "memory than it has")
    apps = {a.id: a for a in state.apps}

    def urgency(jid: str) -> float:
        return ctx.jobs[jid].max_rp(state.now)

    # additions only, on every node; then the full loop with removals (module docstring, "Two passes")
    for removals in (False, True):
        best = _node_loop(ctx, state, best, apps, urgency, tolerance, removals)
    return best


def _node_loop(ctx: _Ctx, state: ApcState, best: Decision, apps: Mapping[str, TransactionalApp],
               urgency: Callable[[str], float], tolerance: float, removals: bool) -> Decision:
    """One pass of the placement loop over the nodes, from ``best``; configurations that remove instances
    from a node are tried only if ``removals``."""

    def instance_rp(kind: str, name: str) -> float:
        return urgency(name) if kind == "job" else best.rp.get(name, 0.0)

    order = sorted(state.nodes, key=lambda n: (-(n.memory - _used_memory(ctx, best, n.id)), n.id))
    for node in order:
        here = [("job", j) for j, n in best.placement.items() if n == node.id]
        here += [("app", a) for a, ns in best.app_nodes.items() if node.id in ns]
        here.sort(key=lambda k: -instance_rp(*k))
        unplaced = sorted((j for j in ctx.jobs if j not in best.placement), key=lambda j: (urgency(j), j))
        waiting = [("job", j) for j in unplaced]
        waiting += [("app", a) for a in apps if node.id not in best.app_nodes[a] and
                    len(best.app_nodes[a]) < apps[a].max_instances]
        waiting.sort(key=lambda k: instance_rp(*k))
        if not waiting:
            continue
        incumbent = best
        for k in range(len(here) + 1 if removals else 1):
            removed = here[:k]
            pl = dict(incumbent.placement)
            an = {a: set(ns) for a, ns in incumbent.app_nodes.items()}
            for kind, name in removed:
                if kind == "job":
                    del pl[name]
                else:
                    an[name].discard(node.id)
            room = node.memory - sum(ctx.jobs[j].stage().memory for j, n in pl.items() if n == node.id) - sum(
                apps[a].memory for a, ns in an.items() if node.id in ns)
            prev = incumbent
            if k > 0:
                cand = evaluate(ctx, pl, {a: frozenset(ns) for a, ns in an.items()})
                if cand is None:
                    continue
                prev = cand
                if better(cand.vector, best.vector, _margin(cand, best, tolerance)):
                    best = cand
            # (a transactional instance removed here is offered back last: removals go most satisfied first, so an
            # app above the jobs was removed in every configuration that removed a job, and its CPU sat idle where
            # keeping it was strictly better; fidelity review)
            for kind, name in waiting + [r for r in removed if r[0] == "app"]:
                need = ctx.jobs[name].stage().memory if kind == "job" else apps[name].memory
                if need > room + 1e-9:
                    continue
                if kind == "job":
                    pl[name] = node.id
                else:
                    an[name].add(node.id)
                room -= need
                cand = evaluate(ctx, pl, {a: frozenset(ns) for a, ns in an.items()})
                if cand is None or better(prev.vector, cand.vector, tolerance):  # infeasible or harmful: undo
                    if kind == "job":
                        del pl[name]
                    else:
                        an[name].discard(node.id)
                    room += need
                    continue
                prev = cand
                if better(cand.vector, best.vector, _margin(cand, best, tolerance)):
                    best = cand
    return best


def _margin(cand: Decision, incumbent: Decision, tolerance: float) -> float:
    """The improvement a candidate must show: ``tolerance`` times one plus the suspensions and migrations
    it adds over the incumbent (see the module docstring)."""
    extra = (cand.changes.suspends + cand.changes.migrations) - (incumbent.changes.suspends +
                                                                 incumbent.changes.migrations)
    return tolerance * (1 + max(0, extra))


def _used_memory(ctx: _Ctx, d: Decision, node: str) -> float:
    used = sum(ctx.jobs[j].stage().memory for j, n in d.placement.items() if n == node)
    return used + sum(a.memory for a in ctx.state.apps if node in d.app_nodes.get(a.id, frozenset()))


# --------------------------------------------------------------------------- baselines


def _first_fit(state: ApcState, ordered: list[Job], keep: Mapping[str, str]) -> dict[str, str]:
    """Place ``ordered`` jobs: on the node in ``keep`` if it still fits there, else on the first node with
    the memory and the stage's maximum speed free."""
    mem = {n.id: n.memory for n in state.nodes}
    cpu = {n.id: n.cpu for n in state.nodes}
    out: dict[str, str] = {}
    for j in ordered:
        s = j.stage()
        prefer = [keep[j.id]] if j.id in keep and keep[j.id] in mem else []
        for nid in prefer + [n.id for n in state.nodes]:
            if mem[nid] >= s.memory - 1e-9 and cpu[nid] >= s.max_speed - 1e-9:
                out[j.id] = nid
                mem[nid] -= s.memory
                cpu[nid] -= s.max_speed
                break
    return out


def _baseline_decision(state: ApcState, placement: dict[str, str]) -> Decision:
    speed = {j.id: j.stage().max_speed for j in state.jobs if j.id in placement}
    return Decision(placement, {}, speed, {}, {}, count_changes(state, placement, {}))


def edf_place(state: ApcState, sticky: bool = True) -> Decision:
    """Preemptive Earliest Deadline First with first fit: every job in the system, earliest completion
    time goal first (ties by submission); jobs that no longer make the cut are suspended. ``sticky=False``
    is the literal reading: re-pack every cycle in deadline order (a running job whose slot an earlier
    deadline took first is migrated).

    Which one 003 ran is not said. Its text favours the re-packing one: at a 150 s inter-arrival time
    the system "is underloaded" (Sec. 5.2, all algorithms meet the same share of goals), yet "EDF makes
    considerably more placement changes than does the APC once the inter-arrival time is 150s or less";
    an EDF that keeps running jobs in place makes no change at all when nothing is preempted, so the
    changes 003 counts there can only be moves. ``vcemu apc`` runs both."""
    jobs = sorted((j for j in state.jobs if not j.finished), key=lambda j: (j.goal, j.submit, j.id))
    chosen = _first_fit(state, jobs, state.placement)  # which jobs run: earliest deadlines that fit
    if not sticky:
        return _baseline_decision(state, chosen)
    # where they run: the chosen running jobs stay where they are, the others go first fit (deadline order)
    order = [j for j in jobs if j.id in chosen and j.id in state.placement]
    order += [j for j in jobs if j.id in chosen and j.id not in state.placement]
    return _baseline_decision(state, _first_fit(state, order, state.placement))


def fcfs_place(state: ApcState) -> Decision:
    """Non-preemptive First-Come First-Served with first fit: running jobs stay; queued jobs start in
    submission order until the first one that fits nowhere (no backfilling). A running job whose new stage (003
    Sec. 4.1: a stage has its own memory and maximum speed) fits neither its node nor any other is suspended, as
    EDF would: there is no room to run it at its stage's speed."""
    running = [j for j in state.jobs if j.id in state.placement and not j.finished]
    placement = _first_fit(state, running, state.placement)
    mem = {n.id: n.memory for n in state.nodes}
    cpu = {n.id: n.cpu for n in state.nodes}
    for j in running:
        if j.id not in placement:  # (it fits nowhere now: suspended)
            continue
        mem[placement[j.id]] -= j.stage().memory
        cpu[placement[j.id]] -= j.stage().max_speed
    queued = sorted((j for j in state.jobs if j.id not in state.placement and not j.finished),
                    key=lambda j: (j.submit, j.id))
    for j in queued:
        s = j.stage()
        nid = next((n.id for n in state.nodes if mem[n.id] >= s.memory - 1e-9 and cpu[n.id] >= s.max_speed - 1e-9),
                   None)
        if nid is None:
            break
        placement[j.id] = nid
        mem[nid] -= s.memory
        cpu[nid] -= s.max_speed
    return _baseline_decision(state, placement)

