"""``vcemu up`` when one of its agent processes dies: it is started again (``--restart-agents``, 3 times by default)
and its job runs on; without restarts the run goes on (the coordinator declares the agent's hosts lost and requeues
their jobs on the other agents, as the README promises), one line says which agent went and how; when every agent
has gone, ``up`` stops with a non-zero status and says so. Real processes: ``vcemu up``
with two agents (``--no-cgroups``, modeled jobs), fast heartbeats so that a loss is noticed in 1.5 s."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest

from vcemu.v1 import coordinator_pb2 as pb
from vcemu.v1 import coordinator_pb2_grpc as pb_grpc

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
ROOT = Path(__file__).resolve().parents[2]


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (from /proc)."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry.name))
    return out


def agent_arg(pid: int, flag: str) -> str:
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    return argv[argv.index(flag) + 1]


def agent_id_of(pid: int) -> str:
    return agent_arg(pid, "--agent-id")


def wait_for(what: str, check: Callable[[], object], timeout: float = 30.0,
             log: Path | None = None) -> object:
    """``check()``'s first true result within ``timeout`` s; the assertion names ``what`` and, if given, ends with
    ``log`` as it is then."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            got = check()
        except grpc.RpcError:
            got = None
        if got:
            return got
        assert time.monotonic() < deadline, what + (f":\n{log.read_text(errors='replace')}" if log else "")
        time.sleep(0.1)


def start_up(log_path: Path, *flags: str) -> subprocess.Popen:
    """``vcemu up`` with two agents on two hosts and 0.5 s heartbeats, its output in ``log_path``."""
    with log_path.open("wb") as log:
        return subprocess.Popen([sys.executable, "-m", "coordinator.cli", "up", "--hosts", "2", "--agents", "2",
                                 "--port", "0", "--heartbeat", "0.5", *flags],
                                cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def connect_up(up: subprocess.Popen, log_path: Path) -> tuple[grpc.Channel, pb_grpc.CoordinatorStub, dict[str, int]]:
    """Once ``up`` says where its coordinator is: a channel, a stub and its agents (id -> pid)."""
    ready = wait_for("vcemu up never came up", lambda: re.search(r"coordinator on (\S+) ", log_path.read_text(
        errors="replace")), 90, log_path)
    channel = grpc.insecure_channel(ready.group(1))  # type: ignore[union-attr]
    return channel, pb_grpc.CoordinatorStub(channel), {agent_id_of(pid): pid for pid in children(up.pid)}


def run_one_job(stub: pb_grpc.CoordinatorStub, workload: str, log_path: Path
                ) -> tuple[str, str, Callable[[], str | None]]:
    """Submit a one-task job of 300 s and wait until it runs: (job, its host, a function giving its host while it
    runs, else None)."""
    spec = pb.JobSpec(tasks=1, cpu_need=0.5, memory=0.1, work_seconds=300, workload=workload)
    job = stub.Submit(pb.SubmitRequest(spec=spec), timeout=10).job_id

    def placed() -> str | None:
        j = stub.GetJob(pb.JobRef(job_id=job), timeout=5)
        return j.hosts[0] if j.state == "running" and j.hosts else None

    return job, str(wait_for(f"{job} never ran", placed, log=log_path)), placed


def stop_up(up: subprocess.Popen, channel: grpc.Channel | None, agents: dict[str, int]) -> None:
    """Whatever a test left: the channel, an agent its ``vcemu up`` started that is still there, ``up`` itself."""
    if channel is not None:
        channel.close()
    for agent, pid in agents.items():
        with contextlib.suppress(OSError, ValueError):
            if agent_id_of(pid) == agent:
                os.kill(pid, signal.SIGKILL)
    if up.poll() is None:
        up.kill()
        up.wait()


@contextlib.contextmanager
def up_running(tmp_path: Path, *flags: str) -> Iterator[tuple[subprocess.Popen, pb_grpc.CoordinatorStub,
                                                                dict[str, int], Path]]:
    """``vcemu up`` with ``flags`` (two agents), connected: (the process, a coordinator stub, agent id -> pid, the log
    path), everything it started killed on the way out (:func:`stop_up`)."""
    log_path = tmp_path / "up.log"
    up = start_up(log_path, *flags)
    agents: dict[str, int] = {}
    channel = None
    try:
        channel, stub, agents = connect_up(up, log_path)
        yield up, stub, agents, log_path
    finally:
        stop_up(up, channel, agents)


def test_up_carries_on_when_an_agent_dies_and_stops_non_zero_when_all_have(tmp_path: Path) -> None:
    with up_running(tmp_path, "--no-cgroups", "--restart-agents", "0") as (up, stub, agents, log_path):
        def text() -> str:
            return log_path.read_text(errors="replace")

        assert len(agents) == 2, agents
        job, host, placed = run_one_job(stub, "modeled", log_path)
        owner = {h.name: h.agent for h in stub.ClusterStatus(pb.ClusterStatusRequest(), timeout=5).hosts}
        victim = owner[host]
        survivor = next(a for a in agents if a != victim)
        os.kill(agents[victim], signal.SIGKILL)

        line = (f"vcemu up: agent {victim} (pid {agents[victim]}) was killed by SIGKILL; its hosts {host} will be "
                "declared lost after 1.5 s without heartbeats, and their jobs requeued on the other agents")
        wait_for(f"no line about {victim}'s death", lambda: line in text(), 10, log_path)
        wait_for(f"{job} was not requeued on {survivor}'s host", lambda: owner.get(placed() or "") == survivor, 30,
                 log_path)
        assert up.poll() is None, text()  # the run went on
        assert "vcemu up: stopping" not in text()

        os.kill(agents[survivor], signal.SIGTERM)  # the agent's clean shutdown: exit status 0
        assert up.wait(30) == 1, text()
        out = text()
        said = [x for x in out.splitlines() if x.startswith("vcemu up: ")]
        assert said[-2:] == [f"vcemu up: agent {survivor} (pid {agents[survivor]}) exited with code 0",
                             "vcemu up: every agent process has exited; stopping the coordinator"], out
        # Its job was running on the survivor: no warning that a Stop failed and "will retry" (nothing is left to
        # retry it) follows the line that explained the stop. Two things see to it: no Stop is sent to an agent
        # known to be gone (193ab6d), and a Stop that fails at exit is logged at INFO, which `up` does not print
        # (e672a91); this checks what the user sees, not which of them acted.
        after = out[out.index("every agent process has exited"):].splitlines()[1:]
        assert not [x for x in after if "Stop " in x or "will retry" in x], out


@pytest.mark.parametrize("no_cgroups", [False, True], ids=["cgroups", "no-cgroups"])
def test_ctrl_c_after_an_agent_was_killed_leaves_nothing_of_it(tmp_path: Path, no_cgroups: bool) -> None:
    """Live review: after ``kill -9`` of an agent running a task, ``up``'s Ctrl-C left that agent's cgroups (its
    task's group inside) and its work directory in /dev/shm until the next agent of its id started."""
    from node_agent.cgroups import agent_parents

    flags = ["--restart-agents", "0", *(["--no-cgroups"] if no_cgroups else [])]
    with up_running(tmp_path, *flags) as (up, stub, agents, log_path):
        def text() -> str:
            return log_path.read_text(errors="replace")

        _, host, _ = run_one_job(stub, "dgemm", log_path)
        victim = {h.name: h.agent for h in stub.ClusterStatus(pb.ClusterStatusRequest(), timeout=5).hosts}[host]

        def workdirs() -> list[str]:
            return [n for n in os.listdir("/dev/shm") if n.startswith(f"vcemu-agent-{victim}-")]

        assert workdirs(), "the agent has no work directory in /dev/shm"
        if not no_cgroups:
            assert victim in agent_parents(), "the agent has no cgroups"
        os.kill(agents[victim], signal.SIGKILL)
        wait_for(f"no line about {victim}'s death", lambda: f"agent {victim} (pid" in text(), 10, log_path)
        os.killpg(up.pid, signal.SIGINT)  # Ctrl-C
        assert up.wait(30) == 0, text()
        assert workdirs() == [], text()
        assert victim not in agent_parents(), text()


def test_up_starts_a_killed_agent_again_and_its_job_runs_on_from_its_progress(tmp_path: Path) -> None:
    """``--restart-agents 1``, one agent and one host, the default 2-s heartbeat: the killed agent is started again
    under its id and registers its host before the old one is declared lost (6 s): it calibrates nothing (a task's
    progress is its CPU-seconds). The coordinator finds the job's task gone from the new process, requeues the job
    with its progress, and runs it again there, from that progress. Killed once more, the agent stays down (its one
    restart is used) and up stops."""
    log_path = tmp_path / "up.log"
    with log_path.open("wb") as log:
        up = subprocess.Popen([sys.executable, "-m", "coordinator.cli", "up", "--hosts", "1", "--port", "0",
                               "--no-cgroups", "--restart-agents", "1"],
                              cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    agents: dict[str, int] = {}
    channel = None
    try:
        channel, stub, agents = connect_up(up, log_path)
        (victim,) = agents

        def text() -> str:
            return log_path.read_text(errors="replace")

        job, host, placed = run_one_job(stub, "modeled", log_path)

        def vt() -> float:
            return stub.GetJob(pb.JobRef(job_id=job), timeout=5).virtual_time

        wait_for(f"{job} made no progress", lambda: vt() > 3.0, 30, log_path)
        events: list[pb.JobEvent] = []
        stream = stub.WatchEvents(pb.WatchEventsRequest())

        def collect() -> None:
            with contextlib.suppress(grpc.RpcError):  # (cancelled at the end)
                events.extend(stream)

        threading.Thread(target=collect, daemon=True).start()
        time.sleep(0.5)  # (the stream is open)
        before = vt()
        os.kill(agents[victim], signal.SIGKILL)
        wait_for(f"no line about {victim}'s restart", lambda: (
            f"vcemu up: agent {victim} (pid {agents[victim]}) was killed by SIGKILL; starting it again in 1 s "
            "(restart 1 of 1): the jobs it ran are requeued with their last progress once it has registered again, "
            "or once its hosts are declared lost after 6 s without heartbeats") in text(), 10, log_path)
        again = wait_for(f"{victim} was not started again", lambda: re.search(
            rf"vcemu up: agent {victim} started again \(pid (\d+)\)", text()), 10, log_path)
        new_pid = int(again.group(1))  # type: ignore[union-attr]
        assert new_pid != agents[victim] and agent_id_of(new_pid) == victim
        agents[victim] = new_pid  # (stop_up kills it if the test fails)

        def moves() -> list[tuple[str, str]]:
            return [(e.from_state, e.to_state) for e in events if e.job_id == job]

        wait_for(f"{job} was not requeued and run again", lambda: moves()[:2] == [("running", "pending"),
                                                                                  ("pending", "running")], 30, log_path)
        requeue = next(e for e in events if e.job_id == job)
        assert "vanished" in requeue.reason, requeue  # the new process's poll, not the loss of the old one
        assert placed() == host and vt() >= before - 0.5, (before, vt())  # from its progress, not from 0
        assert "lost: no heartbeat" not in text(), text()
        stream.cancel()

        os.kill(new_pid, signal.SIGKILL)  # its one restart is used: it stays down, and up stops
        assert up.wait(30) == 1, text()
        said = [x for x in text().splitlines() if x.startswith("vcemu up: ")]
        assert said[-2:] == [f"vcemu up: agent {victim} (pid {new_pid}) was killed by SIGKILL (not started again: "
                             "restarted 1 time in a row, each time within 10 minutes of its start, "
                             "--restart-agents 1)",
                             "vcemu up: every agent process has exited; stopping the coordinator"], text()
        assert text().count(f"vcemu up: agent {victim} started again") == 1, text()
    finally:
        stop_up(up, channel, agents)
