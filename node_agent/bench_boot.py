"""``vcemu bench boot``: how long a task's start waits before its program runs its work, with spares and without.

From the agent's StartTask to the end of the task's boot (its share applied and its program told to run, the
moment from which its work counts), for 16 MB dgemm tasks in an in-process agent, one start a second, with a thread
calling the agent's Status every 0.1 s as a coordinator does (Status polls every task, so it too can end a boot).
Three agents, run in turn, round after round:

* ``spares``: as shipped, a spare of each workload kept (:mod:`node_agent.spares`) and booting tasks polled every
  :data:`~node_agent.agent.BOOT_POLL_S`;
* ``cold``: no spares (``vcemu agent --spares 0``), booting tasks polled as shipped;
* ``cold_rounds_only``: no spares, and no polls between the monitor's rounds: the agent before either change.

Each agent's first start (cold: it starts the workload's spares) is not counted. Needs cgroups unless
``--no-cgroups`` (the duty-cycle driver). Medians are the figure to compare: a start that lands on a busy moment of
a shared machine is slow whatever the agent. On a terminal a bar on stderr says which agent is measured, how many
of the starts are done and an ETA; it is drawn between the timed starts (in the second's gap before the next), never
while one is timed.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable

from tqdm import tqdm

from node_agent import agent as agent_mod
from node_agent.agent import AgentCore, HostSpec
from node_agent.cgroups import CgroupDriver, open_driver
from node_agent.dutycycle import DutyCycleDriver
from vcemu.bench_results import check_out, output_flags, write_results
from vcemu.cliargs import Parser, doc_head, format_table, whole_in
from vcemu.signals import INTERRUPTED, signals_deferred, signals_interrupt

#: (name, spares, boot poll interval: None for as shipped)
VARIANTS = (("spares", 1, None), ("cold", 0, None), ("cold_rounds_only", 0, agent_mod.POLL_INTERVAL_S))
TASK_MEMORY = 16 << 20
STATUS_S = 0.1
GAP_S = 1.0
BOOT_TIMEOUT_S = 60.0


def _one_agent(name: str, spares: int, boot_poll: float | None, starts: int, cgroups: bool, k: int,
               measured: Callable[[], None] = lambda: None) -> list[float]:
    """Seconds from each start to its boot's end, for ``starts`` starts in a fresh agent; ``measured()`` after each
    (the progress bar's update: outside the timed section, before the gap to the next start)."""
    agent_id = f"bench-boot-{os.getpid()}-{k}"
    stop = threading.Event()
    core: AgentCore | None = None
    watcher: threading.Thread | None = None
    out: list[float] = []
    try:
        with signals_deferred():  # made whole (a signal meanwhile is raised as this ends, inside the try: review)
            driver: CgroupDriver = open_driver(agent_id) if cgroups else DutyCycleDriver()
            core = AgentCore(agent_id, [HostSpec("h", 1.0, 1 << 30)], driver, {"dgemm": 1e6}, spares=spares)
            if boot_poll is not None:
                core.boot_poll_s = boot_poll

            def coordinator() -> None:
                while not stop.wait(STATUS_S):
                    core.status()  # type: ignore[union-attr]

            watcher = threading.Thread(target=coordinator, name="bench-boot-status", daemon=True)
            watcher.start()
        core.start_task("first/0", "h", "dgemm", 0.05, 0.05, 3600.0, TASK_MEMORY)
        for i in range(starts):
            time.sleep(GAP_S)  # (a spare taken is refilled meanwhile, as between a plan's starts in a live run)
            t0 = time.perf_counter()
            core.start_task(f"t{i}/0", "h", "dgemm", 0.05, 0.05, 3600.0, TASK_MEMORY)
            task = core._tasks[f"t{i}/0"]
            while not task._booted:  # type: ignore[union-attr]
                if time.perf_counter() - t0 > BOOT_TIMEOUT_S:
                    raise RuntimeError(f"{name}: a task did not boot within {BOOT_TIMEOUT_S:g} s")
                time.sleep(0.0005)
            out.append(time.perf_counter() - t0)
            measured()  # (after the clock is read: a redraw costs the next start nothing, a second ahead of it)
    finally:
        with signals_deferred():  # a second signal must not cut the shutdown short (tasks and cgroups left)
            stop.set()
            if watcher is not None:
                watcher.join()
            if core is not None:
                core.shutdown()
    return out


def run(starts: int, rounds: int, cgroups: bool, bar_off: bool | None = None) -> dict:
    """The three agents in turn, ``rounds`` times; milliseconds per variant (median, mean, max, and each start).
    A bar on stderr counts the timed starts (``bar_off`` None: only if stderr is a terminal; True: none)."""
    times: dict[str, list[float]] = {name: [] for name, _, _ in VARIANTS}
    k = 0
    with tqdm(total=rounds * len(VARIANTS) * starts, desc="boot", unit="start", disable=bar_off,
              file=sys.stderr) as bar:
        for r in range(rounds):
            for name, spares, boot_poll in VARIANTS:
                # (between agents: nothing is timed while the bar says which agent comes)
                bar.set_description(f"boot {name} [round {r + 1}/{rounds}]")
                times[name] += _one_agent(name, spares, boot_poll, starts, cgroups, k, lambda: bar.update(1))
                k += 1
    out: dict = {"starts_per_agent": starts, "rounds": rounds, "task_memory_bytes": TASK_MEMORY,
                 "driver": "cgroups" if cgroups else "duty-cycle"}
    for name, seconds in times.items():
        ms = [round(s * 1000.0, 1) for s in seconds]
        out[f"{name}_ms"] = {"median": round(statistics.median(ms), 1), "mean": round(statistics.mean(ms), 1),
                             "max": max(ms), "each": ms}
    return out


def _table(out: dict) -> str:
    rows = [["AGENT", "STARTS", "MEDIAN ms", "MEAN ms", "MAX ms"]]
    for name, _, _ in VARIANTS:
        r = out[f"{name}_ms"]
        rows.append([name, str(len(r["each"])), f"{r['median']:.1f}", f"{r['mean']:.1f}", f"{r['max']:.1f}"])
    return format_table(rows) + f"\n(start to boot's end, 16 MB dgemm tasks, {out['driver']})"


def boot_main(argv: list[str]) -> int:
    """``vcemu bench boot [--starts N] [--rounds N] [--no-cgroups] [--json]``; returns the exit status."""
    p = Parser(prog="vcemu bench boot", description=doc_head(__doc__))
    p.add_argument("--starts", type=whole_in(1, 1000), default=8, help="starts timed per agent (default 8)")
    p.add_argument("--rounds", type=whole_in(1, 100), default=3,
                   help="times each of the three agents runs, in turn (default 3)")
    p.add_argument("--no-cgroups", action="store_true", help="the duty-cycle driver instead of cgroups")
    output_flags(p, "boot")
    args = p.parse_args(argv)
    check_out(p, args)
    try:
        with signals_interrupt():  # SIGTERM too unwinds through the shutdowns (it left the cgroups and work directory)
            out = run(args.starts, args.rounds, not args.no_cgroups, bar_off=args.json or None)
    except KeyboardInterrupt:
        print("vcemu bench boot: interrupted; its tasks and their cgroups are removed", file=sys.stderr)
        return INTERRUPTED
    except Exception as e:  # one clear line (cgroups unavailable, say)
        print(f"vcemu bench boot: error: {e}", file=sys.stderr)
        return 1
    saved = write_results(args.out, "boot", out, vars(args))
    with contextlib.suppress(BrokenPipeError):
        print(json.dumps(out) if args.json else _table(out))
    return 0 if saved else 1


if __name__ == "__main__":
    sys.exit(boot_main(sys.argv[1:]))
