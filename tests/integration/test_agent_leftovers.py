"""What an agent killed with SIGKILL leaves in cgroups (its paused tasks frozen, alive, holding their memory) is
removed by the next agent to start on the machine, whatever its id and mode, and a live agent's is not.

Real agents (``open_core`` in child processes, cgroup mode), real workload processes, real v1 cgroups."""

from __future__ import annotations

import contextlib
import glob
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from node_agent import runner
from node_agent.agent import HostSpec, open_core
from node_agent.cgroups import V1_CONTROLLERS, own_dir, parse_mountinfo, parse_proc_cgroup

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]

#: An agent with cgroups that starts one task, pauses it (its cgroup frozen), prints the task's pid once it
#: is frozen, and waits to be killed. If the task does not run in time it says why, cleans up and exits 1.
_AGENT = """
import sys, time
from node_agent import runner
runner.calibrate = lambda workload, seconds=0.0: 1000.0  # no calibration: this agent is about to be killed
from node_agent.agent import HostSpec, open_core
core = open_core(sys.argv[1], [HostSpec("h0", 1.0, 1 << 30)])
view = core.start_task("t/0", "h0", "dgemm", 0.1, 0.1, 3600.0, 16 << 20)
deadline = time.monotonic() + 30.0
while (t := core.task("t/0")).state.name != "RUNNING":
    if time.monotonic() > deadline or t.state.finished:
        print(f"agent {sys.argv[1]}: its task did not run: {t.state.name} {t.message}", file=sys.stderr, flush=True)
        core.shutdown()
        sys.exit(1)
    time.sleep(0.05)
core.pause("t/0")
print(view.pid, flush=True)
time.sleep(600)
"""


def _parents(agent_id: str) -> list[str]:
    """The agent's parent cgroup in each hierarchy that has one (found here, not with the code under test)."""
    own = parse_proc_cgroup(Path("/proc/self/cgroup").read_text())
    dirs = []
    for m in parse_mountinfo(Path("/proc/self/mountinfo").read_text()):
        ctrls = [""] if m.fstype == "cgroup2" else [c for c in V1_CONTROLLERS if c in m.controllers]
        base = own_dir(m, own.get(ctrls[0], "/")) if ctrls else ""
        if m.fstype == "cgroup2" and os.path.basename(base) == "vcemu.procs":  # (v2: moved to a leaf, see V2_LEAF)
            base = os.path.dirname(base)
        d = os.path.join(base, f"vcemu-{agent_id}") if ctrls else ""
        if d and os.path.isdir(d):
            dirs.append(d)
    return dirs


def _remove(parents: list[str]) -> None:
    """Thaw and kill whatever is in the groups under ``parents``, then remove them (the test's own cleanup)."""
    groups = [os.path.join(p, n) for p in parents for n in os.listdir(p) if os.path.isdir(os.path.join(p, n))]
    for _ in range(100):
        pids = {int(x) for g in groups for x in Path(g, "cgroup.procs").read_text().split()}
        for g in groups:
            with contextlib.suppress(OSError):
                Path(g, "freezer.state").write_text("THAWED")
            with contextlib.suppress(OSError):
                Path(g, "cgroup.freeze").write_text("0")
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)
    for d in [*groups, *parents]:
        with contextlib.suppress(OSError):
            os.rmdir(d)


@dataclass
class Agent:
    agent_id: str
    proc: subprocess.Popen[str]
    task_pid: int

    def parents(self) -> list[str]:
        return _parents(self.agent_id)

    def freezer_state(self) -> str:
        """The freezer state of its task's cgroup ("none" if it has none): v1's freezer.state, or FROZEN/THAWED from
        v2's cgroup.freeze."""
        found = [f for d in self.parents() for f in glob.glob(os.path.join(d, "*", "freezer.state"))]
        if found:
            return Path(found[0]).read_text().strip()
        v2 = [f for d in self.parents() for f in glob.glob(os.path.join(d, "[!.]*", "cgroup.freeze"))]
        return ("FROZEN" if Path(v2[0]).read_text().strip() == "1" else "THAWED") if v2 else "none"


def _alive(pid: int) -> bool:
    with contextlib.suppress(psutil.Error):
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    return False


def _until(what: str, cond, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


@pytest.fixture
def start_agent(cgroups_required: None) -> Iterator[Callable[[str], Agent]]:
    """``start_agent(name)``: a cgroup-mode agent with one frozen task. Afterwards every such agent is killed
    and what it left is removed, whatever the test did."""
    started: list[Agent] = []

    def start(name: str) -> Agent:
        agent_id = f"pytest-{name}-{os.getpid()}"
        proc = subprocess.Popen([sys.executable, "-c", _AGENT, agent_id], cwd=ROOT, stdout=subprocess.PIPE,
                                text=True, start_new_session=True)
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=lambda: lines.put(proc.stdout.readline()), daemon=True).start()  # type: ignore[union-attr]
        try:
            line = lines.get(timeout=60)
        except queue.Empty:
            line = ""
        started.append(agent := Agent(agent_id, proc, int(line) if line.strip() else 0))
        assert agent.task_pid, f"agent {agent_id} did not start and pause its task (its stderr is above)"
        return agent

    try:
        yield start
    finally:
        for agent in started:
            if agent.proc.poll() is None:
                agent.proc.kill()
            agent.proc.wait()
            _remove(agent.parents())
            with contextlib.suppress(ProcessLookupError):
                os.kill(agent.task_pid, signal.SIGKILL)
            for d in glob.glob(f"/dev/shm/vcemu-agent-{agent.agent_id}-*") + glob.glob(
                    os.path.join(tempfile.gettempdir(), f"vcemu-agent-{agent.agent_id}-*")):
                shutil.rmtree(d, ignore_errors=True)


def _start_core(monkeypatch, agent_id: str, no_cgroups: bool = False):  # type: ignore[no-untyped-def]
    monkeypatch.setattr(runner, "calibrate", lambda workload, seconds=0.0: 1000.0)
    return open_core(agent_id, [HostSpec("h0", 1.0, 1 << 30)], no_cgroups=no_cgroups)


def _fencer(agent: Agent) -> psutil.Process:
    (fencer,) = [p for p in psutil.Process(agent.proc.pid).children() if "node_agent.fencer" in p.cmdline()]
    return fencer


def _killed(agent: Agent) -> None:
    """SIGKILL the agent and its fencer (which kills a dead agent's frozen tasks itself: both may die, killed by
    the OOM killer, say); its frozen task stays behind (the precondition of these tests)."""
    fencer = _fencer(agent)
    fencer.suspend()  # (stopped first: one killed first would be started again by its agent)
    agent.proc.kill()
    _until("the killed agent never ended", lambda: psutil.Process(agent.proc.pid).status() == psutil.STATUS_ZOMBIE)
    fencer.kill()
    time.sleep(0.3)  # time for the task to notice its agent's death, were it not frozen
    assert _alive(agent.task_pid) and agent.freezer_state() == "FROZEN", "nothing left behind to test"


def test_an_agent_of_another_id_removes_what_a_killed_agent_left_and_leaves_a_live_agents_alone(
        start_agent, monkeypatch) -> None:
    dead, live = start_agent("dead"), start_agent("live")
    _killed(dead)  # not reaped yet (a zombie, as under a parent that has not looked): dead all the same
    dead_parents = dead.parents()
    assert dead_parents and all(os.path.isdir(d) for d in dead_parents)

    core = _start_core(monkeypatch, f"pytest-sweeper-{os.getpid()}")
    try:
        _until("the killed agent's frozen task is still alive", lambda: not _alive(dead.task_pid), 5.0)
        assert not any(os.path.exists(d) for d in dead_parents), "the killed agent's cgroups are still there"
        assert not glob.glob(f"/dev/shm/vcemu-agent-{dead.agent_id}-*"), "its work directory is still there"
        # The live agent's task and cgroups are untouched: still alive, still frozen.
        assert _alive(live.task_pid)
        assert live.parents() and live.freezer_state() == "FROZEN"
    finally:
        core.shutdown()
    assert live.proc.poll() is None


def test_a_no_cgroups_agent_removes_its_own_ids_cgroup_leftovers_and_a_dead_agents(start_agent, monkeypatch) -> None:
    """An agent restarted with --no-cgroups after a cgroup run (same id), and one of another id: cgroupfs is
    usable, so it removes what the killed cgroup agents left, its own id's whoever made them."""
    same, other = start_agent("same"), start_agent("other")
    _killed(same)
    _killed(other)
    same.proc.wait()
    other.proc.wait()  # reaped: the plain case
    left = same.parents() + other.parents()

    core = _start_core(monkeypatch, same.agent_id, no_cgroups=True)
    try:
        assert core.mode == "duty-cycle"
        _until("a frozen task a killed cgroup agent left is still alive",
               lambda: not _alive(same.task_pid) and not _alive(other.task_pid), 5.0)
        assert not any(os.path.exists(d) for d in left), "cgroups of the killed agents are still there"
    finally:
        core.shutdown()


def test_the_fencer_of_a_killed_agent_kills_its_frozen_task(start_agent) -> None:
    """A paused task is frozen, and a frozen task never runs its own check of its parent: a killed agent's paused
    tasks held their memory until the next agent started on the machine. The agent's fencer, which outlives it,
    kills them (the cgroups are left for the next agent's start-up, as before)."""
    agent = start_agent("fenced")
    fencer = _fencer(agent)
    agent.proc.kill()
    agent.proc.wait()
    _until("the killed agent's frozen task is still alive", lambda: not _alive(agent.task_pid), 5.0)
    _until("the fencer did not end once its agent was gone", lambda: not _alive(fencer.pid), 5.0)
