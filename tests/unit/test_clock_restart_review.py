"""Review of the clock floor (``Loaded.clock``): a state file whose recorded clock is absurd (edited, damaged) is
refused in one line, not taken as the time a restarted clock starts from, where it stood still; one that is no
number is left out."""
from __future__ import annotations

from pathlib import Path

import pytest

from coordinator.store import Store, StoreError


def _with_clock(tmp_path: Path, value: str) -> str:
    path = str(tmp_path / "s.db")
    store = Store(path)
    store.epoch()
    store.put_clock(float(value))
    store.close()
    return path


@pytest.mark.parametrize("value", ["1e17", "1e300"])
def test_a_clock_past_any_reachable_time_is_refused(tmp_path: Path, value: str) -> None:
    with pytest.raises(StoreError, match="past any"):
        Store(_with_clock(tmp_path, value)).load(transitions=False)


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_a_clock_that_is_no_number_is_ignored(tmp_path: Path, value: str) -> None:
    assert Store(_with_clock(tmp_path, value)).load(transitions=False).clock == 0.0
