"""The fencer (node_agent.fencer): what it freezes, and when, on a stand-in freezer tree."""

from __future__ import annotations

import errno
import math
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from node_agent.fencer import FENCED, duty_release, duty_step, read_lease, release, step, write_lease, write_pids


@pytest.mark.parametrize(("v2", "name", "frozen", "thawed"), [(False, "freezer.state", "FROZEN", "THAWED"),
                                                             (True, "cgroup.freeze", "1", "0")])
def test_while_the_lease_has_run_out_every_task_group_is_kept_frozen(tmp_path: Path, v2: bool, name: str,
                                                                     frozen: str, thawed: str) -> None:
    parent, lease = tmp_path / "vcemu-a0", str(tmp_path / "lease")
    for group in ("t-0", "t-1", ".owner-123-456"):  # an owner marker is not a task
        (parent / group).mkdir(parents=True)
        (parent / group / name).write_text(thawed)

    def states() -> dict[str, str]:
        return {g: (parent / g / name).read_text() for g in ("t-0", "t-1", ".owner-123-456")}

    write_lease(lease, 100.0)
    assert step(lease, str(parent), v2, set(), 99.0) == set()  # the lease holds: nothing
    assert set(states().values()) == {thawed}
    done = step(lease, str(parent), v2, set(), 100.5)  # run out: every task group frozen
    assert done == {"t-0", "t-1"} and states() == {"t-0": frozen, "t-1": frozen, ".owner-123-456": thawed}
    (parent / "t-0" / name).write_text(thawed)  # a Resume that reached the slow agent: frozen again
    (parent / "t-2").mkdir()  # and a task started meanwhile
    (parent / "t-2" / name).write_text(thawed)
    done = step(lease, str(parent), v2, done, 101.0)
    assert done == {"t-0", "t-1", "t-2"} and states()["t-0"] == frozen and (parent / "t-2" / name).read_text() == frozen
    write_lease(lease, 200.0)  # renewed: nothing is frozen, and none is the fencer's to release
    (parent / "t-0" / name).write_text(thawed)
    assert step(lease, str(parent), v2, done, 150.0) == set()
    assert states()["t-0"] == thawed


def test_no_lease_and_an_unreadable_file_never_freeze(tmp_path: Path) -> None:
    lease = tmp_path / "lease"
    assert read_lease(str(lease)) == math.inf  # no file yet
    write_lease(str(lease), None)
    assert read_lease(str(lease)) == math.inf
    lease.write_text("12.5 garbage")
    assert read_lease(str(lease)) == math.inf
    write_lease(str(lease), 12.5)
    assert read_lease(str(lease)) == 12.5


def test_once_the_agent_is_gone_the_processes_of_every_frozen_group_are_killed(tmp_path: Path) -> None:
    """Review: an agent stopped, fenced by its fencer, then killed, left its tasks frozen for good (a frozen task
    never runs its own check of its parent), holding their memory until another agent's start-up swept them. So
    are a group frozen now that the fencer no longer counts as its own (the agent adopted it as fenced after a
    renewal) and a paused one; a group that is not frozen is left to end by its own check."""
    parent = tmp_path / "vcemu-a0"
    fenced, adopted, running = (subprocess.Popen(["sleep", "600"]) for _ in range(3))
    try:
        for group, proc, frozen in (("t-0", fenced, "1"), ("t-1", None, "1"), ("t-2", adopted, "1"),
                                    ("t-3", running, "0")):
            (parent / group).mkdir(parents=True)
            (parent / group / "cgroup.procs").write_text(f"{proc.pid}\n" if proc else "")
            (parent / group / "freezer.state").write_text("FROZEN" if frozen == "1" else "THAWED")
            (parent / group / "freezer.self_freezing").write_text(frozen)
        release(str(parent), False, {"t-0", "t-1"})
        assert fenced.wait(timeout=5) == -9 and adopted.wait(timeout=5) == -9
        assert (parent / "t-0" / "freezer.state").read_text() == "THAWED"  # (so that a real SIGKILL lands)
        assert running.poll() is None
    finally:
        for p in (fenced, adopted, running):
            p.kill()
            p.wait()


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def _reaches(pid: int, state: str) -> bool:
    """Whether the process is in ``state`` within 5 s (a signal is delivered after kill() returns, and a new
    process runs a while before it sleeps)."""
    deadline = time.monotonic() + 5
    while _state(pid) != state:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def test_without_cgroups_the_fencer_marks_and_stops_the_recorded_processes_and_kills_them_once_the_agent_is_gone(
        tmp_path: Path) -> None:
    """--no-cgroups agents had no fencer: a stopped agent's tasks ran on past its lease. The duty-cycle driver
    records each group's processes (pid and start time) for it; a pid recorded with another start time is a reused
    pid, never signalled. Once the agent is gone, every group's processes are killed, including those stopped when
    the lease was renewed (the agent then adopted them as fenced) and no longer the fencer's own."""
    parent, lease = tmp_path / "fence", str(tmp_path / "lease")
    task, stranger, other = (subprocess.Popen(["sleep", "600"]) for _ in range(3))
    try:
        start = int(Path(f"/proc/{task.pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
        other_start = int(Path(f"/proc/{other.pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
        for group, pids in (("t-0", {task.pid: start}), ("t-1", {stranger.pid: start + 12345}),
                            ("t-2", {other.pid: other_start})):
            (parent / group).mkdir(parents=True)
            write_pids(str(parent / group), pids)
        assert all(_reaches(p.pid, "S") for p in (task, stranger, other))
        write_lease(lease, 100.0)
        assert duty_step(lease, str(parent), set(), 99.0) == set()  # the lease holds: nothing
        assert not (parent / "t-0" / FENCED).exists() and _state(task.pid) == "S"
        done = duty_step(lease, str(parent), set(), 100.5)  # run out: marked, then stopped
        assert done == {"t-0", "t-1", "t-2"} and (parent / "t-0" / FENCED).exists()
        assert _reaches(task.pid, "T")
        time.sleep(0.05)
        assert _state(stranger.pid) == "S"  # a reused pid: never signalled
        os.kill(task.pid, signal.SIGCONT)  # continued by the agent's throttling thread just before the mark
        assert _reaches(task.pid, "S")
        assert duty_step(lease, str(parent), done, 100.6) == done and _reaches(task.pid, "T")  # stopped again
        # Renewed: the mark stays (only the agent's thaw removes it), and no group is the fencer's own any more.
        write_lease(lease, 200.0)
        done = duty_step(lease, str(parent), done, 150.0)
        assert done == set() and (parent / "t-0" / FENCED).exists()
        duty_release(str(parent))  # the agent is gone: every group's processes (a stopped one too)
        assert task.wait(timeout=5) == -9 and other.wait(timeout=5) == -9
        assert stranger.poll() is None
    finally:
        for p in (task, stranger, other):
            p.kill()
            p.wait()


def _refused(code: int) -> Callable[[int], int]:
    def pidfd_open(_pid: int) -> int:
        raise OSError(code, os.strerror(code))
    return pidfd_open


def test_the_agent_is_gone_only_once_its_process_has_ended_with_or_without_pidfds(monkeypatch) -> None:
    """Review: any failed read of the agent's /proc entry (ENFILE, say) counted as the agent gone, and the fencer
    then killed a live agent's tasks. It now waits on the agent's pidfd; without pidfds, only a missing entry (or
    another process under the pid) counts."""
    from node_agent import fencer

    for pidfds in (True, False):
        if not pidfds:
            monkeypatch.setattr(os, "pidfd_open", _refused(errno.ENOSYS))
        agent = subprocess.Popen(["sleep", "600"])
        try:
            gone = fencer._agent_gone(agent.pid)
            assert not gone()
            agent.send_signal(signal.SIGSTOP)  # an agent that does not run is not gone
            assert not gone()
            if not pidfds:  # nor one whose /proc entry cannot be read just now
                def no_files(*_args: object, **_kw: object) -> None:
                    raise OSError(errno.ENFILE, os.strerror(errno.ENFILE))
                monkeypatch.setattr(fencer, "open", no_files, raising=False)
                assert not gone()
                monkeypatch.delattr(fencer, "open")
        finally:
            agent.kill()
            agent.wait()
        assert gone()


def test_without_pidfds_the_fencer_still_stops_the_recorded_processes(tmp_path: Path, monkeypatch) -> None:
    """Review: a refused pidfd_open (a kernel before 5.3, a seccomp profile) was taken for a process gone: the
    fencer marked the group and stopped nothing."""
    monkeypatch.setattr(os, "pidfd_open", _refused(errno.EPERM))
    group, lease = tmp_path / "fence" / "t-0", str(tmp_path / "lease")
    task = subprocess.Popen(["sleep", "600"])
    try:
        start = int(Path(f"/proc/{task.pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
        group.mkdir(parents=True)
        write_pids(str(group), {task.pid: start})
        write_lease(lease, 100.0)
        assert duty_step(lease, str(group.parent), set(), 100.5) == {"t-0"} and _reaches(task.pid, "T")
        duty_release(str(group.parent))
        assert task.wait(timeout=5) == -9
    finally:
        task.kill()
        task.wait()
