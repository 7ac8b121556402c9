"""Job validation names the offending field (the service turns these into INVALID_ARGUMENT)."""

import pytest

from coordinator.model import InvalidJob, JobSpec

from .builders import hosts


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"tasks": 0}, "tasks"),
        ({"cpu_need": 0.0}, "cpu_need"),
        ({"cpu_need": 1.5}, "cpu_need"),
        ({"cpu_need": float("nan")}, "cpu_need"),
        ({"mem": 1.2}, "memory"),
        ({"mem": 0.0}, "memory"),
        ({"work": -1.0}, "work_seconds"),
        ({"work": 1e300}, "work_seconds"),  # finite, but a clock that large no longer moves (over gRPC too)
        ({"workload": "rm -rf /"}, "workload"),
        ({"tasks": 9, "mem": 0.5}, "tasks"),  # 4 hosts hold at most 8 such tasks
    ],
)
def test_invalid_jobs_name_the_field(kwargs, field):
    base = {"id": "j", "submit_time": 0.0, "tasks": 1, "cpu_need": 0.5, "mem": 0.1, "work": 10.0}
    with pytest.raises(InvalidJob) as err:
        JobSpec(**{**base, **kwargs}).validate(hosts(4))
    assert err.value.field == field
    assert str(err.value).startswith(field + ":")


def test_a_job_that_fits_is_accepted():
    JobSpec("j", 0.0, 8, 1.0, 0.5, 10.0).validate(hosts(4))


def test_capacity_counts_every_host_of_each_memory_size():
    """Hosts are counted by size: 3 hosts of 1.0 and 2 of 0.5 hold 3 x 3 + 2 x 1 = 11 tasks of memory 0.3."""
    from coordinator.model import Host

    mixed = (Host("a", 1.0, 1.0), Host("b", 1.0, 0.5), Host("c", 1.0, 1.0), Host("d", 1.0, 0.5), Host("e", 1.0, 1.0))
    JobSpec("j", 0.0, 11, 1.0, 0.3, 10.0).validate(mixed)
    with pytest.raises(InvalidJob, match=r"^tasks: 12 tasks of memory 0.3 can never fit: .* holds at most 11$"):
        JobSpec("j", 0.0, 12, 1.0, 0.3, 10.0).validate(mixed)
    small = (Host("a", 1.0, 0.5), Host("b", 1.0, 0.25), Host("c", 1.0, 0.5))
    with pytest.raises(InvalidJob, match=r"^memory: 0.6 per task is more than any host has \(0.5\)$"):
        JobSpec("j", 0.0, 1, 1.0, 0.6, 10.0).validate(small)
