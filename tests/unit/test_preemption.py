"""GREEDY-PMTN, GREEDY-PMTN-MIGR (001 Sec. III-A) and EASY (001 Sec. IV-B): exact plans."""

from dataclasses import replace

from coordinator.model import Complete, JobState, JobView, Submit
from coordinator.plan import Pause, Resume, SetShare, Start
from coordinator.policies import get_policy

from .builders import hosts, pending, running, snap, spec
from .test_policies import assert_plan

NOW = 100.0


def ran(job, on, cpu, vt):
    """A running job submitted at 0 with ``vt`` seconds of virtual time by NOW: priority max(30, 100)/vt^2."""
    return running(job, on, cpu, vt)


class TestGreedyPmtn:
    def test_the_lowest_priority_job_is_paused_to_admit_a_new_one(self):
        a = ran(spec("a", mem=0.6), ("h0",), 0.5, vt=50.0)  # priority 100/2500 = 0.04
        b = ran(spec("b", mem=0.3), ("h0",), 0.5, vt=10.0)  # priority 100/100 = 1
        c = pending(spec("c", mem=0.5, submit=NOW))
        plan = get_policy("greedy-pmtn").decide(snap(NOW, hosts(1), a, b, c), Submit("c"))
        assert_plan(plan, [Pause("a"), Start("c", ("h0",), 0.5)])  # b keeps yield 0.5

    def test_marked_jobs_that_memory_allows_are_left_running(self):
        """Marking in increasing priority takes a then b; revisiting in decreasing priority, b must go
        but a (0.2) can stay, since pausing b alone frees the 0.6 that c needs."""
        a = ran(spec("a", mem=0.2, need=0.25), ("h0",), 0.25, vt=50.0)  # 0.04
        b = ran(spec("b", mem=0.6, need=0.25), ("h0",), 0.25, vt=20.0)  # 0.25
        d = ran(spec("d", mem=0.2, need=0.25), ("h0",), 0.25, vt=5.0)  # 4
        c = pending(spec("c", mem=0.6, need=0.25, submit=NOW))
        plan = get_policy("greedy-pmtn").decide(snap(NOW, hosts(1), a, b, d, c), Submit("c"))
        assert_plan(plan, [Pause("b"), Start("c", ("h0",), 0.25)])

    def test_paused_jobs_are_resumed_when_room_appears(self):
        a = JobView(spec("a", mem=0.6, need=0.5), JobState.PAUSED, ("h0",), 0.0, 20.0, 0, 0.0)
        plan = get_policy("greedy-pmtn").decide(snap(NOW, hosts(1), a), Complete("x"))
        assert_plan(plan, [Resume("a", ("h0",), 0.5)])

    def test_resumes_go_in_decreasing_priority(self):
        old = JobView(spec("old", mem=0.6), JobState.PAUSED, ("h0",), 0.0, 50.0, 0, 0.0)  # 0.04
        young = JobView(spec("young", mem=0.6), JobState.PAUSED, ("h0",), 0.0, 5.0, 0, 0.0)  # 4
        plan = get_policy("greedy-pmtn").decide(snap(NOW, hosts(1), old, young), Complete("x"))
        assert_plan(plan, [Resume("young", ("h0",), 1.0)])

    def test_without_migration_a_victim_waits_for_a_later_event(self):
        a = ran(spec("a", mem=0.6), ("h0",), 1.0, vt=50.0)
        b = ran(spec("b", mem=0.3), ("h1",), 1.0, vt=10.0)
        c = pending(spec("c", mem=0.8, submit=NOW))
        plan = get_policy("greedy-pmtn").decide(snap(NOW, hosts(2), a, b, c), Submit("c"))
        assert_plan(plan, [Pause("a"), Start("c", ("h0",), 1.0)])


class TestGreedyPmtnMigr:
    def test_a_victim_is_resumed_elsewhere_in_the_same_event(self):
        """a is paused to make room for c on h0, then resumed on h1 beside b: Λ(h1) = 2, so a and b get
        yield 0.5 while c, alone on h0, is raised back to 1 by the average-yield heuristic."""
        a = ran(spec("a", mem=0.6), ("h0",), 1.0, vt=50.0)
        b = ran(spec("b", mem=0.3), ("h1",), 1.0, vt=10.0)
        c = pending(spec("c", mem=0.8, submit=NOW))
        plan = get_policy("greedy-pmtn-migr").decide(snap(NOW, hosts(2), a, b, c), Submit("c"))
        assert_plan(plan, [Pause("a"), SetShare("b", 0.5), Start("c", ("h0",), 1.0), Resume("a", ("h1",), 0.5)])


class TestEasy:
    def _state(self, head_tasks: int):
        r = replace(running(spec("r", tasks=2, work=100.0), ("h0", "h1"), 1.0), first_start=0.0)
        queue = [
            pending(spec("A", tasks=head_tasks, work=10.0, submit=1.0)),
            pending(spec("B", work=50.0, submit=2.0)),
            pending(spec("C", work=200.0, submit=3.0)),
            pending(spec("D", work=80.0, submit=4.0)),
        ]
        return snap(10.0, hosts(4), r, *queue)

    def test_short_jobs_backfill_before_the_heads_reservation(self):
        # A needs all 4 nodes at t=100 when r ends; B (ends 60) and D (ends 90) fit before; C would delay A.
        assert_plan(get_policy("easy").decide(self._state(4), Submit("D")),
                    [Start("B", ("h2",), 1.0), Start("D", ("h3",), 1.0)])

    def test_long_jobs_backfill_on_nodes_the_head_leaves_over(self):
        # A needs 3 of the 4 nodes at t=100: one node is spare, so the long C may take it.
        assert_plan(get_policy("easy").decide(self._state(3), Submit("D")),
                    [Start("B", ("h2",), 1.0), Start("C", ("h3",), 1.0)])

    def test_fcfs_would_start_nothing_here(self):
        assert_plan(get_policy("fcfs").decide(self._state(4), Submit("D")), [])


# ---- added by the second mutation review: which jobs GREEDY-PMTN pauses (001 Sec. III-A), hand-worked ----------


def test_greedy_pmtn_equal_priorities_pause_the_later_submitted_job_first() -> None:
    """001 Sec. III-A: a and b both have priority max(30, flow)/vt^2 = 30/100 (flows 20 and 10 are bounded at
    30); the tie goes to the later-submitted b, which is marked first and is enough for c: b is paused, not a."""
    a = ran(spec("a", mem=0.5, need=0.5, submit=80.0), ("h0",), 0.5, vt=10.0)
    b = ran(spec("b", mem=0.5, need=0.5, submit=90.0), ("h0",), 0.5, vt=10.0)
    c = pending(spec("c", mem=0.5, need=0.5, submit=NOW))
    plan = get_policy("greedy-pmtn").decide(snap(NOW, hosts(1), a, b, c), Submit("c"))
    assert_plan(plan, [Pause("b"), Start("c", ("h0",), 0.5)])


def test_greedy_pmtn_reconsiders_marked_jobs_in_decreasing_priority() -> None:
    """001 Sec. III-A: marked in increasing priority a (0.04), b (0.25), d (1) until c (memory 0.375) fits. Both
    {a, d} and {b, d} free 0.375, so the order of the second pass decides: in decreasing priority b is tried
    first and stays running (pausing a and d suffices); trying a first would keep a and pause b instead.
    Then b, x and c share h0 at load 0.75: everyone keeps yield 1."""
    a = ran(spec("a", mem=0.125, need=0.25), ("h0",), 0.25, vt=50.0)  # 100/2500 = 0.04
    b = ran(spec("b", mem=0.125, need=0.25), ("h0",), 0.25, vt=20.0)  # 100/400 = 0.25
    d = ran(spec("d", mem=0.25, need=0.25), ("h0",), 0.25, vt=10.0)  # 100/100 = 1
    x = ran(spec("x", mem=0.5, need=0.25), ("h0",), 0.25, vt=5.0)  # 100/25 = 4
    c = pending(spec("c", mem=0.375, need=0.25, submit=NOW))
    plan = get_policy("greedy-pmtn").decide(snap(NOW, hosts(1), a, b, d, x, c), Submit("c"))
    assert_plan(plan, [Pause("a"), Pause("d"), Start("c", ("h0",), 0.25)])


def test_greedy_pmtn_sends_a_small_share_change_to_a_job_it_keeps_running() -> None:
    """a (need 0.5) runs at 0.45 of h0, below the yield 1 it may have once alone; admitting c on the idle h1
    reshares every running job, and a's change of 0.05 is sent (any change above rounding is)."""
    a = ran(spec("a", mem=0.5, need=0.5), ("h0",), 0.45, vt=10.0)
    c = pending(spec("c", mem=0.5, need=0.5, submit=NOW))
    plan = get_policy("greedy-pmtn").decide(snap(NOW, hosts(2), a, c), Submit("c"))
    assert_plan(plan, [SetShare("a", 0.5), Start("c", ("h1",), 0.5)])
