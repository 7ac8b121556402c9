"""``vcemu bench scale`` end to end, small: agents as processes, DYNMCB8-PER's cycles timed; the JSON line says
how many actions each measured cycle applied (none: no job arrives or ends between them, which a reader of the
cycle times needs to know; review) and the result file holds the same."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def test_bench_scale_says_what_its_measured_cycles_applied(tmp_path: Path) -> None:
    out = tmp_path / "scale"
    proc = subprocess.run([sys.executable, "-m", "coordinator.cli", "bench", "scale", "--hosts", "8", "--agents", "2",
                           "--period", "1", "--cycles", "2", "--json", "--out", str(out)],
                          capture_output=True, text=True, timeout=150)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["jobs"] == result["running"] == 4 and result["cycles_measured"] == 2
    assert result["actions_per_cycle"] == [0, 0], result
    assert 0 < result["decide_p99_s"] <= result["cycle_p99_s"], result
    assert json.loads((out / "scale.json").read_text()) == result
