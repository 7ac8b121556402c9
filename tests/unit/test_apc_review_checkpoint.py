"""Review demonstrations: the checkpoint file outlives its simulation when a kill falls between the journal append
and the checkpoint's removal, and the interrupt message names a checkpoint that does not exist."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coordinator.apc import experiment as apc
from coordinator.resumable import Journal

ARGV = ["--experiments", "three", "--cycle", "300", "--exp3-horizon", "3000"]


def test_a_kill_between_journal_append_and_checkpoint_removal_leaves_a_checkpoint_in_a_complete_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "out"
    monkeypatch.setattr(apc, "CHECKPOINT_SECONDS", 0.0)
    monkeypatch.setattr(apc, "save_figure", lambda *_a, **_k: None)
    real_append = Journal.append

    def append_then_die(self: Journal, rows) -> None:  # type: ignore[no-untyped-def]
        rows = list(rows)
        real_append(self, rows)
        if rows[0]["unit"] == "exp3 dynamic":
            raise KeyboardInterrupt  # (a kill: the journal row is on disk, the unlink never runs)

    monkeypatch.setattr(Journal, "append", append_then_die)
    assert apc.apc_main([*ARGV, "--out", str(out)]) == 130
    monkeypatch.setattr(Journal, "append", real_append)
    monkeypatch.setattr(apc, "CHECKPOINT_SECONDS", 10.0)  # the default: the static configurations (< 1 s) never save
    assert json.loads((out / apc.CHECKPOINT).read_text())["unit"] == "exp3 dynamic"
    assert apc.apc_main([*ARGV, "--out", str(out)]) == 0  # reuses exp3 dynamic from the journal
    assert json.loads((out / "config.json").read_text())["complete"] is True
    # the finished run's --out still holds the checkpoint of a simulation that is journalled, and nothing
    # (no later run that keeps exp3 dynamic from its journal) will ever remove it:
    assert not (out / apc.CHECKPOINT).exists(), sorted(p.name for p in out.iterdir())


def test_the_interrupt_message_names_a_checkpoint_that_does_not_exist(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"  # default CHECKPOINT_SECONDS: a short simulation never saves
    real = apc.simulate

    def stop(cfg, jobs, progress, state, checkpoint):  # type: ignore[no-untyped-def]
        def ck(s):  # type: ignore[no-untyped-def]
            checkpoint(s)
            if s.t >= 3 * cfg.T:
                raise KeyboardInterrupt
        return real(cfg, jobs, progress, state, ck)

    monkeypatch.setattr(apc, "simulate", stop)
    assert apc.apc_main([*ARGV, "--out", str(out)]) == 130
    err = capsys.readouterr().err
    assert not (out / apc.CHECKPOINT).exists()
    assert "its last checkpoint in" not in err, err.splitlines()[-1]
