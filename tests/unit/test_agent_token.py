"""The coordinator's bearer token on its calls to the agents (:mod:`vcemu.auth`): sent to an agent whose API wants
it (its description's ``wants_token``), on every kind of call, and to no other (code review: under TLS an agent
registered without the token was sent it); per call, not through a channel interceptor."""

from __future__ import annotations

from concurrent import futures

import grpc
import pytest

from coordinator.backends.live import LiveBackend
from tests.unit.scripted_agent import TableAgent, engine_on, serve
from vcemu.auth import BearerTokenInterceptor, presented, with_token
from vcemu.v1 import agent_pb2, agent_pb2_grpc


class RecordingAgent(TableAgent):
    """A table agent that records each call's ``authorization`` metadata (None without one)."""

    def __init__(self, wants_token: bool) -> None:
        super().__init__(agent_id="rec", hosts=("h0",))
        self.wants_token = wants_token
        self.seen: list[tuple[str, str | None]] = []

    def _note(self, method: str, context: grpc.ServicerContext) -> None:
        self.seen.append((method, dict(context.invocation_metadata()).get("authorization")))

    def Describe(self, request, context):  # noqa: N802
        self._note("Describe", context)
        reply = super().Describe(request, context)
        reply.wants_token = self.wants_token
        return reply

    def StartTask(self, request, context):  # noqa: N802
        self._note("StartTask", context)
        return super().StartTask(request, context)

    def StartTasks(self, request, context):  # noqa: N802
        self._note("StartTasks", context)
        return super().StartTasks(request, context)

    def Status(self, request, context):  # noqa: N802
        self._note("Status", context)
        return super().Status(request, context)


@pytest.mark.parametrize("wants_token", [True, False])
def test_the_token_goes_only_to_an_agent_that_wants_it_on_every_call(wants_token: bool) -> None:
    from coordinator.model import JobSpec
    from coordinator.plan import Plan, Start

    agent = RecordingAgent(wants_token)
    server, address = serve(agent)
    backend = LiveBackend(token="t0ken")
    try:
        backend.add_agent(address)
        engine = engine_on(backend)
        engine.arrive(JobSpec("j", 0.0, 1, 0.5, 0.1, 60.0))
        engine.apply(Plan((Start("j", ("h0",), 0.5),)))
        backend.poll()
    finally:
        backend.close()
        server.stop(0)
    methods = [m for m, _ in agent.seen]
    assert methods[0] == "Describe" and {"StartTask", "Status"} <= set(methods), methods
    sent = {auth for _, auth in agent.seen[1:]}
    assert sent == ({"Bearer t0ken"} if wants_token else {None}), agent.seen


def test_an_agent_known_only_by_address_that_wants_the_token_is_described_with_it() -> None:
    """Added by its address alone (restored, or registered by hand), an agent is first asked without the token;
    refused UNAUTHENTICATED, it is asked again with it."""
    agent = RecordingAgent(wants_token=True)
    token = "t0ken"
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2),
                         interceptors=[BearerTokenInterceptor(token, "vcemu.v1.Agent")])
    agent_pb2_grpc.add_AgentServicer_to_server(agent, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    backend = LiveBackend(token=token)
    try:
        assert backend.add_agent(f"127.0.0.1:{port}")
        assert backend.agents["rec"].wants_token
    finally:
        backend.close()
        server.stop(0)
    assert agent.seen == [("Describe", "Bearer t0ken")]  # (the first, without it, was refused before the servicer)


def test_a_stub_with_the_token_sends_it_however_called_and_replaces_the_callers() -> None:
    agent = RecordingAgent(wants_token=True)
    server, address = serve(agent)
    try:
        with grpc.insecure_channel(address) as channel:
            stub = with_token(agent_pb2_grpc.AgentStub(channel), "t0ken")
            stub.Status(agent_pb2.StatusRequest(), timeout=5)
            stub.Status.future(agent_pb2.StatusRequest(), timeout=5).result()
            stub.Status.with_call(agent_pb2.StatusRequest(), timeout=5,
                                  metadata=(("authorization", "Bearer other"), ("x-other", "kept")))
            assert with_token(agent_pb2_grpc.AgentStub, None) is agent_pb2_grpc.AgentStub
    finally:
        server.stop(0)
    assert agent.seen == [("Status", "Bearer t0ken")] * 3


def test_presented_compares_the_whole_bearer_value() -> None:
    assert presented((("authorization", "Bearer t0ken"),), "t0ken")
    assert presented((("authorization", b"Bearer t0ken"),), "t0ken")
    for given in ((), None, (("authorization", "t0ken"),), (("authorization", "Bearer t0ken2"),),
                  (("authorization", "bearer t0ken"),)):
        assert not presented(given, "t0ken"), given


def test_a_registration_overtaken_between_its_check_and_the_lock_is_told_to_retry(monkeypatch) -> None:
    """Code review: the check that no live agent holds the id ran before the engine lock; a registration in between
    was then replaced by the one checked against the old holder. It is found out under the lock: UNAVAILABLE."""
    import dataclasses

    from coordinator.policies import get_policy
    from coordinator.service import CoordinatorServer
    from vcemu.v1 import coordinator_pb2 as pb
    from vcemu.v1 import coordinator_pb2_grpc as pb_grpc

    d = agent_pb2.DescribeReply(agent_id="a", mode="duty-cycle",
                                hosts=[agent_pb2.HostInfo(name="a-h0", cpu_cores=1.0, memory_bytes=1 << 30)])
    s = CoordinatorServer(get_policy("greedy"), port=0).start()
    try:
        with grpc.insecure_channel(s.address) as ch:
            stub = pb_grpc.CoordinatorStub(ch)
            stub.RegisterAgent(pb.RegisterAgentRequest(address="127.0.0.1:1", description=d), timeout=5)

            def overtaken(handle, address):  # another registration of "a" lands while this one probes
                s.backend.agents["a"] = dataclasses.replace(handle, address="127.0.0.1:3")
                return None

            monkeypatch.setattr(s.backend, "answering_elsewhere", overtaken)
            with pytest.raises(grpc.RpcError) as err:
                stub.RegisterAgent(pb.RegisterAgentRequest(address="127.0.0.1:2", description=d), timeout=5)
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE
            assert "registered meanwhile" in err.value.details()
            assert s.backend.agents["a"].address == "127.0.0.1:3"
    finally:
        s.stop(grace=0)
