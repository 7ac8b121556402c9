"""The Ray backend: emulated hosts on the nodes of a Ray cluster, each host a node-agent Ray actor.

Design (issue 6): each actor (:class:`node_agent.ray_actor.HostAgentActor`) runs the very agent that
``vcemu agent`` runs (AgentCore, the process runner, the cgroup v1/v2 drivers) and serves the same gRPC
``vcemu.v1.Agent`` API on its node's address; it registers with the coordinator and heartbeats like any
agent. The coordinator drives it through the unchanged live backend (:mod:`coordinator.backends.live`).
So Ray does what Ray is for here, placement (each actor pinned to its node by the node's
``ray.io/node-id`` label, :mod:`.placement`), lifecycle (start, restart after a crash, kill at the end)
and failure detection, while task control keeps one implementation and one wire contract.

Every emulated host is its own agent actor pinned to its node (issue 6), so Ray restarts, kills and
reports each host on its own; the hosts of one node share the machine's CPU like the agents of several
``vcemu agent`` processes do (each task's group is capped by its quota at its share once booted, at its host's
capacity while it boots, and each agent's parent group weighs its tasks' shares:
:class:`node_agent.cgroups.CpuWeights`).

Why not drive the actors by Ray method calls behind a transport seam in ``live.py``: that would be a
second client of AgentCore (every call, error mapping and status conversion written twice) and a second
code path for the engine's most delicate parts (two-phase migrations, retried Stops), to save one gRPC
hop per action on a path that is polled every 100 ms anyway. The gRPC route also keeps the agent's health
service on the Ray path. The actors serve no Prometheus metrics of their own (they start without a metrics
port, which nothing could discover); the coordinator's exporter reports every host (:mod:`coordinator.exporter`).

:mod:`.cluster` launches and stops the actors; :mod:`coordinator.raycluster` connects to the cluster.
"""

from coordinator.backends.ray.cluster import RayAgents, run_up
from coordinator.backends.ray.placement import HostPlacement, place_hosts

__all__ = ["HostPlacement", "RayAgents", "place_hosts", "run_up"]
