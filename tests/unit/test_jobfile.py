"""Job files (JSON lines, CSV, SWF through the 001 Sec. IV-C conversion)."""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path

import pytest

from coordinator.model import Host, JobSpec
from coordinator.policies.batch import refuse_oversized
from coordinator.sweep import DEFAULT_HPC2N
from workloads.annotate import synthetic_trace
from workloads.jobfile import FIELDS, JobFileError, iter_jobs, parse_segment, read_jobs, unreadable, write_jobs
from workloads.swf import parse_record, write_swf

TRACE = Path(DEFAULT_HPC2N).resolve()  # ../shared beside the clone (a fixed /work/shared skipped in a clone elsewhere)

GOOD = {"id": "a", "submit_time": 0.0, "tasks": 2, "cpu_need": 1.0, "memory": 0.2, "work": 60.0}


def _jsonl(path: Path, rows: list[object]) -> Path:
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return path


@pytest.mark.parametrize("name", ["jobs.jsonl", "jobs.csv", "jobs.jsonl.gz", "jobs.csv.gz"])
def test_round_trip(tmp_path: Path, name: str) -> None:
    jobs = synthetic_trace(4, n_jobs=200, workload="arraycycle")
    path = tmp_path / name
    assert write_jobs(path, jobs) == 200
    assert read_jobs(path) == jobs


def test_jsonl_layout(tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    write_jobs(path, [JobSpec("x", 1.5, 3, 0.25, 0.1, 10.0)])
    obj = json.loads(path.read_text())
    assert list(obj) == list(FIELDS)
    assert obj == {
        "id": "x",
        "submit_time": 1.5,
        "tasks": 3,
        "cpu_need": 0.25,
        "memory": 0.1,
        "work": 10.0,
        "workload": "dgemm",
    }


def test_comments_blank_lines_and_default_workload(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "j.jsonl", ["# a comment", "", GOOD, {**GOOD, "id": 7, "workload": "arraycycle"}])
    jobs = read_jobs(path)
    assert jobs == [JobSpec("a", 0.0, 2, 1.0, 0.2, 60.0, "dgemm"), JobSpec("7", 0.0, 2, 1.0, 0.2, 60.0, "arraycycle")]


@pytest.mark.parametrize(
    ("bad", "field", "text"),
    [
        ("{not json", None, "not valid JSON"),
        ("[1, 2]", None, "JSON object"),
        ({**GOOD, "tasks": 0}, "tasks", "must be a whole number >= 1"),
        ({**GOOD, "tasks": 2.5}, "tasks", "whole number"),
        ({**GOOD, "tasks": "2"}, "tasks", "whole number"),
        ({**GOOD, "tasks": True}, "tasks", "whole number"),
        ({**GOOD, "cpu_need": 1.5}, "cpu_need", "(0, 1]"),
        ({**GOOD, "cpu_need": "full"}, "cpu_need", "number"),
        ({**GOOD, "memory": 0.0}, "memory", "(0, 1]"),
        ({**GOOD, "work": -3.0}, "work", "> 0"),
        ({**GOOD, "submit_time": -1.0}, "submit_time", ">= 0"),
        ({**GOOD, "workload": "bogus"}, "workload", "unknown workload"),
        ({**GOOD, "id": ""}, "id", "non-empty"),
        ({**GOOD, "mem": 0.2}, "mem", "unknown key"),
        ({k: v for k, v in GOOD.items() if k != "work"}, "work", "missing"),
        ({**GOOD, "id": "first"}, "id", "duplicate id 'first' (first on line 1)"),
        # json.loads kept the last of a repeated key: 500 s of work, silently
        ('{"id": "d", "submit_time": 0, "tasks": 1, "cpu_need": 1, "memory": 0.1, "work": 10, "work": 500}', "work",
         "duplicate key"),
        # finite, but a clock of that size never moves (simulate ran for ever) or overflows to inf
        ({**GOOD, "submit_time": 1e308}, "submit_time", "must be below 1e+12 s"),
        ({**GOOD, "work": 1e300}, "work", "must be below 1e+12 s"),
        ({**GOOD, "submit_time": 1e12}, "submit_time", "must be below 1e+12 s"),
        # tasks travel as an int32: submit --file failed building the request (a protobuf ValueError)
        ({**GOOD, "tasks": 10_000_000_000}, "tasks", "must be at most 2147483647"),
    ],
)
def test_bad_line_names_line_and_field(tmp_path: Path, bad: object, field: str | None, text: str) -> None:
    path = _jsonl(tmp_path / "j.jsonl", [{**GOOD, "id": "first"}, "", {**GOOD, "id": "b"}, bad])
    with pytest.raises(JobFileError) as info:
        read_jobs(path)
    err = info.value
    assert err.line == 4
    assert err.field == field
    assert text in str(err)
    assert str(err).startswith(f"{path}:4")


def test_streaming_keeps_jobs_before_the_error(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "j.jsonl", [GOOD, {**GOOD, "id": "b", "tasks": -1}])
    got = []
    with pytest.raises(JobFileError, match=":2: tasks"):
        for job in iter_jobs(path):
            got.append(job)
    assert [j.id for j in got] == ["a"]


def test_hosts_check(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "j.jsonl", [{**GOOD, "tasks": 5, "memory": 0.6}])
    assert len(read_jobs(path)) == 1
    with pytest.raises(JobFileError, match=":1: tasks: 5 tasks of memory 0.6 can never fit"):
        read_jobs(path, hosts=tuple(Host(f"h{i}") for i in range(4)))


def test_csv_errors(tmp_path: Path) -> None:
    path = tmp_path / "j.csv"
    path.write_text("id,submit_time,tasks,cpu_need,memory,work\na,0,1,0.25,0.1,5\nb,1,x,0.25,0.1,5\n")
    with pytest.raises(JobFileError) as info:
        read_jobs(path)
    assert (info.value.line, info.value.field) == (3, "tasks")
    path.write_text("id,submit_time,tasks,cpu_need,memory\n")
    with pytest.raises(JobFileError, match=":1: work: missing column"):
        read_jobs(path)
    path.write_text("id,submit_time,tasks,cpu_need,memory,work,colour\n")
    with pytest.raises(JobFileError, match="colour: unknown column") as info:
        read_jobs(path)
    assert "separated" not in str(info.value)
    path.write_text("id;submit_time;tasks;cpu_need;memory;work\na;0;1;1;0.1;10\n")  # a spreadsheet's export
    with pytest.raises(JobFileError, match="unknown column .*; columns are separated by commas, not ';'$"):
        read_jobs(path)
    path.write_text("id,submit_time,tasks,cpu_need,memory,work\na,0,1,0.25,0.1\n")
    with pytest.raises(JobFileError, match=":2: expected 6 columns"):
        read_jobs(path)
    path.write_text("id,submit_time,tasks,cpu_need,memory,work,workload\na,0,1,0.25,0.1,5,\n")
    assert read_jobs(path) == [JobSpec("a", 0.0, 1, 0.25, 0.1, 5.0)]


# ---- SWF through the HPC2N conversion ----------------------------------------------------------------


def test_swf_goes_through_the_conversion(tmp_path: Path) -> None:
    week = 7 * 86400
    records = [
        parse_record("1 100 0 50 4 -1 409600 4 60 -1 1 1 1 -1 -1 1 -1 -1"),  # 4 procs -> 2 tasks
        parse_record("2 200 0 70 3 -1 -1 3 60 -1 1 1 1 -1 -1 1 -1 -1"),  # 3 procs -> 3 tasks
        parse_record(f"3 {week + 5} 0 80 2 -1 -1 2 60 -1 1 1 1 -1 -1 1 -1 -1"),
    ]
    path = tmp_path / "t.swf.gz"
    write_swf(path, records, [" MaxNodes: 240"])
    jobs = read_jobs(path)
    assert jobs == [
        JobSpec("1", 100.0, 2, 1.0, 0.390625, 50.0),
        JobSpec("2", 200.0, 3, 0.5, 0.1, 70.0),
        JobSpec("3", week + 5.0, 1, 1.0, 0.2, 80.0),
    ]
    assert read_jobs(path, segment=1) == [JobSpec("3", 5.0, 1, 1.0, 0.2, 80.0)]
    assert [j.workload for j in read_jobs(path, workload="arraycycle")] == ["arraycycle"] * 3
    with pytest.raises(ValueError, match="weeks 0..1"):
        read_jobs(path, segment=2)
    with pytest.raises(JobFileError, match="t.swf.gz:2: memory: 2 of the 3 jobs of the trace do not fit on the given "
                       "1 hosts .*; the first, SWF job 1: "):
        read_jobs(path, hosts=(Host("h0", mem=0.2),))
    with pytest.raises(ValueError, match="segment"):
        read_jobs(tmp_path / "x.jsonl", segment=0)


def test_weeks_a_to_b_are_one_list_from_week_a_s_start(tmp_path: Path) -> None:
    """``--segment A-B`` (scale review: no way to simulate a few weeks with their backlog carried but the whole
    trace): each week's jobs as its own segment has them, moved on by whole weeks from week A's start."""
    week = 7 * 86400
    records = [parse_record(f"{n} {t} 0 50 2 -1 -1 2 60 -1 1 1 1 -1 -1 1 -1 -1")
               for n, t in ((1, 100), (2, week + 5), (3, 2 * week + 7), (4, 3 * week + 9))]
    path = tmp_path / "t.swf"
    write_swf(path, records, [" MaxNodes: 240"])
    assert read_jobs(path, segment=(1, 2)) == [JobSpec("2", 5.0, 1, 1.0, 0.2, 50.0),
                                               JobSpec("3", week + 7.0, 1, 1.0, 0.2, 50.0)]
    assert read_jobs(path, segment=(2, 2)) == read_jobs(path, segment=2) == [JobSpec("3", 7.0, 1, 1.0, 0.2, 50.0)]
    assert [j.submit_time for j in read_jobs(path, segment=(0, 3))] == [j.submit_time for j in read_jobs(path)]
    with pytest.raises(ValueError, match=r"has weeks 0..3, got weeks 2-4"):
        read_jobs(path, segment=(2, 4))
    assert [parse_segment(t) for t in ("3", "3-3", " 2-5 ")] == [3, 3, (2, 5)]
    for bad, why in (("5-2", "did you mean 2-5"), ("x", "a week K or weeks A-B"), ("-1", "a week K"),
                     ("1-", "a week K"), ("1--2", "start at 0")):
        with pytest.raises(ValueError, match=why):
            parse_segment(bad)


def test_an_swf_job_too_wide_for_the_given_hosts_is_refused_not_dropped(tmp_path: Path) -> None:
    """Week 0 has two jobs; job 2's three tasks of memory 0.76 need three hosts. On two it is refused, naming
    how many do not fit (``vcemu simulate --segment K`` on its default 4 hosts had dropped 61 of week 3's 559
    HPC2N jobs without a word, and reported 498/498 done)."""
    path = tmp_path / "t.swf"
    write_swf(path, [parse_record("1 100 0 50 4 -1 409600 4 60 -1 1 1 1 -1 -1 1 -1 -1"),
                     parse_record("2 200 0 50 6 -1 800000 6 60 -1 1 1 1 -1 -1 1 -1 -1")], [" MaxNodes: 240"])
    two, three = (Host("h0"), Host("h1")), (Host("h0"), Host("h1"), Host("h2"))
    with pytest.raises(JobFileError, match="tasks: 1 of the 2 jobs of week 0 do not fit on the given 2 hosts "
                       r"\(SWF traces are converted by HPC2N's rules, 001 Sec. IV-C, for its machine of 120 nodes\); "
                       r"the first, SWF job 2: "):
        read_jobs(path, hosts=two, segment=0)
    with pytest.raises(JobFileError, match="1 of the 2 jobs of the trace do not fit"):
        read_jobs(path, hosts=two)
    assert [j.id for j in read_jobs(path, hosts=three, segment=0)] == ["1", "2"]


def test_malformed_swf_is_a_job_file_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.swf"
    path.write_text("; MaxNodes: 4\n1 0 0 5 1 -1 -1 1 5 -1 1 1 1 -1 -1 1 -1 -1\n1 2 3\n")
    with pytest.raises(JobFileError) as info:
        read_jobs(path)
    assert (info.value.line, info.value.field) == (3, None)
    assert "expected 18 fields" in str(info.value)


@pytest.mark.skipif(not TRACE.exists(), reason=f"{TRACE} is not on this machine")
def test_real_trace_last_week() -> None:
    jobs = read_jobs(TRACE, segment=181)
    assert jobs[-1] == JobSpec("527371", 114773.0, 3, 1.0, 0.390625, 31.0)


def test_bounds_take_what_is_in_range(tmp_path: Path) -> None:
    """A Unix time in seconds is a submit time (below 1e12); the largest int32 is a number of tasks."""
    from workloads.jobfile import MAX_SECONDS, MAX_TASKS

    path = _jsonl(tmp_path / "j.jsonl", [{**GOOD, "submit_time": 1.7e9, "work": 9.9e11, "tasks": MAX_TASKS}])
    assert read_jobs(path) == [JobSpec("a", 1.7e9, MAX_TASKS, 1.0, 0.2, 9.9e11)]
    assert MAX_SECONDS == 1e12


def test_a_duplicate_csv_column_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "j.csv"
    path.write_text("id,submit_time,tasks,cpu_need,memory,work,work\nj0,0,2,1.0,0.2,30,40\n")
    with pytest.raises(JobFileError) as info:
        read_jobs(path)
    assert (info.value.line, info.value.field, info.value.message) == (1, "work", "duplicate column")


# ---- encodings, compression, suffixes ------------------------------------------------------------------

CSV_TEXT = "id,submit_time,tasks,cpu_need,memory,work\nj0,0,2,1.0,0.2,30\n"


@pytest.mark.parametrize("name", ["j.csv", "j.jsonl", "j.csv.gz", "j.jsonl.gz"])
def test_a_byte_order_mark_is_not_part_of_the_first_key(tmp_path: Path, name: str) -> None:
    """Editors on Windows start UTF-8 files with a BOM: it gave "unknown column '\\ufeffid'" (CSV) and a JSON
    error (JSON lines)."""
    text = CSV_TEXT if ".csv" in name else json.dumps({**GOOD, "id": "j0", "work": 30.0}) + "\n"
    data = b"\xef\xbb\xbf" + text.encode()
    path = tmp_path / name
    path.write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    assert [(j.id, j.tasks, j.work) for j in read_jobs(path)] == [("j0", 2, 30.0)]


@pytest.mark.parametrize("name", ["JOBS.CSV", "Jobs.Csv.GZ"])
def test_suffixes_are_matched_in_any_case(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_bytes(gzip.compress(CSV_TEXT.encode()) if name.lower().endswith(".gz") else CSV_TEXT.encode())
    assert [j.id for j in read_jobs(path)] == ["j0"]  # was read as JSON lines: "not valid JSON"


def test_an_upper_case_swf_suffix_is_a_trace(tmp_path: Path) -> None:
    path = tmp_path / "TRACE.SWF"
    path.write_text("; MaxNodes: 4\n1 0 0 100 2 -1 -1 2 100 -1 1 1 1 -1 -1 1 -1 -1\n")
    assert read_jobs(path) == [JobSpec("1", 0.0, 1, 1.0, 0.2, 100.0)]


@pytest.mark.parametrize("name", ["j.csv", "j.jsonl"])
def test_text_that_is_not_utf8_names_its_line(tmp_path: Path, name: str) -> None:
    """A Latin-1 file: a UnicodeDecodeError traceback (submit --file) or "'utf-8' codec can't decode byte 0xe9 in
    position 63" with no file or line (simulate)."""
    if name.endswith(".csv"):
        data = CSV_TEXT.encode() + "caf\xe9,1,1,1.0,0.2,30\n".encode("latin-1")
    else:
        data = (json.dumps(GOOD) + "\n" + json.dumps({**GOOD, "id": "caf\xe9"}, ensure_ascii=False) + "\n").encode(
            "latin-1")
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(JobFileError) as info:
        read_jobs(path)
    assert (info.value.line, info.value.field) == (3 if name.endswith(".csv") else 2, None)
    assert "not UTF-8 text (byte 0xe9" in info.value.message
    assert str(info.value).startswith(f"{path}:")


@pytest.mark.parametrize("name", ["j.jsonl.gz", "j.csv.gz", "t.swf.gz"])
def test_a_truncated_gz_names_the_line_after_the_last_whole_one(tmp_path: Path, name: str) -> None:
    """EOFError is not an OSError: simulate, submit --file and replay ended in a traceback."""
    if name.startswith("t.swf"):
        lines = [f"{i} {i} 0 100 2 -1 -1 2 100 -1 1 1 1 -1 -1 1 -1 -1" for i in range(1, 3001)]
    elif ".csv" in name:
        lines = ["id,submit_time,tasks,cpu_need,memory,work"] + [f"j{i},{i},1,0.5,0.1,30" for i in range(3000)]
    else:
        lines = [json.dumps({**GOOD, "id": f"j{i}"}) for i in range(3000)]
    whole = gzip.compress(("\n".join(lines) + "\n").encode(), mtime=0)
    path = tmp_path / name
    path.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(JobFileError) as info:
        read_jobs(path)
    assert info.value.message == "compressed file is truncated"
    assert info.value.field is None and info.value.line is not None
    # every line before the one named is whole: the same prefix of the file, uncompressed, has them all
    with gzip.open(path, "rt") as fh:
        got = []
        with pytest.raises(EOFError):
            for line in fh:
                got.append(line)
    whole_lines = [g for g in got if g.endswith("\n")]
    assert info.value.line == len(whole_lines) + 1
    path.write_bytes(b"not gzip at all\n")
    with pytest.raises(JobFileError, match=r":1: not a gzip file"):
        read_jobs(path)


def test_load_jobs_hashes_the_bytes_it_parsed(tmp_path: Path) -> None:
    from workloads.jobfile import load_jobs

    path = _jsonl(tmp_path / "j.jsonl", [GOOD])
    data = path.read_bytes()
    source = load_jobs(path)
    path.write_text("")  # the file changes after it was read: what was parsed is what was hashed
    assert source.sha256 == hashlib.sha256(data).hexdigest()
    assert source.abspath == str(path.resolve()) and source.path == str(path)
    assert source.lines == {"a": 1}
    assert source.records is None and source.dropped is None and source.drop_note() is None


# ---- the policy's refusals, before the run ---------------------------------------------------------------


def test_a_job_the_policy_refuses_is_refused_naming_its_line(tmp_path: Path) -> None:
    """FCFS and EASY give each task a whole node: 8 tasks of memory 0.1 fit 4 hosts' memory, but not 4 nodes.
    The engine refused it at its arrival, in the middle of the run (a traceback)."""
    path = _jsonl(tmp_path / "wide.jsonl", [{**GOOD, "id": "b"}, {**GOOD, "tasks": 8, "memory": 0.1}])
    hosts = tuple(Host(f"h{i}") for i in range(4))
    assert len(read_jobs(path, hosts=hosts)) == 2  # the memory fits
    with pytest.raises(JobFileError) as info:
        read_jobs(path, hosts=hosts, refuse=refuse_oversized)
    assert (info.value.line, info.value.field) == (2, "tasks")
    assert str(info.value) == f"{path}:2: tasks: 8 tasks need 8 whole nodes; the cluster has 4"


def test_an_swf_job_the_policy_refuses_names_its_line_and_job(tmp_path: Path) -> None:
    path = tmp_path / "t.swf"
    path.write_text("; MaxNodes: 240\n1 0 0 50 2 -1 -1 2 60 -1 1 1 1 -1 -1 1 -1 -1\n"
                    "2 5 0 50 10 -1 -1 10 60 -1 1 1 1 -1 -1 1 -1 -1\n")  # 10 processors: 5 paired tasks
    hosts = tuple(Host(f"h{i}") for i in range(4))
    assert len(read_jobs(path, hosts=hosts)) == 2
    with pytest.raises(JobFileError) as info:
        read_jobs(path, hosts=hosts, segment=0, refuse=refuse_oversized)
    assert (info.value.line, info.value.field) == (3, "tasks")
    assert "1 of the 2 jobs of week 0 do not fit on the given 4 hosts" in str(info.value)
    assert "the first, SWF job 2: tasks: 5 tasks need 5 whole nodes; the cluster has 4" in str(info.value)


@pytest.mark.skipif(not TRACE.exists(), reason=f"{TRACE} is not on this machine")
def test_an_hpc2n_week_too_wide_for_easy_is_refused_up_front() -> None:
    """simulate --policy easy --hosts 30 --segment 3 failed 15 s into its run (53 of week 3's 559 jobs have
    more than 30 tasks); now before it."""
    with pytest.raises(JobFileError) as info:
        read_jobs(TRACE, hosts=tuple(Host(f"h{i}") for i in range(30)), segment=3, refuse=refuse_oversized)
    assert info.value.field == "tasks" and info.value.line is not None and info.value.line > 0
    assert "53 of the 559 jobs of week 3 do not fit on the given 30 hosts" in info.value.message
    assert "whole nodes; the cluster has 30" in info.value.message


# ---- SWF: duplicates, drops, unknown submit times, bounds ------------------------------------------------------


def test_a_duplicate_swf_job_number_is_refused_naming_both_lines(tmp_path: Path) -> None:
    """Two records with one job number became two jobs with one id: simulate's engine refused the second at its
    arrival (a traceback), and replay waited for it until --timeout."""
    path = tmp_path / "dup.swf"
    path.write_text("; MaxNodes: 4\n1 0 0 100 2 -1 -1 2 100 -1 1 1 1 -1 -1 1 -1 -1\n"
                    "1 10 0 200 2 -1 -1 2 200 -1 1 1 1 -1 -1 1 -1 -1\n2 20 0 50 1 -1 -1 1 50 -1 1 1 1 -1 -1 1 -1 -1\n")
    for segment in (None, 0):
        with pytest.raises(JobFileError) as info:
            read_jobs(path, segment=segment)
        assert str(info.value) == f"{path}:3: id: duplicate SWF job number 1 (first on line 2)"


DROPS = """; MaxNodes: 4
1 0 0 100 2 -1 -1 2 100 -1 1 1 1 -1 -1 1 -1 -1
2 10 0 -1 2 -1 -1 2 200 -1 0 1 1 -1 -1 1 -1 -1
3 20 0 0 1 -1 -1 1 50 -1 5 1 1 -1 -1 1 -1 -1
4 30 0 50 -1 -1 -1 -1 50 -1 1 1 1 -1 -1 1 -1 -1
5 40 0 50 2 -1 3000000 2 50 -1 1 1 1 -1 -1 1 -1 -1
6 -1 0 50 2 -1 -1 2 50 -1 1 1 1 -1 -1 1 -1 -1
7 50 0 50 1000 -1 -1 1000 50 -1 1 1 1 -1 -1 1 -1 -1
"""


def test_swf_drops_are_counted_and_the_counts_add_up(tmp_path: Path) -> None:
    """The conversion's rules dropped records without a word, and the refusal said "1 of the 2 jobs" of a trace
    of 7 records."""
    from workloads.jobfile import load_jobs

    path = tmp_path / "drops.swf"
    path.write_text(DROPS)
    source = load_jobs(path)
    assert [j.id for j in source.jobs] == ["1", "7"]
    assert source.records == 7
    assert source.dropped == {"no_submit_time": 1, "no_processors": 1, "no_run_time": 2, "memory_exceeds_node": 1,
                              "does_not_fit_cluster": 0}
    assert source.drop_note() == ("dropped 5 of 7 records: no_submit_time=1, no_processors=1, no_run_time=2, "
                                  "memory_exceeds_node=1")
    with pytest.raises(JobFileError) as info:
        read_jobs(path, hosts=tuple(Host(f"h{i}") for i in range(4)))
    assert info.value.line == 8
    assert ("1 of the 2 jobs of the trace (after the conversion dropped 5 of 7 records: no_submit_time=1, "
            "no_processors=1, no_run_time=2, memory_exceeds_node=1) do not fit on the given 4 hosts") in str(info.value)
    with pytest.raises(JobFileError) as info:  # one week's jobs, the whole trace's drops: said so (review)
        read_jobs(path, segment=0, hosts=tuple(Host(f"h{i}") for i in range(4)))
    assert "jobs of week 0 (after the conversion dropped 5 of 7 records of the whole trace: " in str(info.value)


def test_an_unknown_swf_submit_time_is_dropped_in_either_mode(tmp_path: Path) -> None:
    """SWF's -1 (unknown) was taken as a time: a wait of 1 s that never was, and with a segment a bare
    ValueError ("job 1: submit time -1.0 is before the origin 0.0") with no file or line."""
    from workloads.jobfile import load_jobs

    path = tmp_path / "neg.swf"
    path.write_text("1 -1 0 100 2 -1 -1 2 100 -1 1 1 1 -1 -1 1 -1 -1\n2 20 0 50 1 -1 -1 1 50 -1 1 1 1 -1 -1 1 -1 -1\n")
    assert [j.id for j in read_jobs(path)] == ["2"]
    assert read_jobs(path, segment=0) == [JobSpec("2", 20.0, 1, 0.5, 0.1, 50.0)]
    assert load_jobs(path).dropped["no_submit_time"] == 1  # type: ignore[index]


@pytest.mark.parametrize(("record", "field"), [
    ("1 1e300 0 100 2 -1 -1 2 100 -1 1 1 1 -1 -1 1 -1 -1", "submit_time"),
    ("1 0 0 1e300 2 -1 -1 2 100 -1 1 1 1 -1 -1 1 -1 -1", "work"),
])
def test_an_swf_time_out_of_bounds_names_its_line_and_field(tmp_path: Path, record: str, field: str) -> None:
    path = tmp_path / "big.swf"
    path.write_text(f"; MaxNodes: 4\n2 0 0 10 1 -1 -1 1 10 -1 1 1 1 -1 -1 1 -1 -1\n{record}\n")
    with pytest.raises(JobFileError) as info:
        read_jobs(path)
    assert (info.value.line, info.value.field) == (3, field)
    assert "must be below 1e+12 s" in info.value.message


@pytest.mark.parametrize("end", ["\n", "\r\n", "\r"])
def test_every_line_end_still_ends_a_line(tmp_path: Path, end: str) -> None:
    """Bytes are split into lines as text mode split them (universal newlines), then decoded one by one."""
    path = tmp_path / "j.csv"
    path.write_bytes(CSV_TEXT.replace("\n", end).encode() + f"j1,5,1,0.25,0.1,60{end}".encode())
    assert [j.id for j in read_jobs(path)] == ["j0", "j1"]
    path.write_bytes(b"\xef\xbb\xbfid,submit\xe9" + end.encode())  # a bad byte after a byte-order mark
    with pytest.raises(JobFileError, match=r":1: not UTF-8 text \(byte 0xe9 at byte 10 of the line\)"):
        read_jobs(path)


GOOD_LINE = '{"id": "a", "submit_time": 0, "tasks": 1, "cpu_need": 1, "memory": 0.1, "work": 10}'


def test_a_csv_file_under_another_suffix_is_refused_with_the_rule_for_suffixes(tmp_path: Path) -> None:
    """User review: a CSV file named .txt was refused as "not valid JSON" with no word of why it was read as JSON."""
    path = tmp_path / "jobs.txt"
    path.write_text("id,submit_time,tasks,cpu_need,memory,work\nj0,0,2,1.0,0.2,30\n")
    with pytest.raises(JobFileError, match=r"jobs.txt:1: not valid JSON \(.*\); a file that is not JSON lines is "
                       r"read by its suffix: \.csv for CSV"):
        read_jobs(path)
    for text in ("{not json\n", GOOD_LINE + "\n\"id\": \"b\", \"tasks\": 1\n"):  # (a damaged JSON line: no hint)
        path.write_text(text)
        with pytest.raises(JobFileError) as info:
            read_jobs(path)
        assert "suffix" not in str(info.value) and "not valid JSON" in str(info.value)


def test_a_file_for_submit_may_leave_out_submit_time_and_one_for_the_simulator_may_not(tmp_path: Path) -> None:
    """``submit --file`` submits every job at once and ignores submit times: asking for one was asking for a value
    the command throws away. A time given is still checked; the simulator's files still need one."""
    from workloads.jobfile import load_jobs

    jsonl = tmp_path / "j.jsonl"
    jsonl.write_text('{"id": "a", "tasks": 1, "cpu_need": 1, "memory": 0.1, "work": 10}\n'
                     '{"id": "b", "submit_time": 5, "tasks": 2, "cpu_need": 0.5, "memory": 0.1, "work": 10}\n')
    assert [(j.id, j.submit_time) for j in load_jobs(jsonl, timed=False).jobs] == [("a", 0.0), ("b", 5.0)]
    with pytest.raises(JobFileError, match="j.jsonl:1: submit_time: missing"):
        load_jobs(jsonl)
    csvf = tmp_path / "j.csv"
    csvf.write_text("id,tasks,cpu_need,memory,work\na,1,1,0.1,10\n")
    assert [j.submit_time for j in load_jobs(csvf, timed=False).jobs] == [0.0]
    with pytest.raises(JobFileError, match="j.csv:1: submit_time: missing column"):
        load_jobs(csvf)
    jsonl.write_text('{"id": "a", "submit_time": -1, "tasks": 1, "cpu_need": 1, "memory": 0.1, "work": 10}\n')
    with pytest.raises(JobFileError, match="submit_time: must be >= 0"):
        load_jobs(jsonl, timed=False)


def test_standard_input_closed_or_of_csv_is_refused_in_words_that_fit_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """``-`` with descriptor 0 closed was an AttributeError's traceback; CSV piped in was told to use a suffix, which
    a pipe has not (review)."""
    import io
    import sys

    monkeypatch.setattr(sys, "stdin", None)
    with pytest.raises(OSError, match="it is closed") as closed:
        read_jobs("-")
    assert unreadable("-", closed.value) == "standard input: it is closed"  # (it said "-: ...")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"id,submit_time,tasks\nj0,0,1\n")))
    with pytest.raises(JobFileError, match="standard input is read as JSON lines only: save a CSV to a file named "
                                           ".csv"):
        read_jobs("-")
    line = b'{"id": "j0", "submit_time": 0, "tasks": 1, "cpu_need": 1, "memory": 0.1, "work": 10}\n'
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(line)))
    assert [j.id for j in read_jobs("-")] == ["j0"]
