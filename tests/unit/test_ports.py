"""The listening checks made before a server starts: each refusal names the flag that can fix it."""

from __future__ import annotations

import errno
import socket

import pytest

from vcemu import ports


def test_a_privileged_port_without_the_privilege_is_blamed_on_port(monkeypatch: pytest.MonkeyPatch) -> None:
    # (the tests run as root, which may listen anywhere: the kernel's answer to anyone else is given here)
    monkeypatch.setattr(ports, "_bind_errors", lambda bind, port: [errno.EACCES] if port == 80 else [0])
    assert ports.ports_refusal("127.0.0.1", 80, None) == \
        "--port: cannot listen on 127.0.0.1:80 (permission denied: ports below 1024 need root)"
    assert ports.ports_refusal("127.0.0.1", 5000, 80).startswith("--metrics-port: cannot listen on 127.0.0.1:80")


def test_a_socket_that_cannot_be_created_is_an_answer_not_a_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_ipv6(*args: object) -> socket.socket:
        raise OSError(errno.EAFNOSUPPORT, "Address family not supported by protocol")

    monkeypatch.setattr(socket, "socket", no_ipv6)
    assert ports.ports_refusal("::1", 5000, None) is None  # left for gRPC to report, with its own reason


def test_valid_addresses_pass() -> None:
    for bind in ("127.0.0.1", "0.0.0.0", "localhost"):
        assert ports.ports_refusal(bind, 0, 0) is None, bind


def test_the_address_to_dial_is_the_nodes_for_a_wildcard_bind_and_brackets_ipv6() -> None:
    from vcemu.ports import dial_address

    assert dial_address("0.0.0.0", 50051, "10.0.0.7") == "10.0.0.7:50051"
    assert dial_address("::", 50051, "fd00::7") == "[fd00::7]:50051"
    assert dial_address("192.168.1.2", 50052, "10.0.0.7") == "192.168.1.2:50052"
    assert dial_address("[fd00::2]", 1, "10.0.0.7") == "[fd00::2]:1"


def test_an_ipv6_bind_is_given_to_grpc_in_brackets_and_to_a_socket_without() -> None:
    """(IPv6 review: ``--bind ::1`` reached gRPC as ``::1:PORT``, a host with no port to it, and ``--bind [::1]``
    the metrics server, which cannot resolve ``[::1]``.)"""
    for bind in ("::1", "[::1]"):
        assert ports.listen_address(bind, 5) == "[::1]:5" and ports.bind_host(bind) == "::1"
    assert ports.listen_address("::", 5) == "[::]:5" and ports.bind_host("[::]") == "::"
    assert ports.listen_address("127.0.0.1", 5) == "127.0.0.1:5" and ports.bind_host("localhost") == "localhost"
    assert ports.cannot_listen("::1", 5) == "--port: cannot listen on [::1]:5 (in use by another process?)"


def test_a_wildcard_bind_serves_its_metrics_on_ipv4_when_ipv6_holds_the_port(monkeypatch) -> None:
    """Review h214: ``--bind 0.0.0.0`` serves its metrics on ``::`` (both families); a port another program holds on
    IPv6 alone (``[::1]:PORT``) passed :func:`ports_refusal` (which checks 0.0.0.0) and failed the start, "cannot
    listen on 0.0.0.0:PORT: Address already in use", where 0.0.0.0 had served before. As gRPC does for its wildcard,
    IPv4 alone then."""
    from coordinator.policies import get_policy
    from coordinator.service import CoordinatorServer

    try:
        held = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        held.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        held.bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback here")
    with held:
        held.listen()
        port = held.getsockname()[1]
        if ports.ports_refusal("0.0.0.0", 0, port) is not None:
            pytest.skip("the port is taken on IPv4 too")
        server = CoordinatorServer(get_policy("greedy"), port=0, bind="0.0.0.0", metrics_port=port)
        try:
            assert server.metrics_port == port
        finally:
            server.stop()
