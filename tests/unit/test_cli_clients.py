"""The client commands (``vcemu submit/jobs/status/cancel``) against real gRPC servers on 127.0.0.1.

A coordinator started with ``--tls-*`` requires a client certificate on every call: the clients take
``--tls-cert/--tls-key/--tls-ca`` (defaults ``$VCEMU_TLS_*``), refuse a partial set naming the flag or variable,
and without TLS say that the coordinator may require it. Their channel takes replies as large as the
coordinator sends (``vcemu jobs`` on a long run outgrows gRPC's default 4 MiB). Certificates are made here.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest

from coordinator.policies import get_policy
from coordinator.service import CoordinatorServer
from tests.certs import make_certs
from tests.unit.test_cli_errors import run
from vcemu.limits import MAX_REPLY_BYTES
from vcemu.tls import TlsFiles
from vcemu.v1 import agent_pb2
from vcemu.v1 import coordinator_pb2 as pb
from vcemu.v1 import coordinator_pb2_grpc as pb_grpc

TOKEN = "s3cret-token"
TLS_ENV = ("VCEMU_TLS_CERT", "VCEMU_TLS_KEY", "VCEMU_TLS_CA")


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return make_certs(tmp_path_factory.mktemp("tls"), "cluster")


@pytest.fixture(scope="module")
def tls_server(certs: TlsFiles) -> Iterator[CoordinatorServer]:
    """A coordinator as the README starts it: ``--token-file`` and ``--tls-*``, with one described agent (its
    address answers nothing: the jobs are accepted and placed, which is all a client sees)."""
    server = CoordinatorServer(get_policy("greedy"), port=0, tls=certs, token=TOKEN).start()
    desc = agent_pb2.DescribeReply(agent_id="a0", mode="cgroup-v1", hosts=[
        agent_pb2.HostInfo(name=f"a0-h{i}", cpu_cores=0.5, memory_bytes=1 << 30) for i in range(2)])
    with certs.client_channel(server.address) as ch:
        pb_grpc.CoordinatorStub(ch).RegisterAgent(
            pb.RegisterAgentRequest(address="127.0.0.1:1", description=desc), timeout=5)
    yield server
    server.stop()


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    """The cluster's token in $VCEMU_TOKEN_FILE, and no TLS files from the environment this test runs in."""
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    monkeypatch.setenv("VCEMU_TOKEN_FILE", str(token))
    for name in TLS_ENV:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def tls_flags(tls: TlsFiles) -> list[str]:
    return ["--tls-cert", tls.cert, "--tls-key", tls.key, "--tls-ca", tls.ca]


def one_line(err: str) -> str:
    assert "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1, err
    return err.strip()


def test_every_client_command_reaches_a_tls_coordinator_with_the_clusters_certificate(
        tls_server: CoordinatorServer, certs: TlsFiles, env: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    at = ["--coordinator", tls_server.address, *tls_flags(certs)]
    code, out, err = run(["submit", *at, "--work", "5", "--workload", "modeled", "--cpu-need", "0.5"], capsys)
    assert code == 0, err
    job = out.strip()
    assert job.startswith("job-")
    code, out, err = run(["jobs", *at], capsys)
    assert code == 0 and job in out, err
    code, out, err = run(["status", *at], capsys)
    assert code == 0 and "a0-h0" in out, err
    code, out, err = run(["cancel", *at, job], capsys)
    assert code == 0 and out.strip() == f"{job} cancelled", (out, err)


def test_tls_files_default_from_the_environment_and_a_flag_wins_over_its_variable(
        tls_server: CoordinatorServer, certs: TlsFiles, env: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    for name, path in zip(TLS_ENV, (certs.cert, certs.key, certs.ca), strict=True):
        env.setenv(name, path)
    code, out, err = run(["jobs", "--coordinator", tls_server.address], capsys)
    assert code == 0, err
    env.setenv("VCEMU_TLS_CA", "/nonexistent/ca.pem")  # overridden by the flag: never read
    code, out, err = run(["status", "--coordinator", tls_server.address, "--tls-ca", certs.ca], capsys)
    assert code == 0 and "a0-h0" in out, err


@pytest.mark.parametrize("command", [["jobs"], ["status"], ["submit"], ["cancel", "job-00001"]])
@pytest.mark.parametrize(("flags", "variables", "message"), [
    (["--tls-cert"], {}, "--tls-cert given without --tls-key (or $VCEMU_TLS_KEY) and --tls-ca (or $VCEMU_TLS_CA)"),
    (["--tls-cert", "--tls-key"], {}, "--tls-cert and --tls-key given without --tls-ca (or $VCEMU_TLS_CA)"),
    ([], {"VCEMU_TLS_KEY": "--tls-key"},
     "$VCEMU_TLS_KEY given without --tls-cert (or $VCEMU_TLS_CERT) and --tls-ca (or $VCEMU_TLS_CA)"),
    (["--tls-ca"], {"VCEMU_TLS_CERT": "--tls-cert"}, "$VCEMU_TLS_CERT and --tls-ca given without --tls-key (or "
     "$VCEMU_TLS_KEY)"),
])
def test_a_partial_tls_set_is_refused_naming_the_flag(
        command: list[str], flags: list[str], variables: dict[str, str], message: str, certs: TlsFiles,
        env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Refused before any connection (nothing listens at the address): a handshake without a key could only
    end in an UNAVAILABLE that does not say why."""
    paths = {"--tls-cert": certs.cert, "--tls-key": certs.key, "--tls-ca": certs.ca}
    for name, flag in variables.items():
        env.setenv(name, paths[flag])
    argv = [*command, "--coordinator", "127.0.0.1:1", *(x for f in flags for x in (f, paths[f]))]
    code, out, err = run(argv, capsys)
    assert code == 2 and out == ""
    assert one_line(err) == (f"vcemu {command[0]}: {message}: mutual TLS needs all three (or none, for a "
                             "coordinator without TLS)")


def test_an_unreadable_tls_file_is_refused_naming_where_it_came_from(
        certs: TlsFiles, env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["jobs", "--coordinator", "127.0.0.1:1", "--tls-cert", certs.cert, "--tls-key", certs.key,
                        "--tls-ca", "/nonexistent/ca.pem"], capsys)
    assert code == 2 and one_line(err) == "vcemu jobs: --tls-ca /nonexistent/ca.pem: No such file or directory"
    env.setenv("VCEMU_TLS_KEY", "/nonexistent/key.pem")
    code, _, err = run(["jobs", "--coordinator", "127.0.0.1:1", "--tls-cert", certs.cert, "--tls-ca", certs.ca],
                       capsys)
    assert code == 2 and one_line(err) == "vcemu jobs: $VCEMU_TLS_KEY /nonexistent/key.pem: No such file or directory"


def test_without_tls_the_error_says_the_coordinator_may_require_it(
        tls_server: CoordinatorServer, env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["jobs", "--coordinator", tls_server.address], capsys)
    assert code == 2 and out == ""
    line = one_line(err)
    assert line.startswith("vcemu jobs: UNAVAILABLE: "), line
    assert (f"if the coordinator at {tls_server.address} was started with --tls-cert/--tls-key/--tls-ca, it "
            "requires TLS: give the client the cluster's --tls-cert, --tls-key and --tls-ca (or $VCEMU_TLS_CERT, "
            "$VCEMU_TLS_KEY, $VCEMU_TLS_CA)") in line, line


def test_no_tls_hint_when_the_coordinator_itself_answers_unavailable(
        env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A coordinator without hosts refuses a submission with UNAVAILABLE: it was reached, TLS is not the matter."""
    env.delenv("VCEMU_TOKEN_FILE")
    server = CoordinatorServer(get_policy("greedy"), port=0).start()
    try:
        code, _, err = run(["submit", "--coordinator", server.address], capsys)
    finally:
        server.stop()
    assert code == 2
    assert one_line(err) == "vcemu submit: UNAVAILABLE: no hosts registered yet: start agents first"


# ---- replies larger than gRPC's default 4 MiB ---------------------------------------------------------------


def test_the_clients_reply_limit_is_the_coordinators_send_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """The clients' MAX_REPLY_BYTES (vcemu.limits, so that they need not import coordinator.service): the
    coordinator's actual gRPC server options must say the same."""
    import coordinator.service

    seen: list[dict[str, object]] = []
    real = grpc.server

    def server(*args: object, **kwargs: object) -> grpc.Server:
        seen.append(dict(kwargs.get("options") or []))  # type: ignore[arg-type]
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(coordinator.service.grpc, "server", server)
    CoordinatorServer(get_policy("greedy"), port=0)  # built, not started
    assert seen and seen[0]["grpc.max_send_message_length"] == MAX_REPLY_BYTES


class BigListJobs(pb_grpc.CoordinatorServicer):
    """A coordinator's ListJobs as it answers after a long run: one reply of tens of thousands of jobs (as a
    coordinator from before paging answers: every job, no next page)."""

    def __init__(self, reply: pb.ListJobsReply) -> None:
        self.reply = reply

    def ListJobs(self, request: pb.ListJobsRequest, context: grpc.ServicerContext) -> pb.ListJobsReply:  # noqa: N802
        return self.reply


def test_jobs_lists_a_reply_larger_than_grpcs_default_4_mib(
        env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """40,000 finished jobs (about 5 MiB): gRPC's default receive limit (4 MiB) refused them with
    RESOURCE_EXHAUSTED for good. The server here sends as the coordinator may (up to MAX_REPLY_BYTES, checked
    against the coordinator's options above), without 40,000 real jobs behind it."""
    env.delenv("VCEMU_TOKEN_FILE")
    n = 40_000
    spec = pb.JobSpec(tasks=1, cpu_need=0.5, memory=0.1, work_seconds=60, workload="dgemm")
    reply = pb.ListJobsReply(jobs=[pb.Job(job_id=f"job-{i:05d}", state="done", spec=spec, submit_time=i + 0.5,
                                          start_time=i + 1.5, end_time=i + 61.5, virtual_time=60.0, stretch=1.5,
                                          message="completed") for i in range(1, n + 1)])
    assert reply.ByteSize() > 4 << 20
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2),
                         options=[("grpc.max_send_message_length", MAX_REPLY_BYTES)])
    pb_grpc.add_CoordinatorServicer_to_server(BigListJobs(reply), server)
    address = f"127.0.0.1:{server.add_insecure_port('127.0.0.1:0')}"
    server.start()
    try:
        t = time.monotonic()
        code, out, err = run(["jobs", "--coordinator", address], capsys)
        assert code == 0, err
        lines = out.splitlines()
        assert len(lines) == n + 1 and lines[-1].startswith(f"job-{n:05d}  done"), lines[-1]
        assert time.monotonic() - t < 10
    finally:
        server.stop(None)


def test_jobs_pages_through_a_long_list_and_submit_says_a_request_id_was_seen_before(
        env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """``vcemu jobs`` asks for pages (so that no reply nears the message limit however long the run) and lists
    every job once, in submission order; ``vcemu submit --request-id`` run twice prints the same job and says
    the second time that nothing new was submitted (Submit's trailing metadata)."""
    import coordinator.client
    import coordinator.service

    env.delenv("VCEMU_TOKEN_FILE")
    env.setattr(coordinator.client, "JOBS_PAGE", 10)
    asked: list[tuple[int, str]] = []
    real = coordinator.service.CoordinatorServicer.ListJobs

    def spy(self, request, context):  # type: ignore[no-untyped-def]
        asked.append((request.page_size, request.page_token))
        return real(self, request, context)

    env.setattr(coordinator.service.CoordinatorServicer, "ListJobs", spy)
    server = CoordinatorServer(get_policy("greedy"), port=0).start()
    try:
        desc = agent_pb2.DescribeReply(agent_id="a0", mode="cgroup-v1", hosts=[
            agent_pb2.HostInfo(name="a0-h0", cpu_cores=0.5, memory_bytes=1 << 30)])
        with grpc.insecure_channel(server.address) as ch:
            pb_grpc.CoordinatorStub(ch).RegisterAgent(
                pb.RegisterAgentRequest(address="127.0.0.1:1", description=desc), timeout=5)
        flags = ["--coordinator", server.address, "--tasks", "1", "--cpu-need", "0.1", "--memory", "0.01"]
        ids = []
        for i in range(25):
            code, out, err = run(["submit", *flags, "--request-id", f"r{i}"], capsys)
            assert code == 0 and not err, err
            ids.append(out.strip())
        code, out, err = run(["submit", *flags, "--request-id", "r3"], capsys)
        assert code == 0 and out.strip() == ids[3]
        assert one_line(err) == (f"vcemu submit: request id 'r3' was seen before: {ids[3]} is the job it made then "
                                 "(nothing new was submitted)")
        # The same request id with another spec is refused, naming the differences (torture review: they were not
        # said; API review: it answered with the first job, which a sweep reusing ids took for the new one).
        code, out, err = run(["submit", *flags[:-1], "0.02", "--tasks", "2", "--request-id", "r3"], capsys)
        assert code == 2 and out == ""
        assert one_line(err) == (f"vcemu submit: ALREADY_EXISTS: request_id: 'r3' already made {ids[3]} from another "
                                 "spec (tasks 1 (not 2), memory 0.01 (not 0.02)): give another request id, or the same "
                                 "spec to get that job")
        code, out, err = run(["jobs", "--coordinator", server.address], capsys)
        assert code == 0, err
        assert [line.split()[0] for line in out.splitlines()[1:]] == ids
        assert [size for size, _ in asked] == [10, 10, 10] and asked[0][1] == "" and all(t for _, t in asked[1:])
    finally:
        server.stop()


def test_no_coordinator_listening_is_said_as_such_not_taken_for_tls(capsys: pytest.CaptureFixture[str]) -> None:
    """A refused connection means nothing listens there: the error says so, and does not suggest TLS."""
    import socket

    with socket.socket() as sock:  # a port that was free a moment ago, and that nothing listens on now
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    code, _, err = run(["jobs", "--coordinator", f"127.0.0.1:{port}"], capsys)
    assert code == 2
    assert f"nothing listens at 127.0.0.1:{port}: is the coordinator running" in err, err
    assert "TLS" not in err, err


@pytest.mark.parametrize("with_tls", [False, True])
@pytest.mark.parametrize("where", ["name", "dns-name", "socket"])
def test_no_tls_hint_when_no_connection_could_be_made(where: str, with_tls: bool, certs: TlsFiles,
                                                       env: pytest.MonkeyPatch, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """A name that does not resolve (``.invalid`` never does), or a socket file that is not there: no
    connection was made, so no handshake failed, and a hint that the coordinator may require TLS (or that its
    certificate may be wrong) would send the user the wrong way. The error says what stopped the connection."""
    address = {"name": "vcemu-no-such-host.invalid:50051", "dns-name": "dns:vcemu-no-such-host.invalid:50051",
               "socket": f"unix:{tmp_path}/no-such.sock"}[where]
    code, out, err = run(["jobs", "--coordinator", address, *(tls_flags(certs) if with_tls else [])], capsys)
    assert code == 2 and out == ""
    line = one_line(err)
    assert "TLS" not in line and "--tls" not in line, line
    assert f"cannot connect to {address} (" in line, line
    assert line.endswith("--coordinator or $VCEMU_COORDINATOR names the coordinator's address"), line


def test_with_tls_a_failed_handshake_says_what_to_check(certs: TlsFiles, env: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """The connection is made and the handshake fails (a coordinator without TLS): there the TLS hint applies."""
    env.delenv("VCEMU_TOKEN_FILE")
    server = CoordinatorServer(get_policy("greedy"), port=0).start()
    try:
        code, _, err = run(["jobs", "--coordinator", server.address, *tls_flags(certs)], capsys)
    finally:
        server.stop()
    assert code == 2
    assert (f"with TLS: check that the coordinator at {server.address} was started with --tls-* and that its "
            f"certificate is signed by {certs.ca} and names 127.0.0.1") in one_line(err), err


def test_jobs_json_has_both_stretches_and_every_field(env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
                                                      ) -> None:
    """Live review: ``jobs --json`` had one ``stretch``, the bounded one, where the table's STRETCH is the plain one,
    and left out zero fields (a running job at virtual time 0 had no ``virtualTime``). Now ``stretch`` (flow / work)
    and ``boundedStretch`` (30-s bound), as the table's STRETCH and B.STRETCH, and every field."""
    import json

    from coordinator.engine import JobRecord
    from coordinator.model import JobSpec, JobState
    from coordinator.service import job_message

    env.delenv("VCEMU_TOKEN_FILE")
    spec = JobSpec(id="job-1", submit_time=10.0, tasks=1, cpu_need=0.5, mem=0.1, work=20.0)
    done = job_message(JobRecord(spec, JobState.DONE, ("h0",), 0.0, 20.0, 0, 12.0, 50.0, "completed"))
    assert (done.stretch, done.bounded_stretch) == (2.0, 40 / 30)
    running = job_message(JobRecord(JobSpec(id="job-2", submit_time=11.0, tasks=1, cpu_need=0.5, mem=0.1, work=20.0),
                                    JobState.RUNNING, ("h0",), 0.5, 0.0, 0, 11.0))
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    pb_grpc.add_CoordinatorServicer_to_server(BigListJobs(pb.ListJobsReply(jobs=[done, running])), server)
    address = f"127.0.0.1:{server.add_insecure_port('127.0.0.1:0')}"
    server.start()
    try:
        code, out, err = run(["jobs", "--coordinator", address, "--json"], capsys)
        assert code == 0, err
        got = json.loads(out)
        assert (got[0]["stretch"], got[0]["boundedStretch"]) == (2.0, 40 / 30)
        assert got[1]["virtualTime"] == 0.0 and got[1]["stretch"] == 0.0 and got[1]["endTime"] == -1.0
        code, out, err = run(["jobs", "--coordinator", address], capsys)
        row = out.splitlines()[1].split()
        assert row[-2:] == ["2.00", "1.33"]  # STRETCH, B.STRETCH
    finally:
        server.stop(0)


def test_a_batch_cut_off_during_its_call_says_what_may_have_been_taken_and_that_again_is_safe(
        tmp_path: Path, env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Torture review: a coordinator killed during a SubmitBatch that it had committed was reported as "cannot
    connect to ... --coordinator names the coordinator's address", with nothing on what may have been taken or on
    rerunning the file. A coordinator that stops during the call (here: gRPC's stop, which cancels it)."""
    import threading

    env.delenv("VCEMU_TOKEN_FILE")
    arrived = threading.Event()

    class Stopping(pb_grpc.CoordinatorServicer):
        def SubmitBatch(self, request, context):  # type: ignore[no-untyped-def]
            arrived.set()
            time.sleep(5)
            return pb.SubmitBatchReply()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    pb_grpc.add_CoordinatorServicer_to_server(Stopping(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    stopper = threading.Thread(target=lambda: (arrived.wait(10), server.stop(0)))
    stopper.start()
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text("".join(f'{{"id": "j{k}", "submit_time": 0, "tasks": 1, "cpu_need": 0.1, "memory": 0.01, '
                            f'"work": 5}}\n' for k in range(3)))
    try:
        code, out, err = run(["submit", "--coordinator", f"127.0.0.1:{port}", "--file", str(jobs)], capsys)
    finally:
        stopper.join()
    assert code == 2 and out == "", out
    lines = err.strip().splitlines()
    assert lines[0].startswith("vcemu submit: UNAVAILABLE: "), err
    assert lines[1:] == [
        "vcemu submit: the coordinator may have taken jobs j0 to j2 (lines 1 to 3) before the call failed; 0 jobs "
        "before them were accepted. The same command again submits only the jobs the coordinator does not have "
        "(each job's request id)",
        f"vcemu submit: the connection to 127.0.0.1:{port} closed during the call: did the coordinator stop?"], err


def test_a_client_without_the_token_is_told_to_set_the_token_file(
        tls_server: CoordinatorServer, certs: TlsFiles, env: pytest.MonkeyPatch, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Docs review: "UNAUTHENTICATED: authorization: missing or wrong bearer token" said nothing of
    $VCEMU_TOKEN_FILE, where a missing TLS setup gets a hint."""
    argv = ["jobs", "--coordinator", tls_server.address, *tls_flags(certs)]
    env.delenv("VCEMU_TOKEN_FILE")
    code, _, err = run(argv, capsys)
    assert code == 2 and one_line(err) == (
        "vcemu jobs: UNAUTHENTICATED: authorization: missing or wrong bearer token; this coordinator takes calls with "
        "its token only: set $VCEMU_TOKEN_FILE to the file it was given as --token-file")
    wrong = tmp_path / "wrong"
    wrong.write_text("not-the-token\n")
    env.setenv("VCEMU_TOKEN_FILE", str(wrong))
    code, _, err = run(argv, capsys)
    assert code == 2 and one_line(err).endswith(
        f"; $VCEMU_TOKEN_FILE ({wrong}) does not hold the token this coordinator was given as --token-file"), err


def test_cancel_retries_while_the_coordinator_is_busy_and_only_then(monkeypatch):
    """Too many cancels waiting for the engine's turn are refused UNAVAILABLE "... retry in a moment" (concurrency
    review): the client retries those, and no other UNAVAILABLE (a job waiting for hosts says "retry then")."""
    import time as time_module

    from coordinator.client import Connection
    from vcemu.limits import BUSY

    class Busy(grpc.RpcError):
        def __init__(self, details):
            self._details = details

        def code(self):
            return grpc.StatusCode.UNAVAILABLE

        def details(self):
            return self._details

    answers = [Busy(f"6 cancels are waiting: {BUSY}"), Busy(f"6 cancels are waiting: {BUSY}"), "job"]

    class Stub:
        def Cancel(self, request, timeout, metadata):  # noqa: N802 - the RPC's name
            answer = answers.pop(0)
            if isinstance(answer, Exception):
                raise answer
            return answer

    monkeypatch.setattr(time_module, "sleep", lambda s: None)
    conn = object.__new__(Connection)
    conn.what, conn.stub, conn.address = "cancel", Stub(), "127.0.0.1:1"
    conn._connects = lambda: True  # (asked about some refusals: the coordinator is there)
    assert conn.rpc("Cancel", None, busy_for=60.0) == "job" and not answers
    answers[:] = [Busy("job_id: job 'job-00001' waits for hosts (every agent is lost): ...; retry then"), "job"]
    with pytest.raises(SystemExit):
        conn.rpc("Cancel", None, busy_for=60.0)
