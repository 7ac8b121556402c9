"""``vcemu jobs``' HOSTS cell (coordinator.hostlist): each host once, in ranges, with its task count."""

from __future__ import annotations

import pytest

from coordinator.hostlist import compress_hosts


@pytest.mark.parametrize(("hosts", "cell"), [
    ([], "-"),
    (["h0"], "h0"),
    (["h0", "h0"], "h0*2"),
    (["h0", "h1", "h0", "h1"], "h[0-1]*2"),
    (["h0", "h0", "h0", "h1", "h1", "h2", "h2"], "h0*3,h[1-2]*2"),  # larger counts first within a prefix
    (["h5", "h3", "h4", "h9"], "h[3-5,9]"),  # sorted by number, whatever the task order
    (["node001", "node002", "node003", "node010"], "node[001-003,010]"),  # zero padding kept
    (["h9", "h10", "h11"], "h[9-11]"),  # by number, not by text
    (["alpha", "beta", "beta"], "alpha,beta*2"),  # names without a number: each alone
    (["b-h1", "a-h0", "a-h1"], "a-h[0-1],b-h1"),
    (["a" * 100], "a" * 100),  # one host: its whole name, however long
])
def test_hosts_are_each_shown_once_in_ranges_with_their_task_count(hosts: list[str], cell: str) -> None:
    assert compress_hosts(hosts) == cell


def test_ten_thousand_tasks_on_four_hosts_is_one_short_cell() -> None:
    assert compress_hosts(["agent0-h0", "agent0-h1", "agent0-h2", "agent0-h3"] * 2500) == "agent0-h[0-3]*2500"


def test_a_long_list_is_cut_at_a_group_and_says_how_many_hosts() -> None:
    cell = compress_hosts([f"x{i:03d}yy" for i in range(30)])
    assert cell == "x000yy,x001yy,x002yy,x003yy,x004yy,x005yy,... (30 hosts)" and len(cell) <= 60
    # a first group longer than the width alone is cut inside its ranges
    cell = compress_hosts([f"agent{a}-h{i}" for a in range(4) for i in range(0, 64, 2)])
    assert cell == "agent0-h[0,2,4,6,8,10,12,14,16,18,20,...],... (128 hosts)" and len(cell) <= 60


def test_the_jobs_table_shows_a_large_job_in_one_short_cell() -> None:
    """A 10,000-task job's HOSTS cell was every task's host joined by commas (100,000 characters), and the
    table's later columns followed it on every row."""
    from coordinator.client import _job_table
    from vcemu.v1 import coordinator_pb2 as pb

    spec = pb.JobSpec(tasks=10_000, cpu_need=1, memory=0.0002, work_seconds=100)
    big = pb.Job(job_id="job-1", spec=spec, state="running", cpu_share=0.0001, virtual_time=1,
                 hosts=["agent0-h0", "agent0-h1", "agent0-h2", "agent0-h3"] * 2500, **{"yield": 0.0001})
    small = pb.Job(job_id="job-2", spec=pb.JobSpec(tasks=1, cpu_need=1, memory=0.1, work_seconds=5), state="pending")
    lines = _job_table([big, small]).splitlines()
    assert lines[1].split()[8] == "agent0-h[0-3]*2500"
    assert max(map(len, lines)) < 120
