"""VCSCHED instances (seed 002 Sec. 2.3 and Sec. 5) and their JSON file format.

A file looks like::

    {
      "hosts": 4,                                   # or [{"cpu": 1.0, "mem": 1.0}, ...]
      "jobs": [
        {"name": "j0", "cpu_need": 0.5, "mem": 0.2},            # a sequential job (tasks = 1)
        {"name": "j1", "cpu_need": 0.8, "mem": 0.1, "tasks": 4} # a parallel job: 4 identical tasks
      ],
      "meta": {"slack": 0.5}                        # optional, free-form
    }

``cpu_need`` (alpha_i) must be in (0, 1] and ``mem`` (m_i) in [0, 1], both fractions of one host
(Sec. 2.3); ``tasks`` is a whole number >= 1 (default 1); ``name`` defaults to ``job<index>``.
Anything else is refused with an :class:`InstanceError` naming the job and the field.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coordinator.policies.packing import PackJob, PackProblem

__all__ = ["Instance", "InstanceError", "load_instance", "parse_instance", "save_instance"]


class InstanceError(ValueError):
    """A bad instance file. ``job`` is the job's index (or ``None``), ``field`` the offending field."""

    def __init__(self, message: str, *, job: int | None = None, field_name: str | None = None) -> None:
        super().__init__(message)
        self.job = job
        self.field = field_name


@dataclass(frozen=True)
class Instance:
    """Jobs and hosts of one VCSCHED instance. ``hosts`` holds ``(cpu_cap, mem_cap)`` per host."""

    jobs: tuple[PackJob, ...]
    hosts: tuple[tuple[float, float], ...]
    names: tuple[str, ...] = ()
    meta: Mapping[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        if not self.names:
            object.__setattr__(self, "names", tuple(f"job{i}" for i in range(len(self.jobs))))

    @property
    def n_hosts(self) -> int:
        return len(self.hosts)

    @property
    def n_tasks(self) -> int:
        return sum(j.tasks for j in self.jobs)

    @property
    def parallel(self) -> bool:
        return any(j.tasks > 1 for j in self.jobs)

    @property
    def host_arg(self) -> int | tuple[tuple[float, float], ...]:
        """What the packing API takes: an int when all hosts are unit hosts, else the pairs."""
        if all(c == 1.0 and m == 1.0 for c, m in self.hosts):
            return len(self.hosts)
        return self.hosts

    def problem(self) -> PackProblem:
        return PackProblem.build(self.jobs, self.host_arg)

    def to_json(self) -> dict[str, Any]:
        hosts: Any = self.host_arg
        if not isinstance(hosts, int):
            hosts = [{"cpu": c, "mem": m} for c, m in self.hosts]
        return {
            "hosts": hosts,
            "jobs": [
                {"name": n, "cpu_need": j.cpu_need, "mem": j.mem, "tasks": j.tasks}
                for n, j in zip(self.names, self.jobs, strict=True)
            ],
            "meta": dict(self.meta),
        }


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def parse_instance(obj: Any, source: str = "<instance>") -> Instance:
    """Validate a decoded JSON object and build the :class:`Instance` (errors name job and field)."""
    if not isinstance(obj, Mapping):
        raise InstanceError(f"{source}: expected a JSON object with 'hosts' and 'jobs'")
    if "hosts" not in obj:
        raise InstanceError(f"{source}: missing field 'hosts'", field_name="hosts")
    raw_hosts = obj["hosts"]
    hosts: list[tuple[float, float]] = []
    if isinstance(raw_hosts, int) and not isinstance(raw_hosts, bool):
        if raw_hosts < 1:
            raise InstanceError(f"{source}: field 'hosts': need at least one host, got {raw_hosts}", field_name="hosts")
        hosts = [(1.0, 1.0)] * raw_hosts
    elif isinstance(raw_hosts, list) and raw_hosts:
        for j, h in enumerate(raw_hosts):
            if not isinstance(h, Mapping):
                raise InstanceError(f"{source}: host {j}: expected an object with 'cpu' and 'mem'", field_name="hosts")
            caps = []
            for f in ("cpu", "mem"):
                if f not in h:
                    raise InstanceError(f"{source}: host {j}: missing field '{f}'", field_name=f)
                v = h[f]
                if not _number(v) or v <= 0:
                    raise InstanceError(
                        f"{source}: host {j}: field '{f}': must be a number > 0, got {v!r}", field_name=f
                    )
                caps.append(float(v))
            hosts.append((caps[0], caps[1]))
    else:
        raise InstanceError(
            f"{source}: field 'hosts': expected a host count or a non-empty list, got {raw_hosts!r}", field_name="hosts"
        )
    if "jobs" not in obj:
        raise InstanceError(f"{source}: missing field 'jobs'", field_name="jobs")
    raw_jobs = obj["jobs"]
    if not isinstance(raw_jobs, list):
        raise InstanceError(f"{source}: field 'jobs': expected a list", field_name="jobs")
    jobs: list[PackJob] = []
    names: list[str] = []
    for i, rj in enumerate(raw_jobs):
        if not isinstance(rj, Mapping):
            raise InstanceError(f"{source}: job {i}: expected an object", job=i)
        name = rj.get("name", f"job{i}")
        if not isinstance(name, str):
            raise InstanceError(
                f"{source}: job {i}: field 'name': must be a string, got {name!r}", job=i, field_name="name"
            )
        label = f"{source}: job {i} ({name!r})"
        for f in ("cpu_need", "mem"):
            if f not in rj:
                raise InstanceError(f"{label}: missing field '{f}'", job=i, field_name=f)
        cpu = rj["cpu_need"]
        if not _number(cpu) or not (0.0 < cpu <= 1.0):
            raise InstanceError(
                f"{label}: field 'cpu_need': must be a number in (0, 1] (a fraction of one host), got {cpu!r}",
                job=i,
                field_name="cpu_need",
            )
        mem = rj["mem"]
        if not _number(mem) or not (0.0 <= mem <= 1.0):
            raise InstanceError(
                f"{label}: field 'mem': must be a number in [0, 1] (a fraction of one host's memory), got {mem!r}",
                job=i,
                field_name="mem",
            )
        tasks = rj.get("tasks", 1)
        if not isinstance(tasks, int) or isinstance(tasks, bool) or tasks < 1:
            raise InstanceError(
                f"{label}: field 'tasks': must be a whole number >= 1, got {tasks!r}", job=i, field_name="tasks"
            )
        jobs.append(PackJob(tasks=tasks, cpu_need=float(cpu), mem=float(mem)))
        names.append(name)
    meta = obj.get("meta", {})
    if not isinstance(meta, Mapping):
        raise InstanceError(f"{source}: field 'meta': expected an object", field_name="meta")
    return Instance(jobs=tuple(jobs), hosts=tuple(hosts), names=tuple(names), meta=dict(meta))


def load_instance(path: str | Path) -> Instance:
    """Read and validate an instance JSON file."""
    p = Path(path)
    try:
        obj = json.loads(p.read_text())
    except json.JSONDecodeError as e:
        raise InstanceError(f"{p}: not valid JSON: line {e.lineno} column {e.colno}: {e.msg}") from e
    return parse_instance(obj, str(p))


def save_instance(inst: Instance, path: str | Path) -> None:
    Path(path).write_text(json.dumps(inst.to_json(), indent=1) + "\n")
