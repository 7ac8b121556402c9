"""A state file whose running job sits on a host no stored agent has (its agent was lost and dropped from the store,
the job's requeue not recorded): the restart requeues it from its journalled progress, and its request id still
names it (an idempotent resubmission gets the job back, not a second copy)."""

from __future__ import annotations

from coordinator.model import JobSpec, JobState
from coordinator.policies import get_policy
from coordinator.service import CoordinatorServer
from coordinator.store import Store, StoredTask
from vcemu.v1 import agent_pb2
from vcemu.v1 import coordinator_pb2 as pb


def test_a_running_job_on_a_host_no_agent_has_is_requeued_from_its_progress(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = str(tmp_path / "state.db")
    store = Store(path)
    spec = JobSpec(id="job-00007", submit_time=1.0, tasks=2, cpu_need=0.5, mem=0.1, work=100.0)
    store.put_job(spec, JobState.PENDING, (), 0.0, 0.0, 0, None, None, "")
    store.set_request("job-00007", "rid-7")
    store.put_job(spec, JobState.RUNNING, ("gone-h0", "gone-h1"), 0.5, 10.0, 0, 2.0, None, "")
    store.put_tasks("job-00007", 3, [StoredTask("job-00007/0.3", "gone-h0", 0.4, agent_pb2.TASK_STATE_RUNNING, False),
                                     StoredTask("job-00007/1.3", "gone-h1", 0.6, agent_pb2.TASK_STATE_RUNNING, False)])
    store.keep_reference(agent_pb2.HostInfo(name="r", cpu_cores=1.0, memory_bytes=1 << 30).SerializeToString())
    store.close()

    s = CoordinatorServer(get_policy("greedy"), port=0, state=path)  # not started: _restore ran in __init__
    try:
        rec = s.engine.jobs["job-00007"]
        assert rec.state is JobState.PENDING and rec.hosts == () and rec.cpu == 0.0
        assert rec.vt == 40.0  # the slower task's journalled progress, 0.4 of 100 s
        assert s.requests["rid-7"] == "job-00007"
        assert s.backend._restarts.get("job-00007") == 3  # its next tasks take new ids (.4 on)
        assert next(s.ids) == 8
        # the same request again: the job it made, known, not a new one
        req = pb.SubmitRequest(spec=pb.JobSpec(tasks=2, cpu_need=0.5, memory=0.1, work_seconds=100.0),
                               request_id="rid-7")
        [result] = s.accept([req])
        assert result.known and result.job.job_id == "job-00007", result
    finally:
        s.stop(grace=0)
