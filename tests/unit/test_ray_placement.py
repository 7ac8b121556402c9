"""Placement of emulated hosts on Ray nodes and Ray address validation (pure; no Ray cluster needed)."""

from __future__ import annotations

import socket

import pytest

from coordinator.backends.ray.placement import actor_name, free_placements, host_counts, place_hosts
from coordinator.raycluster import RayNode, RayUnavailable, parse_address, probe

MIB = 1 << 20


def node(node_id: str, cpus: float = 4.0) -> RayNode:
    return RayNode(node_id, "10.0.0.1", {"CPU": cpus} if cpus else {}, {"ray.io/node-id": node_id})


def test_hosts_are_dealt_round_robin_in_node_id_order_and_pinned_by_node_label():
    placements = place_hosts([node("cc"), node("aa"), node("bb")], hosts=5, cpus_per_host=0.5, memory_bytes=MIB)
    # One actor per emulated host, dealt round-robin in node-id order.
    assert [p.node.node_id for p in placements] == ["aa", "aa", "bb", "bb", "cc"]
    assert [[h["name"] for h in p.hosts] for p in placements] == [
        ["ray0-h0"], ["ray0-h1"], ["ray1-h0"], ["ray1-h1"], ["ray2-h0"]]
    assert placements[2].label_selector == {"ray.io/node-id": "bb"}
    assert len({p.agent_id for p in placements}) == 5
    assert all(h["cpu_cores"] == 0.5 and h["memory_bytes"] == MIB for p in placements for h in p.hosts)


def test_a_second_run_on_the_cluster_takes_agent_ids_no_live_actor_holds():
    """An agent id also names its cgroups on its node, and a starting agent removes what it finds there under its
    id: a replay beside ``up --ray`` (or a second one) must not take the first run's ids."""
    nodes = [node("aa"), node("bb")]
    first = free_placements(nodes, 2, 0.5, MIB, "ray", taken=set())
    assert [p.hosts[0]["name"] for p in first] == ["ray0-h0", "ray1-h0"]
    assert first == place_hosts(nodes, 2, 0.5, MIB)
    taken = {actor_name(p.agent_id) for p in first} | {"vcemu-agent-other"}
    second = free_placements(nodes, 2, 0.5, MIB, "ray", taken)
    assert [p.hosts[0]["name"] for p in second] == ["ray-2-0-h0", "ray-2-1-h0"]
    third = free_placements(nodes, 2, 0.5, MIB, "ray", taken | {actor_name(p.agent_id) for p in second})
    assert [p.hosts[0]["name"] for p in third] == ["ray-3-0-h0", "ray-3-1-h0"]
    # One name taken of the tag's is enough to move to the next.
    assert free_placements(nodes, 2, 0.5, MIB, "ray", {actor_name(first[1].agent_id)})[0].hosts[0]["name"] == \
        "ray-2-0-h0"
    assert free_placements(nodes, 1, 0.5, MIB, "replay", taken)[0].hosts[0]["name"] == "replay0-h0"


def test_default_cores_share_out_part_of_each_nodes_cpus_and_nodes_without_cpus_get_nothing():
    placements = place_hosts([node("head", cpus=0), node("w1", cpus=2.0), node("w2", cpus=4.0)], hosts=6,
                             cpus_per_host=None, memory_bytes=MIB)
    assert [p.node.node_id for p in placements] == ["w1"] * 2 + ["w2"] * 4  # 6 x 2/6 and 6 x 4/6
    assert [p.hosts[0]["cpu_cores"] for p in placements] == [0.6] * 6  # 0.6 x 2 CPUs / 2 hosts, 0.6 x 4 / 4
    capped = place_hosts([node("w1", cpus=2.0), node("w2", cpus=4.0)], hosts=2, cpus_per_host=None, memory_bytes=MIB)
    assert [p.hosts[0]["cpu_cores"] for p in capped] == [1.0, 1.0]  # 1.2 and 2.4, capped at one core


def test_unequal_nodes_get_hosts_in_proportion_to_their_cpus_so_the_hosts_come_out_equal():
    """The reported case: ``up --ray --hosts 3`` on a 1-CPU node (first in node-id order) and a 2-CPU node gave the
    1-CPU node two hosts of 0.3 cores and the 2-CPU node one of 1 core (round-robin by node)."""
    placements = place_hosts([node("b", cpus=2.0), node("a", cpus=1.0)], hosts=3, cpus_per_host=None, memory_bytes=MIB)
    assert [(p.node.node_id, p.hosts[0]["name"], p.hosts[0]["cpu_cores"]) for p in placements] == [
        ("a", "ray0-h0", 0.6), ("b", "ray1-h0", 0.6), ("b", "ray1-h1", 0.6)]


@pytest.mark.parametrize(("cpus", "hosts", "counts"), [
    ([1, 2], 3, [1, 2]),  # quotas 1 and 2, exact
    ([2, 8], 4, [1, 3]),  # quotas 0.8 and 3.2: floors 0 and 3, the one left to the larger fraction (0.8)
    ([2, 1], 2, [1, 1]),  # quotas 4/3 and 2/3: floors 1 and 0, the one left to 2/3
    ([2, 1], 4, [3, 1]),  # quotas 8/3 and 4/3: floors 2 and 1, the one left to 2/3
    ([3, 1], 2, [2, 0]),  # quotas 1.5 and 0.5 tie: the extra host gets 3/2 CPUs on the first, 1/1 on the second
    ([1, 1, 2], 2, [1, 0, 1]),  # quotas 0.5, 0.5, 1: the tie between equal nodes goes to the earlier one
    ([1.5, 0.5], 4, [3, 1]),  # fractional CPUs: quotas 3 and 1
    ([8, 1, 1], 5, [4, 1, 0]),  # quotas 4, 0.5, 0.5: floors 4, 0, 0, the one left to the earlier of the tie
    ([2, 1], 0, [0, 0]),
])
def test_host_counts_by_largest_remainder(cpus, hosts, counts):
    assert host_counts(cpus, hosts) == counts


@pytest.mark.parametrize("cpus", [1.0, 4.0, 0.1, 1.5])
def test_on_equal_nodes_host_counts_are_the_round_robin_of_before(cpus):
    """Equal nodes keep today's placement exactly: ceil(N/K) on the first N mod K nodes, floor(N/K) on the rest
    (0.1 CPUs: quotas must tie exactly, which float arithmetic would not guarantee)."""
    for k in range(1, 6):
        for n in range(0, 13):
            assert host_counts([cpus] * k, n) == [n // k + (1 if i < n % k else 0) for i in range(k)], (k, n)


def test_host_counts_refuses_a_node_without_cpus():
    with pytest.raises(ValueError, match="CPUs > 0"):
        host_counts([1.0, 0.0], 2)


def test_fewer_hosts_than_nodes_leave_nodes_empty():
    placements = place_hosts([node("a"), node("b"), node("c")], hosts=2, cpus_per_host=1.0, memory_bytes=MIB)
    assert [p.node.node_id for p in placements] == ["a", "b"]


@pytest.mark.parametrize(("kwargs", "setting"), [
    ({"hosts": 0}, "--hosts"), ({"memory_bytes": 0}, "--mem-per-host"), ({"cpus_per_host": -1.0}, "--cpus-per-host"),
    ({"nodes": [node("head", cpus=0)]}, "--ray"),
])
def test_bad_settings_are_named(kwargs, setting):
    args = {"nodes": [node("a")], "hosts": 1, "cpus_per_host": 1.0, "memory_bytes": MIB, **kwargs}
    with pytest.raises(ValueError, match=f"^{setting}:"):
        place_hosts(**args)


@pytest.mark.parametrize("bad", ["", "10.0.0.1", "10.0.0.1:", ":6379", "host:port", "host:0", "host:70000"])
def test_a_malformed_address_is_named(bad):
    with pytest.raises(RayUnavailable, match="^--ray: .* not a Ray address"):
        parse_address(bad)


def test_address_forms():
    assert parse_address("10.0.0.5:6379") == ("10.0.0.5", 6379)
    assert parse_address("[::1]:6379") == ("::1", 6379)


def test_probe_refuses_a_port_where_nothing_listens_at_once():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(RayUnavailable, match=rf"^--ray: no Ray cluster reachable at 127.0.0.1:{port} \("):
        probe(f"127.0.0.1:{port}", timeout_s=1.0)


def test_fewer_hosts_than_nodes_with_default_cores_leave_nodes_empty():
    """``vcemu up --ray ADDR --hosts 1`` on a two-node cluster, without --cpus-per-host (its default)."""
    placements = place_hosts([node("a", cpus=2.0), node("b", cpus=2.0)], hosts=1, cpus_per_host=None, memory_bytes=MIB)
    assert [(p.node.node_id, p.hosts[0]["cpu_cores"]) for p in placements] == [("a", 1.0)]


def test_up_ray_waits_for_its_own_actors_not_for_hosts_restored_from_the_state() -> None:
    """On a restart with --state the restored agents' hosts already made up the count, so ``up --ray`` reported its
    cluster before any actor registered, and an actor that could not reach the coordinator went unreported."""
    import types

    from coordinator.service import wait_registered

    restored = types.SimpleNamespace(engine=types.SimpleNamespace(hosts=["h0", "h1"]), registered=set(),
                                     address="127.0.0.1:1")
    why = wait_registered(restored, ["a0", "a1"], timeout_s=0.2)
    assert why == "2 of 2 agents (a0, a1) did not register within 0 s"
    restored.registered.update({"a0", "a1"})
    assert wait_registered(restored, ["a0", "a1"], timeout_s=0.2) is None


def test_up_ray_says_once_that_an_actor_does_not_answer_and_when_it_answers_again() -> None:
    """A loaded node's slow actor was reported at every 5-s health check, dozens of lines, as if it had crashed."""
    from coordinator.backends.ray.cluster import health_lines

    said: dict[str, str] = {}
    slow = [("a0", "no reply in time")]
    first = health_lines(said, slow, set())
    assert len(first) == 1
    assert first[0].startswith("agent actor a0 does not answer (no reply in time): slow, or crashed")
    assert health_lines(said, slow, set()) == []  # the same cause again: nothing new to say
    assert health_lines(said, [("a0", "not registered with the coordinator")], set())[0].startswith(
        "agent actor a0 does not answer (not registered")  # another cause is said
    assert health_lines(said, [], set()) == ["agent actor a0 answers again"]
    assert health_lines(said, [], set()) == [] and said == {}
    dead = health_lines(said, [("a1", "killed")], {"a1"})
    assert dead == ["agent actor a1 is dead (killed); its hosts will be declared lost and their jobs requeued on the "
                    "other agents"] and said == {}
