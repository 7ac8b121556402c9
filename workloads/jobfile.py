"""Job files: lists of :class:`coordinator.model.JobSpec` as JSON lines or CSV (``vcemu simulate JOBS_FILE``).

JSON lines (``.jsonl``, ``.json``, or any other suffix; ``.gz`` compressed too): one object per line::

    {"id": "j0", "submit_time": 0.0, "tasks": 4, "cpu_need": 1.0, "memory": 0.2, "work": 3600.0,
     "workload": "dgemm"}

``memory`` is the per-task memory and ``cpu_need`` the per-task CPU need, both fractions of one host,
and ``work`` the run time in seconds at full speed (seed 001 Sec. II-B and IV-A: "a submit time, a
required number of tasks, one CPU need and one memory requirement ... and an execution time").
``workload`` is optional (default ``dgemm``). Blank lines and lines starting with ``#`` are ignored.

CSV (``.csv``): a header row naming the same columns, then one job per row.

SWF (``.swf``, ``.swf.gz``): read through the HPC2N conversion of 001 Sec. IV-C
(:func:`workloads.annotate.convert_hpc2n`), either whole or one 1-week segment.

Every job is checked as it is read: unknown or missing keys, wrong types, duplicate ids and anything
:meth:`JobSpec.validate` refuses raise :class:`JobFileError`, which names the file, the line and the
field.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import math
import os
from collections.abc import Iterable, Iterator, Mapping
from typing import IO, Any

from coordinator.model import Host, InvalidJob, JobSpec

__all__ = ["FIELDS", "JobFileError", "iter_jobs", "job_to_dict", "read_jobs", "write_jobs"]

#: The keys of a job line, in the order they are written.
FIELDS = ("id", "submit_time", "tasks", "cpu_need", "memory", "work", "workload")
_REQUIRED = frozenset(FIELDS) - {"workload"}
_DEFAULT_WORKLOAD = "dgemm"
#: JobSpec.validate names some fields after the model; map them to the file's keys.
_FIELD_FROM_MODEL = {"mem": "memory", "work_seconds": "work"}


class JobFileError(ValueError):
    """A bad job line: ``path``, 1-based ``line`` and the offending ``field`` (``None`` if the whole line).

    ``line`` is ``None`` only for a converted SWF job that does not fit the given hosts (the message
    names the SWF job number instead).
    """

    def __init__(self, path: str, line: int | None, field: str | None, message: str) -> None:
        where = path + (f":{line}" if line is not None else "") + (f": {field}" if field else "")
        super().__init__(f"{where}: {message}")
        self.path = path
        self.line = line
        self.field = field
        self.message = message


def _is_swf(path: str) -> bool:
    return path.endswith(".swf") or path.endswith(".swf.gz")


def _open_text(path: str, mode: str) -> IO[str]:
    if path.endswith(".gz"):
        return gzip.open(path, mode + "t", encoding="utf-8", newline="")  # type: ignore[return-value]
    return open(path, mode, encoding="utf-8", newline="")  # noqa: SIM115 - returned to a with-block


def _is_csv(path: str) -> bool:
    return path.endswith(".csv") or path.endswith(".csv.gz")


def job_to_dict(job: JobSpec) -> dict[str, Any]:
    """A job as the file's mapping (keys :data:`FIELDS`)."""
    return {
        "id": job.id,
        "submit_time": float(job.submit_time),
        "tasks": int(job.tasks),
        "cpu_need": float(job.cpu_need),
        "memory": float(job.mem),
        "work": float(job.work),
        "workload": job.workload,
    }


def _number(path: str, line: int, key: str, value: Any, *, from_text: bool) -> float:
    if from_text and isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise JobFileError(path, line, key, f"must be a number, got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise JobFileError(path, line, key, f"must be a number, got {value!r}")
    if not math.isfinite(value):
        raise JobFileError(path, line, key, f"must be finite, got {value!r}")
    return float(value)


def _integer(path: str, line: int, key: str, value: Any, *, from_text: bool) -> int:
    if from_text and isinstance(value, str):
        try:
            value = int(value)
        except ValueError:
            raise JobFileError(path, line, key, f"must be a whole number, got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, int):
        raise JobFileError(path, line, key, f"must be a whole number, got {value!r}")
    return value


def _job_from_mapping(
    path: str, line: int, row: Mapping[str, Any], *, from_text: bool, hosts: tuple[Host, ...] | None
) -> JobSpec:
    unknown = sorted(set(row) - set(FIELDS))
    if unknown:
        raise JobFileError(path, line, unknown[0], f"unknown key (known: {', '.join(FIELDS)})")
    for key in FIELDS:
        if key in _REQUIRED and (key not in row or row[key] is None or (from_text and row[key] == "")):
            raise JobFileError(path, line, key, "missing")
    job_id = row["id"]
    if isinstance(job_id, int) and not isinstance(job_id, bool):
        job_id = str(job_id)
    if not isinstance(job_id, str) or not job_id.strip():
        raise JobFileError(path, line, "id", f"must be a non-empty string, got {job_id!r}")
    submit = _number(path, line, "submit_time", row["submit_time"], from_text=from_text)
    if submit < 0:
        raise JobFileError(path, line, "submit_time", f"must be >= 0, got {submit!r}")
    workload = row.get("workload")
    if workload is None or (from_text and workload == ""):
        workload = _DEFAULT_WORKLOAD
    if not isinstance(workload, str):
        raise JobFileError(path, line, "workload", f"must be a string, got {workload!r}")
    job = JobSpec(
        id=job_id,
        submit_time=submit,
        tasks=_integer(path, line, "tasks", row["tasks"], from_text=from_text),
        cpu_need=_number(path, line, "cpu_need", row["cpu_need"], from_text=from_text),
        mem=_number(path, line, "memory", row["memory"], from_text=from_text),
        work=_number(path, line, "work", row["work"], from_text=from_text),
        workload=workload,
    )
    try:
        job.validate(hosts)
    except InvalidJob as exc:
        msg = str(exc).partition(": ")[2] or str(exc)
        raise JobFileError(path, line, _FIELD_FROM_MODEL.get(exc.field, exc.field), msg) from None
    return job


def _iter_jsonl(path: str, fh: IO[str], hosts: tuple[Host, ...] | None) -> Iterator[tuple[int, JobSpec]]:
    for lineno, raw in enumerate(fh, start=1):
        text = raw.strip()
        if not text or text.startswith("#"):
            continue
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            raise JobFileError(path, lineno, None, f"not valid JSON ({exc.msg} at column {exc.colno})") from None
        if not isinstance(obj, dict):
            raise JobFileError(path, lineno, None, f"must be a JSON object, got {type(obj).__name__}")
        yield lineno, _job_from_mapping(path, lineno, obj, from_text=False, hosts=hosts)


def _iter_csv(path: str, fh: IO[str], hosts: tuple[Host, ...] | None) -> Iterator[tuple[int, JobSpec]]:
    reader = csv.reader(fh)
    header: list[str] | None = None
    for row in reader:
        lineno = reader.line_num
        if not row or all(not c.strip() for c in row) or row[0].lstrip().startswith("#"):
            continue
        if header is None:
            header = [c.strip() for c in row]
            unknown = [c for c in header if c not in FIELDS]
            if unknown:
                raise JobFileError(path, lineno, unknown[0], f"unknown column (known: {', '.join(FIELDS)})")
            missing = [c for c in FIELDS if c in _REQUIRED and c not in header]
            if missing:
                raise JobFileError(path, lineno, missing[0], "missing column")
            continue
        if len(row) != len(header):
            raise JobFileError(path, lineno, None, f"expected {len(header)} columns, found {len(row)}")
        mapping = {k: v.strip() for k, v in zip(header, row, strict=True)}
        yield lineno, _job_from_mapping(path, lineno, mapping, from_text=True, hosts=hosts)


def iter_jobs(path: str | os.PathLike[str], *, hosts: tuple[Host, ...] | None = None) -> Iterator[JobSpec]:
    """Stream the jobs of a JSON-lines or CSV job file, checking each (duplicate ids included).

    With ``hosts``, each job must also fit that cluster (:meth:`JobSpec.validate`).
    """
    p = os.fspath(path)
    seen: dict[str, int] = {}
    with _open_text(p, "r") as fh:
        source = _iter_csv(p, fh, hosts) if _is_csv(p) else _iter_jsonl(p, fh, hosts)
        for line, job in source:
            if job.id in seen:
                raise JobFileError(p, line, "id", f"duplicate id {job.id!r} (first on line {seen[job.id]})")
            seen[job.id] = line
            yield job


def read_jobs(
    path: str | os.PathLike[str],
    *,
    hosts: tuple[Host, ...] | None = None,
    segment: int | None = None,
    workload: str = _DEFAULT_WORKLOAD,
) -> list[JobSpec]:
    """Read a job file into a list, in file order.

    ``.swf`` / ``.swf.gz`` files go through the HPC2N conversion of 001 Sec. IV-C
    (:func:`workloads.annotate.convert_hpc2n`); with ``segment=k`` only week ``k`` is returned, its
    submit times relative to the week's start (:func:`workloads.annotate.hpc2n_segments`), otherwise
    the whole trace with submit times relative to the log start. ``workload`` names the job program
    of SWF jobs. ``segment`` is refused for other formats. A malformed SWF line raises
    :class:`JobFileError` with its line number, like a bad job line.
    """
    p = os.fspath(path)
    if _is_swf(p):
        from workloads.annotate import HPC2N_NODES, convert_hpc2n, hpc2n_segments
        from workloads.swf import SWFError, SWFReader

        # Converted for the trace's own machine, so that a job too wide for the given hosts is refused below
        # rather than dropped by the conversion's rule for jobs no cluster of that size could hold.
        nodes = max(len(hosts), HPC2N_NODES) if hosts is not None else HPC2N_NODES
        try:
            if segment is None:
                with SWFReader(p) as reader:
                    jobs = convert_hpc2n(reader, nodes=nodes, workload=workload).jobs
            else:
                segs = hpc2n_segments(p, nodes=nodes, workload=workload).segments
                if not 0 <= segment < len(segs):
                    raise ValueError(f"segment: {p} has weeks 0..{len(segs) - 1}, got {segment}")
                jobs = segs[segment]
        except SWFError as exc:
            raise JobFileError(exc.path, exc.line, None, exc.reason) from None
        if hosts is not None:
            for job in jobs:
                try:
                    job.validate(hosts)
                except InvalidJob as exc:
                    field = _FIELD_FROM_MODEL.get(exc.field, exc.field)
                    unfit = sum(1 for j in jobs if not _fits(j, hosts))
                    what = f"week {segment}" if segment is not None else "the trace"
                    raise JobFileError(
                        p, None, field, f"{unfit} of the {len(jobs)} jobs of {what} do not fit on the given "
                        f"{len(hosts)} hosts (the trace's machine had {HPC2N_NODES} nodes); the first, SWF job "
                        f"{job.id}: {exc}"
                    ) from None
        return jobs
    if segment is not None:
        raise ValueError("segment: only SWF traces are split into weeks")
    return list(iter_jobs(p, hosts=hosts))


def _fits(job: JobSpec, hosts: tuple[Host, ...]) -> bool:
    try:
        job.validate(hosts)
    except InvalidJob:
        return False
    return True


def write_jobs(path: str | os.PathLike[str], jobs: Iterable[JobSpec]) -> int:
    """Write jobs as JSON lines (or CSV if ``path`` ends in ``.csv``; ``.gz`` compresses); return the count.

    Floats are written exactly (shortest round-tripping form), so :func:`read_jobs` gives equal jobs.
    """
    p = os.fspath(path)
    if _is_swf(p):
        raise ValueError(f"{p}: write SWF with workloads.swf.write_swf; job files are JSON lines or CSV")
    count = 0
    with _open_text(p, "w") as fh:
        if _is_csv(p):
            writer = csv.writer(fh, lineterminator="\n")
            writer.writerow(FIELDS)
            for job in jobs:
                d = job_to_dict(job)
                writer.writerow([repr(d[k]) if isinstance(d[k], float) else d[k] for k in FIELDS])
                count += 1
        else:
            buf = io.StringIO()
            for job in jobs:
                buf.write(json.dumps(job_to_dict(job), allow_nan=False))
                buf.write("\n")
                count += 1
            fh.write(buf.getvalue())
    return count
