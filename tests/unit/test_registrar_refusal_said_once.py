"""A refusal of the agent's registration is said once, not at every retry: the coordinator's refusal of an agent it
declared lost as unreachable (FAILED_PRECONDITION) names why its Describe failed, and gRPC's text for one failed
connection varies from one attempt to the next ("recvmsg:Connection reset by peer" and "getsockopt(SO_ERROR):
Connection reset by peer", alternately, live): every retry's refusal differed from the last one said, and each was
said, an ERROR line every 1-2 s for as long as the partition lasted (15 in 26 s, live review)."""

from __future__ import annotations

import logging
import time
from concurrent import futures

import grpc

from node_agent import register
from vcemu.v1 import coordinator_pb2 as pb
from vcemu.v1 import coordinator_pb2_grpc as pb_grpc


class _Refusing(pb_grpc.CoordinatorServicer):
    def __init__(self) -> None:
        self.calls = 0

    def RegisterAgent(self, request, context):  # type: ignore[no-untyped-def]
        self.calls += 1
        tail = ("recvmsg:Connection reset by peer (104)" if self.calls % 2 else
                "Failed to connect to remote host: getsockopt(SO_ERROR): Connection reset by peer")
        context.abort(grpc.StatusCode.FAILED_PRECONDITION, "agent 'r' was declared lost: unreachable; it is taken "
                      f"again once the coordinator can reach it, and cannot yet: its Describe failed: {tail}")

    def Heartbeat(self, request, context):  # type: ignore[no-untyped-def]
        return pb.HeartbeatReply(known=False)


def test_a_refusal_whose_text_varies_between_retries_is_said_once(monkeypatch, caplog) -> None:
    from node_agent.agent import AgentCore, HostSpec
    from node_agent.dutycycle import DutyCycleDriver
    from node_agent.server import RunningAgent

    monkeypatch.setattr(register, "HEARTBEAT_S", 0.2)  # (retries every 0.2 s at most)
    servicer = _Refusing()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    pb_grpc.add_CoordinatorServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    core = AgentCore("r", [HostSpec("h0", 1.0, 1 << 30)], DutyCycleDriver(), {})
    agent = RunningAgent.__new__(RunningAgent)
    agent.core = core
    caplog.set_level(logging.ERROR, logger=register.__name__)
    registrar = register.Registrar(agent, f"127.0.0.1:{port}", "127.0.0.1:1")
    try:
        deadline = time.monotonic() + 10.0
        while servicer.calls < 12 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert servicer.calls >= 12
        said = [r for r in caplog.records if "refuses this agent" in r.getMessage()]
        assert len(said) == 1, f"{len(said)} ERROR lines for {servicer.calls} refusals of one cause"
    finally:
        registrar.stop()
        core.shutdown()
        server.stop(0)
