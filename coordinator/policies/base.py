"""The policy interface and the pure helpers several policies share.

A policy is a pure function of (snapshot, stimulus) returning a Plan: no I/O, no clock, no randomness
it did not receive (DESIGN.md). Policies hold only their configuration, so they are frozen dataclasses.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from coordinator.model import Host, JobSpec, Snapshot, Stimulus
from coordinator.plan import Plan
from coordinator.policies.avgyield import raise_average_yield

#: entries a host-positions cache keeps before it starts afresh (a long run places many different jobs)
POSITIONS_KEPT = 4096


def host_positions(cache: dict[tuple[str, ...], np.ndarray], index: Mapping[str, int],
                   hosts: tuple[str, ...]) -> np.ndarray:
    """The positions of ``hosts`` in a host list (``index``: name -> position), as int64, kept in ``cache``
    while the same tuple is seen again: a job keeps its hosts across most decisions, and DYNMCB8's admission
    would otherwise look up every task's host at every event (the engine's capacity check does its own pass)."""
    got = cache.get(hosts)
    if got is None:
        if len(cache) >= POSITIONS_KEPT:
            cache.clear()
        got = cache[hosts] = np.fromiter(map(index.__getitem__, hosts), dtype=np.int64, count=len(hosts))
    return got


def remember_positions(cache: dict[tuple[str, ...], np.ndarray], hosts: tuple[str, ...], positions: np.ndarray) -> None:
    """Keep (a copy of) ``positions``, the host positions of ``hosts`` that :func:`host_positions` would look
    up, for a caller that already has them: a policy that has just placed a job on them."""
    if len(cache) >= POSITIONS_KEPT:
        cache.clear()
    cache[hosts] = positions.astype(np.int64, copy=True)


EPS = 1e-9


class Policy(Protocol):
    """What the engine calls. ``period`` (seconds) asks for a periodic ``Tick()``; None for none.

    A policy may also define ``refuse(spec, hosts) -> (field, reason) | None`` to turn away, at
    submission, jobs it could never run (batch schedulers: more tasks than whole nodes), and
    ``decides_on_state = True`` when its plan depends on the snapshot alone, not on which job a Submit
    names: the engine then decides once for submissions that are due together (``Engine._merged``), and
    ``admits_on_submit = True`` when, having a period, it may still start a job at its Submit (DYNMCB8-ASAP-PER):
    the engine then offers pending jobs again when hosts are added.
    """

    name: str

    @property
    def period(self) -> float | None: ...

    def decide(self, snap: Snapshot, stim: Stimulus) -> Plan: ...


@dataclass
class HostUse:
    """What a placement puts on one host: CPU load (sum of the tasks' needs) and memory."""

    load: float = 0.0
    mem: float = 0.0


def placement_use(
    hosts: Sequence[Host], placements: Mapping[str, tuple[str, ...]], specs: Mapping[str, JobSpec]
) -> dict[str, HostUse]:
    """CPU load and memory of every host under a (tentative) placement."""
    use = {h.name: HostUse() for h in hosts}
    for job, on in placements.items():
        for h in on:
            use[h].load += specs[job].cpu_need
            use[h].mem += specs[job].mem
    return use


def add_use(use: Mapping[str, HostUse], hosts: Sequence[str], spec: JobSpec) -> None:
    """Add a job placed on ``hosts`` (one per task) to ``use``, as :func:`placement_use` adds each placed job."""
    for h in hosts:
        use[h].load += spec.cpu_need
        use[h].mem += spec.mem


def memory_room(hosts: Sequence[Host], use: Mapping[str, HostUse]) -> float:
    """The most memory free on one host under ``use``: a job whose task needs more than this plus ``EPS`` fits
    nowhere (:func:`greedy_placement` takes a host for a task while ``free + EPS >= mem``)."""
    return max((h.mem - use[h.name].mem for h in hosts), default=-math.inf)


def greedy_placement(
    spec: JobSpec, hosts: Sequence[Host], use: Mapping[str, HostUse]
) -> tuple[str, ...] | None:
    """GREEDY's task mapping (001 Sec. III-A), or None if some task does not fit.

    Among hosts with enough free memory for one task, the one with the lowest CPU load (sum of the
    needs of its tasks, relative to its capacity) once the task is added gets it; a host that cannot take
    another task is dropped. Ties go to the host listed first. ``use`` is not modified. On hosts of equal
    capacity (001's cluster) that is the host of lowest load now; on unequal ones it does not put a task
    on an idle small host, at a load of need / capacity, beside an idle large host that was listed later.
    """
    # A heap keyed on (relative load with the task, relative load, host index): only the chosen host's key changes
    # at each step, so popping it and pushing it back with its new load picks exactly what a scan for the minimum
    # would. The relative load now breaks the ties that adding the need can make of loads that differed by a
    # rounding (0.1 + 0.2 against 0.3): on equal hosts the choice is then exactly the one of the load alone.
    need = spec.cpu_need
    load = [use[h.name].load for h in hosts]
    free_mem = [h.mem - use[h.name].mem for h in hosts]
    heap = [((load[i] + need) / h.cpu, load[i] / h.cpu, i) for i, h in enumerate(hosts)
            if free_mem[i] + EPS >= spec.mem]
    heapq.heapify(heap)
    placed: list[str] = []
    for _ in range(spec.tasks):
        if not heap:
            return None
        *_, best = heapq.heappop(heap)
        placed.append(hosts[best].name)
        load[best] += spec.cpu_need
        free_mem[best] -= spec.mem
        if free_mem[best] + EPS >= spec.mem:
            heapq.heappush(heap, ((load[best] + need) / hosts[best].cpu, load[best] / hosts[best].cpu, best))
    return tuple(placed)


def max_min_yields(
    placements: Mapping[str, tuple[str, ...]], specs: Mapping[str, JobSpec], hosts: Sequence[Host]
) -> dict[str, float]:
    """Per-task CPU fraction of every placed job: the max-min yield, then the average-yield heuristic.

    Max-min (001 Sec. III-A): every job gets yield 1/max(1, Λ), Λ the largest CPU load (sum of needs over
    capacity) over all hosts — the best minimum yield for this mapping. Then :func:`raise_yields`.
    """
    cap = {h.name: h.cpu for h in hosts}
    load = dict.fromkeys(cap, 0.0)
    for job, hs in placements.items():
        for h in hs:
            load[h] += specs[job].cpu_need
    lam = max((load[h] / cap[h] for h in load), default=0.0)
    base_yield = 1.0 / max(1.0, lam)
    return raise_yields(placements, specs, hosts, dict.fromkeys(placements, base_yield))


def raise_yields(
    placements: Mapping[str, tuple[str, ...]],
    specs: Mapping[str, JobSpec],
    hosts: Sequence[Host],
    yields: Mapping[str, float],
) -> dict[str, float]:
    """The average-yield heuristic of 001 Sec. III-A from the given per-job yields; returns CPU fractions.

    Repeatedly pick, among jobs all of whose hosts still have unused CPU, the one with the lowest total
    CPU need, and raise its yield as far as its hosts allow (at most 1); it never lowers a yield. This
    is the same greedy as seed 002's average-yield step, so one implementation serves both:
    :func:`coordinator.policies.avgyield.raise_average_yield`. 001 leaves ties open; they go to the
    smaller per-task need, then to the order of ``placements`` (policies list jobs in submission order).
    """
    jobs = list(placements)
    if not jobs:
        return {}
    index = {h.name: i for i, h in enumerate(hosts)}
    task_host = np.fromiter((index[h] for j in jobs for h in placements[j]), dtype=np.int64)
    task_job = np.repeat(np.arange(len(jobs)), [len(placements[j]) for j in jobs])
    need = np.fromiter((specs[j].cpu_need for j in jobs), dtype=float, count=len(jobs))
    cap = np.fromiter((h.cpu for h in hosts), dtype=float, count=len(hosts))
    start = np.fromiter((yields[j] for j in jobs), dtype=float, count=len(jobs))
    raised = raise_average_yield(task_host, task_job, need, cap, start)
    return {j: float(raised[k]) * specs[j].cpu_need for k, j in enumerate(jobs)}


def backoff_delay(attempts: int, cap_exponent: int = 12) -> float:
    """GREEDY's bounded exponential backoff: min(2^12, 2^count) s after the count-th failure (001 III-A)."""
    return float(2 ** min(cap_exponent, attempts))
