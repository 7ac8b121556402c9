"""``connect`` keeps the caller's SIGTERM handler across ``ray.init``, which replaces it with Ray's own
(``sys.exit(SIGTERM)``, in the main thread: Ray 2.x's ``ray._private.worker.init``). A SIGTERM during the connect
ended ``vcemu replay --ray`` with status 15 and no line; it now reaches the caller's handler.

``ray.init`` is a fake that does what Ray's does with SIGTERM; a local Ray takes seconds to start."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import types
from pathlib import Path
from typing import Any

import pytest

ray = pytest.importorskip("ray", reason="ray is not installed")

from coordinator.raycluster import connect  # noqa: E402
from vcemu.signals import signals_interrupt  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _ray_like_init(term_during: bool, shutdowns: list[str]) -> Any:
    def init(**kwargs: Any) -> Any:
        signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(signum))  # as ray.init does
        if term_during:
            os.kill(os.getpid(), signal.SIGTERM)
        return types.SimpleNamespace(address_info={"gcs_address": "127.0.0.1:6379"})
    return init


@pytest.fixture
def shutdowns(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "shutdown", lambda: calls.append("shutdown"))
    monkeypatch.setattr(ray.util, "get_node_ip_address", lambda: "127.0.0.1")
    return calls


def test_the_callers_handler_is_back_after_a_connect(monkeypatch: pytest.MonkeyPatch, shutdowns: list[str]) -> None:
    monkeypatch.setattr(ray, "init", _ray_like_init(False, shutdowns))
    with signals_interrupt():
        ours = signal.getsignal(signal.SIGTERM)
        ctx = connect(None)
        assert signal.getsignal(signal.SIGTERM) is ours
    ctx._owned = False  # (nothing to shut down: the fake started nothing)
    ctx.close()  # (puts Ray's message switch back)
    assert shutdowns == []


def test_a_sigterm_during_ray_init_reaches_the_callers_handler(monkeypatch: pytest.MonkeyPatch,
                                                               shutdowns: list[str]) -> None:
    """signals_interrupt's handler raises KeyboardInterrupt: the commands' interrupted path (one line, 130). It
    was SystemExit(15), from Ray's handler."""
    monkeypatch.setattr(ray, "init", _ray_like_init(True, shutdowns))
    with signals_interrupt():
        ours = signal.getsignal(signal.SIGTERM)
        with pytest.raises(KeyboardInterrupt):
            connect(None)
        assert signal.getsignal(signal.SIGTERM) is ours
    assert shutdowns == ["shutdown"]  # a local Ray half started is not left behind


def test_a_second_sigterm_while_ray_shuts_down_is_not_rays_exit(monkeypatch: pytest.MonkeyPatch,
                                                                 shutdowns: list[str]) -> None:
    """Review: Ray's handler was still in place during the shutdown, so a second SIGTERM there (``timeout``, a
    supervisor) became SystemExit(15) again, the status and silence this wrapper is for."""
    monkeypatch.setattr(ray, "init", _ray_like_init(True, shutdowns))

    def shutdown() -> None:
        shutdowns.append("shutdown")
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(10_000):  # (a handler would run here)
            pass

    monkeypatch.setattr(ray, "shutdown", shutdown)
    with signals_interrupt(), pytest.raises(KeyboardInterrupt):
        connect(None)
    assert shutdowns == ["shutdown"]


def test_an_ignored_sigterm_that_ray_made_an_exit_goes_on_as_one(monkeypatch: pytest.MonkeyPatch,
                                                                 shutdowns: list[str]) -> None:
    monkeypatch.setattr(ray, "init", _ray_like_init(True, shutdowns))
    before = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        with pytest.raises(SystemExit) as exc:
            connect(None)
        assert exc.value.code == signal.SIGTERM
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGTERM, before)


def test_with_the_default_action_the_process_ends_by_the_signal() -> None:
    """As a SIGTERM a moment before ``ray.init`` would have ended it (status -15), not an exit with status 15."""
    script = textwrap.dedent("""
        import os, signal, sys, types
        import ray
        import ray.util
        from coordinator.raycluster import connect
        def init(**kwargs):
            signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(signum))
            os.kill(os.getpid(), signal.SIGTERM)
        ray.init, ray.is_initialized, ray.shutdown = init, lambda: False, lambda: print("shutdown", flush=True)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        connect(None)
        print("not reached")
    """)
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == -signal.SIGTERM, (done.returncode, done.stdout, done.stderr)
    assert done.stdout == "shutdown\n"
