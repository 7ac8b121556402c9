"""Event streams (WatchEvents) whose clients' connections went half-open (gray-failure review): nothing forwarded
either way and nothing closed, as after a NAT or firewall dropped the connection's state, or a client machine
vanished. Each held an API thread and one of the coordinator's MAX_WATCHERS slots for good (measured: 8 such
watchers refused every new one with RESOURCE_EXHAUSTED until the link healed); the server's keepalive pings now
close such a connection."""

from __future__ import annotations

import threading
import time

import grpc

from coordinator import service
from coordinator.policies import get_policy
from coordinator.service import MAX_WATCHERS, CoordinatorServer
from tests.unit.stall_proxy import StallProxy
from vcemu.v1 import coordinator_pb2 as pb
from vcemu.v1 import coordinator_pb2_grpc as pb_grpc


def test_watchers_whose_connections_went_half_open_free_their_slots(monkeypatch) -> None:
    monkeypatch.setattr(service, "KEEPALIVE_S", 0.5, raising=False)
    monkeypatch.setattr(service, "KEEPALIVE_TIMEOUT_S", 0.5, raising=False)
    s = CoordinatorServer(get_policy("greedy"), port=0).start()
    proxy = StallProxy(s.address)
    channels = [grpc.insecure_channel(proxy.address, options=[("grpc.use_local_subchannel_pool", 1)])
                for _ in range(MAX_WATCHERS)]

    def watch(channel: grpc.Channel) -> None:
        try:
            for _ in pb_grpc.CoordinatorStub(channel).WatchEvents(pb.WatchEventsRequest(), timeout=30):
                pass
        except grpc.RpcError:
            pass

    try:
        for channel in channels:
            threading.Thread(target=watch, args=(channel,), daemon=True).start()
        deadline = time.monotonic() + 5.0
        while len(s.watchers) < MAX_WATCHERS and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(s.watchers) == MAX_WATCHERS
        proxy.stall_existing()
        stalled_at = time.monotonic()
        deadline = stalled_at + 10.0
        while s.watchers and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not s.watchers, (f"{len(s.watchers)} watcher slots still held "
                                f"{time.monotonic() - stalled_at:.1f} s after their connections went half-open")
    finally:
        for channel in channels:
            channel.close()
        proxy.close()
        s.stop(grace=0)
