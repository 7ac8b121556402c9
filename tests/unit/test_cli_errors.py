"""Bad input to the ``vcemu`` commands: one line naming the flag (or file), exit status 2, no traceback, and
nothing long (a live cluster, an experiment) started first. Nothing here starts a live cluster: where a
command could, the cluster's entry points are replaced by ones that fail the test."""

from __future__ import annotations

import gzip
import json
import math
import os
import signal
import socket
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from coordinator.cli import main
from coordinator.model import InvalidJob, JobSpec
from coordinator.store import Store
from vcemu.cliargs import doc_text, version

ROOT = Path(__file__).resolve().parents[2]
JOB = {"id": "j0", "submit_time": 0, "tasks": 1, "cpu_need": 1.0, "memory": 0.2, "work": 30}


def run(argv: list[str], capsys: pytest.CaptureFixture[str], entry=main) -> tuple[object, str, str]:
    """(exit status, stdout, stderr) of one in-process command."""
    try:
        code: object = entry(argv)
    except SystemExit as exc:
        code = exc.code
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def refused(code: object, err: str, *fragments: str) -> None:
    assert code == 2, err
    assert "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1, err
    for f in fragments:
        assert f in err, err


@pytest.fixture
def jobs(tmp_path: Path) -> Path:
    path = tmp_path / "jobs.jsonl"
    path.write_text(json.dumps(JOB) + "\n")
    return path


@pytest.fixture
def empty(tmp_path: Path) -> Path:
    path = tmp_path / "empty.jsonl"
    path.write_text("")
    return path


@pytest.fixture
def no_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if a command starts a coordinator or an agent."""

    def started(*_a, **_k):
        raise AssertionError("a live coordinator or agent was started before the arguments were checked")

    import coordinator.demo
    import coordinator.servers
    import coordinator.service

    monkeypatch.setattr(coordinator.service, "CoordinatorServer", started)
    monkeypatch.setattr(coordinator.servers, "spawn_agent", started)
    monkeypatch.setattr(coordinator.demo, "start_local_cluster", started)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---- simulate, up, coordinator, submit and the top-level parser (coordinator/cli.py, coordinator/model.py) ---------


@pytest.mark.parametrize("value", ["-10", "nan", "inf"])
def test_simulate_refuses_a_bad_penalty(jobs: Path, value: str, capsys) -> None:
    code, _, err = run(["simulate", "--policy", "greedy", "--penalty", value, str(jobs)], capsys)
    refused(code, err, "argument --penalty", "must be a finite number >= 0")


def test_simulate_bad_penalty_without_traceback_in_a_process(jobs: Path) -> None:
    p = subprocess.run([sys.executable, "-m", "coordinator.cli", "simulate", "--policy", "greedy", "--penalty", "-10",
                        str(jobs)], capture_output=True, text=True, cwd=ROOT, timeout=60)
    refused(p.returncode, p.stderr, "--penalty")


def test_simulate_refuses_an_empty_job_file(empty: Path, capsys) -> None:
    code, _, err = run(["simulate", "--policy", "greedy", str(empty)], capsys)
    refused(code, err, f"vcemu simulate: no jobs in {empty}")


@pytest.mark.parametrize("policy", ["fcfs", "easy"])
def test_simulate_refuses_a_job_the_batch_policy_cannot_run_before_the_run(
        tmp_path: Path, policy: str, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """8 tasks fit 4 hosts' memory, not 4 whole nodes: FCFS and EASY's engine refused the job at its arrival, in
    the middle of the run (a traceback)."""
    import coordinator.experiments

    def never(*_a, **_k):
        raise AssertionError("the run started")

    monkeypatch.setattr(coordinator.experiments, "simulate_results", never)
    path = tmp_path / "wide.jsonl"
    path.write_text(json.dumps({**JOB, "id": "b"}) + "\n" + json.dumps({**JOB, "tasks": 8, "memory": 0.1}) + "\n")
    code, out, err = run(["simulate", "--policy", policy, str(path)], capsys)
    refused(code, err, f"vcemu simulate: {path}:2: tasks: 8 tasks need 8 whole nodes; the cluster has 4")
    assert out == ""


def test_simulate_out_that_is_a_file_says_so(jobs: Path, tmp_path: Path, capsys) -> None:
    (tmp_path / "afile").write_text("")
    code, _, err = run(["simulate", "--policy", "greedy", str(jobs), "--out", str(tmp_path / "afile")], capsys)
    refused(code, err, f"--out {tmp_path / 'afile'}: cannot write results there: it is a file, not a directory")


@pytest.fixture
def no_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if a client command connects to a coordinator."""
    import coordinator.servers

    def connects(*_a, **_k):
        raise AssertionError("the command connected before the job file was checked")

    monkeypatch.setattr(coordinator.client, "Connection", connects)


@pytest.mark.parametrize(("name", "data", "fragment"), [
    ("t.swf", b"1 0 0 100 2 -1 -1 2 100 -1 1 1 1 -1 -1 1 -1 -1\n",
     "SWF traces are read by simulate and replay only"),  # was "not valid JSON"
    ("empty.jsonl", b"", "vcemu submit: no jobs in"),  # was "0 accepted", exit status 0
    ("comments.csv", b"# nothing yet\n\n", "vcemu submit: no jobs in"),
    ("big.jsonl", json.dumps({**JOB, "tasks": 10_000_000_000}).encode() + b"\n",
     ":1: tasks: must be at most 2147483647"),  # a protobuf ValueError traceback
    ("latin1.jsonl", json.dumps({**JOB, "id": "caf\xe9"}, ensure_ascii=False).encode("latin-1") + b"\n",
     ":1: not UTF-8 text (byte 0xe9"),  # a UnicodeDecodeError traceback
    ("cut.jsonl.gz", gzip.compress(b"".join(json.dumps({**JOB, "id": f"j{i}"}).encode() + b"\n"
                                             for i in range(2000)), mtime=0)[:3000],
     ": compressed file is truncated"),  # an EOFError traceback
    # the coordinator's own bounds, below what a simulation takes: refused job by job after connecting (review)
    ("long.jsonl", json.dumps({**JOB, "id": "a"}).encode() + b"\n" + json.dumps({**JOB, "work": 5e9}).encode() + b"\n",
     ":2: job 'j0': work_seconds: at most 1e+09, got 5e+09 (the coordinator's bound)"),
    ("wide.jsonl", json.dumps({**JOB, "tasks": 20_000}).encode() + b"\n",
     ":1: job 'j0': tasks: at most 10000, got 20000"),
    # (an id of 250 characters is taken: its request id is cut to fit, the hash covering the whole id); the id is
    # quoted cut short (a 100,000-character one filled the terminal) and named as the file's field, "id"
    ("name.jsonl", json.dumps({**JOB, "id": "x" * 300}).encode() + b"\n",
     ":1: job '" + "x" * 60 + "'... (300 characters): id: at most 256"),
    # a newline in an id split the message, which blamed "request_id" and quoted the request id made of it (the
    # job file refuses it now, as simulate's input too)
    ("newline.jsonl", json.dumps({**JOB, "id": "a\nb"}).encode() + b"\n",
     ":1: id: must be printable (no newline, tab or other control character), got 'a\\nb'"),
])
def test_submit_file_refuses_a_bad_file_before_connecting(tmp_path: Path, name: str, data: bytes, fragment: str,
                                                          no_connection: None, capsys) -> None:
    path = tmp_path / name
    path.write_bytes(data)
    code, out, err = run(["submit", "--coordinator", "127.0.0.1:1", "--file", str(path)], capsys)
    refused(code, err, fragment, str(path))
    assert out == ""


@pytest.mark.parametrize(("argv", "line"), [
    # each printed UNAVAILABLE "is the coordinator running?" at an address where none listens, or, where one did,
    # went to it to be refused: only --tasks (argparse) and --file were checked before connecting
    (["--cpu-need", "2"], "vcemu submit: --cpu-need: must be in (0, 1] (a fraction of one host), got 2.0"),
    (["--cpu-need", "nan"], "vcemu submit: --cpu-need: must be in (0, 1] (a fraction of one host), got nan"),
    (["--memory", "0"], "vcemu submit: --memory: must be in (0, 1] (a fraction of one host's memory), got 0.0"),
    (["--work", "-1"], "vcemu submit: --work: must be a finite number > 0, got -1.0"),
    (["--work", "inf"], "vcemu submit: --work: must be a finite number > 0, got inf"),
    (["--work", "2e9"], "vcemu submit: --work: at most 1e+09, got 2e+09 (the coordinator's bound)"),
    (["--workload", "foo"], "vcemu submit: --workload: unknown workload 'foo'; known: dgemm, arraycycle, modeled"),
    (["--request-id", "r" * 300], "vcemu submit: --request-id: at most 256 characters, got 300 (the coordinator's "
                                  "bound)"),
])
def test_submit_refuses_a_bad_job_flag_before_connecting(argv: list[str], line: str, no_connection: None,
                                                         capsys) -> None:
    code, out, err = run(["submit", "--coordinator", "127.0.0.1:1", *argv], capsys)
    refused(code, err)
    assert err.strip() == line and out == ""


def test_submit_an_empty_workload_is_the_coordinators_default(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """``--workload ''`` is dgemm to the coordinator (the service reads an empty workload so): not refused
    before connecting (diff review: the local check refused it as an unknown workload)."""
    import coordinator.servers

    class Reached(Exception):
        pass

    def connects(*_a, **_k):
        raise Reached

    monkeypatch.setattr(coordinator.client, "Connection", connects)
    with pytest.raises(Reached):
        main(["submit", "--coordinator", "127.0.0.1:1", "--workload", ""])


def test_submit_help_says_the_files_submit_times_are_ignored(capsys) -> None:
    code, out, _ = run(["submit", "--help"], capsys)
    assert code == 0
    assert "its submit times are ignored" in " ".join(out.split())


def test_positive_flags_refuse_nan_and_inf(capsys) -> None:
    for value in ("nan", "inf"):
        code, _, err = run(["demo", "--span", value], capsys)
        refused(code, err, "argument --span: must be a finite number > 0")


def test_coordinator_refuses_an_unusable_state_file(tmp_path: Path, capsys) -> None:
    code, _, err = run(["coordinator", "--port", "0", "--state", str(tmp_path / "no" / "x.db")], capsys)
    refused(code, err, "vcemu coordinator: error: --state", f"directory {tmp_path / 'no'} does not exist")


@pytest.mark.parametrize("kind", ["missing dir", "text file"])
def test_up_refuses_an_unusable_state_file_before_starting_agents(tmp_path: Path, kind: str, monkeypatch,
                                                                  capsys) -> None:
    import coordinator.servers

    monkeypatch.setattr(coordinator.servers, "spawn_agent", lambda *a, **k: pytest.fail("agent started"))
    state = tmp_path / "nonexistent" / "x.db"
    if kind == "text file":
        state = tmp_path / "notdb.db"
        state.write_text("not a database\n" * 100)
    code, _, err = run(["up", "--port", "0", "--hosts", "1", "--state", str(state)], capsys)
    refused(code, err, "vcemu up: error: --state",
            "does not exist" if kind == "missing dir" else "not a usable vcemu state file")
    assert not Path(f"{state}.lock").exists()  # (live review: a refused file kept a lock file beside it)


@pytest.mark.parametrize("command", ["coordinator", "up", "agent"])
def test_a_port_in_use_is_one_line_naming_port(command: str, monkeypatch, capsys) -> None:
    import coordinator.servers
    import node_agent.server

    monkeypatch.setattr(coordinator.servers, "spawn_agent", lambda *a, **k: pytest.fail("agent started"))
    monkeypatch.setattr(node_agent.server, "open_core", lambda *a, **k: pytest.fail("agent core opened"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        code, _, err = run([command, "--port", str(port)], capsys)
    refused(code, err, f"vcemu {command}: error: --port: cannot listen on 127.0.0.1:{port}")


@pytest.mark.parametrize("command", ["coordinator", "agent"])
def test_an_address_not_of_this_machine_is_blamed_on_bind_not_port(command: str, monkeypatch, capsys) -> None:
    """192.0.2.1 (TEST-NET-1, RFC 5737) is no address of this machine: the port is free, the address is not."""
    import node_agent.server

    monkeypatch.setattr(node_agent.server, "open_core", lambda *a, **k: pytest.fail("agent core opened"))
    code, _, err = run([command, "--bind", "192.0.2.1", "--port", "0"], capsys)
    refused(code, err, f"vcemu {command}: error: --bind: 192.0.2.1 is not an address of this machine")


@pytest.mark.parametrize("command", ["coordinator", "agent"])
def test_a_port_in_use_is_one_line_in_a_process(command: str) -> None:
    """Without gRPC's own "Failed to add port" line beside ours (in-process tests do not see it: it is
    written by gRPC's C++ core to file descriptor 2)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        extra = ["--no-cgroups"] if command == "agent" else []
        p = subprocess.run([sys.executable, "-m", "coordinator.cli", command, "--port", str(port), *extra],
                           capture_output=True, text=True, cwd=ROOT, timeout=60)
    refused(p.returncode, p.stderr, f"vcemu {command}: error: --port: cannot listen on 127.0.0.1:{port}")


@pytest.fixture
def fake_ray(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, object]]:
    """``vcemu up --ray`` without Ray: a one-node cluster whose agent actors never start, so the command ends
    right after starting its coordinator. Yields the keyword arguments the coordinator was built with."""
    import coordinator.backends.ray.cluster as cluster
    import coordinator.service
    from coordinator.raycluster import RayNode

    class Ctx:
        node_ip, ray_version, auth_mode = "127.0.0.1", "fake", "disabled"

        def nodes(self) -> list[RayNode]:
            return [RayNode("f" * 56, "127.0.0.1", {"CPU": 2.0}, {})]

        def named_actors(self) -> set[str]:
            return got.get("taken", set())  # type: ignore[return-value]

        def close(self) -> None:
            pass

    class Agents:
        def __init__(self, *_a: object, **k: object) -> None:
            got["agents"] = k

        def wait_started(self) -> None:
            raise RuntimeError("--ray: the fake agent actors never start")

        def stop(self) -> None:
            pass

    got: dict[str, object] = {}
    real = coordinator.service.CoordinatorServer

    def server(*a: object, **k: object) -> object:
        got.update(k)
        return real(*a, **k)

    monkeypatch.setattr(cluster, "connect", lambda address: Ctx())
    monkeypatch.setattr(cluster, "RayAgents", Agents)
    monkeypatch.setattr(coordinator.service, "CoordinatorServer", server)
    sigterm = signal.getsignal(signal.SIGTERM)  # run_up ignores SIGTERM once it is stopping
    yield got
    signal.signal(signal.SIGTERM, sigterm)


def test_up_ray_keeps_state_heartbeat_and_token(tmp_path: Path, fake_ray: dict[str, object], capsys) -> None:
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    state = tmp_path / "run.db"
    code, _, err = run(["up", "--ray", "127.0.0.1:6379", "--port", "0", "--state", str(state), "--heartbeat", "5",
                        "--token-file", str(token)], capsys)
    assert code == 1 and "fake agent actors never start" in err, err  # after the coordinator started
    assert (fake_ray["state"], fake_ray["heartbeat_s"], fake_ray["token"]) == (str(state), 5.0, "s3cret")
    assert fake_ray["agents"]["token"] == "s3cret"  # type: ignore[index]  # (the actors send it: API review)
    assert Store(str(state)).load().epoch > 0  # the coordinator wrote its state there


@pytest.mark.parametrize(("extra", "spares"), [([], 0), (["--agent-spares", "3"], 3)])
def test_up_ray_gives_its_agent_actors_the_spares_asked_for_and_none_by_default(
        extra: list[str], spares: int, fake_ray: dict[str, object], capsys) -> None:
    code, _, err = run(["up", "--ray", "127.0.0.1:6379", "--port", "0", *extra], capsys)
    assert code == 1 and "fake agent actors never start" in err, err  # after the actors were made
    assert fake_ray["agents"]["spares"] == spares  # type: ignore[index]


def test_up_ray_with_a_state_file_refuses_hosts_another_run_holds(tmp_path: Path, fake_ray: dict[str, object],
                                                                  capsys) -> None:
    """Without --state a second run takes other names (and says so); with it, its stored jobs need the names back."""
    from coordinator.backends.ray.placement import actor_name, place_hosts
    from coordinator.raycluster import RayNode

    node = RayNode("f" * 56, "127.0.0.1", {"CPU": 2.0}, {})
    fake_ray["taken"] = {actor_name(p.agent_id) for p in place_hosts([node], 1, 0.5, 1 << 28)}
    state = tmp_path / "run.db"
    code, _, err = run(["up", "--ray", "127.0.0.1:6379", "--port", "0", "--hosts", "1", "--state", str(state)], capsys)
    assert code == 1 and "vcemu up: --ray: the agent actors of hosts ray0-h0 are alive on this Ray cluster" in err, err
    assert not state.exists()  # refused before the coordinator opened it
    code, _, err = run(["up", "--ray", "127.0.0.1:6379", "--port", "0", "--hosts", "1"], capsys)
    assert code == 1 and "fake agent actors never start" in err, err  # went on, renamed
    assert ("vcemu up: another run's agent actors hold the hosts ray0-h0 on this Ray cluster: this run's hosts are "
            "ray-2-0-h0, ...") in err, err


def test_an_agent_actor_starts_its_agent_with_its_spares(monkeypatch: pytest.MonkeyPatch) -> None:
    """The actor is plain Python (Ray wraps it in remote_class): its agent is ``vcemu agent --spares N``'s."""
    import node_agent.register
    import node_agent.server
    from node_agent import ray_actor

    got: dict[str, object] = {}

    class Running:
        port = 4321

    def start_agent(*_a: object, **k: object) -> Running:
        got.update(k)
        return Running()

    monkeypatch.setattr(node_agent.server, "start_agent", start_agent)
    monkeypatch.setattr(node_agent.register, "Registrar", lambda *_a, **_k: None)
    monkeypatch.setattr(ray_actor, "_ray_node_ip", lambda: "127.0.0.1")
    ray_actor.HostAgentActor("a", [{"name": "h0", "cpu_cores": 0.5, "memory_bytes": 1 << 28}], "127.0.0.1:1",
                             bind="127.0.0.1", spares=2)
    assert got["spares"] == 2
    ray_actor.HostAgentActor("a", [{"name": "h0", "cpu_cores": 0.5, "memory_bytes": 1 << 28}], "127.0.0.1:1",
                             bind="127.0.0.1")
    assert got["spares"] == 0


def test_up_ray_refuses_an_unusable_state_file(tmp_path: Path, fake_ray: dict[str, object], capsys) -> None:
    code, _, err = run(["up", "--ray", "127.0.0.1:6379", "--port", "0", "--state", str(tmp_path / "no" / "x.db")],
                       capsys)
    refused(code, err, "vcemu up: error: --state", "does not exist")


@pytest.mark.parametrize(("extra", "fragment"), [
    (["--tls-cert", "c.pem", "--tls-key", "k.pem", "--tls-ca", "ca.pem"],
     "vcemu up: --tls-cert/--tls-key/--tls-ca: not with --ray"),
    (["--token-file", "/nonexistent/token"], "vcemu: --token-file /nonexistent/token"),
    (["--agents", "2"], "vcemu up: --agents: not with --ray"),
    (["--restart-agents", "1"],
     "vcemu up: --restart-agents: not with --ray (Ray restarts a crashed agent actor itself, up to 3 times)"),
])
def test_up_ray_refuses_before_connecting(extra: list[str], fragment: str, monkeypatch, capsys) -> None:
    import coordinator.backends.ray.cluster as cluster

    monkeypatch.setattr(cluster, "connect", lambda address: pytest.fail("connected to Ray"))
    code, _, err = run(["up", "--ray", "127.0.0.1:6379", *extra], capsys)
    refused(code, err, fragment)


@pytest.mark.parametrize("command", ["coordinator", "agent"])
def test_a_metrics_port_in_use_is_one_line_naming_it(command: str, capsys) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        extra = ["--no-cgroups"] if command == "agent" else []
        code, _, err = run([command, "--port", "0", "--metrics-port", str(port), *extra], capsys)
    refused(code, err, f"vcemu {command}: error: --metrics-port: cannot listen on 127.0.0.1:{port}")


def _listening() -> socket.socket:
    """A socket listening on an ephemeral 127.0.0.1 port: that port is in use."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    return s


def test_up_ray_port_in_use_is_one_clean_line(fake_ray: dict[str, object], capsys) -> None:
    """Worded as a local ``vcemu up`` words it, without a second flag prefix before the one naming --port."""
    with _listening() as s:
        port = s.getsockname()[1]
        code, _, err = run(["up", "--ray", "127.0.0.1:6379", "--port", str(port)], capsys)
    refused(code, err, f"vcemu up: error: --port: cannot listen on 127.0.0.1:{port}")
    assert err.count("--port") == 1, err


def test_agent_metrics_port_in_use_is_refused_before_the_agent_starts(monkeypatch, capsys) -> None:
    """Before cgroups are cleaned, workloads calibrated and the gRPC server started, as a --port in use is."""
    import node_agent.server

    monkeypatch.setattr(node_agent.server, "open_core", lambda *a, **k: pytest.fail("agent core opened"))
    with _listening() as s:
        port = s.getsockname()[1]
        code, _, err = run(["agent", "--port", "0", "--metrics-port", str(port), "--no-cgroups"], capsys)
    refused(code, err, f"vcemu agent: error: --metrics-port: cannot listen on 127.0.0.1:{port}")


def test_agent_metrics_port_same_as_port_is_refused_before_the_agent_starts(monkeypatch, capsys) -> None:
    import node_agent.server

    monkeypatch.setattr(node_agent.server, "open_core", lambda *a, **k: pytest.fail("agent core opened"))
    port = _closed_port()
    code, _, err = run(["agent", "--port", str(port), "--metrics-port", str(port), "--no-cgroups"], capsys)
    refused(code, err, f"vcemu agent: error: --metrics-port: cannot listen on 127.0.0.1:{port}", "--port")


def test_agent_parent_pid_that_is_not_its_parent_is_refused(monkeypatch, capsys) -> None:
    """A wrong --parent-pid (or a process between, such as sudo or timeout) is refused at once: watched, it stopped
    the agent as soon as it started, saying its parent had exited, with exit status 0 (found by review)."""
    import node_agent.server

    monkeypatch.setattr(node_agent.server, "open_core", lambda *a, **k: pytest.fail("agent core opened"))
    other = 1 if os.getppid() != 1 else 2
    code, _, err = run(["agent", "--port", "0", "--no-cgroups", "--parent-pid", str(other)], capsys)
    refused(code, err, f"argument --parent-pid: process {other} is not this agent's parent")


@pytest.mark.parametrize("ray", [False, True])
def test_coordinator_metrics_port_in_use_is_refused_before_the_state_file_is_opened(
        ray: bool, tmp_path: Path, fake_ray: dict[str, object], capsys) -> None:
    """A refused run leaves no state file behind (and, with --ray, starts no coordinator)."""
    state = tmp_path / "run.db"
    argv = ["up", "--ray", "127.0.0.1:6379"] if ray else ["coordinator"]
    with _listening() as s:
        port = s.getsockname()[1]
        code, _, err = run([*argv, "--port", "0", "--metrics-port", str(port), "--state", str(state)], capsys)
    refused(code, err, f"vcemu {argv[0]}: error: --metrics-port: cannot listen on 127.0.0.1:{port}")
    assert not state.exists()
    assert not fake_ray  # the coordinator was never built


def test_up_metrics_port_in_use_starts_no_agent(tmp_path: Path, monkeypatch, capsys) -> None:
    import coordinator.servers

    monkeypatch.setattr(coordinator.servers, "spawn_agent", lambda *a, **k: pytest.fail("agent started"))
    state = tmp_path / "run.db"
    with _listening() as s:
        port = s.getsockname()[1]
        code, _, err = run(["up", "--hosts", "1", "--port", "0", "--metrics-port", str(port), "--state", str(state)],
                           capsys)
    refused(code, err, f"vcemu up: error: --metrics-port: cannot listen on 127.0.0.1:{port}")
    assert not state.exists()


@pytest.mark.parametrize("case", ["beyond 65535", "in use", "the coordinator's", "with --ray", "zero"])
def test_up_refuses_agent_metrics_ports_it_cannot_have_before_starting_anything(
        case: str, tmp_path: Path, monkeypatch, capsys) -> None:
    """``up --agent-metrics-port BASE`` gives agent i port BASE+i: a BASE that runs past 65535, or a port of the
    range in use or taken by the coordinator, is refused with one line naming the flag, before the state file or
    any agent is made (an agent refusing it itself would only tell ``up`` that its cluster did not come up)."""
    import coordinator.servers

    monkeypatch.setattr(coordinator.servers, "spawn_agent", lambda *a, **k: pytest.fail("agent started"))
    state = tmp_path / "run.db"
    up = ["up", "--hosts", "3", "--agents", "2", "--port", "0", "--state", str(state)]
    free = _closed_port()
    with _listening() as s:
        busy = s.getsockname()[1]
        argv, expected = {
            "beyond 65535": (["--agent-metrics-port", "65535"], "vcemu up: error: --agent-metrics-port: 65535 puts "
                             "agent 1 on port 65536, above 65535 (agent i serves on 65535 + i); give at most 65534"),
            "in use": (["--agent-metrics-port", str(busy)],
                       f"vcemu up: error: --agent-metrics-port: cannot listen on 127.0.0.1:{busy}"),
            "the coordinator's": (["--agent-metrics-port", str(free), "--metrics-port", str(free)],
                                  f"vcemu up: error: --agent-metrics-port: port {free} (agent 0's) is also the "
                                  "coordinator's --metrics-port"),
            "with --ray": (["--ray", "127.0.0.1:6379", "--agent-metrics-port", "40000"],
                           "vcemu up: --agent-metrics-port: not with --ray (the Ray agent actors serve no metrics)"),
            "zero": (["--agent-metrics-port", "0"], "argument --agent-metrics-port: must be in 1..65535"),
        }[case]
        code, _, err = run(up + argv, capsys)
    refused(code, err, expected)
    assert not state.exists()


def test_an_unreadable_token_file_exits_2(tmp_path: Path, monkeypatch, capsys) -> None:
    code, _, err = run(["coordinator", "--port", "0", "--token-file", str(tmp_path / "none")], capsys)
    refused(code, err, "--token-file")
    monkeypatch.setenv("VCEMU_TOKEN_FILE", str(tmp_path / "none"))
    code, _, err = run(["jobs", "--coordinator", f"127.0.0.1:{_closed_port()}"], capsys)
    refused(code, err, "$VCEMU_TOKEN_FILE")


@pytest.mark.parametrize("work", [math.inf, math.nan, -1.0])
def test_work_must_be_finite_and_positive(work: float) -> None:
    with pytest.raises(InvalidJob, match="work_seconds: must be a finite number > 0"):
        JobSpec("j", 0.0, 1, 1.0, 0.1, work).validate()


def test_submit_work_inf_says_finite(capsys) -> None:
    """``vcemu submit --work inf``: the refusal names the rule inf breaks (finite), not "> 0". Said before connecting
    now (test_submit_refuses_a_bad_job_flag_before_connecting), as the coordinator says it to another client."""
    import grpc

    from coordinator.policies import get_policy
    from coordinator.service import CoordinatorServer
    from tests.unit.test_service import register
    from vcemu.v1 import coordinator_pb2 as pb
    from vcemu.v1 import coordinator_pb2_grpc as pb_grpc

    server = CoordinatorServer(get_policy("greedy"), port=0).start()
    try:
        with grpc.insecure_channel(server.address) as channel:
            stub = pb_grpc.CoordinatorStub(channel)
            register(stub)
            with pytest.raises(grpc.RpcError) as exc:
                stub.Submit(pb.SubmitRequest(spec=pb.JobSpec(tasks=1, cpu_need=1.0, memory=0.1,
                                                             work_seconds=math.inf)), timeout=10)
        assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "work_seconds: must be a finite number > 0, got inf" in exc.value.details()
        code, _, err = run(["submit", "--coordinator", server.address, "--work", "inf"], capsys)
    finally:
        server.stop()
    refused(code, err, "vcemu submit: --work: must be a finite number > 0, got inf")


def test_doc_text_strips_rest_markup() -> None:
    assert doc_text("The ``vcemu`` CLI, see :mod:`coordinator.apc.live` and :func:`x <a.b>`.") == \
        "The vcemu CLI, see coordinator.apc.live and x."


def test_version(capsys) -> None:
    code, out, _ = run(["--version"], capsys)
    assert code == 0
    assert out.strip() == f"vcemu {version()}"


# ---- replay and demo: refused before any agent starts --------------------------------------------------------------


def test_replay_refuses_a_bad_penalty_before_the_live_run(jobs: Path, no_cluster, capsys) -> None:
    from coordinator.replay import replay_main

    code, _, err = run([str(jobs), "--policy", "greedy", "--compress", "5", "--penalty", "-3"], capsys, replay_main)
    refused(code, err, "--penalty", "must be a finite number >= 0")


def test_replay_refuses_an_empty_job_file(empty: Path, no_cluster, capsys) -> None:
    from coordinator.replay import replay_main

    code, _, err = run([str(empty), "--policy", "greedy"], capsys, replay_main)
    refused(code, err, f"vcemu replay: no jobs in {empty}")


@pytest.mark.parametrize(("name", "data", "fragment"), [
    ("dup.swf", b"1 0 0 100 2 -1 -1 2 100 -1 1 1 1 -1 -1 1 -1 -1\n1 10 0 200 2 -1 -1 2 200 -1 1 1 1 -1 -1 1 -1 -1\n",
     ":2: id: duplicate SWF job number 1 (first on line 1)"),  # the live run waited for the second until --timeout
    ("cut.swf.gz", gzip.compress(b"".join(f"{i} {i} 0 100 2 -1 -1 2 100 -1 1 1 1 -1 -1 1 -1 -1\n".encode()
                                          for i in range(1, 3000)), mtime=0)[:5000],
     ": compressed file is truncated"),  # an EOFError traceback
])
def test_replay_refuses_a_bad_trace_before_the_cluster_starts(tmp_path: Path, name: str, data: bytes, fragment: str,
                                                              no_cluster, capsys) -> None:
    from coordinator.replay import replay_main

    path = tmp_path / name
    path.write_bytes(data)
    code, _, err = run([str(path), "--policy", "greedy", "--out", str(tmp_path / "out")], capsys, replay_main)
    refused(code, err, f"vcemu replay: {path}", fragment)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("flag", "value", "fragment"), [
    ("--compress", "0", "must be > 0"), ("--max-jobs", "0", "must be > 0"), ("--timeout", "-1", "must be > 0"),
    ("--hosts", "0", "must be > 0"), ("--cpus-per-host", "-1", "must be > 0"),
    ("--mem-per-host", "lots", "cannot parse memory size"), ("--agents", "9", "must be at most --hosts (4)"),
])
def test_replay_refusals_say_the_rule_in_one_line(jobs: Path, flag: str, value: str, fragment: str, no_cluster,
                                                  capsys) -> None:
    from coordinator.replay import replay_main

    code, _, err = run([str(jobs), flag, value], capsys, replay_main)
    refused(code, err, f"argument {flag}: {fragment}")
    assert "usage:" not in err


@pytest.fixture(params=["file parent", "proc"])
def bad_out(request, tmp_path: Path) -> str:
    if request.param == "proc":
        if not Path("/proc/self").exists():
            pytest.skip("no /proc")
        return "/proc/vcemu-test/x"
    (tmp_path / "afile").write_text("")
    return str(tmp_path / "afile" / "sub")


def test_demo_refuses_an_unwritable_out_before_starting_the_cluster(bad_out: str, no_cluster, capsys) -> None:
    code, _, err = run(["demo", "--out", bad_out, "--jobs", "1", "--span", "1", "--hosts", "1"], capsys)
    refused(code, err, f"vcemu demo: --out {bad_out}: cannot write results there")


def test_replay_refuses_an_unwritable_out_before_starting_the_cluster(jobs: Path, bad_out: str, no_cluster,
                                                                      capsys) -> None:
    from coordinator.replay import replay_main

    code, _, err = run([str(jobs), "--policy", "greedy", "--out", bad_out], capsys, replay_main)
    refused(code, err, f"vcemu replay: --out {bad_out}: cannot write results there")


# ---- vcsched and apc: refused before the first instance or experiment ----------------------------------------------


@pytest.mark.parametrize(("flag", "value", "fragment"), [
    ("--accuracy", "-1", "must be a finite number > 0"),
    ("--accuracy", "nan", "must be a finite number > 0"),
    ("--slacks", "0.5,1.5", "every slack must be in [0, 1)"),
    ("--backtrack-limit", "0", "must be >= 1"),
    ("--milp-time-limit", "0", "must be a finite number > 0"),
    ("--jobs", "0", "must be >= 1"),  # was silently one worker
    ("--jobs", "-2", "must be >= 1"),
    ("--jobs", "100000", "must be >= 1 and <= "),  # (worker processes: 100,000 of them were started)
])
def test_vcsched_refuses_bad_settings_up_front(tmp_path: Path, flag: str, value: str, fragment: str, capsys) -> None:
    from coordinator.vcsched.experiment import vcsched_main

    out = tmp_path / "out"
    code, _, err = run(["--set", "small", "--instances", "1", flag, value, "--out", str(out)], capsys, vcsched_main)
    refused(code, err, f"vcemu vcsched: {flag}: {fragment}")
    assert not out.exists()  # refused before anything was written


@pytest.mark.parametrize(("argv", "fragment"), [
    (["--experiments", "three", "--exp3-horizon", "0"], "--exp3-horizon: must be a finite number > 0"),
    (["--experiments", "three", "--exp3-horizon", "-100"], "--exp3-horizon: must be a finite number > 0"),
    (["--experiments", "one", "--live", "--live-seconds", "-1"], "--live-seconds: must be a finite number >= 2"),
    (["--experiments", "one", "--live", "--live-seconds", "1"], "--live-seconds: must be a finite number >= 2"),
    (["--experiments", "one", "--cycle", "nan"], "--cycle: must be a finite number > 0"),
    (["--experiments", "one", "--live", "--live-agent", "nohost"], "--live-agent: expected HOST:PORT"),
])
def test_apc_refuses_bad_settings_up_front(tmp_path: Path, argv: list[str], fragment: str, capsys) -> None:
    from coordinator.apc.experiment import apc_main

    out = tmp_path / "out"
    code, _, err = run([*argv, "--out", str(out)], capsys, apc_main)
    refused(code, err, f"vcemu apc: {fragment}")
    assert not out.exists()


def test_apc_refuses_an_unreachable_live_agent_before_the_experiments(tmp_path: Path, capsys) -> None:
    from coordinator.apc.experiment import apc_main

    out = tmp_path / "out"
    agent = f"127.0.0.1:{_closed_port()}"
    code, _, err = run(["--experiments", "one", "--live", "--live-agent", agent, "--out", str(out)], capsys, apc_main)
    refused(code, err, f"vcemu apc: --live-agent {agent}: cannot use the vcemu agent there (UNAVAILABLE")
    assert not out.exists()


def test_live_experiment_names_the_agent_that_went_away(tmp_path: Path) -> None:
    from coordinator.apc.live import LiveAgentError, live_experiment_three

    agent = f"127.0.0.1:{_closed_port()}"
    with pytest.raises(LiveAgentError, match=f"--live-agent {agent}: cannot use"):
        live_experiment_three(tmp_path / "live", 4.0, agent=agent)


def test_vcsched_and_apc_refuse_an_unwritable_out(tmp_path: Path, capsys) -> None:
    from coordinator.apc.experiment import apc_main
    from coordinator.vcsched.experiment import vcsched_main

    (tmp_path / "afile").write_text("")
    bad = str(tmp_path / "afile" / "sub")
    code, _, err = run(["--set", "small", "--instances", "1", "--out", bad], capsys, vcsched_main)
    refused(code, err, f"vcemu vcsched: --out {bad}")
    code, _, err = run(["--experiments", "one", "--out", bad], capsys, apc_main)
    refused(code, err, f"vcemu apc: --out {bad}")


def test_apc_short_horizon_prints_na_without_numpy_warnings(tmp_path: Path, capsys) -> None:
    from coordinator.apc.experiment import apc_main

    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # "Mean of empty slice"
        code, out, _ = run(["--experiments", "three", "--exp3-horizon", "600", "--out", str(tmp_path / "o")], capsys,
                           apc_main)
    assert code == 0
    assert "nan" not in out and "jobs met n/a" in out
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["three"]["dynamic"]["jobs_completed"] == 0


# ---- sweep --hpc2n-weeks, bench dfrs, --help -----------------------------------------------------------------------


@pytest.mark.parametrize(("weeks", "fragment"), [("5-2", "reversed range '5-2'"), ("x", "bad item 'x'"),
                                                  ("-3", "bad item '-3'")])
def test_sweep_refuses_bad_weeks(tmp_path: Path, weeks: str, fragment: str, capsys) -> None:
    from coordinator.sweep import sweep_main

    code, _, err = run(["--hpc2n-weeks", weeks, "--out", str(tmp_path / "out")], capsys, sweep_main)
    refused(code, err, f"vcemu sweep: --hpc2n-weeks: {fragment}")
    assert not (tmp_path / "out").exists()


def test_sweep_weeks_still_take_ranges_and_lists() -> None:
    from coordinator.sweep import _weeks

    assert _weeks("0-3,7, 9-9") == [0, 1, 2, 3, 7, 9]
    assert _weeks("") == []


def test_bench_dfrs_says_the_real_job_count_and_judges_only_what_it_measured(monkeypatch, capsys, tmp_path) -> None:
    """``bench dfrs --jobs 200 --json`` reported a 200-job time under ``sim_1000jobs_s``, beside the 1,000-job
    target (found by two reviews); and no output said which target was met."""
    import coordinator.bench_dfrs as bench

    def fake(jobs: int, seed: int) -> dict:
        return {"python_ref_s": 0.1, f"sim_{jobs}jobs_s": 0.05, f"sim_{jobs}jobs_per_ref": 0.4,
                "decision_p99_ms": 60.0}

    monkeypatch.setattr(bench, "bench_sim", fake)
    code, out, _ = run(["--jobs", "50", "--no-sweep", "--out", str(tmp_path)], capsys, bench.bench_dfrs_main)
    assert code == 0
    assert "sim_50jobs_s: 0.05" in out and "sim_50jobs_per_ref" in out
    assert "sim_1000jobs_s <= 1: not judged (--jobs 50, not 1000)" in out
    assert "decision_p99_ms <= 50: not judged (--jobs 50, not 1000)" in out  # the 1,000-job run's target
    assert "sweep_speedup_2cores >= 1.7: not measured" in out
    code, out, _ = run(["--jobs", "50", "--no-sweep", "--json", "--out", str(tmp_path)], capsys,
                       bench.bench_dfrs_main)
    got = json.loads(out)
    assert got["sim_50jobs_s"] == 0.05 and "sim_1000jobs_s" not in got
    assert got["met"] == {}
    code, out, _ = run(["--no-sim", "--no-sweep", "--out", str(tmp_path)], capsys, bench.bench_dfrs_main)
    assert "sim_1000jobs_s <= 1: not measured" in out and "--jobs" not in out
    code, out, _ = run(["--no-sweep", "--json", "--out", str(tmp_path)], capsys, bench.bench_dfrs_main)
    got = json.loads(out)
    assert got["sim_1000jobs_s"] == 0.05 and got["met"] == {"sim_1000jobs_s": True, "decision_p99_ms": False}


@pytest.mark.parametrize("argv", [["--help"], ["replay", "--help"], ["apc", "--help"], ["bench", "dfrs", "--help"]])
def test_help_has_no_rest_markup(argv: list[str], capsys) -> None:
    code, out, _ = run(argv, capsys)
    assert code == 0
    assert "``" not in out and ":mod:" not in out


@pytest.mark.parametrize(("argv", "message"), [
    (["--beta", "-1"], "--beta: must be a finite number >= 1, got -1.0"),
    (["--duration", "nan"],
     "--duration: must be a finite number >= 10 (s, the job mix's mean inter-arrival time), got nan"),
])
def test_oppcost_says_the_rule_a_bad_value_breaks(tmp_path, capsys, argv, message):
    from coordinator.oppcost.experiment import oppcost_main

    assert oppcost_main([*argv, "--executions", "1", "--out", str(tmp_path / "out")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("unbuffered", ["", "1"], ids=["buffered", "unbuffered"])
def test_a_reader_that_goes_away_stops_the_command_quietly(tmp_path: Path, unbuffered: str) -> None:
    """``vcemu simulate jobs.jsonl --policy greedy | head -1``, ``vcemu status | head -1``: the reader closes the pipe
    and the next write fails. A Unix filter stops without a word; vcemu printed a BrokenPipeError traceback.
    Both ways a user's shell may have it: with stdout block-buffered (no PYTHONUNBUFFERED, as in a fresh clone's
    shell) a short output is written only at the end, and its broken pipe was first seen in Python's exit flush."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    if unbuffered:
        env["PYTHONUNBUFFERED"] = unbuffered
    job = tmp_path / "j.jsonl"
    job.write_text('{"id": "a", "submit_time": 0, "tasks": 1, "cpu_need": 1, "memory": 0.1, "work": 10}\n')
    r, w = os.pipe()
    os.close(r)  # nobody reads: the first write fails
    try:
        p = subprocess.run([sys.executable, "-m", "coordinator.cli", "simulate", str(job), "--policy", "greedy"],
                           stdout=w, stderr=subprocess.PIPE, text=True, timeout=120, env=env)
    finally:
        os.close(w)
    assert (p.returncode, p.stderr) == (128 + signal.SIGPIPE, "")


def test_a_broken_pipe_that_is_not_our_output_is_still_an_error(monkeypatch) -> None:
    """Only a reader of vcemu's own stdout or stderr going away ends a command quietly (diff review): a broken pipe
    to anything else (a child's pipe, a socket) must not pass for one."""
    import coordinator.cli as cli

    def broken(_argv):  # noqa: ANN001, ANN202
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(cli, "_main", broken)
    with pytest.raises(BrokenPipeError):
        cli.main([])


def test_bench_help_describes_each_benchmark_and_what_it_needs(capsys) -> None:
    """``vcemu bench --help`` listed the names alone: not what each measures, nor which need cgroups or agents
    (cpu-share, load, scale) and which are simulation only (packing, dfrs)."""
    code, out, _ = run(["bench", "--help"], capsys)
    assert code == 0
    text = " ".join(out.split())
    live, _, simulated = text.partition("Simulation only: no agent, no cgroups.")
    assert simulated, out
    assert "Live: they run agents" in live
    for name in ("cpu-share", "load", "scale"):
        assert f" {name} " in live, out
    assert "Needs cgroups" in live
    for name in ("packing", "dfrs"):
        assert f" {name} " in simulated.split("positional arguments")[0], out


@pytest.mark.parametrize(("value", "why"), [("17", "must be in 0..16, got 17"), ("-1", "must be in 0..16, got -1"),
                                            ("two", "must be a whole number, got 'two'")])
def test_agent_spares_out_of_range_is_refused_before_the_agent_starts(value: str, why: str, monkeypatch,
                                                                      capsys) -> None:
    import node_agent.server

    monkeypatch.setattr(node_agent.server, "open_core", lambda *a, **k: pytest.fail("agent core opened"))
    code, _, err = run(["agent", "--spares", value], capsys)
    refused(code, err, f"vcemu agent: error: argument --spares: {why}")


@pytest.mark.parametrize(("argv", "flags"), [
    (["up", "--hosts", "3", "--agents", "2", "--port", "0", "--agent-spares", "0"], [["--spares", "0"]] * 2),
    (["up", "--hosts", "1", "--port", "0", "--agent-spares", "16"], [["--spares", "16"]]),
    (["up", "--hosts", "1", "--port", "0"], [["--spares", "2"]]),  # the agent's default, passed (and recorded)
    (["demo", "--agent-spares", "3", "--out", "OUT"], [["--spares", "3"]]),
    (["replay", "TRACE", "--agent-spares", "1", "--out", "OUT"], [["--spares", "1"]]),
])
def test_agent_spares_reach_each_agent_the_command_starts(argv: list[str], flags: list[list[str]], tmp_path: Path,
                                                          monkeypatch, capsys) -> None:
    """``--agent-spares N`` (up, demo, replay) is each agent's ``--spares N``: ``up``, ``demo`` and ``replay`` could
    not set it (their agents kept the default 2 of each workload, about 30 MB each)."""
    import coordinator.servers

    seen: list[list[str]] = []

    def spawn(coordinator, hosts, cpus, mems, agent_id, extra=(), log=None, token=None):  # type: ignore[no-untyped-def]
        i = list(extra).index("--spares") if "--spares" in extra else None
        seen.append([] if i is None else list(extra)[i:i + 2])
        if len(seen) == len(flags):
            raise KeyboardInterrupt  # every agent spawned: stop here (start_local_cluster stops what it started)
        return subprocess.Popen(["sleep", "60"])  # a process for start_local_cluster to stop

    monkeypatch.setattr(coordinator.servers, "spawn_agent", spawn)
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"id": "a", "submit_time": 0, "tasks": 1, "cpu_need": 1, "memory": 0.1, "work": 10}\n')
    argv = [{"OUT": str(tmp_path / "out"), "TRACE": str(trace)}.get(a, a) for a in argv]
    code, _, err = run(argv, capsys)
    assert code == 130, err
    assert seen == flags


def test_agent_spares_out_of_range_are_refused(capsys) -> None:
    code, _, err = run(["up", "--agent-spares", "17"], capsys)
    refused(code, err, "argument --agent-spares: must be in 0..16, got 17")
    code, _, err = run(["replay", "t.jsonl", "--agent-spares", "-1"], capsys)
    refused(code, err, "argument --agent-spares: must be in 0..16, got -1")



def test_oppcost_takes_at_most_four_workers_per_core(tmp_path: Path, capsys) -> None:
    """README walk-through: --jobs counts jobs in sweep, demo and the benches; oppcost --jobs 1000, typed for those,
    started a thousand worker processes."""
    from coordinator.oppcost.experiment import oppcost_main
    from vcemu.cliargs import max_workers

    out = tmp_path / "out"
    most = max_workers()
    code, _, err = run(["--executions", "1", "--jobs", str(most + 1), "--out", str(out)], capsys, oppcost_main)
    refused(code, err, f"vcemu oppcost: --jobs: must be a finite number >= 1 and <= {most} (worker processes, not "
                       f"jobs: 4 per core), got {most + 1}")
    assert not out.exists()


def test_the_agents_vcemu_starts_get_the_coordinators_token_in_their_environment(monkeypatch) -> None:
    """The token the coordinator read, not its file again (a pipe is read once; a file moved meanwhile stopped an
    agent started again), not in argv (every user sees it), and never one inherited from this process (review)."""
    from coordinator.servers import _agent_env
    from vcemu.cliargs import AGENT_TOKEN_ENV

    monkeypatch.setenv(AGENT_TOKEN_ENV, "inherited")
    assert _agent_env("t0ken")[AGENT_TOKEN_ENV] == "t0ken"
    assert AGENT_TOKEN_ENV not in _agent_env(None)


def test_a_standalone_agent_takes_a_token_file_to_guard_its_own_api(tmp_path: Path, monkeypatch, capsys) -> None:
    """Without --coordinator, --token-file guards the agent's own API (it was refused: the token was only sent to
    a coordinator, and the agent's API took anyone's calls); an unreadable file is refused, naming it."""
    import node_agent.cli

    code, _, err = run(["agent", "--hosts", "1", "--token-file", str(tmp_path / "none")], capsys)
    assert code == 2 and f"--token-file {tmp_path / 'none'}" in err, err
    seen: list[str | None] = []
    monkeypatch.setattr(node_agent.cli, "_run", lambda args, hosts: seen.append(args.token) or 0)
    (tmp_path / "token").write_text("s3cret\n")
    assert run(["agent", "--hosts", "1", "--token-file", str(tmp_path / "token")], capsys)[0] == 0
    assert seen == ["s3cret"]


def test_an_agent_does_not_hand_the_token_of_its_environment_on_to_its_processes(monkeypatch, capsys) -> None:
    """Security review: the token ``vcemu up`` gives an agent in its environment reached every task, spare and
    the fencer (each copies the agent's environment): the agent takes it out once read."""
    import os

    import node_agent.cli
    from vcemu.cliargs import AGENT_TOKEN_ENV

    monkeypatch.setenv(AGENT_TOKEN_ENV, "from-up")
    seen: list[tuple[str | None, str | None]] = []
    monkeypatch.setattr(node_agent.cli, "_run",
                        lambda args, hosts: seen.append((args.token, os.environ.get(AGENT_TOKEN_ENV))) or 0)
    assert run(["agent", "--hosts", "1"], capsys)[0] == 0
    assert seen == [("from-up", None)]


def test_a_full_disk_ends_a_command_in_one_line_naming_the_file(monkeypatch, capsys) -> None:
    """Exhaustion review: oppcost and apc on a full disk ended in raw tracebacks (three chained for a journal); a
    resumable command says it continues from what it finished, and an OSError of another kind is not hidden."""
    import errno

    from coordinator import cli

    def full(argv):  # type: ignore[no-untyped-def]
        raise OSError(errno.ENOSPC, "No space left on device", "/r/executions.csv")

    monkeypatch.setattr(cli, "_main", full)
    assert cli.main(["oppcost", "--out", "/r"]) == 1
    assert capsys.readouterr().err == ("vcemu oppcost: cannot write /r/executions.csv: no space left on the device; "
                                       "make room and run it again (it continues from what it finished)\n")
    assert cli.main(["simulate", "x.jsonl"]) == 1
    assert capsys.readouterr().err.endswith("no space left on the device; make room and run it again\n")

    def denied(argv):  # type: ignore[no-untyped-def]
        raise OSError(errno.EACCES, "Permission denied", "/r")

    monkeypatch.setattr(cli, "_main", denied)
    with pytest.raises(PermissionError):
        cli.main(["oppcost"])
