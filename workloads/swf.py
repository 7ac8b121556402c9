"""Standard Workload Format (SWF) reader and writer, plain or gzip-compressed.

SWF is the format of the Parallel Workloads Archive, the "well-established on-line repository [1]" from
which seed 001 Sec. IV-C takes the HPC2N trace. A file is a header of comment lines starting with ``;``
(``; Key: value`` pairs such as ``MaxNodes``, ``MaxProcs``, ``UnixStartTime``, plus free notes), followed
by one job per line with 18 whitespace-separated numeric fields; ``-1`` means "unknown". The fields, in
order (Feitelson's SWF definition, version 2.2):

 1 job number              7 used memory (KB/proc)    13 group id
 2 submit time (s)         8 requested processors     14 executable number
 3 wait time (s)           9 requested time (s)       15 queue number
 4 run time (s)           10 requested memory (KB/p)  16 partition number
 5 allocated processors   11 status                   17 preceding job number
 6 average CPU time (s)   12 user id                  18 think time (s)

Reading is streaming (:class:`SWFReader` yields one :class:`SWFJob` at a time) and ``.gz`` files are
decompressed transparently, as is a gzip file under another name, known by its first two bytes (``1f 8b``,
which no text trace starts with; it was read as text: "expected 18 fields, found 22"). A UTF-8 byte-order
mark at the start of the file is skipped. A malformed record line raises :class:`SWFError` naming the file, the
1-based line number and the field: a wrong field count, a token that is not a plain decimal number (``abc``,
``1_000``), a value that is not finite (``nan``, ``inf``, ``1e999``), a fractional value in an integer field, or
a negative value other than ``-1``: ``-1`` is "unknown", and every field of the definition is a count, a size,
a time, a status or an identifier, none of which is negative (``-7`` processors had been read as unknown, and
``-0.5`` s as a missing submit time). With ``skip_bad=True`` such a line is skipped instead and counted
(:attr:`SWFReader.skipped`, :attr:`SWFTrace.skipped`). A ``.gz`` file that ends early or is damaged raises
:class:`SWFError` too, at the line after the last whole one (``compressed file is truncated``), whatever
``skip_bad`` says: what is missing cannot be skipped. :func:`write_swf` writes a header and records that read
back identically (records of values SWF has: finite, and -1 or at least 0).

Text is read and written as Latin-1 so that any byte in a header survives a round trip.
"""

from __future__ import annotations

import gzip
import io
import math
import os
import re
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import astuple, dataclass, field, fields
from pathlib import Path
from types import TracebackType
from typing import IO

__all__ = [
    "SWF_FIELDS",
    "SWFError",
    "SWFHeader",
    "SWFJob",
    "SWFReader",
    "SWFTrace",
    "format_record",
    "iter_swf",
    "parse_record",
    "read_swf",
    "write_swf",
]

_ENCODING = "latin-1"
#: The first two bytes of every gzip file (RFC 1952 Sec. 2.3.1); no SWF text starts with them (0x1f is a control
#: character), so a compressed trace under a name without ``.gz`` is read as what it is.
GZIP_MAGIC = b"\x1f\x8b"
#: A UTF-8 byte-order mark as Latin-1 decodes it: some editors start a file with one.
_BOM = "\xef\xbb\xbf"


class SWFError(ValueError):
    """A malformed SWF line. ``path`` and ``line`` (1-based) locate it; ``reason`` says what is wrong."""

    def __init__(self, path: str, line: int, reason: str) -> None:
        super().__init__(f"{path}:{line}: {reason}")
        self.path = path
        self.line = line
        self.reason = reason


@dataclass(frozen=True, slots=True)
class SWFJob:
    """One SWF record: the 18 standard fields, in file order. ``-1`` means the value is unknown."""

    job_number: int
    submit_time: float
    wait_time: float
    run_time: float
    allocated_processors: int
    average_cpu_time: float
    used_memory_kb: float
    requested_processors: int
    requested_time: float
    requested_memory_kb: float
    status: int
    user_id: int
    group_id: int
    executable_number: int
    queue_number: int
    partition_number: int
    preceding_job_number: int
    think_time: float


#: The field names in file order.
SWF_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(SWFJob))
_INT_FIELDS = frozenset(f.name for f in fields(SWFJob) if f.type in ("int", int))
_IS_INT: tuple[bool, ...] = tuple(name in _INT_FIELDS for name in SWF_FIELDS)
_N_FIELDS = len(SWF_FIELDS)
#: Lines this long or longer take the checked path: float() gives inf for a token of 309 digits or more.
_FAST_LINE = 300
#: How many lines the reader checks at once (see :func:`_plain`).
_BATCH = 512
#: A "-" that does not start a "-1" token: a negative value other than SWF's "unknown" (or an exponent's sign).
_ODD_MINUS = re.compile(r"-(?!1(?:[ \t\r\n]|\Z))")


def _plain(text: str, lines: Iterable[str]) -> bool:
    """Whether the record lines of ``text`` (made of ``lines``), where int() and float() took every token, hold
    only values SWF has, so that the reader's fast path may keep what they gave. Not so, the checked path
    (:func:`parse_record`) says which field is wrong: nan / inf / Infinity (any case) contain an "n"; 1e999 an
    "e", and a token of 309 digits or more (a line of 300 characters or more) is inf too; 1_000 has an "_"; and
    a "-" that is not one of a "-1" token is a negative value other than -1 (or an exponent's sign)."""
    return ("n" not in text and "N" not in text and "e" not in text and "E" not in text and "_" not in text
            and max(map(len, lines)) < _FAST_LINE and _ODD_MINUS.search(text) is None)


@dataclass
class SWFHeader:
    """The ``;`` comment lines of an SWF file.

    ``lines`` keeps every comment line verbatim (without the leading ``;``) so the writer reproduces it.
    ``fields`` maps each ``Key: value`` to its value (stripped); a key that repeats (``Note``, ``Queue``,
    ``Partition``) has its values joined by newlines.
    """

    lines: list[str] = field(default_factory=list)
    fields: dict[str, str] = field(default_factory=dict)

    def add(self, text: str) -> None:
        """Record one comment line (``text`` without the leading ``;``)."""
        self.lines.append(text)
        key, sep, value = text.partition(":")
        key = key.strip()
        if sep and key and " " not in key:
            value = value.strip()
            self.fields[key] = f"{self.fields[key]}\n{value}" if key in self.fields else value

    def get_int(self, key: str) -> int | None:
        """An integer header field (``MaxNodes``, ``MaxProcs``, ``MaxJobs``, ``UnixStartTime`` ...), or None."""
        value = self.fields.get(key)
        if value is None:
            return None
        try:
            return int(value.split()[0])
        except (ValueError, IndexError):
            return None

    @property
    def max_nodes(self) -> int | None:
        return self.get_int("MaxNodes")

    @property
    def max_procs(self) -> int | None:
        return self.get_int("MaxProcs")

    @property
    def unix_start_time(self) -> int | None:
        return self.get_int("UnixStartTime")


@dataclass
class SWFTrace:
    """A whole SWF file in memory: header, records, and how many bad lines were skipped."""

    header: SWFHeader
    jobs: list[SWFJob]
    skipped: int = 0
    bad_lines: list[int] = field(default_factory=list)


class _OwningGzipFile(gzip.GzipFile):
    """A GzipFile reading a file object that it closes with itself, as ``gzip.open(path)`` closes its file."""

    def __init__(self, fileobj: IO[bytes]) -> None:
        super().__init__(fileobj=fileobj, mode="rb")
        self._owned = fileobj

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._owned.close()


def _open_text(path: str | os.PathLike[str], mode: str, data: bytes | None = None) -> IO[str]:
    """``path`` as text, or ``data`` (its bytes, read already) when given. Read, a ``.gz`` name (any case) or
    data starting with :data:`GZIP_MAGIC` is decompressed; written, a ``.gz`` name is compressed."""
    p = os.fspath(path)
    gz = p.lower().endswith(".gz")
    if mode != "r":
        if gz:
            return gzip.open(p, mode + "t", encoding=_ENCODING, newline="")  # type: ignore[return-value]
        return open(p, mode, encoding=_ENCODING, newline="")  # noqa: SIM115 - the caller owns the handle
    if data is not None:
        raw: IO[bytes] = io.BytesIO(data)
        if gz or data[:2] == GZIP_MAGIC:
            raw = gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[assignment]
        return io.TextIOWrapper(raw, encoding=_ENCODING, newline="")
    if gz:
        return gzip.open(p, "rt", encoding=_ENCODING, newline="")  # type: ignore[return-value]
    fh = open(p, "rb")  # noqa: SIM115 - the reader owns the handle
    try:
        # (peek, not read and seek: a pipe such as /dev/stdin cannot seek)
        raw = _OwningGzipFile(fh) if fh.peek(2)[:2] == GZIP_MAGIC else fh  # type: ignore[assignment]
    except BaseException:
        fh.close()
        raise
    return io.TextIOWrapper(raw, encoding=_ENCODING, newline="")


#: What reading a damaged ``.gz`` raises: none of them is an OSError but BadGzipFile (a bad header).
GZIP_ERRORS = (EOFError, zlib.error, gzip.BadGzipFile)


def gzip_reason(exc: BaseException) -> str:
    """What a :data:`GZIP_ERRORS` error says of the file, for a message naming its line (SWF traces, job files)."""
    if isinstance(exc, EOFError):
        return "compressed file is truncated"
    if isinstance(exc, gzip.BadGzipFile):
        return "not a gzip file"
    return f"compressed data is damaged ({exc})"


def _parse_int(tok: str) -> int:
    if "_" in tok:  # (int() and float() take "1_000" for 1000: not how a trace writes a number)
        raise ValueError("not a number")
    try:
        return int(tok)
    except ValueError:
        x = float(tok)  # "12.0" is a whole number written as a float; "1.5" is not
        if not math.isfinite(x):
            raise ValueError(f"{tok!r} is not a finite number") from None
        if not x.is_integer():
            raise ValueError(f"{tok!r} is not a whole number") from None
        return int(x)


def _parse_float(tok: str) -> float:
    if "_" in tok:
        raise ValueError("not a number")
    x = float(tok)
    if not math.isfinite(x):
        raise ValueError(f"{tok!r} is not a finite number")
    return x


def parse_record(text: str) -> SWFJob:
    """Parse one record line; raise ``ValueError`` with a reason if it is malformed."""
    parts = text.split()
    if len(parts) != _N_FIELDS:
        raise ValueError(f"expected {_N_FIELDS} fields, found {len(parts)}")
    values: list[int | float] = []
    for i, (tok, is_int) in enumerate(zip(parts, _IS_INT, strict=True)):
        try:
            value = _parse_int(tok) if is_int else _parse_float(tok)
            if value < 0 and value != -1:  # (-1 is "unknown"; -7 processors or -0.5 s is no value of SWF's)
                raise ValueError("negative: the only negative value SWF has is -1, unknown")
        except ValueError as exc:
            raise ValueError(f"field {i + 1} ({SWF_FIELDS[i]}): bad value {tok!r} ({exc})") from None
        values.append(value)
    return SWFJob(*values)  # type: ignore[arg-type]


class SWFReader:
    """Stream the records of an SWF file (``.swf`` or ``.swf.gz``).

    The header is read when the reader is created (it precedes the records), so :attr:`header` is
    complete before the first record is yielded; a comment line found later is appended to it. Use as a
    context manager, or iterate to the end (which closes the file)::

        with SWFReader(path, skip_bad=True) as r:
            for job in r: ...
            print(r.skipped)

    ``data``: the file's bytes, read already, parsed instead of opening ``path`` (which then only names the
    file in errors and says whether it is compressed): a caller that records the file's hash parses the very
    bytes it hashed. :attr:`line` is the 1-based line of the record last yielded.
    """

    def __init__(self, path: str | os.PathLike[str], *, skip_bad: bool = False, data: bytes | None = None) -> None:
        self.path = os.fspath(path)
        self.skip_bad = skip_bad
        self.header = SWFHeader()
        self.skipped = 0
        self.bad_lines: list[int] = []
        self.line = 0
        self._fh: IO[str] | None = _open_text(self.path, "r", data)
        self._lineno = 0
        self._pending: str | None = None
        try:
            for raw in self._fh:
                self._lineno += 1
                if self._lineno == 1 and raw.startswith(_BOM):  # (was "1: expected 18 fields, found 3")
                    raw = raw[len(_BOM):]
                stripped = raw.strip()
                if stripped.startswith(";"):
                    self.header.add(stripped[1:].rstrip("\r\n"))
                elif stripped:
                    self._pending = stripped
                    break
        except GZIP_ERRORS as exc:
            self.close()
            raise SWFError(self.path, self._lineno + 1, gzip_reason(exc)) from None
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def __enter__(self) -> SWFReader:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _record(self, text: str, lineno: int) -> SWFJob | None:
        try:
            return parse_record(text)
        except ValueError as exc:
            if not self.skip_bad:
                self.close()
                raise SWFError(self.path, lineno, str(exc)) from None
            self.skipped += 1
            self.bad_lines.append(lineno)
            return None

    def __iter__(self) -> Iterator[SWFJob]:
        if self._fh is None:
            return
        if self._pending is not None:
            text, self._pending = self._pending, None
            job = self._record(text, self._lineno)
            if job is not None:
                self.line = self._lineno
                yield job
        try:
            yield from self._records(self._fh)
        except GZIP_ERRORS as exc:  # the line after the last whole one is where the data ends or breaks
            self.close()
            raise SWFError(self.path, self._lineno + 1, gzip_reason(exc)) from None

    def _records(self, fh: IO[str]) -> Iterator[SWFJob]:
        # Lines are read in batches, and each batch's text is checked whole for what int() and float() take
        # and SWF does not (see _plain): line by line, those checks took a tenth of the time of a parse.
        it = iter(fh)
        while True:
            batch: list[str] = []
            append = batch.append
            failed: BaseException | None = None
            try:
                for raw in it:
                    append(raw)
                    if len(batch) == _BATCH:
                        break
            except GZIP_ERRORS as exc:  # (the lines read before it are whole: they are parsed first)
                failed = exc
            if batch:
                yield from self._batch(batch, _plain("".join(batch), batch))
            if failed is not None:
                raise failed
            if len(batch) < _BATCH:
                break
        self.close()

    def _batch(self, lines: list[str], plain: bool) -> Iterator[SWFJob]:
        ival, fval = int, float
        n = _N_FIELDS
        lineno = self._lineno
        for raw in lines:
            self._lineno = lineno = lineno + 1
            parts = raw.split()
            if not parts:
                continue
            if parts[0].startswith(";"):
                self.header.add(raw.strip()[1:])
                continue
            # Fast path for well-formed lines (the common case); anything odd goes through parse_record
            # so that the error message is precise.
            if len(parts) == n:
                try:
                    job = SWFJob(
                        ival(parts[0]), fval(parts[1]), fval(parts[2]), fval(parts[3]), ival(parts[4]),
                        fval(parts[5]), fval(parts[6]), ival(parts[7]), fval(parts[8]), fval(parts[9]),
                        ival(parts[10]), ival(parts[11]), ival(parts[12]), ival(parts[13]), ival(parts[14]),
                        ival(parts[15]), ival(parts[16]), fval(parts[17]),
                    )  # fmt: skip
                except ValueError:
                    job = None
                if job is not None and (plain or _plain(raw, (raw,))):
                    self.line = lineno
                    yield job
                    continue
            maybe = self._record(raw, lineno)
            if maybe is not None:
                self.line = lineno
                yield maybe


def iter_swf(path: str | os.PathLike[str], *, skip_bad: bool = False) -> Iterator[SWFJob]:
    """Yield the records of ``path`` one by one (see :class:`SWFReader` for the header and skip count)."""
    with SWFReader(path, skip_bad=skip_bad) as reader:
        yield from reader


def read_swf(path: str | os.PathLike[str], *, skip_bad: bool = False) -> SWFTrace:
    """Read a whole SWF file: header, records in file order, and the number of skipped bad lines."""
    with SWFReader(path, skip_bad=skip_bad) as reader:
        jobs = list(reader)
        return SWFTrace(header=reader.header, jobs=jobs, skipped=reader.skipped, bad_lines=reader.bad_lines)


def _fmt(value: int | float) -> str:
    if isinstance(value, int):
        return str(value)
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(value)


def format_record(job: SWFJob) -> str:
    """One SWF record line (no newline). Floats are written exactly (``repr``) so they read back equal."""
    return " ".join(_fmt(v) for v in astuple(job))


def write_swf(
    path: str | os.PathLike[str],
    jobs: Iterable[SWFJob],
    header: SWFHeader | Iterable[str] | None = None,
) -> int:
    """Write ``jobs`` to ``path`` (gzip-compressed if it ends in ``.gz``); return the number written.

    ``header`` is an :class:`SWFHeader` (its lines are written verbatim) or an iterable of comment
    texts; each becomes a line ``;<text>``.
    """
    lines = header.lines if isinstance(header, SWFHeader) else list(header or ())
    count = 0
    p = Path(path)
    with _open_text(p, "w") as fh:
        for text in lines:
            if "\n" in text or "\r" in text:
                raise ValueError(f"header line {text!r} contains a line break")
            fh.write(f";{text}\n")
        for job in jobs:
            fh.write(format_record(job))
            fh.write("\n")
            count += 1
    return count
