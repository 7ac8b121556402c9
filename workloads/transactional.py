"""A transactional workload (seed 003 Sec. 3.3): a request-serving process and a Poisson load generator.

Server: ``python -m workloads.transactional serve --work N`` listens on 127.0.0.1 (ephemeral port,
printed as one JSON line on stdout) and answers each request line with ``ok``, after a fixed, CPU-bound
computation of ``N`` loop iterations (a bounded loop, no I/O). Requests are handled by threads of one
process, so under the GIL the process is a single processor-sharing server: its service rate, and hence
its response time, follow the CPU its cgroup quota allows.

Load generator (:class:`LoadGenerator`): sends requests at Poisson arrival times with a set rate from a
fixed pool of client threads (one connection each, bounded), for a bounded duration, and records each
response time; :meth:`LoadGenerator.window` gives the mean response time and throughput of the recent
past. Loopback only: the server binds 127.0.0.1 and the client connects to 127.0.0.1.

As a node-agent workload (``transactional``, see :mod:`node_agent.transactional`) the two run as two
processes:

* ``agent-serve``: the server as the task's process, with the agent's start protocol of
  :mod:`workloads.program` (``--wait-go``: block until the agent has put it in the task's cgroup; bind,
  print ``{"port": ...}`` on stdout, publish ready on the ``--progress`` channel; block again until the
  agent has applied the task's share; then serve). Units on the progress channel are requests answered.
  It exits 4 when the agent dies (its parent pid changes).
* ``generate``: the load generator (the request router of 003 Sec. 3.1), started by the agent *outside*
  the task's cgroup, because a client inside the quota would be throttled with the server and would
  delay its own arrivals and time-stamps, so a cut share would show partly as a slower client instead of
  as the server's response time. Every 0.2 s it writes its window's figures as one JSON object to
  ``--stats`` (atomically, by rename); a line ``rate R`` on stdin changes the arrival rate, ``pause`` and
  ``resume`` pause and resume it with the task (see :meth:`LoadGenerator.pause`; ``--paused`` starts it
  paused); EOF on stdin (the agent stopped the task, or died) ends it. It publishes while paused too
  (a few small writes a second): the figures stand still then, and they show that it is alive and that
  nothing arrives.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import queue
import random
import socket
import socketserver
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass

HOST = "127.0.0.1"


def burn(iterations: int) -> int:
    """The per-request CPU work: a bounded arithmetic loop."""
    acc = 0
    for i in range(iterations):
        acc = (acc * 31 + i) & 0xFFFFFFFF
    return acc


class Counter:
    """Requests answered, counted by the handler threads."""

    def __init__(self) -> None:
        self.value = 0
        self._lock = threading.Lock()

    def add(self) -> None:
        with self._lock:
            self.value += 1


class _Handler(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        work: int = self.server.work  # type: ignore[attr-defined]
        for _ in range(1_000_000):  # bounded: one connection serves at most this many requests
            line = self.rfile.readline(64)
            if not line:
                return
            burn(work)
            self.wfile.write(b"ok\n")
            self.wfile.flush()
            served: Counter | None = getattr(self.server, "served", None)
            if served is not None:
                served.add()


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


def make_server(work: int, port: int = 0) -> _Server:
    """A server bound to 127.0.0.1:``port`` (0: ephemeral) whose requests each burn ``work`` iterations."""
    if work < 1:
        raise ValueError(f"work must be >= 1 iteration, got {work}")
    srv = _Server((HOST, port), _Handler)
    srv.work = work  # type: ignore[attr-defined]
    return srv


@dataclass(frozen=True)
class Window:
    """Measurements over a recent interval (``completed`` and ``p95_response_s`` are the window's)."""

    mean_response_s: float
    throughput_rps: float
    completed: int
    dropped: int
    p95_response_s: float = math.nan
    outstanding: int = 0  # requests arrived and not answered, now (queued or in service)
    total_completed: int = 0  # since the start


#: Seconds a load generator's client waits to connect to the server (once; the answers have no deadline).
CONNECT_TIMEOUT_S = 30.0


class LoadGenerator:
    """Poisson requests at ``rate`` per second to ``port`` on 127.0.0.1, for at most ``duration`` seconds.

    ``clients`` threads each hold one connection and take arrivals from a queue; an arrival waits in the
    queue if all are busy (its response time includes the wait, as at a real request router), and is
    dropped if more than ``max_backlog`` are waiting, so an overloaded server cannot grow memory.

    Pause (:meth:`pause`, :meth:`resume`): the generator follows its task, which the agent pauses by freezing
    the server. All its times are taken on :meth:`clock`, *running time*, which stands still while it is
    paused, so a pause is cut out of the measurements as if it had not happened:

    * no arrival is made and no request is sent while paused (arrivals already queued wait for the resume);
    * the arrival schedule is in running time: after a resume the next arrival comes when it was due, counted
      in running time, so the arrivals "missed" meanwhile are not fired in a catch-up burst (nor is a gap
      left: the Poisson process simply stands still);
    * a request in flight or queued across a pause is charged its running time only, not the pause;
    * :meth:`window` covers the last ``seconds`` of running time: right after a resume it still holds the
      requests completed in the moments before the pause, so the figures carry on from where they stood
      (not an empty window, a throughput that dips to 0, or a spike of requests held by a frozen server).
      ``duration`` is running time too.

    Cut out, not merely stopped, because the coordinator (APC live) reads these figures as the service's
    response time at its current share: a pause says nothing about that, and showing it as response time or
    as a backlog burst would look like an overload that is not there."""

    def __init__(self, port: int, rate: float, duration: float, clients: int = 16, max_backlog: int = 1000,
                 seed: int = 0, horizon: float = 120.0, paused: bool = False) -> None:
        if rate <= 0 or duration <= 0:
            raise ValueError(f"rate and duration must be > 0, got {rate}, {duration}")
        self.port, self.rate, self.duration = port, rate, duration
        self._clients, self._max_backlog = clients, max_backlog
        self._horizon = horizon  # completions older than this are forgotten (no window is longer)
        self._rng = random.Random(seed)
        self._queue: queue.Queue[float | None] = queue.Queue()
        self._done: deque[tuple[float, float]] = deque(maxlen=200_000)  # (finish time, response time)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        #: Set while not paused (and at the stop, to release the threads that wait for a resume).
        self._running = threading.Event()
        self._clock_lock = threading.Lock()
        self._paused_total = 0.0  # seconds spent paused, before the current pause if any
        self._last_window: tuple[tuple[float, float, int, int, int], Window] | None = None  # (see window())
        self._paused_at: float | None = time.monotonic() if paused else None
        if not paused:
            self._running.set()
        self.dropped = 0
        self.arrived = 0
        self.completed = 0
        self._threads: list[threading.Thread] = []

    def set_rate(self, rate: float) -> None:
        if rate <= 0:
            raise ValueError(f"rate must be > 0, got {rate}")
        self.rate = rate

    def clock(self) -> float:
        """Running time: ``time.monotonic()`` less the time spent paused; it stands still while paused."""
        with self._clock_lock:
            now = self._paused_at if self._paused_at is not None else time.monotonic()
            return now - self._paused_total

    def pause(self) -> None:
        """Stop making arrivals and sending requests, and stop the clock (see the class docstring). Idempotent."""
        with self._clock_lock:
            if self._paused_at is None:
                self._paused_at = time.monotonic()
                self._running.clear()

    def resume(self) -> None:
        """Start the clock again where it stopped, and the arrivals with it. Idempotent."""
        with self._clock_lock:
            if self._paused_at is not None:
                self._paused_total += time.monotonic() - self._paused_at
                self._paused_at = None
                self._running.set()

    def start(self) -> LoadGenerator:
        for _ in range(self._clients):
            t = threading.Thread(target=self._client, daemon=True)
            t.start()
            self._threads.append(t)
        t = threading.Thread(target=self._arrivals, daemon=True)
        t.start()
        self._threads.append(t)
        return self

    def stop(self) -> None:
        self._stop.set()
        self._running.set()  # (threads waiting for a resume see the stop)
        for _ in range(self._clients):
            self._queue.put(None)
        for t in self._threads:
            t.join(timeout=5)

    def _until(self, t: float) -> bool:
        """Wait until :meth:`clock` reaches ``t``, not counting pauses; False if stopped meanwhile."""
        while not self._stop.is_set():
            self._running.wait()
            delay = t - self.clock()
            if delay <= 0:
                return not self._stop.is_set()
            self._stop.wait(delay)  # (a pause meanwhile: the loop waits for the resume, then for the rest)
        return False

    def _arrivals(self) -> None:
        end = self.clock() + self.duration
        nxt = self.clock()
        while not self._stop.is_set():
            nxt += self._rng.expovariate(self.rate)
            if nxt >= end or not self._until(nxt):
                break
            if self._queue.qsize() > self._max_backlog:
                with self._lock:
                    self.dropped += 1
                continue
            with self._lock:
                self.arrived += 1
            self._queue.put(nxt)

    def _client(self) -> None:
        try:
            sock = socket.create_connection((HOST, self.port), timeout=CONNECT_TIMEOUT_S)
        except OSError:
            return
        # No deadline on the answer: a server that is paused (frozen, or fenced by its agent's lease, for as long as
        # its coordinator is away) answers when it is thawed, and a client that gave up would be gone for good,
        # leaving the task with no throughput. A server that dies closes the connection, which ends the wait.
        sock.settimeout(None)
        with sock, sock.makefile("rwb") as f:
            while True:
                arrival = self._queue.get()
                if arrival is None:
                    return
                self._running.wait()  # an arrival queued before a pause is sent after the resume
                if self._stop.is_set():
                    return
                try:
                    f.write(b"r\n")
                    f.flush()
                    if not f.readline():
                        return
                except OSError:
                    return
                now = self.clock()
                with self._lock:
                    self._done.append((now, now - arrival))
                    self.completed += 1

    def window(self, seconds: float) -> Window:
        """Mean response time and throughput of requests completed in the last ``seconds`` of running time
        (see the class docstring: a pause is not part of the window)."""
        now = self.clock()
        with self._lock:
            # While paused the clock stands still and nothing completes: the window is the one last computed
            # (publishing it five times a second then costs no scan of up to a minute of completions).
            key = (now, seconds, self.completed, self.dropped, self.arrived)
            if self._last_window is not None and self._last_window[0] == key:
                return self._last_window[1]
            while self._done and self._done[0][0] < now - max(seconds, self._horizon):
                self._done.popleft()
            recent = [r for t, r in self._done if t >= now - seconds]
            dropped, total = self.dropped, self.completed
            outstanding = self.arrived - self.completed
        if not recent:
            w = Window(math.nan, 0.0, 0, dropped, math.nan, outstanding, total)
        else:
            recent.sort()
            p95 = recent[max(0, math.ceil(0.95 * len(recent)) - 1)]
            w = Window(sum(recent) / len(recent), len(recent) / seconds, len(recent), dropped, p95, outstanding,
                       total)
        with self._lock:
            self._last_window = (key, w)
        return w


def _orphaned(ppid: int) -> bool:
    return os.getppid() != ppid


def agent_serve(args: argparse.Namespace) -> int:
    """The server as a node-agent task (see the module docstring); returns the exit code."""
    from workloads.progress import ProgressWriter

    ppid = os.getppid()
    if args.wait_go and not sys.stdin.buffer.read(1):
        return 3
    ballast = bytearray(max(0, args.memory_bytes))  # the task's declared memory, made resident
    if ballast:
        ballast[::4096] = b"\1" * len(range(0, len(ballast), 4096))
    srv = make_server(args.work, args.port)
    served = Counter()
    srv.served = served  # type: ignore[attr-defined]
    print(json.dumps({"port": srv.server_address[1], "pid": os.getpid()}), flush=True)
    writer = ProgressWriter(args.progress, 0) if args.progress else None
    if writer:
        writer.publish(0, ready=True)
    if args.wait_go and not sys.stdin.buffer.read(1):  # the agent applies the task's share, then says run
        return 3
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    while not _orphaned(ppid):
        time.sleep(0.05)
        if writer:
            writer.publish(served.value)
    srv.shutdown()
    return 4


def generate(args: argparse.Namespace) -> int:
    """The load generator as a process (see the module docstring); returns the exit code."""
    ppid = os.getppid()
    gen = LoadGenerator(args.port, args.rate, math.inf, clients=args.clients, seed=args.seed,
                        horizon=max(60.0, 2 * args.window), paused=args.paused).start()
    eof = threading.Event()

    def commands() -> None:
        for line in sys.stdin:
            parts = line.split()
            if len(parts) == 2 and parts[0] == "rate":
                try:
                    gen.set_rate(float(parts[1]))
                except ValueError as e:
                    print(f"generate: ignored {line.strip()!r}: {e}", file=sys.stderr, flush=True)
            elif parts == ["pause"]:
                gen.pause()
            elif parts == ["resume"]:
                gen.resume()
            else:
                print(f"generate: ignored {line.strip()!r}", file=sys.stderr, flush=True)
        eof.set()

    threading.Thread(target=commands, daemon=True).start()
    tmp = args.stats + ".tmp"
    while not eof.wait(STATS_INTERVAL_S) and not _orphaned(ppid):
        w = gen.window(args.window)
        with open(tmp, "w") as f:
            json.dump({"t": time.monotonic(), "window_seconds": args.window, "mean_s": w.mean_response_s,
                       "p95_s": w.p95_response_s, "throughput_rps": w.throughput_rps, "rate_rps": gen.rate,
                       "completed": w.total_completed, "dropped": w.dropped, "outstanding": w.outstanding}, f)
        os.replace(tmp, args.stats)
    gen.stop()
    return 0


#: How often ``generate`` publishes its figures.
STATS_INTERVAL_S = 0.2


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m workloads.transactional", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve", help="serve requests on 127.0.0.1 until stdin closes")
    s.add_argument("--work", type=int, default=200_000, help="loop iterations per request")
    s.add_argument("--port", type=int, default=0)
    a = sub.add_parser("agent-serve", help="serve as a node-agent task (start protocol of workloads.program)")
    a.add_argument("--work", type=int, default=20_000, help="loop iterations per request")
    a.add_argument("--port", type=int, default=0)
    a.add_argument("--progress", help="progress channel file created by the agent (units: requests answered)")
    a.add_argument("--memory-bytes", type=int, default=0, help="memory the server holds resident")
    a.add_argument("--wait-go", action="store_true", help="the agent's two-step start (see the docstring)")
    g = sub.add_parser("generate", help="Poisson load on 127.0.0.1:PORT, figures to --stats")
    g.add_argument("--port", type=int, required=True)
    g.add_argument("--rate", type=float, required=True, help="arrivals per second")
    g.add_argument("--window", type=float, default=2.0, help="seconds the published figures cover")
    g.add_argument("--stats", required=True, help="file the figures are written to (JSON, replaced)")
    g.add_argument("--clients", type=int, default=16, help="client connections (concurrent requests)")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--paused", action="store_true", help="start paused (until a 'resume' line on stdin)")
    args = p.parse_args(argv)
    if args.cmd == "agent-serve":
        return agent_serve(args)
    if args.cmd == "generate":
        return generate(args)
    srv = make_server(args.work, args.port)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    print(json.dumps({"port": srv.server_address[1], "pid": os.getpid()}), flush=True)
    sys.stdin.read()  # the parent holds our stdin; EOF (or its death) ends the server
    srv.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
