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
