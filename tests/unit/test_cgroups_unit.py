"""Node agent pieces that need neither root nor cgroups: CFS arithmetic, cgroup discovery parsing, the
v1/v2 drivers' file formats (on a fake cgroup tree), the progress channel, sizes and CLI refusals."""

from __future__ import annotations

import errno
import math
import os
import shutil
import subprocess
import time
from pathlib import Path

import psutil
import pytest
from hypothesis import given
from hypothesis import strategies as st

from node_agent import cgroups
from node_agent.cgroups import (
    ORDINARY_CORES,
    CgroupError,
    CgroupV1Driver,
    CgroupV2Driver,
    CpuWeights,
    Mount,
    Owner,
    cfs_period_quota_us,
    cpu_weight_v1,
    own_dir,
    owners,
    parse_mountinfo,
    parse_proc_cgroup,
    safe_name,
)
from node_agent.cli import agent_main
from node_agent.runner import TaskSpec, target_units
from vcemu.sizes import parse_size
from workloads import progress


@pytest.mark.parametrize(("cores", "expected"), [
    (0.25, (100_000, 25_000)),
    (1.0, (100_000, 100_000)),
    (1.5, (100_000, 150_000)),
    (0.01, (100_000, 1_000)),
    (0.005, (200_000, 1_000)),  # longer period keeps the quota at the 1 ms minimum
    (0.0001, (1_000_000, 1_000)),  # below 0.001 core: clamped to the smallest expressible limit
])
def test_cfs_period_and_quota(cores: float, expected: tuple[int, int]) -> None:
    assert cfs_period_quota_us(cores) == expected


@given(st.floats(min_value=0.001, max_value=64.0))
def test_cfs_quota_is_valid_and_exact(cores: float) -> None:
    period, quota = cfs_period_quota_us(cores)
    assert 1_000 <= period <= 1_000_000 and quota >= 1_000
    assert quota / period == pytest.approx(cores, rel=1e-3, abs=1e-6)


def test_cfs_refuses_non_positive() -> None:
    with pytest.raises(ValueError):
        cfs_period_quota_us(0.0)


MOUNTINFO = """\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 /outer /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""


def test_mountinfo_and_own_cgroup_paths() -> None:
    mounts = parse_mountinfo(MOUNTINFO)
    assert [m.point for m in mounts] == ["/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup/memory",
                                        "/sys/fs/cgroup/systemd", "/sys/fs/cgroup/unified"]
    assert mounts[0].controllers == {"cpu", "cpuacct"} and mounts[3].fstype == "cgroup2"
    own = parse_proc_cgroup("4:memory:/outer/job\n2:cpu,cpuacct:/\n1:name=systemd:/x\n0::/user.slice\n")
    assert own == {"memory": "/outer/job", "cpu": "/", "cpuacct": "/", "name=systemd": "/x", "": "/user.slice"}
    assert own_dir(mounts[1], own["memory"]) == "/sys/fs/cgroup/memory/job"  # mount root is /outer
    assert own_dir(mounts[0], "/") == "/sys/fs/cgroup/cpu,cpuacct"
    assert own_dir(Mount("/m", "/a", "cgroup", frozenset()), "/elsewhere") == "/m"


def test_safe_name_keeps_task_ids_apart() -> None:
    a, b = safe_name("job/1"), safe_name("job_1")
    assert a != b and "/" not in a and a.startswith("job_1-")
    assert not safe_name("../..").startswith(".")


def _touch(path: str, content: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(content)


def test_v1_driver_writes_quota_period_weight_and_limit(tmp_path) -> None:
    parents = {c: str(tmp_path / c / "vcemu-a") for c in ("cpu", "cpuacct", "freezer", "memory")}
    d = CgroupV1Driver(parents)
    assert (tmp_path / "cpu/vcemu-a/cpu.shares").read_text() == "2"  # no task yet: the least weight
    d.create("t")
    _touch(str(tmp_path / "cpu/vcemu-a/t/cpu.cfs_period_us"), "100000")
    d.set_cpu("t", 0.005)
    assert (tmp_path / "cpu/vcemu-a/t/cpu.cfs_period_us").read_text() == "200000"
    assert (tmp_path / "cpu/vcemu-a/t/cpu.cfs_quota_us").read_text() == "1000"
    assert (tmp_path / "cpu/vcemu-a/t/cpu.shares").read_text() == "328"  # 65536 x 0.005
    assert (tmp_path / "cpu/vcemu-a/cpu.shares").read_text() == "328"
    d.set_memory_limit("t", 123)
    assert (tmp_path / "memory/vcemu-a/t/memory.limit_in_bytes").read_text() == "123"
    d.freeze("t")
    assert (tmp_path / "freezer/vcemu-a/t/freezer.state").read_text() == "FROZEN"
    _touch(str(tmp_path / "cpuacct/vcemu-a/t/cpuacct.usage"), "2500000000\n")
    assert d.cpu_usage_s("t") == 2.5


def test_drivers_record_their_owner_in_each_parent(tmp_path) -> None:
    parents = {c: str(tmp_path / c / "vcemu-a") for c in ("cpu", "cpuacct", "freezer", "memory")}
    v1 = CgroupV1Driver(parents)
    v2 = CgroupV2Driver(str(tmp_path / "v2" / "vcemu-a"))
    for d in [*v1.dirs(), *v2.dirs()]:
        assert owners([d]) == {Owner.me()}
        assert os.path.isdir(os.path.join(d, Owner.me().marker))


def test_an_owner_is_alive_only_while_its_process_runs_and_a_reused_pid_is_not_it() -> None:
    me = Owner.me()
    assert me.marker.startswith(".owner-") and Owner.parse(me.marker) == me
    assert me.alive() is True
    assert Owner(me.pidns, me.pid, me.start + 1).alive() is False  # this pid, another start: a reused pid
    assert Owner(me.pidns + 1, me.pid, me.start).alive() is None  # another pid namespace: cannot be judged
    for name in ("job_1-0a1b2c3d", ".owner-1-2", ".owner-1-2-x", "owner-1-2-3"):
        assert Owner.parse(name) is None
    child = subprocess.Popen(["sleep", "30"])
    try:
        owner = Owner(me.pidns, child.pid, _start(child.pid))
        assert owner.alive() is True
        child.kill()
        deadline = time.monotonic() + 5
        while psutil.Process(child.pid).status() != psutil.STATUS_ZOMBIE:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert owner.alive() is False, "a zombie (killed, not yet reaped by its parent) is dead"
    finally:
        child.kill()
        child.wait()
    assert owner.alive() is False


def _start(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[19])


def _rmtree_groups(monkeypatch) -> None:
    """Let ``remove`` take a group made of plain files (the kernel removes a cgroup's control files with it)."""
    monkeypatch.setattr(cgroups, "_rmdir", lambda d: shutil.rmtree(d))


def test_v1_weights_running_tasks_by_share_booting_ones_as_one_process_and_the_parent_the_sum(
        tmp_path, monkeypatch) -> None:
    _rmtree_groups(monkeypatch)
    parents = {c: str(tmp_path / c / "vcemu-a") for c in ("cpu", "cpuacct", "freezer", "memory")}
    d = CgroupV1Driver(parents)
    cpu = tmp_path / "cpu/vcemu-a"

    def shares(name: str = "") -> str:
        return (cpu / name / "cpu.shares").read_text()

    for name in ("t1", "t2", "t3"):
        d.create(name)
        _touch(str(cpu / name / "cpu.cfs_period_us"), "100000")
    d.set_cpu("t1", 0.5, reserved=False)  # booting, capped at its host's half core
    assert (cpu / "t1/cpu.cfs_quota_us").read_text() == "50000"
    assert (shares("t1"), shares()) == ("1024", "1024")  # one ordinary process
    d.set_cpu("t2", 0.5, reserved=False)
    assert (shares("t1"), shares("t2"), shares()) == ("512", "512", "1024")  # two booting: one process together
    d.freeze("t2")  # a booting task paused: the other boots alone
    assert (shares("t1"), shares()) == ("1024", "1024")
    d.thaw("t2")
    assert (shares("t1"), shares("t2"), shares()) == ("512", "512", "1024")
    d.set_cpu("t1", 0.25)  # booted: its share's reservation
    assert (shares("t1"), shares("t2"), shares()) == ("16384", "1024", str(16384 + 1024))
    d.set_cpu("t3", 1.0)
    assert shares() == str(16384 + 1024 + 65536)
    d.freeze("t3")  # paused: it does not run, and weighs nothing in the parent
    assert shares() == str(16384 + 1024)
    d.thaw("t3")
    assert shares() == str(16384 + 1024 + 65536)
    d.remove("t2")
    assert shares() == str(16384 + 65536)
    d.remove("t1")
    d.remove("t3")
    assert shares() == "2"  # no task: the least weight


def test_v2_weights_the_same_way(tmp_path, monkeypatch) -> None:
    _rmtree_groups(monkeypatch)
    d = CgroupV2Driver(str(tmp_path / "vcemu-a"))
    parent = tmp_path / "vcemu-a"
    assert (parent / "cpu.weight").read_text() == "1"
    d.create("t")
    d.set_cpu("t", 1.0, reserved=False)
    assert (parent / "t/cpu.max").read_text() == "100000 100000"
    assert (parent / "t/cpu.weight").read_text() == "100"  # one ordinary process, as 1024 is in v1
    assert (parent / "cpu.weight").read_text() == "100"
    d.set_cpu("t", 0.25)
    assert (parent / "t/cpu.weight").read_text() == "1600"
    assert (parent / "cpu.weight").read_text() == "1600"
    d.remove("t")
    assert (parent / "cpu.weight").read_text() == "1"


def test_a_group_that_could_not_be_removed_keeps_its_weight_while_it_has_processes(tmp_path, monkeypatch) -> None:
    """Its processes may still run (they outlived the kill): a later remove drops its weight. A group without
    processes weighs nothing, whether or not all of its directories went."""
    parents = {c: str(tmp_path / c / "vcemu-a") for c in ("cpu", "cpuacct", "freezer", "memory")}
    d = CgroupV1Driver(parents)
    for name in ("t", "u"):
        d.create(name)
        _touch(str(tmp_path / f"cpu/vcemu-a/{name}/cpu.cfs_period_us"), "100000")
        d.set_cpu(name, 0.5)
    _touch(str(tmp_path / "cpu/vcemu-a/t/cgroup.procs"), "4242\n")  # a survivor

    def busy(path: str) -> None:
        raise CgroupError(f"cannot remove {path}: Device or resource busy")

    monkeypatch.setattr(cgroups, "_rmdir", busy)
    with pytest.raises(CgroupError):
        d.remove("t")
    assert (tmp_path / "cpu/vcemu-a/cpu.shares").read_text() == str(2 * 32768)

    def cpu_only(path: str) -> None:  # the cpu group goes, the next hierarchy's stays busy
        if "/cpu/" not in path:
            busy(path)
        shutil.rmtree(path)

    monkeypatch.setattr(cgroups, "_rmdir", cpu_only)
    with pytest.raises(CgroupError):
        d.remove("u")
    assert (tmp_path / "cpu/vcemu-a/cpu.shares").read_text() == "32768"  # u's went with its cpu group
    _rmtree_groups(monkeypatch)
    d.remove("t")
    assert (tmp_path / "cpu/vcemu-a/cpu.shares").read_text() == "2"


def test_weights_are_written_on_a_change_only_and_a_failed_write_is_retried() -> None:
    written: list[tuple[str | None, int]] = []
    fail = [False]

    def write(name: str | None, weight: int) -> None:
        if fail[0]:
            raise CgroupError("cpu.shares: read-only")
        written.append((name, weight))

    w = CpuWeights(write, cpu_weight_v1)
    w.set("a", 0.5)
    w.set("a", 0.5)  # no change: no write
    assert written == [(None, 2), ("a", 32768), (None, 32768)]
    fail[0] = True
    w.set("b", 1.0, booting=True)  # not written, and not raised: the quotas still hold the tasks
    assert w.weights() == {"a": 32768}  # (b's and the parent's writes failed)
    fail[0] = False
    w.set("a", 0.5)  # nothing changed for a, but what b's start should have written is written now
    assert written[3:] == [("b", 1024), (None, 32768 + 1024)]
    w.set("c", 1.0, booting=True)
    assert w.weights() == {None: 32768 + 1024, "a": 32768, "b": 512, "c": 512}
    w.remove("a")
    w.remove("b")
    assert w.weights() == {None: 1024, "c": 1024}


def test_weights_stay_the_sum_under_concurrent_changes() -> None:
    from concurrent.futures import ThreadPoolExecutor

    seen: dict[str | None, int] = {}
    def write(name: str | None, weight: int) -> None:
        time.sleep(0)  # (a thread switch inside the lock's section: without the lock, writes interleave)
        seen[name] = weight

    w = CpuWeights(write, cpu_weight_v1)

    def churn(i: int) -> None:
        for k in range(200):
            name = f"g{i}-{k % 5}"
            w.set(name, 0.01 * (k % 7 + 1), booting=k % 3 == 0)
            if k % 4 == 0:
                w.remove(name)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(churn, range(8)))
    # what is written is what the ledger says, and the last write of each group is its weight now
    running, booting = w._running, w._booting
    now = w.weights()
    assert {n: seen[n] for n in now} == now  # (seen keeps the removed groups' last weights)
    assert set(now) == {None, *running, *booting}
    assert all(seen[n] == cpu_weight_v1(c) for n, c in running.items())
    assert booting and all(seen[n] == cpu_weight_v1(ORDINARY_CORES / len(booting)) for n in booting)
    assert seen[None] == cpu_weight_v1(math.fsum(running.values()) + ORDINARY_CORES)


def test_v2_driver_writes_cpu_max_freeze_and_memory_max(tmp_path) -> None:
    d = CgroupV2Driver(str(tmp_path / "vcemu-a"))
    assert (tmp_path / "vcemu-a/cgroup.subtree_control").read_text() == "+cpu +memory"
    d.create("t")
    d.set_cpu("t", 0.25)
    assert (tmp_path / "vcemu-a/t/cpu.max").read_text() == "25000 100000"
    d.set_memory_limit("t", 1 << 20)
    assert (tmp_path / "vcemu-a/t/memory.max").read_text() == str(1 << 20)
    d.freeze("t")
    assert (tmp_path / "vcemu-a/t/cgroup.freeze").read_text() == "1"
    _touch(str(tmp_path / "vcemu-a/t/cpu.stat"), "usage_usec 1500000\nuser_usec 1\n")
    assert d.cpu_usage_s("t") == 1.5


def test_target_units_follow_need_cores_and_start_progress() -> None:
    spec = TaskSpec("j/0", "h", host_cores=0.5, workload="dgemm", cpu_share=0.2, cpu_need=0.4,
                    work_seconds=10.0, memory_bytes=0, start_progress=0.25)
    assert target_units(spec, 1000.0) == round(10.0 * 0.4 * 0.5 * 1000.0 * 0.75)


def test_progress_channel_round_trip(tmp_path) -> None:
    path = str(tmp_path / "p")
    progress.create(path)
    reader = progress.ProgressReader(path)
    assert reader.read().units == 0 and not reader.read().ready
    writer = progress.ProgressWriter(path, target=100)
    writer.publish(42)
    sample = reader.read()
    assert sample.units == 42 and sample.ready and sample.t > 0


@pytest.mark.parametrize(("text", "expected"), [
    ("2GiB", 2 << 30), ("512Mi", 512 << 20), ("1.5G", 1_500_000_000), ("1000000", 1_000_000),
    ("64 KiB", 65536), ("3mb", 3_000_000),
])
def test_parse_size(text: str, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "2XB", "-1G", "GiB", "1..5G"])
def test_parse_size_refuses(text: str) -> None:
    with pytest.raises(ValueError):
        parse_size(text)


@pytest.mark.parametrize(("argv", "flag"), [
    (["--mem-per-host", "2GB?"], "--mem-per-host"),
    (["--cpus-per-host", "-0.5"], "--cpus-per-host"),
    (["--cpus-per-host", "0.5,0.25"], "--cpus-per-host"),  # two values for one host
    (["--hosts", "0"], "--hosts"),
    (["--port", "70000"], "--port"),
    (["--agent-id", "a/b"], "--agent-id"),
])
def test_agent_cli_refuses_bad_values_with_one_line(argv: list[str], flag: str, capsys) -> None:
    assert agent_main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and flag in err[0]


def test_a_v2_hierarchy_the_agent_cannot_create_its_groups_in_is_a_reason_not_a_crash(tmp_path) -> None:
    """A cgroup2 mount with the cpu and memory controllers where the agent's parent group cannot be made (here a
    file stands in its way; on a real machine, a read-only or delegated hierarchy): the OSError escaped
    open_driver and ended the agent, where it should say why and leave the choice to the caller (the duty-cycle
    fallback), as a v1 hierarchy's does."""
    from node_agent.cgroups import CgroupUnavailable, open_driver

    base = tmp_path / "unified"
    base.mkdir()
    (base / "cgroup.controllers").write_text("cpu memory\n")
    (base / "cgroup.subtree_control").write_text("cpu memory\n")
    (base / "vcemu-a1").write_text("")  # where the parent group would go
    mountinfo, proc_cgroup = tmp_path / "mountinfo", tmp_path / "cgroup"
    mountinfo.write_text(f"41 31 0:38 / {base} rw,relatime - cgroup2 cgroup2 rw\n")
    proc_cgroup.write_text("0::/\n")
    with pytest.raises(CgroupUnavailable, match=r"cgroup-v2: cannot create .*vcemu-a1"):
        open_driver("a1", prefer=("cgroup-v2",), mountinfo=str(mountinfo), proc_cgroup=str(proc_cgroup))


@pytest.mark.parametrize(("limit", "unlimited"), [("cpu.cfs_quota_us", "-1"), ("cpu.max", "max")])
def test_a_kill_lifts_the_cpu_limit_of_a_group_with_processes(tmp_path, limit: str, unlimited: str) -> None:
    """A killed process exits in its own context, charged to its group's CPU quota: a round of killing lifts the limit
    (v1 ``cpu.cfs_quota_us``, v2 ``cpu.max``), only where there is a process to kill, and thaws the group. (Plain
    files stand in for the group's; the kill of a real throttled task is tests/integration/test_agent_kills.py's.)"""
    from node_agent.cgroups import _kill_and_thaw

    child = subprocess.Popen(["sleep", "60"])
    try:
        busy, empty = tmp_path / "busy", tmp_path / "empty"
        for d, pids in ((busy, f"{child.pid}\n"), (empty, "")):
            d.mkdir()
            (d / "cgroup.procs").write_text(pids)
            (d / limit).write_text("1000 100000" if limit == "cpu.max" else "1000")
            (d / "freezer.state").write_text("FROZEN")
        assert _kill_and_thaw([str(busy)]) == [child.pid]
        assert child.wait(5.0) == -9
        assert (busy / limit).read_text() == unlimited
        assert (busy / "freezer.state").read_text() == "THAWED"
        assert _kill_and_thaw([str(empty)]) == []
        assert (empty / limit).read_text() != unlimited  # nothing to kill: the limit is left
    finally:
        child.kill()
        child.wait(5.0)


def _fake_v2(tmp_path, own: str, procs: str, subtree: str = "") -> tuple[str, str, str]:
    """A fake cgroup2 mount whose cgroup ``own`` holds processes ``procs``: (its directory, mountinfo, proc cgroup)."""
    root = tmp_path / "unified"
    base = root / own.strip("/")
    base.mkdir(parents=True)
    (base / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (base / "cgroup.subtree_control").write_text(subtree)
    (base / "cgroup.procs").write_text(procs)
    if own.strip("/"):  # (a non-root group: the root has no cgroup.type)
        (base / "cgroup.type").write_text("domain\n")
    mountinfo, proc_cgroup = tmp_path / "mountinfo", tmp_path / "cgroup"
    mountinfo.write_text(f"41 31 0:38 / {root} rw,relatime - cgroup2 cgroup2 rw\n")
    proc_cgroup.write_text(f"0::{own}\n")
    return str(base), str(mountinfo), str(proc_cgroup)


def test_a_v2_cgroup_with_processes_moves_them_to_a_leaf_before_it_enables_controllers(tmp_path, monkeypatch) -> None:
    """Review on a real cgroup v2 kernel under systemd: the agent's own cgroup (a service's, a login session's) holds
    processes, and v2's "no internal processes" rule refuses to enable controllers there (EBUSY), so the v2 driver never
    opened and the agent fell back or failed. Its processes now go to the leaf ``vcemu.procs`` first (the kernel's
    refusal is played here by a write that fails while cgroup.procs lists a process)."""
    base, mountinfo, proc_cgroup = _fake_v2(tmp_path, "/system.slice/vcemu.service", "4242\n")
    real_write = cgroups._write

    def write(path: str, value: str) -> None:
        if path.endswith("cgroup.subtree_control") and os.path.dirname(path) == base and cgroups._pids_in(base):
            raise CgroupError(f"cannot write {value!r} to {path}: Device or resource busy") from OSError(
                errno.EBUSY, "Device or resource busy")
        if path == os.path.join(base, "vcemu.procs", "cgroup.procs"):  # the kernel moves the process
            Path(base, "cgroup.procs").write_text("")
        real_write(path, value)

    monkeypatch.setattr(cgroups, "_write", write)
    d = cgroups.open_driver("a1", prefer=("cgroup-v2",), mountinfo=mountinfo, proc_cgroup=proc_cgroup)
    assert d.dirs() == [os.path.join(base, "vcemu-a1")]
    assert Path(base, "vcemu.procs", "cgroup.procs").read_text() == "4242"
    assert Path(base, "cgroup.subtree_control").read_text() == "+cpu +memory"


def test_an_agent_started_from_the_v2_leaf_puts_and_finds_agents_parents_beside_it(tmp_path) -> None:
    """A process in the leaf ``vcemu.procs`` (moved there by an earlier agent) has the cgroup above as its agents'
    base, for its own parent group and for the sweep of the others' (not a new leaf inside the leaf)."""
    base, mountinfo, proc_cgroup = _fake_v2(tmp_path, "/system.slice/vcemu.service", "", "cpu memory\n")
    os.makedirs(os.path.join(base, "vcemu.procs"))
    os.makedirs(os.path.join(base, "vcemu-old"))
    with open(proc_cgroup, "w") as f:
        f.write("0::/system.slice/vcemu.service/vcemu.procs\n")
    d = cgroups.open_driver("a2", prefer=("cgroup-v2",), mountinfo=mountinfo, proc_cgroup=proc_cgroup)
    assert d.dirs() == [os.path.join(base, "vcemu-a2")]
    found = cgroups.agent_parents(mountinfo=mountinfo, proc_cgroup=proc_cgroup)
    assert found == {"a2": [os.path.join(base, "vcemu-a2")], "old": [os.path.join(base, "vcemu-old")]}


def test_a_v2_cgroup_without_the_cpu_controller_says_to_delegate_it(tmp_path) -> None:
    base, mountinfo, proc_cgroup = _fake_v2(tmp_path, "/system.slice/vcemu.service", "1\n")
    with open(os.path.join(base, "cgroup.controllers"), "w") as f:
        f.write("memory pids\n")
    with pytest.raises(cgroups.CgroupUnavailable, match=r"no cpu controller .*Delegate=yes"):
        cgroups.open_driver("a3", prefer=("cgroup-v2",), mountinfo=mountinfo, proc_cgroup=proc_cgroup)


def test_v2_enables_memory_too_where_only_cpu_was_enabled(tmp_path) -> None:
    base, mountinfo, proc_cgroup = _fake_v2(tmp_path, "/", "", "cpu\n")
    cgroups.open_driver("a4", prefer=("cgroup-v2",), mountinfo=mountinfo, proc_cgroup=proc_cgroup)
    assert Path(base, "cgroup.subtree_control").read_text() == "+cpu +memory"


def test_pids_room_reads_the_limit_of_this_process_cgroup_in_the_pids_hierarchy(tmp_path) -> None:
    """The agent's check before a start (exhaustion review): the pids hierarchy found from mountinfo, v1 or v2."""
    v1 = tmp_path / "pids" / "user" / "a"
    v1.mkdir(parents=True)
    (v1 / "pids.max").write_text("20\n")
    (v1 / "pids.current").write_text("15\n")
    mountinfo, proc = tmp_path / "mountinfo", tmp_path / "cgroup"
    mountinfo.write_text(f"31 25 0:27 / {tmp_path / 'pids'} rw - cgroup cgroup rw,pids\n")
    proc.write_text("8:pids:/user/a\n")
    assert cgroups.pids_room(str(mountinfo), str(proc)) == (str(v1), 15, 20)
    (v1 / "pids.max").write_text("max\n")
    assert cgroups.pids_room(str(mountinfo), str(proc)) is None
    v2 = tmp_path / "unified" / "svc"
    v2.mkdir(parents=True)
    (v2 / "pids.max").write_text("40\n")
    (v2 / "pids.current").write_text("3\n")
    mountinfo.write_text(f"41 31 0:38 / {tmp_path / 'unified'} rw - cgroup2 cgroup2 rw\n")
    proc.write_text("0::/svc\n")
    assert cgroups.pids_room(str(mountinfo), str(proc)) == (str(v2), 3, 40)
