"""A live backend connected to a scripted agent: any ``AgentServicer`` served by a real gRPC server on
127.0.0.1, for tests of the live backend's calls without agent processes or cgroups."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager

import grpc

from coordinator.backends.live import LiveBackend
from vcemu.v1 import agent_pb2_grpc


@contextmanager
def backend_on(servicer: agent_pb2_grpc.AgentServicer, rpc_timeout: float = 5.0) -> Iterator[LiveBackend]:
    """A :class:`LiveBackend` with ``servicer`` registered as its one agent; both closed on exit."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    agent_pb2_grpc.add_AgentServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    backend = LiveBackend(rpc_timeout=rpc_timeout)
    try:
        backend.add_agent(f"127.0.0.1:{port}")
        yield backend
    finally:
        backend.close()
        server.stop(0)
