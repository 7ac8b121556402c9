"""APC's split of a node's CPU among its jobs (``_share``) with minimum speeds gives the node's whole CPU where the
jobs' maximums allow it (review of helper 203): a part raised to its minimum in a pass was taken from what was left
before the pass's next parts were weighed, and those fell to their minimums too, leaving CPU unused."""

from __future__ import annotations

import pytest

from coordinator.policies.apc import _share


def test_minimum_speeds_do_not_leave_a_nodes_cpu_unused() -> None:
    assert _share(1000.0, [2.0, 2.0, 2.0], [500.0, 300.0, 100.0], [1000.0] * 3) == pytest.approx([500.0, 300.0, 200.0])


def test_without_minimums_the_split_is_the_water_filling_one() -> None:
    assert _share(1000.0, [1.0, 1.0], [0.0, 0.0], [200.0, 1000.0]) == pytest.approx([200.0, 800.0])
