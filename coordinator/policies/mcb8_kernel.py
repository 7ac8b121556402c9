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

__all__ = ["mcb8_pack", "mcb8_pass"]

mcb8_pass: Callable[..., bool] | None
mcb8_pack: Callable[..., bool] | None

try:  # pragma: no branch - numba is a declared dependency; the fallback keeps a broken install usable
    from numba import njit
except ImportError:  # pragma: no cover
    mcb8_pass = None
    mcb8_pack = None
else:

    @njit(cache=True, nogil=True)
    def _first_fit(prim: np.ndarray, sec: np.ndarray, alive: np.ndarray, start: int, ap: float, asec: float) -> int:
        """First alive position >= the first with ``prim <= ap + EPS`` whose ``sec <= asec + EPS``."""
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
        for q in range(lo, n):
            if alive[q] and sec[q] <= lim_s:
                return q
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
                        p = _first_fit(cp, cs, alive_c, first_c, ac, am)
                        open_c = p >= 0
                    if p < 0 and open_m:
                        p = _first_fit(mp, ms, alive_m, first_m, am, ac)
                        open_m = p >= 0
                        heavy = False
                else:
                    if open_m:
                        p = _first_fit(mp, ms, alive_m, first_m, am, ac)
                        open_m = p >= 0
                        heavy = False
                    if p < 0 and open_c:
                        p = _first_fit(cp, cs, alive_c, first_c, ac, am)
                        open_c = p >= 0
                        heavy = True
                if p < 0:
                    break
                if heavy:
                    alive_c[p] = False
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
        order = np.argsort(-prim, kind="mergesort")  # stable: equal keys keep task order
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

    mcb8_pass = _mcb8_pass
    mcb8_pack = _mcb8_pack
