"""The MCB8-based DFRS policies of seed 001 Sec. III-B: DYNMCB8, -PER, -ASAP-PER and -STRETCH-PER.

All repack every job in the system (running, paused and waiting) with MCB8 and its binary search on
the yield (seed 002 Sec. 3.4, :mod:`coordinator.policies.packing`). When no packing exists however small
the yield, the job with the lowest priority (max(30, flow time)/vt², 001 Sec. III-A) is removed from
consideration — paused if it was running — and MCB8 runs again (001 Sec. III-B; jobs are never rejected,
001 Sec. II-B.2).

- DYNMCB8 repacks at every submission and completion.
- DYNMCB8-PER repacks only every ``period`` seconds (600 s by default, 001 Sec. III-B); new jobs wait.
- DYNMCB8-ASAP-PER is PER, but a new job is started at once with GREEDY's mapping (001 Sec. III-A) if
  memory allows, without preempting anyone; the running jobs then get GREEDY's max-min and
  average-yield shares for the current mapping. Completions between periods change nothing.
- DYNMCB8-STRETCH-PER searches instead for the lowest estimated maximum stretch at the next period,
  Ŝ(i+1) = max_j (flow_j + T)/(vt_j + y_j·T): for a target Ŝ each job's yield is solved from that
  equation (a negative result becomes 0.01, above 1 becomes 1), MCB8 packs those CPU requirements, and a
  binary search (relative accuracy ``accuracy``) finds the lowest feasible Ŝ. Spare CPU is then handed
  out with the average-yield heuristic starting from those yields — our reading of "a heuristic to
  improve the average estimated stretch", which raises the jobs with the smallest needs first.

MCB8 fills hosts in index order, so its host numbers are labels: hosts of equal capacity are
interchangeable, and we map the packing's hosts onto the real ones so as to keep the most tasks where
they are (an assignment problem per group of identical hosts). Without this, a repacking that changes
nothing but the labels would migrate everything. A running job that still ends up elsewhere is moved with
one ``Move`` (its tasks' new hosts at once), keeping every task whose host is still among the job's new
hosts; a paused job is resumed wherever MCB8 put it.

Preemption counts (issue 4 investigation; 1,000-job Lublin traces, 128 hosts, DYNMCB8-ASAP-PER): with
no penalty, load 0.9, seed 0 gives 6.9 preemptions and 3.9 migrations per job (001 Table II: 7.33 and
6.08, averaged over loads >= 0.7; measured again in session 40, with 001 Table II's move counting and the
repacking grid). With the 5-minute penalty it is 20-31 per job at loads 0.7-0.9 (measured earlier), but
42-64 per hour (Table II: 44 on average, 106 at most): the penalty-unaware repacking wastes capacity,
the mean flow time grows from 58 to 342 periods, and 90% of pauses hit a job exactly one period after
it was (re)started — resuming raises its virtual time, so it becomes the lowest priority job
(max(30, flow)/vt², 001 Sec. III-A) at the next period. This is the paper's algorithm, not an engine or
counting defect; the removal bisection above is checked against one-at-a-time removal by a unit test.
"""

from __future__ import annotations

import heapq
import math
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import chain, compress
from typing import TypeVar

import numpy as np
from scipy.optimize import linear_sum_assignment

from coordinator.model import (
    STRETCH_BOUND_S,
    Complete,
    Host,
    JobSpec,
    JobState,
    JobView,
    Snapshot,
    Stimulus,
    Submit,
    Tick,
)
from coordinator.plan import Action, Move, Pause, Plan, Resume, SetShare, Start
from coordinator.plan import move as _move
from coordinator.plan import pause as _pause
from coordinator.plan import resume as _resume
from coordinator.plan import set_share as _set_share
from coordinator.plan import start as _start
from coordinator.policies.avgyield import raise_average_yield
from coordinator.policies.base import EPS, host_positions, raise_yields, remember_positions
from coordinator.policies.mcb8_kernel import mcb8_removals, mcb8_search, min_yield
from coordinator.policies.packing import (
    Allocation,
    Hosts,
    PackJob,
    PackProblem,
    _host_arrays,
    _pass_mcb8,
    mcb8_yields,
    mcb8_yields_compiled,
    mcb_pack,
    mcb_search,
)
from coordinator.policies.repack_kernel import greedy_admission, moved_positions
from coordinator.policy_names import DEFAULT_PERIOD_S, period_name

_CONSIDERED = frozenset((JobState.RUNNING, JobState.PAUSED, JobState.PENDING))  # the jobs a repacking places
MIN_STRETCH_YIELD = 0.01
T = TypeVar("T")


@dataclass(frozen=True)
class DynMcb8:
    name: str = "dynmcb8"
    period_s: float | None = None
    asap: bool = False
    stretch: bool = False
    accuracy: float = 0.01

    @property
    def period(self) -> float | None:
        return self.period_s

    @property
    def admits_on_submit(self) -> bool:
        """Whether a ``Submit`` between periods may start the job (ASAP): the engine then offers pending jobs
        again when hosts are added (:meth:`coordinator.engine.Engine.add_hosts`)."""
        return self.period_s is not None and self.asap

    def refuse(self, spec: JobSpec, hosts: tuple[Host, ...]) -> tuple[str, str] | None:
        """(field, reason) for a job that no repacking could ever place: alone on the idle cluster, MCB8 finds
        no packing of it even at the smallest yield the search tries (``accuracy``; STRETCH-PER's 0.01 floor).
        Every repacking sets such a job aside as the lowest-priority one (001 Sec. III-B) and it waits for ever:
        under DYNMCB8 the run stalled, under the periodic variants it never ended. Refused at submission
        instead, as the batch schedulers refuse a job wider than the machine. (ASAP-PER's admission could start
        it between periods, over-committing CPU; it finishes only if its work is done before the next repacking
        pauses it for good, which depends on where its arrival falls in the period: refused too.) 001's jobs
        are "never rejected" (Sec. II-B.2) on its own workloads, where no job comes near this (a Lublin job at
        the floor needs at most 1.28 cores on 128 hosts)."""
        if not hosts:
            return None  # (live, before any agent registered: the service refuses the job itself)
        floor = MIN_STRETCH_YIELD if self.stretch else self.accuracy
        need = spec.cpu_need * floor
        info = _host_info(hosts)
        # The common case, without the packing pass: the whole job fits the smallest host (CPU at the floor
        # yield, memory), with a margin far above the packing's tolerances, so MCB8 surely packs it.
        tasks = spec.tasks
        if tasks * need <= float(info.capc.min()) * 0.999 and tasks * spec.mem <= float(info.capm.min()) * 0.999:
            return None
        if _fits(np.full(tasks, need), np.full(tasks, float(spec.mem)), info.capc, info.capm, info.limits):
            return None
        return "tasks", (f"{tasks} tasks of CPU need {spec.cpu_need:g} and memory {spec.mem:g} do not fit on the "
                         f"{len(hosts)} hosts even at the smallest yield {self.name} tries ({floor:g}): every "
                         "repacking would set the job aside, so it could never run to its end")

    def decide(self, snap: Snapshot, stim: Stimulus) -> Plan:
        if self.period_s is None:
            # A Tick() with no job is "decide on the state as it is": the live engine queues one when hosts are
            # added (``Engine.add_hosts``), whose capacity DYNMCB8 would otherwise leave idle until the next
            # submission or completion. (The simulator sends none to a policy without a period.)
            if isinstance(stim, (Submit, Complete)) or (isinstance(stim, Tick) and stim.job is None):
                return self._repack(snap)
            return Plan()
        if isinstance(stim, Tick) and stim.job is None:
            return self._repack(snap)
        if self.asap and isinstance(stim, Submit) and snap.jobs[stim.job].state is JobState.PENDING:
            return self._start_now(snap, stim.job)
        return Plan()

    # ---- ASAP: GREEDY's admission between periods -------------------------------------------------

    def _start_now(self, snap: Snapshot, job_id: str) -> Plan:
        """GREEDY's mapping for the new job, then every placed job's max-min + average-yield share: what
        ``greedy_placement(spec, hosts, placement_use(...))``, ``max_min_yields`` and ``reshare`` compute
        (:mod:`coordinator.policies.base`, :mod:`coordinator.policies.dfrs`), on per-host lists instead of
        one HostUse object and dictionary per host, with every sum taken in the same order."""
        if not snap.hosts:
            return Plan()
        info = _host_info(snap.hosts)
        index = info.index
        running = snap.running  # placement order: submission order
        # placement_use: each running task's need and memory added to its host, in placement order (which
        # is the order in which np.bincount adds its weights)
        ats: list[np.ndarray] = []  # per job its tasks' host positions; np.repeat gives each task its job's values
        needs: list[float] = []
        mems: list[float] = []
        counts: list[int] = []
        for j in running:
            hs = j.hosts
            ats.append(info.at(hs))
            needs.append(j.spec.cpu_need)
            mems.append(j.spec.mem)
            counts.append(len(hs))
        at = np.concatenate(ats) if ats else np.zeros(0, dtype=np.int64)
        spec = snap.jobs[job_id].spec
        if greedy_admission is not None:  # the lines below, compiled: the same sums and choices
            placed_a = np.empty(spec.tasks, dtype=np.int64)
            mapped, lam = greedy_admission(at, np.array(needs, dtype=float), np.array(mems, dtype=float),
                                           np.array(counts, dtype=np.int64), int(spec.tasks), float(spec.cpu_need),
                                           float(spec.mem),
                                           info.capc, info.capm, placed_a)
            if not mapped:
                return Plan()
            placed = placed_a.tolist()
        else:
            n = len(index)
            load = np.bincount(at, weights=np.repeat(np.asarray(needs, dtype=float), counts), minlength=n).tolist()
            used = np.bincount(at, weights=np.repeat(np.asarray(mems, dtype=float), counts), minlength=n).tolist()
            got = _greedy_hosts(spec, info, load, used)  # adds the new tasks' needs to load, in order
            if got is None:
                return Plan()
            placed = got
            # max_min_yields: the loads with the new job are the ones greedy left (same additions, same order).
            lam = max((ld / c for ld, c in zip(load, info.cpu, strict=True)), default=0.0)
        base_yield = 1.0 / max(1.0, lam)
        jobs = [j.spec for j in running] + [spec]
        task_job = np.repeat(np.arange(len(jobs)), [*counts, spec.tasks])
        need = np.array([s.cpu_need for s in jobs], dtype=float)
        task_host = np.concatenate((at, np.asarray(placed, dtype=np.int64)))
        raised = raise_average_yield(task_host, task_job, need, info.capc, base_yield)
        cpus = [float(y) * s.cpu_need for y, s in zip(raised.tolist(), jobs, strict=True)]
        shares = [_set_share(j.spec.id, cpu) for j, cpu in zip(running, cpus, strict=False) if abs(j.cpu - cpu) > EPS]
        return Plan((*shares, _start(job_id, tuple(map(info.names.__getitem__, placed)), cpus[-1])))

    # ---- the global repacking -----------------------------------------------------------------------

    def _repack(self, snap: Snapshot) -> Plan:
        rp = _Repacking.of(snap)
        considered = rp.jobs
        if not snap.hosts:  # every agent lost (live): nothing can run; jobs wait for hosts to return
            return self._plan(snap, {}, considered)
        # 001 Sec. III-B: the lowest-priority jobs are set aside until MCB8 packs the rest; they are always
        # the first ``removed`` jobs in priority order, the jobs whose rank is below ``removed``.
        removed = self._removals(snap, rp)
        while True:
            if removed >= len(considered):
                return self._plan(snap, {}, considered)
            if self.stretch:
                result = self._stretch_pack(snap, rp.kept(removed))
                if result is not None:
                    return self._plan(snap, result, considered)
            else:
                plan = self._yield_plan(snap, rp, removed)
                if plan is not None:
                    return plan
            removed += 1

    def _removals(self, snap: Snapshot, rp: _Repacking) -> int:
        """How many lowest-priority jobs to set aside so that MCB8 packs the rest at the smallest yield.

        001 removes one job at a time and reruns the whole yield search. "However small the yield" is,
        for a search of accuracy ε, a packing at yield ε; we test that directly and search the number
        of removals by bisection (fewer removals pack less easily), which takes log(n) packings
        instead of n yield searches. If the full search then still fails, one more job is removed.
        """
        if not rp.jobs:
            return 0
        need = rp.need * self.accuracy  # each job's CPU requirement at the floor yield
        mem, ranks, tasks = rp.mem, rp.rank, rp.tasks
        info = _host_info(snap.hosts)
        capc, capm, limits = info.capc, info.capm, info.limits
        if mcb8_removals is not None:  # the bisection below, compiled, probe for probe
            return _removal_count(need, mem, ranks, tasks, info)
        # The tasks of every considered job once, in job order (as PackProblem.build flattens them); a
        # probe keeps those of the jobs not set aside. Same values, same order: the same packing pass.
        t_need = np.repeat(need, tasks)
        t_mem = np.repeat(mem, tasks)
        t_rank = np.repeat(ranks, tasks)

        def packs(k: int) -> bool:
            if k == 0:
                return _fits(t_need, t_mem, capc, capm, limits)
            keep = t_rank >= k
            return not keep.any() or _fits(t_need[keep], t_mem[keep], capc, capm, limits)

        if packs(0):
            return 0
        lo, hi = 0, len(rp.jobs)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if packs(mid):
                hi = mid
            else:
                lo = mid
        return hi

    def _yield_pack(self, snap: Snapshot, jobs: list[JobView]) -> dict[str, tuple[tuple[str, ...], float]] | None:
        """MCB8 with the yield search on ``jobs``, relabelled: per job its host names and CPU fraction.
        (The repacking itself takes :meth:`_yield_plan`'s route to the same plan, on host positions.)"""
        alloc = _allocate(
            tuple([(j.spec.tasks, j.spec.cpu_need, j.spec.mem) for j in jobs]),  # PackJob fields, hashed in C
            _host_info(snap.hosts).caps,
            self.accuracy,
        )
        if alloc is None:
            return None
        flat = list(chain.from_iterable(alloc.hosts))  # every task's packing host, jobs in order
        names = _relabel(snap, jobs, flat)
        named = list(map(names.__getitem__, flat))  # and its host name
        needs, yields = alloc.needs, alloc.yields  # alloc.cpu(k) is needs[k] * yields[k]
        out: dict[str, tuple[tuple[str, ...], float]] = {}
        k0 = 0
        for k, j in enumerate(jobs):
            k1 = k0 + len(alloc.hosts[k])
            out[j.spec.id] = (tuple(named[k0:k1]), needs[k] * yields[k])
            k0 = k1
        return out

    def _yield_plan(self, snap: Snapshot, rp: _Repacking, removed: int) -> Plan | None:
        """``self._plan(snap, self._yield_pack(snap, jobs), rp.jobs)`` for the jobs kept after setting aside
        the ``removed`` lowest-priority ones (None where that packing is None), computed on host positions
        and on the repacking's arrays: the packing's host of every task, relabelled, is compared with the
        running jobs' current positions by a compiled kernel, and names are looked up only for the hosts
        of the actions made. Same plan, action for action (a unit test checks it against the name-based
        route)."""
        info = _host_info(snap.hosts)
        keep = rp.rank >= removed
        got = _allocate_flat(rp.need[keep], rp.mem[keep], rp.tasks[keep], info, self.accuracy)
        if got is None:
            return None
        th, cpu_a = got
        considered = rp.jobs
        jobs = rp.kept(removed)
        tasks_a = rp.tasks[keep]
        tasks = tasks_a.tolist()
        is_running_a = rp.running[keep]
        # The relabelling's input: the packing host and the current host of every task of a running job.
        cur: list[np.ndarray] = []
        whole = True  # every running job has one host per task (always, for the engine's jobs)
        for j in compress(jobs, is_running_a.tolist()):
            hs = j.hosts
            if len(hs) != j.spec.tasks:
                whole = False
            cur.append(info.at(hs))
        if not whole or moved_positions is None:  # the name-based route
            return self._plan(snap, self._yield_pack(snap, jobs), considered)
        mask = np.repeat(is_running_a, tasks_a)
        now_on = np.concatenate(cur) if cur else np.zeros(0, dtype=np.int64)
        bins = th[mask]
        perm = _assign(bins.tobytes(), now_on.tobytes(), len(info.names), info.groups)
        new = perm[th]  # every task's host position after relabelling, jobs in order
        new_running = new[mask]
        run_tasks = tasks_a[is_running_a]
        offsets = np.zeros(run_tasks.shape[0] + 1, dtype=np.int64)
        np.cumsum(run_tasks, out=offsets[1:])
        out = np.empty_like(now_on)
        flags = moved_positions(now_on, new_running, offsets, len(info.names), out).tolist()
        names = info.names
        new_l = new.tolist()
        out_l = out.tolist()
        offsets_l = offsets.tolist()
        cpus = cpu_a.tolist()
        paused, pending = JobState.PAUSED, JobState.PENDING
        actions: list[Action] = []
        for i in np.flatnonzero(rp.running & ~keep).tolist():  # the running jobs set aside, in job order
            actions.append(_pause(considered[i].spec.id))
        k0 = 0  # task offset of the job among all tasks
        r = 0  # index of the job among the running ones
        # The hosts tuples made here are the jobs' hosts at the next repacking: their positions are kept
        # now (when host names are unique, a name's position is the one it was looked up from).
        positions = info.positions if len(info.index) == len(names) else None
        for k, job in enumerate(jobs):
            k1 = k0 + tasks[k]
            job_id, cpu, state = job.spec.id, cpus[k], job.state
            if state is pending or state is paused:
                placed = tuple(map(names.__getitem__, new_l[k0:k1]))
                if positions is not None:
                    remember_positions(positions, placed, new[k0:k1])
                actions.append((_start if state is pending else _resume)(job_id, placed, cpu))
            else:
                if flags[r]:
                    lo, hi = offsets_l[r], offsets_l[r + 1]
                    moved = tuple(map(names.__getitem__, out_l[lo:hi]))
                    if positions is not None:
                        remember_positions(positions, moved, out[lo:hi])
                    actions.append(_move(job_id, moved))
                if abs(job.cpu - cpu) > EPS:
                    actions.append(_set_share(job_id, cpu))
                r += 1
            k0 = k1
        return Plan(tuple(actions))

    def _stretch_pack(self, snap: Snapshot, jobs: list[JobView]) -> dict[str, tuple[tuple[str, ...], float]] | None:
        period = self.period_s or DEFAULT_PERIOD_S
        caps = [(h.cpu, h.mem) for h in snap.hosts]
        flows = [j.flow_time(snap.now) for j in jobs]

        def yields(target: float) -> list[float]:
            out = []
            for j, flow in zip(jobs, flows, strict=True):
                y = ((flow + period) / target - j.vt) / period
                out.append(MIN_STRETCH_YIELD if y < 0 else min(1.0, max(y, MIN_STRETCH_YIELD)))
            return out

        def pack(target: float):
            ys = yields(target)
            prob = PackProblem.build(
                [PackJob(j.spec.tasks, j.spec.cpu_need * y, j.spec.mem) for j, y in zip(jobs, ys, strict=True)], caps
            )
            return mcb_pack(prob, 1.0, "MCB8"), ys

        # All yields reach 1 at or below lo, and the 0.01 floor at or above hi.
        lo = min((f + period) / (j.vt + period) for j, f in zip(jobs, flows, strict=True))
        hi = max((f + period) / (j.vt + MIN_STRETCH_YIELD * period) for j, f in zip(jobs, flows, strict=True))
        best = pack(lo)
        if best[0] is None:
            best = pack(hi)
            if best[0] is None:
                return None
            while hi / lo - 1.0 > self.accuracy:
                mid = math.sqrt(lo * hi)
                got = pack(mid)
                if got[0] is None:
                    lo = mid
                else:
                    hi, best = mid, got
        task_host, ys = best
        names = _relabel(snap, jobs, [int(i) for i in task_host])
        placements: dict[str, tuple[str, ...]] = {}
        k = 0
        for j in jobs:
            placements[j.id] = tuple(names[int(i)] for i in task_host[k : k + j.spec.tasks])
            k += j.spec.tasks
        specs = {j.id: j.spec for j in jobs}
        cpus = raise_yields(placements, specs, snap.hosts, {j.id: y for j, y in zip(jobs, ys, strict=True)})
        return {j: (placements[j], cpus[j]) for j in placements}

    # ---- from a packing to actions ----------------------------------------------------------------

    @staticmethod
    def _plan(
        snap: Snapshot, result: dict[str, tuple[tuple[str, ...], float]], considered: list[JobView] | None = None
    ) -> Plan:
        """``considered``: the jobs in submission order (then id), as :attr:`Snapshot.running` sorts them."""
        actions: list[Action] = []
        running, paused, pending = JobState.RUNNING, JobState.PAUSED, JobState.PENDING  # (enum lookups cost)
        for job in snap.running if considered is None else considered:
            if job.state is running and job.spec.id not in result:
                actions.append(Pause(job.spec.id))
        for job_id, (hosts, cpu) in result.items():
            job = snap.jobs[job_id]
            if job.state is pending:
                actions.append(Start(job_id, hosts, cpu))
            elif job.state is paused:
                actions.append(Resume(job_id, hosts, cpu))
            else:
                moved = _moved_hosts(job.hosts, hosts)
                if moved is not None:
                    actions.append(Move(job_id, moved))
                if abs(job.cpu - cpu) > EPS:
                    actions.append(SetShare(job_id, cpu))
        return Plan(tuple(actions))


def _greedy_hosts(spec: JobSpec, info: _HostInfo, load: list[float], used: list[float]) -> list[int] | None:
    """:func:`coordinator.policies.base.greedy_placement` on host positions: among hosts with memory for
    one more task, the lowest relative CPU load with the task (then without it, then the first listed) takes
    it. ``load`` gains the placed tasks' needs (the caller's max-min loads); None if some task does not fit."""
    cpu, mem = info.cpu, info.mem
    free_mem = [m - u for m, u in zip(mem, used, strict=True)]
    need = spec.cpu_need
    heap = [((load[i] + need) / cpu[i], load[i] / cpu[i], i) for i in range(len(cpu))
            if free_mem[i] + EPS >= spec.mem]
    heapq.heapify(heap)
    placed: list[int] = []
    for _ in range(spec.tasks):
        if not heap:
            return None
        *_, best = heapq.heappop(heap)
        placed.append(best)
        load[best] += spec.cpu_need
        free_mem[best] -= spec.mem
        if free_mem[best] + EPS >= spec.mem:
            heapq.heappush(heap, ((load[best] + need) / cpu[best], load[best] / cpu[best], best))
    return placed


def _caps(hosts: Sequence[Host]) -> Hosts:
    """The packing's host capacities: the count alone when every host is a unit host (same arrays)."""
    if all(h.cpu == 1.0 and h.mem == 1.0 for h in hosts):
        return len(hosts)
    return tuple((h.cpu, h.mem) for h in hosts)


# MCB8's result depends only on the jobs' (tasks, need, memory) in order and on the hosts, not on time:
# between two periods in which no job arrived or left, a repacking recomputes the same packing. These
# caches return it without rerunning the search (the policy stays a pure function; only repeated work
# is saved). Bounded, so a long run does not grow them.


def _problem_arrays(jobs: tuple[tuple[int, float, float], ...], caps: Hosts) -> tuple[np.ndarray, ...]:
    """The arrays of the packing problem of ``jobs`` ((tasks, need, mem) each) on ``caps``, as
    PackProblem.build makes them: per job need, memory and task count, each task's job, the hosts' capacities."""
    need = np.array([j[1] for j in jobs], dtype=float)
    mem = np.array([j[2] for j in jobs], dtype=float)
    ntasks = np.array([j[0] for j in jobs], dtype=np.int64)
    task_job = np.repeat(np.arange(len(jobs), dtype=np.int64), ntasks)
    return (need, mem, ntasks, task_job, *_host_arrays(caps))


@lru_cache(maxsize=256)
def _allocate(jobs: tuple[tuple[int, float, float], ...], caps: Hosts, accuracy: float) -> Allocation | None:
    """``mcb_allocate([PackJob(*j) for j in jobs], caps, "MCB8", accuracy)`` on the problem PackProblem.build
    would make, built without its input checks: the jobs come from validated JobSpecs (need in (0, 1],
    memory in [0, 1])."""
    need, mem, ntasks, task_job, cpu_cap, mem_cap = _problem_arrays(jobs, caps)
    pack_jobs = tuple(PackJob(*j) for j in jobs)
    prob = PackProblem(pack_jobs, need, mem, ntasks, task_job, need[task_job], mem[task_job], cpu_cap, mem_cap)
    return mcb_search(prob, "MCB8", accuracy)


class _Kept:
    """The results of a function for its last ``size`` inputs, keyed on its array arguments' bytes (hashed
    and compared in C). Not functools.lru_cache: that cannot key on arrays, and rebuilding the arrays from
    bytes would make them read-only, which is another numba signature for the kernels (loaded from the
    disk cache mid-run); so the caller computes with its own arrays on a miss."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.items: OrderedDict[tuple, object] = OrderedDict()

    def get(self, key: tuple, compute: Callable[[], T]) -> T:
        items = self.items
        if key in items:
            items.move_to_end(key)
            return items[key]  # type: ignore[return-value]
        got = items[key] = compute()
        if len(items) > self.size:
            items.popitem(last=False)
        return got


# The repacking's two caches (see above): about one repacking in four packs the very jobs of an earlier one,
# and about one in five also meets them in the same priority order (nothing arrived or ended and the
# priorities kept their order), so that the removal count is known.
_ALLOCATIONS = _Kept(256)
_REMOVALS = _Kept(256)


def _allocate_flat(
    need: np.ndarray, mem: np.ndarray, ntasks: np.ndarray, info: _HostInfo, accuracy: float
) -> tuple[np.ndarray, np.ndarray] | None:
    """:func:`_allocate` of the jobs whose need, memory and task count are ``need``, ``mem`` (float64) and
    ``ntasks`` (int64), as arrays: every task's packing host (jobs in order) and every job's CPU fraction
    (``Allocation.cpu``, need x yield), read-only; without the Allocation's per-job tuples. Kept for the
    last few hundred inputs."""
    key = (need.tobytes(), mem.tobytes(), ntasks.tobytes(), info.caps, accuracy)
    return _ALLOCATIONS.get(key, lambda: _allocation_arrays(need, mem, ntasks, info, accuracy))


def _allocation_arrays(
    need: np.ndarray, mem: np.ndarray, ntasks: np.ndarray, info: _HostInfo, accuracy: float
) -> tuple[np.ndarray, np.ndarray] | None:
    """:func:`_allocate_flat`, computed (the packing problem's arrays as :func:`_problem_arrays` builds them)."""
    task_job = np.repeat(np.arange(need.shape[0], dtype=np.int64), ntasks)
    task_need, task_mem = need[task_job], mem[task_job]
    cpu_cap, mem_cap = info.capc, info.capm  # _host_arrays(info.caps), made once
    if mcb8_search is not None and min_yield is not None and task_job.shape[0] and accuracy > 0.0:
        got = mcb8_yields_compiled(need, task_job, task_need, task_mem, cpu_cap, mem_cap, accuracy)
    else:  # the PackJob objects only here: building them cost 4% of a 1,000-job simulation
        pack_jobs = tuple(PackJob(*j) for j in zip(ntasks.tolist(), need.tolist(), mem.tolist(), strict=True))
        got = mcb8_yields(PackProblem(pack_jobs, need, mem, ntasks, task_job, task_need, task_mem, cpu_cap, mem_cap),
                          accuracy)
    if got is None:
        return None
    th, yields = got
    cpu = need * yields
    th.flags.writeable = False
    cpu.flags.writeable = False
    return th, cpu


def _removal_count(need: np.ndarray, mem: np.ndarray, ranks: np.ndarray, tasks: np.ndarray, info: _HostInfo) -> int:
    """``mcb8_removals`` on these arrays and hosts, kept for the last few hundred inputs."""
    assert mcb8_removals is not None
    key = (need.tobytes(), mem.tobytes(), ranks.tobytes(), tasks.tobytes(), info.caps)
    return _REMOVALS.get(key, lambda: int(mcb8_removals(need, mem, ranks, tasks, info.capc, info.capm, *info.limits)))


def _fits(c: np.ndarray, m: np.ndarray, capc: np.ndarray, capm: np.ndarray, limits: tuple[float, float, float]) -> bool:
    """``mcb_pack(PackProblem.build(jobs, hosts), 1.0, "MCB8") is not None`` for the tasks' CPU and memory
    requirements ``c`` and ``m`` (at least one task), with the hosts' totals precomputed: ``limits`` is
    (total CPU, total memory, largest memory). The same checks on the same arrays, then the same pass."""
    cpu_total, mem_total, mem_max = limits
    if float(c.sum()) > cpu_total + EPS * c.shape[0]:
        return False
    if float(m.sum()) > mem_total + EPS or not float(m.max()) <= mem_max + EPS:
        return False
    return _pass_mcb8(c, m, capc, capm) is not None


@dataclass(frozen=True)
class _Repacking:
    """The jobs one repacking places (running, paused and pending) in submission order (then id), with
    what the removal search and the packing read of them, as arrays built once per repacking: both then
    take the arrays of the jobs they keep by a mask, where they used to build them again from the views."""

    jobs: list[JobView]
    #: each job's place in priority order (001 Sec. III-A; 0 is the lowest priority, set aside first)
    rank: np.ndarray
    tasks: np.ndarray  # int64, per job
    need: np.ndarray  # float64: the CPU need of each task
    mem: np.ndarray  # float64: the memory of each task
    running: np.ndarray  # bool

    @classmethod
    def of(cls, snap: Snapshot) -> _Repacking:
        # Sorted on key tuples built once (ids are unique, so a comparison never reaches the view).
        keyed = [(j.spec.submit_time, j.spec.id, j) for j in snap.jobs.values() if j.state in _CONSIDERED]
        keyed.sort()
        jobs = [k[2] for k in keyed]
        specs = [j.spec for j in jobs]
        n = len(jobs)
        submit = np.array([k[0] for k in keyed], dtype=float)
        vt = np.array([j.vt for j in jobs], dtype=float)
        # coordinator.metrics.priority(flow time, vt) = max(30 s, flow)/vt², infinite while vt is 0, on
        # arrays (the same IEEE operations, so the same values). The order is that of sorting on (priority,
        # -submit time, id): np.lexsort is stable, and the jobs are already in (submit time, id) order.
        priority = np.full(n, math.inf)
        has = vt > 0.0
        v = vt[has]
        priority[has] = np.maximum(snap.now - submit[has], STRETCH_BOUND_S) / (v * v)
        rank = np.empty(n, dtype=np.int64)
        rank[np.lexsort((-submit, priority))] = np.arange(n, dtype=np.int64)
        running = JobState.RUNNING
        return cls(
            jobs,
            rank,
            np.array([s.tasks for s in specs], dtype=np.int64),
            np.array([s.cpu_need for s in specs], dtype=float),
            np.array([s.mem for s in specs], dtype=float),
            np.array([j.state is running for j in jobs], dtype=bool),
        )

    def kept(self, removed: int) -> list[JobView]:
        """The jobs left when the ``removed`` lowest-priority ones are set aside, in submission order."""
        return list(compress(self.jobs, (self.rank >= removed).tolist()))


@dataclass(frozen=True)
class _HostInfo:
    """What the packing and the relabelling derive from the hosts alone (the same at every event)."""

    caps: Hosts
    capc: np.ndarray  # per host CPU capacity (PackProblem's cpu_cap); read, never written
    capm: np.ndarray  # per host memory capacity
    limits: tuple[float, float, float]  # total CPU, total memory, largest memory (see _fits)
    index: dict[str, int]  # host name -> position
    names: tuple[str, ...]
    cpu: tuple[float, ...]  # Host.cpu, Host.mem per position
    mem: tuple[float, ...]
    groups: tuple[tuple[int, ...], ...]  # positions of hosts of identical capacity, groups of two or more
    #: host positions of a job's hosts tuple, kept while it is seen again (a job keeps its hosts across
    #: most decisions); derived data, like the caches below, so the policy stays a pure function
    positions: dict[tuple[str, ...], np.ndarray] = field(default_factory=dict, compare=False, hash=False)

    def at(self, hosts: tuple[str, ...]) -> np.ndarray:
        """The positions of ``hosts``, as int64."""
        return host_positions(self.positions, self.index, hosts)


_LAST_HOSTS: list[tuple[tuple[Host, ...], _HostInfo | None]] = [((), None)]


def _host_info(hosts: Sequence[Host]) -> _HostInfo:
    """The :class:`_HostInfo` of ``hosts``, kept for the last host list seen: the engine hands every
    snapshot the same Host objects, so the comparison is one identity check per host."""
    last, info = _LAST_HOSTS[0]
    hosts = tuple(hosts)
    if info is not None and last == hosts:
        _LAST_HOSTS[0] = (hosts, info)  # equal hosts may be other objects (a new run): the next check is quick
        return info
    caps = _caps(hosts)
    capc, capm = _host_arrays(caps)
    groups: dict[tuple[float, float], list[int]] = {}
    for i, h in enumerate(hosts):
        groups.setdefault((h.cpu, h.mem), []).append(i)
    info = _HostInfo(
        caps=caps,
        capc=capc,
        capm=capm,
        limits=(float(capc.sum()), float(capm.sum()), float(capm.max())),
        index={h.name: i for i, h in enumerate(hosts)},
        names=tuple(h.name for h in hosts),
        cpu=tuple(h.cpu for h in hosts),
        mem=tuple(h.mem for h in hosts),
        groups=tuple(tuple(g) for g in groups.values() if len(g) >= 2),
    )
    _LAST_HOSTS[0] = (hosts, info)
    return info


def _relabel(snap: Snapshot, jobs: list[JobView], task_host: list[int]) -> tuple[str, ...]:
    """Host name for each packing host index, keeping as many tasks in place as possible.

    Only hosts of identical capacity are swapped. ``task_host`` lists the packing's host of every task,
    jobs in order and tasks in order within a job.
    """
    info = _host_info(snap.hosts)
    index = info.index
    running = JobState.RUNNING
    bins: list[int] = []  # the packing's host of every task now running, and that task's current host
    now_on: list[int] = []
    k = 0
    for j in jobs:
        tasks = j.spec.tasks
        if j.state is running:
            m = min(tasks, len(j.hosts))
            bins += task_host[k : k + m]
            now_on += map(index.__getitem__, j.hosts[:m])
        k += tasks
    perm = _assign(np.asarray(bins, dtype=np.int64).tobytes(), np.asarray(now_on, dtype=np.int64).tobytes(),
                   len(info.names), info.groups)
    return tuple(map(info.names.__getitem__, perm.tolist()))


# Between two periods in which nothing arrived, ended or moved, a repacking meets the same tasks on the
# same hosts (about 40% of the assignments of a 1,000-job DYNMCB8-ASAP-PER run repeat the previous one):
# the assignment, a function of these arguments alone, is then not solved again. (The task lists are
# keyed as the bytes of their int64 arrays: hashed and compared in C.)
@lru_cache(maxsize=64)
def _assign(bins: bytes, now_on: bytes, n: int, groups: tuple[tuple[int, ...], ...]) -> np.ndarray:
    """The relabelling's assignment, as the host position that each packing host becomes (read-only):
    ``bins[k]`` (int64) is the packing host of a running task now on host position ``now_on[k]``; hosts
    of a group are matched so as to keep the most tasks in place."""
    # stay[bin, host]: tasks now on host that the bin holds
    stay = np.bincount(np.frombuffer(bins, dtype=np.int64) * n + np.frombuffer(now_on, dtype=np.int64),
                       minlength=n * n).astype(float).reshape(n, n)
    perm = np.arange(n, dtype=np.int64)
    for members in groups:
        sub = stay if len(members) == n else stay[np.ix_(members, members)]
        rows, cols = linear_sum_assignment(sub, maximize=True)
        for r, c in zip(rows.tolist(), cols.tolist(), strict=True):
            perm[members[r]] = members[c]
    perm.flags.writeable = False
    return perm


def _moved_hosts(hosts: tuple[str, ...], new_hosts: tuple[str, ...]) -> tuple[str, ...] | None:
    """The job's hosts after moving only the tasks whose host is not among the new hosts (as a multiset),
    each to a host the new placement has to spare (in task order, spares in first-seen order); None if no
    task moves. A moving task never lands on its own host: that host had no place left for it."""
    if hosts == new_hosts:  # the common case after relabelling: every task stays
        return None
    wanted: dict[str, int] = {}  # a Counter of the new hosts, in first-seen order (a dict is faster here)
    for h in new_hosts:
        wanted[h] = wanted.get(h, 0) + 1
    moving = []  # the tasks whose host is not (or no longer) wanted, in task order
    for i, h in enumerate(hosts):
        left = wanted.get(h, 0)
        if left:
            wanted[h] = left - 1
        else:
            moving.append(i)
    if not moving:
        return None
    out = list(hosts)
    spare = [h for h, left in wanted.items() if left for h in [h] * left]  # Counter.elements(): in order
    for i, h in zip(moving, spare, strict=True):
        out[i] = h
    return tuple(out)


def dynmcb8() -> DynMcb8:
    return DynMcb8()


def dynmcb8_per(period: float = DEFAULT_PERIOD_S) -> DynMcb8:
    return DynMcb8(name=period_name("dynmcb8-per", period), period_s=period)


def dynmcb8_asap_per(period: float = DEFAULT_PERIOD_S) -> DynMcb8:
    return DynMcb8(name=period_name("dynmcb8-asap-per", period), period_s=period, asap=True)


def dynmcb8_stretch_per(period: float = DEFAULT_PERIOD_S) -> DynMcb8:
    return DynMcb8(name=period_name("dynmcb8-stretch-per", period), period_s=period, stretch=True)
