"""``vcemu up``'s restart of its agent processes: the rule (:class:`coordinator.restarts.Restarts`) and the watch
that applies it (:class:`coordinator.servers.AgentWatch`), on fake processes: which line each exit gives, when the
agent is started again, and when ``up`` stops."""

from __future__ import annotations

import pytest

from coordinator import servers
from coordinator.restarts import Restarts
from coordinator.servers import AgentWatch


def test_a_failure_is_restarted_after_doubling_delays_until_the_limit() -> None:
    r = Restarts(limit=3)
    assert [r.after_exit("a0", -9), r.after_exit("a0", 1), r.after_exit("a0", -6)] == [1.0, 2.0, 4.0]
    assert r.after_exit("a0", -9) is None  # used up
    assert r.count("a0") == 3
    assert r.after_exit("a1", -9) == 1.0  # each agent id has its own count


def test_a_clean_exit_is_not_restarted_and_not_counted() -> None:
    r = Restarts(limit=3)
    assert r.after_exit("a0", 0) is None
    assert r.count("a0") == 0


def test_no_restart_at_limit_zero_and_the_delay_is_capped() -> None:
    assert Restarts(limit=0).after_exit("a0", -9) is None
    r = Restarts(limit=10, first_delay_s=1.0, max_delay_s=30.0)
    assert [r.after_exit("a0", 1) for _ in range(7)] == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]


def test_a_crash_after_a_steady_run_counts_afresh() -> None:
    r = Restarts(limit=2)
    assert [r.after_exit("a0", -9, ran_s=5.0), r.after_exit("a0", -9, ran_s=599.0)] == [1.0, 2.0]
    assert r.after_exit("a0", -9, ran_s=600.0) == 1.0 and r.count("a0") == 1  # ran 10 minutes: not a crash loop
    assert r.after_exit("a0", 1, ran_s=3.0) == 2.0
    assert r.after_exit("a0", -9, ran_s=3.0) is None and r.count("a0") == 2  # two in a row: used up
    assert r.after_exit("a0", 0, ran_s=7200.0) is None and r.count("a0") == 2  # a clean exit resets nothing


def test_an_agent_that_refused_a_setting_is_not_restarted() -> None:
    r = Restarts(limit=3)
    assert r.after_exit("a0", 2) is None and r.count("a0") == 0  # (a port taken meanwhile: it would only fail again)


class FakeProc:
    """A ``subprocess.Popen`` of ``vcemu agent`` as far as the watch reads it."""

    pids = iter(range(1000, 2000))

    def __init__(self, agent_id: str, returncode: int | None = None) -> None:
        self.args = ["python", "-m", "coordinator.cli", "agent", "--agent-id", agent_id]
        self.returncode = returncode
        self.pid = next(self.pids)

    def poll(self) -> int | None:
        return self.returncode


class FakeServer:
    """What :func:`coordinator.servers.agent_exit_line` reads of the coordinator."""

    def __init__(self) -> None:
        import threading

        self.engine = type("E", (), {"lock": threading.Lock()})()
        self.backend = type("B", (), {"host_agent": {"a0-h0": "a0", "a1-h0": "a1"}})()
        self.heartbeat_misses, self.heartbeat_s = 3, 2.0


@pytest.fixture
def respawned(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The agent ids started again (a fake process, running)."""
    started: list[str] = []

    def respawn(proc: FakeProc) -> FakeProc:
        agent = proc.args[-1]
        started.append(agent)
        return FakeProc(agent)

    monkeypatch.setattr(servers, "respawn_agent", respawn)
    return started


def test_the_watch_restarts_a_killed_agent_after_its_delay_and_stops_once_all_are_gone_for_good(
        respawned: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    procs = [FakeProc("a0"), FakeProc("a1")]
    watch = AgentWatch(FakeServer(), procs, Restarts(limit=1))  # type: ignore[arg-type]
    assert watch.check(0.0) is False and capsys.readouterr().err == ""

    procs[0].returncode = -9
    first = procs[0].pid
    assert watch.check(10.0) is False
    assert capsys.readouterr().err == (
        f"vcemu up: agent a0 (pid {first}) was killed by SIGKILL; starting it again in 1 s (restart 1 of 1): the jobs "
        "it ran are requeued with their last progress once it has registered again, or once its hosts are declared "
        "lost after 6 s without heartbeats\n")
    assert watch.check(10.5) is False and respawned == []  # not yet due
    assert watch.check(11.0) is False and respawned == ["a0"]
    assert procs[0].pid != first  # in place: whoever stops the agents stops the new one
    assert capsys.readouterr().err == f"vcemu up: agent a0 started again (pid {procs[0].pid})\n"

    procs[0].returncode = -9  # again: its one restart is used
    second = procs[0].pid
    assert watch.check(20.0) is False
    assert capsys.readouterr().err == (
        f"vcemu up: agent a0 (pid {second}) was killed by SIGKILL; its hosts a0-h0 will be declared lost after 6 s "
        "without heartbeats, and their jobs requeued on the other agents (not started again: restarted 1 time "
        "in a row, each time within 10 minutes of its start, --restart-agents 1)\n")

    procs[1].returncode = 0  # a clean exit (SIGTERM): not restarted, and up stops
    assert watch.check(21.0) is True
    assert capsys.readouterr().err == f"vcemu up: agent a1 (pid {procs[1].pid}) exited with code 0\n"
    assert respawned == ["a0"]


def test_the_watch_counts_afresh_for_an_agent_that_ran_ten_minutes_since_its_restart(
        respawned: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    procs = [FakeProc("a0"), FakeProc("a1")]
    watch = AgentWatch(FakeServer(), procs, Restarts(limit=1))  # type: ignore[arg-type]
    assert watch.check(0.0) is False
    procs[0].returncode = -9
    assert watch.check(5.0) is False and watch.check(6.0) is False and respawned == ["a0"]  # restart 1 of 1
    capsys.readouterr()
    procs[0].returncode = -9  # 599 s after its restart: in a row, so its one restart is used
    assert watch.check(605.0) is False and respawned == ["a0"]
    assert "not started again: restarted 1 time in a row" in capsys.readouterr().err

    procs[1].returncode = -9  # a1's first crash: its first restart
    assert watch.check(700.0) is False and watch.check(701.0) is False and respawned == ["a0", "a1"]
    procs[1].returncode = -9  # 600 s after that restart: counted afresh, started again
    assert watch.check(1301.0) is False
    assert "starting it again in 1 s (restart 1 of 1)" in capsys.readouterr().err
    assert watch.check(1302.0) is False and respawned == ["a0", "a1", "a1"]


def test_up_does_not_stop_while_its_last_agent_is_to_be_started_again(
        respawned: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    procs = [FakeProc("a0", returncode=1)]
    watch = AgentWatch(FakeServer(), procs, Restarts(limit=2))  # type: ignore[arg-type]
    assert watch.check(0.0) is False
    assert "exited with code 1; starting it again in 1 s (restart 1 of 2)" in capsys.readouterr().err
    assert watch.check(1.0) is False and respawned == ["a0"]


def test_an_agent_that_cannot_be_started_again_is_gone(monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    def fail(proc: FakeProc) -> FakeProc:
        raise OSError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(servers, "respawn_agent", fail)
    procs = [FakeProc("a0", returncode=-9)]
    watch = AgentWatch(FakeServer(), procs, Restarts(limit=3))  # type: ignore[arg-type]
    assert watch.check(0.0) is False
    assert watch.check(1.0) is True
    assert capsys.readouterr().err.splitlines()[-1] == (
        "vcemu up: agent a0 could not be started again: Resource temporarily unavailable")


def test_without_restarts_the_lines_are_those_of_before(respawned: list[str],
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    procs = [FakeProc("a0", returncode=-9), FakeProc("a1")]
    watch = AgentWatch(FakeServer(), procs, Restarts(limit=0))  # type: ignore[arg-type]
    assert watch.check(0.0) is False
    assert capsys.readouterr().err == (
        f"vcemu up: agent a0 (pid {procs[0].pid}) was killed by SIGKILL; its hosts a0-h0 will be declared lost after "
        "6 s without heartbeats, and their jobs requeued on the other agents\n")
    assert respawned == []


def test_the_watch_leaves_down_an_agent_that_refused_a_setting(respawned: list[str],
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    procs = [FakeProc("a0", returncode=2)]
    watch = AgentWatch(FakeServer(), procs, Restarts(limit=3))  # type: ignore[arg-type]
    assert watch.check(0.0) is True and respawned == []
    assert capsys.readouterr().err == f"vcemu up: agent a0 (pid {procs[0].pid}) exited with code 2\n"
