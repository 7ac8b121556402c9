"""Review of the short-host cordon (``Engine._visible_hosts``): a host shown with its placed tasks' memory as its
whole memory must not lead a policy to start a new task there: not in the room of a paused job (whose memory the
policies and the capacity check count as free), and not by pausing or moving what runs there (GREEDY-PMTN's victims,
DYNMCB8's repacking), which the shrunk host invited."""
from __future__ import annotations

import pytest

from coordinator.backends.sim import SimBackend
from coordinator.engine import Engine, JobRecord
from coordinator.model import Host, JobSpec, JobState, Submit
from coordinator.plan import Migrate, Move, Pause, Plan, Resume, Start
from coordinator.policies import get_policy


def _engine(policy: str) -> Engine:
    backend = SimBackend()
    backend.retry_after = 0.01  # type: ignore[attr-defined]
    return Engine(get_policy(policy), backend, [Host("h0", 1.0, 1.0), Host("h1", 1.0, 1.0)])


def _add(engine: Engine, spec: JobSpec) -> None:
    rec = engine.jobs[spec.id] = JobRecord(spec)
    engine._take(rec)
    engine.history.specs[spec.id] = spec


def _new_on(plan: Plan, host: str, besides: str) -> list:
    return [a for a in plan.actions if a.job != besides and (
        (isinstance(a, (Start, Resume, Move)) and host in a.hosts) or (isinstance(a, Migrate) and a.dst == host))]


@pytest.mark.parametrize("policy", ["greedy-pmtn", "greedy-pmtn-migr"])
def test_a_paused_jobs_room_on_a_short_host_takes_no_new_job(policy: str) -> None:
    engine = _engine(policy)
    _add(engine, JobSpec("P", 0.0, 1, 0.5, 0.5, 1000.0))
    _add(engine, JobSpec("R", 0.0, 1, 0.5, 0.9, 1000.0))
    engine.apply(Plan((Start("P", ("h0",), 0.5), Start("R", ("h1",), 0.5))))
    engine.apply(Plan((Pause("P"),)))
    engine._mark_short(["h0"], "X", "StartTask on h0: RESOURCE_EXHAUSTED")
    _add(engine, JobSpec("N", 0.0, 1, 0.5, 0.4, 10.0))
    plan = engine.policy.decide(engine.snapshot(), Submit("N"))
    assert not _new_on(plan, "h0", besides="P"), plan


@pytest.mark.parametrize("policy", ["greedy-pmtn", "greedy-pmtn-migr", "dynmcb8", "dynmcb8-asap-per-60"])
def test_a_short_host_does_not_make_a_policy_pause_or_move_what_runs_there_to_start_a_job_there(policy: str) -> None:
    """Before the cordon, B fitted beside A on h0 and started there (refused: the pre-cordon behaviour). With h0
    shown filled by A, GREEDY-PMTN paused A, a healthy running job, to start B in its room on the host that had
    just refused a start; DYNMCB8 moved A away and started B on h0."""
    for ma, mc, mb in [(0.5, 0.7, 0.4), (0.3, 0.3, 0.2), (0.5, 0.5, 0.5)]:
        engine = _engine(policy)
        _add(engine, JobSpec("A", 0.0, 1, 0.5, ma, 1000.0))
        _add(engine, JobSpec("C", 0.0, 1, 0.5, mc, 1000.0))
        engine.apply(Plan((Start("A", ("h0",), 0.5), Start("C", ("h1",), 0.5))))
        engine._mark_short(["h0"], "X", "StartTask on h0: RESOURCE_EXHAUSTED")
        engine.backend.advance(0.05)
        _add(engine, JobSpec("B", 0.05, 1, 0.5, mb, 10.0))
        plan = engine.policy.decide(engine.snapshot(), Submit("B"))
        placed_before = engine.jobs["A"].state is JobState.RUNNING
        assert placed_before
        shrunk = [h for h in engine.snapshot().hosts if h.name == "h0"]
        assert shrunk and shrunk[0].mem == 1.0, "shown shrunk to a policy that pauses or moves running jobs"
        assert not [a for a in plan.actions if isinstance(a, Pause) and a.job == "A" and
                    any(isinstance(b, Start) and "h0" in b.hosts for b in plan.actions)], (ma, mc, mb, plan)


def test_greedy_still_sees_the_short_host_filled_by_what_runs_there() -> None:
    engine = _engine("greedy")
    _add(engine, JobSpec("A", 0.0, 1, 0.5, 0.3, 1000.0))
    engine.apply(Plan((Start("A", ("h0",), 0.5),)))
    engine._mark_short(["h0", "h1"], "X", "StartTask on h0: RESOURCE_EXHAUSTED")
    assert [(h.name, h.mem) for h in engine.snapshot().hosts] == [("h0", 0.3)]
