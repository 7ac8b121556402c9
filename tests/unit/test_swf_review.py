"""SWF traces: the input review's damaged traces (``1e999``, negative values other than -1, ``1_0_0``, a UTF-8
byte-order mark, a gzip file named ``.swf``), and the fast path against the checked one."""

from __future__ import annotations

import gzip
import random
import warnings
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workloads.jobfile import JobFileError, load_jobs
from workloads.swf import SWF_FIELDS, SWFError, SWFJob, SWFReader, parse_record, read_swf

GOOD = "1 0 5 100 4 90 1024 4 200 1024 1 7 1 -1 -1 1 -1 -1"
HEADER = "; Version: 2.2\n; MaxNodes: 240\n"


def _with(index: int, token: str, line: str = GOOD) -> str:
    parts = line.split()
    parts[index] = token
    return " ".join(parts)


def _trace(path: Path, *records: str) -> Path:
    """``path``: the header (lines 1 and 2), a good record on line 3, then ``records`` from line 4."""
    path.write_text(HEADER + "\n".join([GOOD.replace("1 0", "9 0", 1), *records]) + "\n")
    return path


# ---- values that are not finite ------------------------------------------------------------------------------


@pytest.mark.parametrize("token", ["1e999", "-1E999", "9" * 400, "1e400"])
@pytest.mark.parametrize("index", [1, 3, 6, 8, 9, 17])  # submit, run, used memory, requested time and memory, think
def test_a_value_written_finite_that_is_inf_is_refused_like_inf(tmp_path: Path, token: str, index: int) -> None:
    """1e999 passed the fast path as inf (it looked only for the letter "n"): in a memory field the record was
    then dropped as memory_exceeds_node without a word, while ``inf`` refused the trace."""
    path = _trace(tmp_path / "t.swf", _with(index, token))
    with pytest.raises(SWFError) as info:
        read_swf(path)
    assert info.value.line == 4
    assert str(info.value) == (f"{path}:4: field {index + 1} ({SWF_FIELDS[index]}): bad value {token!r} "
                               f"({token!r} is not a finite number)")


def test_a_used_memory_of_1e999_is_refused_by_simulate_not_dropped(tmp_path: Path) -> None:
    path = _trace(tmp_path / "t.swf", _with(6, "1e999"))
    with pytest.raises(JobFileError) as info:
        load_jobs(path)
    assert info.value.line == 4
    assert "field 7 (used_memory_kb): bad value '1e999'" in str(info.value)


def test_an_integer_field_of_more_digits_than_python_reads_is_not_finite() -> None:
    with pytest.raises(ValueError, match=r"field 8 \(requested_processors\): bad value .* is not a finite number"):
        parse_record(_with(7, "9" * 5000))


# ---- negative values ---------------------------------------------------------------------------------------------


_INT_FIELD = [isinstance(getattr(parse_record(GOOD), name), int) for name in SWF_FIELDS]


@pytest.mark.parametrize(("index", "token"), [(i, t) for i in range(18) for t in ("-7", "-2", "-10", "-0.5", "-1.5")
                                              if not (_INT_FIELD[i] and "." in t)])  # (a fraction is refused as one)
def test_a_negative_value_other_than_minus_one_is_refused_naming_the_field(tmp_path: Path, index: int,
                                                                           token: str) -> None:
    """-7 requested processors was read as "unknown" (the request fell back on the allocation) and -0.5 s as an
    unknown submit time (dropped): SWF's only negative value is -1, and every field is a count, a size, a time,
    a status or an identifier."""
    path = _trace(tmp_path / "t.swf", GOOD.replace("1 0", "2 0", 1), _with(index, token, GOOD.replace("1 0", "3 0", 1)))
    with pytest.raises(SWFError) as info:
        read_swf(path)
    assert info.value.line == 5
    assert str(info.value) == (f"{path}:5: field {index + 1} ({SWF_FIELDS[index]}): bad value {token!r} "
                               "(negative: the only negative value SWF has is -1, unknown)")
    trace = read_swf(path, skip_bad=True)
    assert [j.job_number for j in trace.jobs] == [9, 2] and trace.bad_lines == [5]


@pytest.mark.parametrize("index", range(18))
@pytest.mark.parametrize("token", ["-1", "-1.0", "0", "-0"])
def test_minus_one_and_zero_are_still_read_in_every_field(tmp_path: Path, index: int, token: str) -> None:
    path = _trace(tmp_path / "t.swf", _with(index, token))
    job = read_swf(path).jobs[-1]
    assert getattr(job, SWF_FIELDS[index]) == float(token)


def test_negative_requested_processors_are_refused_by_simulate(tmp_path: Path) -> None:
    path = _trace(tmp_path / "t.swf", _with(7, "-7"))
    with pytest.raises(JobFileError) as info:
        load_jobs(path)
    assert str(info.value) == (f"{path}:4: field 8 (requested_processors): bad value '-7' (negative: the only "
                               "negative value SWF has is -1, unknown)")


# ---- numbers written 1_0_0 ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("index", "token"), [(3, "1_0_0"), (7, "1_6"), (0, "1_000"), (1, "1_0.5")])
def test_a_number_with_underscores_is_not_a_number(tmp_path: Path, index: int, token: str) -> None:
    """int() and float() read 1_0_0 as 100: the record ran for 100 s."""
    path = _trace(tmp_path / "t.swf", _with(index, token))
    with pytest.raises(SWFError) as info:
        read_swf(path)
    assert str(info.value) == f"{path}:4: field {index + 1} ({SWF_FIELDS[index]}): bad value {token!r} (not a number)"


# ---- a byte-order mark, a gzip file named .swf ------------------------------------------------------------------


@pytest.mark.parametrize("text", [HEADER + GOOD + "\n", GOOD + "\n" + GOOD.replace("1 0", "2 0", 1) + "\n"])
@pytest.mark.parametrize("name", ["t.swf", "t.swf.gz"])
def test_a_utf8_byte_order_mark_is_skipped(tmp_path: Path, text: str, name: str) -> None:
    """It gave "t.swf:1: expected 18 fields, found 3" (the mark and "; Version: 2.2" read as a record), with no
    hint; job files accept one."""
    data = b"\xef\xbb\xbf" + text.encode()
    path = tmp_path / name
    path.write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    plain = tmp_path / "plain.swf"
    plain.write_text(text)
    trace = read_swf(path)
    assert trace.jobs == read_swf(plain).jobs and trace.jobs[0].job_number == 1
    assert trace.header == read_swf(plain).header
    with SWFReader(path, data=path.read_bytes()) as reader:
        assert list(reader) == trace.jobs
    assert len(load_jobs(path).jobs) == len(trace.jobs)


def test_a_byte_order_mark_later_than_the_first_byte_is_still_refused(tmp_path: Path) -> None:
    path = tmp_path / "t.swf"
    path.write_bytes(f"{GOOD}\n".encode() + b"\xef\xbb\xbf" + f"{GOOD}\n".encode())
    with pytest.raises(SWFError, match=r":2: field 1 \(job_number\): bad value"):
        read_swf(path)


def test_a_gzip_file_named_swf_is_read_as_gzip(tmp_path: Path) -> None:
    """It gave "t.swf:1: expected 18 fields, found 22" (the compressed bytes read as text). The file is closed
    after, as gzip.open closes its own."""
    text = HEADER + "".join(GOOD.replace("1 0", f"{i} {i}", 1) + "\n" for i in range(1, 1201))
    data = gzip.compress(text.encode())
    path = tmp_path / "t.swf"
    path.write_bytes(data)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResourceWarning)
        trace = read_swf(path)
        assert [j.job_number for j in trace.jobs] == list(range(1, 1201))
        assert trace.header.max_nodes == 240
        with SWFReader(path, data=data) as reader:
            assert list(reader) == trace.jobs
        reader = SWFReader(path)
        assert next(iter(reader)).job_number == 1
        reader.close()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(SWFError, match="compressed file is truncated"):
        read_swf(path)


# ---- the fast path against the checked one -------------------------------------------------------------------------

# Tokens the fast path (int() and float() on every field) takes and the checked path may refuse, or not.
TOKENS = ["0", "1", "17", "-1", "-1.0", "-0", "+5", "2.0", "2.5", ".5", "5.", "-7", "-0.5", "-10", "-1.5", "1e3",
          "1e-5", "1E+2", "1e999", "nan", "inf", "-Infinity", "1_0", "9" * 310, "1" * 40, "0x10", "abc"]


def _checked(line: str) -> SWFJob | None:
    try:
        return parse_record(line)
    except ValueError:
        return None


def _read_back(path: Path, lines: list[str]) -> None:
    """What the reader (fast path, by batches) gives for ``lines`` is what :func:`parse_record` gives, line by line."""
    path.write_text("".join(lines))
    expect = [(i + 1, _checked(line)) for i, line in enumerate(lines) if line.split() and line[0] != ";"]
    with SWFReader(path, skip_bad=True) as reader:
        got = [(reader.line, job) for job in reader]
    assert got == [(n, job) for n, job in expect if job is not None]
    assert reader.bad_lines == [n for n, job in expect if job is None]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.tuples(st.integers(0, 17), st.sampled_from(TOKENS)), max_size=3), min_size=1,
                max_size=12),
       st.sampled_from(["\n", "\r\n", "\t\n", ""]))
def test_the_fast_path_takes_what_the_checked_path_takes(tmp_path_factory: pytest.TempPathFactory,
                                                         edits: list[list[tuple[int, str]]], end: str) -> None:
    """Good records with up to three tokens replaced each."""
    lines = []
    for i, changes in enumerate(edits):
        parts = GOOD.replace("1 0", f"{i} 0", 1).split()
        for index, token in changes:
            parts[index] = token
        lines.append(" ".join(parts) + "\n")
    lines[-1] = lines[-1].rstrip("\n") + end  # (the last line without a newline, or ending in other whitespace)
    _read_back(tmp_path_factory.mktemp("fast") / "t.swf", lines)


def test_the_fast_path_over_many_batches(tmp_path: Path) -> None:
    """Thousands of lines, a few of them bad or odd anywhere (the reader checks lines by batches)."""
    rng = random.Random(7)
    lines = []
    for i in range(5000):
        parts = GOOD.replace("1 0", f"{i} {i}", 1).split()
        if rng.random() < 0.01:
            parts[rng.randrange(18)] = rng.choice(TOKENS)
        lines.append(" ".join(parts) + ("\n" if rng.random() < 0.99 else "\r\n"))
        if rng.random() < 0.002:
            lines.append("; Note: a comment line mid-file\n")
    _read_back(tmp_path / "t.swf", lines)
