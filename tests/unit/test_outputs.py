"""vcemu.outputs: a result file is the old one or the new one, never a part; clear_outputs removes
only the names it is given (and interrupted writes' temporary files)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from vcemu import outputs
from vcemu.cliargs import usable_out_dir


def test_a_write_that_fails_before_the_rename_leaves_the_old_file_and_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "table.csv"
    outputs.write_text(target, "old\n")

    def dies(src: str, dst: str) -> None:
        raise KeyboardInterrupt  # a kill between the write and the rename

    monkeypatch.setattr(os, "replace", dies)
    with pytest.raises(KeyboardInterrupt):
        outputs.write_text(target, "new\n")
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["table.csv"]


def test_json_and_figures_are_written_whole(tmp_path: Path) -> None:
    outputs.write_json(tmp_path / "config.json", {"seed": 3, "algorithms": ["a", "b"]})
    assert json.loads((tmp_path / "config.json").read_text()) == {"algorithms": ["a", "b"], "seed": 3}
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    outputs.save_figure(fig, tmp_path / "fig.png", dpi=40)
    plt.close(fig)
    assert (tmp_path / "fig.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_clear_outputs_removes_the_named_files_and_leftover_temporaries_only(tmp_path: Path) -> None:
    for name in ("exp1.csv", "exp1.png", "exp2.csv", "notes.txt", ".exp1.csv.x1.tmp"):
        (tmp_path / name).write_text("x")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "exp1.csv").write_text("x")
    gone = outputs.clear_outputs(tmp_path, ["exp1.*"])
    assert [p.name for p in gone] == [".exp1.csv.x1.tmp", "exp1.csv", "exp1.png"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exp2.csv", "notes.txt", "sub"]
    assert outputs.clear_outputs(tmp_path / "missing", ["*"]) == []


def test_a_result_file_gets_the_mode_open_would_give_it(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        outputs.write_text(tmp_path / "t.csv", "x\n")
    finally:
        os.umask(old)
    assert (tmp_path / "t.csv").stat().st_mode & 0o777 == 0o666 & ~outputs._UMASK


def test_json_safe_writes_non_finite_floats_as_null_at_any_depth() -> None:
    import math

    import numpy as np

    from vcemu.outputs import json_safe

    obj = {"a": math.nan, "b": [1.0, math.inf, (-math.inf, 2)], "c": {"d": np.float64("nan"), "e": "nan"}, "f": 3}
    text = json.dumps(json_safe(obj))
    assert json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} in JSON")) == {
        "a": None, "b": [1.0, None, [None, 2]], "c": {"d": None, "e": "nan"}, "f": 3}


def test_bench_results_record_their_code_and_are_strict_json(tmp_path: Path) -> None:
    from vcemu.bench_results import write_results as _write
    from vcemu.provenance import code_version

    _write(str(tmp_path), "load", {"rate": 5.0, "p99_ms": float("nan")}, {"jobs": 10})
    strict = {"parse_constant": lambda c: pytest.fail(f"{c} in JSON")}
    assert json.loads((tmp_path / "load.json").read_text(), **strict) == {"rate": 5.0, "p99_ms": None}
    config = json.loads((tmp_path / "load-config.json").read_text(), **strict)
    assert config == {"jobs": 10, "code": code_version()}


def test_a_run_folder_under_a_file_says_it_is_a_file(tmp_path: Path) -> None:
    """mkdir's FileExistsError said "File exists", as if the directory were there (simulate --out FILE)."""
    afile = tmp_path / "afile"
    afile.write_text("")
    with pytest.raises(NotADirectoryError) as info:
        outputs.new_run_dir(afile, "greedy")
    assert info.value.strerror == "is a file, not a directory" and info.value.filename == str(afile)
    assert afile.read_text() == ""
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(NotADirectoryError) as info:
        outputs.new_run_dir(tmp_path / "fifo", "greedy")
    assert info.value.strerror == "is not a directory"


def test_usable_out_dir_says_an_out_that_is_a_file_is_a_file(tmp_path: Path) -> None:
    """vcsched, oppcost, apc and sweep check --out with it; for a file it said "File exists" (review)."""

    (tmp_path / "afile").write_text("x")
    with pytest.raises(ValueError, match="--out .*afile: cannot write results there: it is a file, not a directory"):
        usable_out_dir(tmp_path / "afile")
    assert usable_out_dir(tmp_path / "new" / "dir").is_dir()


def test_a_write_that_fails_for_want_of_room_names_its_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """Storage-fault review: a results file whose write or fsync failed on a full disk raised an OSError naming no
    file (the kernel's ENOSPC comes from write(2) or fsync(2), not open(2)), so oppcost on a full --out said only
    "vcemu oppcost: cannot write: no space left on the device; make room and run it again"."""
    import errno

    from coordinator import cli
    from coordinator.resumable import Journal

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    target = tmp_path / "fig3.png"
    journal = Journal(tmp_path / "executions.partial.csv", ["a"])
    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError) as failed:
        outputs.write_bytes(target, b"x" * 100)
    assert failed.value.filename == str(target)
    assert not list(tmp_path.glob(".fig3.png.*"))  # (its temporary file is gone, as before)
    with pytest.raises(OSError) as failed:
        journal.append([{"a": 1}])
    assert failed.value.filename == str(tmp_path / "executions.partial.csv")

    def run(argv: list[str]) -> int:
        outputs.write_bytes(target, b"x")
        return 0

    monkeypatch.setattr(cli, "_main", run)
    assert cli.main(["oppcost", "--out", str(tmp_path)]) == 1
    assert capsys.readouterr().err.startswith(f"vcemu oppcost: cannot write {target}: no space left on the device")
