"""Which emulated hosts go on which Ray node (pure: no Ray import, no I/O).

Hosts are shared out in proportion to the nodes' Ray CPUs, by largest remainder (:func:`host_counts`), so
that each emulated host gets about the same part of a node (the default cores of a host are a node's CPUs
divided among the hosts placed on it): on a 2-CPU and a 1-CPU node, ``--hosts 3`` puts two hosts on the
first and one on the second, three hosts of 0.6 cores, where dealing them round-robin gave one host of
1 core and two of 0.3 when the 1-CPU node came first. On nodes of equal CPUs this is the round-robin of
before: ``--hosts N`` on ``K`` nodes puts ``ceil(N/K)`` hosts on the first ``N mod K`` nodes in node-id
order and ``floor(N/K)`` on the others. The same cluster always yields the same placement. A node that
offers Ray no CPU (a head started with ``--num-cpus=0``, the usual way of keeping work off the head) gets
no hosts.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from fractions import Fraction
from itertools import count

from coordinator.raycluster import RayNode

#: Share of a node's CPUs given to its emulated hosts by default (the rest: agent, Ray, the coordinator).
DEFAULT_CPU_FRACTION = 0.6


@dataclass(frozen=True)
class HostPlacement:
    """The host of one agent actor and the node it is pinned to (a tuple: an actor serves the agent API,
    which can hold several hosts, but placement gives each emulated host its own actor)."""

    node: RayNode
    agent_id: str
    hosts: tuple[dict, ...]  # {"name", "cpu_cores", "memory_bytes"}: HostSpec fields, plain for Ray

    @property
    def label_selector(self) -> dict[str, str]:
        """The node's own id label: a hard constraint, so the actor runs on this node or not at all."""
        return {"ray.io/node-id": self.node.node_id}


def place_hosts(nodes: Sequence[RayNode], hosts: int, cpus_per_host: float | None, memory_bytes: int,
                tag: str = "ray") -> list[HostPlacement]:
    """One :class:`HostPlacement` (one agent actor) per emulated host, pinned to its node; the nodes with CPUs
    carry hosts in proportion to their Ray CPUs (:func:`host_counts`). ``cpus_per_host`` None: each node's
    hosts share :data:`DEFAULT_CPU_FRACTION` of its Ray CPUs (at most one core each: a task is one process).

    Raises ValueError naming the setting when there is nothing to place on or a value is out of range."""
    if hosts < 1:
        raise ValueError(f"--hosts: must be >= 1, got {hosts}")
    if memory_bytes <= 0:
        raise ValueError(f"--mem-per-host: must be > 0, got {memory_bytes}")
    if cpus_per_host is not None and cpus_per_host <= 0:
        raise ValueError(f"--cpus-per-host: must be > 0, got {cpus_per_host}")
    usable = sorted((n for n in nodes if n.cpus > 0), key=lambda n: n.node_id)
    if not usable:
        raise ValueError(f"--ray: the cluster has no alive node with CPUs to place hosts on ({len(nodes)} nodes)")
    counts = host_counts([n.cpus for n in usable], hosts)
    out = []
    for k, (node, n) in enumerate(zip(usable, counts, strict=True)):
        if n == 0:  # fewer hosts than nodes: this node stays empty (and has no share to divide)
            continue
        cores = cpus_per_host if cpus_per_host is not None else round(min(1.0, DEFAULT_CPU_FRACTION * node.cpus / n), 3)
        for i in range(n):  # one actor per emulated host (issue 6: "each emulated host is a Ray actor")
            name = f"{tag}{k}-h{i}"
            spec = {"name": name, "cpu_cores": cores, "memory_bytes": memory_bytes}
            out.append(HostPlacement(node, f"{name}-{node.node_id[:8]}", (spec,)))
    return out


def actor_name(agent_id: str) -> str:
    """The Ray name of an agent's actor (in the ``vcemu`` namespace)."""
    return f"vcemu-agent-{agent_id}"


def free_placements(nodes: Sequence[RayNode], hosts: int, cpus_per_host: float | None, memory_bytes: int,
                    tag: str, taken: Collection[str]) -> list[HostPlacement]:
    """:func:`place_hosts` with the first tag of ``tag``, ``tag-2-``, ``tag-3-``, ... none of whose agents' actor names
    (:func:`actor_name`) is in ``taken`` (the names of the named actors alive on the cluster). An agent id also names
    the agent's cgroups on its node, and an agent that starts removes what it finds there under its id: a second run
    on the same Ray cluster (a ``vcemu replay --ray`` beside a ``vcemu up --ray``) must not take the first one's
    ids, nor Ray its actors' names."""
    for n in count(1):
        # (not ``tag2-``: the second run's host ``ray2-0-h0`` beside the first run's ``ray2-h0`` read alike)
        placements = place_hosts(nodes, hosts, cpus_per_host, memory_bytes, tag if n == 1 else f"{tag}-{n}-")
        if not any(actor_name(p.agent_id) in taken for p in placements):
            return placements
    raise AssertionError("unreachable")


def host_counts(cpus: Sequence[float], hosts: int) -> list[int]:
    """How many of ``hosts`` emulated hosts go on each node of ``cpus`` (its Ray CPUs, all > 0): in proportion
    to the CPUs, by largest remainder (Hamilton's method).

    Why this rule: a host's default cores are its node's CPUs divided among the node's hosts, so hosts are equal
    when every node carries hosts in proportion to its CPUs. Each node gets the whole part of its quota
    ``hosts * cpus / sum(cpus)``, and the hosts left over go one each to the nodes with the largest fractional
    parts; a tie goes to the node where the extra host gets more CPUs (``cpus / (count + 1)``), then to the
    earlier node. Every node's count is its quota rounded down or up, so no node is more than one host away
    from its fair part; on equal nodes the quotas are equal and the extra hosts go to the first
    ``hosts mod len(cpus)`` nodes, the round-robin of before. Exact arithmetic (fractions of the CPU counts),
    so that equal nodes tie exactly and rounding never reorders them."""
    if not cpus or any(c <= 0 for c in cpus):
        raise ValueError(f"host_counts: every node needs CPUs > 0, got {list(cpus)}")
    shares = [Fraction(c) for c in cpus]
    total = sum(shares)
    quotas = [hosts * c / total for c in shares]
    counts = [q.numerator // q.denominator for q in quotas]
    left = hosts - sum(counts)
    order = sorted(range(len(shares)),
                   key=lambda i: (-(quotas[i] - counts[i]), -shares[i] / (counts[i] + 1), i))
    for i in order[:left]:
        counts[i] += 1
    return counts
