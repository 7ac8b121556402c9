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
"""

from __future__ import annotations

import argparse
import json
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
    """Measurements over a recent interval."""

    mean_response_s: float
    throughput_rps: float
    completed: int
    dropped: int


class LoadGenerator:
    """Poisson requests at ``rate`` per second to ``port`` on 127.0.0.1, for at most ``duration`` seconds.

    ``clients`` threads each hold one connection and take arrivals from a queue; an arrival waits in the
    queue if all are busy (its response time includes the wait, as at a real request router), and is
    dropped if more than ``max_backlog`` are waiting, so an overloaded server cannot grow memory."""

    def __init__(self, port: int, rate: float, duration: float, clients: int = 16, max_backlog: int = 1000,
                 seed: int = 0) -> None:
        if rate <= 0 or duration <= 0:
            raise ValueError(f"rate and duration must be > 0, got {rate}, {duration}")
        self.port, self.rate, self.duration = port, rate, duration
        self._clients, self._max_backlog = clients, max_backlog
        self._rng = random.Random(seed)
        self._queue: queue.Queue[float | None] = queue.Queue()
        self._done: deque[tuple[float, float]] = deque(maxlen=200_000)  # (finish time, response time)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.dropped = 0
        self._threads: list[threading.Thread] = []

    def set_rate(self, rate: float) -> None:
        if rate <= 0:
            raise ValueError(f"rate must be > 0, got {rate}")
        self.rate = rate

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
        for _ in range(self._clients):
            self._queue.put(None)
        for t in self._threads:
            t.join(timeout=5)

    def _arrivals(self) -> None:
        end = time.monotonic() + self.duration
        nxt = time.monotonic()
        while not self._stop.is_set():
            nxt += self._rng.expovariate(self.rate)
            if nxt >= end:
                break
            delay = nxt - time.monotonic()
            if delay > 0 and self._stop.wait(delay):
                break
            if self._queue.qsize() > self._max_backlog:
                with self._lock:
                    self.dropped += 1
                continue
            self._queue.put(nxt)

    def _client(self) -> None:
        try:
            sock = socket.create_connection((HOST, self.port), timeout=30)
        except OSError:
            return
        with sock, sock.makefile("rwb") as f:
            while True:
                arrival = self._queue.get()
                if arrival is None or self._stop.is_set():
                    return
                try:
                    f.write(b"r\n")
                    f.flush()
                    if not f.readline():
                        return
                except OSError:
                    return
                now = time.monotonic()
                with self._lock:
                    self._done.append((now, now - arrival))

    def window(self, seconds: float) -> Window:
        """Mean response time and throughput of requests completed in the last ``seconds``."""
        now = time.monotonic()
        with self._lock:
            recent = [r for t, r in self._done if t >= now - seconds]
            dropped = self.dropped
        if not recent:
            return Window(float("nan"), 0.0, 0, dropped)
        return Window(sum(recent) / len(recent), len(recent) / seconds, len(recent), dropped)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m workloads.transactional", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve", help="serve requests on 127.0.0.1 until stdin closes")
    s.add_argument("--work", type=int, default=200_000, help="loop iterations per request")
    s.add_argument("--port", type=int, default=0)
    args = p.parse_args(argv)
    srv = make_server(args.work, args.port)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    print(json.dumps({"port": srv.server_address[1], "pid": __import__("os").getpid()}), flush=True)
    sys.stdin.read()  # the parent holds our stdin; EOF (or its death) ends the server
    srv.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
