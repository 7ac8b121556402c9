"""The DFRS policies' names (seed 001 Sec. III–IV), importable without the policies themselves.

Importing :mod:`coordinator.policies` loads numba and scipy (about 1.7 s); the CLI's help and argument
checks, and the sweep's default algorithm list, need only the names. :mod:`coordinator.policies` keys its
registry by this tuple, and a unit test checks that each name builds the policy of that name.
"""

from __future__ import annotations

__all__ = ["POLICY_NAMES"]

#: In 001 Table I's order: the batch baselines, GREEDY and its preemptive variants, then DYNMCB8's family.
POLICY_NAMES: tuple[str, ...] = (
    "fcfs", "easy", "greedy", "greedy-pmtn", "greedy-pmtn-migr",
    "dynmcb8", "dynmcb8-per", "dynmcb8-asap-per", "dynmcb8-stretch-per",
)
