"""Pure scheduling policies. Look one up by name with :func:`get_policy`.

Nothing in this package does I/O, reads a clock, starts a thread or process, or imports grpc, ray,
prometheus_client, the store or the node agent; an import-linter contract in pyproject.toml keeps it that way
(indirect imports included).
"""

from __future__ import annotations

from collections.abc import Callable

from coordinator.policies.base import Policy
from coordinator.policies.batch import FCFS, Easy
from coordinator.policies.dfrs import Greedy, GreedyPmtn, greedy_pmtn_migr
from coordinator.policies.dynmcb import dynmcb8, dynmcb8_asap_per, dynmcb8_per, dynmcb8_stretch_per
from coordinator.policy_names import PERIODIC_NAMES, POLICY_NAMES, PolicyNameError, split_name

#: The registry, keyed by :data:`coordinator.policy_names.POLICY_NAMES` (the names without the policies' imports).
POLICIES: dict[str, Callable[[], Policy]] = dict(zip(POLICY_NAMES, (
    FCFS, Easy, Greedy, GreedyPmtn, greedy_pmtn_migr, dynmcb8, dynmcb8_per, dynmcb8_asap_per, dynmcb8_stretch_per,
), strict=True))


#: The periodic policies by name, built with a period (``dynmcb8-per-60``: :mod:`coordinator.policy_names`).
PERIODIC: dict[str, Callable[[float], Policy]] = dict(zip(PERIODIC_NAMES, (
    dynmcb8_per, dynmcb8_asap_per, dynmcb8_stretch_per,
), strict=True))


class UnknownPolicy(PolicyNameError):
    pass


def get_policy(name: str) -> Policy:
    """The policy ``name`` names, in any case; a periodic one may end in its period (``dynmcb8-asap-per-60``)."""
    try:
        base, period = split_name(name)
    except PolicyNameError as exc:
        raise UnknownPolicy(str(exc)) from None
    return POLICIES[base]() if period is None else PERIODIC[base](period)


__all__ = ["PERIODIC", "POLICIES", "Policy", "UnknownPolicy", "get_policy"]
