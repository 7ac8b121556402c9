"""The coordinator API's message limits, in a module of their own so that the client commands can import them
without the server (importing :mod:`coordinator.service` takes about 1.4 s; a whole client command 0.3 s)."""

from __future__ import annotations

__all__ = ["MAX_MESSAGE_BYTES", "MAX_REPLY_BYTES"]

#: Largest request the coordinator accepts (``grpc.max_receive_message_length``).
MAX_MESSAGE_BYTES = 1 << 20
#: Largest reply it sends (ListJobs of a long run), and so what a client's channel must be able to receive: with
#: gRPC's default of 4 MiB, ``vcemu jobs`` failed for good (RESOURCE_EXHAUSTED) once a run held about 34,000 jobs.
MAX_REPLY_BYTES = 64 * MAX_MESSAGE_BYTES
