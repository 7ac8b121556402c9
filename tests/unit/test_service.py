"""The coordinator's gRPC API on 127.0.0.1: refusals name the field, accepted jobs are never lost.

The registered agent here is only a description (its address answers nothing), so these tests cover
the API's validation and bookkeeping; tests/integration runs jobs on real agents.
"""

import dataclasses
import time

import grpc
import pytest

from coordinator.model import JobState
from coordinator.policies import get_policy
from coordinator.service import CoordinatorServer, CoordinatorServicer, EventQueue
from tests.unit.scripted_agent import LocalCall
from vcemu.v1 import agent_pb2
from vcemu.v1 import coordinator_pb2 as pb
from vcemu.v1 import coordinator_pb2_grpc as pb_grpc


@pytest.fixture()
def server():
    s = CoordinatorServer(get_policy("greedy"), port=0).start()
    yield s
    s.stop()


@pytest.fixture()
def stub(server):
    channel = grpc.insecure_channel(server.address)
    yield pb_grpc.CoordinatorStub(channel)
    channel.close()


def register(stub, hosts=4):
    desc = agent_pb2.DescribeReply(
        agent_id="a0", mode="cgroup-v1",
        hosts=[agent_pb2.HostInfo(name=f"a0-h{i}", cpu_cores=0.5, memory_bytes=1 << 30) for i in range(hosts)],
    )
    return stub.RegisterAgent(pb.RegisterAgentRequest(address="127.0.0.1:1", description=desc), timeout=5)


def submit(stub, **spec):
    fields = {"tasks": 1, "cpu_need": 0.5, "memory": 0.1, "work_seconds": 10.0, "workload": "dgemm", **spec}
    return stub.Submit(pb.SubmitRequest(spec=pb.JobSpec(**fields)), timeout=5)


def test_submit_before_any_host_is_unavailable(stub):
    with pytest.raises(grpc.RpcError) as err:
        submit(stub)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "no hosts" in err.value.details()


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"memory": 1.5}, "memory"),
        ({"cpu_need": 0.0}, "cpu_need"),
        ({"cpu_need": 1.01}, "cpu_need"),
        ({"tasks": 0}, "tasks"),
        ({"tasks": 41}, "tasks"),  # 4 hosts x 10 tasks of memory 0.1
        ({"workload": "bash"}, "workload"),
        ({"work_seconds": 0.0}, "work_seconds"),
    ],
)
def test_invalid_jobs_are_refused_naming_the_field(stub, spec, field):
    assert register(stub).hosts == ["a0-h0", "a0-h1", "a0-h2", "a0-h3"]
    accepted = submit(stub)
    with pytest.raises(grpc.RpcError) as err:
        submit(stub, **spec)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert f"invalid job: {field}:" in err.value.details()
    # nothing already accepted is lost
    jobs = stub.ListJobs(pb.ListJobsRequest(), timeout=5).jobs
    assert [j.job_id for j in jobs] == [accepted.job_id]


def test_lookups_of_unknown_things_say_what_is_unknown(stub):
    with pytest.raises(grpc.RpcError) as err:
        stub.GetJob(pb.JobRef(job_id="job-99999"), timeout=5)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND and "job-99999" in err.value.details()
    with pytest.raises(grpc.RpcError) as err:
        stub.ListJobs(pb.ListJobsRequest(state="sleeping"), timeout=5)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and err.value.details().startswith("state:")
    assert err.value.details().endswith("known: pending, running, paused, done, failed, cancelled")  # a typo's fix


def test_submit_with_a_request_id_is_idempotent(stub):
    register(stub)
    request = pb.SubmitRequest(spec=pb.JobSpec(tasks=1, cpu_need=0.5, memory=0.1, work_seconds=5), request_id="r1")
    first, call = stub.Submit.with_call(request, timeout=5)
    assert ("vcemu-known", "false") in call.trailing_metadata()
    again, call = stub.Submit.with_call(request, timeout=5)
    assert ("vcemu-known", "true") in call.trailing_metadata()  # the reply says the job is the earlier one
    assert first.job_id == again.job_id
    assert len(stub.ListJobs(pb.ListJobsRequest(), timeout=5).jobs) == 1


def list_pages(stub, size, state=""):
    """Every page of ListJobs at ``size`` per page: the pages' job ids."""
    pages, token = [], ""
    while True:
        reply = stub.ListJobs(pb.ListJobsRequest(state=state, page_size=size, page_token=token), timeout=5)
        pages.append([j.job_id for j in reply.jobs])
        token = reply.next_page_token
        if not token:
            return pages


def test_list_jobs_in_pages_gives_every_job_once_in_submission_order(stub):
    register(stub)
    ids = [submit(stub, cpu_need=0.1, memory=0.01).job_id for _ in range(7)]
    stub.Cancel(pb.JobRef(job_id=ids[1]), timeout=5)
    stub.Cancel(pb.JobRef(job_id=ids[4]), timeout=5)
    assert list_pages(stub, 3) == [ids[0:3], ids[3:6], ids[6:7]]
    assert list_pages(stub, 7) == [ids]  # a last page that ends the list has no token after it
    assert list_pages(stub, 0) == [ids]  # 0: every job in one reply, as before paging
    # With a state filter a page holds at most page_size matching jobs; the scan goes on where it stopped.
    assert list_pages(stub, 1, state="cancelled") == [[ids[1]], [ids[4]], []]
    assert [j for page in list_pages(stub, 2, state="cancelled") for j in page] == [ids[1], ids[4]]
    # Jobs submitted between pages appear on a later page.
    first = stub.ListJobs(pb.ListJobsRequest(page_size=5), timeout=5)
    later = submit(stub, cpu_need=0.1, memory=0.01).job_id
    rest = stub.ListJobs(pb.ListJobsRequest(page_size=5, page_token=first.next_page_token), timeout=5)
    assert [j.job_id for j in rest.jobs] == [*ids[5:], later] and not rest.next_page_token


@pytest.mark.parametrize(("page_size", "token", "field"), [
    (-1, "", "page_size"),
    (2, "nonsense", "page_token"),
    (2, "2:job-elsewhere", "page_token"),  # a token of another coordinator's list
    (2, "99:job-00001", "page_token"),
    (2, "0:", "page_token"),
    (2, "\u00b2:job-00002", "page_token"),  # str.isdigit() takes "²" for a digit; int() does not
])
def test_bad_pages_are_refused_naming_the_field(stub, page_size, token, field):
    register(stub)
    for _ in range(3):
        submit(stub, cpu_need=0.1, memory=0.01)
    with pytest.raises(grpc.RpcError) as err:
        stub.ListJobs(pb.ListJobsRequest(page_size=page_size, page_token=token), timeout=5)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.value.details().startswith(f"{field}:")


def test_health_service_reports_serving(server):
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with grpc.insecure_channel(server.address) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service="vcemu.v1.Coordinator"), timeout=5
        )
    assert reply.status == health_pb2.HealthCheckResponse.SERVING


def test_submit_batch_answers_each_request_on_its_own(stub):
    """Good, bad and repeated requests in one call: each gets its job or its refusal, in order."""
    register(stub)
    good = pb.JobSpec(tasks=1, cpu_need=0.5, memory=0.1, work_seconds=5)
    reply = stub.SubmitBatch(pb.SubmitBatchRequest(requests=[
        pb.SubmitRequest(spec=good, request_id="b1"),
        pb.SubmitRequest(spec=pb.JobSpec(tasks=1, cpu_need=0.5, memory=1.5, work_seconds=5)),
        pb.SubmitRequest(spec=good, request_id="b1"),  # the same request again, within the batch
        pb.SubmitRequest(spec=pb.JobSpec(tasks=1, cpu_need=0.5, memory=0.1, work_seconds=5, workload="sh")),
        pb.SubmitRequest(spec=good),
    ]), timeout=5)
    codes = [r.code for r in reply.results]
    ok, bad = grpc.StatusCode.OK.value[0], grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert codes == [ok, bad, ok, bad, ok]
    assert "memory" in reply.results[1].error and "workload" in reply.results[3].error
    assert reply.results[0].job.job_id == reply.results[2].job.job_id != reply.results[4].job.job_id
    again = stub.Submit(pb.SubmitRequest(spec=good, request_id="b1"), timeout=5)  # and across calls
    assert again.job_id == reply.results[0].job.job_id
    listed = {j.job_id for j in stub.ListJobs(pb.ListJobsRequest(), timeout=5).jobs}
    assert listed == {reply.results[0].job.job_id, reply.results[4].job.job_id}


def test_submit_batch_is_bounded(stub):
    register(stub)
    spec = pb.JobSpec(tasks=1, cpu_need=0.5, memory=0.1, work_seconds=5)
    with pytest.raises(grpc.RpcError) as err:
        stub.SubmitBatch(pb.SubmitBatchRequest(requests=[pb.SubmitRequest(spec=spec)] * 1001), timeout=5)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "requests: at most 1000" in err.value.details()
    assert not stub.ListJobs(pb.ListJobsRequest(), timeout=5).jobs


def test_jobs_past_the_most_the_coordinator_holds_unfinished_are_refused_and_taken_once_some_finish(tmp_path, capsys):
    """--max-queued: a job file of millions (or a client in a loop) had every job taken, about 2 KB of memory each,
    each decision of the policy weighing the waiting ones, until the coordinator crawled or was killed for memory.
    Past the bound a submission is refused RESOURCE_EXHAUSTED (a repeated request id still gets its job; a bad spec
    is still told what is wrong); `submit --file` stops at the first such refusal, saying how many jobs it did not
    submit, and the same command later submits them, and no job twice."""
    import json

    from coordinator.cli import main

    server = CoordinatorServer(get_policy("fcfs"), port=0, max_queued=3).start()
    try:
        with grpc.insecure_channel(server.address) as channel:
            stub = pb_grpc.CoordinatorStub(channel)
            register(stub, hosts=1)
            spec = pb.JobSpec(tasks=1, cpu_need=1.0, memory=0.1, work_seconds=600)
            reply = stub.SubmitBatch(pb.SubmitBatchRequest(requests=[
                pb.SubmitRequest(spec=spec, request_id="q0"), pb.SubmitRequest(spec=spec),
                pb.SubmitRequest(spec=spec, request_id="q0"),  # (the same job: no room taken)
                pb.SubmitRequest(spec=spec), pb.SubmitRequest(spec=spec),
                pb.SubmitRequest(spec=pb.JobSpec(tasks=1, cpu_need=1.0, memory=2.0, work_seconds=5)),
                pb.SubmitRequest(spec=spec, request_id="q0")]), timeout=5)
            ok, full = grpc.StatusCode.OK.value[0], grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
            assert [r.code for r in reply.results] == [ok, ok, ok, ok, full,
                                                       grpc.StatusCode.INVALID_ARGUMENT.value[0], ok]
            assert "holds 3 jobs not finished" in reply.results[4].error
            assert "--max-queued" in reply.results[4].error
            with pytest.raises(grpc.RpcError) as err:
                stub.Submit(pb.SubmitRequest(spec=spec), timeout=5)
            assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert len(stub.ListJobs(pb.ListJobsRequest(), timeout=5).jobs) == 3
            path = tmp_path / "jobs.jsonl"
            path.write_text("".join(json.dumps({"id": f"f{i}", "tasks": 1, "cpu_need": 1.0, "memory": 0.1,
                                                "work": 600.0}) + "\n" for i in range(4)))
            stub.Cancel(pb.JobRef(job_id=reply.results[0].job.job_id), timeout=5)  # room for one
            assert main(["submit", "--coordinator", server.address, "--file", str(path)]) == 1
            out, err_text = capsys.readouterr()
            assert [line.split("\t")[0] for line in out.splitlines()] == ["f0"]
            assert "jobs.jsonl:2: job f1: " in err_text and "the 2 jobs after it were not submitted" in err_text
            assert "1 accepted (1 new, 0 already known), 0 refused, 3 not submitted" in err_text
            assert err_text.count("not finished") == 1  # (one line, not one per job left)
            for job in stub.ListJobs(pb.ListJobsRequest(), timeout=5).jobs:
                if job.state in ("pending", "running"):
                    stub.Cancel(pb.JobRef(job_id=job.job_id), timeout=5)
            assert main(["submit", "--coordinator", server.address, "--file", str(path)]) == 0
            out, err_text = capsys.readouterr()
            assert [line.split("\t")[0] for line in out.splitlines()] == ["f0", "f1", "f2", "f3"]
            assert "4 accepted (3 new, 1 already known), 0 refused" in err_text
    finally:
        server.stop()


def test_submit_batch_is_durable_before_the_reply(tmp_path):
    from coordinator.store import Store

    db = str(tmp_path / "state.db")
    server = CoordinatorServer(get_policy("fcfs"), port=0, state=db).start()
    try:
        with grpc.insecure_channel(server.address) as channel:
            stub = pb_grpc.CoordinatorStub(channel)
            register(stub)
            spec = pb.JobSpec(tasks=1, cpu_need=1.0, memory=0.1, work_seconds=5)
            reply = stub.SubmitBatch(pb.SubmitBatchRequest(
                requests=[pb.SubmitRequest(spec=spec, request_id=f"d{i}") for i in range(50)]), timeout=10)
            acked = {r.job.job_id for r in reply.results if r.code == 0}
            loaded = Store(db).load()  # read while the coordinator still runs: committed, not just cached
    finally:
        server.stop()
    assert len(acked) == 50
    assert acked <= {j.spec.id for j in loaded.jobs}
    assert {j.request_id for j in loaded.jobs if j.spec.id in acked} == {f"d{i}" for i in range(50)}


def test_cli_submits_a_job_file_in_batches_and_again_creates_nothing(stub, server, tmp_path, capsys):
    import json

    from coordinator.cli import main

    register(stub)
    rows = [{"id": f"t{i}", "submit_time": 0.0, "tasks": 1, "cpu_need": 0.5, "memory": 0.1, "work": 5.0}
            for i in range(3)] + [{"id": "big", "submit_time": 0.0, "tasks": 41, "cpu_need": 0.5, "memory": 0.1,
                                   "work": 5.0}]  # 4 hosts x 10 tasks of memory 0.1: refused by the coordinator
    path = tmp_path / "jobs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["submit", "--coordinator", server.address, "--file", str(path)]) == 1  # one refused
    out, err = capsys.readouterr()
    first = dict(line.split("\t") for line in out.splitlines())
    assert sorted(first) == ["t0", "t1", "t2"]
    # the coordinator's refusal names the file's line, as the command's own do
    assert "jobs.jsonl:4: job big: invalid job: tasks" in err
    assert "3 accepted (3 new, 0 already known), 1 refused" in err
    main(["submit", "--coordinator", server.address, "--file", str(path)])
    out, err = capsys.readouterr()
    again = dict(line.split("\t") for line in out.splitlines())
    assert again == first  # the same file again: the same jobs, none new
    assert "3 accepted (0 new, 3 already known), 1 refused" in err
    assert len(stub.ListJobs(pb.ListJobsRequest(), timeout=5).jobs) == 3
    # A job appended to the file is the only new one (request ids were the whole file's hash: every job was new
    # again, and ran twice); a job whose values changed is a new job too.
    more = {**rows[0], "id": "t3"}
    changed = {**rows[1], "work": 6.0}
    path.write_text("".join(json.dumps(r) + "\n" for r in [rows[0], changed, rows[2], more]))
    assert main(["submit", "--coordinator", server.address, "--file", str(path)]) == 0
    out, err = capsys.readouterr()
    third = dict(line.split("\t") for line in out.splitlines())
    assert third["t0"] == first["t0"] and third["t2"] == first["t2"]
    assert third["t1"] != first["t1"] and third["t3"] not in first.values()
    assert "4 accepted (2 new, 2 already known), 0 refused" in err
    assert len(stub.ListJobs(pb.ListJobsRequest(), timeout=5).jobs) == 5
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(rows[0]) + "\n" + json.dumps({**rows[1], "workload": "sh"}) + "\n")
    with pytest.raises(SystemExit) as refused:  # the file is read whole before any submit
        main(["submit", "--coordinator", server.address, "--file", str(bad)])
    assert refused.value.code == 2 and "bad.jsonl:2: workload" in capsys.readouterr().err
    assert len(stub.ListJobs(pb.ListJobsRequest(), timeout=5).jobs) == 5
    # submit ignores submit times, so a file for it may leave them out (it was refused: "submit_time: missing")
    untimed = tmp_path / "untimed.jsonl"
    untimed.write_text(json.dumps({**{k: v for k, v in rows[0].items() if k != "submit_time"}, "id": "u0"}) + "\n")
    assert main(["submit", "--coordinator", server.address, "--file", str(untimed)]) == 0
    assert "1 accepted (1 new, 0 already known), 0 refused" in capsys.readouterr().err


def test_submit_results_say_whether_the_job_is_new(stub):
    """SubmitResult.known: false for a job this request made, true for the job an earlier request with the
    same id made (in an earlier batch or earlier in this one), unset for a refusal."""
    register(stub)
    spec = pb.JobSpec(tasks=1, cpu_need=0.5, memory=0.1, work_seconds=5)
    requests = [pb.SubmitRequest(spec=spec, request_id=r) for r in ("a", "b", "a")]
    first = stub.SubmitBatch(pb.SubmitBatchRequest(requests=requests), timeout=5).results
    assert [r.known for r in first] == [False, False, True]
    assert first[2].job.job_id == first[0].job.job_id
    requests.append(pb.SubmitRequest(spec=pb.JobSpec(tasks=0, cpu_need=0.5, memory=0.1, work_seconds=5)))
    again = stub.SubmitBatch(pb.SubmitBatchRequest(requests=requests), timeout=5).results
    assert [r.known for r in again[:3]] == [True, True, True]
    assert again[3].code != 0 and not again[3].HasField("known")


def test_a_request_id_used_again_with_another_spec_is_refused(stub):
    """A retry sends the same spec and gets the job; another spec under a used request id (a sweep reusing ids) is
    another job, refused ALREADY_EXISTS naming what differs, in a batch as alone (API review: it got the first job,
    OK, and only a trailer said it was not new)."""
    register(stub)
    spec = pb.JobSpec(tasks=1, cpu_need=0.5, memory=0.1, work_seconds=5)
    other = pb.JobSpec(tasks=2, cpu_need=0.5, memory=0.1, work_seconds=5, workload="arraycycle")
    first = stub.SubmitBatch(pb.SubmitBatchRequest(requests=[
        pb.SubmitRequest(spec=spec, request_id="a"), pb.SubmitRequest(spec=other, request_id="a"),
        pb.SubmitRequest(spec=pb.JobSpec(tasks=1, cpu_need=0.5, memory=0.1, work_seconds=5, workload="dgemm"),
                         request_id="a")]), timeout=5).results
    assert first[0].code == 0 and first[2].code == 0 and first[2].known  # "" is dgemm, as the job ran it
    assert first[1].code == grpc.StatusCode.ALREADY_EXISTS.value[0] and not first[1].HasField("known")
    assert first[1].error == (f"request_id: 'a' already made {first[0].job.job_id} from another spec (tasks 1 (not 2), "
                              "workload 'dgemm' (not 'arraycycle')): give another request id, or the same spec to get "
                              "that job")
    with pytest.raises(grpc.RpcError) as info:
        stub.Submit(pb.SubmitRequest(spec=pb.JobSpec(tasks=1, cpu_need=0.5, memory=0.1, work_seconds=6),
                                     request_id="a"), timeout=5)
    assert info.value.code() == grpc.StatusCode.ALREADY_EXISTS
    assert "work_seconds 5.0 (not 6.0)" in info.value.details()
    # the name is a label, not compared: a state file from before names were kept holds none, and a genuine retry of
    # submit --file sends one (review of the fix: a false ALREADY_EXISTS)
    named = pb.JobSpec(tasks=1, cpu_need=0.5, memory=0.1, work_seconds=5, name="f0")
    again = stub.SubmitBatch(pb.SubmitBatchRequest(requests=[pb.SubmitRequest(spec=named, request_id="a")]),
                             timeout=5).results[0]
    assert again.code == 0 and again.known and again.job.job_id == first[0].job.job_id


def test_cli_submit_file_from_an_older_coordinator_does_not_guess_new(tmp_path, monkeypatch, capsys):
    """A coordinator that predates SubmitResult.known: the summary does not claim the jobs are new."""
    import json

    import coordinator.cli
    import coordinator.client

    class OldStub:
        def SubmitBatch(self, request, timeout, metadata):  # noqa: N802 (the RPC's name)
            return pb.SubmitBatchReply(results=[pb.SubmitResult(job=pb.Job(job_id=f"job-{i}"), code=0)
                                                for i in range(len(request.requests))])

    monkeypatch.setattr(coordinator.client, "_stub", lambda address: OldStub())
    path = tmp_path / "jobs.jsonl"
    path.write_text("".join(json.dumps({"id": f"t{i}", "submit_time": 0, "tasks": 1, "cpu_need": 0.5,
                                        "memory": 0.1, "work": 5}) + "\n" for i in range(2)))
    assert coordinator.cli.main(["submit", "--file", str(path)]) == 0
    assert capsys.readouterr().err.strip() == "2 accepted, 0 refused"


def test_a_running_jobs_virtual_time_is_its_progress_now_not_at_the_last_decision(stub):
    """GREEDY decides only at submissions and completions: between them, GetJob and ListJobs report the
    work the agent has reported done, not the virtual time of the last decision (a user watching
    ``vcemu jobs``, after a restart too, saw VT 0.0 for a job that had been running for 18 s)."""
    import time

    from .scripted_agent import TableAgent, serve

    agent = TableAgent("t0", ("t0-h0",))
    grpc_server, address = serve(agent)
    try:
        stub.RegisterAgent(pb.RegisterAgentRequest(address=address, description=agent.Describe(None, None)),
                           timeout=5)
        job = submit(stub, work_seconds=100.0).job_id
        deadline = time.monotonic() + 30  # (against a hang only: each wait below ends once its condition holds)
        while not agent.tasks and time.monotonic() < deadline:
            time.sleep(0.05)
        (task,) = agent.tasks
        agent.set(task, 0.25)
        seen = []
        while time.monotonic() < deadline:
            seen.append(stub.GetJob(pb.JobRef(job_id=job), timeout=5).virtual_time)
            if seen[-1] == pytest.approx(25.0):
                break
            time.sleep(0.1)
        assert seen[-1] == pytest.approx(25.0), seen[-5:]
        listed = {j.job_id: j.virtual_time for j in stub.ListJobs(pb.ListJobsRequest(), timeout=5).jobs}
        assert listed[job] == pytest.approx(25.0)
    finally:
        grpc_server.stop(0)


def test_a_job_accepted_then_unplaceable_ends_with_a_transition_stored_and_streamed(tmp_path):
    """A job accepted while the cluster could hold it, refused when handed to the engine (the host that could hold
    it was lost meanwhile, a smaller one is left), fails like any job: its end is in the history, in the store and
    on the event stream. (With no host left at all it waits instead: see the test of a job accepted before every
    agent was lost.)"""
    from coordinator.model import Host
    from coordinator.store import Store

    path = str(tmp_path / "state.db")
    server = CoordinatorServer(get_policy("greedy"), port=0, state=path)  # not started: no engine loop
    try:
        server.engine.add_hosts([Host("h0", 1.0, 1.0), Host("h1", 1.0, 0.05)])
        events = EventQueue()
        server.watchers.append(events)
        spec = pb.JobSpec(tasks=1, cpu_need=0.5, memory=0.1, work_seconds=10.0, workload="dgemm")
        (result,) = server.accept([pb.SubmitRequest(spec=spec)])
        job = result.job.job_id
        server.engine.lose_hosts(["h0"], "host lost")
        server.drain()
        rec = server.engine.jobs[job]
        assert rec.state is JobState.FAILED and rec.message.startswith("invalid job: ")
        last = server.engine.history.transitions[-1]
        assert (last.job, last.src, last.dst, last.reason) == (job, JobState.PENDING, JobState.FAILED, rec.message)
        assert events.get_nowait() == last
        stored = Store(path).load()
        assert [(t.src, t.dst) for t in stored.transitions if t.job == job] == [
            (None, JobState.PENDING), (JobState.PENDING, JobState.FAILED)]
    finally:
        server.grpc.stop(0)
        server.store.close()


def test_event_watchers_are_capped_so_the_api_keeps_threads_for_everything_else(server, stub):
    """Each WatchEvents stream holds an API thread for as long as it is open. With as many streams as threads,
    every other call (and the agents' heartbeats) waited until its deadline; now the streams beyond
    MAX_WATCHERS are refused, and the rest of the API answers."""
    import threading
    import time

    from coordinator.service import API_THREADS, MAX_WATCHERS

    opened: list = []
    refused: list[grpc.StatusCode] = []

    def follow(call) -> None:
        try:
            for _ in call:
                pass
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.CANCELLED:
                refused.append(exc.code())

    channels = [grpc.insecure_channel(server.address) for _ in range(API_THREADS)]
    try:
        for ch in channels:  # as many streams as the API has threads
            call = pb_grpc.CoordinatorStub(ch).WatchEvents(pb.WatchEventsRequest())
            opened.append(call)
            threading.Thread(target=follow, args=(call,), daemon=True).start()
        deadline = time.monotonic() + 30
        while len(server.watchers) < MAX_WATCHERS or len(refused) < API_THREADS - MAX_WATCHERS:
            assert time.monotonic() < deadline, (len(server.watchers), refused)
            time.sleep(0.05)
        assert len(server.watchers) == MAX_WATCHERS
        assert refused == [grpc.StatusCode.RESOURCE_EXHAUSTED] * (API_THREADS - MAX_WATCHERS)
        # Each answers within its deadline (with every thread taken, each ended in DEADLINE_EXCEEDED).
        register(stub)
        submit(stub)
        stub.ListJobs(pb.ListJobsRequest(), timeout=5)
        # a watcher that leaves makes room for another (one whose stream is open: under load the first call opened
        # can be among the refused, and cancelling it freed no slot)
        next(call for call in opened if not call.done()).cancel()
        deadline = time.monotonic() + 30
        while len(server.watchers) >= MAX_WATCHERS:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        again = stub.WatchEvents(pb.WatchEventsRequest())
        threading.Thread(target=follow, args=(again,), daemon=True).start()
        deadline = time.monotonic() + 30
        while len(server.watchers) < MAX_WATCHERS:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert len(refused) == API_THREADS - MAX_WATCHERS
        again.cancel()
    finally:
        for call in opened:
            call.cancel()
        for ch in channels:
            ch.close()


def test_cluster_status_gives_allocations_as_fractions_of_each_host(server, stub):
    """On hosts of different sizes, ClusterStatus's allocations are fractions of that host's capacity, as its
    measured CPU and the exporter's ratios are, not of the reference host's (the first registered): a job using
    the whole of a host twice the reference's size showed as 1.0 of it beside the exporter's 0.5."""
    from coordinator.engine import JobRecord
    from coordinator.model import JobSpec

    desc = agent_pb2.DescribeReply(agent_id="a0", mode="cgroup-v1", hosts=[
        agent_pb2.HostInfo(name="small", cpu_cores=0.5, memory_bytes=1 << 30),
        agent_pb2.HostInfo(name="big", cpu_cores=1.0, memory_bytes=2 << 30)])
    stub.RegisterAgent(pb.RegisterAgentRequest(address="127.0.0.1:1", description=desc), timeout=5)
    assert {h.name: (h.cpu, h.mem) for h in server.engine.hosts} == {"small": (1.0, 1.0), "big": (2.0, 2.0)}
    job = JobSpec("job-x", 0.0, tasks=1, cpu_need=1.0, mem=0.8, work=100.0)
    # a job placed on big with a share of 1.0 reference host, as ClusterStatus reads jobs: half of big's CPU
    server.board.put(JobRecord(job, JobState.RUNNING, ("big",), cpu=1.0))
    views = {h.name: h for h in stub.ClusterStatus(pb.ClusterStatusRequest(), timeout=5).hosts}
    assert (views["big"].cpu_allocated, views["big"].memory_allocated) == pytest.approx((0.5, 0.4))
    assert (views["small"].cpu_allocated, views["small"].memory_allocated) == (0.0, 0.0)


def test_a_restarted_coordinator_keeps_the_reference_host(tmp_path):
    """Job needs are fractions of the reference host (the first ever registered). A restart must keep it
    whatever order the stored agents come back in: an agent that re-registered was stored last, and the
    restarted coordinator took the other agent's host as reference, so every host's capacity and every stored
    job's needs changed meaning (here big's capacity went from 2.0 to 1.0)."""
    state = str(tmp_path / "run.db")

    def describe(agent: str, cores: float, gib: int) -> agent_pb2.DescribeReply:
        return agent_pb2.DescribeReply(agent_id=agent, mode="cgroup-v1", hosts=[
            agent_pb2.HostInfo(name=f"{agent}-h0", cpu_cores=cores, memory_bytes=gib << 30)])

    first = CoordinatorServer(get_policy("greedy"), port=0, state=state).start()
    try:
        with grpc.insecure_channel(first.address) as ch:
            api = pb_grpc.CoordinatorStub(ch)
            for desc in (describe("small", 0.5, 1), describe("big", 1.0, 2), describe("small", 0.5, 1)):
                api.RegisterAgent(pb.RegisterAgentRequest(address="127.0.0.1:1", description=desc), timeout=5)
        before = {h.name: (h.cpu, h.mem) for h in first.engine.hosts}
    finally:
        first.stop()
    assert before == {"small-h0": (1.0, 1.0), "big-h0": (2.0, 2.0)}
    again = CoordinatorServer(get_policy("greedy"), port=0, state=state).start()
    try:
        assert {h.name: (h.cpu, h.mem) for h in again.engine.hosts} == before
    finally:
        again.stop()


def test_a_restart_starts_over_a_job_left_on_a_host_no_agent_has(tmp_path):
    """An agent's loss whose job records failed (a full disk) while the agent's removal got through leaves a job
    stored RUNNING on a host no stored agent has. A restart used to keep it so: nothing could report it, and
    every decision then failed on the unknown host (KeyError), so no job was placed again. It starts over."""
    import sqlite3
    import time

    from tests.unit.scripted_agent import TableAgent, serve

    state = str(tmp_path / "run.db")
    x = TableAgent("x", ("h0", "h1"))
    x_server, x_address = serve(x)
    spec = pb.JobSpec(tasks=1, cpu_need=1.0, memory=0.1, work_seconds=600, workload="modeled")

    def wait(what, cond, timeout=10.0):
        deadline = time.monotonic() + timeout
        while not cond():
            assert time.monotonic() < deadline, what
            time.sleep(0.05)

    first = CoordinatorServer(get_policy("greedy"), port=0, state=state, poll_interval=0.05).start()
    try:
        with grpc.insecure_channel(first.address) as ch:
            api = pb_grpc.CoordinatorStub(ch)
            api.RegisterAgent(pb.RegisterAgentRequest(address=x_address, description=x.Describe(None, None)),
                              timeout=5)
            ids = [api.Submit(pb.SubmitRequest(spec=spec), timeout=5).job_id for _ in range(2)]
        wait("both jobs running", lambda: all(
            getattr(first.engine.jobs.get(j), "state", None) is JobState.RUNNING for j in ids))

        def full(*args, **kwargs):
            raise sqlite3.OperationalError("database or disk is full")
        real_put_job, real_journal = first.store.put_job, first.backend.journal
        first.store.put_job = full  # the loss's writes for the jobs fail; the agent's removal does not
        first.backend.journal = full
        first.lose_agent("x", "agent x lost (test)")
        first.store.put_job, first.backend.journal = real_put_job, real_journal
        assert [first.engine.jobs[j].state for j in ids] == [JobState.PENDING] * 2
    finally:
        first.stop()
        x_server.stop(0)

    y = TableAgent("y", ("y0",))
    y_server, y_address = serve(y)
    again = CoordinatorServer(get_policy("greedy"), port=0, state=state, poll_interval=0.05).start()
    try:
        assert [(again.engine.jobs[j].state, again.engine.jobs[j].hosts) for j in ids] == [(JobState.PENDING, ())] * 2
        # what the restart took back, in the one line `vcemu coordinator` and `up` print (it was logged at INFO only)
        assert again.restored_note == f"restored 2 jobs (2 unfinished) and 0 agents from {state}"
        fresh = CoordinatorServer(get_policy("greedy"), port=0)
        assert fresh.restored_note is None  # (no state file: nothing to say)
        fresh.stop()
        new = CoordinatorServer(get_policy("greedy"), port=0, state=str(tmp_path / "new.db"))
        # (it said "restored 0 jobs (0 unfinished) and 0 agents"; operator review)
        assert new.restored_note == f"{tmp_path / 'new.db'} holds no job or agent yet: this run is recorded there"
        new.stop()
        with grpc.insecure_channel(again.address) as ch:
            api = pb_grpc.CoordinatorStub(ch)
            api.RegisterAgent(pb.RegisterAgentRequest(address=y_address, description=y.Describe(None, None)),
                              timeout=5)
        wait("a job placed on the new agent's host",
             lambda: any(again.engine.jobs[j].hosts == ("y0",) for j in ids))
    finally:
        again.stop()
        y_server.stop(0)


def test_a_submitted_jobs_name_is_kept_beside_its_id(stub):
    """A job file's ids (``submit --file`` sends each as the job's name) were dropped: ``vcemu jobs`` showed only
    the coordinator's ids, and the one link between the two was submit's output (found by review)."""
    register(stub)
    named = stub.Submit(pb.SubmitRequest(spec=pb.JobSpec(name="j0", tasks=1, cpu_need=0.5, memory=0.1,
                                                         work_seconds=5)), timeout=5)
    plain = stub.Submit(pb.SubmitRequest(spec=pb.JobSpec(tasks=1, cpu_need=0.5, memory=0.1, work_seconds=5)),
                        timeout=5)
    assert (named.spec.name, plain.spec.name) == ("j0", plain.job_id)  # no name: the id, as before
    listed = {j.job_id: j.spec.name for j in stub.ListJobs(pb.ListJobsRequest(), timeout=5).jobs}
    assert listed == {named.job_id: "j0", plain.job_id: plain.job_id}
    from coordinator.client import _job_table

    table = _job_table(stub.ListJobs(pb.ListJobsRequest(), timeout=5).jobs).splitlines()
    assert table[0].split()[:2] == ["JOB", "NAME"]
    assert [line.split()[1] for line in table[1:]] == ["j0", "-"]


def test_a_named_reference_host_sets_the_units_whichever_host_registers_first(tmp_path):
    """``vcemu coordinator --reference-host 2``: a 1-core host that registers first is half a host, not the unit
    (before, agents started by hand always made the first host to register the reference). A restart on the
    state file with another reference is refused, naming it, and lets go of the state file."""
    from coordinator.cli import build_parser

    ref = build_parser().parse_args(["coordinator", "--reference-host", "2,2GiB"]).reference_host
    assert (ref.cpu_cores, ref.memory_bytes) == (2.0, 2 << 30)
    state = str(tmp_path / "run.db")
    desc = agent_pb2.DescribeReply(agent_id="a0", mode="cgroup-v1", hosts=[
        agent_pb2.HostInfo(name="a0-h0", cpu_cores=1.0, memory_bytes=1 << 30)])
    first = CoordinatorServer(get_policy("greedy"), port=0, state=state, reference=ref).start()
    try:
        with grpc.insecure_channel(first.address) as ch:
            pb_grpc.CoordinatorStub(ch).RegisterAgent(
                pb.RegisterAgentRequest(address="127.0.0.1:1", description=desc), timeout=5)
        assert [(h.name, h.cpu, h.mem) for h in first.engine.hosts] == [("a0-h0", 0.5, 0.5)]
    finally:
        first.stop()
    other = agent_pb2.HostInfo(name="reference", cpu_cores=1.0, memory_bytes=1 << 30)
    with pytest.raises(ValueError, match="reference host: the state file's jobs have needs in units of a host of 2 "):
        CoordinatorServer(get_policy("greedy"), port=0, state=state, reference=other)
    again = CoordinatorServer(get_policy("greedy"), port=0, state=state, reference=ref).start()  # same: accepted
    try:
        assert [(h.name, h.cpu, h.mem) for h in again.engine.hosts] == [("a0-h0", 0.5, 0.5)]
    finally:
        again.stop()


@pytest.mark.parametrize(("text", "why"), [
    ("0", "cores and memory must be > 0"), ("-1", "cores and memory must be > 0"),
    ("nan", "cores and memory must be > 0"), ("1,0", "cores and memory must be > 0"),
    ("x", "not a number of cores: 'x'"), ("1,lots", "cannot parse memory size 'lots'")])
def test_a_bad_reference_host_is_refused_naming_the_flag(text, why, capsys):
    from coordinator.cli import build_parser

    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["coordinator", "--reference-host", text])
    assert exc.value.code == 2
    assert f"argument --reference-host: {why}" in capsys.readouterr().err


def test_only_the_latest_lost_agents_keep_a_down_series(server, stub, monkeypatch):
    """A lost agent keeps a ``vcemu_agent_up`` 0 series until it registers again, but an agent restarted under a
    new id each time (the default id holds its pid) added one per restart for as long as the coordinator ran."""
    import coordinator.service as service

    monkeypatch.setattr(service, "LOST_KEPT", 2)
    for k in range(3):
        desc = agent_pb2.DescribeReply(agent_id=f"gone{k}", mode="cgroup-v1", hosts=[
            agent_pb2.HostInfo(name=f"gone{k}-h0", cpu_cores=1.0, memory_bytes=1 << 30)])
        stub.RegisterAgent(pb.RegisterAgentRequest(address="127.0.0.1:1", description=desc), timeout=5)
        server.lose_agent(f"gone{k}", "test: agent gone")
    assert list(server.lost) == ["gone1", "gone2"]
    assert sorted((h.agent, h.lost) for h in server.agent_health()) == [("gone1", True), ("gone2", True)]


def test_a_job_change_the_state_file_cannot_take_is_written_once_it_can(tmp_path, monkeypatch, caplog):
    """Fault-injection review: a full disk made the store listener raise into the engine, and the changes it
    was recording were lost (jobs shown done were run again after a restart). They are now kept and written as
    soon as the file takes writes again, with one line when writing starts to fail."""
    import logging
    import sqlite3

    from coordinator.engine import JobRecord
    from coordinator.metrics import Transition
    from coordinator.model import JobSpec

    server = CoordinatorServer(get_policy("greedy"), port=0, state=str(tmp_path / "run.db"))
    try:
        spec = JobSpec("job-00001", 0.0, 1, 1.0, 0.1, 5.0)
        server.store.put_job(spec, JobState.RUNNING, ("h0",), 1.0, 0.0, 1, 0.0, None, "")
        rec = JobRecord(spec, JobState.DONE, ("h0",), 0.0, 5.0, 1, 0.0, 7.0, "completed")
        server.engine.jobs[spec.id] = rec
        real = server.store.put_job

        def full(*_a, **_k):
            raise sqlite3.OperationalError("database or disk is full")

        monkeypatch.setattr(server.store, "put_job", full)
        with caplog.at_level(logging.ERROR):
            for _ in range(3):  # the transition, then two loop turns: one line, not one per try
                server._persist(Transition(7.0, spec.id, JobState.RUNNING, JobState.DONE, ("h0",), 1.0, "completed"))
                assert server.save_unsaved() is False
        assert [r.getMessage().startswith("the state file cannot be written (OperationalError: database or disk "
                                          "is full)") for r in caplog.records] == [True]
        monkeypatch.setattr(server.store, "put_job", real)
        assert server.save_unsaved() is True and server.unsaved == {}
        (stored,) = server.store.load().jobs
        assert (stored.state, stored.vt, stored.end) == (JobState.DONE, 5.0, 7.0)
    finally:
        server.stop()


def test_a_submission_the_state_file_cannot_take_is_refused_in_one_clear_line(tmp_path, monkeypatch):
    """Fault-injection review: on a full disk ``vcemu submit`` got "UNKNOWN: Exception calling application:
    database or disk is full" (gRPC's word for an unhandled server error). Nothing is accepted, and it says so."""
    import sqlite3

    server = CoordinatorServer(get_policy("greedy"), port=0, state=str(tmp_path / "run.db")).start()
    try:
        with grpc.insecure_channel(server.address) as ch:
            api = pb_grpc.CoordinatorStub(ch)
            register(api, hosts=1)

            def full(*_a, **_k):
                raise sqlite3.OperationalError("database or disk is full")

            monkeypatch.setattr(server.store, "put_job", full)
            for call in (lambda: submit(api),
                         lambda: api.SubmitBatch(pb.SubmitBatchRequest(requests=[pb.SubmitRequest(spec=pb.JobSpec(
                             tasks=1, cpu_need=0.5, memory=0.1, work_seconds=10.0, workload="dgemm"))]), timeout=5)):
                with pytest.raises(grpc.RpcError) as err:
                    call()
                assert err.value.code() == grpc.StatusCode.UNAVAILABLE
                assert err.value.details() == (f"the coordinator cannot write its state file {tmp_path / 'run.db'} "
                                               "(database or disk is full): nothing was accepted; submit again once "
                                               "it can")
            assert server.engine.jobs == {} and server.intake == {}
            monkeypatch.undo()
            # Exhaustion review: the refused submissions took no job ids (job-00005 came after job-00001 at HEAD).
            assert submit(api).job_id == "job-00001"
    finally:
        server.stop()


def test_a_state_file_deleted_under_the_coordinator_refuses_submissions(tmp_path):
    """Exhaustion review: with its state file deleted (or replaced) the coordinator acknowledged every submission,
    written to the unlinked file, and a restart found none of them ("holds no job or agent yet")."""
    import os

    path = tmp_path / "run.db"
    server = CoordinatorServer(get_policy("greedy"), port=0, state=str(path)).start()
    try:
        with grpc.insecure_channel(server.address) as ch:
            api = pb_grpc.CoordinatorStub(ch)
            register(api, hosts=1)
            os.unlink(path)
            with pytest.raises(grpc.RpcError) as err:
                submit(api)
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE
            assert f"{path} was deleted or moved away while this coordinator ran" in err.value.details()
    finally:
        server.stop()


def test_a_cancel_the_state_file_cannot_take_is_not_acknowledged(tmp_path, monkeypatch):
    """Exhaustion review: on a full disk ``vcemu cancel`` answered "cancelled"; the cancel was in memory only, and a
    coordinator restarted before the disk had room ran the job again."""
    import sqlite3

    server = CoordinatorServer(get_policy("greedy"), port=0, state=str(tmp_path / "run.db")).start()
    try:
        with grpc.insecure_channel(server.address) as ch:
            api = pb_grpc.CoordinatorStub(ch)
            register(api, hosts=1)
            job = submit(api).job_id

            def full(*_a, **_k):
                raise sqlite3.OperationalError("database or disk is full")

            monkeypatch.setattr(server.store, "put_job", full)
            with pytest.raises(grpc.RpcError) as err:
                api.Cancel(pb.JobRef(job_id=job), timeout=10)
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE
            assert "cannot record it now" in err.value.details() or "nothing was cancelled" in err.value.details()
            monkeypatch.undo()
            assert api.Cancel(pb.JobRef(job_id=job), timeout=10).state == "cancelled"
            (stored,) = server.store.load().jobs
            assert stored.state is JobState.CANCELLED
    finally:
        server.stop()


def watched_with_one_agent() -> CoordinatorServer:
    """A started coordinator whose agent watch the test drives itself, with agent a0 registered and heard once."""
    from tests.unit.test_all_agents_silent import watched

    return watched("a0")


def test_a_coordinator_that_did_not_run_does_not_count_its_own_stall_against_the_agents():
    """Fault-injection review: a coordinator SIGSTOPped for 8 s declared a healthy agent lost as soon as it ran
    again (no heartbeat had been heard: none could be), and requeued its jobs. A gap in the process's running
    (the stall ticker's notes) longer than a heartbeat interval is excused; an agent silent for longer is still
    lost, a heartbeat received since is left alone, and no stamp is moved past now."""
    import time

    server = watched_with_one_agent()
    try:
        now = time.monotonic()
        server.heartbeats["a0"] = now - 400.0  # silent for 4 intervals: lost at 3
        server._ran_at = now - 50.0  # last noted running 50 s ago: less than an interval, no excuse
        server._note_running()
        assert server.heartbeats["a0"] == now - 400.0
        server._ran_at = time.monotonic() - 200.0  # the process did not run for the last 200 s
        server._check_agents()  # (which notes the running first)
        assert time.monotonic() - 201.0 < server.heartbeats["a0"] < time.monotonic() - 199.0
        assert "a0" in server.backend.agents and not server.lost
        server.beat("a0")  # a heartbeat received once it ran again is left alone
        fresh = server.heartbeats["a0"]
        server._ran_at = time.monotonic() - 3600.0
        server._note_running()
        assert server.heartbeats["a0"] == fresh
        server.heartbeats["a0"] = time.monotonic() - 400.0  # a shift never passes now
        server._ran_at = time.monotonic() - 3600.0
        server._note_running()
        assert server.heartbeats["a0"] <= time.monotonic()
        server.heartbeats["a0"] = time.monotonic() - 400.0  # and silent for as long after that: lost
        server._check_agents()
        assert "a0" not in server.backend.agents and list(server.lost) == ["a0"]
    finally:
        server.stop()

def test_an_agent_that_registered_again_is_not_declared_lost_for_its_old_handles_silence():
    """Review of vcemu up's agent restarts: the watch found agent a0's handle silent, and a0 (restarted under its
    id) registered again before the watch declared it lost: the new handle was cut off and removed (its jobs
    requeued once more). Only the old handle is cut off now; the agent and its hosts stay."""
    server = watched_with_one_agent()
    try:
        old = server.backend.agents["a0"]
        with grpc.insecure_channel(server.address) as ch:
            register(pb_grpc.CoordinatorStub(ch), hosts=1)  # the restarted a0
        new = server.backend.agents["a0"]
        assert new is not old
        assert server.lose_agent("a0", "agent a0 lost: no heartbeat (test)", old) == []
        assert old.lost and not new.lost
        assert server.backend.agents["a0"] is new and "a0" in server.registered and not server.lost
        assert server.backend.host_agent == {"a0-h0": "a0"}
        assert server.lose_agent("a0", "agent a0 lost (test)", new) == [] and "a0" not in server.backend.agents
    finally:
        server.stop()


def test_a_stopping_coordinator_declares_no_agent_lost_and_says_a_cut_turn_in_one_line(monkeypatch, caplog):
    """Torture review: at a clean stop, agents stopped beside the coordinator were declared lost (with a state
    file, recorded: the restart requeued jobs it could have adopted), and an engine turn cut short by the closed
    channels was logged as "engine step failed" with a traceback."""
    import logging
    import threading
    import time

    server = watched_with_one_agent()
    try:
        server.heartbeats["a0"] = time.monotonic() - 400.0  # silent for 4 intervals: lost at 3, but stopping
        # The stop comes while the watch waits for the engine lock (the loop holds it through a turn): checked again
        # once it has the lock.
        losing: list[list[str]] = []
        with server.engine.lock:
            watch = threading.Thread(target=lambda: losing.append(server.lose_agent("a0", "test")))
            watch.start()
            time.sleep(0.2)  # (it has cut the agent off and waits for the lock)
            server._stop.set()
        watch.join(5)
        assert losing == [[]] and "a0" in server.backend.agents and not server.lost
        server._check_agents()
        assert "a0" in server.backend.agents and not server.lost
    finally:
        server._stop.clear()
        server.stop()

    server = CoordinatorServer(get_policy("greedy"), port=0)
    turns = threading.Event()

    # a turn under way when the stop comes, which its closing then fails
    def step(until: float, budget_s: float | None = None) -> None:
        turns.set()
        if server._stop.wait(5):
            raise ValueError("Cannot invoke RPC: Channel closed!")

    monkeypatch.setattr(server.engine, "step", step)
    server.start()
    assert turns.wait(5)
    with caplog.at_level(logging.WARNING, logger="vcemu.coordinator"):
        server.stop()
    said = [r for r in caplog.records if r.name == "vcemu.coordinator" and r.levelno >= logging.WARNING]
    assert [r.getMessage() for r in said] == ["engine turn cut short by the stop: ValueError: Cannot invoke RPC: "
                                              "Channel closed!"], caplog.text
    assert not any(r.exc_info for r in said) and server.loop_error_count == 0


def test_job_changes_the_state_file_refuses_for_good_do_not_hold_back_the_others(tmp_path, monkeypatch, caplog):
    """Diff review: every unsaved change was written in one transaction, tried again at every later change (4,000
    transitions took 120 s under the engine's lock on a full disk), and a value SQLite refuses for good (not a
    full disk) kept every other job's change out of the file for ever. Now: one job per transaction, a full disk
    tried again once a second from the loop, and a job whose own row cannot be written is dropped, logged."""
    import logging
    import sqlite3

    from coordinator.engine import JobRecord
    from coordinator.metrics import Transition
    from coordinator.model import JobSpec

    server = CoordinatorServer(get_policy("greedy"), port=0, state=str(tmp_path / "run.db"))
    try:
        real, calls = server.store.put_job, []
        for name in ("bad", "good"):
            spec = JobSpec(name, 0.0, 1, 1.0, 0.1, 5.0)
            real(spec, JobState.RUNNING, ("h0",), 1.0, 0.0, 1, 0.0, None, "")
            server.engine.jobs[name] = JobRecord(spec, JobState.DONE, ("h0",), 0.0, 5.0, 1, 0.0, 7.0, "completed")

        def full(*args, **_k):
            calls.append(args[0].id)
            raise sqlite3.OperationalError("database or disk is full")

        monkeypatch.setattr(server.store, "put_job", full)
        done = Transition(7.0, "bad", JobState.RUNNING, JobState.DONE, ("h0",), 1.0, "completed")
        server._persist(done)
        for _ in range(50):  # while it fails, a change is kept without another try
            server._persist(dataclasses.replace(done, job="good"))
        assert calls == ["bad"] and server.unsaved_failing

        def refuses_bad(spec, *args, **kwargs):
            if spec.id == "bad":
                raise sqlite3.IntegrityError("NOT NULL constraint failed: jobs.vt")
            return real(spec, *args, **kwargs)

        monkeypatch.setattr(server.store, "put_job", refuses_bad)
        with caplog.at_level(logging.ERROR):
            assert server.save_unsaved() is True
        assert "the change of job bad cannot be recorded" in caplog.text
        assert {j.spec.id: j.state for j in server.store.load().jobs} == {"bad": JobState.RUNNING,
                                                                           "good": JobState.DONE}
    finally:
        server.stop()


def test_a_damaged_agent_row_is_refused_in_one_line_naming_the_state_file(tmp_path):
    """Diff review: an agent's stored description that does not parse gave a protobuf DecodeError traceback."""
    import sqlite3

    from coordinator.store import StoreError

    state = str(tmp_path / "run.db")
    first = CoordinatorServer(get_policy("greedy"), port=0, state=state).start()
    try:
        with grpc.insecure_channel(first.address) as ch:
            register(pb_grpc.CoordinatorStub(ch), hosts=1)
    finally:
        first.stop()
    with sqlite3.connect(state) as db:
        db.execute("UPDATE agents SET description=?", (b"\xff\xff\xff",))
    with pytest.raises(StoreError, match=rf"^--state {state}: not a usable vcemu state file: a damaged DescribeReply"):
        CoordinatorServer(get_policy("greedy"), port=0, state=state)


def test_a_named_reference_host_is_taken_before_the_stored_agents_come_back(tmp_path):
    """Diff review: with agents but no reference in the state file, the first restored agent became the reference
    before --reference-host was looked at, and the flag was refused for a reference the file never had."""
    from coordinator.store import Store

    state = str(tmp_path / "run.db")
    store = Store(state)
    store.put_agent("a0", "127.0.0.1:1", agent_pb2.DescribeReply(agent_id="a0", mode="cgroup-v1", hosts=[
        agent_pb2.HostInfo(name="a0-h0", cpu_cores=1.0, memory_bytes=1 << 30)]).SerializeToString())
    store.close()
    ref = agent_pb2.HostInfo(name="reference", cpu_cores=2.0, memory_bytes=2 << 30)
    server = CoordinatorServer(get_policy("greedy"), port=0, state=state, reference=ref)
    try:
        assert [(h.name, h.cpu, h.mem) for h in server.engine.hosts] == [("a0-h0", 0.5, 0.5)]
    finally:
        server.stop()


def test_an_event_stream_that_falls_behind_ends_with_resource_exhausted_after_what_it_holds(server, monkeypatch):
    """A watcher more than WATCH_QUEUE events behind gets the events it was sent before the gap, then
    RESOURCE_EXHAUSTED naming when the gap began: events were dropped in silence and the stream went on (26 to 125
    of 31,500 in a 10,500-job burst; scale review)."""
    import threading

    import coordinator.service as service
    from coordinator.metrics import Transition
    from coordinator.service import CoordinatorServicer

    monkeypatch.setattr(service, "WATCH_QUEUE", 3)

    class Ended(Exception):
        pass

    class Context:
        def is_active(self) -> bool:
            return True

        def add_callback(self, _cb) -> None:
            pass

        def abort(self, code, details):
            raise Ended(code, details)

    got: list[str] = []
    ended: list[Ended] = []
    release = threading.Event()

    def consume() -> None:
        try:
            for ev in CoordinatorServicer(server).WatchEvents(pb.WatchEventsRequest(), Context()):
                got.append(ev.job_id)
                release.wait(10)  # a slow consumer: it takes the next event only once released
        except Ended as exc:
            ended.append(exc)

    def event(k: int) -> Transition:
        return Transition(float(k), f"j{k}", None, JobState.PENDING, (), 0.0, "submitted")

    consumer = threading.Thread(target=consume)
    consumer.start()
    while not server.watchers:
        time.sleep(0.01)
    server._broadcast(event(0))  # taken at once: the consumer then waits
    while not got:
        time.sleep(0.01)
    for k in range(1, 10):  # 1, 2 and 3 fill the queue; 4 on are missed
        server._broadcast(event(k))
    release.set()
    consumer.join(10)
    assert got == ["j0", "j1", "j2", "j3"]
    (exc,) = ended
    assert exc.args[0] == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "fell 3 events behind: events from t=4.000 s on were not sent" in exc.args[1]
    assert not server.watchers  # the stream's queue is gone with it


def test_a_job_accepted_before_every_agent_was_lost_waits_for_hosts_instead_of_failing(unstarted) -> None:
    """Accepted while its agent was silent, taken in after the agent was declared lost: with no host left it was
    judged against none and failed ("memory: 0.05 per task is more than any host has (0.0)"; live check). It waits,
    shown pending, and is taken in once hosts register; a submission with no host is refused as before."""
    s = unstarted
    spec = pb.JobSpec(tasks=1, cpu_need=0.5, memory=0.05, work_seconds=10.0, workload="modeled")
    (result,) = s.accept([pb.SubmitRequest(spec=spec)])
    job = result.job.job_id
    s.lose_agent("a0", "silent for 3 heartbeats")
    s.drain()
    assert s.lookup(job).state is JobState.PENDING and not s.lookup(job).message
    assert job not in s.engine.jobs and s.board.get(job).state is JobState.PENDING
    (refused,) = s.accept([pb.SubmitRequest(spec=spec)])
    assert refused.code == grpc.StatusCode.UNAVAILABLE.value[0]
    desc = agent_pb2.DescribeReply(agent_id="a0", mode="cgroup-v1", hosts=[
        agent_pb2.HostInfo(name="a0-h0", cpu_cores=0.5, memory_bytes=1 << 30)])
    CoordinatorServicer(s).RegisterAgent(pb.RegisterAgentRequest(address="127.0.0.1:1", description=desc), LocalCall())
    s.drain()
    assert s.engine.jobs[job].state is JobState.PENDING and job not in s.intake


def test_a_running_job_whose_tasks_the_backend_no_longer_lists_shows_its_recorded_virtual_time(unstarted) -> None:
    """While its requeue is under way (its task list dropped, its slow Stops not yet through), a running job's
    virtual time read 0 in ``vcemu jobs`` (16.40, 0.0, 0.0, then pending at 16.40; live check): the record's now."""
    from coordinator.engine import JobRecord
    from coordinator.model import JobSpec

    s = unstarted
    rec = JobRecord(JobSpec("job-00001", 0.0, 1, 0.5, 0.1, 100.0, "modeled"), JobState.RUNNING, ("a0-h0",), 0.5, 16.4)
    s.engine.restore([rec])
    assert s.backend.progress_seen("job-00001") == {}
    servicer = CoordinatorServicer(s)
    assert servicer.GetJob(pb.JobRef(job_id="job-00001"), None).virtual_time == pytest.approx(16.4)
    (listed,) = servicer.ListJobs(pb.ListJobsRequest(), None).jobs
    assert listed.virtual_time == pytest.approx(16.4)


@pytest.mark.parametrize(("bind", "warned"), [("0.0.0.0", True), ("127.0.0.1", False)])
def test_a_token_without_tls_off_loopback_warns_that_it_travels_in_clear_text(bind, warned, caplog):
    """With --token-file and no TLS, the token guards the coordinator and its agents' APIs but crosses the
    network in clear text: a coordinator listening beyond this machine says so when it starts."""
    from vcemu.ports import is_loopback

    with caplog.at_level("WARNING", logger="vcemu.coordinator"):
        s = CoordinatorServer(get_policy("greedy"), port=0, bind=bind, token="t0ken")
        s.stop()
    said = [r.getMessage() for r in caplog.records if "travels in clear text" in r.getMessage()]
    assert bool(said) is warned, said
    assert [is_loopback(b) for b in ("127.0.0.1", "127.5.0.1", "::1", "[::1]", "localhost", "0.0.0.0", "10.0.0.2",
                                   "node7")] == [True, True, True, True, True, False, False, False]


@pytest.mark.parametrize(("bind", "token", "warned"), [("0.0.0.0", None, True), ("127.0.0.1", None, False),
                                                      ("0.0.0.0", "t0ken", False)])
def test_an_open_coordinator_off_loopback_warns_that_anyone_can_use_it(bind, token, warned, caplog):
    """Security review: a coordinator listening beyond this machine with neither token nor TLS started without a
    word (anyone reaching it could submit, cancel and register agents it then dials)."""
    with caplog.at_level("WARNING", logger="vcemu.coordinator"):
        s = CoordinatorServer(get_policy("greedy"), port=0, bind=bind, token=token)
        s.stop()
    said = [r.getMessage() for r in caplog.records if "with neither --token-file nor TLS" in r.getMessage()]
    assert bool(said) is warned, said


def test_an_empty_id_is_a_bad_request_not_an_unknown_one(stub):
    """API review: GetJob and Cancel of '' answered NOT_FOUND "no job ''", a Heartbeat of '' known = false."""
    for call, request in ((stub.GetJob, pb.JobRef()), (stub.Cancel, pb.JobRef()),
                          (stub.Heartbeat, pb.HeartbeatRequest())):
        with pytest.raises(grpc.RpcError) as info:
            call(request, timeout=5)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "required" in info.value.details()


def test_without_tls_an_agent_registers_only_with_the_coordinators_token():
    """API review: with --token-file and no TLS a rogue agent registered without the token and was given a job. The
    agents' calls want the token too; ``vcemu agent --token-file`` (and the agents ``vcemu up`` starts) send it. Under
    mutual TLS the agents' certificates authenticate them, as before."""
    from node_agent.agent import AgentCore, HostSpec
    from node_agent.dutycycle import DutyCycleDriver
    from node_agent.register import Registrar
    from node_agent.server import RunningAgent
    from vcemu.v1 import agent_pb2

    s = CoordinatorServer(get_policy("greedy"), port=0, token="t0ken").start()
    try:
        d = agent_pb2.DescribeReply(agent_id="rogue", mode="cgroup-v1",
                                    hosts=[agent_pb2.HostInfo(name="rogue-h0", cpu_cores=1.0, memory_bytes=1 << 30)])
        with grpc.insecure_channel(s.address) as ch:
            stub = pb_grpc.CoordinatorStub(ch)
            with pytest.raises(grpc.RpcError) as info:
                stub.RegisterAgent(pb.RegisterAgentRequest(address="127.0.0.1:1", description=d), timeout=5)
            assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert not s.backend.agents
        core = AgentCore("tokened", [HostSpec("h0", 1.0, 1 << 30)], DutyCycleDriver(), {})
        agent = RunningAgent.__new__(RunningAgent)
        agent.core = core
        try:
            wrong = Registrar(agent, s.address, "127.0.0.1:1", token="not-it")
            assert not wrong.registered.wait(1.0)
            wrong.stop()
            right = Registrar(agent, s.address, "127.0.0.1:1", token="t0ken")
            assert right.registered.wait(5.0) and "tokened" in s.backend.agents
            right.stop()
        finally:
            core.shutdown()
    finally:
        s.stop(grace=0)


def test_a_state_file_that_fails_every_turn_is_said_once_a_minute_not_twice_a_second(monkeypatch, caplog):
    """Storage-fault review: with the state file's disk full and jobs pending, every engine turn failed on the
    journal of a start (written before the StartTask), and each failure logged "engine step failed" with a 28-line
    trace, twice a second for as long as the disk stayed full (78 in 64 s). The same state-file error is said with
    its trace once a minute; another error (a bug's) every time; every failure is still counted."""
    import logging
    import sqlite3
    import threading

    server = CoordinatorServer(get_policy("greedy"), port=0)
    turns: list[int] = []
    enough = threading.Event()

    def step(until: float, budget_s: float | None = None) -> None:
        turns.append(1)
        if len(turns) == 4:
            raise ValueError("a bug")
        if len(turns) >= 7:
            enough.set()
            return
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(server.engine, "step", step)
    with caplog.at_level(logging.WARNING, logger="vcemu.coordinator"):
        server.start()
        try:
            assert enough.wait(20)
        finally:
            server.stop()
    said = [r.exc_info[1] for r in caplog.records if r.getMessage().startswith("engine step failed")]
    assert [str(e) for e in said] == ["database or disk is full", "a bug", "database or disk is full"], caplog.text
    assert server.loop_error_count == 6
