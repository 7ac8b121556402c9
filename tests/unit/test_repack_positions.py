"""DYNMCB8's repacking on host positions (issue 4 benchmark, round 3) makes the very plans the name-based
route makes: the compiled plan diff against ``_moved_hosts``, and whole repackings of a real simulation."""

from __future__ import annotations

import numpy as np
import pytest

from coordinator.capacity_kernel import first_over
from coordinator.experiments import homogeneous_hosts, simulate
from coordinator.policies import dynmcb, mcb8_kernel
from coordinator.policies.dynmcb import _moved_hosts
from coordinator.policies.repack_kernel import moved_positions
from workloads.annotate import synthetic_trace

needs_numba = pytest.mark.skipif(moved_positions is None, reason="numba is not installed")


@needs_numba
def test_compiled_plan_diff_is_moved_hosts() -> None:
    assert moved_positions is not None
    rng = np.random.default_rng(5)
    nhosts = 9
    names = tuple(f"h{i}" for i in range(nhosts))
    jobs = []
    for _ in range(400):
        t = int(rng.integers(1, 12))
        cur = rng.integers(0, nhosts, t)
        kind = rng.integers(0, 3)  # same hosts, a permutation of them, or fresh ones
        new = cur.copy() if kind == 0 else rng.permutation(cur) if kind == 1 else rng.integers(0, nhosts, t)
        jobs.append((cur, new))
    cur = np.concatenate([c for c, _ in jobs]).astype(np.int64)
    new = np.concatenate([n for _, n in jobs]).astype(np.int64)
    offsets = np.concatenate(([0], np.cumsum([len(c) for c, _ in jobs]))).astype(np.int64)
    out = np.empty_like(cur)
    flags = moved_positions(cur, new, offsets, nhosts, out)
    outcomes = set()
    for i, (c, n) in enumerate(jobs):
        want = _moved_hosts(tuple(names[h] for h in c), tuple(names[h] for h in n))
        lo, hi = offsets[i], offsets[i + 1]
        got = tuple(names[h] for h in out[lo:hi]) if flags[i] else None
        assert got == want, (i, c, n)
        outcomes.add(want is None)
    assert outcomes == {True, False}  # both kinds of answer exercised


@needs_numba
@pytest.mark.parametrize(("policy", "penalty"), [("dynmcb8-asap-per", 0.0), ("dynmcb8", 300.0)])
def test_repacking_on_positions_makes_the_name_based_plan(
    monkeypatch: pytest.MonkeyPatch, policy: str, penalty: float
) -> None:
    calls = {"plans": 0, "moves": 0, "none": 0}
    fast = dynmcb.DynMcb8._yield_plan

    def both(self, snap, rp, removed):  # noqa: ANN001, ANN202
        got = fast(self, snap, rp, removed)
        result = self._yield_pack(snap, rp.kept(removed))
        if result is None:
            assert got is None
            calls["none"] += 1
        else:
            assert got == self._plan(snap, result, rp.jobs)
            calls["plans"] += 1
            calls["moves"] += sum(type(a).__name__ == "Move" for a in got)
        return got

    monkeypatch.setattr(dynmcb.DynMcb8, "_yield_plan", both)
    specs = synthetic_trace(7, 100, hosts=16, load=0.9)
    simulate(specs, policy, homogeneous_hosts(16), penalty)
    assert calls["plans"] > 50 and calls["moves"] > 20, calls


@pytest.mark.skipif(first_over is None, reason="numba is not installed")
def test_compiled_capacity_check_sums_as_bincount() -> None:
    """The engine's compiled check finds the host np.bincount's sums find over, with the very same sums."""
    assert first_over is not None
    rng = np.random.default_rng(9)
    verdicts = set()
    for _ in range(300):
        nh = int(rng.integers(1, 12))
        counts = rng.integers(1, 5, int(rng.integers(0, 10))).astype(np.int64)
        at = rng.integers(0, nh, int(counts.sum())).astype(np.int64)
        cpus, mems = rng.random(counts.size) * 0.5, rng.random(counts.size) * 0.4
        capc, capm = rng.choice([0.5, 1.0, 2.0], nh), rng.choice([1.0, 2.0], nh)
        cpu = np.bincount(at, weights=np.repeat(cpus, counts), minlength=nh)
        mem = np.bincount(at, weights=np.repeat(mems, counts), minlength=nh)
        over = np.flatnonzero((cpu > capc + 1e-6) | (mem > capm + 1e-6))
        got = first_over(at, cpus, mems, counts, capc, capm)
        want = (int(over[0]), float(cpu[over[0]]), float(mem[over[0]])) if over.size else (-1, 0.0, 0.0)
        assert got == want
        verdicts.add(got[0] >= 0)
    assert verdicts == {True, False}


def test_fast_action_constructors_build_what_the_constructors_build() -> None:
    from coordinator import plan

    made = [
        (plan.start("a", ("h0", "h1"), 0.5), plan.Start("a", ("h0", "h1"), 0.5)),
        (plan.resume("a", ("h1",), 0.25), plan.Resume("a", ("h1",), 0.25)),
        (plan.set_share("a", 0.3), plan.SetShare("a", 0.3)),
        (plan.pause("a"), plan.Pause("a")),
        (plan.move("a", ("h2", "h0")), plan.Move("a", ("h2", "h0"))),
    ]
    for fast, slow in made:
        assert type(fast) is type(slow) and fast == slow and vars(fast) == vars(slow) and hash(fast) == hash(slow)
        assert not hasattr(type(slow), "__slots__") and not hasattr(type(slow), "__post_init__")
    assert plan.start("a", ("h0",), 0.5) != plan.Start("a", ("h0",), 0.25)


def test_positions_kept_by_the_repacking_are_the_looked_up_ones() -> None:
    """The positions DYNMCB8 keeps for the hosts of the jobs it places are what a lookup would give."""
    hosts = homogeneous_hosts(16)
    simulate(synthetic_trace(7, 100, hosts=16, load=0.9), "dynmcb8-asap-per", hosts, 0.0)
    info = dynmcb._host_info(hosts)
    assert len(info.positions) > 20
    for names, got in info.positions.items():
        assert got.dtype == np.int64 and got.tolist() == [info.index[n] for n in names]


@pytest.mark.skipif(mcb8_kernel.mcb8_pack is None, reason="numba is not installed")
def test_presorted_pass_is_the_sorting_pass_also_when_rounding_ties_needs() -> None:
    """The yield search's pass takes its two lists from orders sorted once; at every yield they are the
    lists the pass that sorts gives, also when two needs one ulp apart round to one CPU requirement."""
    from coordinator.policies.mcb8_kernel import _argsort_stable, _mcb8_pack, _mcb8_pack_presorted

    rng = np.random.default_rng(11)
    collided = 0
    for _ in range(300):
        n = int(rng.integers(1, 40))
        base = rng.choice([0.3, 0.55, 0.7, 0.9], n)
        need = np.where(rng.random(n) < 0.5, np.nextafter(base, 1.0), base)  # neighbours one ulp apart
        mem = rng.choice([0.1, 0.2, 0.5, 0.8], n)
        y = float(rng.uniform(0.05, 1.0))
        c = need * y
        collided += len(set(c.tolist())) < len(set(need.tolist()))
        capc = np.ones(int(rng.integers(1, 12)))
        capm = np.ones(capc.shape[0])
        a, b = np.full(n, -1, dtype=np.int64), np.full(n, -1, dtype=np.int64)
        ok_a = _mcb8_pack(c, mem, capc, capm, a)
        ok_b = _mcb8_pack_presorted(c, mem, _argsort_stable(-need), _argsort_stable(-mem), capc, capm, b)
        assert ok_a == ok_b and a.tolist() == b.tolist()
    assert collided > 20  # the tie case was exercised
