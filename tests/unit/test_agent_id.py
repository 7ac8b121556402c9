"""A local cluster's agents take the same ids run after run (each then cleans up what a killed predecessor of
its id left), and a second cluster beside a running one takes the next free ids instead of failing."""

from __future__ import annotations

import pytest

from node_agent.agent import AgentIdInUse, _lock_agent_id, free_agent_id


def test_the_first_free_id_is_the_base_then_numbered_ones() -> None:
    base = "test-free-id"
    assert free_agent_id(base) == base  # nothing holds it: the same id as every earlier run
    held = [_lock_agent_id(base), _lock_agent_id(f"{base}-1")]
    try:
        assert free_agent_id(base) == f"{base}-2"
        with pytest.raises(AgentIdInUse):
            _lock_agent_id(base)
    finally:
        for sock in held:
            sock.close()
    assert free_agent_id(base) == base
