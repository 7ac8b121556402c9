"""IPv6 addresses without brackets (IPv6 review): gRPC reads ``fd00::5:50052`` as a host with no port (it dials
port 443), so an agent's address so written was taken and never reached, and a client's --coordinator so written was
refused without saying why."""

from __future__ import annotations

from vcemu.limits import address_refusal, target_refusal
from vcemu.ports import bracketed


def test_an_agents_address_with_an_ipv6_host_out_of_brackets_is_refused_saying_how() -> None:
    why = address_refusal("--advertise", "fd00::5:50052")
    assert why is not None and "brackets" in why and "[fd00::5]:50052" in why
    assert address_refusal("address", "::1:50052") is not None
    assert address_refusal("address", "ipv6:::1:50052") is not None
    assert address_refusal("address", "::1") is not None  # (was read as host ':' port 1)
    for taken in ("[fd00::5]:50052", "10.0.0.5:50052", "agent.example:1", "ipv6:[::1]:5", "dns:///h:5"):
        assert address_refusal("address", taken) is None, taken


def test_a_coordinator_address_with_an_ipv6_host_out_of_brackets_says_how() -> None:
    why = target_refusal("fd00::1:50051")
    assert why is not None and "[fd00::1]:50051" in why
    assert target_refusal("[fd00::1]:50051") is None


def test_advertise_puts_a_bare_ipv6_host_in_brackets() -> None:
    """The Kubernetes DaemonSet's ``--advertise=$(POD_IP):50052`` on an IPv6 pod network."""
    assert bracketed("fd00::5:50052") == "[fd00::5]:50052"
    assert bracketed("[fd00::5]:50052") == "[fd00::5]:50052"
    assert bracketed("10.0.0.5:50052") == "10.0.0.5:50052"
    assert bracketed("agent.example:50052") == "agent.example:50052"
    assert bracketed("::1") == "::1"  # (no host before the last colon: left to be refused)
