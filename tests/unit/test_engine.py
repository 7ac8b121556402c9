"""The engine with the simulator backend: hand-worked runs, plan checking, safe action order."""

from collections.abc import Sequence
from dataclasses import dataclass

import pytest

from coordinator.backends.base import BackendError
from coordinator.backends.sim import SimBackend
from coordinator.engine import Engine, PolicyError, Stalled
from coordinator.metrics import job_results
from coordinator.model import JobSpec, JobState, Snapshot, Stimulus, Submit
from coordinator.plan import Move, Pause, Plan, Resume, SetShare, Start
from coordinator.policies import get_policy

from .builders import hosts, spec


def run(policy: str, jobs: Sequence[JobSpec], n_hosts: int = 1, penalty: float = 0.0):
    engine = Engine(get_policy(policy), SimBackend(penalty), hosts(n_hosts))
    return {r.job: r for r in job_results(engine.run(jobs))}


def test_two_jobs_share_one_host_fluidly():
    """A (work 10) alone for 5 s, then A and B at yield 0.5: A ends at 15, B alone again from 15 to 20."""
    r = run("greedy", [spec("a", work=10.0), spec("b", work=10.0, submit=5.0)])
    assert r["a"].flow_time == pytest.approx(15.0) and r["a"].stretch == pytest.approx(1.5)
    assert r["b"].flow_time == pytest.approx(15.0) and r["b"].end == pytest.approx(20.0)
    assert r["b"].final_yield == pytest.approx(1.0)  # raised again once A is gone


def test_fcfs_runs_jobs_one_after_the_other():
    r = run("fcfs", [spec("a", work=10.0), spec("b", work=10.0, submit=5.0)])
    assert (r["a"].end, r["b"].start, r["b"].end) == (10.0, 10.0, 20.0)
    assert r["b"].wait == 5.0


def test_greedy_backoff_delays_a_job_that_does_not_fit():
    """B needs memory A holds: tried at 0 (fail, retry in 2 s), at 2 (fail, 4 s), at 6 (fail, 8 s), at 14."""
    r = run("greedy", [spec("a", mem=0.8, work=10.0), spec("b", mem=0.5, work=10.0)])
    assert r["b"].start == pytest.approx(14.0)
    assert r["b"].end == pytest.approx(24.0)


def test_runs_are_deterministic():
    jobs = [spec(f"j{i}", tasks=1 + i % 3, need=0.25 if i % 3 == 0 else 1.0, mem=0.3, work=20.0 + i,
                 submit=5.0 * i) for i in range(12)]
    e1, e2 = (Engine(get_policy("greedy"), SimBackend(), hosts(4)) for _ in range(2))
    assert e1.run(jobs).transitions == e2.run(jobs).transitions


def test_rescheduling_penalty_stops_progress_after_a_resume():
    sim = SimBackend(penalty=5.0)
    job = spec("a", work=10.0)
    sim.start(job, ["h0"], 1.0)
    sim.advance(4.0)
    sim.pause("a")
    sim.resume("a", ["h0"], 1.0)
    (done,) = sim.advance(100.0)
    assert done.job == "a" and sim.now() == pytest.approx(4.0 + 5.0 + 6.0)


@dataclass(frozen=True)
class Scripted:
    """A test policy returning a fixed plan for every submission."""

    plan: Plan
    name: str = "scripted"
    period: float | None = None

    def decide(self, snap: Snapshot, stim: Stimulus) -> Plan:
        return self.plan if isinstance(stim, Submit) and stim.job == "b" else Plan()


def test_a_plan_that_overcommits_a_host_is_refused():
    engine = Engine(Scripted(Plan((Start("b", ("h0",), 1.0),))), SimBackend(), hosts(1))
    engine.arrive(spec("a"))
    engine.apply(Plan((Start("a", ("h0",), 0.5),)))
    engine.arrive(spec("b"))
    with pytest.raises(PolicyError, match="h0 over capacity"):
        engine.step()


class RecordingSim(SimBackend):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def start(self, spec, hosts, cpu, progress=0.0):
        self.calls.append(f"start {spec.id}")
        super().start(spec, hosts, cpu, progress)

    def set_share(self, job, cpu):
        self.calls.append(f"share {job} {cpu}")
        super().set_share(job, cpu)


def test_releases_are_applied_before_acquisitions():
    """The policy lists the Start first; the engine lowers A's share before starting B."""
    backend = RecordingSim()
    engine = Engine(Scripted(Plan((Start("b", ("h0",), 0.5), SetShare("a", 0.5)))), backend, hosts(1))
    engine.arrive(spec("a"))
    engine.apply(Plan((Start("a", ("h0",), 1.0),)))
    engine.arrive(spec("b"))
    engine.step()
    assert backend.calls == ["start a", "share a 0.5", "start b"]
    assert engine.jobs["b"].state is JobState.RUNNING


def test_a_job_that_can_never_run_is_reported_not_looped_on():
    engine = Engine(Scripted(Plan()), SimBackend(), hosts(1))
    with pytest.raises(Stalled, match="a"):
        engine.run([spec("a")])


def test_cancel_frees_the_host_for_the_others():
    engine = Engine(get_policy("greedy"), SimBackend(), hosts(1))
    engine.arrive(spec("a", work=10.0))
    engine.arrive(spec("b", work=10.0))
    engine.step(0.0)
    assert engine.jobs["a"].cpu == pytest.approx(0.5)
    engine.cancel("a")
    engine.step(0.0)
    assert engine.jobs["a"].state is JobState.CANCELLED
    assert engine.jobs["b"].cpu == pytest.approx(1.0)
    # A finished job keeps the hosts it last ran on, for the record (the API's Job.hosts says so), and no share.
    assert engine.jobs["a"].hosts == ("h0",) and engine.jobs["a"].cpu == 0.0


def test_a_running_job_cancelled_or_failed_keeps_the_virtual_time_it_had_reached():
    """Greedy decides at submissions and completions only, so a running job's record holds the virtual time of its
    last decision (0 here); a cancelled 4 s in, and b failed 6 s in, both at yield 1, each keep what they did."""
    engine = Engine(get_policy("greedy"), SimBackend(), hosts(2))
    engine.arrive(spec("a", work=10.0))
    engine.step(0.0)
    engine.step(4.0)
    assert engine.jobs["a"].vt == 0.0  # (no decision since its start)
    engine.cancel("a")
    assert engine.jobs["a"].state is JobState.CANCELLED and engine.jobs["a"].vt == pytest.approx(4.0)
    engine.arrive(spec("b", work=10.0, need=0.5))
    engine.step(4.0)
    engine.step(10.0)
    engine._fail(engine.jobs["b"], "its task was killed")
    assert engine.jobs["b"].state is JobState.FAILED and engine.jobs["b"].vt == pytest.approx(6.0)


def test_jobs_ending_at_the_same_instant_are_all_finished_before_the_policy_reacts():
    """a and b end together at t=10; the plan for a's completion must not touch b (it would fail)."""
    r = run("greedy", [spec("a", work=10.0, need=0.5), spec("b", work=10.0, need=0.5), spec("c", work=30.0)],
            n_hosts=1)
    assert {j: r[j].state for j in "abc"} == {j: JobState.DONE for j in "abc"}
    assert r["a"].end == r["b"].end


def test_a_cancelled_jobs_pending_timer_is_ignored():
    """GREEDY defers b (no memory), then b is cancelled: its backoff Tick must not reach the policy."""
    engine = Engine(get_policy("greedy"), SimBackend(), hosts(1))
    history = engine.run([spec("a", mem=0.8, work=10.0), spec("b", mem=0.5, work=10.0)], until=1.0)
    assert engine.jobs["b"].attempts == 1
    engine.cancel("b")
    engine.run()
    assert engine.jobs["a"].state is JobState.DONE and engine.jobs["b"].state is JobState.CANCELLED
    assert history.transitions[-1].job == "a"


def test_batch_policies_refuse_jobs_wider_than_the_cluster():
    from coordinator.model import InvalidJob

    engine = Engine(get_policy("fcfs"), SimBackend(), hosts(2))
    with pytest.raises(InvalidJob) as err:
        engine.arrive(spec("wide", tasks=3, mem=0.1))
    assert err.value.field == "tasks" and "whole nodes" in str(err.value)
    Engine(get_policy("greedy"), SimBackend(), hosts(2)).arrive(spec("wide", tasks=3, mem=0.1))  # shares nodes


class _TickingSim(SimBackend):
    """A simulator whose clock moves a little at every read, as a live backend's does between actions."""

    def now(self) -> float:
        self._drift = getattr(self, "_drift", 0.0) + 0.001
        return super().now() + self._drift


def test_one_plan_is_one_instant_so_a_pause_and_resume_elsewhere_is_a_migration():
    from coordinator.plan import Pause, Resume

    engine = Engine(get_policy("greedy"), _TickingSim(), hosts(2))
    engine.arrive(spec("a", work=10.0))
    engine.apply(Plan((Start("a", ("h0",), 1.0),)))
    engine.apply(Plan((Pause("a"), Resume("a", ("h1",), 1.0))))
    ts = [t for t in engine.history.transitions if t.job == "a"]
    assert ts[-2].time == ts[-1].time  # pause and resume carry the decision's time
    (r,) = job_results(engine.history)
    assert (r.preemptions, r.migrations) == (0, 1)


def test_a_burst_of_submissions_is_one_decision_for_a_policy_that_decides_on_state():
    """FCFS declares ``decides_on_state``: 30 jobs submitted at one instant cost one decision, with the same
    schedule as deciding after each (forced here through a policy that does not declare it)."""

    @dataclass(frozen=True)
    class PerJobFcfs:
        name: str = "fcfs-per-job"
        period: float | None = None

        def decide(self, snap: Snapshot, stim: Stimulus) -> Plan:
            return get_policy("fcfs").decide(snap, stim)

    jobs = [spec(f"j{i:02d}", work=5.0 + i % 4, submit=0.0 if i < 30 else 3.0 * i) for i in range(40)]
    merged = Engine(get_policy("fcfs"), SimBackend(), hosts(4))
    single = Engine(PerJobFcfs(), SimBackend(), hosts(4))
    h1, h2 = merged.run(jobs), single.run(jobs)
    assert h1.transitions == h2.transitions
    burst = len(h2.decision_seconds) - len(h1.decision_seconds)
    # Deciding per job, the first Submit starts j00..j03 on the 4 hosts, the Submits of j01..j03 are then
    # stale (skipped), and j04..j29 each cost a decision: 27 for the burst, against 1 merged.
    assert burst == 26


def test_restored_pending_jobs_are_offered_to_the_policy_again():
    """A restarted coordinator hands its stored jobs to a fresh engine: the pending ones must be in the
    snapshot the policy sees, and run to the end (issue 7: no accepted job is lost)."""
    from coordinator.engine import JobRecord

    engine = Engine(get_policy("greedy"), SimBackend(), hosts(1))
    engine.restore([JobRecord(spec("a", work=10.0)), JobRecord(spec("b", work=10.0))])
    assert set(engine.snapshot().jobs) == {"a", "b"} and engine.unfinished == 2
    r = {x.job: x for x in job_results(engine.run())}
    assert r["a"].end == pytest.approx(20.0) and r["b"].end == pytest.approx(20.0)


class Unreachable(SimBackend):
    """A simulator whose agent does not answer the listed calls, once each (a stopped agent)."""

    def __init__(self, *calls: str) -> None:
        super().__init__()
        self.down = list(calls)

    def _maybe(self, call: str) -> None:
        if call in self.down:
            self.down.remove(call)
            raise BackendError(f"{call}: DEADLINE_EXCEEDED", unreachable=True)

    def start(self, spec, hosts, cpu, progress=0.0):  # type: ignore[no-untyped-def]
        self._maybe(f"start {spec.id}")
        super().start(spec, hosts, cpu, progress)

    def set_share(self, job, cpu):  # type: ignore[no-untyped-def]
        self._maybe(f"share {job}")
        super().set_share(job, cpu)


def test_a_start_its_agent_does_not_answer_leaves_the_job_pending_and_it_runs_later():
    """Issue 7: an unanswered StartTask says nothing against the job; it is not failed but offered again."""
    backend = Unreachable("start a")
    engine = Engine(get_policy("greedy"), backend, hosts(1))
    r = {x.job: x for x in job_results(engine.run([spec("a", work=10.0)]))}
    assert backend.down == []  # the first start was refused
    assert r["a"].state is JobState.DONE and r["a"].end == pytest.approx(10.0)
    assert [t.dst for t in engine.history.transitions if t.job == "a"] == [
        JobState.PENDING, JobState.RUNNING, JobState.DONE]


def test_an_unanswered_action_requeues_its_running_job_with_its_progress_and_its_other_actions_lapse():
    backend = Unreachable("share a")
    engine = Engine(Scripted(Plan((SetShare("a", 0.5), Start("b", ("h0",), 0.5)))), backend, hosts(1))
    engine.arrive(spec("a", work=10.0))
    engine.apply(Plan((Start("a", ("h0",), 1.0),)))
    while backend.now() < 4.0:  # a does 4 s of work
        engine.step(4.0)
    engine.arrive(spec("b", work=10.0))
    engine.step(4.0)
    a = engine.jobs["a"]
    assert a.state is JobState.PENDING and a.vt == pytest.approx(4.0) and a.hosts == ()
    assert [(t.dst.value, t.reason) for t in engine.history.transitions if t.job == "a"][-1] == (
        "pending", "setshare failed: share a: DEADLINE_EXCEEDED; requeued")
    assert engine.jobs["b"].state is JobState.RUNNING


def test_a_refused_action_still_fails_its_job():
    class Refusing(SimBackend):
        def start(self, spec, hosts, cpu, progress=0.0):  # type: ignore[no-untyped-def]
            raise BackendError("StartTask: INVALID_ARGUMENT: unknown workload")

    engine = Engine(get_policy("greedy"), Refusing(), hosts(1))
    engine.arrive(spec("a"))
    engine.step(0.0)
    assert engine.jobs["a"].state is JobState.FAILED
    assert engine.jobs["a"].message == "start failed: StartTask: INVALID_ARGUMENT: unknown workload"


def test_a_listener_reads_each_job_record_as_it_is_after_the_transition():
    """The service's store listener persists the job's record at every transition: a requeued job's row has
    no hosts and no share, and a finished job's no share, while the transitions keep where it was and what
    share it ran with."""
    engine = Engine(get_policy("greedy"), SimBackend(), hosts(1))
    rows: list[tuple[str, str, tuple[str, ...], float]] = []
    engine.listeners.append(lambda t: rows.append(
        (t.job, engine.jobs[t.job].state.value, engine.jobs[t.job].hosts, engine.jobs[t.job].cpu)))
    engine.arrive(spec("a", work=10.0))
    engine.step(0.0)
    engine.lose_hosts(["h0"], "host lost")
    assert rows[-1] == ("a", "pending", (), 0.0)
    last = engine.history.transitions[-1]
    assert (last.reason, last.hosts) == ("host lost", ("h0",))
    engine.add_hosts(hosts(1))
    engine.run()
    assert rows[-1] == ("a", "done", ("h0",), 0.0)
    last = engine.history.transitions[-1]
    assert (last.dst, last.cpu) == (JobState.DONE, 1.0)


def test_jobs_that_end_together_are_all_done_when_recording_the_first_fails():
    """Fault-injection review: a listener (the state file, full) raised on the first of four jobs that ended at
    the same instant, and the other three, already forgotten by the backend, stayed running for good. Each report
    is now handled; the error comes out once every completion has been."""
    from coordinator.model import Complete

    told = []

    class Listening:  # GREEDY, and the stimuli it is given
        name, period = "greedy", None

        def decide(self, snap, stim):
            told.append(stim)
            return greedy.decide(snap, stim)

    greedy = get_policy("greedy")
    engine = Engine(Listening(), SimBackend(), hosts(2))
    failures = []

    def full_disk(t):  # the first transition to done fails, as a store write would
        if t.dst is JobState.DONE and not failures:
            failures.append(t.job)
            raise OSError("database or disk is full")

    engine.listeners.append(full_disk)
    for s in (spec("a", work=10.0), spec("b", work=10.0)):
        engine.arrive(s)
    with pytest.raises(OSError, match="disk is full"):
        while engine.step():
            pass
    assert {j: r.state for j, r in engine.jobs.items()} == {"a": JobState.DONE, "b": JobState.DONE}
    assert [s for s in told if isinstance(s, Complete)] == [Complete("a"), Complete("b")]


def test_a_job_requeued_with_no_host_left_starts_when_a_host_returns_not_at_the_next_period():
    """Fault-injection review: under DYNMCB8-ASAP-PER, jobs requeued while every agent was lost stayed pending
    after the agents came back, until the next period (600 s) repacked them, with every host idle."""
    engine = Engine(get_policy("dynmcb8-asap-per"), SimBackend(), hosts(1))
    engine.arrive(spec("a", work=100.0))
    while engine.jobs["a"].state is not JobState.RUNNING:
        engine.step()
    engine.step(until=10.0)
    assert engine.lose_hosts(["h0"], "agent lost") == ["a"]
    engine.step(until=20.0)  # its Submit finds no host: nothing to start
    assert engine.jobs["a"].state is JobState.PENDING
    engine.add_hosts(hosts(1))  # the agent is back at t=20
    engine.step(until=21.0)
    assert engine.jobs["a"].state is JobState.RUNNING
    assert engine.backend.now() < 21.0


def test_a_completion_whose_decision_fails_does_not_keep_the_next_from_the_policy():
    """Diff review: the error of one completion's decision (its plan's journal write on a full disk) left the
    loop, and the policy never heard of the other job that ended at the same instant."""
    from coordinator.model import Complete

    told = []

    class FailsOnA:
        name, period = "greedy", None

        def decide(self, snap, stim):
            told.append(stim)
            if stim == Complete("a"):
                raise OSError("database or disk is full")
            return greedy.decide(snap, stim)

    greedy = get_policy("greedy")
    engine = Engine(FailsOnA(), SimBackend(), hosts(2))
    for s in (spec("a", work=10.0), spec("b", work=10.0)):
        engine.arrive(s)
    with pytest.raises(OSError, match="disk is full"):
        while engine.step():
            pass
    assert [s for s in told if isinstance(s, Complete)] == [Complete("a"), Complete("b")]


def test_hosts_added_offer_pending_jobs_again_only_to_a_policy_that_admits_them_between_periods():
    """Diff review: DYNMCB8-PER and -STRETCH-PER cannot start a job at a Submit: offering them each pending job
    when a host is added cost one useless decision per pending job (4,000 jobs: 2.7 s under the engine's lock)."""
    from coordinator.model import Host, Submit

    for name, offered in (("dynmcb8-per", False), ("dynmcb8-stretch-per", False), ("dynmcb8-asap-per", True)):
        engine = Engine(get_policy(name), SimBackend(), hosts(1))
        engine.arrive(spec("a"))
        engine._timers.clear()
        engine.add_hosts([Host("h1", 1.0, 1.0)])
        assert [t.payload for t in engine._timers] == ([Submit("a")] if offered else []), name


# ---- mutation review, round 3: the job state machine -------------------------------------------------


def test_cancelling_a_finished_job_changes_nothing():
    """A done job stays done: its end and its transitions are not rewritten by a late cancel."""
    engine = Engine(get_policy("greedy"), SimBackend(), hosts(1))
    engine.run([spec("a", work=10.0)])
    before = len(engine.history.transitions)
    rec = engine.cancel("a")
    assert rec.state is JobState.DONE and rec.end == pytest.approx(10.0) and rec.message == "completed"
    assert len(engine.history.transitions) == before


def test_a_completed_job_records_its_whole_work_and_its_end():
    """Greedy decides only at the start here: the record's vt (0 since then) becomes the whole work at the end."""
    engine = Engine(get_policy("greedy"), SimBackend(), hosts(1))
    engine.run([spec("a", work=10.0)])
    a = engine.jobs["a"]
    assert a.state is JobState.DONE and a.vt == pytest.approx(10.0) and a.end == pytest.approx(10.0)


def test_a_paused_job_on_a_lost_host_is_requeued_with_the_progress_it_was_paused_with():
    """a runs 4 s of its 10 at yield 1, is paused, then h0 goes: back to pending, no hosts, vt 4 kept."""
    engine = Engine(Scripted(Plan()), SimBackend(), hosts(2))
    engine.arrive(spec("a", work=10.0))
    engine.apply(Plan((Start("a", ("h0",), 1.0),)))
    while engine.backend.now() < 4.0:
        engine.step(4.0)
    engine.apply(Plan((Pause("a"),)))
    assert engine.jobs["a"].state is JobState.PAUSED
    assert engine.lose_hosts(["h0"], "agent lost") == ["a"]
    a = engine.jobs["a"]
    assert (a.state, a.hosts, a.cpu) == (JobState.PENDING, (), 0.0) and a.vt == pytest.approx(4.0)
    assert engine.history.transitions[-1].src is JobState.PAUSED


def test_a_requeued_job_is_offered_again_and_restarts_from_its_progress():
    """Greedy starts a (work 10) at 0 and does not decide again; its task is lost at 4 (vt read then: 4), the
    Submit the requeue queues restarts it at 4 with 6 left: it ends at 10, its first start still 0."""
    engine = Engine(get_policy("greedy"), SimBackend(), hosts(1))
    engine.arrive(spec("a", work=10.0))
    engine.step(0.0)
    while engine.backend.now() < 4.0:
        engine.step(4.0)
    assert engine.jobs["a"].vt == 0.0  # (no decision since its start)
    engine.requeue("a", "task lost")
    assert engine.jobs["a"].vt == pytest.approx(4.0) and engine.jobs["a"].state is JobState.PENDING
    engine.run()
    a = engine.jobs["a"]
    assert a.state is JobState.DONE and a.end == pytest.approx(10.0) and a.first_start == 0.0


def test_the_progress_kept_at_a_stop_is_never_lowered_by_a_late_report():
    """A paused job's vt (4, read when paused) is kept when the backend then reads lower (an agent reporting late)."""

    class Late(SimBackend):
        forget = False

        def progress(self, job):  # type: ignore[no-untyped-def]
            return 0.0 if self.forget else super().progress(job)

    backend = Late()
    engine = Engine(Scripted(Plan()), backend, hosts(1))
    engine.arrive(spec("a", work=10.0))
    engine.apply(Plan((Start("a", ("h0",), 1.0),)))
    while backend.now() < 4.0:
        engine.step(4.0)
    engine.apply(Plan((Pause("a"),)))
    backend.forget = True
    engine.cancel("a")
    assert engine.jobs["a"].vt == pytest.approx(4.0)


@pytest.mark.parametrize("action, match", [
    (Resume("a", ("h0",), 1.0), "Resume.* on job in state pending"),
    (Start("a", ("h0", "h1"), 1.0), "needs 1 known hosts"),
    (Start("a", ("h9",), 1.0), "needs 1 known hosts"),
    (Start("a", ("big",), 0.0), r"cpu 0.0 outside \(0, need=1.0\]"),
    (Start("a", ("big",), 1.05), r"cpu 1.05 outside \(0, need=1.0\]"),
])
def test_a_plan_inconsistent_with_the_job_is_refused(action, match):
    """Wrong state, wrong number of hosts, an unknown host, a share of 0 or above the need (on a host with room
    for it) are all refused before anything is applied."""
    from coordinator.model import Host

    engine = Engine(Scripted(Plan()), SimBackend(), (*hosts(2), Host("big", 2.0, 1.0)))
    engine.arrive(spec("a", need=1.0))
    with pytest.raises(PolicyError, match=match):
        engine.apply(Plan((action,)))
    assert engine.jobs["a"].state is JobState.PENDING


def test_a_larger_share_is_applied_after_the_moves_that_make_room_for_it():
    """a and b share h0 at 0.5; b moves to h1 and a grows to 1.0: the move comes first, then the larger share."""
    engine = Engine(Scripted(Plan()), SimBackend(), hosts(2))
    engine.arrive(spec("a"))
    engine.arrive(spec("b"))
    engine.apply(Plan((Start("a", ("h0",), 0.5), Start("b", ("h0",), 0.5))))
    plan = Plan((SetShare("a", 1.0), Move("b", ("h1",))))
    assert [type(x).__name__ for x in engine._ordered(plan)] == ["Move", "SetShare"]
    engine.apply(plan)
    assert (engine.jobs["a"].cpu, engine.jobs["b"].hosts) == (1.0, ("h1",))


def test_a_move_to_the_hosts_a_job_already_has_is_no_migration():
    engine = Engine(Scripted(Plan()), SimBackend(), hosts(2))
    engine.arrive(spec("a"))
    engine.apply(Plan((Start("a", ("h0",), 1.0),)))
    engine.apply(Plan((Move("a", ("h0",)),)))
    assert [t.reason for t in engine.history.transitions if t.job == "a"] == ["submitted", "start"]


def test_a_started_job_loses_its_note_that_it_waits_for_hosts():
    engine = Engine(Scripted(Plan()), SimBackend(), hosts(1))
    engine.arrive(spec("a"))
    engine.jobs["a"].message = Engine.WAITS + "too wide"
    engine.apply(Plan((Start("a", ("h0",), 1.0),)))
    assert engine.jobs["a"].message == ""


def test_a_step_with_a_budget_leaves_the_timers_past_it_to_the_next_steps_and_ends_the_same():
    """A live coordinator's turn takes the stimuli due for at most ``budget_s`` of wall time, so that its API threads
    get the lock between turns (a restart on 20,000 pending jobs held it for 241 s: exhaustion review). The timers
    left are taken by the next steps, in the same order: the run ends as one without a budget."""
    import time

    class Slow:
        """GREEDY, 20 ms a decision."""

        def __init__(self) -> None:
            self.inner, self.decisions = get_policy("greedy"), 0
            self.name, self.period = self.inner.name, self.inner.period

        def decide(self, snap: Snapshot, stim: Stimulus) -> Plan:
            self.decisions += 1
            time.sleep(0.02)
            return self.inner.decide(snap, stim)

    jobs = [spec(f"j{i}", need=0.25, mem=0.05, work=10.0) for i in range(12)]  # all due at 0
    plain = Engine(get_policy("greedy"), SimBackend(), hosts(2)).run(jobs).transitions
    slow = Slow()
    engine = Engine(slow, SimBackend(), hosts(2))
    engine.schedule_arrivals(jobs)
    engine.step(budget_s=0.05)
    assert 1 <= slow.decisions < 12 and engine.next_timer() == 0.0  # some taken, the rest still due at 0
    steps = 1
    while engine.step(budget_s=0.05):
        steps += 1
    assert steps > 3 and engine.history.transitions == plain
