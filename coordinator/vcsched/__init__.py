"""VCSCHED, the static virtual-cluster placement problem of seed 002 (Casanova et al., RR-6692).

* :mod:`.instance`   — the problem model and the JSON instance file format (validated);
* :mod:`.generator`  — the Sec. 4.1 instance generator (and Sec. 5 parallel job sizes);
* :mod:`.exact`      — the LP bound, the Sec. 2.5 MILP, its LP relaxation, RRND/RRNZ (Sec. 3.2) and the
  Sec. 6.1 adaptation MILP with a migration budget B (scipy / HiGHS);
* :mod:`.experiment` — the small and large instance sets of Sec. 4 with plots and tables
  (``vcemu vcsched``);
* :mod:`.bench`      — ``vcemu bench packing``.

The heuristics themselves (MCB1-MCB8, GR/SG/GB/SGB, the average-yield step) are pure policies in
:mod:`coordinator.policies.packing`.
"""
