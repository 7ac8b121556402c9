"""Review h218: after a stall of the coordinator during the all-silent hold, the hold goes on from the agents' stamps
as the stall excuse moved them (its bound counted from those), but status's all_silent_for still counts from the hold's
first start: it said "silent for 1,700 s: none is declared lost before 1,500 s of silence" while none was."""

from __future__ import annotations

import time

import grpc

from coordinator.service import ALL_SILENT_WINDOWS
from tests.unit.test_all_agents_silent import WINDOW, _silent_for, watched
from vcemu.v1 import coordinator_pb2 as pb
from vcemu.v1 import coordinator_pb2_grpc as pb_grpc


def test_status_of_a_hold_that_went_on_over_a_stall_does_not_say_more_silence_than_its_limit() -> None:
    server = watched("a0", "a1", "a2")
    try:
        limit = ALL_SILENT_WINDOWS * WINDOW
        _silent_for(server, WINDOW + 100.0, "a0", "a1", "a2")
        server._check_agents()
        assert server.all_silent_since is not None
        # The process then does not run for limit - 100 s (a paused VM): as if that much time passed, unheard.
        gap = limit - 100.0
        server.all_silent_since -= gap
        _silent_for(server, WINDOW + 100.0 + gap, "a0", "a1", "a2")
        server._ran_at = time.monotonic() - gap
        server._check_agents()
        assert set(server.backend.agents) == {"a0", "a1", "a2"} and not server.lost  # held on, as designed
        with grpc.insecure_channel(server.address) as ch:
            reply = pb_grpc.CoordinatorStub(ch).ClusterStatus(pb.ClusterStatusRequest(), timeout=5)
        assert reply.all_silent_for <= reply.all_silent_limit, (reply.all_silent_for, reply.all_silent_limit)
    finally:
        server.stop()
