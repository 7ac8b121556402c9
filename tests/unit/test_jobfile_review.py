"""Job files: the input review's damaged files (numbers too large to convert, lines nested too deep, CSV fields
longer than the reader takes, numbers written ``1_0_0``, gzip files under plain names). Each gave a traceback, an
error naming no line or field, or a value read as another."""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path

import pytest

from workloads.jobfile import JobFileError, load_jobs, read_jobs

GOOD = {"id": "a", "submit_time": 0.0, "tasks": 2, "cpu_need": 1.0, "memory": 0.2, "work": 60.0}
CSV_HEADER = "id,submit_time,tasks,cpu_need,memory,work"
CSV_GOOD = "a,0,2,1.0,0.2,60"


def _jsonl_with(path: Path, bad_line: str) -> Path:
    """``path``: a good job on line 1, ``bad_line`` on line 2."""
    path.write_text(json.dumps(GOOD) + "\n" + bad_line + "\n")
    return path


def _refused(path: Path) -> JobFileError:
    """The refusal of reading ``path`` (the test fails if it is read)."""
    with pytest.raises(JobFileError) as info:
        read_jobs(path)
    return info.value


def _line_with(key: str, literal: str) -> str:
    """A job line whose ``key`` is the JSON text ``literal``, written as is."""
    row = {**GOOD, "id": "b", key: 0}
    return json.dumps(row).replace(f'"{key}": 0', f'"{key}": {literal}')


# ---- whole numbers too large to convert ------------------------------------------------------------------


@pytest.mark.parametrize(("key", "bound"), [
    ("work", "must be below 1e+12 s (about 31,700 years)"),
    ("submit_time", "must be below 1e+12 s (about 31,700 years)"),
    ("cpu_need", "must be in (0, 1] (a fraction of one host)"),
    ("memory", "must be in (0, 1] (a fraction of one host's memory)"),
])
@pytest.mark.parametrize("digits", [400, 5000])
def test_a_whole_number_too_large_to_convert_is_the_fields_range_error(tmp_path: Path, key: str, bound: str,
                                                                       digits: int) -> None:
    """400 digits: ``OverflowError: int too large to convert to float`` (math.isfinite on the int), a traceback;
    5000: "Exceeds the limit (4300 digits) for integer string conversion", naming no file, line or field."""
    path = _jsonl_with(tmp_path / "j.jsonl", _line_with(key, "9" * digits))
    err = _refused(path)
    assert (err.line, err.field) == (2, key)
    assert str(err) == f"{path}:2: {key}: {bound}, got a number of {digits} digits"


@pytest.mark.parametrize(("key", "bound"), [
    ("work", "must be a finite number > 0"),
    ("submit_time", "must be >= 0"),
])
def test_a_negative_whole_number_too_large_to_convert_is_below_the_least(tmp_path: Path, key: str,
                                                                         bound: str) -> None:
    path = _jsonl_with(tmp_path / "j.jsonl", _line_with(key, "-" + "9" * 400))
    err = _refused(path)
    assert str(err) == f"{path}:2: {key}: {bound}, got a number of 400 digits"


@pytest.mark.parametrize(("literal", "bound"), [
    ("9" * 5000, "must be at most 2147483647 (what the wire's int32 holds)"),
    ("9" * 400, "must be at most 2147483647 (what the wire's int32 holds)"),
    ("-" + "9" * 5000, "must be a whole number >= 1"),
])
def test_tasks_of_thousands_of_digits_are_the_range_error(tmp_path: Path, literal: str, bound: str) -> None:
    path = _jsonl_with(tmp_path / "j.jsonl", _line_with("tasks", literal))
    err = _refused(path)
    digits = len(literal.lstrip("-"))
    assert str(err) == f"{path}:2: tasks: {bound}, got a number of {digits} digits"


@pytest.mark.parametrize(("cells", "key", "message"), [
    (("9" * 5000, "60"), "tasks", "must be at most 2147483647 (what the wire's int32 holds), got a number of 5000 "
                                  "digits"),
    (("2", "9" * 5000), "work", "must be below 1e+12 s (about 31,700 years), got a number of 5000 digits"),
    (("2", "1e999"), "work", "must be below 1e+12 s (about 31,700 years), got 1e999"),
])
def test_a_csv_number_too_large_is_the_range_error(tmp_path: Path, cells: tuple[str, str], key: str,
                                                   message: str) -> None:
    """A 5000-digit CSV cell was "must be a whole number, got '99999...'" (all 5000 digits) or "must be finite,
    got inf" for a number written finite."""
    tasks, work = cells
    path = tmp_path / "j.csv"
    path.write_text(f"{CSV_HEADER}\n{CSV_GOOD}\nb,0,{tasks},1.0,0.2,{work}\n")
    err = _refused(path)
    assert str(err) == f"{path}:3: {key}: {message}"


def test_an_id_written_as_a_long_whole_number_is_still_its_digits(tmp_path: Path) -> None:
    """A 4000-digit id was read (as its digits); a 5000-digit one raised Python's conversion limit. Both are ids."""
    for digits in (4000, 5000):
        path = _jsonl_with(tmp_path / "j.jsonl", _line_with("id", "7" * digits))
        assert [j.id for j in read_jobs(path)] == ["a", "7" * digits]


# ---- lines nested too deep, CSV fields too long ----------------------------------------------------------


@pytest.mark.parametrize("line", ["[" * 100_000 + "]" * 100_000,
                                  '{"id": "b", "work": ' + "[" * 100_000 + "]" * 100_000 + "}"])
def test_a_line_nested_too_deep_is_refused_naming_its_line(tmp_path: Path, line: str) -> None:
    """A RecursionError traceback (only JSONDecodeError was caught)."""
    path = _jsonl_with(tmp_path / "j.jsonl", line)
    err = _refused(path)
    assert (err.line, err.field) == (2, None)
    assert str(err) == f"{path}:2: not valid JSON (nested too deep: a job is one flat JSON object)"


def test_a_csv_field_longer_than_the_reader_takes_names_its_line(tmp_path: Path) -> None:
    """``_csv.Error: field larger than field limit (131072)``, a traceback."""
    path = tmp_path / "j.csv"
    path.write_text(f"{CSV_HEADER}\n{CSV_GOOD}\nb,0,2,1.0,0.2,60\nc{'x' * 200_000},0,2,1.0,0.2,60\n")
    err = _refused(path)
    assert (err.line, err.field) == (4, None)
    assert str(err) == f"{path}:4: a field is longer than 131072 characters, the most Python's CSV reader takes"


def test_other_csv_errors_name_their_line(tmp_path: Path) -> None:
    import csv

    path = tmp_path / "j.csv"
    path.write_text(f"{CSV_HEADER}\n{CSV_GOOD}\nb,0,2,1.0,0.2,60\n")
    real = csv.reader

    class Failing:
        def __init__(self, lines: object) -> None:
            self._reader = real(lines)  # type: ignore[arg-type]

        @property
        def line_num(self) -> int:
            return self._reader.line_num

        def __iter__(self) -> Failing:
            return self

        def __next__(self) -> list[str]:
            row = next(self._reader)
            if self._reader.line_num == 3:
                raise csv.Error("unexpected end of data")
            return row

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(csv, "reader", Failing)
        err = _refused(path)
    assert str(err) == f"{path}:3: not valid CSV (unexpected end of data)"


# ---- numbers written 1_0_0 ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("row", "key", "message"), [
    ("b,1_5,2,1.0,0.2,60", "submit_time", "must be a number, got '1_5'"),
    ("b,0,2,1.0,0.2,3_0", "work", "must be a number, got '3_0'"),
    ("b,0,1_0,1.0,0.2,60", "tasks", "must be a whole number, got '1_0'"),
    ("b,0,2,1.0,0.2,\uff16\uff10", "work", "must be a number, got '\uff16\uff10'"),  # fullwidth "60"
    ("b,0,\u0662,1.0,0.2,60", "tasks", "must be a whole number, got '\u0662'"),  # Arabic-Indic "2"
])
def test_a_csv_number_with_underscores_or_other_digits_is_not_a_number(tmp_path: Path, row: str, key: str,
                                                                     message: str) -> None:
    """float() and int() read "1_5" as 15 and "３０" as 30: the job ran with values nobody wrote."""
    path = tmp_path / "j.csv"
    path.write_text(f"{CSV_HEADER}\n{CSV_GOOD}\n{row}\n", encoding="utf-8")
    err = _refused(path)
    assert str(err) == f"{path}:3: {key}: {message}"


@pytest.mark.parametrize(("cells", "expected"), [
    (("+0", "2", "1.", "60"), (0.0, 2, 1.0, 60.0)),
    (("1.5e2", "+3", ".5", "6E1"), (150.0, 3, 0.5, 60.0)),
    (("007", "0010", "1.0", "60.0"), (7.0, 10, 1.0, 60.0)),
])
def test_csv_numbers_written_as_decimals_are_still_read(tmp_path: Path, cells: tuple[str, ...],
                                                        expected: tuple[float, ...]) -> None:
    submit, tasks, cpu, work = cells
    path = tmp_path / "j.csv"
    path.write_text(f"{CSV_HEADER}\nb,{submit},{tasks},{cpu},0.2,{work}\n")
    [job] = read_jobs(path)
    assert (job.submit_time, job.tasks, job.cpu_need, job.work) == expected


@pytest.mark.parametrize("word", ["inf", "-Infinity", "nan"])
def test_a_csv_word_for_a_non_finite_number_is_still_not_finite(tmp_path: Path, word: str) -> None:
    path = tmp_path / "j.csv"
    path.write_text(f"{CSV_HEADER}\nb,0,2,1.0,0.2,{word}\n")
    with pytest.raises(JobFileError, match=r"j.csv:2: work: must be finite, got "):
        read_jobs(path)


# ---- gzip files under plain names ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["jobs.jsonl", "jobs.csv", "jobs.txt", "trace.swf"])
def test_a_gzip_file_under_a_plain_name_is_read_as_gzip(tmp_path: Path, name: str) -> None:
    """A gzip'd .jsonl was "not UTF-8 text (byte 0x8b at byte 2 of the line)" and a gzip'd .swf "expected 18
    fields, found 22". Its first two bytes (1f 8b) are never UTF-8 or SWF text: it is read as gzip, and the hash
    is still that of the bytes read."""
    if name.endswith(".csv"):
        text = f"{CSV_HEADER}\n{CSV_GOOD}\n"
    elif name.endswith(".swf"):
        text = "; MaxNodes: 240\n1 0 0 60 2 -1 -1 2 60 -1 1 1 1 -1 -1 1 -1 -1\n"
    else:
        text = json.dumps(GOOD) + "\n"
    data = gzip.compress(text.encode())
    path = tmp_path / name
    path.write_bytes(data)
    source = load_jobs(path)
    assert len(source.jobs) == 1 and source.jobs[0].work == 60.0
    assert source.sha256 == hashlib.sha256(data).hexdigest()
    path.write_bytes(data[: len(data) - 12])  # (damaged, it is refused as a damaged .gz is)
    with pytest.raises(JobFileError, match=r":\d+: compressed file is truncated"):
        load_jobs(path)


def test_an_id_with_a_control_character_is_refused_naming_its_line(tmp_path: Path) -> None:
    """Input review: ``simulate`` took a job id with a newline (``submit`` refused it), and its table's row was split
    in two."""
    import json

    from workloads.jobfile import JobFileError, read_jobs

    path = tmp_path / "j.jsonl"
    path.write_text(json.dumps({"id": "a\nb", "submit_time": 0, "tasks": 1, "cpu_need": 0.5, "memory": 0.1,
                                "work": 5}) + "\n")
    with pytest.raises(JobFileError, match=r"j.jsonl:1: id: must be printable .*, got 'a\\nb'"):
        read_jobs(str(path))
    path.write_text("id,submit_time,tasks,cpu_need,memory,work\n\"a\tb\",0,1,0.5,0.1,5\n")
    path = path.rename(tmp_path / "j.csv")
    with pytest.raises(JobFileError, match=r"j.csv:2: id: must be printable"):
        read_jobs(str(path))
