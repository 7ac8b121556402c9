"""DYNMCB8 and its periodic variants (001 Sec. III-B) on hand-worked states."""

import pytest

from coordinator.model import Complete, Submit, Tick
from coordinator.plan import Pause, Plan, SetShare, Start
from coordinator.policies import get_policy

from .builders import hosts, pending, running, snap, spec
from .test_policies import assert_plan

NOW = 100.0


def test_repacking_keeps_running_tasks_where_they_are():
    """MCB8 would number the hosts its own way; relabelling leaves a on h1 and puts b on h0."""
    a = running(spec("a", mem=0.6), ("h1",), 1.0, vt=50.0)
    b = pending(spec("b", mem=0.6, submit=NOW))
    assert_plan(get_policy("dynmcb8").decide(snap(NOW, hosts(2), a, b), Submit("b")), [Start("b", ("h0",), 1.0)])


def test_lowest_priority_job_is_removed_when_nothing_packs():
    """One host, two tasks of memory 0.6: no yield packs both. a (priority 100/50²) goes, b (∞) runs."""
    a = running(spec("a", mem=0.6), ("h0",), 1.0, vt=50.0)
    b = pending(spec("b", mem=0.6, submit=NOW))
    assert_plan(get_policy("dynmcb8").decide(snap(NOW, hosts(1), a, b), Submit("b")),
                [Pause("a"), Start("b", ("h0",), 1.0)])


def test_max_min_yield_on_a_shared_host():
    a = running(spec("a", need=1.0), ("h0",), 1.0, vt=50.0)
    b = pending(spec("b", need=1.0, submit=NOW))
    plan = get_policy("dynmcb8").decide(snap(NOW, hosts(1), a, b), Submit("b"))
    assert [type(x) for x in plan.actions] == [SetShare, Start]
    assert plan.actions[0].cpu == pytest.approx(0.5, abs=0.01)  # the yield search's accuracy
    assert plan.actions[1].cpu == pytest.approx(0.5, abs=0.01)
    assert plan.actions[0].cpu + plan.actions[1].cpu <= 1.0 + 1e-9


def test_periodic_variant_waits_for_its_period():
    a = running(spec("a", mem=0.3), ("h0",), 1.0, vt=50.0)
    b = pending(spec("b", mem=0.3, submit=NOW))
    per = get_policy("dynmcb8-per")
    assert per.period == 600.0
    assert per.decide(snap(NOW, hosts(2), a, b), Submit("b")) == Plan()
    assert per.decide(snap(NOW, hosts(2), a, b), Complete("x")) == Plan()
    assert_plan(per.decide(snap(NOW, hosts(2), a, b), Tick()), [Start("b", ("h1",), 1.0)])


def test_asap_variant_starts_a_job_that_fits_at_once_and_never_preempts():
    a = running(spec("a", mem=0.6), ("h0",), 1.0, vt=50.0)
    asap = get_policy("dynmcb8-asap-per")
    fits = pending(spec("b", mem=0.3, submit=NOW))
    assert_plan(asap.decide(snap(NOW, hosts(2), a, fits), Submit("b")), [Start("b", ("h1",), 1.0)])
    too_big = pending(spec("c", mem=0.6, submit=NOW))
    assert asap.decide(snap(NOW, hosts(1), a, too_big), Submit("c")) == Plan()


def test_stretch_variant_equalises_the_estimated_stretch():
    """a (vt 90) and b (vt 10), both flow 100, share one host for T = 600 s. Equal estimated stretch
    700/(90 + 600 y_a) = 700/(10 + 600 y_b) with y_a + y_b = 1 gives y_a = 13/30, y_b = 17/30, Ŝ = 2."""
    a = running(spec("a", need=1.0), ("h0",), 0.5, vt=90.0)
    b = running(spec("b", need=1.0), ("h0",), 0.5, vt=10.0)
    plan = get_policy("dynmcb8-stretch-per").decide(snap(NOW, hosts(1), a, b), Tick())
    cpus = {x.job: x.cpu for x in plan.actions}
    assert cpus["a"] == pytest.approx(13 / 30, abs=0.01)
    assert cpus["b"] == pytest.approx(17 / 30, abs=0.01)
    assert cpus["a"] + cpus["b"] == pytest.approx(1.0)  # spare CPU is handed out, none wasted


# ---- added by the second mutation review (001 Sec. III-B), hand-worked ----------------------------------------------


@pytest.mark.parametrize("compiled", [True, False])
def test_asap_admission_takes_max_min_over_capacity_on_unequal_hosts(compiled: bool, monkeypatch) -> None:
    """001 Sec. III-A/B: x (need 1) and y (need 0.5) load the 1-CPU host at 1.5; z's two tasks go to the idle 2-CPU
    host ((0 + 1)/2, then (1 + 1)/2, both below 2.5), which they load at 2/2 = 1. Λ = 1.5: x and y keep yield 2/3
    (no SetShare) and z, whose host has 2/3 left, is raised to 1. Taking z's absolute load 2 as Λ would give x 0.5."""
    from coordinator.model import Host
    from coordinator.policies import dynmcb

    if not compiled:
        monkeypatch.setattr(dynmcb, "greedy_admission", None)  # the Python route
    hs = (Host("small", 1.0, 1.0), Host("big", 2.0, 1.0))
    x = running(spec("x", need=1.0), ("small",), 2 / 3, vt=10.0)
    y = running(spec("y", need=0.5), ("small",), 1 / 3, vt=10.0)
    z = pending(spec("z", tasks=2, need=1.0, submit=NOW))
    plan = get_policy("dynmcb8-asap-per").decide(snap(NOW, hs, x, y, z), Submit("z"))
    assert_plan(plan, [Start("z", ("big", "big"), 1.0)])


def test_asap_starts_only_a_pending_job() -> None:
    """A Submit that reaches DYNMCB8-ASAP-PER for a job that is no longer pending (already started, or cancelled)
    starts nothing: only a new job is admitted between periods (001 Sec. III-B)."""
    from dataclasses import replace

    from coordinator.model import JobState

    b = spec("b", mem=0.3)
    asap = get_policy("dynmcb8-asap-per")
    for view in (running(b, ("h1",), 1.0, vt=5.0), replace(pending(b), state=JobState.CANCELLED)):
        assert asap.decide(snap(NOW, hosts(2), view), Submit("b")) == Plan()


def test_repacking_honours_hosts_with_less_memory_than_cpu() -> None:
    """Hosts of one CPU but half a memory: a (on h0) and b, each of memory 0.4, cannot share a host although their
    needs (0.5 each) would, so b goes to h1 at yield 1 (treating the hosts as unit hosts would put b beside a)."""
    a = running(spec("a", need=0.5, mem=0.4), ("h0",), 0.5, vt=50.0)
    b = pending(spec("b", need=0.5, mem=0.4, submit=NOW))
    plan = get_policy("dynmcb8").decide(snap(NOW, hosts(2, mem=0.5), a, b), Submit("b"))
    assert_plan(plan, [Start("b", ("h1",), 0.5)])


def test_stretch_variant_uses_its_own_period() -> None:
    """The stretch estimate looks one period T ahead (001 Sec. III-B). As in the test above but T = 300 s:
    400/(90 + 300 y_a) = 400/(10 + 300 y_b), y_a + y_b = 1 gives y_a = 11/30, y_b = 19/30 (T = 600 s: 13/30).
    The search stops within 1 % above Ŝ = 2, and the spare CPU goes to a (equal needs: the first listed), so
    y_a is in [11/30, 11/30 + 0.02]."""
    from coordinator.policies.dynmcb import dynmcb8_stretch_per

    a = running(spec("a", need=1.0), ("h0",), 0.5, vt=90.0)
    b = running(spec("b", need=1.0), ("h0",), 0.5, vt=10.0)
    plan = dynmcb8_stretch_per(300.0).decide(snap(NOW, hosts(1), a, b), Tick())
    cpus = {x.job: x.cpu for x in plan.actions}
    assert 11 / 30 - 1e-9 <= cpus["a"] <= 11 / 30 + 0.02
    assert cpus["a"] + cpus["b"] == pytest.approx(1.0)


def test_stretch_variant_keeps_a_job_that_needs_only_the_floor_yield() -> None:
    """001 Sec. III-B, flows 1000 s, T = 600: a (vt 900) would meet any stretch target at the 0.01 floor, while b
    (vt 10) needs yield 0.99 for the best Ŝ = 1600/604. Both pack at once, so no job is set aside: a keeps
    running at about 0.01-0.03 and b gets the rest. (Searching only up to a's own bound 1600/906, where b would
    need more than 1, finds no packing and would pause a.)"""
    a = running(spec("a", need=1.0, submit=0.0), ("h0",), 0.5, vt=900.0)
    b = running(spec("b", need=1.0, submit=0.0), ("h0",), 0.5, vt=10.0)
    plan = get_policy("dynmcb8-stretch-per").decide(snap(1000.0, hosts(1), a, b), Tick())
    assert [type(x) for x in plan.actions] == [SetShare, SetShare]
    cpus = {x.job: x.cpu for x in plan.actions}
    assert 0.01 <= cpus["a"] <= 0.03
    assert cpus["a"] + cpus["b"] == pytest.approx(1.0)


def test_stretch_variant_refuses_by_its_own_floor_not_the_search_accuracy() -> None:
    """DYNMCB8-STRETCH-PER never goes below yield 0.01 whatever its accuracy: 20 tasks of need 1 on one host need
    0.2 of it there and are admitted; DYNMCB8 of accuracy 0.1 would need 2 hosts' worth and refuses them."""
    from coordinator.policies.dynmcb import DynMcb8

    wide = spec("w", tasks=20, need=1.0, mem=0.001)
    assert DynMcb8(name="s", period_s=600.0, stretch=True, accuracy=0.1).refuse(wide, hosts(1)) is None
    assert DynMcb8(name="d", accuracy=0.1).refuse(wide, hosts(1)) is not None
