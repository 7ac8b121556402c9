"""A local cluster's agents take the same ids run after run (each then cleans up what a killed predecessor of
its id left), and a second cluster beside a running one takes the next free ids instead of failing, even while
the first one's agent of an id is dead and waiting to be started again."""

from __future__ import annotations

import pytest

from node_agent.agent import AgentIdInUse, _lock_agent_id, _try_claim, release_agent_ids, reserve_agent_id


def test_the_first_free_id_is_the_base_then_numbered_ones() -> None:
    base = "test-free-id"
    assert reserve_agent_id(base) == base  # nothing holds it: the same id as every earlier run
    release_agent_ids([base])
    held = [_lock_agent_id(base), _lock_agent_id(f"{base}-1")]
    try:
        assert reserve_agent_id(base) == f"{base}-2"
        with pytest.raises(AgentIdInUse):
            _lock_agent_id(base)
    finally:
        for sock in held:
            sock.close()
        release_agent_ids([f"{base}-2"])
    assert reserve_agent_id(base) == base
    release_agent_ids([base])


def test_a_reserved_id_is_not_taken_while_its_agent_is_down() -> None:
    base = "test-reserved-id"
    assert reserve_agent_id(base) == base
    try:  # no agent holds the id (its process died; up waits to start it again), yet it stays this cluster's
        assert _try_claim(f"vcemu-reserve-{base}") is None  # held where another process looks, not only here
        assert reserve_agent_id(base) == f"{base}-1"
        other = _try_claim(f"vcemu-reserve-{base}-2")  # another process's cluster reserved the next
        assert other is not None
        try:
            assert reserve_agent_id(base) == f"{base}-3"
        finally:
            other.close()
        sock = _lock_agent_id(base)  # the agent started again takes its own id despite the reservation
        sock.close()
    finally:
        release_agent_ids([base, f"{base}-1", f"{base}-3"])
    assert reserve_agent_id(base) == base  # released
    release_agent_ids([base])


def test_a_reservation_is_no_agents_claim() -> None:
    base = "test-reserve-name"
    assert reserve_agent_id(base) == base
    try:  # an agent whose id is "reserved-" and a name (a valid id) starts beside it
        _lock_agent_id(f"reserved-{base}").close()
    finally:
        release_agent_ids([base])


def test_stopping_a_clusters_agents_gives_their_ids_back() -> None:
    import subprocess
    import sys

    from coordinator.servers import stop_agents

    base = "test-stop-release"
    agent_id = reserve_agent_id(base)
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "--agent-id", agent_id])
    stop_agents([proc], timeout=10)
    assert proc.poll() is not None
    sock = _try_claim(f"vcemu-reserve-{base}")  # given back
    assert sock is not None
    sock.close()
    assert reserve_agent_id(base) == base
    release_agent_ids([base])
