"""The fencer (node_agent.fencer): what it freezes, and when, on a stand-in freezer tree."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from node_agent.fencer import read_lease, step, write_lease


@pytest.mark.parametrize(("v2", "name", "frozen"), [(False, "freezer.state", "FROZEN"), (True, "cgroup.freeze", "1")])
def test_once_the_lease_has_run_out_each_task_group_is_frozen_once(tmp_path: Path, v2: bool, name: str,
                                                                   frozen: str) -> None:
    parent, lease = tmp_path / "vcemu-a0", str(tmp_path / "lease")
    for group in ("t-0", "t-1", ".owner-123-456"):  # an owner marker is not a task
        (parent / group).mkdir(parents=True)
        (parent / group / name).write_text("THAWED" if not v2 else "0")

    def states() -> dict[str, str]:
        return {g: (parent / g / name).read_text() for g in ("t-0", "t-1", ".owner-123-456")}

    write_lease(lease, 100.0)
    assert step(lease, str(parent), v2, set(), 99.0) == set()  # the lease holds: nothing
    assert set(states().values()) == {"THAWED" if not v2 else "0"}
    done = step(lease, str(parent), v2, set(), 100.5)  # run out: every task group frozen
    assert done == {"t-0", "t-1"} and states() == {"t-0": frozen, "t-1": frozen,
                                                 ".owner-123-456": "THAWED" if not v2 else "0"}
    (parent / "t-0" / name).write_text("thawed by a kill")  # a kill thaws as it goes: not fought
    (parent / "t-2").mkdir()  # a task started meanwhile is frozen too
    (parent / "t-2" / name).write_text("")
    done = step(lease, str(parent), v2, done, 101.0)
    assert done == {"t-0", "t-1", "t-2"} and states()["t-0"] == "thawed by a kill"
    assert (parent / "t-2" / name).read_text() == frozen
    write_lease(lease, 200.0)  # renewed: a later expiry freezes them all again
    assert step(lease, str(parent), v2, done, 150.0) == set()
    assert step(lease, str(parent), v2, set(), 201.0) == {"t-0", "t-1", "t-2"}
    assert states()["t-0"] == frozen


def test_no_lease_and_an_unreadable_file_never_freeze(tmp_path: Path) -> None:
    lease = tmp_path / "lease"
    assert read_lease(str(lease)) == math.inf  # no file yet
    write_lease(str(lease), None)
    assert read_lease(str(lease)) == math.inf
    lease.write_text("12.5 garbage")
    assert read_lease(str(lease)) == math.inf
    write_lease(str(lease), 12.5)
    assert read_lease(str(lease)) == 12.5
