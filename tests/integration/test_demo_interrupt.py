"""``vcemu demo`` stopped by Ctrl-C or SIGTERM (a user, ``make demo`` under CI's timeout) once its cluster is up:
the agent processes it spawned run in sessions of their own, so neither the terminal's Ctrl-C nor the demo's own
death reaches them, and left running they retry a dead coordinator for ever. The demo must stop them itself and
end as ``vcemu up`` does when interrupted: one line, exit status 130, no traceback. Real processes: the smallest
demo (one host, one job, ``--no-cgroups`` so that no cgroup is needed), signalled once it has printed its
header, which it does after every agent has registered."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.test_up_agent_death import ROOT, children, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def descendants(pid: int) -> dict[int, bytes]:
    """Every process below ``pid`` (agents, and the tasks they run), with its command line: read while the demo
    lives, since an orphan is re-parented and could no longer be found from it."""
    found: dict[int, bytes] = {}
    todo = [pid]
    while todo:
        for child in children(todo.pop()):
            with contextlib.suppress(OSError):
                found[child] = Path(f"/proc/{child}/cmdline").read_bytes()
                todo.append(child)
    return found


def still_running(pid: int, cmdline: bytes) -> bool:
    """Whether ``pid`` is still the process that had ``cmdline`` (not reused), and not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        return state != "Z" and Path(f"/proc/{pid}/cmdline").read_bytes() == cmdline
    except OSError:
        return False


def assert_all_gone(spawned: dict[int, bytes], within: float) -> None:
    """Every process of ``spawned`` has ended within ``within`` seconds (a task an agent ran may take a moment to
    go after the agent)."""
    deadline = time.monotonic() + within
    while (left := [p for p, argv in spawned.items() if still_running(p, argv)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, {p: spawned[p] for p in left}


def kill_leftovers(spawned: dict[int, bytes], command: subprocess.Popen) -> None:
    """After a test, whatever it passed or failed on: what is left of the command and of what it spawned."""
    for pid, argv in spawned.items():
        if still_running(pid, argv):
            os.kill(pid, signal.SIGKILL)
    if command.poll() is None:
        os.killpg(command.pid, signal.SIGKILL)
        command.wait()


def start_demo(tmp_path: Path) -> tuple[subprocess.Popen, Path]:
    """The smallest demo, once its cluster is up (it prints its header after every agent has registered): the
    process and its stderr file."""
    out_path, err_path = tmp_path / "demo.out", tmp_path / "demo.err"
    with out_path.open("wb") as out, err_path.open("wb") as err:
        demo = subprocess.Popen([sys.executable, "-m", "coordinator.cli", "demo", "--hosts", "1", "--jobs", "1",
                                 "--span", "1", "--no-cgroups", "--out", str(tmp_path / "results")],
                                cwd=ROOT, stdout=out, stderr=err, start_new_session=True)
    try:
        wait_for("the demo's cluster never came up", lambda: re.search(r"vcemu demo: 1 hosts ", out_path.read_text()),
                 90, err_path)
    except BaseException:
        kill_leftovers(descendants(demo.pid), demo)
        raise
    return demo, err_path


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_demo_stopped_by_a_signal_stops_its_agents_and_says_so_in_one_line(sig: signal.Signals,
                                                                            tmp_path: Path) -> None:
    demo, err_path = start_demo(tmp_path)
    spawned: dict[int, bytes] = {}
    try:
        spawned = descendants(demo.pid)
        # The demo's own children: a process the agent is starting (a spare) has the agent's command line until
        # its exec, and was once counted as a second agent (CI).
        agents = [pid for pid in children(demo.pid) if b"\0agent\0" in spawned.get(pid, b"")]
        assert len(agents) == 1, spawned
        demo.send_signal(sig)
        code = demo.wait(60)
        stderr = err_path.read_text(errors="replace")
        assert code == 130, stderr
        assert "Traceback" not in stderr, stderr
        assert stderr.strip().splitlines() == [
            "vcemu demo: interrupted; the coordinator and the agents it started are stopped"], stderr
        assert_all_gone(spawned, 30)  # (a deadline against a hang only: returns once all are gone)
    finally:
        kill_leftovers(spawned, demo)


def test_agents_of_a_demo_killed_outright_stop_on_their_own(tmp_path: Path) -> None:
    """A demo killed by SIGKILL (or by a signal in a window no handler covers) cannot stop its agents: they watch
    their parent (``--parent-pid``) and stop themselves once it is gone. Before, they ran on, retrying a dead
    coordinator for ever."""
    demo, err_path = start_demo(tmp_path)
    spawned: dict[int, bytes] = {}
    try:
        spawned = descendants(demo.pid)
        assert [pid for pid, argv in spawned.items() if b"\0agent\0" in argv], spawned
        demo.send_signal(signal.SIGKILL)
        assert demo.wait(10) == -signal.SIGKILL
        assert_all_gone(spawned, 60)  # (a deadline against a hang only: returns once all are gone)
    finally:
        kill_leftovers(spawned, demo)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_replay_stopped_by_a_signal_stops_its_agents_and_says_so_in_one_line(sig: signal.Signals,
                                                                              tmp_path: Path) -> None:
    """``vcemu replay`` had the demo's old problem: SIGTERM ended it at once (its agents left behind) and Ctrl-C
    printed a traceback (found by review)."""
    trace = tmp_path / "one.jsonl"
    trace.write_text('{"id": "a", "submit_time": 0, "tasks": 1, "cpu_need": 1.0, "memory": 0.1, "work": 3000}\n')
    out_path, err_path = tmp_path / "replay.out", tmp_path / "replay.err"
    with out_path.open("wb") as out, err_path.open("wb") as err:
        replay = subprocess.Popen([sys.executable, "-m", "coordinator.cli", "replay", str(trace), "--policy",
                                   "greedy", "--compress", "1", "--hosts", "1", "--no-cgroups",
                                   "--out", str(tmp_path / "results")],
                                  cwd=ROOT, stdout=out, stderr=err, start_new_session=True)
    spawned: dict[int, bytes] = {}
    try:
        def agent_up() -> bool:
            nonlocal spawned
            spawned = descendants(replay.pid)
            return any(b"\0agent\0" in argv for argv in spawned.values())

        wait_for("the replay's agent never started", agent_up, 90, err_path)
        wait_for("the replay never started its job", lambda: "task start" in
                 next((tmp_path / "results").iterdir()).joinpath("agents.log").read_text(), 60, err_path)
        spawned = descendants(replay.pid)
        replay.send_signal(sig)
        code = replay.wait(60)
        stderr = err_path.read_text(errors="replace")
        assert code == 130, stderr
        assert "Traceback" not in stderr, stderr
        assert "vcemu replay: interrupted; the coordinator and the agents it started are stopped" in stderr, stderr
        assert_all_gone(spawned, 30)  # (a deadline against a hang only: returns once all are gone)
    finally:
        kill_leftovers(spawned, replay)


def test_up_whose_output_reader_is_gone_still_stops_its_agents(tmp_path: Path) -> None:
    """``vcemu up ... | tee up.log``, then Ctrl-C: the terminal's SIGINT ends tee as well, so up's "stopping" line
    and its agents' last words go to pipes nobody reads. up died of the BrokenPipeError before stopping its agents,
    and each agent's parent watch died of the same error before setting its stop: the agent and its tasks ran on
    for good (found by review). Here the reader of both of up's pipes goes away before the SIGINT."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    up = subprocess.Popen([sys.executable, "-m", "coordinator.cli", "up", "--hosts", "1", "--no-cgroups", "--port",
                           str(port), "--metrics-port", "0"],
                          cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    spawned: dict[int, bytes] = {}
    try:
        assert up.stdout is not None and up.stderr is not None
        line = up.stdout.readline()  # up prints it once its agent has registered
        assert b"Ctrl-C stops." in line, line + up.stderr.read()
        spawned = descendants(up.pid)
        assert [pid for pid, argv in spawned.items() if b"\0agent\0" in argv], spawned
        up.stdout.close()
        up.stderr.close()
        up.send_signal(signal.SIGINT)
        up.wait(60)
        assert_all_gone(spawned, 60)  # (a deadline against a hang only: returns once all are gone)
    finally:
        kill_leftovers(spawned, up)
