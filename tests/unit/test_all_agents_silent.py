"""Every agent silent at once is as likely the coordinator's own fault (its uplink, a switch) as all of them failing:
none is declared lost for it until :data:`coordinator.service.ALL_SILENT_WINDOWS` loss windows have passed
(:meth:`CoordinatorServer._all_silent`). Multi-host review, session 46: a 6-s fault on the coordinator's side of the
network declared all three agents lost, and every job on the cluster was restarted when it healed.

Review of the change (session 47): agents whose last signs of life were a little apart when the network failed (the
first past the window was lost alone), a dead agent held for ever by another heard now and then, agents lost at the
end of a hold one after another (the first one's jobs placed on the next, each call a deadline), and agents taken for
heard one way only at the heal.

The watch is driven by hand (a heartbeat of 100 s: a loss window of 300 s, the watch thread asleep), with the
agents' last signs of life set back in time."""

from __future__ import annotations

import logging
import re
import threading
import time

import grpc
import pytest

from coordinator.policies import get_policy
from coordinator.service import ALL_SILENT_WINDOWS, CoordinatorServer
from vcemu.v1 import agent_pb2
from vcemu.v1 import coordinator_pb2 as pb
from vcemu.v1 import coordinator_pb2_grpc as pb_grpc

WINDOW = 3 * 100.0


def watched(*agent_ids: str) -> CoordinatorServer:
    """A started coordinator with the given agents registered (one host each, ``<id>-h0``) and heard once; its watch
    asleep (a heartbeat of 100 s: the watch sleeps 25 s) and no stall ticker: the test drives both itself."""
    server = CoordinatorServer(get_policy("greedy"), port=0, heartbeat_s=100.0)
    server._ticker = threading.Thread(target=lambda: None)
    server.start()
    try:
        with grpc.insecure_channel(server.address) as ch:
            api = pb_grpc.CoordinatorStub(ch)
            for agent_id in agent_ids:
                desc = agent_pb2.DescribeReply(agent_id=agent_id, mode="cgroup-v1", hosts=[
                    agent_pb2.HostInfo(name=f"{agent_id}-h0", cpu_cores=0.5, memory_bytes=1 << 30)])
                api.RegisterAgent(pb.RegisterAgentRequest(address="127.0.0.1:1", description=desc), timeout=5)
                api.Heartbeat(pb.HeartbeatRequest(agent_id=agent_id), timeout=5)
    except BaseException:
        server.stop()
        raise
    return server


def _silent_for(server: CoordinatorServer, seconds: float, *agent_ids: str) -> None:
    now = time.monotonic()
    for agent_id in agent_ids:
        server.heartbeats[agent_id] = now - seconds
        server.backend.agents[agent_id].last_seen = now - seconds


def _said(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if text in r.getMessage()]


def test_every_agent_silent_at_once_is_not_declared_lost_and_is_said_once(caplog: pytest.LogCaptureFixture):
    server = watched("a0", "a1", "a2")
    try:
        _silent_for(server, WINDOW + 100.0, "a0", "a1", "a2")
        with caplog.at_level(logging.WARNING, logger="vcemu.coordinator"):
            server._check_agents()
            server._check_agents()
        assert set(server.backend.agents) == {"a0", "a1", "a2"} and not server.lost
        (said,) = _said(caplog, "has been silent")
        assert "every agent (3)" in said and "coordinator's own network" in said
    finally:
        server.stop()


def test_once_one_is_heard_the_rest_get_a_window_afresh_and_one_still_silent_then_is_lost(
        caplog: pytest.LogCaptureFixture):
    server = watched("a0", "a1", "a2")
    try:
        _silent_for(server, WINDOW + 100.0, "a0", "a1", "a2")
        server._check_agents()
        server.beat("a0")  # the fault heals: a0's heartbeat arrives first
        with caplog.at_level(logging.WARNING, logger="vcemu.coordinator"):
            server._check_agents()
        assert set(server.backend.agents) == {"a0", "a1", "a2"} and not server.lost
        assert _said(caplog, "given 300 s afresh")
        assert min(server.heartbeats.values()) > time.monotonic() - 5.0
        server.beat("a1")  # a1 is heard within its window; a2 stays silent past it
        _silent_for(server, WINDOW + 1.0, "a2")
        server._check_agents()
        assert set(server.backend.agents) == {"a0", "a1"} and list(server.lost) == ["a2"]
    finally:
        server.stop()


def test_agents_all_silent_past_the_bound_are_declared_lost(caplog: pytest.LogCaptureFixture):
    server = watched("a0", "a1")
    try:
        _silent_for(server, WINDOW + 100.0, "a0", "a1")
        server._check_agents()
        assert not server.lost
        _silent_for(server, ALL_SILENT_WINDOWS * WINDOW + 1.0, "a0", "a1")
        with caplog.at_level(logging.WARNING, logger="vcemu.coordinator"):
            server._check_agents()
        assert not server.backend.agents and set(server.lost) == {"a0", "a1"}
        assert _said(caplog, "they are declared lost")
    finally:
        server.stop()


def test_one_silent_agent_among_others_heard_is_declared_lost_as_before():
    server = watched("a0", "a1")
    try:
        _silent_for(server, WINDOW + 1.0, "a1")
        server._check_agents()
        assert set(server.backend.agents) == {"a0"} and list(server.lost) == ["a1"]
    finally:
        server.stop()


def test_a_coordinator_of_one_agent_cannot_tell_and_declares_it_lost_as_before():
    server = watched("a0")
    try:
        _silent_for(server, WINDOW + 1.0, "a0")
        server._check_agents()
        assert not server.backend.agents and list(server.lost) == ["a0"]
    finally:
        server.stop()


def test_a_dead_agent_is_not_held_past_the_bound_by_another_heard_now_and_then():
    # a1 is dead (its polls unanswered since); a0 is heard once in a while (a link that loses most packets), each time
    # after the two were all silent: a1 was given a window afresh each time, and held for ever.
    server = watched("a0", "a1")
    try:
        _silent_for(server, WINDOW + 1.0, "a0", "a1")
        dead_since = server.backend.agents["a1"].last_seen
        for _ in range(3 * ALL_SILENT_WINDOWS):
            server._check_agents()  # all silent: held
            server.beat("a0")  # a0 heard once
            server._check_agents()  # a1 given a window afresh (while it is within the bound)
            if "a1" in server.lost:
                break
            # a window passes, a0 silent again; a1 still dead: move every stamp a window back
            now = time.monotonic()
            for agent_id in ("a0", "a1"):
                server.heartbeats[agent_id] -= WINDOW + 1.0
            server.backend.agents["a0"].last_seen = now - (WINDOW + 1.0)
            dead_since -= WINDOW + 1.0  # (a1's real silence grows by as much)
            server.backend.agents["a1"].last_seen = dead_since
        assert "a1" in server.lost, "an agent silent for 30 loss windows is still registered"
    finally:
        server.stop()


def test_agents_falling_silent_a_little_apart_are_all_silent_not_the_first_lost_alone():
    # The coordinator's network fails: a2's last answer came 1 s before the others' (a slow answer, a poll not due):
    # it passed the loss window one look before them and was declared lost alone, its jobs restarted.
    server = watched("a0", "a1", "a2")
    try:
        _silent_for(server, WINDOW - 1.0, "a0", "a1")
        _silent_for(server, WINDOW + 0.5, "a2")
        server._check_agents()
        assert not server.lost and set(server.backend.agents) == {"a0", "a1", "a2"}
    finally:
        server.stop()


def test_one_silent_agent_beside_agents_heard_a_moment_ago_is_lost_as_before():
    server = watched("a0", "a1", "a2")
    try:
        _silent_for(server, 1.0, "a0", "a1")
        _silent_for(server, WINDOW + 0.5, "a2")
        server._check_agents()
        assert list(server.lost) == ["a2"]
    finally:
        server.stop()


def test_agents_lost_in_one_look_are_all_cut_off_before_the_first_is_removed(monkeypatch):
    # Live (review h213): at the end of a hold, the first agent's jobs were placed by the engine on the next ones,
    # still registered and silent, each call a deadline under the engine lock that their own losses waited for.
    server = watched("a0", "a1", "a2")
    try:
        _silent_for(server, ALL_SILENT_WINDOWS * WINDOW + 1.0, "a0", "a1", "a2")
        handles = dict(server.backend.agents)
        cut_at_each: list[bool] = []
        lose = server.lose_agent

        def recording(agent_id, reason, silent=None):  # type: ignore[no-untyped-def]
            cut_at_each.append(all(h.lost for h in handles.values()))
            return lose(agent_id, reason, silent)

        monkeypatch.setattr(server, "lose_agent", recording)
        server._check_agents()
        assert set(server.lost) == {"a0", "a1", "a2"} and cut_at_each == [True, True, True]
    finally:
        server.stop()


def test_once_one_is_heard_the_calls_unanswered_over_the_fault_do_not_make_the_others_heard_one_way():
    # Live (review h213): at the heal, a2's heartbeat came after a1's poll was answered and before its own poll
    # (backed off): it was taken for heard one way only (a WARNING, its lease not renewed) until that poll.
    server = watched("a0", "a1", "a2")
    try:
        _silent_for(server, WINDOW + 100.0, "a0", "a1", "a2")
        server._check_agents()
        now = time.monotonic()
        for agent_id in ("a1", "a2"):
            handle = server.backend.agents[agent_id]
            handle.silent, handle.polls_unanswered = True, 10
            handle.unanswered_since, handle.unanswered_last = now - WINDOW - 50.0, now - 1.0
        server.beat("a0")  # the fault heals: a0 heard first, its poll answered
        server.backend.answered_at = time.monotonic()
        server._check_agents()
        assert server.heard_one_way("a1", "127.0.0.1:1") is None and not server.one_way
    finally:
        server.stop()


def test_a_heal_within_an_interval_of_the_hold_gives_the_agents_not_yet_past_the_window_a_window_afresh_too():
    # Review h214: a0 and a1 last heard 0.8 interval before a2 when the network failed; the hold starts as they pass
    # the window (a2 not yet past it), and the fault heals half an interval later, a0 heard first. a2 was given no
    # window afresh (only those past the window were), and was lost a moment later, its heartbeat not in yet.
    server = watched("a0", "a1", "a2")

    def later(seconds: float) -> None:
        for agent_id in ("a0", "a1", "a2"):
            server.heartbeats[agent_id] -= seconds
            server.backend.agents[agent_id].last_seen -= seconds

    try:
        _silent_for(server, WINDOW + 1.0, "a0", "a1")
        _silent_for(server, WINDOW - 80.0 + 1.0, "a2")
        server._check_agents()
        later(50.0)
        server.beat("a0")
        server._check_agents()
        later(40.0)  # a2 past the window now; a1 heard, a2's first heartbeat after the heal still to come
        server.beat("a1")
        server._check_agents()
        assert not server.lost and set(server.backend.agents) == {"a0", "a1", "a2"}
    finally:
        server.stop()


def test_agents_restored_from_the_store_and_never_heard_are_not_held(caplog: pytest.LogCaptureFixture):
    # Review h214: a coordinator restarted on its --state whose agents are all gone (their machine powered off):
    # never heard by this process, their silence says nothing of its network; they were held 10 windows past their
    # grace, their jobs "running", and the log blamed the coordinator's own network.
    server = watched("a0", "a1")
    try:
        for handle in server.backend.agents.values():
            handle.heard, handle.silent = False, True  # (as restored: heard by no poll yet)
        _silent_for(server, WINDOW + 1.0, "a0", "a1")
        for handle in server.backend.agents.values():
            handle.last_seen = 0.0
        with caplog.at_level(logging.WARNING, logger="vcemu.coordinator"):
            server._check_agents()
        assert set(server.lost) == {"a0", "a1"} and not _said(caplog, "has been silent")
    finally:
        server.stop()


def test_status_says_every_agent_is_silent_while_none_is_declared_lost_and_nothing_once_one_is_heard(capsys):
    """Review (session 47): while the agents were held, ``vcemu status`` listed them as ever, their tasks frozen and
    the log's one line the only word of why none was declared lost."""
    from coordinator.cli import main

    server = watched("a0", "a1", "a2")
    try:
        assert main(["status", "--coordinator", server.address]) == 0
        assert "silent" not in capsys.readouterr().out
        _silent_for(server, WINDOW + 100.0, "a0", "a1", "a2")
        server._check_agents()
        with grpc.insecure_channel(server.address) as ch:
            reply = pb_grpc.CoordinatorStub(ch).ClusterStatus(pb.ClusterStatusRequest(), timeout=5)
        assert WINDOW + 100.0 <= reply.all_silent_for < WINDOW + 130.0
        assert reply.all_silent_limit == ALL_SILENT_WINDOWS * WINDOW
        assert main(["status", "--coordinator", server.address]) == 0
        out = capsys.readouterr().out
        (seconds,) = re.findall(r"every agent \(3\) silent for ([0-9.]+) s", out)
        assert WINDOW + 100.0 <= float(seconds) < WINDOW + 130.0
        assert f"none is declared lost before {ALL_SILENT_WINDOWS * WINDOW:g} s of silence" in out
        server.beat("a1")  # heard again: the hold ends at the next look
        server._check_agents()
        assert main(["status", "--coordinator", server.address]) == 0
        assert "silent" not in capsys.readouterr().out
    finally:
        server.stop()


def test_a_stall_of_the_coordinator_during_the_hold_is_not_taken_for_an_agent_heard(caplog: pytest.LogCaptureFixture):
    """Review (session 47): the stall excuse (:meth:`CoordinatorServer._note_running`) moves every silent agent's
    stamp on by the stall, and a stall during a hold was then logged as "an agent is heard again", the silent given
    a window afresh, and the hold said again once their moved stamps passed the window. No agent was heard: the hold
    goes on, said once; an agent heard then ends it."""
    server = watched("a0", "a1", "a2")
    try:
        with caplog.at_level(logging.WARNING, logger="vcemu.coordinator"):
            _silent_for(server, WINDOW + 100.0, "a0", "a1", "a2")
            server._check_agents()
            assert server.all_silent_since is not None
            server._ran_at = time.monotonic() - 250.0  # the process did not run for 250 s
            server._check_agents()  # the stamps moved on by the stall: silent for about 150 s, within the window
            assert "the coordinator did not run" in caplog.text
            assert not _said(caplog, "heard again") and server.all_silent_since is not None
            _silent_for(server, WINDOW + 50.0, "a0", "a1", "a2")  # past the window again, still no agent heard
            server._check_agents()
            assert len(_said(caplog, "has been silent")) == 1
            assert set(server.backend.agents) == {"a0", "a1", "a2"} and not server.lost
            server.beat("a2")
            server._check_agents()
            assert _said(caplog, "heard again") and server.all_silent_since is None
    finally:
        server.stop()


def test_heartbeats_of_an_agent_heard_one_way_only_mean_not_every_agent_is_silent(
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch):
    """Review h213 (D3): the heartbeats of an agent heard one way only are received but not counted as signs of its
    life; beside a dead agent both were taken for every agent silent, and the dead one was held 60 s. The coordinator
    plainly hears its network then: the dead one is lost after its window, and the one-way agent as such an agent is."""
    server = watched("a0", "a1")
    try:
        monkeypatch.setattr(server.backend, "unanswered_for", lambda agent_id: 1e9 if agent_id == "a0" else 0.0)
        server.backend.answered_at = time.monotonic()  # a1 answered its polls until it died, a moment ago
        _silent_for(server, WINDOW + 100.0, "a0", "a1")
        with grpc.insecure_channel(server.address) as ch, \
                caplog.at_level(logging.WARNING, logger="vcemu.coordinator"):
            reply = pb_grpc.CoordinatorStub(ch).Heartbeat(pb.HeartbeatRequest(agent_id="a0"), timeout=5)
            assert reply.unreachable  # a0 heard one way only: its heartbeat is not a sign of its life
            server._check_agents()
        assert not _said(caplog, "has been silent") and server.all_silent_since is None
        assert "a1" in server.lost and "a0" in server.backend.agents
    finally:
        server.stop()


def test_status_of_a_hold_that_went_on_over_a_stall_does_not_say_more_silence_than_its_limit() -> None:
    """Review h218: after a stall of the coordinator during the all-silent hold, the hold goes on from the agents'
    stamps as the stall excuse moved them (its bound counted from those), but status's all_silent_for still counted
    from the hold's first start: it said "silent for 1,700 s: none is declared lost before 1,500 s of silence"."""
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


def test_a_heartbeat_received_during_the_look_that_starts_the_hold_ends_it_at_the_next_look(
        caplog: pytest.LogCaptureFixture) -> None:
    """Review h218: a heartbeat received while the watch's look is under way (after it read the stamps, before the
    hold starts) was in ``heard_at`` when the hold took ``heard_before_hold``, so at the next look that agent's fresh
    stamp was taken for a stall's (:meth:`_note_running`) and the hold went on, the heal not seen until its next
    heartbeat."""
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
