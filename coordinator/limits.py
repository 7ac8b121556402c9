"""The coordinator API's message limits and metadata keys, in a module of their own so that the client commands
can import them without the server (importing :mod:`coordinator.service` takes about 1.4 s; a whole client
command 0.3 s)."""

from __future__ import annotations

__all__ = ["KNOWN_METADATA", "MAX_MESSAGE_BYTES", "MAX_REPLY_BYTES", "MAX_TASKS"]

#: Largest request the coordinator accepts (``grpc.max_receive_message_length``).
MAX_MESSAGE_BYTES = 1 << 20
#: Largest reply it sends (ListJobs of a long run), and so what a client's channel must be able to receive: with
#: gRPC's default of 4 MiB, ``vcemu jobs`` failed for good (RESOURCE_EXHAUSTED) once a run held about 34,000 jobs.
MAX_REPLY_BYTES = 64 * MAX_MESSAGE_BYTES

#: The trailing metadata key by which Submit says whether its request id was seen before ("true": the reply is
#: the job that request made then; "false": a new job). Job has no field for it; SubmitResult.known does.
KNOWN_METADATA = "vcemu-known"

#: Most tasks one job may have (the coordinator refuses more; ``vcemu submit --tasks`` checks it before sending).
MAX_TASKS = 10_000
