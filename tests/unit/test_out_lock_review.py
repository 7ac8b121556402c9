"""One run at a time in a resumable command's --out (reproducibility review).

Two ``vcemu oppcost`` runs started together into one empty ``--out`` (``--beta 10`` and ``--beta 5``) both found
it empty, both passed the other-settings check, both wrote their results there and both exited 0 saying so; the
folder held the run that finished last, and the other's results were gone without a word. ``vcemu sweep`` locks its
``--out``; ``oppcost``, ``vcsched`` and ``apc`` now do too, and a second run is refused (exit 2) before it writes.
"""

from __future__ import annotations

import os

import pytest

from coordinator.apc.experiment import apc_main
from coordinator.locks import claim
from coordinator.oppcost.experiment import oppcost_main
from coordinator.vcsched.experiment import vcsched_main

OUT_LOCK = ".lock"  # coordinator.resumable.OUT_LOCK

TINY = {
    "oppcost": (oppcost_main, ["--executions", "1", "--duration", "10", "--jobs", "1"]),
    "vcsched": (vcsched_main, ["--set", "small", "--instances", "1", "--slacks", "0.5", "--algorithms", "MCB8",
                               "--jobs", "1"]),
    "apc": (apc_main, ["--experiments", "one", "--exp1-jobs", "3"]),
}


@pytest.mark.parametrize("command", sorted(TINY))
def test_a_second_run_into_a_locked_out_is_refused(tmp_path, capsys, command):
    main, argv = TINY[command]
    out = tmp_path / "out"
    out.mkdir()
    fd = claim(out / OUT_LOCK)  # another run of the command, under way
    try:
        assert main([*argv, "--out", str(out)]) == 2
    finally:
        os.close(fd)
    err = capsys.readouterr().err
    assert f"another vcemu {command}" in err and "is using" in err
    assert sorted(p.name for p in out.iterdir()) == [OUT_LOCK]  # nothing written


@pytest.mark.parametrize("command", ["oppcost"])
def test_the_lock_ends_with_the_run(tmp_path, command):
    main, argv = TINY[command]
    out = tmp_path / "out"
    assert main([*argv, "--out", str(out)]) == 0
    os.close(claim(out / OUT_LOCK))  # released: a later run (or another process) may take it
    assert main([*argv, "--out", str(out)]) == 0  # and a rerun in the same process is not refused by the first


def test_a_pool_worker_does_not_keep_its_parents_lock(tmp_path):
    """A forked worker got a copy of the lock's descriptor: a run SIGKILLed left the folder locked until the last of
    its workers had died (test_vcsched_sessions saw a rerun refused). The pool initializer closes the copy."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from coordinator.resumable import _HELD, claim_out, die_with_parent

    fd = claim_out(tmp_path, "oppcost")
    assert fd is not None
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork"), initializer=die_with_parent) as pool:
        assert pool.submit(abs, -1).result() == 1  # the worker is up, and stays up below
        _HELD.remove(fd)
        os.close(fd)  # the run ends (as a killed one would) while its worker lives on
        os.close(claim(tmp_path / OUT_LOCK))  # free at once: the worker held no copy of it
