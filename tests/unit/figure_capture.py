"""What the figure tests read off a figure a command draws, without writing it: the figures by file name, and the
text of their notes (:func:`coordinator.figures.settings_note`)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import pytest


def record_figures(monkeypatch: pytest.MonkeyPatch, module: ModuleType) -> dict[str, Any]:
    """The figures ``module`` saves (through its ``save_figure``), by file name, drawn as saved (before it closes
    them); nothing is written."""
    figures: dict[str, Any] = {}

    def save(fig: Any, path: Path, **_: Any) -> Path:
        fig.canvas.draw()
        figures[Path(path).name] = fig
        return Path(path)

    monkeypatch.setattr(module, "save_figure", save)
    return figures


def note_of(fig: Any) -> str:
    """The text a figure carries outside its axes: its settings note."""
    return "\n".join(t.get_text() for t in fig.texts)
