"""CgroupV2Driver's freeze, thaw, is_frozen, oom_kills, cpu_usage_s and pids on a directory tree standing in for a
delegated cgroup2 subtree. On a cgroup-v1 machine (this project's VM) no test reached them: the integration tests run
the driver the machine has. The files are plain files here, so the kernel's side (cgroup.events changing) is
scripted."""

from __future__ import annotations

import os

import pytest

from node_agent.cgroups import CgroupError, CgroupV2Driver


def test_v2_driver_files(tmp_path) -> None:  # type: ignore[no-untyped-def]
    d = CgroupV2Driver(str(tmp_path / "vcemu-agent-x"))
    d.create("t0")
    g = tmp_path / "vcemu-agent-x" / "t0"
    d.set_cpu("t0", 0.5)
    assert (g / "cpu.max").read_text() == "50000 100000"
    d.set_memory_limit("t0", 1 << 20)
    assert (g / "memory.max").read_text() == str(1 << 20)
    d.freeze("t0")  # (no cgroup.events here: not waited for)
    assert d.is_frozen("t0") and (g / "cgroup.freeze").read_text() == "1"
    d.thaw("t0")
    assert not d.is_frozen("t0")
    (g / "cgroup.events").write_text("populated 1\nfrozen 0\n")
    with pytest.raises(CgroupError, match="did not reach 'frozen 1'"):
        d.freeze("t0")  # the kernel never reports it frozen: a timeout, said
    (g / "memory.events").write_text("low 0\nhigh 0\nmax 2\noom 1\noom_kill 1\n")
    assert d.oom_kills("t0") == 1
    (g / "cpu.stat").write_text("usage_usec 2500000\nuser_usec 2000000\n")
    assert d.cpu_usage_s("t0") == 2.5
    (g / "cgroup.procs").write_text(f"{os.getpid()}\n")
    assert d.pids("t0") == [os.getpid()]
    assert d.fencer_args() == ["--v2", str(tmp_path / "vcemu-agent-x")]
