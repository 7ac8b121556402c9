"""``vcemu bench scale|load|cpu-share|boot`` stopped by Ctrl-C or SIGTERM (found by review). SIGTERM ended them at once:
scale's agent processes (sessions of their own, no ``--parent-pid``) ran on, re-parented to init; cpu-share left
its reference task frozen in its freezer cgroup and its /dev/shm directory; load left its agent's /dev/shm
directory. SIGINT printed a traceback. Each must stop what it started and end with one line and status 130, as
``vcemu up`` does. Real processes, signalled once the bench has started what it must clean up."""

from __future__ import annotations

import glob
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.integration.test_demo_interrupt import assert_all_gone, descendants, kill_leftovers
from tests.integration.test_up_agent_death import ROOT, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

SIGNALS = [signal.SIGINT, signal.SIGTERM]


def start_bench(tmp_path: Path, *argv: str) -> tuple[subprocess.Popen, Path]:
    err_path = tmp_path / "bench.err"
    with err_path.open("wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "coordinator.cli", "bench", *argv], cwd=ROOT,
                                stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
    return proc, err_path


def interrupt(proc: subprocess.Popen, sig: signal.Signals, err_path: Path, line: str) -> None:
    """Send ``sig``: the bench ends with status 130 and ``line`` as its last words, no traceback."""
    proc.send_signal(sig)
    code = proc.wait(60)
    stderr = err_path.read_text(errors="replace")
    assert code == 130, stderr
    assert "Traceback" not in stderr, stderr
    assert stderr.strip().splitlines()[-1] == line, stderr


def shm_left(pattern: str) -> list[str]:
    return glob.glob(f"/dev/shm/{pattern}")


def stop_once_started(proc: subprocess.Popen, sig: signal.Signals, err_path: Path,
                      started: Callable[[dict[int, bytes]], bool], what: str, settle: float, line: str) -> None:
    """Once ``started`` holds of the bench's processes (and ``settle`` seconds more), :func:`interrupt` it with
    ``sig`` and ``line``: every process it had started has ended; whatever fails, none is left behind."""
    spawned: dict[int, bytes] = {}
    try:
        def up() -> bool:
            nonlocal spawned
            spawned = descendants(proc.pid)
            return started(spawned)

        wait_for(what, up, 60, err_path)
        time.sleep(settle)
        spawned = descendants(proc.pid)
        interrupt(proc, sig, err_path, line)
        assert_all_gone(spawned, 10)
    finally:
        kill_leftovers(spawned, proc)


@pytest.mark.parametrize("sig", SIGNALS)
def test_bench_scale_stopped_by_a_signal_stops_its_agents(sig: signal.Signals, tmp_path: Path) -> None:
    proc, err_path = start_bench(tmp_path, "scale", "--hosts", "2", "--agents", "2", "--period", "60", "--cycles",
                                 "3", "--json", "--out", str(tmp_path / "out"))
    stop_once_started(proc, sig, err_path, lambda spawned: sum(b"\0agent\0" in a for a in spawned.values()) == 2,
                      "bench scale never started its agents", 1.0,
                      "vcemu bench scale: interrupted; the coordinator and the agents it started are stopped")
    assert not shm_left(f"vcemu-agent-bench-scale-{proc.pid}-*")


@pytest.mark.parametrize("sig", SIGNALS)
def test_bench_starts_stopped_by_a_signal_stops_its_agent(sig: signal.Signals, tmp_path: Path) -> None:
    proc, err_path = start_bench(tmp_path, "starts", "--jobs", "20000", "--hosts", "2", "--json", "--out",
                                 str(tmp_path / "out"))
    stop_once_started(proc, sig, err_path, lambda spawned: sum(b"\0agent\0" in a for a in spawned.values()) == 1,
                      "bench starts never started its agent", 2.0,
                      "vcemu bench starts: interrupted; the coordinator and the agents it started are stopped")
    assert not shm_left(f"vcemu-agent-bench-starts-{proc.pid}-*")
    assert not (tmp_path / "out" / "starts.json").exists()


@pytest.mark.parametrize("sig", SIGNALS)
def test_bench_load_stopped_by_a_signal_stops_its_clients_and_removes_its_agent_directory(
        sig: signal.Signals, tmp_path: Path) -> None:
    proc, err_path = start_bench(tmp_path, "load", "--jobs", "1000000", "--clients", "1", "--hosts", "1", "--batch",
                                 "1", "--json", "--out", str(tmp_path / "out"))

    def clients_up(spawned: dict[int, bytes]) -> bool:
        return bool(shm_left(f"vcemu-agent-bench-load-{proc.pid}-*")) and any(
            b"multiprocessing" in argv and b"resource_tracker" not in argv for argv in spawned.values())

    stop_once_started(proc, sig, err_path, clients_up, "bench load never started its client", 1.0,
                      "vcemu bench load: interrupted; the coordinator and the agents it started are stopped")
    assert not shm_left(f"vcemu-agent-bench-load-{proc.pid}-*")


@pytest.mark.parametrize("sig", SIGNALS)
def test_bench_cpu_share_stopped_by_a_signal_leaves_no_task_cgroup_or_directory(
        cgroups_required: None, sig: signal.Signals, tmp_path: Path) -> None:
    proc, err_path = start_bench(tmp_path, "cpu-share", "--quick", "--json")
    stop_once_started(proc, sig, err_path, lambda spawned: any(b"bench-reference" in a for a in spawned.values()),
                      "bench cpu-share never started its reference task",
                      1.5,  # the reference is frozen between its windows
                      "vcemu bench cpu-share: interrupted; its tasks, their cgroups and work directories are removed")
    assert not glob.glob(f"/sys/fs/cgroup/*/vcemu-bench-{proc.pid}*")
    assert not shm_left(f"vcemu-agent-bench-{proc.pid}-*")


@pytest.mark.parametrize("sig", SIGNALS)
def test_bench_boot_stopped_by_a_signal_leaves_no_task_cgroup_or_directory(
        cgroups_required: None, sig: signal.Signals, tmp_path: Path) -> None:
    """SIGTERM ended it at once, leaving its agent's cgroups with a task group per start and its /dev/shm
    directory (review); Ctrl-C did not."""
    proc, err_path = start_bench(tmp_path, "boot", "--starts", "50", "--rounds", "1")
    stop_once_started(proc, sig, err_path, lambda spawned: sum(b"workloads.dgemm" in a for a in spawned.values()) >= 2,
                      "bench boot never started its tasks", 1.0,
                      "vcemu bench boot: interrupted; its tasks and their cgroups are removed")
    assert not glob.glob(f"/sys/fs/cgroup/*/vcemu-bench-boot-{proc.pid}-*")
    assert not shm_left(f"vcemu-agent-bench-boot-{proc.pid}-*")


def test_bench_dfrs_stopped_by_sigterm_shuts_ray_down_in_one_line(tmp_path: Path) -> None:
    """SIGTERM ended it at once during its Ray sweep, leaving Ray's dashboard and runtime-env agents running under
    init; Ctrl-C printed a traceback (review)."""
    pytest.importorskip("ray", reason="ray is not installed")
    proc, err_path = start_bench(tmp_path, "dfrs", "--no-sim")
    stop_once_started(proc, signal.SIGTERM, err_path, lambda spawned: any(b"raylet" in a for a in spawned.values()),
                      "bench dfrs never started Ray", 3.0, "vcemu bench dfrs: interrupted")
