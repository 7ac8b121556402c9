"""packing.mcb8_yields without numba (its fallback through mcb_search, run by no test) gives DYNMCB8 the placement and
yields of its compiled path."""

from __future__ import annotations

import numpy as np
import pytest

from coordinator.policies import packing


@pytest.mark.skipif(packing.mcb8_search is None, reason="numba is not installed")
def test_mcb8_yields_fallback_matches_the_compiled_path(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(5)
    probs = []
    for trial in range(300):
        jobs = [packing.PackJob(int(rng.integers(1, 5)), float(rng.choice([0.25, 1.0, rng.random() * 0.9 + 0.05])),
                                float(rng.choice([0.1, 0.3, rng.random() * 0.6])))
                for _ in range(int(rng.integers(1, 40)))]
        h = int(rng.integers(1, 30))
        hosts = h if trial % 2 else [(float(rng.choice([0.5, 1.0, 2.0])), float(rng.choice([0.5, 1.0, 2.0])))
                                     for _ in range(h)]
        probs.append(packing.PackProblem.build(jobs, hosts))
    compiled = [packing.mcb8_yields(p) for p in probs]
    monkeypatch.setattr(packing, "mcb8_search", None)
    python = [packing.mcb8_yields(p) for p in probs]
    found = 0
    for k, (a, b) in enumerate(zip(compiled, python, strict=True)):
        assert (a is None) == (b is None), k
        if a is not None:
            found += 1
            assert np.array_equal(a[0], b[0]), k
            assert np.allclose(a[1], b[1], rtol=0, atol=1e-9), (k, a[1], b[1])
    assert 30 < found < len(probs) - 30
