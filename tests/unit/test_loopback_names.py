"""Every spelling of this machine's loopback counts as one (IPv6 review): only IP literals were checked, so
``localhost:PORT``, which an agent with ``--bind localhost`` registers under, and ``[::ffff:127.0.0.1]:PORT`` were taken
from another machine, and a coordinator bound to ``[::ffff:127.0.0.1]`` warned that it listened beyond loopback."""

from vcemu.ports import is_loopback, unreachable_advertise


def remote(ip: str) -> bool:  # no address but loopback is this machine's
    return ip.startswith("127.") or ip == "::1"


def test_names_of_the_loopback_and_mapped_loopback_from_another_machine_are_refused() -> None:
    for address in ("localhost:42911", "LOCALHOST.:42911", "ip6-localhost:1", "[::ffff:127.0.0.1]:1",
                    "[::ffff:0.0.0.0]:1"):
        assert unreachable_advertise(address, "ipv4:10.200.0.11:50000", is_local=remote) is not None, address
    assert unreachable_advertise("localhost:42911", "ipv4:127.0.0.1:50000", is_local=remote) is None
    assert unreachable_advertise("agent-1.example:1", "ipv4:10.200.0.11:50000", is_local=remote) is None


def test_mapped_loopback_is_loopback() -> None:
    assert is_loopback("::ffff:127.0.0.1") and is_loopback("[::ffff:127.0.0.1]")
    assert not is_loopback("::ffff:10.0.0.1") and not is_loopback("localhost.example")
