"""Review demonstrations: the checkpoint file outlives its simulation when a kill falls between the journal append
and the checkpoint's removal, and the interrupt message names a checkpoint that does not exist."""

from __future__ import annotations

from pathlib import Path

import pytest

from coordinator.apc import experiment as apc

ARGV = ["--experiments", "three", "--cycle", "300", "--exp3-horizon", "3000"]


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
