"""The agent's own metrics (node_agent.server.AgentCollector), read from a stand-in core."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from node_agent.server import AgentCollector


class _Core:
    mode = "cgroup-v1"

    def __init__(self, lease_left: float) -> None:
        self._left = lease_left

    def status(self) -> tuple[list, list]:
        return [], []

    def lease_left(self) -> float:
        return self._left


def _samples(core: _Core) -> dict[str, float]:
    registry = CollectorRegistry()
    registry.register(AgentCollector(core))  # type: ignore[arg-type]
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in generate_latest(registry).decode().splitlines() if line.startswith("vcemu_agent_")}


def test_the_lease_left_shows_whether_the_coordinator_is_still_heard() -> None:
    """Operator review: an idle agent's metrics were identical before and 10 s after its coordinator was killed."""
    assert _samples(_Core(3.5))["vcemu_agent_lease_remaining_seconds"] == 3.5
    assert _samples(_Core(0.0))["vcemu_agent_lease_remaining_seconds"] == 0.0  # run out: tasks fenced
    assert "vcemu_agent_lease_remaining_seconds" not in _samples(_Core(-1.0))  # no lease held


def test_the_cgroup_mode_is_one_info_series() -> None:
    """An _info metric is one series of value 1: the modes not in use were exported as series of 0."""
    assert {k: v for k, v in _samples(_Core(-1.0)).items() if k.startswith("vcemu_agent_cgroup_mode_info")} == {
        'vcemu_agent_cgroup_mode_info{mode="cgroup-v1"}': 1.0}
