"""The journal reader under damage: a journal is read after a kill, or after worse (a disk error, a stray
write), and a damaged line must cost only itself, never the run (a traceback) or the lines around it."""

from __future__ import annotations

from pathlib import Path

from coordinator.resumable import read_journal


def test_a_line_over_csvs_field_limit_is_dropped_and_the_others_kept(tmp_path: Path) -> None:
    path = tmp_path / "j.csv"
    path.write_text("unit,data\na,1\n" + "b," + "x" * 200_000 + "\nc,3\n")  # csv refuses fields over 128 KiB
    rows, dropped = read_journal(path, ("unit", "data"))
    assert rows == [{"unit": "a", "data": "1"}, {"unit": "c", "data": "3"}] and dropped == 1


def test_a_last_line_cut_short_is_dropped(tmp_path: Path) -> None:
    path = tmp_path / "j.csv"
    path.write_text("unit,data\na,1\nb,2")
    assert read_journal(path, ("unit", "data")) == ([{"unit": "a", "data": "1"}], 1)


def test_a_resume_says_which_library_versions_its_kept_results_came_from(tmp_path: Path, capsys) -> None:
    """Reproducibility review: results kept from a run under numpy 1.26.4 were relabelled with this run's 2.4.6,
    without a word (a resume compares the source only). The resume keeps them and says so; the same versions:
    nothing said."""
    import json

    from coordinator.resumable import unfinished_rows
    from vcemu.provenance import code_version, library_changes

    now = {"seed": 1, "code": code_version()}
    was = {"seed": 1, "code": {**now["code"], "python": "3.9.0",
                               "libraries": {**now["code"]["libraries"], "numpy": "1.26.4"}}}
    assert library_changes(was, now) == ["python 3.9.0, now " + now["code"]["python"],
                                         "numpy 1.26.4, now " + str(now["code"]["libraries"]["numpy"])]
    assert library_changes(now, now) == [] and library_changes({"seed": 1}, now) == []
    (tmp_path / "journal.csv").write_text("k,v\n1,2\n")
    (tmp_path / "config.json").write_text(json.dumps(was))
    assert unfinished_rows(tmp_path, "journal.csv", ["k", "v"], now, (), "vcemu x") == ([{"k": "1", "v": "2"}], 0)
    err = capsys.readouterr().err
    assert f"vcemu x: note: {tmp_path} holds the journal of a run computed with python 3.9.0, now" in err
    assert "numpy 1.26.4, now" in err and "its results come from both" in err
    (tmp_path / "config.json").write_text(json.dumps(now))
    assert unfinished_rows(tmp_path, "journal.csv", ["k", "v"], now, (), "vcemu x") == ([{"k": "1", "v": "2"}], 0)
    assert capsys.readouterr().err == ""


def test_an_unreadable_config_beside_results_is_refused_not_replaced(tmp_path: Path) -> None:
    """Input review: a config.json cut in half beside a finished run's results made oppcost and vcsched start over,
    replacing intact results (whatever the new settings). It is refused now; without results, a run may go on."""
    from coordinator.resumable import other_settings_refusal

    (tmp_path / "config.json").write_text('{"seed": 1, "exec')
    args = (tmp_path, {"seed": 7}, {"seed": "--seed"}, "journal.csv", "vcemu x")
    assert other_settings_refusal(*args, results=("executions.csv",)) is None  # nothing to lose
    (tmp_path / "executions.csv").write_text("execution,mean\n0,1.5\n")
    line = other_settings_refusal(*args, results=("executions.csv",))
    assert line is not None and line.startswith(f"vcemu x: {tmp_path}/config.json cannot be read")
    assert "(executions.csv)" in line and "give another --out" in line
    (tmp_path / "executions.csv").unlink()
    (tmp_path / "journal.csv").write_text("execution,mean\n0,1.5\n")
    assert "(journal.csv)" in (other_settings_refusal(*args) or "")
