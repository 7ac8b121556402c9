"""Job files (JSON lines, CSV, SWF through the 001 Sec. IV-C conversion)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coordinator.model import Host, JobSpec
from workloads.annotate import synthetic_trace
from workloads.jobfile import FIELDS, JobFileError, iter_jobs, read_jobs, write_jobs
from workloads.swf import parse_record, write_swf

TRACE = Path("/work/shared/traces/HPC2N-2002-2.2-cln.swf.gz")

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
    with pytest.raises(JobFileError, match="colour: unknown column"):
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
    with pytest.raises(JobFileError, match="t.swf.gz: memory: 2 of the 3 jobs of the trace do not fit on the given "
                       "1 hosts .*; the first, SWF job 1: "):
        read_jobs(path, hosts=(Host("h0", mem=0.2),))
    with pytest.raises(ValueError, match="segment"):
        read_jobs(tmp_path / "x.jsonl", segment=0)


def test_an_swf_job_too_wide_for_the_given_hosts_is_refused_not_dropped(tmp_path: Path) -> None:
    """Week 0 has two jobs; job 2's three tasks of memory 0.76 need three hosts. On two it is refused, naming
    how many do not fit (``vcemu simulate --segment K`` on its default 4 hosts had dropped 61 of week 3's 559
    HPC2N jobs without a word, and reported 498/498 done)."""
    path = tmp_path / "t.swf"
    write_swf(path, [parse_record("1 100 0 50 4 -1 409600 4 60 -1 1 1 1 -1 -1 1 -1 -1"),
                     parse_record("2 200 0 50 6 -1 800000 6 60 -1 1 1 1 -1 -1 1 -1 -1")], [" MaxNodes: 240"])
    two, three = (Host("h0"), Host("h1")), (Host("h0"), Host("h1"), Host("h2"))
    with pytest.raises(JobFileError, match="tasks: 1 of the 2 jobs of week 0 do not fit on the given 2 hosts "
                       r"\(the trace's machine had 120 nodes\); the first, SWF job 2: "):
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
