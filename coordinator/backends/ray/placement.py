"""Which emulated hosts go on which Ray node (pure: no Ray import, no I/O).

Hosts are dealt round-robin over the chosen nodes in node-id order, so ``--hosts N`` on a cluster of
``K`` nodes puts ``ceil(N/K)`` or ``floor(N/K)`` hosts on each, and the same cluster always yields the
same placement. A node that offers Ray no CPU (a head started with ``--num-cpus=0``, the usual way of
keeping work off the head) gets no hosts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

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
    """One :class:`HostPlacement` (one agent actor) per emulated host, pinned to its node.
    ``cpus_per_host`` None: each node's hosts share :data:`DEFAULT_CPU_FRACTION` of its Ray CPUs (at most
    one core each: a task is one process).

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
    counts = [hosts // len(usable) + (1 if i < hosts % len(usable) else 0) for i in range(len(usable))]
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
