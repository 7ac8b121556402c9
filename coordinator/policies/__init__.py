"""Pure scheduling policies. Look one up by name with :func:`get_policy`.

Nothing in this package does I/O, reads a clock or imports grpc, ray or prometheus_client; an
import-linter contract in pyproject.toml keeps it that way.
"""

from __future__ import annotations

from collections.abc import Callable

from coordinator.policies.base import Policy
from coordinator.policies.batch import FCFS, Easy
from coordinator.policies.dfrs import Greedy, GreedyPmtn, greedy_pmtn_migr
from coordinator.policies.dynmcb import dynmcb8, dynmcb8_asap_per, dynmcb8_per, dynmcb8_stretch_per

POLICIES: dict[str, Callable[[], Policy]] = {
    "fcfs": FCFS,
    "easy": Easy,
    "greedy": Greedy,
    "greedy-pmtn": GreedyPmtn,
    "greedy-pmtn-migr": greedy_pmtn_migr,
    "dynmcb8": dynmcb8,
    "dynmcb8-per": dynmcb8_per,
    "dynmcb8-asap-per": dynmcb8_asap_per,
    "dynmcb8-stretch-per": dynmcb8_stretch_per,
}


class UnknownPolicy(ValueError):
    pass


def get_policy(name: str) -> Policy:
    try:
        return POLICIES[name.lower()]()
    except KeyError:
        raise UnknownPolicy(f"unknown policy {name!r}; known: {', '.join(sorted(POLICIES))}") from None


__all__ = ["POLICIES", "Policy", "UnknownPolicy", "get_policy"]
