"""``vcemu bench packing``: how fast is the full MCB8 yield search plus the average-yield step?

Prints one JSON object (``--json``) or a short table:

* ``mcb8_500x64_ms`` — median over generated 500-task, 64-host instances (Sec. 4.1 large set: every slack
  0.1..0.9 and every pair of CVs 0.25/0.75, one instance each) of the best of ``--repeat`` runs of
  :func:`coordinator.policies.packing.mcb_allocate` (problem build + yield search + average-yield step).
  The paper reports about 0.5 s on a 3.2 GHz Xeon (Sec. 4.2.3); the target is <= 10 ms;
* ``mcb8_10000x1000_s`` — the same for 10,000 tasks on 1,000 hosts (slack 0.3, 0.5, 0.7; one run each); target
  <= 1 s;
* ``mcb8_500x64_ms_wall`` — wall-clock median of one run per instance (inflated when the cores are busy);
* ``*_generic`` — the same instances through the straightforward path (every "first task that fits"
  query a numpy scan, and the paper's plain bisection): the before-optimisation figure, from the same run (one
  run per instance, and of the 10,000-task instances the slack-0.5 one only: it takes minutes).

The search runs at :func:`~coordinator.policies.packing.mcb_allocate`'s default accuracy, 0.01 (what the online DFRS
policies use); ``vcemu vcsched`` searches to 0.001 by default, a few probes more per instance.

``targets`` and ``met`` say the two targets and whether each was met (the table ends with a verdict per target).
"""

from __future__ import annotations

import json
import platform
import statistics
import sys
import time
from collections.abc import Callable

import numpy as np

from coordinator.flagcheck import first_refusal
from coordinator.policies.packing import PackJob, PackProblem, mcb_allocate, mcb_pack, placement_min_yield
from coordinator.vcsched.generator import InstanceSpec, generate
from vcemu.bench_results import check_out, judged, output_flags, write_results
from vcemu.cliargs import Parser, doc_head, doc_text

__all__ = ["TARGETS", "bench_packing_main", "best_of"]

#: The targets (issue 2): key -> (comparison, limit).
TARGETS: dict[str, tuple[str, float]] = {"mcb8_500x64_ms": ("<=", 10.0), "mcb8_10000x1000_s": ("<=", 1.0)}


def best_of(fn: Callable[[], object], repeat: int) -> float:
    """Best CPU time (``time.process_time``) of ``repeat`` runs: the box may be shared, and CPU time
    is what other work on the same cores does not inflate. Wall time is reported separately."""
    best = float("inf")
    for _ in range(repeat):
        t = time.process_time()
        fn()
        best = min(best, time.process_time() - t)
    return best


def _wall(fn: Callable[[], object]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def _generic_allocate(jobs: list[PackJob], hosts: int) -> object:
    """The unoptimised baseline: paper bisection, numpy scan per query (same placements as MCB8)."""
    from coordinator.policies.packing import finish_allocation

    prob = PackProblem.build(jobs, hosts)
    ub = prob.yield_upper_bound()
    lo, hi, y, best = 0.0, ub, ub / 2, None
    while True:
        th = mcb_pack(prob, y, "MCB8", generic=True)
        if th is not None:
            lo, best = y, th
        else:
            hi = y
        if hi - lo <= 0.01:
            break
        y = (lo + hi) / 2
    if best is None:
        return None
    return finish_allocation(prob, best, "MCB8", placement_min_yield(prob, best), 0, True)


def bench_packing_main(argv: list[str]) -> int:
    """Entry point of ``vcemu bench packing [--json]``."""
    p = Parser(prog="vcemu bench packing", description=doc_text(doc_head(__doc__)))
    output_flags(p, "packing")
    p.add_argument("--seed", type=int, default=0, help="seed of the generated instances, >= 0 (default 0)")
    p.add_argument("--repeat", type=int, default=3, help="runs per instance, >= 1; the best is kept (default 3)")
    p.add_argument("--no-generic", action="store_true", help="skip the unoptimised baseline")
    args = p.parse_args(argv)
    # refused in one line naming the flag, before any work: numpy takes no negative seed (its traceback), and no
    # run per instance left the best time at inf, reported as the figure ("mcb8_500x64_ms inf", exit status 0)
    line = first_refusal("vcemu bench packing", (("--seed", args.seed, args.seed >= 0, "must be >= 0"),
                                                  ("--repeat", args.repeat, args.repeat >= 1, "must be >= 1")))
    if line is not None:
        print(line, file=sys.stderr)
        return 2
    check_out(p, args)
    rng = np.random.default_rng(args.seed)
    small = [
        generate(InstanceSpec(64, 500, s, cm, cc), rng)
        for s in (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
        for cm in (0.25, 0.75)
        for cc in (0.25, 0.75)
    ]
    big = [generate(InstanceSpec(1000, 10000, s, 0.25, 0.25), rng) for s in (0.3, 0.5, 0.7)]
    mcb_allocate(small[0].jobs, 64)  # loads the compiled kernels (~0.35 s), untimed: with --repeat 1 it was a figure
    t_small = [best_of(lambda i=i: mcb_allocate(i.jobs, 64), args.repeat) for i in small]
    t_big = [best_of(lambda i=i: mcb_allocate(i.jobs, 1000), 1) for i in big]
    w_small = [_wall(lambda i=i: mcb_allocate(i.jobs, 64)) for i in small]
    probes = [a.probes for i in small if (a := mcb_allocate(i.jobs, 64)) is not None]
    out: dict[str, object] = {
        "mcb8_500x64_ms": round(1000 * statistics.median(t_small), 3),
        "mcb8_10000x1000_s": round(statistics.median(t_big), 4),
        "mcb8_500x64_ms_max": round(1000 * max(t_small), 3),
        "mcb8_500x64_instances": len(small),
        "mcb8_500x64_median_probes": statistics.median(probes) if probes else None,
        "mcb8_10000x1000_instances": len(big),
        "mcb8_500x64_ms_wall": round(1000 * statistics.median(w_small), 3),
        "clock": "process CPU time, best of --repeat per instance, median over instances",
    }
    if not args.no_generic:
        g_small = [best_of(lambda i=i: _generic_allocate(list(i.jobs), 64), 1) for i in small]
        g_big = [best_of(lambda i=i: _generic_allocate(list(i.jobs), 1000), 1) for i in big[1:2]]
        out["mcb8_500x64_ms_generic"] = round(1000 * statistics.median(g_small), 3)
        out["mcb8_10000x1000_s_generic"] = round(statistics.median(g_big), 4)
    out["seed"] = args.seed  # what the instances were generated from, and how many runs the mcb8_500x64_ms figures
    out["repeat"] = args.repeat  # take the best of (the 10000x1000, generic and wall figures: one run each)
    out["python"] = platform.python_version()
    out["machine"] = platform.machine()
    out["targets"] = {key: f"{op} {limit:g}" for key, (op, limit) in TARGETS.items()}
    out["met"] = judged(out, TARGETS)
    saved = write_results(args.out, "packing", out, vars(args))
    if args.json:
        print(json.dumps(out))
    else:  # (it printed no target, nor whether one was met)
        for k, v in out.items():
            if k not in ("targets", "met"):
                print(f"{k:<32} {v}")
        for key, target in out["targets"].items():
            print(f"{'target':<32} {key} {target}: {'MET' if out['met'][key] else 'MISSED'}")
    return 0 if saved else 1


if __name__ == "__main__":
    raise SystemExit(bench_packing_main(sys.argv[1:]))
