"""A TCP proxy on 127.0.0.1 for tests of gray network failures: :meth:`StallProxy.stall_existing` leaves every
connection made so far open but forwards nothing more on it, either way (a half-open connection: a NAT or firewall
that dropped its state, a link that stalls), while new connections still get through."""

from __future__ import annotations

import select
import socket
import threading


class StallProxy:
    def __init__(self, target: str) -> None:
        host, port = target.rsplit(":", 1)
        self._target = (host, int(port))
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self._listener.getsockname()[1]}"
        self.accepted = 0
        self._stalled: set[int] = set()  # ids of the connections stalled
        self._lock = threading.Lock()
        self._open: list[tuple[int, socket.socket, socket.socket]] = []
        self._stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def stall_existing(self) -> None:
        with self._lock:
            self._stalled.update(i for i, _, _ in self._open)

    def close(self) -> None:
        self._stop.set()
        self._listener.close()
        with self._lock:
            for _, a, b in self._open:
                a.close()
                b.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self._target)
            except OSError:
                client.close()
                continue
            with self._lock:
                self.accepted += 1
                conn = (self.accepted, client, server)
                self._open.append(conn)
            threading.Thread(target=self._pump, args=conn, daemon=True).start()

    def _pump(self, i: int, client: socket.socket, server: socket.socket) -> None:
        peer = {client: server, server: client}
        while not self._stop.is_set():
            with self._lock:
                stalled = i in self._stalled
            if stalled:  # neither read (nor so acknowledged past the buffers) nor closed
                self._stop.wait(0.05)
                continue
            try:
                ready, _, _ = select.select([client, server], [], [], 0.05)
                for s in ready:
                    data = s.recv(65536)
                    if not data:
                        return
                    peer[s].sendall(data)
            except OSError:
                return
