"""MCB8's packing pass (seed 002 Sec. 3.4) compiled with numba: the same placement, ~100x faster.

Why compiled: the online DFRS policies of seed 001 Sec. III-B run MCB8's yield search (about ten
packing passes) at every rescheduling, and the pass is a loop over hosts and tasks with a data-dependent
choice at every step, which numpy cannot vectorise. In pure Python it was 40% of a 1,000-job DYNMCB8
simulation (issue 4 benchmark). numba is a PyPI wheel (no compiler needed on the installing machine)
and the compiled code is cached on disk, so only the first use in a fresh checkout pays the compile.

The pass here is the plain definition: hosts are filled one at a time; at each step the list that goes
against the host's imbalance (CPU-heavy list when more CPU than memory is left) is searched first, then
the other, for the first not yet placed task (in sorted order) whose CPU and memory requirements fit;
a list with no fitting task stays closed for the rest of that host. The Python pass in
:mod:`coordinator.policies.packing` computes the same thing with bisection and skip lists; a unit test
checks the two agree task for task, and ``mcb8_pass`` is ``None`` when numba is not installed (the
Python pass is used then).

Floating point: every comparison is ``requirement <= left + EPS`` and every update ``left -= requirement``,
in the order of the Python pass, so both produce bit-identical placements.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

EPS = 1e-9

__all__ = ["argsort_stable", "mcb8_pack", "mcb8_pass", "mcb8_removals", "mcb8_search", "min_yield", "numpy_sum"]

mcb8_pass: Callable[..., bool] | None
mcb8_pack: Callable[..., bool] | None
mcb8_removals: Callable[..., int] | None
mcb8_search: Callable[..., tuple[bool, float, int]] | None
numpy_sum: Callable[..., float] | None
argsort_stable: Callable[..., np.ndarray] | None
min_yield: Callable[..., float] | None

try:  # pragma: no branch - numba is a declared dependency; the fallback keeps a broken install usable
    from numba import njit
except ImportError:  # pragma: no cover
    mcb8_pass = mcb8_pack = mcb8_removals = mcb8_search = numpy_sum = min_yield = argsort_stable = None
else:

    @njit(cache=True, nogil=True)
    def _find(nxt: np.ndarray, p: int) -> int:
        """The first alive position >= ``p``: ``nxt`` skips placed ones (union-find, path halving)."""
        while nxt[p] != p:
            q = nxt[nxt[p]]
            nxt[p] = q
            p = q
        return p

    @njit(cache=True, nogil=True)
    def _first_fit(prim: np.ndarray, sec: np.ndarray, nxt: np.ndarray, start: int, ap: float, asec: float) -> int:
        """First alive position >= the first with ``prim <= ap + EPS`` whose ``sec <= asec + EPS``. Placed
        positions are skipped through ``nxt`` rather than tested one by one (same answer, fewer steps)."""
        n = prim.shape[0]
        lim_p = ap + EPS
        lo, hi = start, n  # prim is sorted descending: bisect for the first prim <= lim_p
        while lo < hi:
            mid = (lo + hi) // 2
            if prim[mid] <= lim_p:
                hi = mid
            else:
                lo = mid + 1
        lim_s = asec + EPS
        q = _find(nxt, lo)
        while q < n:
            if sec[q] <= lim_s:
                return q
            q = _find(nxt, q + 1)
        return -1

    @njit(cache=True, nogil=True)
    def _mcb8_pass(
        cp: np.ndarray, cs: np.ndarray, ci: np.ndarray,
        mp: np.ndarray, ms: np.ndarray, mi: np.ndarray,
        capc: np.ndarray, capm: np.ndarray, out: np.ndarray,
    ) -> bool:
        nc = cp.shape[0]
        nm = mp.shape[0]
        alive_c = np.ones(nc, dtype=np.bool_)
        alive_m = np.ones(nm, dtype=np.bool_)
        nxt_c = np.arange(nc + 1)  # nxt[p] == p: p is alive (position n: the end)
        nxt_m = np.arange(nm + 1)
        first_c = 0  # every position before first_* is placed
        first_m = 0
        placed_c = 0
        placed_m = 0
        remaining = nc + nm
        if remaining == 0:
            return True
        for h in range(capc.shape[0]):
            ac = capc[h]
            am = capm[h]
            open_c = placed_c < nc
            open_m = placed_m < nm
            while open_c or open_m:
                p = -1
                heavy = True
                if ac > am:
                    if open_c:
                        p = _first_fit(cp, cs, nxt_c, first_c, ac, am)
                        open_c = p >= 0
                    if p < 0 and open_m:
                        p = _first_fit(mp, ms, nxt_m, first_m, am, ac)
                        open_m = p >= 0
                        heavy = False
                else:
                    if open_m:
                        p = _first_fit(mp, ms, nxt_m, first_m, am, ac)
                        open_m = p >= 0
                        heavy = False
                    if p < 0 and open_c:
                        p = _first_fit(cp, cs, nxt_c, first_c, ac, am)
                        open_c = p >= 0
                        heavy = True
                if p < 0:
                    break
                if heavy:
                    alive_c[p] = False
                    nxt_c[p] = p + 1
                    placed_c += 1
                    out[ci[p]] = h
                    ac -= cp[p]
                    am -= cs[p]
                    while first_c < nc and not alive_c[first_c]:
                        first_c += 1
                    if placed_c == nc:
                        open_c = False
                else:
                    alive_m[p] = False
                    nxt_m[p] = p + 1
                    placed_m += 1
                    out[mi[p]] = h
                    am -= mp[p]
                    ac -= ms[p]
                    while first_m < nm and not alive_m[first_m]:
                        first_m += 1
                    if placed_m == nm:
                        open_m = False
                remaining -= 1
                if remaining == 0:
                    return True
        return False

    @njit(cache=True, nogil=True)
    def _argsort_stable(keys: np.ndarray) -> np.ndarray:
        """``np.argsort(keys, kind="stable")``, sorting each run of equal neighbouring keys as one element.

        Why: the packing's keys are per task, and every task of a job has its job's requirements, so a
        1,000-job simulation's arrays of ~1,200 tasks hold only ~55 runs; sorting the runs, not the tasks,
        took half of DYNMCB8's removal search. The same permutation: a stable sort keeps a run's elements
        together and in order, and puts runs of equal keys in the order of their positions, which is what
        a stable sort of the runs' keys and then listing each run's positions gives. (Keys are never NaN
        here, which no comparison sort orders consistently.)"""
        n = keys.shape[0]
        starts = np.empty(n + 1, dtype=np.int64)  # the first position of each run, then n
        r = 0
        for i in range(n):
            if i == 0 or keys[i] != keys[i - 1]:
                starts[r] = i
                r += 1
        starts[r] = n
        if r == n:  # no two equal neighbours: the runs are the elements
            return _merge_argsort(keys)
        out = np.empty(n, dtype=np.int64)
        k = 0
        for j in _merge_argsort(keys[starts[:r]]):
            for i in range(starts[j], starts[j + 1]):
                out[k] = i
                k += 1
        return out

    @njit(cache=True, nogil=True)
    def _merge_argsort(keys: np.ndarray) -> np.ndarray:
        """``np.argsort(keys, kind="stable")``: a bottom-up merge sort of positions (equal keys keep their
        order). Ours because numba's own mergesort took ~1.5 s to compile into every kernel using it."""
        n = keys.shape[0]
        idx = np.arange(n)
        tmp = np.empty(n, dtype=np.int64)
        width = 1
        while width < n:
            lo = 0
            while lo < n:
                mid = min(lo + width, n)
                hi = min(lo + 2 * width, n)
                i = lo
                j = mid
                k = lo
                while i < mid and j < hi:
                    if keys[idx[j]] < keys[idx[i]]:  # strictly smaller only: ties take the left run first
                        tmp[k] = idx[j]
                        j += 1
                    else:
                        tmp[k] = idx[i]
                        i += 1
                    k += 1
                while i < mid:
                    tmp[k] = idx[i]
                    i += 1
                    k += 1
                while j < hi:
                    tmp[k] = idx[j]
                    j += 1
                    k += 1
                lo = hi
            idx, tmp = tmp, idx
            width *= 2
        return idx

    @njit(cache=True, nogil=True)
    def _mcb8_pack(c: np.ndarray, m: np.ndarray, capc: np.ndarray, capm: np.ndarray, out: np.ndarray) -> bool:
        """The whole pass from the tasks' CPU and memory requirements: the two lists, each sorted by its
        dominant requirement descending (a stable sort, ties in task order, as ``np.lexsort`` in
        :func:`coordinator.policies.packing._pass_mcb8_py`), then :func:`_mcb8_pass`. One call per yield
        probe instead of a dozen numpy calls (their per-call cost was most of a probe)."""
        n = c.shape[0]
        prim = np.empty(n)
        sec = np.empty(n)
        nheavy = 0
        for k in range(n):
            if c[k] > m[k]:
                prim[k] = c[k]
                sec[k] = m[k]
                nheavy += 1
            else:
                prim[k] = m[k]
                sec[k] = c[k]
        order = _argsort_stable(-prim)  # stable: equal keys keep task order
        ci = np.empty(nheavy, dtype=np.int64)
        mi = np.empty(n - nheavy, dtype=np.int64)
        a = 0
        b = 0
        for q in range(n):
            k = order[q]
            if c[k] > m[k]:
                ci[a] = k
                a += 1
            else:
                mi[b] = k
                b += 1
        return _mcb8_pass(prim[ci], sec[ci], ci, prim[mi], sec[mi], mi, capc, capm, out)

    # ---- whole searches: no Python between probes ---------------------------------------------------------
    # The checks around a pass (total CPU and memory) use sums; numpy sums a float64 array pairwise, so
    # these do too, in numpy's exact order (numpy/_core/src/umath/loops_utils.h.src, pairwise_sum:
    # 8 accumulators over blocks of up to 128, halves rounded to multiples of 8), so every comparison
    # sees the very number numpy would compute. A unit test checks it against ndarray.sum.

    @njit(cache=True, nogil=True)
    def _pairwise_block(a: np.ndarray, lo: int, n: int) -> float:
        """numpy's pairwise_sum on a block of at most 128 values."""
        if n < 8:
            res = 0.0
            for i in range(lo, lo + n):
                res += a[i]
            return res
        r0 = a[lo]
        r1 = a[lo + 1]
        r2 = a[lo + 2]
        r3 = a[lo + 3]
        r4 = a[lo + 4]
        r5 = a[lo + 5]
        r6 = a[lo + 6]
        r7 = a[lo + 7]
        i = 8
        stop = n - n % 8
        while i < stop:
            r0 += a[lo + i]
            r1 += a[lo + i + 1]
            r2 += a[lo + i + 2]
            r3 += a[lo + i + 3]
            r4 += a[lo + i + 4]
            r5 += a[lo + i + 5]
            r6 += a[lo + i + 6]
            r7 += a[lo + i + 7]
            i += 8
        res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
        while i < n:
            res += a[lo + i]
            i += 1
        return res

    @njit(cache=True, nogil=True)
    def _numpy_sum(a: np.ndarray) -> float:
        """``float(a.sum())`` for a 1-d float64 array, bit for bit. numpy's recursion (a block of up to
        128 values is summed directly, a longer range is split at half its length rounded down to a
        multiple of 8, and the two sums added) on an explicit stack: numba's cache mishandles recursive
        functions (a cached recursive kernel crashed when loaded)."""
        seg_lo = np.empty(192, dtype=np.int64)
        seg_n = np.empty(192, dtype=np.int64)  # -1: add the two sums on top of the value stack
        vals = np.empty(96)
        sp = 1
        seg_lo[0] = 0
        seg_n[0] = a.shape[0]
        nv = 0
        while sp > 0:
            sp -= 1
            lo = seg_lo[sp]
            n = seg_n[sp]
            if n < 0:
                nv -= 1
                vals[nv - 1] = vals[nv - 1] + vals[nv]
            elif n <= 128:
                vals[nv] = _pairwise_block(a, lo, n)
                nv += 1
            else:
                n2 = n // 2
                n2 -= n2 % 8
                seg_n[sp] = -1
                seg_lo[sp + 1] = lo + n2
                seg_n[sp + 1] = n - n2
                seg_lo[sp + 2] = lo
                seg_n[sp + 2] = n2
                sp += 3
        return vals[0]

    @njit(cache=True, nogil=True)
    def _packs_without(
        k: int, t_need: np.ndarray, t_mem: np.ndarray, t_rank: np.ndarray, order: np.ndarray, capc: np.ndarray,
        capm: np.ndarray, cpu_total: float, mem_total: float, mem_max: float, c: np.ndarray, m: np.ndarray,
        lists: np.ndarray, idx: np.ndarray, out: np.ndarray,
    ) -> bool:
        """``mcb_pack`` at yield 1 on the tasks of rank >= ``k`` (in job order): its two cheap refusals (total
        CPU, total and largest memory), then the pass. The requirements do not depend on ``k``,
        so the two lists come from ``order``, the stable sort of all tasks, keeping the tasks of rank >=
        ``k``: a stable sort of the kept tasks would list them in that very order. The pass then writes
        each task's host at its position among all tasks (only whether it packs is used)."""
        cnt = 0
        for i in range(t_need.shape[0]):
            if t_rank[i] >= k:
                c[cnt] = t_need[i]
                m[cnt] = t_mem[i]
                cnt += 1
        if cnt == 0:
            return True
        cc = c[:cnt]
        mm = m[:cnt]
        if _numpy_sum(cc) > cpu_total + EPS * cnt:
            return False
        if _numpy_sum(mm) > mem_total + EPS:
            return False
        if not mm.max() <= mem_max + EPS:
            return False
        nc = 0
        for q in range(order.shape[0]):  # CPU-heavy list (prim = CPU) at the front of lists / idx
            t = order[q]
            if t_rank[t] >= k and t_need[t] > t_mem[t]:
                lists[0, nc] = t_need[t]
                lists[1, nc] = t_mem[t]
                idx[nc] = t
                nc += 1
        nm = 0
        for q in range(order.shape[0]):  # memory-heavy list (prim = memory) after it
            t = order[q]
            if t_rank[t] >= k and not t_need[t] > t_mem[t]:
                lists[0, nc + nm] = t_mem[t]
                lists[1, nc + nm] = t_need[t]
                idx[nc + nm] = t
                nm += 1
        return _mcb8_pass(
            lists[0, :nc], lists[1, :nc], idx[:nc], lists[0, nc : nc + nm], lists[1, nc : nc + nm],
            idx[nc : nc + nm], capc, capm, out,
        )

    @njit(cache=True, nogil=True)
    def _mcb8_removals(
        need: np.ndarray, mem: np.ndarray, rank: np.ndarray, tasks: np.ndarray, capc: np.ndarray, capm: np.ndarray,
        cpu_total: float, mem_total: float, mem_max: float,
    ) -> int:
        """DYNMCB8's removal bisection (:meth:`coordinator.policies.dynmcb.DynMcb8._removals`): the number
        ``k`` found by bisection such that the tasks of the jobs of priority rank >= ``k`` pack at the
        given (floor) CPU requirements. Per job, in submission order: a task's CPU ``need`` and memory
        ``mem``, the job's priority ``rank`` (0 lowest) and its number of ``tasks``."""
        njobs = need.shape[0]
        n = 0
        for i in range(njobs):
            n += tasks[i]
        t_need = np.empty(n)  # the tasks flattened in job order, as PackProblem.build does (np.repeat)
        t_mem = np.empty(n)
        t_rank = np.empty(n, dtype=np.int64)
        q = 0
        for i in range(njobs):
            for _ in range(tasks[i]):
                t_need[q] = need[i]
                t_mem[q] = mem[i]
                t_rank[q] = rank[i]
                q += 1
        prim = np.empty(n)  # each task's dominant requirement, as _mcb8_pack computes it
        for q in range(n):
            prim[q] = t_need[q] if t_need[q] > t_mem[q] else t_mem[q]
        order = _argsort_stable(-prim)
        c = np.empty(n)
        m = np.empty(n)
        lists = np.empty((2, n))
        idx = np.empty(n, dtype=np.int64)
        out = np.empty(n, dtype=np.int64)
        if _packs_without(0, t_need, t_mem, t_rank, order, capc, capm, cpu_total, mem_total, mem_max, c, m, lists,
                          idx, out):
            return 0
        lo = 0
        hi = njobs
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if _packs_without(mid, t_need, t_mem, t_rank, order, capc, capm, cpu_total, mem_total, mem_max, c, m,
                              lists, idx, out):
                hi = mid
            else:
                lo = mid
        return hi

    @njit(cache=True, nogil=True)
    def _mcb8_pack_presorted(c: np.ndarray, m: np.ndarray, by_need: np.ndarray, by_mem: np.ndarray,
                             capc: np.ndarray, capm: np.ndarray, out: np.ndarray) -> bool:
        """:func:`_mcb8_pack` for ``c = need * y`` (y > 0), given ``by_need`` and ``by_mem``, the stable
        descending orders of the tasks' needs and memories (the same at every probe of a search): the two
        lists come out in the order the stable sort on the dominant requirement gives, without sorting.

        The memory-heavy list is sorted on memory, which does not depend on y: ``by_mem`` filtered. The
        CPU-heavy list is sorted on ``need * y``, which keeps the order of the needs (rounding may only
        make two different needs equal, never reverse them), so ``by_need`` filtered is in descending
        order; among equal values the stable sort puts the lower task first, which an insertion pass
        restores (a run of equal needs is already in task order)."""
        n = c.shape[0]
        ci = np.empty(n, dtype=np.int64)
        mi = np.empty(n, dtype=np.int64)
        a = 0
        for q in range(n):
            k = by_need[q]
            if c[k] > m[k]:
                v = c[k]
                p = a
                while p > 0 and c[ci[p - 1]] == v and ci[p - 1] > k:
                    ci[p] = ci[p - 1]
                    p -= 1
                ci[p] = k
                a += 1
        b = 0
        for q in range(n):
            k = by_mem[q]
            if not c[k] > m[k]:
                mi[b] = k
                b += 1
        cp = np.empty(a)
        cs = np.empty(a)
        for q in range(a):
            cp[q] = c[ci[q]]
            cs[q] = m[ci[q]]
        mp = np.empty(b)
        ms = np.empty(b)
        for q in range(b):
            mp[q] = m[mi[q]]
            ms[q] = c[mi[q]]
        return _mcb8_pass(cp, cs, ci[:a], mp, ms, mi[:b], capc, capm, out)

    @njit(cache=True, nogil=True)
    def _probe(
        task_need: np.ndarray, task_mem: np.ndarray, y: float, capc: np.ndarray, capm: np.ndarray,
        cpu_total: float, c: np.ndarray, out: np.ndarray, by_need: np.ndarray, by_mem: np.ndarray,
    ) -> bool:
        """``packing._probe`` for MCB8: the total CPU refusal, then the pass at yield ``y``."""
        n = task_need.shape[0]
        for k in range(n):
            c[k] = task_need[k] * y
        if _numpy_sum(c) > cpu_total + EPS * n:
            return False
        return _mcb8_pack_presorted(c, task_mem, by_need, by_mem, capc, capm, out)

    @njit(cache=True, nogil=True)
    def _min_yield(th: np.ndarray, task_need: np.ndarray, task_mem: np.ndarray, capc: np.ndarray,
                   capm: np.ndarray) -> float:
        """``packing.placement_min_yield``: host sums in task order, as ``np.bincount`` adds them."""
        nh = capc.shape[0]
        memload = np.zeros(nh)
        load = np.zeros(nh)
        for k in range(th.shape[0]):
            memload[th[k]] += task_mem[k]
        for h in range(nh):
            if memload[h] > capm[h] + 1e-7:
                return -1.0
        for k in range(th.shape[0]):
            load[th[k]] += task_need[k]
        r = np.inf
        for h in range(nh):
            if load[h] > 0.0:
                q = capc[h] / load[h]
                if q < r:
                    r = q
        return r if r < 1.0 else 1.0

    @njit(cache=True, nogil=True)
    def _mcb8_search(
        task_need: np.ndarray, task_mem: np.ndarray, capc: np.ndarray, capm: np.ndarray,
        ub: float, cpu_total: float, accuracy: float, best: np.ndarray,
    ) -> tuple[bool, float, int]:
        """``packing.mcb_search``'s "fast" yield search for MCB8, probe for probe: (found, the yield of the
        probe that found ``best``, probes). Tasks are there and memory may fit (checked by the caller)."""
        n = task_need.shape[0]
        c = np.empty(n)
        th = np.empty(n, dtype=np.int64)
        by_need = _argsort_stable(-task_need)  # once for all probes (see _mcb8_pack_presorted)
        by_mem = _argsort_stable(-task_mem)
        probes = 1
        if _probe(task_need, task_mem, ub, capc, capm, cpu_total, c, th, by_need, by_mem):
            best[:] = th
            return True, ub, probes
        lo = 0.0
        hi = ub
        found = False
        best_y = 0.0
        best_sy = 0.0
        y = ub / 2.0
        while True:
            probes += 1
            if _probe(task_need, task_mem, y, capc, capm, cpu_total, c, th, by_need, by_mem):
                got = _min_yield(th, task_need, task_mem, capc, capm)
                if not found or got > best_y:
                    best[:] = th
                    best_y = got
                    best_sy = y
                    found = True
                if got > lo:
                    lo = got
            else:
                hi = y
            if hi - lo <= accuracy:
                break
            y = (lo + hi) / 2.0
        return found, best_sy, probes

    mcb8_pass = _mcb8_pass
    mcb8_pack = _mcb8_pack
    mcb8_removals = _mcb8_removals
    mcb8_search = _mcb8_search
    numpy_sum = _numpy_sum
    argsort_stable = _argsort_stable
    min_yield = _min_yield
