"""arraycycle: cycles through an array of the task's memory size doing arithmetic on its elements, the
job program of seed 004 Sec. 5.2. One unit = one block of 32768 float64 (256 KiB) updated with
``OPS_PER_BLOCK`` element-wise operations; a pass over the whole array is ``ceil(size / block)`` units.

Why blocks with several operations each: a block is loaded from memory once and then worked on while it
sits in cache, so the rate in units per CPU-second depends little on the array's size (within ~20%
between 1 MiB and 512 MiB on the development machine). The agent calibrates once (with a 64 MiB array)
and uses that rate for tasks of every size.
"""

from __future__ import annotations

import sys

from workloads.program import Step, main

BLOCK = 32768
OPS_PER_BLOCK = 16


def setup(memory_bytes: int) -> Step:
    import numpy as np

    n = max(BLOCK, memory_bytes // 8)
    data = np.ones(n, dtype=np.float64)  # written, hence resident
    blocks = [data[i : i + BLOCK] for i in range(0, n, BLOCK)]
    state = {"i": 0}

    def step() -> int:
        blk = blocks[state["i"]]
        state["i"] = (state["i"] + 1) % len(blocks)
        for _ in range(OPS_PER_BLOCK // 2):
            np.multiply(blk, 0.5, out=blk)  # x -> x/2 + 1/2 stays in [min, 1]: no overflow, no denormals
            np.add(blk, 0.5, out=blk)
        return 1

    return step


if __name__ == "__main__":
    sys.exit(main("arraycycle", setup))
