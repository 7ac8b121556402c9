"""Registration with a coordinator (``--coordinator``): RegisterAgent once it is reachable, then a
Heartbeat every 2 s; re-register when the coordinator forgets the agent or becomes unreachable."""

from __future__ import annotations

import logging
import threading

import grpc

from node_agent.server import RunningAgent, describe
from vcemu.v1 import coordinator_pb2, coordinator_pb2_grpc

log = logging.getLogger(__name__)
HEARTBEAT_S = 2.0
MAX_BACKOFF_S = 10.0


class Registrar:
    """Background thread keeping an agent registered; :meth:`stop` ends it."""

    def __init__(self, agent: RunningAgent, coordinator: str, advertise: str) -> None:
        self._agent, self._coordinator, self._advertise = agent, coordinator, advertise
        self._stop = threading.Event()
        self.registered = threading.Event()
        self._thread = threading.Thread(target=self._run, name="registrar", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5.0)

    def _run(self) -> None:
        with grpc.insecure_channel(self._coordinator) as channel:
            stub = coordinator_pb2_grpc.CoordinatorStub(channel)
            backoff = 0.5
            while not self._stop.is_set():
                try:
                    if not self.registered.is_set():
                        stub.RegisterAgent(coordinator_pb2.RegisterAgentRequest(
                            address=self._advertise, description=describe(self._agent.core)), timeout=5.0)
                        self.registered.set()
                        log.info("registered with coordinator %s as %s", self._coordinator, self._advertise)
                    reply = stub.Heartbeat(coordinator_pb2.HeartbeatRequest(
                        agent_id=self._agent.core.agent_id), timeout=5.0)
                    if not reply.known:
                        self.registered.clear()
                        continue
                    backoff, wait = 0.5, HEARTBEAT_S
                except grpc.RpcError as e:
                    if self.registered.is_set() or backoff == 0.5:
                        log.warning("coordinator %s: %s; retrying", self._coordinator, e.code().name)
                    self.registered.clear()
                    wait, backoff = backoff, min(MAX_BACKOFF_S, backoff * 2)
                self._stop.wait(wait)
