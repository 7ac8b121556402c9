"""The client commands where a review of a live cluster found them wrong or unclear (each test failed before):
``submit --tasks`` past the coordinator's limit gave protobuf's traceback; ``--coordinator`` with a port
above 65535 was wrapped by gRPC to another port, and a URL or a metrics port got a hint about TLS; a refused
submission used up a job id; ``status`` printed a bare ``jobs:``; ``cancel`` of a finished job did not say that
nothing was cancelled; ``vcemu coordinator --metrics-port`` did not print the metrics URL."""

from __future__ import annotations

import http.server
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from coordinator.policies import get_policy
from coordinator.service import CoordinatorServer
from tests.unit.test_cli_errors import refused, run
from vcemu.limits import MAX_TASKS
from vcemu.v1 import agent_pb2
from vcemu.v1 import coordinator_pb2 as pb
from vcemu.v1 import coordinator_pb2_grpc as pb_grpc

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture()
def server() -> Iterator[CoordinatorServer]:
    """A coordinator with one described agent (its address answers nothing)."""
    s = CoordinatorServer(get_policy("fcfs"), port=0).start()
    desc = agent_pb2.DescribeReply(agent_id="a0", mode="cgroup-v1", hosts=[
        agent_pb2.HostInfo(name="a0-h0", cpu_cores=0.5, memory_bytes=1 << 30)])
    with grpc.insecure_channel(s.address) as ch:
        pb_grpc.CoordinatorStub(ch).RegisterAgent(
            pb.RegisterAgentRequest(address="127.0.0.1:1", description=desc), timeout=5)
    yield s
    s.stop()


@pytest.mark.parametrize("tasks", ["3000000000", str(MAX_TASKS + 1), "0", "two"])
def test_submit_refuses_a_task_count_out_of_range_naming_the_flag(tasks: str,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["submit", "--coordinator", "127.0.0.1:1", "--tasks", tasks], capsys)
    refused(code, err, "--tasks")


@pytest.mark.parametrize(("address", "says"), [
    ("127.0.0.1:99999", "port in 1..65535"),
    ("127.0.0.1:0", "port in 1..65535"),
    ("http://127.0.0.1:51777", "without a scheme"),
    ("127.0.0.1", "HOST:PORT"),
])
def test_a_bad_coordinator_address_is_refused_in_one_line(address: str, says: str,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    for command in (["jobs"], ["status"], ["cancel", "job-00001"], ["submit"]):
        code, _, err = run([*command, "--coordinator", address], capsys)
        refused(code, err, "--coordinator", address, says)


def test_a_bad_coordinator_address_from_the_environment_names_the_variable() -> None:
    """The default comes from $VCEMU_COORDINATOR, read when the parser is built: a separate process."""
    out = subprocess.run([sys.executable, "-m", "coordinator.cli", "jobs"], cwd=ROOT, capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT),
                              "VCEMU_COORDINATOR": "127.0.0.1:99999"}, timeout=60)
    refused(out.returncode, out.stderr, "$VCEMU_COORDINATOR", "127.0.0.1:99999", "port in 1..65535")


@pytest.mark.parametrize("address", ["[::1]:50051", "dns:///localhost:50051", "unix:/tmp/vcemu.sock",
                                     "coordinator.example:443"])
def test_addresses_grpc_takes_are_still_taken(address: str) -> None:
    from coordinator.cli import build_parser

    assert build_parser().parse_args(["jobs", "--coordinator", address]).coordinator == address


def test_a_metrics_port_given_as_coordinator_is_said_to_be_plain_http(capsys: pytest.CaptureFixture[str]) -> None:
    class Quiet(http.server.ThreadingHTTPServer):
        def handle_error(self, request: object, client_address: object) -> None:
            pass  # gRPC's HTTP/2 preface, which an HTTP/1 server cannot parse

    class Metrics(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    web = Quiet(("127.0.0.1", 0), Metrics)
    threading.Thread(target=web.serve_forever, daemon=True).start()
    try:
        code, _, err = run(["jobs", "--coordinator", f"127.0.0.1:{web.server_address[1]}"], capsys)
    finally:
        web.shutdown()
        web.server_close()
    refused(code, err, "answers plain HTTP", "metrics port")
    assert "TLS" not in err, err


def test_a_refused_submission_takes_no_job_id(server: CoordinatorServer) -> None:
    with grpc.insecure_channel(server.address) as ch:
        stub = pb_grpc.CoordinatorStub(ch)
        with pytest.raises(grpc.RpcError):
            stub.Submit(pb.SubmitRequest(spec=pb.JobSpec(tasks=1, cpu_need=1.0, memory=2.0, work_seconds=1)),
                        timeout=5)
        job = stub.Submit(pb.SubmitRequest(spec=pb.JobSpec(tasks=1, cpu_need=1.0, memory=0.1, work_seconds=1)),
                          timeout=5)
    assert job.job_id == "job-00001"


def test_status_says_when_there_are_no_jobs(server: CoordinatorServer, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["status", "--coordinator", server.address], capsys)
    assert code == 0 and "jobs: none" in out.splitlines()[1], out
    assert out.splitlines()[0].endswith("min yield -  avg yield -"), out  # not 0.00: no job runs, none starves


def test_status_says_when_no_agent_is_registered(server: CoordinatorServer,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """Operator review: with its one agent lost, status printed the table's header over no rows, as before any agent
    had come up."""
    code, out, _ = run(["status", "--coordinator", server.address], capsys)
    assert code == 0 and out.splitlines()[2].split() == ["HOST", "AGENT", "CORES", "CPU", "ALLOC", "CPU", "MEASURED",
                                                         "MEM", "ALLOC"], out
    server.lose_agent("a0", "agent a0 lost: no heartbeat for 3 x 2 s")
    code, out, _ = run(["status", "--coordinator", server.address], capsys)
    assert code == 0 and out.splitlines()[2] == ("no hosts: no agent is registered now (a lost agent's hosts are "
                                                 "removed until it registers again)"), out
    assert [line.split("  ")[0] for line in out.splitlines()[4:]] == ["LOST AGENT", "a0"], out


def test_status_names_the_lost_agents_latest_first_until_they_register_again(
        server: CoordinatorServer, capsys: pytest.CaptureFixture[str], monkeypatch) -> None:
    """Operator review (session 36): a lost agent's hosts vanished from ``status``'s table, and only the
    coordinator's log said which agent had gone, when and why."""
    import coordinator.client

    def register(agent: str, hosts: int) -> None:
        desc = agent_pb2.DescribeReply(agent_id=agent, mode="cgroup-v1", hosts=[
            agent_pb2.HostInfo(name=f"{agent}-h{i}", cpu_cores=0.5, memory_bytes=1 << 30) for i in range(hosts)])
        with grpc.insecure_channel(server.address) as ch:
            pb_grpc.CoordinatorStub(ch).RegisterAgent(
                pb.RegisterAgentRequest(address="127.0.0.1:1", description=desc), timeout=5)

    register("b1", 4)
    server.lose_agent("a0", "agent a0 lost: no heartbeat for 3 x 2 s")
    # (the jobs the engine requeued: a job cannot run on these agents, whose addresses answer nothing)
    lose_hosts = server.engine.lose_hosts
    monkeypatch.setattr(server.engine, "lose_hosts", lambda hosts, reason: [*lose_hosts(hosts, reason), "job-00001",
                                                                             "job-00002"])
    server.lose_agent("b1", "agent b1 lost: its lease ran out")
    monkeypatch.setattr(coordinator.client, "LOST_SHOWN", 1)
    code, out, _ = run(["status", "--coordinator", server.address], capsys)
    lines = out.splitlines()
    assert code == 0 and lines[2].startswith("no hosts: no agent is registered now"), out
    assert lines[4].split() == ["LOST", "AGENT", "LOST", "HOSTS", "REMOVED", "JOBS", "REQUEUED", "WHY"], out
    row = lines[5].split()
    assert row[0] == "b1" and row[1].isdigit() and row[2:] == ["s", "ago", "b1-h[0-3]", "2", "its", "lease", "ran",
                                                               "out"], out
    assert lines[6:] == ["and 1 more lost agent"], out
    monkeypatch.setattr(coordinator.client, "LOST_SHOWN", 10)
    register("a0", 1)  # back: no longer lost
    code, out, _ = run(["status", "--coordinator", server.address], capsys)
    lines = out.splitlines()
    assert lines[2].split()[:2] == ["HOST", "AGENT"] and lines[3].split()[:2] == ["a0-h0", "a0"], out
    assert [line.split()[0] for line in lines[5:]] == ["LOST", "b1"], out


def test_status_shows_a_small_host_s_cores_as_they_are(server: CoordinatorServer,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """64 agents of 2 hosts on 2 cores: each host 0.0125 cores, shown as 0.01 (0.025 as 0.03); `up --hosts 1200`'s
    0.001 cores as 0.00, a host with no CPU (scale review)."""
    desc = agent_pb2.DescribeReply(agent_id="s1", mode="cgroup-v1", hosts=[
        agent_pb2.HostInfo(name=f"s1-h{i}", cpu_cores=c, memory_bytes=1 << 30) for i, c in enumerate((0.0125, 0.001))])
    with grpc.insecure_channel(server.address) as ch:
        pb_grpc.CoordinatorStub(ch).RegisterAgent(pb.RegisterAgentRequest(address="127.0.0.1:1", description=desc),
                                                  timeout=5)
    code, out, _ = run(["status", "--coordinator", server.address], capsys)
    cores = {line.split()[0]: line.split()[2] for line in out.splitlines()[3:] if line.strip()}
    assert code == 0 and cores == {"a0-h0": "0.50", "s1-h0": "0.0125", "s1-h1": "0.001"}, out


@pytest.mark.parametrize(("seconds", "shown"), [(0.4, "0 s"), (119.9, "119 s"), (120, "2 min"), (7199, "119 min"),
                                                (7200, "2 h 0 min"), (90061, "25 h 1 min")])
def test_a_lost_agent_s_time_is_said_for_a_person(seconds: float, shown: str) -> None:
    from coordinator.client import _ago

    assert _ago(seconds) == shown



def test_cancel_of_a_finished_job_says_nothing_was_cancelled(server: CoordinatorServer,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["submit", "--coordinator", server.address, "--work", "1"], capsys)
    job = out.strip()
    with server.engine.lock:  # it ends (its agent answers nothing here): as a poll's report would end it
        server.drain()
        rec = server.engine.jobs[job]
        server.engine._fail(rec, "a test")
    code, out, _ = run(["cancel", "--coordinator", server.address, job], capsys)
    assert code == 0 and out.strip() == f"{job} failed: it had finished already, nothing was cancelled"
    code, out, _ = run(["submit", "--coordinator", server.address, "--work", "1"], capsys)
    code, out, _ = run(["cancel", "--coordinator", server.address, out.strip()], capsys)
    assert out.strip().endswith("cancelled") and "nothing" not in out


def test_coordinator_prints_its_metrics_url() -> None:
    proc = subprocess.Popen([sys.executable, "-m", "coordinator.cli", "coordinator", "--port", "0",
                             "--metrics-port", "0"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
    try:
        deadline = time.monotonic() + 60
        line = proc.stdout.readline()  # type: ignore[union-attr]
        assert time.monotonic() < deadline
        assert "listening on 127.0.0.1:" in line and "metrics on http://127.0.0.1:" in line, line
    finally:
        proc.terminate()
        proc.wait(10)


def test_jobs_table_shows_a_yield_for_running_jobs_only() -> None:
    """A finished job's YIELD read 0.00 in ``vcemu jobs`` (the README calls it the share it ran with over its need;
    the reply has no share for a job that is not running): now ``-``, as for STRETCH of a job not done."""
    from coordinator.client import _job_table
    from vcemu.v1 import coordinator_pb2 as pb

    spec = pb.JobSpec(tasks=1, cpu_need=0.5, memory=0.1, work_seconds=30)  # no name: no NAME column
    running = pb.Job(job_id="job-1", spec=spec, state="running", cpu_share=0.25, virtual_time=3, hosts=["h0"],
                     **{"yield": 0.5})
    done = pb.Job(job_id="job-2", spec=spec, state="done", submit_time=0, end_time=60, virtual_time=30, stretch=2.0)
    rows = [line.split() for line in _job_table([running, done]).splitlines()[1:]]
    assert rows[0][6] == "0.50" and rows[1][6] == "-"

# ``vcemu cancel`` of a job cancelled already (live review): the second cancel printed ``job-02000 cancelled`` as
# the first did; it now says nothing was cancelled, as it does for a finished job.


def test_cancel_twice_says_the_second_cancelled_nothing(server: CoordinatorServer,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["submit", "--coordinator", server.address, "--work", "1"], capsys)
    job = out.strip()
    code, out, _ = run(["cancel", "--coordinator", server.address, job], capsys)
    assert code == 0 and out.strip() == f"{job} cancelled"
    code, out, _ = run(["cancel", "--coordinator", server.address, job], capsys)
    assert code == 0 and out.strip() == f"{job} cancelled: it had been cancelled already, nothing was cancelled"


def test_cancel_of_an_unknown_job_is_still_refused(server: CoordinatorServer,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["cancel", "--coordinator", server.address, "job-09999"], capsys)
    assert code != 0 and "job-09999" in err and not out


@pytest.mark.parametrize(("y", "shown"), [(0.0, "0.00"), (0.004, "0.004"), (0.00123, "0.00123"), (0.005, "0.01"),
                                          (0.25, "0.25"), (1.0, "1.00")])
def test_a_small_yield_is_not_shown_as_none(y: float, shown: str) -> None:
    """``jobs``, ``status`` and ``simulate`` showed a running job's yield under 0.005 as 0.00 (review of the
    simulation commands, session 31)."""
    from vcemu.cliargs import yield_text

    assert yield_text(y) == shown


def test_status_names_the_hosts_kept_from_new_tasks_and_why(server: CoordinatorServer,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """Gray-failure review: an agent whose starts went unanswered had its hosts kept from new tasks, and only the
    coordinator's log said so; ``status`` lists them, for how long still, and the job and failure that closed them,
    until they are offered again (a new registration of their agent)."""
    code, out, _ = run(["status", "--coordinator", server.address], capsys)
    assert code == 0 and "KEPT FROM NEW TASKS" not in out, out
    why = "StartTask on a0-h0: DEADLINE_EXCEEDED: " + "x" * 200
    server.engine._mark_short(["a0-h0"], "job-00007", why)
    code, out, _ = run(["status", "--coordinator", server.address], capsys)
    lines = out.splitlines()
    head = lines.index(next(line for line in lines if line.startswith("KEPT FROM NEW TASKS")))
    host, left, reason = lines[head + 1].split(None, 2)
    assert (host, reason) == ("a0-h0", "job-00007: StartTask on a0-h0: DEADLINE_EXCEEDED: " + "x" * 47 + "...")
    assert 0 < float(left.rstrip("s")) <= 16 * server.backend.retry_after, out
    desc = agent_pb2.DescribeReply(agent_id="a0", mode="cgroup-v1", hosts=[
        agent_pb2.HostInfo(name="a0-h0", cpu_cores=0.5, memory_bytes=1 << 30)])
    with grpc.insecure_channel(server.address) as ch:  # (it registers again: offered at once)
        pb_grpc.CoordinatorStub(ch).RegisterAgent(
            pb.RegisterAgentRequest(address="127.0.0.1:1", description=desc), timeout=5)
    code, out, _ = run(["status", "--coordinator", server.address], capsys)
    assert code == 0 and "KEPT FROM NEW TASKS" not in out, out


def test_status_lists_as_kept_only_the_hosts_the_policy_is_kept_from() -> None:
    """Code review: to a policy that pauses or moves running jobs (GREEDY-PMTN, DYNMCB8), a marked host where a job
    of ours runs is shown as it is (Engine._visible_hosts), so it is not kept from new tasks; status said it was."""
    from coordinator.engine import JobRecord
    from coordinator.model import JobSpec, JobState

    s = CoordinatorServer(get_policy("greedy-pmtn"), port=0).start()
    try:
        desc = agent_pb2.DescribeReply(agent_id="a0", mode="cgroup-v1", hosts=[
            agent_pb2.HostInfo(name=f"a0-h{i}", cpu_cores=0.5, memory_bytes=1 << 30) for i in range(2)])
        with grpc.insecure_channel(s.address) as ch:
            stub = pb_grpc.CoordinatorStub(ch)
            stub.RegisterAgent(pb.RegisterAgentRequest(address="127.0.0.1:1", description=desc), timeout=5)
            s.board.put(JobRecord(JobSpec("job-x", 0.0, 1, 0.5, 0.1, 100.0), JobState.RUNNING, ("a0-h0",), cpu=0.5))
            s.engine._mark_short(["a0-h0", "a0-h1"], "job-00007", "StartTask on a0-h1: DEADLINE_EXCEEDED")
            views = {h.name: h for h in stub.ClusterStatus(pb.ClusterStatusRequest(), timeout=5).hosts}
        assert views["a0-h0"].closed_for == 0 and views["a0-h0"].closed_reason == ""
        assert views["a0-h1"].closed_for > 0 and views["a0-h1"].closed_reason.startswith("job-00007: ")
    finally:
        s.stop()
