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
from coordinator.policy_names import POLICY_NAMES

#: The registry, keyed by :data:`coordinator.policy_names.POLICY_NAMES` (the names without the policies' imports).
POLICIES: dict[str, Callable[[], Policy]] = dict(zip(POLICY_NAMES, (
    FCFS, Easy, Greedy, GreedyPmtn, greedy_pmtn_migr, dynmcb8, dynmcb8_per, dynmcb8_asap_per, dynmcb8_stretch_per,
), strict=True))


class UnknownPolicy(ValueError):
    pass


def get_policy(name: str) -> Policy:
    try:
        return POLICIES[name.lower()]()
    except KeyError:
        raise UnknownPolicy(f"unknown policy {name!r}; known: {', '.join(sorted(POLICIES))}") from None


__all__ = ["POLICIES", "Policy", "UnknownPolicy", "get_policy"]
