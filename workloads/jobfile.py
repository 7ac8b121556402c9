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
(:func:`workloads.annotate.convert_hpc2n`), either whole, one 1-week segment, or the weeks A to B as one list.

Suffixes are matched in any case (``JOBS.CSV``). Text is UTF-8, with or without a byte-order mark. A gzip file
is read as one whatever its name (its first two bytes, ``1f 8b``, are never UTF-8 text).

Every job is checked as it is read: unknown, missing or repeated keys (columns), wrong types, duplicate ids,
values out of bounds (:data:`MAX_SECONDS`, :data:`MAX_TASKS`; a whole number too large for a float, or of more
digits than Python reads, included), text that is not UTF-8, a line nested too deep for JSON or a CSV field too
long for Python's reader, a damaged ``.gz`` and anything :meth:`JobSpec.validate` refuses raise
:class:`JobFileError`, which names the file, the line and the field. A number in a CSV cell is written in ASCII
decimal digits, with an optional sign, point and exponent: Python's ``float()`` also takes ``1_000`` and other
scripts' digits, which are refused as not a number. :func:`load_jobs` reads a file's bytes once, and gives its
jobs with the hash of the very bytes parsed.
"""

from __future__ import annotations

import csv
import dataclasses
import errno
import gzip
import hashlib
import io
import json
import math
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import IO, Any

from coordinator.model import MAX_SECONDS, Host, InvalidJob, JobSpec
from workloads.swf import GZIP_ERRORS, GZIP_MAGIC, gzip_reason

__all__ = [
    "FIELDS",
    "MAX_SECONDS",
    "MAX_TASKS",
    "JobFile",
    "JobFileError",
    "Refuse",
    "Segment",
    "check_jobs",
    "is_swf",
    "iter_jobs",
    "job_to_dict",
    "load_jobs",
    "parse_segment",
    "read_jobs",
    "segment_text",
    "unreadable",
    "write_jobs",
]

#: The keys of a job line, in the order they are written.
FIELDS = ("id", "submit_time", "tasks", "cpu_need", "memory", "work", "workload")
_REQUIRED = frozenset(FIELDS) - {"workload"}
#: What a file for ``submit --file`` needs: it submits every job at once, so a submit time is not asked for.
_UNTIMED = _REQUIRED - {"submit_time"}
_DEFAULT_WORKLOAD = "dgemm"
#: JobSpec.validate names some fields after the model; map them to the file's keys.
_FIELD_FROM_MODEL = {"mem": "memory", "work_seconds": "work"}
#: The most tasks a job can have: the wire carries ``tasks`` as an int32 (proto/vcemu/v1/coordinator.proto,
#: JobSpec), and ``submit --file`` failed building the request for more, before it connected.
MAX_TASKS = 2**31 - 1
#: A policy's refusal hook (``policy.refuse``, e.g. :func:`coordinator.policies.batch.refuse_oversized`):
#: ``(field, reason)`` for a job the policy can never run on ``hosts``, else None.
Refuse = Callable[[JobSpec, tuple[Host, ...]], "tuple[str, str] | None"]


def unreadable(path: str, exc: OSError) -> str:
    """Why the job file or trace at ``path`` cannot be read, as ``path: why`` in a few words: what ``simulate``,
    ``submit --file`` and ``replay`` say (they printed "[Errno 2] No such file or directory: 'x'")."""
    if isinstance(exc, FileNotFoundError):
        why = "no such file"
    elif isinstance(exc, IsADirectoryError):
        why = "a directory, not a job file or trace"
    else:
        why = (exc.strerror or str(exc)).lower()
    return f"{shown(path)}: {why}"


class JobFileError(ValueError):
    """A bad job line: ``path``, 1-based ``line`` and the offending ``field`` (``None`` if the whole line).

    ``line`` is ``None`` only where no line is known (a caller's own list of jobs given to :func:`check_jobs`).
    """

    def __init__(self, path: str, line: int | None, field: str | None, message: str) -> None:
        where = path + (f":{line}" if line is not None else "") + (f": {field}" if field else "")
        super().__init__(f"{where}: {message}")
        self.path = path
        self.line = line
        self.field = field
        self.message = message


def is_swf(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` names an SWF trace (``.swf``, ``.swf.gz``, in any case)."""
    return os.fspath(path).lower().endswith((".swf", ".swf.gz"))


def _is_gz(path: str) -> bool:
    return path.lower().endswith(".gz")


def _open_text(path: str, mode: str) -> IO[str]:
    if _is_gz(path):
        return gzip.open(path, mode + "t", encoding="utf-8", newline="")  # type: ignore[return-value]
    return open(path, mode, encoding="utf-8", newline="")  # noqa: SIM115 - returned to a with-block


def _is_csv(path: str) -> bool:
    return path.lower().endswith((".csv", ".csv.gz"))


#: The path that names standard input, as in most command-line tools (a job file piped from a generator: JSON lines).
STDIN = "-"


def shown(path: str) -> str:
    """``path`` as a message names it: :data:`STDIN` is "standard input" ("no jobs in -" read as a typo)."""
    return "standard input" if path == STDIN else path


def _read_bytes(path: str) -> bytes:
    """The whole file, read once: what is parsed is then what is hashed, even if the file changes meanwhile or
    is a pipe (``/dev/stdin``, or :data:`STDIN`). OSError as open() raises it."""
    if path == STDIN:
        if sys.stdin is None:  # (descriptor 0 closed: an AttributeError's traceback)
            raise OSError(errno.EBADF, "it is closed")  # (unreadable: "standard input: it is closed")
        if sys.stdin.isatty():  # (else it waits in silence)
            print("reading JSON lines from standard input; Ctrl-D ends them", file=sys.stderr)
        return sys.stdin.buffer.read()
    with open(path, "rb") as fh:
        return fh.read()


def _lines(path: str, data: bytes) -> Iterator[str]:
    """The text lines of a job file's bytes (``data``; decompressed if ``path`` ends in ``.gz``), line ends
    kept and any of ``\\n``, ``\\r\\n`` and ``\\r`` taken as one (as text mode's universal newlines), each
    decoded on its own so that a byte that is not UTF-8 is refused naming its line, and the byte-order mark
    some editors put first taken away (``utf-8-sig``). A damaged ``.gz`` is refused at the line after the last
    whole one: gzip's EOFError and zlib.error are not OSErrors, and were tracebacks."""
    raw: IO[bytes] = io.BytesIO(data)
    if _is_gz(path) or data[:2] == GZIP_MAGIC:  # (a gzip file named .jsonl was "not UTF-8 text (byte 0x8b ...")
        raw = gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[assignment]
    lineno = 0
    with raw:
        it = iter(raw)  # chunks ending in b"\n": a b"\r\n" is never split between two
        while True:
            try:
                chunk = next(it)
            except StopIteration:
                return
            except GZIP_ERRORS as exc:
                raise JobFileError(path, lineno + 1, None, gzip_reason(exc)) from None
            for line in chunk.splitlines(keepends=True):
                lineno += 1
                try:
                    yield line.decode("utf-8-sig" if lineno == 1 else "utf-8")
                except UnicodeDecodeError as exc:
                    where = f"byte 0x{exc.object[exc.start]:02x} at byte {exc.start + 1} of the line"
                    raise JobFileError(path, lineno, None, f"not UTF-8 text ({where})") from None


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


class _LongInt:
    """A JSON integer of more digits than Python converts (``sys.get_int_max_str_digits()``, 4300): json.loads
    raised "Exceeds the limit (4300 digits) for integer string conversion", naming no line or field."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return _shown_number(self.text)


def _json_int(text: str) -> int | _LongInt:
    """json's ``parse_int``: the integer, or a :class:`_LongInt` that the field's check refuses by name."""
    try:
        return int(text)
    except ValueError:
        return _LongInt(text)


def _loads(text: str) -> Any:
    """One JSON line. An integer of more digits than int() converts fails json.loads with a plain ValueError: the
    line is read again, with such integers kept as :class:`_LongInt` (only then: a ``parse_int`` for every line
    made reading a file 5 % slower)."""
    try:
        return json.loads(text, object_pairs_hook=_no_duplicate_keys)
    except (json.JSONDecodeError, _DuplicateKey):
        raise
    except ValueError:
        return json.loads(text, object_pairs_hook=_no_duplicate_keys, parse_int=_json_int)


#: A whole number of more digits than this is out of every field's bounds (the largest is 1e12 s).
_MAX_DIGITS = 30


def _shown_number(text: str) -> str:
    """A number as a message shows it: as written, or, if long, its length (a 5000-digit value filled a screen)."""
    digits = sum(c.isdigit() for c in text) if len(text) > _MAX_DIGITS else 0
    return text if digits <= _MAX_DIGITS else f"a number of {digits} digits"


def _shown(value: Any) -> str:
    """``repr(value)`` for a message, cut short if long."""
    if isinstance(value, int) and not isinstance(value, bool):
        return _shown_number(str(value))
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:60]}... ({len(text)} characters)"


#: A field's bounds, as its range error says them: (below the least, above the greatest).
_BOUNDS = {
    "submit_time": (">= 0", f"below {MAX_SECONDS:g} s (about 31,700 years)"),
    "work": ("a finite number > 0", f"below {MAX_SECONDS:g} s (about 31,700 years)"),
    "tasks": ("a whole number >= 1", f"at most {MAX_TASKS} (what the wire's int32 holds)"),
    "cpu_need": ("in (0, 1] (a fraction of one host)",) * 2,
    "memory": ("in (0, 1] (a fraction of one host's memory)",) * 2,
}


def _out_of_range(path: str, line: int, key: str, shown: str, negative: bool) -> JobFileError:
    """The range error of field ``key`` for a value beyond any bound (too large for a float, or to convert)."""
    low, high = _BOUNDS[key]
    return JobFileError(path, line, key, f"must be {low if negative else high}, got {shown}")


def _number(path: str, line: int, key: str, value: Any, *, from_text: bool) -> float:
    if from_text and isinstance(value, str):
        # float() and int() also take "1_000" (as 1000) and digits of other scripts ("３０"), which a job file
        # means as no number; an ASCII cell without "_" (stripped) is to them a decimal number, or inf or nan.
        try:
            if not value.isascii() or "_" in value:
                raise ValueError(value)
            number = float(value)
        except ValueError:
            raise JobFileError(path, line, key, f"must be a number, got {_shown(value)}") from None
        if math.isinf(number) and value.lstrip("+-")[:1] not in ("i", "I"):
            # (9 written 5000 times, or 1e999: a finite number, out of range)
            raise _out_of_range(path, line, key, _shown_number(value), number < 0)
    elif isinstance(value, bool) or not isinstance(value, (int, float)):
        if isinstance(value, _LongInt):
            raise _out_of_range(path, line, key, _shown_number(value.text), value.text.startswith("-"))
        raise JobFileError(path, line, key, f"must be a number, got {_shown(value)}")
    else:
        try:
            number = float(value)
        except OverflowError:  # (an int of 400 digits: math.isfinite raised it, a traceback)
            raise _out_of_range(path, line, key, _shown(value), value < 0) from None
    if not math.isfinite(number):
        raise JobFileError(path, line, key, f"must be finite, got {number!r}")
    return number


def _integer(path: str, line: int, key: str, value: Any, *, from_text: bool) -> int:
    if from_text and isinstance(value, str):
        try:
            if not value.isascii() or "_" in value:  # (as for _number)
                raise ValueError(value)
            return int(value)
        except ValueError:
            digits = value[1:] if value[:1] in ("+", "-") else value
            if digits.isdigit() and digits.isascii():
                # (int() refuses more than 4300 digits: "must be a whole number, got '9999...'", 5000 of them)
                raise _out_of_range(path, line, key, _shown_number(value), value.startswith("-")) from None
            raise JobFileError(path, line, key, f"must be a whole number, got {_shown(value)}") from None
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, _LongInt):
            raise _out_of_range(path, line, key, _shown_number(value.text), value.text.startswith("-"))
        raise JobFileError(path, line, key, f"must be a whole number, got {_shown(value)}")
    return value


def _seconds(path: str, line: int, key: str, value: float) -> float:
    if value >= MAX_SECONDS:
        raise JobFileError(path, line, key, f"must be below {MAX_SECONDS:g} s (about 31,700 years), got {value!r}")
    return value


def _absent(row: Mapping[str, Any], key: str, from_text: bool) -> bool:
    """Whether a line leaves field ``key`` out: no such key, null, or (CSV) an empty cell."""
    return row.get(key) is None or (from_text and row[key] == "")


def _job_from_mapping(
    path: str,
    line: int,
    row: Mapping[str, Any],
    *,
    from_text: bool,
    hosts: tuple[Host, ...] | None,
    refuse: Refuse | None = None,
    required: frozenset[str] = _REQUIRED,
) -> JobSpec:
    unknown = sorted(set(row) - set(FIELDS))
    if unknown:
        raise JobFileError(path, line, unknown[0], f"unknown key (known: {', '.join(FIELDS)})")
    for key in FIELDS:
        if key in required and _absent(row, key, from_text):
            raise JobFileError(path, line, key, "missing")
    job_id = row["id"]
    if isinstance(job_id, int) and not isinstance(job_id, bool):
        job_id = str(job_id)
    elif isinstance(job_id, _LongInt):  # (its digits, as a shorter number's: an id has no bounds)
        job_id = job_id.text
    if not isinstance(job_id, str) or not job_id.strip():
        raise JobFileError(path, line, "id", f"must be a non-empty string, got {job_id!r}")
    if not job_id.isprintable():  # (a newline split simulate's table row; submit refused it, simulate took it)
        raise JobFileError(path, line, "id", "must be printable (no newline, tab or other control character), got "
                           + _shown(job_id))
    given = row.get("submit_time")
    if "submit_time" not in required and _absent(row, "submit_time", from_text):  # (submit --file)
        given = 0.0
    submit = _seconds(path, line, "submit_time", _number(path, line, "submit_time", given, from_text=from_text))
    if submit < 0:
        raise JobFileError(path, line, "submit_time", f"must be >= 0, got {submit!r}")
    tasks = _integer(path, line, "tasks", row["tasks"], from_text=from_text)
    if not -MAX_TASKS <= tasks <= MAX_TASKS:  # (a negative one is JobSpec.validate's, unless it fills a screen)
        raise _out_of_range(path, line, "tasks", _shown(tasks), tasks < 0)
    workload = row.get("workload")
    if workload is None or workload == "":  # absent, null or empty: the default (as the API and submit take "")
        workload = _DEFAULT_WORKLOAD
    if not isinstance(workload, str):
        raise JobFileError(path, line, "workload", f"must be a string, got {workload!r}")
    job = JobSpec(
        id=job_id,
        submit_time=submit,
        tasks=tasks,
        cpu_need=_number(path, line, "cpu_need", row["cpu_need"], from_text=from_text),
        mem=_number(path, line, "memory", row["memory"], from_text=from_text),
        work=_seconds(path, line, "work", _number(path, line, "work", row["work"], from_text=from_text)),
        workload=workload,
    )
    why = _refusal(job, hosts, refuse)
    if why is not None:
        raise JobFileError(path, line, *why)
    return job


def _refusal(job: JobSpec, hosts: tuple[Host, ...] | None, refuse: Refuse | None) -> tuple[str, str] | None:
    """(file field, reason) if ``job`` is invalid, or cannot run on ``hosts`` (when given) under the policy
    whose ``refuse`` hook this is: what Engine.arrive would raise in the middle of a run."""
    try:
        job.validate(hosts)
    except InvalidJob as exc:
        return _FIELD_FROM_MODEL.get(exc.field, exc.field), exc.reason
    why = refuse(job, hosts) if refuse is not None and hosts is not None else None
    return None if why is None else (_FIELD_FROM_MODEL.get(why[0], why[0]), why[1])


class _DuplicateKey(ValueError):
    pass


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """json's object_pairs_hook: a key given twice is refused (json.loads keeps the last, silently)."""
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise _DuplicateKey(key)
        obj[key] = value
    return obj


def _iter_jsonl(
    path: str, lines: Iterable[str], hosts: tuple[Host, ...] | None, refuse: Refuse | None,
    required: frozenset[str] = _REQUIRED,
) -> Iterator[tuple[int, JobSpec]]:
    first = True  # (the first line that is not blank or a comment)
    for lineno, raw in enumerate(lines, start=1):
        text = raw.strip()
        if not text or text.startswith("#"):
            continue
        try:
            obj = _loads(text)
        except RecursionError:  # (a line of 100,000 "[": a traceback)
            raise JobFileError(path, lineno, None, "not valid JSON (nested too deep: a job is one flat JSON "
                               "object)") from None
        except json.JSONDecodeError as exc:
            # (a CSV file under another suffix: its header row is read as JSON, and the user should hear why; a
            # damaged line further down is only that)
            hint = ("; a file that is not JSON lines is read by its suffix: .csv for CSV, .swf for an SWF trace "
                    "(.gz after either)") if first and not text.startswith(("{", "[")) and "," in text else ""
            if hint and path == STDIN:  # (a pipe has no suffix)
                hint = "; standard input is read as JSON lines only: save a CSV to a file named .csv"
            raise JobFileError(path, lineno, None, f"not valid JSON ({exc.msg} at column {exc.colno}){hint}") from None
        except _DuplicateKey as exc:
            raise JobFileError(path, lineno, str(exc), "duplicate key") from None
        first = False
        if not isinstance(obj, dict):
            raise JobFileError(path, lineno, None, f"must be a JSON object, got {type(obj).__name__}")
        yield lineno, _job_from_mapping(path, lineno, obj, from_text=False, hosts=hosts, refuse=refuse,
                                        required=required)


def _iter_csv(
    path: str, lines: Iterable[str], hosts: tuple[Host, ...] | None, refuse: Refuse | None,
    required: frozenset[str] = _REQUIRED,
) -> Iterator[tuple[int, JobSpec]]:
    reader = csv.reader(lines)
    header: list[str] | None = None
    try:
        for row in reader:
            lineno = reader.line_num
            if not row or all(not c.strip() for c in row) or row[0].lstrip().startswith("#"):
                continue
            if header is None:
                header = [c.strip() for c in row]
                unknown = [c for c in header if c not in FIELDS]
                if unknown:
                    other = next((sep for sep in (";", "\t", "|") if len(header) == 1 and sep in header[0]), None)
                    hint = f"; columns are separated by commas, not {other!r}" if other else ""
                    raise JobFileError(path, lineno, unknown[0], f"unknown column (known: {', '.join(FIELDS)}){hint}")
                missing = [c for c in FIELDS if c in required and c not in header]
                if missing:
                    raise JobFileError(path, lineno, missing[0], "missing column")
                twice = [c for i, c in enumerate(header) if c in header[:i]]
                if twice:  # zip below would keep the last, silently
                    raise JobFileError(path, lineno, twice[0], "duplicate column")
                continue
            if len(row) != len(header):
                raise JobFileError(path, lineno, None, f"expected {len(header)} columns, found {len(row)}")
            mapping = {k: v.strip() for k, v in zip(header, row, strict=True)}
            yield lineno, _job_from_mapping(path, lineno, mapping, from_text=True, hosts=hosts, refuse=refuse,
                                            required=required)
    except csv.Error as exc:  # ("field larger than field limit (131072)" was a traceback)
        limit = csv.field_size_limit()
        why = (f"a field is longer than {limit} characters, the most Python's CSV reader takes"
               if "field limit" in str(exc) else f"not valid CSV ({exc})")
        raise JobFileError(path, reader.line_num, None, why) from None


def _iter_numbered(
    path: str, data: bytes, hosts: tuple[Host, ...] | None, refuse: Refuse | None,
    required: frozenset[str] = _REQUIRED,
) -> Iterator[tuple[int, JobSpec]]:
    """(line, job) for each job of a JSON-lines or CSV file's bytes, checking each (duplicate ids included)."""
    seen: dict[str, int] = {}
    lines = _lines(path, data)
    read = _iter_csv if _is_csv(path) else _iter_jsonl
    source = read(path, lines, hosts, refuse, required)
    for line, job in source:
        if job.id in seen:
            raise JobFileError(path, line, "id", f"duplicate id {job.id!r} (first on line {seen[job.id]})")
        seen[job.id] = line
        yield line, job


def iter_jobs(
    path: str | os.PathLike[str], *, hosts: tuple[Host, ...] | None = None, refuse: Refuse | None = None
) -> Iterator[JobSpec]:
    """Stream the jobs of a JSON-lines or CSV job file, checking each (duplicate ids included).

    With ``hosts``, each job must also fit that cluster (:meth:`JobSpec.validate`) and, with ``refuse`` (a
    policy's hook), be one that policy can run there: a job the engine would refuse is refused here, naming
    its line, before any run starts. The file is read whole first (:func:`load_jobs` says why).
    """
    p = os.fspath(path)
    for _, job in _iter_numbered(p, _read_bytes(p), hosts, refuse):
        yield job


@dataclass
class JobFile:
    """The jobs of one job file and how they were read. ``sha256`` is the hash of the bytes parsed (read
    once), ``abspath`` the file's absolute path when read; ``lines`` maps each job id to its 1-based line.
    For an SWF trace, ``records`` is the number of records read and ``dropped`` the records each rule of the
    conversion removed (:data:`workloads.annotate.DROP_RULES`, every rule listed); both are None otherwise."""

    path: str
    abspath: str
    sha256: str
    jobs: list[JobSpec]
    lines: dict[str, int] = field(default_factory=dict, repr=False)
    records: int | None = None
    dropped: dict[str, int] | None = None

    @property
    def n_dropped(self) -> int:
        return sum(self.dropped.values()) if self.dropped else 0

    def drop_note(self) -> str | None:
        """``dropped N of M records: rule=count, ...`` (the rules that dropped any), or None if none did."""
        if not self.n_dropped:
            return None
        assert self.dropped is not None
        tallies = ", ".join(f"{rule}={n}" for rule, n in self.dropped.items() if n)
        return f"dropped {self.n_dropped} of {self.records} records: {tallies}"

    def provenance(self) -> dict[str, Any]:
        """What a results folder's config.json records about the file: which one, its hash, the SWF tallies."""
        conversion = None if self.dropped is None else {"records": self.records, "dropped": dict(self.dropped)}
        return {"jobs_file": self.path, "jobs_file_abspath": self.abspath, "jobs_file_sha256": self.sha256,
                "swf_conversion": conversion}


#: An SWF trace's weeks to load: one week ``k``, or the weeks ``(first, last)``, both included, as one run's jobs.
Segment = int | tuple[int, int]


def parse_segment(text: str) -> Segment:
    """``--segment``: ``K`` (one week) or ``A-B`` (weeks A to B, A <= B), indices from 0."""
    first, sep, last = text.strip().partition("-")
    try:
        a, b = int(first), int(last) if sep else None
    except ValueError:
        raise ValueError(f"expected a week K or weeks A-B (indices from 0), got {text!r}") from None
    if a < 0 or (b is not None and b < 0):
        raise ValueError(f"week indices start at 0, got {text!r}")
    if b is None or b == a:
        return a
    if a > b:
        raise ValueError(f"a range A-B needs A <= B, got {text!r} (did you mean {b}-{a}?)")
    return a, b


def segment_text(segment: Segment) -> str:
    """``week 5`` or ``weeks 92-99``."""
    first, last = (segment, segment) if isinstance(segment, int) else segment
    return f"week {first}" if first == last else f"weeks {first}-{last}"


def load_jobs(
    path: str | os.PathLike[str],
    *,
    hosts: tuple[Host, ...] | None = None,
    segment: Segment | None = None,
    workload: str = _DEFAULT_WORKLOAD,
    refuse: Refuse | None = None,
    timed: bool = True,
) -> JobFile:
    """Read a job file whole, once, and check it: its jobs in file order, with the hash of the bytes parsed
    (hashing the path later would hash whatever is there then, and the empty string for ``/dev/stdin``). ``-``
    (:data:`STDIN`) is standard input, read as JSON lines.

    ``.swf`` / ``.swf.gz`` files go through the HPC2N conversion of 001 Sec. IV-C
    (:func:`workloads.annotate.convert_hpc2n`); with ``segment=k`` only week ``k`` is returned, its
    submit times relative to the week's start (:func:`workloads.annotate.segment_weeks`), with
    ``segment=(a, b)`` the weeks ``a`` to ``b`` as one list, relative to week ``a``'s start (the same times
    week by week: a week's jobs are those of ``segment=k``), otherwise the whole trace with submit times
    relative to the log start. ``workload`` names the job program
    of SWF jobs. ``segment`` is refused for other formats. A malformed SWF line, a repeated SWF job number
    or a time out of bounds raises :class:`JobFileError` with its line number, like a bad job line.
    ``hosts`` and ``refuse``: as for :func:`iter_jobs` (for a trace, the refusal counts the jobs that do not
    fit and names the first). ``timed=False`` (``submit --file``, which submits every job at once) lets a job
    file leave out ``submit_time`` (0 then); one given is still checked.
    """
    p = os.fspath(path)
    if segment is not None and not is_swf(p):
        raise ValueError("--segment: only SWF traces are split into weeks")
    data = _read_bytes(p)
    digest = hashlib.sha256(data).hexdigest()
    abspath = p if p == STDIN else os.path.abspath(p)  # (not a file "-" in the current folder)
    if is_swf(p):
        return _load_swf(p, abspath, data, digest, hosts, segment, workload, refuse)
    numbered = list(_iter_numbered(p, data, hosts, refuse, _REQUIRED if timed else _UNTIMED))
    return JobFile(p, abspath, digest, [job for _, job in numbered], {job.id: line for line, job in numbered})


def read_jobs(
    path: str | os.PathLike[str],
    *,
    hosts: tuple[Host, ...] | None = None,
    segment: Segment | None = None,
    workload: str = _DEFAULT_WORKLOAD,
    refuse: Refuse | None = None,
) -> list[JobSpec]:
    """The jobs of :func:`load_jobs`, alone."""
    return load_jobs(path, hosts=hosts, segment=segment, workload=workload, refuse=refuse).jobs


def _load_swf(
    p: str,
    abspath: str,
    data: bytes,
    digest: str,
    hosts: tuple[Host, ...] | None,
    segment: Segment | None,
    workload: str,
    refuse: Refuse | None,
) -> JobFile:
    from workloads.annotate import HPC2N_NODES, WEEK_S, convert_hpc2n, segment_weeks
    from workloads.swf import SWFError, SWFJob, SWFReader

    # Converted for the trace's own machine, so that a job too wide for the given hosts is refused below
    # rather than dropped by the conversion's rule for jobs no cluster of that size could hold.
    nodes = max(len(hosts), HPC2N_NODES) if hosts is not None else HPC2N_NODES
    lines: dict[int, int] = {}

    def unique(reader: SWFReader) -> Iterator[SWFJob]:
        # Two records with one job number would be two jobs with one id, which the engine refuses at the
        # second's arrival, in the middle of a run.
        for rec in reader:
            first = lines.setdefault(rec.job_number, reader.line)
            if first != reader.line:
                raise JobFileError(p, reader.line, "id", f"duplicate SWF job number {rec.job_number} "
                                   f"(first on line {first})")
            # (before the conversion, whose JobSpec.validate would refuse the work without the line)
            for key, value, swf in (("submit_time", rec.submit_time, "2, submit time"),
                                    ("work", rec.run_time, "4, run time")):
                if value >= MAX_SECONDS:
                    raise JobFileError(p, reader.line, key, f"must be below {MAX_SECONDS:g} s (about 31,700 years), "
                                       f"got {value!r} (SWF field {swf})")
            yield rec

    try:
        with SWFReader(p, data=data) as reader:
            conv = convert_hpc2n(unique(reader), nodes=nodes, workload=workload)
    except SWFError as exc:
        raise JobFileError(exc.path, exc.line, None, exc.reason) from None
    by_id = {str(n): line for n, line in lines.items()}
    jobs = conv.jobs
    if segment is not None:
        first, last = (segment, segment) if isinstance(segment, int) else segment
        segs = segment_weeks(jobs)
        if not 0 <= first <= last < len(segs):
            raise ValueError(f"--segment: {p} has weeks 0..{len(segs) - 1}, got {segment_text(segment)}")
        # (weeks after the first moved back on by whole weeks: a week's jobs and times are its segment's)
        jobs = [job if k == first else dataclasses.replace(job, submit_time=job.submit_time + (k - first) * WEEK_S)
                for k in range(first, last + 1) for job in segs[k]]
    result = JobFile(p, abspath, digest, jobs, by_id, conv.records, dict(conv.dropped))
    if hosts is not None:
        what = f"of {segment_text(segment)}" if segment is not None else "of the trace"
        machine = f" (SWF traces are converted by HPC2N's rules, 001 Sec. IV-C, for its machine of {HPC2N_NODES} nodes)"
        check_jobs(result, jobs, hosts, refuse, what=what, machine=machine)
    return result


def check_jobs(
    source: JobFile,
    jobs: Iterable[JobSpec],
    hosts: tuple[Host, ...],
    refuse: Refuse | None = None,
    *,
    what: str = "of the file",
    machine: str = "",
) -> None:
    """Refuse ``jobs`` (of ``source``) if any cannot run on ``hosts`` (:meth:`JobSpec.validate`, and the policy's
    ``refuse`` hook): :class:`JobFileError` naming the first one's line and field and how many of them do not
    fit (``N of the M jobs {what}``), with what the SWF conversion dropped before, so that the counts add up.
    The engine would refuse each only at its arrival, in the middle of the run."""
    jobs = list(jobs)
    first: tuple[JobSpec, tuple[str, str]] | None = None
    unfit = 0
    for job in jobs:
        why = _refusal(job, hosts, refuse)
        if why is not None:
            unfit += 1
            first = first or (job, why)
    if first is None:
        return
    job, (field_name, reason) = first
    note = source.drop_note()
    if note is not None and what != "of the trace":  # a week's jobs, and the whole trace's drops
        note = note.replace(" records:", " records of the whole trace:", 1)
    dropped = "" if note is None else f" (after the conversion {note})"
    kind = "SWF job" if source.dropped is not None else "job"
    raise JobFileError(
        source.path, source.lines.get(job.id), field_name,
        f"{unfit} of the {len(jobs)} jobs {what}{dropped} do not fit on the given {len(hosts)} hosts{machine}; "
        f"the first, {kind} {job.id}: {field_name}: {reason}")


def write_jobs(path: str | os.PathLike[str], jobs: Iterable[JobSpec]) -> int:
    """Write jobs as JSON lines (or CSV if ``path`` ends in ``.csv``; ``.gz`` compresses); return the count.

    Floats are written exactly (shortest round-tripping form), so :func:`read_jobs` gives equal jobs.
    """
    p = os.fspath(path)
    if is_swf(p):
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
