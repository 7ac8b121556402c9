"""The line a coordinator logs when an agent re-registers with other hosts (live review: "re-registered without
host(s) agent0-h0, agent0-h1 as they were" listed hosts that were still there and did not say what changed)."""

from __future__ import annotations

from coordinator.service import _host_changes
from vcemu.v1 import agent_pb2


def test_resized_and_gone_hosts_are_told_apart_with_their_sizes() -> None:
    before = {n: agent_pb2.HostInfo(name=n, cpu_cores=0.3, memory_bytes=1 << 30) for n in ("h0", "h1", "h2")}
    now = {"h0": (0.6, 1 << 30), "h1": (0.3, 1 << 29)}
    assert _host_changes(before, now, ["h0", "h1", "h2"]) == (
        "hosts resized: h0 (0.3 -> 0.6 cores, 1024 -> 1024 MiB), h1 (0.3 -> 0.3 cores, 1024 -> 512 MiB); "
        "host gone: h2")
    assert _host_changes(before, now, ["h2"]) == "host gone: h2"
    assert _host_changes(before, now, ["h0"]) == "host resized: h0 (0.3 -> 0.6 cores, 1024 -> 1024 MiB)"
