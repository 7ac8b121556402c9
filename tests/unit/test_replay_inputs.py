"""``vcemu replay``'s input: what it reads, drops and refuses before its cluster starts, and a live run whose engine
loop fails ends with an error instead of waiting out ``--timeout``. No agent process is started: the live run's
coordinator has one agent registered at an address that answers nothing."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from coordinator.model import Host, JobSpec
from coordinator.replay import _parse, _replay_live, load_segment, replay_main
from tests.unit.test_cli_errors import refused, run

JOB = {"submit_time": 0, "tasks": 1, "cpu_need": 1.0, "memory": 0.1, "work": 60}


def _trace(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_the_wide_jobs_counted_are_those_the_replay_passed_over(tmp_path: Path) -> None:
    """The count was of the wide jobs among the first --max-jobs of the trace, while the replay took the first
    --max-jobs that fit: 2 replayed, of 4 jobs with 2 wide ones before the last replayed, said "1 dropped"."""
    widths = [1, 9, 1, 9, 1]
    path = _trace(tmp_path / "t.jsonl", [{**JOB, "id": f"j{i}", "submit_time": i, "tasks": w}
                                         for i, w in enumerate(widths)])
    specs, dropped, source = load_segment(_parse([str(path), "--hosts", "4", "--max-jobs", "2", "--policy", "fcfs"]))
    assert [s.id for s in specs] == ["j0", "j2"]
    assert dropped == 1  # j1; j3 comes after the last job replayed
    specs, dropped, _ = load_segment(_parse([str(path), "--hosts", "4", "--max-jobs", "3", "--policy", "fcfs"]))
    assert [s.id for s in specs] == ["j0", "j2", "j4"] and dropped == 2
    assert source.sha256 and source.lines["j4"] == 5


@dataclass(frozen=True)
class ShortJobsOnly:
    """A policy whose refusal hook the engine would apply at each arrival (as FCFS and EASY refuse too wide jobs)."""

    name: str = "short-only"
    period: None = None

    def refuse(self, spec: JobSpec, hosts: tuple[Host, ...]) -> tuple[str, str] | None:
        return ("work_seconds", f"{spec.work} s is too long here") if spec.work > 100 else None


def test_replay_applies_the_policys_refusals_before_the_cluster_starts(tmp_path: Path, no_cluster: None,
                                                                        monkeypatch: pytest.MonkeyPatch,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    import coordinator.policies

    monkeypatch.setattr(coordinator.policies, "get_policy", lambda name: ShortJobsOnly())
    path = _trace(tmp_path / "t.jsonl", [{**JOB, "id": "a"}, {**JOB, "id": "b", "submit_time": 5, "work": 500}])
    code, _, err = run([str(path), "--policy", "greedy", "--out", str(tmp_path / "out")], capsys, replay_main)
    refused(code, err, f"vcemu replay: {path}:2: work: 1 of the 2 jobs to replay do not fit on the given 4 hosts; "
            "the first, job b: work: 500.0 s is too long here")
    assert not (tmp_path / "out").exists()


@pytest.fixture
def no_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    import coordinator.servers

    def started(*_a, **_k):
        raise AssertionError("the cluster was started")

    monkeypatch.setattr(coordinator.servers, "start_local_cluster", started)


@pytest.mark.timeout(60)
def test_an_exception_in_the_engine_loop_ends_the_replay(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The coordinator's engine loop logs an exception and goes on. A job refused at its arrival (here: a second job
    with the first's id, which the trace's checks now refuse before the run) was then lost, and the replay waited
    for it until --timeout (600 s by default): "replay hangs". It now stops at the first such error. (The replay
    now simulates the segment before the live run, and the simulation refuses that trace itself: here the live
    coordinator's policy fails instead, at the first arrival.)"""
    from coordinator.policies import get_policy
    from coordinator.service import CoordinatorServer
    from tests.unit.test_service import register
    from vcemu.v1 import coordinator_pb2_grpc as pb_grpc

    class Broken:  # greedy, but its decisions fail
        def __init__(self) -> None:
            self._inner = get_policy("greedy")

        def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
            return getattr(self._inner, name)

        def decide(self, snap, stim):  # type: ignore[no-untyped-def]
            raise ValueError("the policy broke")

    timeout = 25.0
    a = _parse(["t.jsonl", "--policy", "greedy", "--compress", "10", "--timeout", str(timeout), "--json",
                "--out", str(tmp_path)])
    specs = [JobSpec("a", 0.0, 1, 1.0, 0.1, 600.0), JobSpec("b", 1.0, 1, 1.0, 0.1, 600.0)]
    server = CoordinatorServer(Broken(), port=0, compression=a.compress).start()
    try:
        with grpc.insecure_channel(server.address) as channel:
            register(pb_grpc.CoordinatorStub(channel))
        t0 = time.monotonic()
        code = _replay_live(a, specs, 0, server, lambda: None, tmp_path, t0)
        took = time.monotonic() - t0
    finally:
        server.stop()
    err = capsys.readouterr().err
    assert code == 1
    assert took < timeout / 2, f"waited {took:.1f} s: until the timeout"
    assert "vcemu replay: the live run failed: engine step failed: ValueError: the policy broke" in err, err


def test_replay_says_what_the_swf_conversion_dropped_and_records_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """Dropped records went without a word, and config.json had neither the trace's hash nor its drops."""
    import coordinator.servers
    from coordinator.replay import _write
    from workloads.jobfile import load_jobs

    def no_cluster(*_a, **_k):
        raise SystemExit("no cluster in this test")

    monkeypatch.setattr(coordinator.servers, "start_local_cluster", no_cluster)
    trace = tmp_path / "t.swf"
    trace.write_text("1 0 0 100 2 -1 -1 2 100 -1 1 1 1 -1 -1 1 -1 -1\n2 -1 0 50 1 -1 -1 1 50 -1 1 1 1 -1 -1 1 -1 -1\n")
    code, _, err = run([str(trace), "--policy", "greedy", "--out", str(tmp_path / "out")], capsys, replay_main)
    assert code == 1 and f"vcemu replay: {trace}: dropped 1 of 2 records: no_submit_time=1\n" in err, err
    source = load_jobs(trace)
    d = _write(_parse([str(trace), "--out", str(tmp_path / "res")]), {"live": {}, "sim": {}}, None,
               source.provenance())
    config = json.loads((d / "config.json").read_text())
    assert config["trace"] == str(trace) and config["jobs_file_abspath"] == str(trace)
    assert config["jobs_file_sha256"] == source.sha256
    assert config["swf_conversion"]["dropped"]["no_submit_time"] == 1


@pytest.mark.parametrize(("argv", "why"), [
    (["--bind", "0.0.0.0"], "argument --bind: only with --ray (a local cluster listens on 127.0.0.1)"),
    (["--token-file", "t"], "argument --token-file: only with --ray (a local cluster listens on 127.0.0.1)"),
    (["--ray", "127.0.0.1:6379", "--hosts", "4", "--agents", "2"],
     "argument --agents: not with --ray (each emulated host is its own agent actor)"),
    (["--segment", "3-5"], "argument --segment: replay runs one week K (simulate --segment also takes weeks A-B), "
     "got '3-5'"),  # (review: argparse's "invalid int value")
    (["--segment", "-1"], "argument --segment: week indices start at 0, got '-1'"),
])
def test_replay_refuses_what_does_not_go_with_ray_or_without_it(argv: list[str], why: str, no_cluster: None,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """``replay --ray`` starts the agents as ``up --ray`` does, and refuses what ``up --ray`` refuses."""
    code, _, err = run(["replay", "t.jsonl", *argv], capsys)
    assert code == 2 and why in err, err


def test_replay_on_an_unreachable_ray_address_is_one_line_and_starts_nothing(tmp_path: Path, no_cluster: None,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    trace = tmp_path / "t.jsonl"
    trace.write_text(json.dumps({"id": "a", **JOB}) + "\n")
    t0 = time.monotonic()
    code, _, err = run(["replay", str(trace), "--ray", f"127.0.0.1:{port}", "--out", str(tmp_path / "out")], capsys)
    assert code == 2 and time.monotonic() - t0 < 10
    assert err.strip() == f"vcemu replay: --ray: no Ray cluster reachable at 127.0.0.1:{port} (Connection refused)"
    assert not (tmp_path / "out").exists()  # connected before the run's folder is made


def test_replay_on_ray_refused_a_setting_leaves_no_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """A --bind this machine cannot listen on is a bad setting (exit status 2, "nothing started"): it left the run's
    folder with an agents.log of one line (review)."""
    import coordinator.raycluster
    from coordinator.raycluster import RayNode

    class Ctx:
        node_ip, ray_version, auth_mode = "127.0.0.1", "fake", "disabled"

        def nodes(self) -> list[RayNode]:
            return [RayNode("f" * 56, "127.0.0.1", {"CPU": 2.0}, {})]

        def named_actors(self) -> set[str]:
            return set()

        def __enter__(self) -> Ctx:
            return self

        def __exit__(self, *_exc: object) -> None:
            pass

    monkeypatch.setattr(coordinator.raycluster, "connect", lambda address: Ctx())
    trace = tmp_path / "t.jsonl"
    trace.write_text(json.dumps({"id": "a", **JOB}) + "\n")
    code, _, err = run(["replay", str(trace), "--ray", "127.0.0.1:6379", "--bind", "10.255.255.1",
                        "--out", str(tmp_path / "out")], capsys)
    assert code == 2 and "vcemu replay: error: --bind" in err, err
    assert list((tmp_path / "out").iterdir()) == []


def test_replay_on_ray_gives_its_coordinator_the_token_of_token_file(tmp_path: Path, no_cluster: None,
                                                                    monkeypatch: pytest.MonkeyPatch,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """``replay --ray``'s coordinator listens on a Ray node's address: ``--token-file`` makes it require the token on
    the user API, as ``up --ray --token-file`` does (it took any client). A file that cannot be used is refused
    before Ray is connected to."""
    import contextlib

    import coordinator.backends.ray.cluster
    import coordinator.raycluster
    from coordinator.backends.ray.cluster import RayStartError

    connected: list[str] = []
    given: list[dict[str, object]] = []

    def connect(address: str, *_a: object, **_k: object) -> contextlib.AbstractContextManager[None]:
        connected.append(address)
        return contextlib.nullcontext()

    def start_on_ray(*_a: object, options: dict[str, object], **_k: object) -> None:
        given.append(options)
        raise RayStartError("error: stopped here by the test", 1)

    monkeypatch.setattr(coordinator.raycluster, "connect", connect)
    monkeypatch.setattr(coordinator.backends.ray.cluster, "start_on_ray", start_on_ray)
    trace = _trace(tmp_path / "t.jsonl", [{"id": "a", **JOB}])
    argv = ["replay", str(trace), "--ray", "127.0.0.1:6379", "--out", str(tmp_path / "out")]
    (tmp_path / "token").write_text("s3cret\n")
    code, _, err = run([*argv, "--token-file", str(tmp_path / "token")], capsys)
    assert code == 1 and "stopped here by the test" in err, err
    assert [o["token"] for o in given] == ["s3cret"] and connected == ["127.0.0.1:6379"]
    (tmp_path / "empty").write_text("")
    code, _, err = run([*argv, "--token-file", str(tmp_path / "empty")], capsys)
    assert (code, err) == (2, f"vcemu: --token-file {tmp_path / 'empty'}: the file is empty\n")
    assert len(connected) == 1
