"""What ``vcemu up`` removes once its agents have stopped (:func:`node_agent.agent.remove_dead_agents_leftovers`):
a dead agent's work directory, never that of an agent of the id that lives (it holds the id's claim)."""

from __future__ import annotations

import os
import uuid

from node_agent.agent import _try_claim, remove_dead_agents_leftovers


def test_a_live_agents_work_directory_is_left_and_a_dead_ones_removed() -> None:
    agent = f"t{uuid.uuid4().hex[:10]}"
    workdir = f"/dev/shm/vcemu-agent-{agent}-abcdefgh"
    os.mkdir(workdir)
    try:
        claim = _try_claim(f"vcemu-cgroups-{agent}")  # what a live agent of that id holds for its whole life
        assert claim is not None
        try:
            remove_dead_agents_leftovers([agent])
            assert os.path.isdir(workdir)
        finally:
            claim.close()
        remove_dead_agents_leftovers([agent])  # its agent gone: removed
        assert not os.path.exists(workdir)
    finally:
        if os.path.isdir(workdir):
            os.rmdir(workdir)
