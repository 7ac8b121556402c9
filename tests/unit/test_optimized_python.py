"""``vcemu`` under ``python -OO`` (PYTHONOPTIMIZE=2), which strips docstrings: every parser whose description was
made from ``__doc__.splitlines()`` or ``__doc__.split(...)`` failed with AttributeError ('NoneType' object has no
attribute 'splitlines') before any command ran, ``vcemu --help`` included (static type check review)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_doc_head() -> None:
    from vcemu.cliargs import doc_head

    assert doc_head(None) == "" and doc_head("") == ""
    assert doc_head("One line.\nMore.\n\nNext paragraph.") == "One line."
    assert doc_head("One line.\nMore.\n\nNext paragraph.", paragraph=True) == "One line.\nMore."


@pytest.mark.parametrize("argv", [[], ["replay"], ["sweep"], ["bench", "packing"], ["bench", "dfrs"],
                                  ["bench", "cpu-share"], ["bench", "boot"]], ids=lambda a: " ".join(a) or "vcemu")
def test_help_without_docstrings(argv: list[str]) -> None:
    env = {**os.environ, "PYTHONOPTIMIZE": "2", "PYTHONDONTWRITEBYTECODE": "1"}
    proc = subprocess.run([sys.executable, "-m", "coordinator.cli", *argv, "--help"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "usage:" in proc.stdout and "Traceback" not in proc.stderr
