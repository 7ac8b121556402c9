"""Bad input the input review found taken, or refused in a way that named nothing: each is now refused in one line
naming the field (or the flag, or the state file's job and column), and nothing accepted beside it is lost."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import grpc
import pytest

from coordinator.engine import JobRecord
from coordinator.model import Host, InvalidJob, JobSpec, JobState
from coordinator.policies import get_policy
from coordinator.service import CoordinatorServer, check_agent
from coordinator.store import Store, StoreError
from tests.unit.test_cli_errors import refused, run
from vcemu.limits import SHOWN, request_bounds, shown
from vcemu.v1 import agent_pb2
from vcemu.v1 import coordinator_pb2 as pb
from vcemu.v1 import coordinator_pb2_grpc as pb_grpc
from workloads.jobfile import read_jobs


@pytest.mark.parametrize(("field", "values"), [("memory", {"mem": 5e-324}), ("memory", {"mem": 1e-320}),
                                               ("cpu_need", {"cpu_need": 5e-324}), ("work_seconds", {"work": 5e-324})])
def test_a_vanishing_need_memory_or_work_is_refused_naming_it(field: str, values: dict) -> None:
    """At memory 5e-324 a host's memory over a task's is infinite: the capacity check raised OverflowError, which the
    API answered as UNKNOWN and `simulate` as a traceback; a work of 5e-324 s made an infinite stretch."""
    spec = JobSpec(**{"id": "j", "submit_time": 0.0, "tasks": 1, "cpu_need": 1.0, "mem": 0.1, "work": 10.0, **values})
    with pytest.raises(InvalidJob) as info:
        spec.validate((Host("h0"), Host("h1")))
    assert info.value.field == field


def test_the_capacity_check_takes_a_tiny_memory_on_many_hosts() -> None:
    JobSpec("j", 0.0, 10_000, 1.0, 1e-9, 10.0).validate(tuple(Host(f"h{i}", 1.0, 1e6) for i in range(100)))
    with pytest.raises(InvalidJob, match="holds at most 4"):
        JobSpec("j", 0.0, 5, 1.0, 0.5, 10.0).validate((Host("h0"), Host("h1")))


def test_a_bad_job_in_a_batch_refuses_itself_only_and_takes_no_id() -> None:
    server = CoordinatorServer(get_policy("fcfs"), port=0)
    try:
        desc = agent_pb2.DescribeReply(agent_id="a0", mode="cgroup-v1", hosts=[
            agent_pb2.HostInfo(name="a0-h0", cpu_cores=0.5, memory_bytes=1 << 30)])
        server.backend.add_agent("127.0.0.1:1", desc)
        server.engine.add_hosts([Host("a0-h0")])
        good = pb.JobSpec(tasks=1, cpu_need=0.5, memory=0.1, work_seconds=5, workload="modeled")
        bad = pb.JobSpec(tasks=1, cpu_need=0.5, memory=5e-324, work_seconds=5, workload="modeled")
        results = server.accept([pb.SubmitRequest(spec=s) for s in (good, bad, good)])
        assert [r.code for r in results] == [0, grpc.StatusCode.INVALID_ARGUMENT.value[0], 0]
        assert results[1].error.startswith("invalid job: memory: must be at least 1e-09")
        assert [results[0].job.job_id, results[2].job.job_id] == ["job-00001", "job-00002"]
    finally:
        server.stop()


def test_an_error_message_quotes_a_long_value_cut_short() -> None:
    """The whole value went into the message, which gRPC sends as metadata: beyond 8 or 16 KiB the client saw
    RESOURCE_EXHAUSTED "Stream removed" instead of NOT_FOUND naming the field."""
    assert shown("job-1") == "'job-1'"
    cut = shown("j" * 100_000)
    assert cut.endswith("... (100,000 characters)") and len(cut) < SHOWN + 40
    server = CoordinatorServer(get_policy("fcfs"), port=0).start()
    try:
        with grpc.insecure_channel(server.address) as channel:
            stub = pb_grpc.CoordinatorStub(channel)
            for call, request, code in (
                    (stub.GetJob, pb.JobRef(job_id="j" * 100_000), grpc.StatusCode.NOT_FOUND),
                    (stub.Cancel, pb.JobRef(job_id="j" * 100_000), grpc.StatusCode.NOT_FOUND),
                    (stub.ListJobs, pb.ListJobsRequest(state="s" * 50_000), grpc.StatusCode.INVALID_ARGUMENT),
                    (stub.ListJobs, pb.ListJobsRequest(page_token="1:" + "x" * 50_000),
                     grpc.StatusCode.INVALID_ARGUMENT),
                    (stub.ListJobs, pb.ListJobsRequest(page_token="9" * 5_000 + ":x"),
                     grpc.StatusCode.INVALID_ARGUMENT)):
                with pytest.raises(grpc.RpcError) as info:
                    call(request, timeout=10)
                assert info.value.code() == code, info.value.details()
                assert len(info.value.details()) < 300
    finally:
        server.stop()


def test_names_with_control_characters_are_refused() -> None:
    """A newline in a job's name split its row of `vcemu jobs` and of `submit --file`'s output."""
    assert request_bounds("", "a\nb", 1, 1.0) == r"spec.name: must be printable (no newline, tab or other control " \
        r"character), got 'a\nb'"
    assert request_bounds("r\x00", "", 1, 1.0).startswith("request_id: must be printable")
    assert request_bounds("", "dé☃ one", 1, 1.0) is None


def _agent(address: str = "127.0.0.1:5000", **host: object) -> pb.RegisterAgentRequest:
    hosts = host.pop("hosts", None) or [agent_pb2.HostInfo(**{"name": "h0", "cpu_cores": 1.0,
                                                              "memory_bytes": 1 << 30, **host})]
    return pb.RegisterAgentRequest(address=address, description=agent_pb2.DescribeReply(agent_id="a0", hosts=hosts))


@pytest.mark.parametrize(("request_", "why"), [
    (_agent("not an address"), "address: must be HOST:PORT"),
    (_agent("127.0.0.1:99999"), "address: must be HOST:PORT"),
    (_agent(cpu_cores=1e308), "cpu_cores must be in (0, 1e+06]"),
    (_agent(memory_bytes=1 << 62), "memory_bytes must be in (0, 2^60]"),
    (_agent(name="x/../y z\n"), "description.hosts.name: must be printable"),
    (_agent(name="h" * 300), "description.hosts.name: at most 256 characters"),
    (_agent(hosts=[agent_pb2.HostInfo(name="d", cpu_cores=1.0, memory_bytes=1)] * 2),
     "description.hosts: two hosts named 'd'"),
    (_agent(hosts=[agent_pb2.HostInfo(name=f"h{i}", cpu_cores=1.0, memory_bytes=1) for i in range(10_001)]),
     "description.hosts: at most 10,000 per agent"),
])
def test_an_agent_registration_is_checked(request_: pb.RegisterAgentRequest, why: str) -> None:
    """Registrations with 1e308 cores, two hosts of one name, 20,000 hosts, a name with a newline or an address
    with no port were taken, and jobs then failed on them."""
    got = check_agent(request_)
    assert got is not None and why in got, got


def test_a_good_agent_registration_passes() -> None:
    assert check_agent(_agent("[::1]:5000")) is None


def _stored(tmp_path: Path, edit: str, *args: object) -> str:
    path = str(tmp_path / "state.db")
    store = Store(path)
    spec = JobSpec("job-00001", 0.0, 2, 0.5, 0.1, 30.0, "modeled")
    rec = JobRecord(spec, JobState.RUNNING, ("h0", "h1"), 0.5, 3.0)
    store.put_job(rec.spec, rec.state, rec.hosts, rec.cpu, rec.vt, 0, 1.0, None, "")
    store.close()
    db = sqlite3.connect(path)
    db.execute(edit, args)
    db.commit()
    db.close()
    return path


@pytest.mark.parametrize(("edit", "args", "why"), [
    ("UPDATE jobs SET cpu='abc'", (), "cpu: must be a finite number"),
    ("UPDATE jobs SET spec=?", (json.dumps({"id": "job-00001", "submit_time": 0, "tasks": -3, "cpu_need": 0.5,
                                            "mem": 0.1, "work": 30, "workload": "modeled"}),), "spec.tasks"),
    ("UPDATE jobs SET spec=?", ('{"id": "job-00001", "submit_time": 0, "tasks": 2, "cpu_need": NaN, "mem": 0.1, '
                                '"work": 30, "workload": "modeled"}',), "spec.cpu_need"),
    ("UPDATE jobs SET spec=?", (json.dumps({"id": "job-00099", "submit_time": 0, "tasks": 2, "cpu_need": 0.5,
                                            "mem": 0.1, "work": 30, "workload": "modeled"}),), "spec.id"),
    ("UPDATE jobs SET vt=-5", (), "vt: must be a finite number >= 0"),
    ("UPDATE jobs SET hosts='[\"h0\"]'", (), "hosts: a running job has one per task (2), got 1"),
])
def test_a_state_file_row_edited_by_hand_is_refused_naming_the_job_and_column(tmp_path: Path, edit: str,
                                                                              args: tuple, why: str) -> None:
    """Such rows were loaded, and the engine loop then failed at every turn or `vcemu jobs` answered UNKNOWN."""
    path = _stored(tmp_path, edit, *args)
    store = Store(path)
    try:
        with pytest.raises(StoreError) as info:
            store.load()
    finally:
        store.close()
    assert "jobs row of 'job-00001'" in str(info.value) and why in str(info.value), str(info.value)


def test_a_state_file_without_its_jobs_table_is_refused(tmp_path: Path) -> None:
    """It was created anew, empty: the coordinator started with none of the run's jobs, and said nothing."""
    path = _stored(tmp_path, "DROP TABLE jobs")
    with pytest.raises(StoreError, match="damaged vcemu state file: it has no table jobs"):
        Store(path)
    assert Store(str(tmp_path / "new.db")).load().jobs == []  # a new file is still a new run


@pytest.mark.parametrize(("argv", "fragments"), [
    (["up", "--state", ""], ("--state", "empty")),
    (["coordinator", "--state", ""], ("--state", "empty")),
    (["up", "--heartbeat", "1e308"], ("--heartbeat", "at most 3600 s")),
    (["up", "--hosts", "2", "--agents", "3"], ("--agents: at most --hosts (2), got 3",)),
    (["up", "--hosts", "2", "--cpus-per-host", "0.5,4096"], ("--cpus-per-host: 4096 cores is more than this machine",)),
    (["submit", "--work", "1e12"], ("--work", "at most 1e+09", "the coordinator's bound")),
])
def test_start_up_and_submit_flags_are_refused_naming_the_flag(argv: list[str], fragments: tuple[str, ...],
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """`--state ""` ran with no state (every job lost at a restart, without a word); a heartbeat of 1e308 s killed
    the agent watch; three agents for two hosts started two; a work of 1e12 s and one of 5e9 s were refused under
    two different bounds."""
    refused(*run(argv, capsys)[::2], *fragments)


def test_an_empty_workload_in_a_json_job_file_is_the_default(tmp_path: Path) -> None:
    """As it is in a CSV file, for `submit --workload ''` and in the API; a JSON file's "" was refused."""
    path = tmp_path / "j.jsonl"
    path.write_text(json.dumps({"id": "a", "submit_time": 0, "tasks": 1, "cpu_need": 1, "memory": 0.1, "work": 5,
                                "workload": ""}) + "\n")
    assert read_jobs(path)[0].workload == "dgemm"


def test_a_job_file_id_of_any_allowed_length_gets_a_request_id_within_the_bound() -> None:
    """A job id of 240 to 256 characters (a name the coordinator takes) was refused as "request_id: at most 256
    characters": the request id is a hash and the id."""
    import dataclasses

    from coordinator.client import _job_request_id, submit_refusal

    spec = JobSpec("j" * 256, 0.0, 1, 0.5, 0.1, 5.0)
    rid = _job_request_id(spec)
    assert len(rid) == 256 and submit_refusal(dataclasses.replace(spec, name=spec.id), rid) is None
    assert _job_request_id(dataclasses.replace(spec, work=6.0)) != rid  # (the hash covers the job's values)
    assert _job_request_id(JobSpec("j1", 0.0, 1, 0.5, 0.1, 5.0)).endswith(":j1")  # short ids: as before


# ---- the diff review of the job board and of the checks above --------------------------------------------------


@pytest.mark.parametrize("policy", ["dynmcb8", "greedy-pmtn-migr"])
def test_the_board_holds_every_other_jobs_change_at_each_transition_and_this_one_after_its_listeners(
        policy: str) -> None:
    """A Move reached the board only with the plan's "migrate" record, after every other action of the plan: a
    scrape mid-plan saw a host at 200 % (diff review). And a transition reached it before its listeners, the
    store's commit among them: a reader could see a change that a crash would take back. At each transition, every
    other job's row is its record, and this job's row is still its state before the transition."""
    from coordinator.backends.sim import SimBackend
    from coordinator.engine import Engine
    from coordinator.jobboard import JobBoard, JobRow

    engine = Engine(get_policy(policy), SimBackend())
    engine.add_hosts([Host(f"h{i}", 1.0, 1.0) for i in range(3)])
    board = JobBoard.of(engine)
    seen = 0

    def check(t) -> None:  # type: ignore[no-untyped-def]
        nonlocal seen
        for job, rec in engine.jobs.items():
            row = board.get(job)
            if job == t.job:
                assert t.src is None and row is None or row is not None and row.state is t.src, (t, row)
            else:
                want = JobRow.of(rec)
                assert (row.state, row.hosts, row.cpu) == (want.state, want.hosts, want.cpu), (t, job)
        seen += 1

    engine.listeners.append(check)
    engine.run([JobSpec("a", 0.0, 2, 1.0, 0.3, 60.0), JobSpec("b", 1.0, 1, 1.0, 0.6, 40.0),
                JobSpec("c", 2.0, 3, 0.5, 0.5, 30.0), JobSpec("d", 3.0, 1, 1.0, 0.8, 5.0),
                JobSpec("e", 4.0, 2, 1.0, 0.2, 90.0)])
    moved = {"dynmcb8": "migrate", "greedy-pmtn-migr": "move"}[policy]  # (Moves; a pause and a resume elsewhere)
    assert seen > 20 and any(t.reason == moved for t in engine.history.transitions)


def test_host_status_and_progress_are_read_without_the_backends_lock() -> None:
    """The engine loop holds the live backend's lock across a whole poll (Status calls of up to 1 s per silent
    agent) and a plan's moves: ClusterStatus and the scrape waited 2 s behind a lock held 2 s (diff review)."""
    from coordinator.backends.live import LiveBackend
    from tests.unit.test_jobboard import call_within, held_elsewhere

    backend = LiveBackend()
    with held_elsewhere(backend._lock):
        assert call_within(2, backend.host_status) == {}
        assert call_within(2, backend.progress_seen) == {}


def test_a_finished_job_an_older_vcemu_took_does_not_block_a_restart(tmp_path: Path) -> None:
    """A done job of memory 1e-10 (taken before the floors) made the restarted coordinator refuse the whole state
    file, as "a row no vcemu wrote"; the checks apply to jobs that are still to run."""
    path = str(tmp_path / "state.db")
    store = Store(path)
    old = JobSpec("job-00001", 0.0, 1, 0.5, 1e-10, 30.0, "modeled")
    store.put_job(old, JobState.DONE, ("h0",), 0.0, 30.0, 0, 1.0, 31.0, "completed")
    store.close()
    store = Store(path)
    try:
        assert [j.spec.mem for j in store.load().jobs] == [1e-10]
    finally:
        store.close()
    db = sqlite3.connect(path)
    db.execute("UPDATE jobs SET state='pending'")
    db.commit()
    db.close()
    store = Store(path)
    try:
        with pytest.raises(StoreError, match=r"jobs row of 'job-00001' \(pending\): spec.memory: must be at least "
                                             r".* an older vcemu may have "):
            store.load()
    finally:
        store.close()


@pytest.mark.parametrize(("argv", "fragments"), [
    (["agent", "--host-prefix", "rack 1", "--coordinator", "127.0.0.1:1"],
     ("--host-prefix: must be printable, with no space",)),
    (["agent", "--hosts", "20000", "--coordinator", "127.0.0.1:1"], ("--hosts: at most 10,000 per agent",)),
    (["sweep", "--job-scale", "1e7"], ("--job-scale", "at most 1000")),
    (["agent", "--no-cgroups", "--coordinator", "nowhere"], ("--coordinator: give HOST:PORT", "'nowhere'")),
    (["agent", "--no-cgroups", "--coordinator", "127.0.0.1:70000"], ("--coordinator: give HOST:PORT",)),
    (["agent", "--no-cgroups", "--coordinator", "127.0.0.1:1", "--advertise", "10.0.0.1"],
     ("--advertise: must be HOST:PORT", "'10.0.0.1'")),
    (["agent", "--no-cgroups", "--advertise", "10.0.0.1:5000"], ("--advertise: only with --coordinator",)),
    (["agent", "--no-cgroups", "--mem-per-host", "1"], ("--mem-per-host: less than 1MiB",)),
    (["agent", "--no-cgroups", "--hosts", "2", "--mem-per-host", "1GiB,100TiB"],
     ("--mem-per-host: 102,400.0 GiB is more than this machine's memory",)),
    (["up", "--mem-per-host", "100TiB"], ("--mem-per-host: 102,400.0 GiB is more than this machine's memory",)),
    (["up", "--ray", "127.0.0.1:1", "--mem-per-host", "1KiB"], ("--mem-per-host: less than 1MiB (1,024 B)",)),
    (["replay", "trace.swf", "--mem-per-host", "100TiB"], ("--mem-per-host: 102,400.0 GiB is more than",)),
    (["replay", "trace.swf", "--ray", "127.0.0.1:1", "--mem-per-host", "1KiB"],
     ("--mem-per-host: less than 1MiB (1,024 B)",)),
])
def test_agent_and_sweep_flags_the_coordinator_or_the_model_would_refuse_later(
        argv: list[str], fragments: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    """An agent whose host names the coordinator refuses retried its registration for ever, saying only
    INVALID_ARGUMENT, and so did one given a coordinator with no port or an address to advertise the coordinator
    refuses; hosts of 1 byte or 100 TiB were taken (input review, low); a job scale of 1e7 made works of 6e-7 s
    that the engine refused mid-sweep (diff review)."""
    refused(*run(argv, capsys)[::2], *fragments)


def test_a_client_at_a_grpc_port_that_is_not_the_coordinators_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    """`vcemu jobs` at an agent's port said "UNIMPLEMENTED: Method not found!" and nothing more (input review)."""
    from concurrent import futures

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))  # a gRPC server of no coordinator service
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        refused(*run(["jobs", "--coordinator", f"127.0.0.1:{port}"], capsys)[::2], "UNIMPLEMENTED",
                "serves gRPC but not the coordinator's API: is it an agent's port?")
    finally:
        server.stop(0)


@pytest.mark.parametrize("argv", [["submit", "--cpu-need", "-inf"], ["agent", "--metrics-port", "-x"],
                                  ["sweep", "--seed", "-x"], ["bench", "load", "--jobs", "-x"]])
def test_a_value_that_reads_as_a_flag_gets_the_equals_form_as_a_hint(argv: list[str],
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """argparse said only "expected one argument" for `--cpu-need -inf` (input review, low), in the commands with
    a parser of their own too (diff review)."""
    flag = argv[-2]
    code, _, err = run(argv, capsys)
    refused(code, err, f"argument {flag}: expected one argument",
            f"(missing, or a value that starts with '-': give it as {flag}=VALUE)")
    assert len(err.strip().splitlines()) == 1, err  # (sweep's and bench's parsers printed their usage block first)


@pytest.mark.parametrize("argv", [["sweep", "--seed", "x"], ["bench", "load", "--jobs", "x"],
                                  ["bench", "dfrs", "--seed", "x"], ["bench", "packing", "--bogus"],
                                  ["bench", "boot", "--starts", "x"],  # (plain argparse: its usage block; review)
                                  ["vcsched", "--instances", "x"], ["oppcost", "--executions", "1.5"],
                                  ["apc", "--seed", "x"]])
def test_the_experiment_and_benchmark_commands_refuse_a_bad_flag_in_one_line(argv: list[str],
                                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """User review: these printed argparse's usage block (11 lines for oppcost) before the refusal, the other
    commands one line."""
    code, _, err = run(argv, capsys)
    assert code == 2 and "usage:" not in err and len(err.strip().splitlines()) == 1, err
    assert f"(see vcemu {' '.join(argv[:2]) if argv[0] == 'bench' else argv[0]} --help)" in err, err


@pytest.mark.parametrize("bench", ["load", "scale", "starts"])
def test_a_bench_whose_out_cannot_hold_its_result_is_refused_before_it_runs(
        bench: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Review: ``--out ''`` wrote the result into the current folder, and a file's path ran the whole bench, then lost
    its result in a FileExistsError's traceback."""
    monkeypatch.chdir(tmp_path)
    code, _, err = run(["bench", bench, "--out", ""], capsys)
    refused(code, err, "--out: must be a folder's path, got an empty one")
    (tmp_path / "afile").write_text("")
    code, _, err = run(["bench", bench, "--out", str(tmp_path / "afile")], capsys)
    refused(code, err, f"--out {tmp_path / 'afile'}: cannot write results there: it is a file, not a directory")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


@pytest.mark.parametrize(("argv", "command"), [(["jobs", "--jsn"], "jobs"), (["status", "extra"], "status"),
                                               (["simulate", "j.jsonl", "--policy", "fcfs", "x"], "simulate")])
def test_an_argument_no_command_takes_is_refused_by_the_command_it_was_given_to(
        argv: list[str], command: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Operator review: ``vcemu jobs --jsn`` said "vcemu: error: unrecognized arguments: --jsn (see vcemu --help)",
    where every other refusal of a command names it."""
    code, _, err = run(argv, capsys)
    refused(code, err, f"vcemu {command}: error: unrecognized arguments: {argv[-1]} (see vcemu {command} --help)")


@pytest.mark.parametrize("argv", [["--x", "jobs"], ["--x", "status", "--json"], ["--x", "--y", "jobs"]])
def test_an_argument_given_before_the_command_is_refused_by_vcemu(argv: list[str],
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """``vcemu --x jobs`` blamed ``--x`` on ``jobs`` (left alone in session 36); only those before the command are
    named (``--json`` was given to ``status``)."""
    code, _, err = run(argv, capsys)
    before = " ".join(argv[:next(i for i, a in enumerate(argv) if not a.startswith("--"))])
    refused(code, err, f"vcemu: error: unrecognized arguments: {before} (see vcemu --help)")
    assert "--json" not in err, err


def test_every_command_with_a_parser_of_its_own_resolves_to_a_function() -> None:
    """The dispatch tables name modules and functions by string: a typo would show only when that command ran."""
    import importlib

    from coordinator.cli import BENCH_PARSERS, OWN_PARSERS, build_parser

    for module, function in [*OWN_PARSERS.values(), *BENCH_PARSERS.values()]:
        assert callable(getattr(importlib.import_module(module), function)), (module, function)
    bench = build_parser().parse_args(["bench", "load"])  # the bench command's choices are the table's
    assert bench.name == "load"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["bench", "nosuch"])


@pytest.mark.parametrize(("argv", "flag"), [(["load", "--batch", "0"], "--batch"),
                                             (["scale", "--hosts", "1", "--agents", "2"], "--agents"),
                                             (["starts", "--cpu-need", "2"], "--cpu-need")])
def test_a_bench_refused_for_another_flag_makes_no_out_folder(argv: list[str], flag: str, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """Review: --out was made before these flags were checked, and a refused command left an empty folder."""
    code, _, err = run(["bench", *argv, "--out", str(tmp_path / "out")], capsys)
    refused(code, err, flag)
    assert not (tmp_path / "out").exists()
