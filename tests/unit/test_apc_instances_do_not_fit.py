"""apc_place on a state whose transactional instances alone exceed a node's memory: a ValueError naming the node,
not a bare AssertionError (the branch that starts from an empty placement runs in no test)."""

from __future__ import annotations

import pytest

from coordinator.policies.apc import ApcState, Node, apc_place
from coordinator.policies.apc_rpf import ResponseTimeModel, TransactionalApp


def test_instances_that_do_not_fit_are_refused_naming_the_node() -> None:
    app = TransactionalApp("web", tau=0.5, model=ResponseTimeModel(10.0, 5.0), memory=300.0, nodes=frozenset({"n0"}))
    state = ApcState(now=0.0, nodes=(Node("n0", 1000.0, 200.0),), jobs=(), apps=(app,))
    with pytest.raises(ValueError, match="node n0"):
        apc_place(state, 60.0)
