"""A task that vanishes from an agent that answers (the agent restarted under its id) requeues its job from its last
progress: the job's other task is stopped (no copy runs on), and the restart takes new task ids from the progress
of the slower task. This path (LiveBackend._job_reports, "vanished") is run by no unit test."""

from __future__ import annotations

from coordinator.model import JobSpec, JobState
from coordinator.plan import Plan, Start
from vcemu.v1 import agent_pb2

from .scripted_agent import TableAgent, backend_on, engine_on

TWO_TASKS = JobSpec("a", 0.0, 2, 1.0, 0.1, 10.0)


def test_a_vanished_task_requeues_its_job_from_its_progress_and_stops_the_other() -> None:
    agent = TableAgent()
    with backend_on(agent) as backend:
        engine = engine_on(backend)
        engine.arrive(TWO_TASKS)
        engine.apply(Plan([Start("a", ("h0", "h1"), 1.0)]))
        first, second = sorted(agent.tasks)  # "a/0", "a/1.1": each start takes the job's next restart count
        agent.set(first, 0.3)
        agent.set(second, 0.5)
        assert backend.poll() == []
        del agent.tasks[first]  # the agent restarted: it answers without the task
        reports = backend.poll()
        assert [(r.job, r.state) for r in reports] == [("a", JobState.PENDING)]
        assert "vanished" in reports[0].message
        for r in reports:
            engine._on_report(r)
        rec = engine.jobs["a"]
        assert rec.state is JobState.PENDING and rec.hosts == ()
        assert abs(rec.vt - 3.0) < 1e-9, rec.vt  # 0.3 of 10 s: the slower task's progress, kept
        assert agent.tasks == {}, "the job's other task runs on beside the requeued job"
        engine.apply(Plan([Start("a", ("h1", "h2"), 1.0)]))
        started = {r.task_id: r.start_progress for r in agent.started[-2:]}
        assert not {first, second} & set(started), started  # new ids
        assert all(abs(p - 0.3) < 1e-9 for p in started.values()), started
        assert all(t.state == agent_pb2.TASK_STATE_RUNNING for t in agent.tasks.values())


class _FencingAgent(TableAgent):
    """Reports its tasks fenced (its lease ran out, then was renewed); Resume answers as scripted."""

    def __init__(self) -> None:
        super().__init__()
        self.resume_code = None
        self.resumed: list[str] = []

    def Status(self, request, context):  # noqa: N802
        reply = super().Status(request, context)
        for t in reply.tasks:
            t.fenced = t.task_id not in self.resumed
        reply.lease_left = -1.0  # (none held now: a fenced task may be resumed)
        return reply

    def Resume(self, request, context):  # noqa: N802
        if self.resume_code is not None:
            context.abort(self.resume_code, "scripted")
        self.resumed.append(request.task_id)
        return super().Resume(request, context)


def test_a_fenced_task_is_resumed_and_a_refused_resume_requeues_its_job() -> None:
    import grpc

    agent = _FencingAgent()
    with backend_on(agent) as backend:
        engine = engine_on(backend)
        engine.arrive(JobSpec("b", 0.0, 1, 1.0, 0.1, 10.0))
        engine.apply(Plan([Start("b", ("h0",), 1.0)]))
        [task] = agent.tasks
        assert backend.poll() == [] and agent.resumed == [task]  # resumed, nothing reported
        agent.resumed.clear()
        agent.resume_code = grpc.StatusCode.UNAVAILABLE  # unanswered: tried again at the next poll, no report
        assert backend.poll() == []
        agent.resume_code = grpc.StatusCode.INVALID_ARGUMENT  # refused: the job is requeued from its checkpoint
        reports = backend.poll()
        assert [(r.job, r.state) for r in reports] == [("b", JobState.PENDING)], reports
        assert "refused to resume" in reports[0].message
