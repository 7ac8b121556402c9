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
