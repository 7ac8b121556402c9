"""The agent when the machine runs out of something (exhaustion review): no thread for a task's end (a pids limit),
a full /dev/shm under its lease file or a task's files. Each was a wedge or a permanent loss before."""

from __future__ import annotations

import errno
import os
import threading

import psutil

from node_agent import leaseclock
from node_agent.agent import AgentCore, HostSpec
from node_agent.dutycycle import DutyCycleDriver
from node_agent.runner import State
from tests.unit.test_agent_monitor import _FakeFreezer, _wait


def test_a_task_whose_end_gets_no_thread_is_ended_by_the_monitor(monkeypatch) -> None:
    """At a pids limit the thread that ends a finished task could not start: the exception ended the monitor (no more
    fencing, polls or ends), the task stayed "ending" for good, and every Stop of it waited for ever."""
    real = threading.Thread

    class NoEndThread(real):  # type: ignore[misc,valid-type]
        def start(self) -> None:
            if self.name.startswith("end-"):
                raise RuntimeError("can't start new thread")
            super().start()

    core = AgentCore("pytest-nothread", [HostSpec("h", 1.0, 1 << 30)], DutyCycleDriver(), {"dgemm": 1000.0})
    try:
        monkeypatch.setattr(threading, "Thread", NoEndThread)
        # (a program, so that its end has a process to kill: a modeled task ends without that thread)
        view = core.start_task("t/0", "h", "dgemm", cpu_share=1.0, cpu_need=1.0, work_seconds=0.3, memory_bytes=0)
        assert _wait(lambda: core.task("t/0").state is State.DONE, timeout=30.0), core.task("t/0")
        assert _wait(lambda: "t/0" not in core._ending), "the task's end never completed"
        monkeypatch.setattr(threading, "Thread", real)
        stopped = real(target=core.stop, args=("t/0",), daemon=True)
        stopped.start()
        stopped.join(5.0)
        assert not stopped.is_alive(), "Stop waited for an end that never came"
        assert core._monitor.is_alive()
        assert _wait(lambda: not psutil.pid_exists(view.pid) or psutil.Process(view.pid).status() == "zombie")
    finally:
        core.shutdown()


def test_a_lease_file_that_cannot_be_written_suspends_the_fencer_only_until_it_can(tmp_path, monkeypatch) -> None:
    """A full /dev/shm at one renewal stopped the fencer for the agent's life; now the lease file is removed (no
    lease: the fencer freezes nothing on a stale deadline) and written again at the next renewal that can."""
    from node_agent import agent as agent_mod

    core = AgentCore("pytest-leasefull", [HostSpec("h", 1.0, 1 << 30)], _FakeFreezer(str(tmp_path)), {})
    try:
        fencer = core._fencer
        assert fencer is not None
        real = agent_mod.write_lease

        def full(path: str, until: float | None) -> None:
            raise OSError(errno.ENOSPC, "No space left on device", path)

        monkeypatch.setattr(agent_mod, "write_lease", full)
        core.renew_lease(5.0, leaseclock.now())
        assert core._fencer is fencer and fencer.poll() is None, "the fencer was stopped"
        assert not os.path.exists(core._lease_file)
        monkeypatch.setattr(agent_mod, "write_lease", real)
        core.renew_lease(5.0, leaseclock.now())
        assert os.path.exists(core._lease_file)
    finally:
        core.shutdown()


def test_a_start_that_finds_no_room_is_refused_as_resource_exhausted() -> None:
    """"INTERNAL: agent failure: [Errno 28] No space left on device" failed the job for good, naming no place."""
    from node_agent.server import _refusal

    code, message = _refusal(OSError(errno.ENOSPC, "No space left on device", "/dev/shm/vcemu-agent-x/t.progress"))
    assert code == "RESOURCE_EXHAUSTED"
    assert message == ("agent out of space in /dev/shm/vcemu-agent-x (No space left on device); retry once it is "
                       "back")
    assert _refusal(RuntimeError("can't start new thread"))[0] == "RESOURCE_EXHAUSTED"
    assert _refusal(OSError(errno.EACCES, "Permission denied"))[0] == "INTERNAL"
