"""FCFS and GREEDY on hand-worked cluster states: exact expected plans (seed 001 Sec. III-A, IV-B)."""

import pytest

from coordinator.model import Complete, Submit, Tick
from coordinator.plan import Defer, Plan, SetShare, Start
from coordinator.policies import POLICIES, UnknownPolicy, get_policy
from coordinator.policies.base import max_min_yields
from coordinator.policies.batch import FCFS
from coordinator.policies.dfrs import Greedy

from .builders import hosts, pending, running, snap, spec


def assert_plan(plan: Plan, expected: list) -> None:
    """Same actions in the same order; CPU fractions compared to 1e-12."""
    assert len(plan.actions) == len(expected), plan.actions
    for got, want in zip(plan.actions, expected, strict=True):
        assert type(got) is type(want)
        for name, value in vars(want).items():
            if isinstance(value, float):
                assert getattr(got, name) == pytest.approx(value, abs=1e-12), (got, want)
            else:
                assert getattr(got, name) == value, (got, want)


class TestGreedy:
    def test_first_job_gets_the_least_loaded_hosts_at_full_yield(self):
        a = spec("a", tasks=2, need=1.0, mem=0.5)
        plan = Greedy().decide(snap(0.0, hosts(2), pending(a)), Submit("a"))
        assert_plan(plan, [Start("a", ("h0", "h1"), 1.0)])

    def test_new_job_lowers_everyone_to_one_over_max_load(self):
        """A (2 tasks, need 1) on h0,h1; B (need 0.5) ties onto h0: Λ = 1.5, yield 2/3 for all.

        h1 keeps 1/3 unused but A cannot use it: its task on h0 has no room (parallel jobs share one
        fraction, 001 Sec. II-B.1), and B sits on h0 too.
        """
        a = spec("a", tasks=2, need=1.0, mem=0.2)
        b = spec("b", need=0.5, mem=0.3, submit=1.0)
        s = snap(1.0, hosts(2), running(a, ("h0", "h1"), 1.0), pending(b))
        assert_plan(Greedy().decide(s, Submit("b")), [SetShare("a", 2 / 3), Start("b", ("h0",), 1 / 3)])

    def test_average_yield_heuristic_raises_a_job_with_room_on_all_its_hosts(self):
        """A (need 1) on h0, B (need 0.5) on h1; C (need 1) goes to h1 (load 0.5 < 1).

        Λ = 1.5 on h1 gives yield 2/3 to all; h0 then has 1/3 free and A is alone there, so the
        heuristic raises A back to yield 1 (no SetShare for A: its fraction is unchanged).
        """
        a = spec("a", need=1.0)
        b = spec("b", need=0.5)
        c = spec("c", need=1.0, submit=2.0)
        s = snap(2.0, hosts(2), running(a, ("h0",), 1.0), running(b, ("h1",), 0.5), pending(c))
        assert_plan(Greedy().decide(s, Submit("c")), [SetShare("b", 1 / 3), Start("c", ("h1",), 2 / 3)])

    def test_heuristic_serves_the_job_with_the_lowest_total_need_first(self):
        """z (2 tasks, need 1) on h0,h1 and w (need 1) on h1 make Λ = 2: base yield 0.5 for all.

        h0 then has 1 - (0.5 + 0.4*0.5 + 0.2*0.5) = 0.2 free, wanted by x (need 0.4) and y (need 0.2);
        z cannot rise (h1 is full). y has the lower total need, so it is raised first, to yield 1
        (+0.1), and x gets what is left: yield 0.5 + 0.1/0.4 = 0.75. Serving x first would instead
        give x yield 1 and leave y at 0.5.
        """
        sp = {j.id: j for j in (spec("z", tasks=2, need=1.0), spec("w", need=1.0), spec("x", need=0.4),
                                spec("y", need=0.2))}
        placements = {"z": ("h0", "h1"), "w": ("h1",), "x": ("h0",), "y": ("h0",)}
        cpus = max_min_yields(placements, sp, hosts(2))
        assert cpus == pytest.approx({"z": 0.5, "w": 0.5, "x": 0.4 * 0.75, "y": 0.2})

    @pytest.mark.parametrize(("attempts", "delay"), [(0, 2.0), (3, 16.0), (11, 4096.0), (40, 4096.0)])
    def test_job_that_does_not_fit_backs_off_exponentially(self, attempts, delay):
        a = spec("a", mem=0.8)
        b = spec("b", mem=0.5, submit=3.0)
        s = snap(10.0, hosts(1), running(a, ("h0",), 1.0), pending(b, attempts=attempts))
        assert_plan(Greedy().decide(s, Tick("b")), [Defer("b", 10.0 + delay)])

    def test_completion_raises_the_survivors(self):
        a = spec("a", need=0.5)
        c = spec("c", need=0.5)
        # b (need 0.5) has just completed on h0; a and c were at yield 1/1.5 there, now Λ = 1.
        s = snap(5.0, hosts(1), running(a, ("h0",), 1 / 3), running(c, ("h0",), 1 / 3))
        assert_plan(Greedy().decide(s, Complete("b")), [SetShare("a", 0.5), SetShare("c", 0.5)])


class TestFCFS:
    def test_strict_order_without_backfilling(self):
        a, b, c = spec("a", tasks=2), spec("b", tasks=2, submit=1.0), spec("c", submit=2.0)
        s = snap(2.0, hosts(3), pending(a), pending(b), pending(c))
        # a takes two whole nodes; b needs two but one is free; c would fit but must wait behind b.
        assert_plan(FCFS().decide(s, Submit("c")), [Start("a", ("h0", "h1"), 1.0)])

    def test_freed_nodes_go_to_the_queue_in_order(self):
        b, c = spec("b", tasks=2, need=0.25, submit=1.0), spec("c", submit=2.0)
        s = snap(9.0, hosts(3), pending(b), pending(c))
        assert_plan(FCFS().decide(s, Complete("a")), [Start("b", ("h0", "h1"), 0.25), Start("c", ("h2",), 1.0)])

    def test_busy_nodes_are_not_shared(self):
        a, b = spec("a", need=0.25, mem=0.1), spec("b", need=0.25, mem=0.1, submit=1.0)
        s = snap(1.0, hosts(1), running(a, ("h0",), 0.25), pending(b))
        assert_plan(FCFS().decide(s, Submit("b")), [])


def test_policy_registry():
    assert get_policy("GREEDY").name == "greedy"
    # The light name list (for the CLI's help, without the policies' imports) is the registry's, in order, and
    # each name builds the policy of that name.
    from coordinator.policy_names import POLICY_NAMES

    assert tuple(POLICIES) == POLICY_NAMES
    assert [get_policy(name).name for name in POLICY_NAMES] == list(POLICY_NAMES)
    with pytest.raises(UnknownPolicy, match="unknown policy 'nope'"):
        get_policy("nope")


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_with_every_host_lost_a_policy_starts_nothing_and_does_not_fail(name: str) -> None:
    """A live cluster can lose all its agents (hosts leave with them); the engine keeps deciding. Every
    policy must then return a plan that starts nothing: the pending jobs wait for hosts to come back."""
    a, b = spec("a"), spec("b", tasks=2)
    for stimulus in (Submit("b"), Tick()):  # (a lost host reaches a policy as a requeued job's Submit)
        plan = get_policy(name).decide(snap(100.0, (), pending(a), pending(b)), stimulus)
        assert not [act for act in plan.actions if isinstance(act, Start)], (name, stimulus, plan)


@pytest.mark.parametrize("policy", ["greedy", "greedy-pmtn", "dynmcb8-asap-per"])
@pytest.mark.parametrize("compiled", [True, False])
def test_greedy_mapping_on_unequal_hosts_puts_a_task_where_its_load_is_lowest_once_placed(
        policy: str, compiled: bool, monkeypatch) -> None:
    """A quarter-core host listed before an idle whole-core host: GREEDY took the first (both at load 0), so a need
    of 1 ran at yield 0.25 beside an idle host (a live cluster with --cpus-per-host 0.25,1). The lowest load once
    the task is added picks the large host; on equal hosts the choice is the same as before."""
    from coordinator.model import Host
    from coordinator.policies import dynmcb

    if not compiled:
        monkeypatch.setattr(dynmcb, "greedy_admission", None)  # DYNMCB8-ASAP's Python route
    unequal = (Host("small", 0.25, 1.0), Host("big", 1.0, 1.0))
    plan = get_policy(policy).decide(snap(0.0, unequal, pending(spec("a"))), Submit("a"))
    assert [(type(a), a.hosts, a.cpu) for a in plan.actions] == [(Start, ("big",), 1.0)]
    # equal hosts, the second one less loaded: the task goes there, as before
    two = hosts(2)
    busy = running(spec("b", need=0.5), ("h0",), 0.5)
    plan = get_policy(policy).decide(snap(0.0, two, busy, pending(spec("a", need=0.5))), Submit("a"))
    assert [a.hosts for a in plan.actions if isinstance(a, Start)] == [("h1",)]


@pytest.mark.parametrize("policy", ["greedy", "dynmcb8-asap-per"])
@pytest.mark.parametrize("compiled", [True, False])
def test_greedy_mapping_on_equal_hosts_is_the_lowest_load_even_where_adding_the_need_rounds_to_a_tie(
        policy: str, compiled: bool, monkeypatch) -> None:
    """Loads 0.1 + 0.2 (0.30000000000000004) and 0.3, a need of 0.7: both loads with the need are 1.0, and the tie
    went to the first host, where the load alone picks the second (diff review). The load alone breaks such ties."""
    from coordinator.policies import dynmcb

    if not compiled:
        monkeypatch.setattr(dynmcb, "greedy_admission", None)
    jobs = [running(spec("x", need=0.1), ("h0",), 0.1), running(spec("y", need=0.2), ("h0",), 0.2),
            running(spec("z", need=0.3), ("h1",), 0.3), pending(spec("a", need=0.7))]
    plan = get_policy(policy).decide(snap(0.0, hosts(2), *jobs), Submit("a"))
    assert [a.hosts for a in plan.actions if isinstance(a, Start)] == [("h1",)]


# ---- added by the mutation review: EASY backfilling's reservation (001 Sec. IV-B), hand-worked -------------------


def _easy_starts(now: float, n_hosts: int, *jobs) -> list[tuple[str, tuple[str, ...]]]:
    from coordinator.policies.batch import Easy

    plan = Easy().decide(snap(now, hosts(n_hosts), *jobs), Tick())
    return [(a.job, a.hosts) for a in plan if isinstance(a, Start)]


def _ran(job: str, on: tuple[str, ...], work: float):
    from dataclasses import replace

    return replace(running(spec(job, tasks=len(on), work=work), on, 1.0), first_start=0.0)


def test_easy_backfills_a_job_that_ends_exactly_at_the_reservation() -> None:
    """001 Sec. IV-B: a later job may start if it ends by the head's reservation (R frees 3 nodes at t=100)."""
    r = _ran("r", ("h0", "h1", "h2"), 100.0)
    head = pending(spec("head", tasks=4, submit=1.0))
    b = pending(spec("b", tasks=1, work=90.0, submit=2.0))  # 10 + 90 = 100: ends at the shadow time
    assert _easy_starts(10.0, 4, r, head, b) == [("b", ("h3",))]


def test_easy_reservation_is_the_first_time_enough_nodes_are_free() -> None:
    """Head needs 4 of 5 nodes: free at t=100 (2 free + R1's 2), not at R2's end (t=200): a 150 s job waits."""
    r1 = _ran("r1", ("h0", "h1"), 100.0)
    r2 = _ran("r2", ("h2",), 200.0)
    head = pending(spec("head", tasks=4, submit=1.0))
    b = pending(spec("b", tasks=1, work=150.0, submit=2.0))
    assert _easy_starts(0.0, 5, r1, r2, head, b) == []


def test_easy_spends_the_heads_spare_nodes_only_once() -> None:
    """Head needs 5 of 6 nodes at t=100: 1 spare. B (1 node, long) takes it; C may not, or the head waits."""
    r = _ran("r", ("h0", "h1", "h2", "h3"), 100.0)
    head = pending(spec("head", tasks=5, submit=1.0))
    b = pending(spec("b", tasks=1, work=500.0, submit=2.0))
    c = pending(spec("c", tasks=1, work=500.0, submit=3.0))
    assert _easy_starts(0.0, 6, r, head, b, c) == [("b", ("h4",))]


def test_easy_counts_every_node_of_a_job_it_just_started() -> None:
    """A starts now on 2 nodes and ends at 100: with its 2 nodes the 6-node head is reserved at t=100, so B
    (ending at 150) cannot backfill; counting A as one node would push the reservation to R's end at 200."""
    r = _ran("r", ("h6",), 200.0)
    a = pending(spec("a", tasks=2, work=100.0, submit=1.0))
    head = pending(spec("head", tasks=6, submit=2.0))
    b = pending(spec("b", tasks=1, work=150.0, submit=3.0))
    assert _easy_starts(0.0, 7, r, a, head, b) == [("a", ("h0", "h1"))]


# ---- added by the second mutation review: GREEDY's reshare, max-min on unequal hosts, memory fit, EASY estimates ----


def test_greedy_sends_a_share_change_smaller_than_a_tenth() -> None:
    """001 Sec. III-A: after b completes, a (need 0.5, at 0.45) is alone on h0 (Λ = 0.5): yield 1, a share of 0.5.
    The change is only 0.05 but must be sent, or a keeps running at 90 % of its need on an otherwise idle host."""
    a = spec("a", need=0.5)
    s = snap(5.0, hosts(1), running(a, ("h0",), 0.45))
    assert_plan(Greedy().decide(s, Complete("b")), [SetShare("a", 0.5)])


def test_max_min_yield_takes_each_hosts_load_relative_to_its_capacity() -> None:
    """001 Sec. III-A: Λ is the largest load over capacity. On a 1-CPU host x (need 1) and y (need 0.5) load it at
    1.5; on a 2-CPU host z's two tasks (need 1) load it at 2/2 = 1. So Λ = 1.5 and every job gets yield 2/3: x
    2/3, y 1/3 and z, whose host keeps 2 - 4/3 = 2/3 free, is raised to yield 1 (cpu 1). Taking the absolute
    load 2 would give Λ = 2 and leave x at yield 0.5 after y is raised."""
    from coordinator.model import Host

    hs = (Host("small", 1.0, 1.0), Host("big", 2.0, 1.0))
    sp = {j.id: j for j in (spec("x", need=1.0), spec("y", need=0.5), spec("z", tasks=2, need=1.0))}
    placements = {"x": ("small",), "y": ("small",), "z": ("big", "big")}
    assert max_min_yields(placements, sp, hs) == pytest.approx({"x": 2 / 3, "y": 1 / 3, "z": 1.0}, abs=1e-12)


def test_greedy_mapping_fills_a_hosts_memory_exactly() -> None:
    """001 Sec. II-B.1: tasks fit while their memory sums to at most the host's: two tasks of 0.5 share one host,
    twenty of 0.05 fill it although 1 - 19 * 0.05 rounds to just under 0.05, and a task of 0.4 fits beside
    tasks of 0.1, 0.2 and 0.3 although 1 - (0.1 + 0.2 + 0.3) rounds to just under 0.4."""
    from coordinator.policies.base import greedy_placement, placement_use

    one = hosts(1)
    for tasks, mem in ((2, 0.5), (20, 0.05)):
        s = spec("a", tasks=tasks, need=0.01, mem=mem)
        assert greedy_placement(s, one, placement_use(one, {}, {})) == ("h0",) * tasks
    there = {j.id: j for j in (spec("x", need=0.1, mem=0.1), spec("y", need=0.1, mem=0.2),
                               spec("z", need=0.1, mem=0.3))}
    use = placement_use(one, dict.fromkeys(there, ("h0",)), there)
    assert greedy_placement(spec("a", need=0.1, mem=0.4), one, use) == ("h0",)


def test_easy_by_default_ignores_the_users_estimates() -> None:
    """001 Sec. IV-B: EASY with perfect estimates (the default) predicts by the work: b (work 90, started at 10)
    ends at 100 = R's end, the head's reservation, and backfills, although its user asked for 200 s."""
    from dataclasses import replace

    r = _ran("r", ("h0", "h1", "h2"), 100.0)
    head = pending(spec("head", tasks=4, submit=1.0))
    b = pending(replace(spec("b", tasks=1, work=90.0, submit=2.0), estimate=200.0))
    assert _easy_starts(10.0, 4, r, head, b) == [("b", ("h3",))]


def test_easy_predicts_a_job_past_its_estimate_to_end_now() -> None:
    """EASY with user estimates: r1 (3 nodes, asked 50 s) and r2 (1 node, asked 60 s) have both run past their
    estimates at t=80, so both are predicted to end now; with the free h0 that is 5 nodes for the 4-task head,
    1 to spare, which the long b takes. Predicting them at 50 and 60 (in the past) counts r1 first: 1 + 3 = 4
    nodes, none spare, and b would wait."""
    from dataclasses import replace

    from coordinator.policies.batch import Easy

    r1 = replace(running(replace(spec("r1", tasks=3), estimate=50.0), ("h1", "h2", "h3"), 1.0), first_start=0.0)
    r2 = replace(running(replace(spec("r2"), estimate=60.0), ("h4",), 1.0), first_start=0.0)
    head = pending(spec("head", tasks=4, submit=1.0))
    b = pending(replace(spec("b", work=1000.0, submit=2.0), estimate=1000.0))
    plan = Easy(user_estimates=True).decide(snap(80.0, hosts(5), r1, r2, head, b), Tick())
    assert [(a.job, a.hosts) for a in plan if isinstance(a, Start)] == [("b", ("h0",))]


def test_adding_a_placed_job_to_the_hosts_use_gives_what_placement_use_computes_again() -> None:
    """GREEDY and GREEDY-PMTN keep the hosts' use as they place jobs (``add_use``) instead of computing it again over
    the grown placement for each candidate: the same sums in the same order, so the same floats, to the last bit."""
    import random

    from coordinator.model import Host, JobSpec
    from coordinator.policies.base import add_use, placement_use

    rng = random.Random(5)
    cluster = [Host(f"h{i}", rng.choice([0.5, 1.0, 2.0]), 1.0) for i in range(6)]
    specs = {f"j{k}": JobSpec(f"j{k}", 0.0, rng.randint(1, 3), rng.choice([0.1, 0.2, 0.3, 1 / 3]),
                              rng.choice([0.01, 0.07, 0.1]), 10.0) for k in range(40)}
    placements: dict[str, tuple[str, ...]] = {}
    use = placement_use(cluster, placements, specs)
    for job, s in specs.items():
        on = tuple(rng.choice(cluster).name for _ in range(s.tasks))
        placements[job] = on
        add_use(use, on, s)
        again = placement_use(cluster, placements, specs)
        assert {h: (u.load, u.mem) for h, u in use.items()} == {h: (u.load, u.mem) for h, u in again.items()}
