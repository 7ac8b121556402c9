"""Upgrade review: ``vcemu sweep --report-only`` on a sweep whose every cell an older vcemu computed.

It removed that sweep's reports (its PNGs) and wrote tables of no cell in their place, exit 1: a user regenerating an
older finished sweep's plots after an upgrade lost them. Nothing this code can report: the reports stay as they are."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from coordinator.sweep import sweep_main
from tests.unit.test_sweep_resume import FakeRay


def _argv(out: Path, *extra: str) -> list[str]:
    return ["--out", str(out), "--algorithms", "fcfs,easy", "--penalties", "300", "--traces", "1", "--jobs", "6",
            "--loads", "0.5", "--cell-timeout", "60", "--no-progress", *extra]


def test_report_only_of_a_sweep_an_older_vcemu_computed_leaves_its_reports(tmp_path: Path, capsys,
                                                                            monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", FakeRay(()))
    monkeypatch.setattr("coordinator.sweep_report.write_reports",
                        lambda rows, cfg, out: [(out / "table1_p300.csv").write_text("the older vcemu's table\n")])
    out = tmp_path / "sweep"
    assert sweep_main(_argv(out)) == 0
    for path in (out / "cells").glob("*.json"):  # cells as an older vcemu wrote them: no fingerprint
        cell = json.loads(path.read_text())
        cell.pop("code", None)
        path.write_text(json.dumps(cell))
    (out / "fig1.png").write_bytes(b"an older vcemu's figure")
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file() and p.name != ".lock"}
    capsys.readouterr()
    assert sweep_main(_argv(out, "--report-only")) == 1
    err = capsys.readouterr().err
    assert "2 stored cells were computed by other code" in err
    assert f"no stored cell of {out} can be reported by this code: its reports are left as they are" in err
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file() and p.name != ".lock"} == before
