"""``vcemu status`` straight after ``submit --file`` of 3,000 jobs showed 1,000 (live review): ClusterStatus counts
the engine's jobs only, and accepted jobs wait in the coordinator's intake until the engine loop's next turn, which
a long queue's decision delays by seconds. ClusterStatus reads the job board, where a job is put when it is
accepted (coordinator.jobboard), as ListJobs and GetJob do."""

from __future__ import annotations

from coordinator.service import CoordinatorServer, CoordinatorServicer
from vcemu.v1 import coordinator_pb2 as pb


def test_cluster_status_counts_accepted_jobs_not_yet_taken_in(unstarted: CoordinatorServer) -> None:
    spec = pb.JobSpec(tasks=1, cpu_need=0.5, memory=0.1, work_seconds=5, workload="modeled")
    results = unstarted.accept([pb.SubmitRequest(spec=spec) for _ in range(30)])
    assert all(r.code == 0 for r in results)
    reply = CoordinatorServicer(unstarted).ClusterStatus(pb.ClusterStatusRequest(), None)
    assert sum(reply.jobs_by_state.values()) == 30, dict(reply.jobs_by_state)
