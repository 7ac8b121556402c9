"""The fencer (node_agent.fencer): what it freezes, and when, on a stand-in freezer tree."""

from __future__ import annotations

import math
import subprocess
from pathlib import Path

import pytest

from node_agent.fencer import read_lease, release, step, write_lease


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


def test_once_the_agent_is_gone_the_processes_of_the_groups_it_froze_are_killed(tmp_path: Path) -> None:
    """Review: an agent stopped, fenced by its fencer, then killed, left its tasks frozen for good (a frozen task
    never runs its own check of its parent), holding their memory until another agent's start-up swept them."""
    parent = tmp_path / "vcemu-a0"
    sleeper = subprocess.Popen(["sleep", "600"])
    try:
        for group, pids in (("t-0", f"{sleeper.pid}\n"), ("t-1", "")):
            (parent / group).mkdir(parents=True)
            (parent / group / "cgroup.procs").write_text(pids)
            (parent / group / "freezer.state").write_text("FROZEN")
        release(str(parent), {"t-0", "t-1"})
        assert sleeper.wait(timeout=5) == -9
        assert (parent / "t-0" / "freezer.state").read_text() == "THAWED"  # (so that a real SIGKILL lands)
    finally:
        sleeper.kill()
