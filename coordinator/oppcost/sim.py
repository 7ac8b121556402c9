"""Discrete-event simulator of seed 004's cluster model (Sec. 2), driving one opportunity-cost method.

Why not the engine's simulator backend: 004's model lets memory be over-committed (the machine then thrashes,
slowed by ``beta``) and shares each machine's CPU equally between its processes, whereas the engine forbids
memory over-commit and gives jobs assigned CPU fractions. This simulator holds exactly 004's model and nothing
else; the decisions come from the pure :mod:`coordinator.policies.opportunity_cost`.

Mechanics. Between events every process on machine ``i`` progresses at the same rate
``speed_i / L_eff(i)`` (fair sharing, thrashing), so each machine keeps one counter ``V_i`` of work delivered to
each of its processes; a process finishes when ``V_i`` reaches the threshold it was given on arrival there.
Events are arrivals, completions, the end of a migration, and (for Mosix and E-Mosix) the balancing interval
every ``interval`` seconds. When a balancing interval makes no move and no move would be possible even with
full knowledge of every node, nothing can change until the next arrival or completion, so the simulator skips
the idle intervals up to then (the random windows of skipped intervals are not drawn; results stay seeded and
reproducible).

Migration cost: 004's Java simulation ignores it (Sec. 5), which is our default. With
``migration_fixed`` / ``migration_per_mb`` set, a moving process spends that long in transit, on no machine
and making no progress.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from coordinator.policies.opportunity_cost import Method, Proc, View, rate
from workloads.oppcost_mix import ProcSpec

_EPS = 1e-9


class SimulationTooLong(RuntimeError):
    """:func:`simulate` passed its ``max_time``: its processes progress too slowly to finish (a huge thrashing
    factor ``beta`` or migration transit time). Its own class so that a caller can report it as a consequence of
    its settings rather than as a bug."""


@dataclass
class SimResult:
    method: str
    slowdowns: list[float]
    migrations: int
    makespan: float
    completions: dict[int, float] = field(default_factory=dict)

    @property
    def mean_slowdown(self) -> float:
        return sum(self.slowdowns) / len(self.slowdowns) if self.slowdowns else math.nan


@dataclass
class _Machine:
    procs: dict[int, Proc] = field(default_factory=dict)
    heap: list[tuple[float, int]] = field(default_factory=list)  # (threshold, pid), lazily cleaned
    v: float = 0.0
    mem: float = 0.0


def simulate(stream: list[ProcSpec], machines: tuple, method: Method, seed: int, interval: float = 1.0,
             migration_fixed: float = 0.0, migration_per_mb: float = 0.0,
             max_time: float = 1e9, observe: Callable[[float, View, int], None] | None = None) -> SimResult:
    """Run ``stream`` on ``machines`` under ``method``; returns per-process slowdowns (in pid order).

    ``observe(now, view, machine)``, if given, is called after each arrival's placement with the snapshot the
    method decided on and the machine it chose (``vcemu oppcost --explain`` uses it).

    ``seed`` drives the method's random choices (windows, node order). ``max_time`` guards against a run that
    never ends; reaching it raises :class:`SimulationTooLong` naming the unfinished processes' count.
    """
    if interval <= 0:
        raise ValueError(f"interval must be > 0, got {interval}")
    rng = random.Random(seed)
    n = len(machines)
    ms = [_Machine() for _ in range(n)]
    specs = {s.pid: s for s in stream}
    where: dict[int, int] = {}  # pid -> machine
    threshold: dict[int, float] = {}
    remaining_in_transit: dict[int, float] = {}
    transit: list[tuple[float, int, int]] = []  # (arrival time, pid, dst)
    done: dict[int, float] = {}
    migrations = 0
    now = 0.0
    arrivals = sorted(stream, key=lambda s: (s.arrival, s.pid))
    ai = 0
    next_tick = math.inf
    dormant = True

    def rates() -> list[float]:
        return [rate(machines[i], len(m.procs), m.mem, method.beta) for i, m in enumerate(ms)]

    def view() -> View:
        return View(tuple(machines), [sorted(m.procs.values(), key=lambda p: p.pid) for m in ms])

    def place(pid: int, i: int, work_left: float) -> None:
        s = specs[pid]
        m = ms[i]
        m.procs[pid] = Proc(pid, s.mem, s.arrival)
        m.mem += s.mem
        threshold[pid] = m.v + work_left
        heapq.heappush(m.heap, (threshold[pid], pid))
        where[pid] = i

    def remove(pid: int) -> float:
        i = where.pop(pid)
        m = ms[i]
        del m.procs[pid]
        m.mem -= specs[pid].mem
        if not m.procs:
            m.mem = 0.0
        return max(threshold.pop(pid) - m.v, 0.0)

    def wake() -> None:
        nonlocal dormant, next_tick
        if method.migrates and dormant:
            dormant = False
            next_tick = math.floor(now / interval + _EPS) * interval + interval

    while ai < len(arrivals) or where or transit:
        r = rates()
        t_complete, i_complete = math.inf, -1
        for i, m in enumerate(ms):
            while m.heap and (m.heap[0][1] not in m.procs or threshold.get(m.heap[0][1]) != m.heap[0][0]):
                heapq.heappop(m.heap)
            if m.heap and r[i] > 0:
                t = now + max(m.heap[0][0] - m.v, 0.0) / r[i]
                if t < t_complete:
                    t_complete, i_complete = t, i
        t_arrival = arrivals[ai].arrival if ai < len(arrivals) else math.inf
        t_transit = transit[0][0] if transit else math.inf
        t_next = min(t_complete, t_arrival, t_transit, next_tick)
        if t_next > max_time:
            raise SimulationTooLong(f"{method.name}'s simulation passed max_time={max_time:g} s with "
                                    f"{len(where) + len(transit)} processes unfinished")
        for i, m in enumerate(ms):
            m.v += r[i] * (t_next - now)
        now = t_next
        if t_next == t_complete:
            m = ms[i_complete]
            # every process on this machine whose threshold is reached finishes now
            while m.heap and m.heap[0][0] <= m.v + _EPS * max(1.0, abs(m.v)):
                thr, pid = heapq.heappop(m.heap)
                if pid in m.procs and threshold.get(pid) == thr:
                    remove(pid)
                    done[pid] = now
            wake()
        elif t_next == t_arrival:
            while ai < len(arrivals) and arrivals[ai].arrival <= now:
                s = arrivals[ai]
                ai += 1
                snapshot = view()
                dst = method.assign(snapshot, s.mem, s.origin, rng)
                if observe is not None:
                    observe(now, snapshot, dst)
                place(s.pid, dst, s.work)
            wake()
        elif t_next == t_transit:
            _, pid, dst = heapq.heappop(transit)
            place(pid, dst, remaining_in_transit.pop(pid))
            wake()
        else:  # balancing interval
            moves = method.rebalance(view(), rng) if where else []
            for mv in moves:
                left = remove(mv.pid)
                migrations += 1
                delay = migration_fixed + migration_per_mb * specs[mv.pid].mem
                if delay > 0:
                    remaining_in_transit[mv.pid] = left
                    heapq.heappush(transit, (now + delay, mv.pid, mv.dst))
                else:
                    place(mv.pid, mv.dst, left)
            if not moves and (not where or not method.rebalance(view(), rng, full_knowledge=True)):
                dormant, next_tick = True, math.inf
            else:
                next_tick = now + interval
    slowdowns = [(done[s.pid] - s.arrival) / s.work for s in sorted(stream, key=lambda s: s.pid)]
    return SimResult(method.name, slowdowns, migrations, now, done)
