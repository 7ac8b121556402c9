"""A node agent as a Ray actor: the same agent (:func:`node_agent.server.start_agent`: AgentCore, runner,
cgroup drivers, gRPC ``vcemu.v1.Agent`` + health) started inside a Ray worker on the node Ray placed it on.

The actor does what ``vcemu agent --coordinator ADDR`` does, and nothing else: it serves the agent API
on its node's address and keeps itself registered with the coordinator (:class:`~node_agent.register.
Registrar`: RegisterAgent, then Heartbeat every 2 s). Everything starts in ``__init__``, so when Ray
restarts a crashed actor (``max_restarts``), the new incarnation, with the same agent id, removes the
cgroups and processes its predecessor left (:func:`node_agent.agent.open_core`) and registers again.

This module imports Ray only when :func:`remote_class` is called; the class itself is plain Python and
runs (and is tested) without Ray.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from typing import Any

from node_agent.agent import HostSpec
from vcemu.ports import dial_address


@dataclass(frozen=True)
class ActorInfo:
    """What an agent actor reports about itself (all plain values, so it crosses Ray unchanged)."""

    agent_id: str
    address: str
    node_id: str
    pid: int
    mode: str
    hosts: tuple[str, ...]


class HostAgentActor:
    """One agent emulating ``hosts``; serves gRPC on ``bind`` (an ephemeral port) and registers with
    ``coordinator`` (``HOST:PORT``). ``bind`` None: this node's IP as Ray reports it. ``spares``: ``vcemu agent
    --spares`` (:mod:`node_agent.spares`), none by default: a Ray worker's memory may be tight (the KubeRay worker
    pod's limit), and each idle spare holds about 30 MB."""

    def __init__(self, agent_id: str, hosts: list[dict[str, Any]], coordinator: str, bind: str | None = None,
                 no_cgroups: bool = False, spares: int = 0, token: str | None = None) -> None:
        from node_agent.register import Registrar
        from node_agent.server import start_agent

        self._node_id = _ray_node_id()
        if bind is None:
            bind = _ray_node_ip()
        specs = [HostSpec(h["name"], float(h["cpu_cores"]), int(h["memory_bytes"])) for h in hosts]
        self.agent = start_agent(specs, agent_id, port=0, bind=bind, no_cgroups=no_cgroups, spares=spares,
                                 token=token)  # (its API wants the token the coordinator sends)
        # Listening on every interface (0.0.0.0, ::): the coordinator must dial this node's address, not the wildcard.
        self.address = dial_address(bind, self.agent.port, _ray_node_ip())
        self.registrar = Registrar(self.agent, coordinator, self.address, token=token)

    def info(self) -> dict[str, Any]:
        core = self.agent.core
        return asdict(ActorInfo(core.agent_id, self.address, self._node_id, os.getpid(), core.mode,
                                tuple(core.hosts)))

    def registered(self, timeout_s: float = 0.0) -> bool:
        """Has the coordinator accepted this agent (waiting up to ``timeout_s``)?"""
        return self.registrar.registered.wait(timeout_s)

    def shutdown(self) -> bool:
        """Stop registering, kill the agent's tasks and remove its cgroups. Idempotent."""
        if self.registrar is not None:
            self.registrar.stop()
            self.registrar = None  # type: ignore[assignment]
        if self.agent is not None:
            self.agent.stop()
            self.agent = None  # type: ignore[assignment]
        return True


def remote_class() -> Any:
    """:class:`HostAgentActor` as a Ray actor class. It asks for no CPU: its hosts' CPU is enforced by
    the agent's cgroups, not by Ray's accounting, and a node's Ray CPUs stay free for other work (a sweep)."""
    import ray

    return ray.remote(num_cpus=0, max_concurrency=4)(HostAgentActor)


def _ray_node_id() -> str:
    try:
        import ray

        return ray.get_runtime_context().get_node_id() if ray.is_initialized() else ""
    except ImportError:
        return ""


def _ray_node_ip() -> str:
    import ray

    return ray.util.get_node_ip_address()
