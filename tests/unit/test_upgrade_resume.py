"""Upgrade review: a result folder written by an older vcemu, rerun by this one on the same ``--out``.

An older vcemu's ``config.json`` may have no ``"complete"`` (vcsched's before its journal, 2026-11-23), and a finished
vcsched run keeps no journal: such a folder held "no work" for :func:`other_settings_refusal`, so a rerun with other
settings (vcsched's default ``--accuracy`` went from 0.01 to 0.001) replaced its finished results without a word, and a
finished run of other code was replaced silently where the README promises one line."""

from __future__ import annotations

import json
from pathlib import Path

from coordinator.resumable import other_settings_refusal, setting_shown
from coordinator.vcsched import experiment as vc

#: One slack, one instance per specification, one heuristic: 16 small instances, about a second.
ARGV = ["--set", "small", "--instances", "1", "--slacks", "0.3", "--jobs", "1", "--algorithms", "MCB8"]


def _tree(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def test_results_of_a_finished_run_without_complete_are_work(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"accuracy": 0.01}))  # as an older vcemu wrote it
    (tmp_path / "small").mkdir()
    (tmp_path / "small" / "results.csv").write_text("set,instance\nsmall,0\n")
    line = other_settings_refusal(tmp_path, {"accuracy": 0.001}, {"accuracy": "--accuracy"}, "results.partial.csv",
                                  "vcemu vcsched", results=("small/results.csv",))
    assert line is not None and "holds a finished run with other settings (--accuracy 0.01 stored, 0.001 now)" in line


def test_an_older_finished_vcsched_run_with_the_old_default_accuracy_is_refused_not_replaced(
        tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    assert vc.vcsched_main([*ARGV, "--accuracy", "0.01", "--out", str(out)]) == 0
    conf = json.loads((out / "config.json").read_text())
    for key in ("complete", "sessions", "code"):  # what a vcemu of 2026-11-22 did not record
        conf.pop(key, None)
    (out / "config.json").write_text(json.dumps(conf))
    before = _tree(out)
    capsys.readouterr()
    assert vc.vcsched_main([*ARGV, "--out", str(out)]) == 2  # the default accuracy now: 0.001
    assert "other settings (--accuracy 0.01 stored, 0.001 now)" in capsys.readouterr().err
    assert _tree(out) == before


def test_a_finished_vcsched_run_of_other_code_is_replaced_saying_so(tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    assert vc.vcsched_main([*ARGV, "--out", str(out)]) == 0
    conf = json.loads((out / "config.json").read_text())
    conf["code"]["source_sha256"] = "0" * 64  # an older vcemu's source
    (out / "config.json").write_text(json.dumps(conf))
    capsys.readouterr()
    assert vc.vcsched_main([*ARGV, "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert f"vcemu vcsched: {out} holds the results of a finished run of other code (source sha256 000000000000" in err
    assert "starting over" in err


def test_a_refusal_shows_each_setting_stored_and_now() -> None:
    """A flag named alone read as one the user gave, where only its default had changed between versions: the
    refusal shows both values (exact floats, lists as given on the command line, none for an absent one)."""
    assert setting_shown(0.1 + 0.2) == "0.30000000000000004" and setting_shown(None) == "none"
    assert setting_shown([0.5, 1, "x"]) == "0.5,1,x" and setting_shown(list(range(40))).endswith("...")
    assert len(setting_shown(list(range(40)))) == 60


def test_a_refusal_shows_each_flag_as_it_is_given(tmp_path: Path) -> None:
    """The values shown are what the user gives: oppcost's --whole-memory-per-component stores split_memory, its
    opposite ("False stored, True now" said of a run made with the flag, rerun without it); a boolean flag is given
    or not (--parallel-jobs False cannot be given); --set takes small, large or both (not small,large)."""
    from coordinator.oppcost import experiment as oc

    (tmp_path / "config.json").write_text(json.dumps({"split_memory": False, "seed": 1, "complete": True}))
    line = other_settings_refusal(tmp_path, {"split_memory": True, "seed": 1}, oc.SETTINGS, "j.csv", "vcemu oppcost",
                                  shown=oc.SHOWN)
    assert line is not None and "(--whole-memory-per-component given stored, not given now)" in line, line
    (tmp_path / "config.json").write_text(json.dumps({"sets": ["small", "large"], "parallel_jobs": False,
                                                      "complete": True}))
    line = other_settings_refusal(tmp_path, {"sets": ["small"], "parallel_jobs": True}, vc.SETTINGS, "j.csv",
                                  "vcemu vcsched", shown={"sets": vc._set_flag})
    assert line is not None and "(--parallel-jobs not given stored, given now; --set both stored, small now)" in line
