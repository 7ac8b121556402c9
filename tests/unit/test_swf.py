"""SWF reader/writer: the real HPC2N trace (seed 001 Sec. IV-C), malformed lines, round trips."""

from __future__ import annotations

import gzip
import time
from dataclasses import astuple
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.sweep import DEFAULT_HPC2N
from workloads.swf import (
    SWF_FIELDS,
    SWFError,
    SWFHeader,
    SWFJob,
    SWFReader,
    SWFTrace,
    iter_swf,
    parse_record,
    read_swf,
    write_swf,
)

TRACE = Path(DEFAULT_HPC2N).resolve()  # ../shared beside the clone (a fixed /work/shared skipped in a clone elsewhere)
needs_trace = pytest.mark.skipif(not TRACE.exists(), reason=f"{TRACE} is not on this machine")


@pytest.fixture(scope="module")
def hpc2n() -> tuple[SWFTrace, float]:
    t0 = time.perf_counter()
    trace = read_swf(TRACE)
    return trace, time.perf_counter() - t0


# ---- the real trace ----------------------------------------------------------------------------------


@needs_trace
def test_hpc2n_job_count_and_read_time(hpc2n: tuple[SWFTrace, float]) -> None:
    trace, seconds = hpc2n
    assert len(trace.jobs) == 202_871
    assert trace.skipped == 0
    print(f"read {len(trace.jobs)} HPC2N records in {seconds:.2f} s")
    # The brief asks for "a few seconds at most"; this machine does it in about 2.5 s.
    assert seconds < 30.0


@needs_trace
def test_hpc2n_header(hpc2n: tuple[SWFTrace, float]) -> None:
    header = hpc2n[0].header
    assert header.max_nodes == 240
    assert header.max_procs == 240
    assert header.get_int("MaxRecords") == 202_871
    assert header.get_int("MaxJobs") == 527_371
    assert header.unix_start_time == 1_027_839_845
    assert header.fields["Version"] == "2.2"
    assert header.fields["TimeZoneString"] == "Europe/Stockholm"
    assert header.fields["Partition"] == "1  DEFAULT\n2  ALL"  # repeated keys are joined
    assert any("user=2 (305178 jobs removed)" in line for line in header.lines)


@needs_trace
def test_hpc2n_known_records(hpc2n: tuple[SWFTrace, float]) -> None:
    jobs = hpc2n[0].jobs
    # file line 32:  "11   342072     32  43306   32  43307    -1   32  43200    -1  1   4   1  -1 -1  1 -1 -1"
    assert jobs[0] == SWFJob(11, 342072, 32, 43306, 32, 43307, -1, 32, 43200, -1, 1, 4, 1, -1, -1, 1, -1, -1)
    # file line 202902 (the last): "527371 109583573 3318 31 6 31.69 409600 6 18000 409600 1 59 1 -1 -1 1 -1 -1"
    last = jobs[-1]
    assert last.job_number == 527_371
    assert last.submit_time == 109_583_573
    assert last.average_cpu_time == 31.69
    assert last.used_memory_kb == 409_600
    assert last.requested_memory_kb == 409_600
    assert last.requested_processors == 6
    assert isinstance(last.requested_processors, int)
    assert isinstance(last.submit_time, float)


@needs_trace
def test_iter_swf_streams_the_real_trace() -> None:
    it = iter_swf(TRACE)
    first = next(it)
    assert first.job_number == 11
    it.close()  # closing the generator closes the file


# ---- malformed lines ---------------------------------------------------------------------------------

GOOD = "1 0 5 100 4 90 1024 4 200 1024 1 7 1 -1 -1 1 -1 -1"


def _write(path: Path, lines: list[str]) -> Path:
    text = "\n".join(lines) + "\n"
    if path.suffix == ".gz":
        with gzip.open(path, "wt") as fh:
            fh.write(text)
    else:
        path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        ("1 0 5 100 4 90 1024 4 200 1024 1 7 1 -1 -1 1 -1", "expected 18 fields, found 17"),
        (GOOD + " 9", "expected 18 fields, found 19"),
        ("1 0 5 abc 4 90 1024 4 200 1024 1 7 1 -1 -1 1 -1 -1", "field 4 (run_time)"),
        ("1 0 5 100 4.5 90 1024 4 200 1024 1 7 1 -1 -1 1 -1 -1", "field 5 (allocated_processors)"),
        ("1 0 5 nan 4 90 1024 4 200 1024 1 7 1 -1 -1 1 -1 -1", "not a finite number"),
        ("1 0 5 100 4 90 1024 4 200 1024 1 x7 1 -1 -1 1 -1 -1", "field 12 (user_id)"),
    ],
)
@pytest.mark.parametrize("suffix", [".swf", ".swf.gz"])
def test_malformed_line_names_file_and_line(tmp_path: Path, bad: str, reason: str, suffix: str) -> None:
    path = _write(tmp_path / f"t{suffix}", ["; MaxNodes: 4", ";", GOOD, "", GOOD.replace("1 0", "2 3", 1), bad])
    with pytest.raises(SWFError) as info:
        read_swf(path)
    err = info.value
    assert err.line == 6
    assert err.path == str(path)
    assert f"{path}:6:" in str(err)
    assert reason in str(err)


def test_skip_bad_counts_and_keeps_the_rest(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "t.swf",
        [
            "; Version: 2.2",
            GOOD,
            "garbage",
            GOOD.replace("1 0", "2 10", 1),
            "3 20 0 1 1 1 1 1 1 1 1 1 1 1 1 1 1",  # 17 fields
            GOOD.replace("1 0", "4 30", 1),
        ],
    )
    trace = read_swf(path, skip_bad=True)
    assert [j.job_number for j in trace.jobs] == [1, 2, 4]
    assert trace.skipped == 2
    assert trace.bad_lines == [3, 5]
    with SWFReader(path, skip_bad=True) as reader:
        assert len(list(reader)) == 3
        assert reader.skipped == 2


def test_bad_first_record_line(tmp_path: Path) -> None:
    path = _write(tmp_path / "t.swf", ["; a", "; b", "1 2 3"])
    with pytest.raises(SWFError) as info:
        read_swf(path)
    assert info.value.line == 3
    trace = read_swf(path, skip_bad=True)
    assert trace.jobs == [] and trace.skipped == 1


def test_streaming_yields_good_records_before_a_bad_one(tmp_path: Path) -> None:
    path = _write(tmp_path / "t.swf", [GOOD, GOOD, "oops"])
    seen = []
    with pytest.raises(SWFError, match=":3:"):
        for job in iter_swf(path):
            seen.append(job)
    assert len(seen) == 2


def test_whole_numbers_written_as_floats_are_accepted() -> None:
    job = parse_record("1.0 0 5 100 4.0 90 1024 4 200 1024 1 7 1 -1 -1 1 -1 -1")
    assert job.job_number == 1 and job.allocated_processors == 4


def test_header_only_and_empty_files(tmp_path: Path) -> None:
    assert read_swf(_write(tmp_path / "h.swf", ["; MaxProcs: 8"])).header.max_procs == 8
    (tmp_path / "e.swf").write_text("")
    assert read_swf(tmp_path / "e.swf").jobs == []


# ---- writing -----------------------------------------------------------------------------------------

# (-1, SWF's "unknown", is its only negative value: the reader refuses any other)
_ints = st.integers(min_value=-1, max_value=10**9)
_floats = st.one_of(
    st.integers(min_value=-1, max_value=10**9).map(float),
    st.floats(min_value=0, max_value=1e9, allow_nan=False, allow_infinity=False),
)


def _job_strategy() -> st.SearchStrategy[SWFJob]:
    kinds = [f.type for f in SWFJob.__dataclass_fields__.values()]
    return st.tuples(*[(_ints if k in ("int", int) else _floats) for k in kinds]).map(lambda t: SWFJob(*t))


@settings(max_examples=50, deadline=None)
@given(jobs=st.lists(_job_strategy(), max_size=20))
def test_round_trip_property(tmp_path_factory: pytest.TempPathFactory, jobs: list[SWFJob]) -> None:
    path = tmp_path_factory.mktemp("rt") / "x.swf"
    header = SWFHeader()
    header.add(" MaxNodes: 16")
    assert write_swf(path, jobs, header) == len(jobs)
    back = read_swf(path)
    assert back.jobs == jobs
    assert back.header == header


@needs_trace
@pytest.mark.parametrize("suffix", [".swf", ".swf.gz"])
def test_round_trip_real_trace_slice(tmp_path: Path, hpc2n: tuple[SWFTrace, float], suffix: str) -> None:
    trace = hpc2n[0]
    sample = trace.jobs[:3000] + trace.jobs[-3000:]
    path = tmp_path / f"slice{suffix}"
    write_swf(path, sample, trace.header)
    back = read_swf(path)
    assert back.jobs == sample
    assert back.header.fields == trace.header.fields
    assert back.header.lines == trace.header.lines
    assert [astuple(j) for j in back.jobs[:3]] == [astuple(j) for j in sample[:3]]


def test_write_plain_comment_lines(tmp_path: Path) -> None:
    path = tmp_path / "c.swf"
    write_swf(path, [parse_record(GOOD)], [" MaxProcs: 4", " Note: hi"])
    text = path.read_text().splitlines()
    assert text[:2] == ["; MaxProcs: 4", "; Note: hi"]
    assert len(text[2].split()) == len(SWF_FIELDS) == 18
    with pytest.raises(ValueError, match="line break"):
        write_swf(path, [], ["a\nb"])


# ---- damaged compression, bytes read already, record lines ---------------------------------------------


def test_a_truncated_gz_is_an_swf_error_at_the_line_after_the_last_whole_one(tmp_path: Path) -> None:
    """gzip's EOFError is not an OSError: it went through every caller as a traceback. With skip_bad too: what is
    missing cannot be skipped."""
    lines = [GOOD.replace("1 0", f"{i} {i}", 1) for i in range(1, 3001)]
    whole = gzip.compress(("; MaxNodes: 4\n" + "\n".join(lines) + "\n").encode(), mtime=0)
    path = tmp_path / "t.swf.gz"
    path.write_bytes(whole[: len(whole) // 2])
    read = []
    with pytest.raises(SWFError) as info, SWFReader(path, skip_bad=True) as reader:
        for job in reader:
            read.append((reader.line, job.job_number))
    assert info.value.reason == "compressed file is truncated"
    assert info.value.line == read[-1][0] + 1  # the line the data ends in
    assert read == [(n + 1, n) for n in range(1, len(read) + 1)]  # the header is line 1
    header_only = gzip.compress("".join(f"; Note: {i}\n" for i in range(5000)).encode(), mtime=0)
    path.write_bytes(header_only[: len(header_only) // 2])
    with pytest.raises(SWFError, match="compressed file is truncated"):
        SWFReader(path)


def test_the_reader_parses_bytes_given_and_says_each_records_line(tmp_path: Path) -> None:
    text = f"; MaxNodes: 4\n{GOOD}\n\n;late note\n{GOOD.replace('1 0', '2 3', 1)}\n"
    for name, data in (("t.swf", text.encode()), ("T.SWF.GZ", gzip.compress(text.encode()))):
        with SWFReader(tmp_path / name, data=data) as reader:  # the path need not exist: only its name is used
            got = [(reader.line, job.job_number) for job in reader]
        assert got == [(2, 1), (5, 2)]
        assert reader.header.lines == [" MaxNodes: 4", "late note"]
