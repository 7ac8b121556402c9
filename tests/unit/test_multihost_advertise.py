"""An agent on another machine must not register under an address that names the coordinator's own machine
(multi-host review: loopback or wildcard addresses were taken, and every call to the agent failed)."""

from vcemu.ports import coordinator_elsewhere, peer_ip, source_ip_toward, unreachable_advertise


def remote(ip: str) -> bool:  # no address but loopback is this machine's
    return ip.startswith("127.") or ip == "::1"


def test_loopback_address_from_another_machine_is_refused() -> None:
    why = unreachable_advertise("127.0.0.1:42911", "ipv4:10.200.0.11:50000", is_local=remote)
    assert why is not None and "10.200.0.11" in why and "--bind" in why


def test_wildcard_address_from_another_machine_is_refused() -> None:
    assert unreachable_advertise("0.0.0.0:52071", "ipv4:10.200.0.13:50000", is_local=remote) is not None
    why = unreachable_advertise("[::]:52071", "ipv6:[fd00::13]:50000", is_local=remote)
    assert why is not None and "[fd00::13]:PORT" in why


def test_same_machine_and_routable_addresses_are_taken() -> None:
    assert unreachable_advertise("127.0.0.1:42911", "ipv4:127.0.0.1:50000", is_local=remote) is None
    assert unreachable_advertise("127.0.0.1:42911", "ipv4:10.0.0.5:50000", is_local=lambda ip: True) is None
    assert unreachable_advertise("10.200.0.12:52062", "ipv4:10.200.0.12:50000", is_local=remote) is None
    assert unreachable_advertise("agent-1.example:52062", "ipv4:10.200.0.12:50000", is_local=remote) is None
    assert unreachable_advertise("127.0.0.1:42911", "unix:/tmp/x", is_local=remote) is None


def test_peer_ip() -> None:
    assert peer_ip("ipv4:10.1.2.3:4567") == "10.1.2.3"
    assert peer_ip("ipv6:[fd00::1]:4567") == "fd00::1"
    assert peer_ip("unix:/tmp/sock") is None


def test_source_toward_loopback_is_loopback() -> None:
    assert source_ip_toward("127.0.0.1:50051") == "127.0.0.1"
    assert not coordinator_elsewhere("127.0.0.1:50051", "127.0.0.1")


def test_the_coordinator_says_an_agents_refused_address_once_a_minute_for_a_bounded_number_of_agents(
        monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The agent retries every heartbeat: its refusal is logged once a minute, and ids (the agents' to choose) are
    remembered for at most LOST_KEPT agents."""
    from coordinator import service
    from coordinator.policies import get_policy

    clock = [1000.0]
    monkeypatch.setattr(service.time, "monotonic", lambda: clock[0])
    s = service.CoordinatorServer(get_policy("fcfs"), port=0)
    try:
        assert s.refusal_due("a") and not s.refusal_due("a")
        clock[0] += service.REFUSAL_SAY_S
        assert s.refusal_due("a")
        for i in range(service.LOST_KEPT + 10):
            s.refusal_due(f"x{i}")
        assert len(s.refused_said) == service.LOST_KEPT and "a" not in s.refused_said
    finally:
        s.stop()


def test_a_target_splits_into_host_and_port() -> None:
    from vcemu.ports import split_target

    assert split_target("10.0.0.1:50051") == ("10.0.0.1", "50051")
    assert split_target("[fd00::1]:50051") == ("fd00::1", "50051")
    assert split_target("dns:///coord.example:50051") == ("coord.example", "50051")
    assert split_target("dns://8.8.8.8/coord.example:50051") == ("coord.example", "50051")
    assert split_target("ipv4:10.0.0.1:50051") == ("10.0.0.1", "50051")
    assert split_target("coord") == ("coord", "")


def test_every_loopback_bind_is_told_apart() -> None:
    """The agent warns of a loopback --bind with a coordinator elsewhere: 127.0.1.1 (Debian's name for the machine
    itself) is loopback too, which a list of four spellings missed."""
    from vcemu.ports import is_loopback

    assert all(is_loopback(h) for h in ("127.0.0.1", "127.0.1.1", "localhost", "::1", "[::1]", "LOCALHOST"))
    assert not any(is_loopback(h) for h in ("10.0.0.1", "0.0.0.0", "::", "node-1.example"))


def test_peer_ip_of_grpcs_own_ipv6_peer_strings() -> None:
    """gRPC percent-encodes an IPv6 peer's brackets (``ipv6:%5B::1%5D:41234``): read as None, the loopback check of a
    remote agent registering over IPv6 never ran (IPv6 review)."""
    assert peer_ip("ipv6:%5Bfd00::1%5D:4567") == "fd00::1"
    assert peer_ip("ipv6:%5Bfe80::1%25eth0%5D:4567") == "fe80::1%eth0"
    assert unreachable_advertise("[::1]:52071", "ipv6:%5Bfd00::13%5D:50000", is_local=remote) is not None


def test_peer_ip_of_a_real_ipv6_call() -> None:
    import socket
    from concurrent import futures

    import grpc
    import pytest
    from grpc_health.v1 import health, health_pb2, health_pb2_grpc

    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
    except OSError as exc:
        pytest.skip(f"no IPv6 loopback: {exc}")
    peers: list[str] = []

    class Health(health.HealthServicer):
        def Check(self, request, context):  # type: ignore[no-untyped-def]
            peers.append(context.peer())
            return health_pb2.HealthCheckResponse(status=health_pb2.HealthCheckResponse.SERVING)

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    health_pb2_grpc.add_HealthServicer_to_server(Health(), server)
    port = server.add_insecure_port("[::1]:0")
    server.start()
    try:
        with grpc.insecure_channel(f"[::1]:{port}") as channel:
            health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
    finally:
        server.stop(0)
    assert peer_ip(peers[0]) == "::1", peers[0]
