"""The v2 driver's move of its cgroup's processes to the leaf vcemu.procs: only where it helps (EBUSY in a non-root
cgroup), naming what could not be moved (code review; on the fake cgroup2 of test_cgroups_unit)."""
from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from node_agent import cgroups
from node_agent.cgroups import CgroupError
from tests.unit.test_cgroups_unit import _fake_v2


def _kernel(monkeypatch, base: str, refuse: int, unmovable: set[int] = frozenset()) -> list[str]:
    """subtree_control refused with ``refuse`` (errno) while base holds processes; moves of ``unmovable`` fail."""
    real_write, moves = cgroups._write, []

    def write(path: str, value: str) -> None:
        if (path.endswith("cgroup.subtree_control") and os.path.dirname(path) == base
                and (refuse != errno.EBUSY or cgroups._pids_in(base))):
            raise CgroupError(f"cannot write {value!r} to {path}: {os.strerror(refuse)}") from OSError(refuse, "")
        if path == os.path.join(base, "vcemu.procs", "cgroup.procs"):
            moves.append(value)
            if int(value) in unmovable:
                raise CgroupError(f"cannot write {value!r} to {path}: Invalid argument")
            left = [p for p in cgroups._pids_in(base) if p != int(value)]
            Path(base, "cgroup.procs").write_text("".join(f"{p}\n" for p in left))
            Path(path).write_text((Path(path).read_text() if Path(path).exists() else "") + value + "\n")
            return
        real_write(path, value)

    monkeypatch.setattr(cgroups, "_write", write)
    return moves


def test_a_refusal_that_is_not_ebusy_moves_the_units_processes_for_nothing(tmp_path, monkeypatch) -> None:
    """EINVAL (cgroup-v2.rst: cpu cannot be enabled while a realtime process is outside the root), EACCES...: no move
    can help, yet every process of the agent's cgroup is moved, and left, in vcemu.procs."""
    base, mountinfo, proc_cgroup = _fake_v2(tmp_path, "/system.slice/vcemu.service", "100\n101\n")
    moves = _kernel(monkeypatch, base, errno.EINVAL)
    with pytest.raises(cgroups.CgroupUnavailable):
        cgroups.open_driver("r1", prefer=("cgroup-v2",), mountinfo=mountinfo, proc_cgroup=proc_cgroup)
    assert moves == [], f"moved {moves} to vcemu.procs on EINVAL"


def test_in_the_root_cgroup_a_failure_moves_every_process_of_the_host(tmp_path, monkeypatch) -> None:
    """The root is exempt from the no-internal-processes rule: a failure there is never EBUSY-for-processes, yet
    the agent makes /vcemu.procs and moves the host's processes (kernel threads refused, 10 rounds over them)."""
    base, mountinfo, proc_cgroup = _fake_v2(tmp_path, "/", "1\n2\n300\n")
    moves = _kernel(monkeypatch, base, errno.EINVAL, unmovable={2})  # (the root: no cgroup.type)
    with pytest.raises(cgroups.CgroupUnavailable):
        cgroups.open_driver("r2", prefer=("cgroup-v2",), mountinfo=mountinfo, proc_cgroup=proc_cgroup)
    assert moves == [], f"moved {moves} out of the root cgroup"


def test_a_process_that_cannot_be_moved_is_named(tmp_path, monkeypatch) -> None:
    base, mountinfo, proc_cgroup = _fake_v2(tmp_path, "/system.slice/vcemu.service", "100\n4242\n")
    moves = _kernel(monkeypatch, base, errno.EBUSY, unmovable={4242})
    with pytest.raises(cgroups.CgroupUnavailable) as e:
        cgroups.open_driver("r3", prefer=("cgroup-v2",), mountinfo=mountinfo, proc_cgroup=proc_cgroup)
    assert len(moves) <= 11
    assert "4242" in str(e.value)
