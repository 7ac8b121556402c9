"""Review h218: a heartbeat received while the watch's look is under way (after it read the stamps, before the hold
starts) is in ``heard_at`` when the hold takes ``heard_before_hold``, so at the next look that agent's fresh stamp was
taken for a stall's (:meth:`_note_running`) and the hold went on, the heal not seen until its next heartbeat."""

from __future__ import annotations

import logging
import time

import pytest

from tests.unit.test_all_agents_silent import WINDOW, _said, _silent_for, watched


def test_a_heartbeat_received_during_the_look_that_starts_the_hold_ends_it_at_the_next_look(
        caplog: pytest.LogCaptureFixture) -> None:
    server = watched("a0", "a1", "a2")
    try:
        _silent_for(server, WINDOW + 100.0, "a0", "a1", "a2")
        with caplog.at_level(logging.WARNING, logger="vcemu.coordinator"):
            received = time.monotonic()
            judge = server._all_silent

            def heartbeat_meanwhile(*args):  # a1's heartbeat, received once the look had read the stamps
                server.heard_at = received
                return judge(*args)

            server._all_silent = heartbeat_meanwhile
            server._check_agents()  # the look, on the stamps it read: every agent silent, the hold starts
            server._all_silent = judge
            assert server.all_silent_since is not None
            server.heartbeats["a1"] = received  # (the stamp that heartbeat wrote)
            server._check_agents()
            assert _said(caplog, "heard again") and server.all_silent_since is None
    finally:
        server.stop()
