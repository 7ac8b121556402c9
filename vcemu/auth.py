"""Bearer-token authentication for vcemu's gRPC services, shared by the coordinator and the agent.

A token (the coordinator's ``--token-file``) travels as ``authorization: Bearer <token>`` metadata. The
coordinator wants it on its user API and, without mutual TLS, on the agents' calls; an agent given the token
wants it on its own API (start, stop, pause, move), which the coordinator then sends: otherwise anything that
reached an agent's port could run or stop its tasks (API review). The health service stays
open (it says only "serving", and probes carry no token)."""

from __future__ import annotations

import collections
import hmac
from collections.abc import Callable, Iterable

import grpc

#: The metadata key the token travels in (lower case, as gRPC requires).
AUTHORIZATION = "authorization"
#: What a refused call is told (UNAUTHENTICATED); callers add where to give the token.
REFUSED = "authorization: missing or wrong bearer token"


def bearer(token: str) -> tuple[tuple[str, str], ...]:
    """The call metadata that carries ``token``."""
    return ((AUTHORIZATION, f"Bearer {token}"),)


class BearerTokenInterceptor(grpc.ServerInterceptor):
    """Refuse (UNAUTHENTICATED) calls to ``service``'s methods, but those in ``open_methods``, that lack
    ``authorization: Bearer <token>``. Calls to other services (health) pass. The comparison takes the same
    time whatever the given value (:func:`hmac.compare_digest`)."""

    def __init__(self, token: str, service: str, open_methods: Iterable[str] = ()) -> None:
        self._expected = f"Bearer {token}".encode()
        self._prefix = f"/{service}/"
        self._open = frozenset(open_methods)

        def deny(request: object, context: grpc.ServicerContext) -> None:
            context.abort(grpc.StatusCode.UNAUTHENTICATED, REFUSED)

        self._deny_unary = grpc.unary_unary_rpc_method_handler(deny)
        self._deny_stream = grpc.unary_stream_rpc_method_handler(deny)

    def intercept_service(self, continuation, details):  # type: ignore[no-untyped-def]
        if not details.method.startswith(self._prefix) or details.method[len(self._prefix):] in self._open:
            return continuation(details)
        given = dict(details.invocation_metadata or ()).get(AUTHORIZATION, "")
        if isinstance(given, str):
            given = given.encode(errors="replace")
        if hmac.compare_digest(given, self._expected):
            return continuation(details)
        handler = continuation(details)  # (only to tell a streaming method from a unary one)
        return self._deny_stream if handler is not None and handler.response_streaming else self._deny_unary


class _CallDetails(collections.namedtuple("_CallDetails", ("method", "timeout", "metadata", "credentials",
                                                             "wait_for_ready", "compression")),
                   grpc.ClientCallDetails):
    pass


class _WithToken(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor):
    """Adds the bearer token to every unary and server-streaming call (the agent's API has no other kind)."""

    def __init__(self, token: str) -> None:
        self._metadata = bearer(token)

    def _details(self, details: grpc.ClientCallDetails) -> grpc.ClientCallDetails:
        metadata = [m for m in (details.metadata or ()) if m[0] != AUTHORIZATION] + list(self._metadata)
        return _CallDetails(details.method, details.timeout, metadata, details.credentials,
                            getattr(details, "wait_for_ready", None), getattr(details, "compression", None))

    def intercept_unary_unary(self, continuation, client_call_details, request):  # type: ignore[no-untyped-def]
        return continuation(self._details(client_call_details), request)

    def intercept_unary_stream(self, continuation, client_call_details, request):  # type: ignore[no-untyped-def]
        return continuation(self._details(client_call_details), request)


def with_token(factory: Callable[[str], grpc.Channel], token: str | None) -> Callable[[str], grpc.Channel]:
    """A channel factory like ``factory`` whose channels send ``token`` on every call (``factory`` itself if
    there is no token)."""
    if not token:
        return factory

    def channel(address: str) -> grpc.Channel:
        return grpc.intercept_channel(factory(address), _WithToken(token))

    return channel
