"""dgemm: 100x100 float64 matrix multiplications, the workload of seed 002 Sec. 7 (one unit = one
multiplication). Single-threaded BLAS (set by :mod:`workloads.program` before numpy is imported).

The task's memory is held as a ballast array written once, so that a dgemm task really occupies the
memory it declares (placement and memory limits are then tested for real); the multiplications
themselves touch only three 80 KB matrices.
"""

from __future__ import annotations

import sys

from workloads.program import Step, main

N = 100


def setup(memory_bytes: int) -> Step:
    import numpy as np

    rng = np.random.default_rng(2008)
    a, b = rng.random((N, N)), rng.random((N, N))
    c = np.empty((N, N))
    ballast = np.ones(memory_bytes // 8, dtype=np.float64) if memory_bytes >= 8 else None

    def step() -> int:
        np.matmul(a, b, out=c)
        return 1

    step.ballast = ballast  # type: ignore[attr-defined]  # keep it alive and resident
    return step


if __name__ == "__main__":
    sys.exit(main("dgemm", setup))
