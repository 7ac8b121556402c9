"""``vcemu sweep`` refusing bad input in one line that names the flag, the file, the line or the stored key, before
it runs anything (input review): a damaged ``--hpc2n`` trace (as ``vcemu simulate`` refuses it), records the SWF
conversion dropped (said and recorded), sizes past the documented maxima, and a stored ``config.json`` of wrong
types. Ray is replaced by a small fake that runs each cell in this process."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from coordinator import sweep
from coordinator.sweep import sweep_main
from tests.unit.test_sweep_resume import FakeRay
from workloads.jobfile import JobFileError, load_jobs

#: An SWF record of 2 processors: job number, submit time and run time filled in.
_RECORD = "{n} {submit} 0 {run} 2 -1 -1 2 60 -1 1 1 1 -1 -1 1 -1 -1"
_HEADER = "; MaxNodes: 240"


@pytest.fixture
def fake_ray(monkeypatch: pytest.MonkeyPatch) -> FakeRay:
    fake = FakeRay()
    monkeypatch.setitem(sys.modules, "ray", fake)
    return fake


@pytest.fixture(autouse=True)
def no_reports(monkeypatch: pytest.MonkeyPatch) -> None:
    """No reports (matplotlib): these tests are about what is refused and stored."""
    monkeypatch.setattr("coordinator.sweep_report.write_reports", lambda rows, cfg, out: [])


def _swf(path: Path, records: Sequence[str]) -> Path:
    """An SWF file of a header line (line 1) and ``records`` (lines 2, 3, ...), written as given."""
    path.write_text("\n".join([_HEADER, *records]) + "\n")
    return path


def _records(n: int = 6, **line: str) -> list[str]:
    """``n`` good records, two 1-week segments of 3 jobs; ``line`` replaces record ``int(key[1:])`` (1-based), e.g.
    ``r3="..."``."""
    times = (100, 200, 300, 604_900, 605_000, 605_100, 605_200, 605_300)
    recs = [_RECORD.format(n=i, submit=times[i - 1], run=50) for i in range(1, n + 1)]
    for key, text in line.items():
        recs[int(key[1:]) - 1] = text
    return recs


def _hpc2n_argv(out: Path, swf: Path, *extra: str) -> list[str]:
    return ["--out", str(out), "--algorithms", "fcfs", "--penalties", "0", "--traces", "0", "--hpc2n", str(swf),
            "--hpc2n-weeks", "0", "--cell-timeout", "60", "--no-progress", *extra]


def _lublin_argv(out: Path, *extra: str) -> list[str]:
    return ["--out", str(out), "--algorithms", "fcfs,easy", "--penalties", "300", "--traces", "1", "--jobs", "6",
            "--loads", "0.5", "--cell-timeout", "60", "--no-progress", *extra]


def _one_line(err: str) -> str:
    assert "Traceback" not in err, err
    (line,) = err.splitlines()
    return line


# ---- 1, 2. a damaged --hpc2n trace: refused as simulate refuses it, before anything runs ------------------------


@pytest.mark.parametrize(("record", "field"), [
    (_RECORD.format(n=4, submit=604_900, run="1e300"), 4),
    (_RECORD.format(n=4, submit=604_900, run="1e999"), 4),  # (inf)
    (_RECORD.format(n=4, submit="9" * 30, run=50), 2),
])
def test_a_trace_with_a_value_out_of_bounds_is_refused_naming_its_file_line_and_swf_field(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], fake_ray: FakeRay, record: str, field: int) -> None:
    """It said "vcemu sweep: work_seconds: must be below 1e+12 s ..., got 1e+300", naming no file, line or SWF
    field, where ``vcemu simulate`` names them: the sweep now reads the trace through the same checks, and says
    what simulate says of the file."""
    swf = _swf(tmp_path / "log.swf", _records(r4=record))
    out = tmp_path / "sweep"
    assert sweep_main(_hpc2n_argv(out, swf)) == 2
    got = _one_line(capsys.readouterr().err)
    with pytest.raises(JobFileError) as simulate:
        load_jobs(swf)
    assert got == f"vcemu sweep: --hpc2n: {simulate.value}"
    assert got.startswith(f"vcemu sweep: --hpc2n: {swf}:5: ") and f"field {field}" in got, got
    assert fake_ray.gets == 0 and not list((out / "cells").glob("*.json")) and not (out / "config.json").exists()


def test_a_trace_with_a_job_number_twice_is_refused_before_any_cell_runs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], fake_ray: FakeRay) -> None:
    """Every cell ran and failed ("ValueError: job id '2' already exists"), stored as errors, exit 1: now the file
    is refused at once, naming the line of the second record, as simulate does."""
    swf = _swf(tmp_path / "log.swf", _records(r3=_RECORD.format(n=2, submit=300, run=50)))
    out = tmp_path / "sweep"
    assert sweep_main(_hpc2n_argv(out, swf, "--algorithms", "fcfs,easy")) == 2
    assert _one_line(capsys.readouterr().err) == (
        f"vcemu sweep: --hpc2n: {swf}:4: id: duplicate SWF job number 2 (first on line 3)")
    assert fake_ray.gets == 0 and not list((out / "cells").glob("*.json")) and not (out / "config.json").exists()


def test_a_trace_named_without_an_swf_suffix_is_refused_not_read_as_json_lines(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], fake_ray: FakeRay) -> None:
    swf = _swf(tmp_path / "log.txt", _records())
    assert sweep_main(_hpc2n_argv(tmp_path / "sweep", swf)) == 2
    assert _one_line(capsys.readouterr().err) == (
        f"vcemu sweep: --hpc2n: {swf}: not an SWF trace (its name must end in .swf or .swf.gz)")


# ---- 3. records the SWF conversion dropped: said in one line, recorded in config.json ----------------------------


def test_records_the_conversion_dropped_are_said_and_recorded(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], fake_ray: FakeRay) -> None:
    swf = _swf(tmp_path / "log.swf", _records(r2=_RECORD.format(n=2, submit=200, run=-1)))
    out = tmp_path / "sweep"
    assert sweep_main(_hpc2n_argv(out, swf)) == 0
    err = capsys.readouterr().err
    said = [line for line in err.splitlines() if "dropped" in line]
    assert said == [f"vcemu sweep: {swf}: dropped 1 of 6 records: no_run_time=1"], err
    config = json.loads((out / "config.json").read_text())
    assert config["swf_conversion"] == {"records": 6, "dropped": {
        "no_submit_time": 0, "no_processors": 0, "no_run_time": 1, "memory_exceeds_node": 0,
        "does_not_fit_cluster": 0}}
    # a sweep without HPC2N weeks converted nothing
    assert sweep_main(_lublin_argv(tmp_path / "lublin")) == 0
    assert json.loads((tmp_path / "lublin" / "config.json").read_text())["swf_conversion"] is None


# ---- 4. sizes past the documented maxima: refused naming the flag, before anything is allocated -------------------


@pytest.fixture
def no_lublin(monkeypatch: pytest.MonkeyPatch) -> None:
    """Building a Lublin trace fails the test: a refusal must come before any trace is made."""
    def built(*args: Any, **kw: Any) -> Any:
        raise AssertionError("a trace was built before the size was refused")
    monkeypatch.setattr("workloads.annotate.synthetic_trace", built)


@pytest.mark.parametrize(("argv", "start"), [
    (["--jobs", "1000000000"], "vcemu sweep: --jobs: must be at most 1,000,000 jobs per Lublin trace (001: 1,000), "
                              "got 1000000000"),
    (["--traces", "1000000000", "--jobs", "2"], "vcemu sweep: --traces, --loads, --unscaled, --jobs: the Lublin "
                                                "traces would hold 18,000,000,000 jobs"),
    (["--traces", "100000", "--jobs", "2"], "vcemu sweep: the sweep would have 16,200,000 cells"),
])
def test_sizes_past_the_maxima_are_refused_before_any_trace_is_built(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], no_lublin: None, argv: list[str], start: str) -> None:
    """``--jobs 1000000000`` was numpy's _ArrayMemoryError traceback, ``--traces 1000000000 --jobs 2`` hung in
    silence building traces."""
    assert sweep_main(["--out", str(tmp_path / "sweep"), "--no-progress", *argv]) == 2
    line = _one_line(capsys.readouterr().err)
    assert line.startswith(start), line
    assert not (tmp_path / "sweep" / "config.json").exists()


def test_the_union_with_a_stored_sweep_is_bounded_too(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], fake_ray: FakeRay, monkeypatch: pytest.MonkeyPatch) -> None:
    """A rerun covers the stored sweep's traces, algorithms and penalties too: the union is what is bounded."""
    out = tmp_path / "sweep"
    monkeypatch.setattr(sweep, "MAX_TRACE_JOBS", 10)
    assert sweep_main(_lublin_argv(out)) == 0  # 1 trace x 1 load x 6 jobs
    cells = {p.name: p.read_bytes() for p in (out / "cells").iterdir()}
    config = (out / "config.json").read_bytes()
    capsys.readouterr()
    assert sweep_main(_lublin_argv(out, "--loads", "0.6")) == 2  # alone 6 jobs; with the stored load, 12
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    line = err.splitlines()[-1]  # (after the line saying the run covers the union)
    assert line.startswith("vcemu sweep: --traces, --loads, --unscaled, --jobs (with the stored sweep's): the Lublin "
                           "traces would hold 12 jobs ((1 traces x 2 loads + 0 unscaled) x 6 jobs), more than the "
                           "most, 10"), line
    monkeypatch.setattr(sweep, "MAX_TRACE_JOBS", 100)
    monkeypatch.setattr(sweep, "MAX_CELLS", 3)
    assert sweep_main(_lublin_argv(out, "--penalties", "0")) == 2  # alone 2 cells; with the stored penalty, 4
    line = _one_line(capsys.readouterr().err)
    assert line.startswith("vcemu sweep: the sweep would have 4 cells (1 traces x 2 algorithms x 2 penalties, with "
                           "the stored sweep's), more than the most, 3"), line
    assert {p.name: p.read_bytes() for p in (out / "cells").iterdir()} == cells
    assert (out / "config.json").read_bytes() == config


@pytest.mark.parametrize("text", ["0-99999999999", "99999999999", "10000", "0-10000"])
def test_hpc2n_weeks_past_the_most_are_refused_without_making_the_range(text: str) -> None:
    """``0-99999999999`` was a MemoryError in _weeks, and ``0-9999999`` took 900 MB before it was refused for the
    file's 182 weeks."""
    with pytest.raises(SystemExit) as refused:
        sweep._weeks(text)
    assert str(refused.value.code).startswith("vcemu sweep: --hpc2n-weeks: week ")
    assert "past the largest index, 9999" in str(refused.value.code)
    assert sweep._weeks("0-9999")[-1] == 9999  # the most is accepted


# ---- 5. a stored config.json of wrong types: refused in one line naming the file and the key -----------------------


@pytest.mark.parametrize(("key", "value", "rule"), [
    ("algorithms", 5, "algorithms must be a non-empty list of policy names, got 5"),
    ("algorithms", ["nosuch"], "algorithms: unknown policy 'nosuch'"),
    ("loads", "x", 'loads must be a list of finite numbers > 0, got "x"'),
    ("penalties", [None], "penalties must be a non-empty list of finite numbers >= 0 (seconds), got [null]"),
    ("penalties", ["300"], 'penalties must be a non-empty list of finite numbers >= 0 (seconds), got ["300"]'),
    ("traces", None, "traces must be a whole number >= 0, got null"),
    ("jobs", "20", 'jobs must be a whole number >= 2 and at most 1,000,000, got "20"'),
    ("hpc2n_weeks", "abc", 'hpc2n_weeks must be a list of week indices 0..9999, got "abc"'),
    ("hpc2n", 7, "hpc2n must be a file's path, got 7"),
    ("max_jobs", 1.5, "max_jobs must be null or a whole number >= 2, got 1.5"),
    ("cell_timeout", "600", 'cell_timeout must be a number of seconds > 0, got "600"'),
    ("job_scale", True, "job_scale must be a finite number > 0 and at most 1000, got true"),
])
@pytest.mark.parametrize("report_only", [False, True])
def test_a_stored_config_of_wrong_types_is_refused_naming_the_key_and_nothing_stored_is_lost(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], fake_ray: FakeRay, key: str, value: Any, rule: str,
        report_only: bool) -> None:
    """Valid JSON of wrong types gave TypeError and PolicyNameError tracebacks, "--jobs 20 stored, 20 given" and,
    for hpc2n_weeks "abc", "ran on ..., which is another file now"."""
    out = tmp_path / "sweep"
    assert sweep_main(_lublin_argv(out)) == 0
    cfg_path = out / "config.json"
    cfg_path.write_text(json.dumps({**json.loads(cfg_path.read_text()), key: value}))
    cells = {p.name: p.read_bytes() for p in (out / "cells").iterdir()}
    config = cfg_path.read_bytes()
    capsys.readouterr()
    argv = ["--out", str(out), "--report-only"] if report_only else [*_lublin_argv(out), "--traces", "0"]
    assert sweep_main(argv) == 2
    line = _one_line(capsys.readouterr().err)
    assert line.startswith(f"vcemu sweep: {cfg_path}: cannot use the stored sweep's config: {rule}"), line
    assert line.endswith("; use another --out"), line
    assert {p.name: p.read_bytes() for p in (out / "cells").iterdir()} == cells
    assert cfg_path.read_bytes() == config


@pytest.mark.parametrize("report_only", [False, True])
def test_an_emptied_stored_config_is_refused_naming_what_it_lacks(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], fake_ray: FakeRay, report_only: bool) -> None:
    out = tmp_path / "sweep"
    assert sweep_main(_lublin_argv(out)) == 0
    cells = {p.name: p.read_bytes() for p in (out / "cells").iterdir()}
    (out / "config.json").write_text("{}")
    capsys.readouterr()
    argv = ["--out", str(out), "--report-only"] if report_only else _lublin_argv(out)
    assert sweep_main(argv) == 2
    line = _one_line(capsys.readouterr().err)
    assert line == (f"vcemu sweep: {out / 'config.json'}: cannot use the stored sweep's config: it has no "
                    "algorithms key (every sweep writes one); use another --out"), line
    assert {p.name: p.read_bytes() for p in (out / "cells").iterdir()} == cells
    assert (out / "config.json").read_text() == "{}"


def test_a_stored_config_as_an_older_vcemu_wrote_it_is_still_resumed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], fake_ray: FakeRay) -> None:
    """A config.json without the keys later vcemus added (job_scale, hpc2n_sha256, swf_conversion, code) is
    accepted, as before."""
    out = tmp_path / "sweep"
    assert sweep_main(_lublin_argv(out)) == 0
    stored = json.loads((out / "config.json").read_text())
    for key in ("job_scale", "hpc2n_sha256", "swf_conversion", "code"):
        stored.pop(key, None)
    (out / "config.json").write_text(json.dumps(stored))
    capsys.readouterr()
    assert sweep_main(_lublin_argv(out, "--report-only")) == 0, capsys.readouterr().err


def test_a_stored_infinite_cell_timeout_as_an_older_vcemu_took_it_is_still_read(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], fake_ray: FakeRay) -> None:
    """Code review: a vcemu before 3fc04c9 took --cell-timeout inf and stored Infinity; the type check refused it."""
    out = tmp_path / "sweep"
    assert sweep_main(_lublin_argv(out)) == 0
    stored = json.loads((out / "config.json").read_text())
    (out / "config.json").write_text(json.dumps({**stored, "cell_timeout": math.inf}))
    capsys.readouterr()
    assert sweep_main(_lublin_argv(out, "--report-only")) == 0, capsys.readouterr().err
