"""The demo's closing lines say plainly whether the live run met its target against the simulation, and
why a duty-cycle run (``--no-cgroups``) may not (fabricated summaries: no cluster is started)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from coordinator.demo import TARGET_REL_DIFF, summary_lines


def summary(median: float, mode: str = "cgroup-v1") -> dict[str, Any]:
    met = None if math.isnan(median) else median <= TARGET_REL_DIFF
    return {"jobs": 12, "completed": 12, "live_vs_sim_median_rel_diff": median, "mode": mode, "wall_s": 95.2,
            "results": "results/demo/x", "target_rel_diff": TARGET_REL_DIFF, "target_met": met}


def test_the_target_stays_15_percent() -> None:
    assert TARGET_REL_DIFF == 0.15


def test_a_met_target_is_said_met() -> None:
    text = "\n".join(summary_lines(summary(0.083)))
    assert "12/12 jobs completed in 95 s" in text
    assert "8.3% (target <= 15%): target met." in text
    assert "MISSED" not in text and "duty-cycle" not in text


@pytest.mark.parametrize("mode", ["cgroup-v1", "duty-cycle"])
def test_a_missed_target_is_said_missed_whatever_the_mode(mode: str) -> None:
    lines = summary_lines(summary(0.52, mode))
    assert "52.0% (target <= 15%): TARGET MISSED" in "\n".join(lines)
    assert ("duty-cycle throttling" in lines[-1] and "less accurate than cgroups" in lines[-1]) is (
        mode == "duty-cycle")


def test_duty_cycle_is_named_less_accurate_even_when_the_target_is_met() -> None:
    lines = summary_lines(summary(0.10, "duty-cycle"))
    assert "target met" in lines[1] and "less accurate than cgroups" in lines[-1]


def test_nothing_to_compare_is_not_called_met() -> None:
    text = "\n".join(summary_lines(summary(math.nan)))
    assert "nothing to compare with the target" in text
    assert "target met" not in text and "MISSED" not in text
