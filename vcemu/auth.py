"""Bearer-token authentication for vcemu's gRPC services, shared by the coordinator and the agent.

A token (the coordinator's ``--token-file``) travels as ``authorization: Bearer <token>`` metadata. The
coordinator wants it on its user API and, without mutual TLS, on the agents' calls; an agent given the token
wants it on its own API (start, stop, pause, move), which the coordinator then sends: otherwise anything that
reached an agent's port could run or stop its tasks (API review). The health service stays
open (it says only "serving", and probes carry no token)."""

from __future__ import annotations

import hmac
from collections.abc import Iterable
from typing import Any, TypeVar, cast

import grpc

S = TypeVar("S")

#: The metadata key the token travels in (lower case, as gRPC requires).
AUTHORIZATION = "authorization"
#: What a refused call is told (UNAUTHENTICATED); callers add where to give the token.
REFUSED = "authorization: missing or wrong bearer token"


def bearer(token: str) -> tuple[tuple[str, str], ...]:
    """The call metadata that carries ``token``."""
    return ((AUTHORIZATION, f"Bearer {token}"),)


def presented(metadata: Iterable[tuple[str, str | bytes]] | None, token: str) -> bool:
    """Does call ``metadata`` carry ``authorization: Bearer <token>``? In the same time whatever it carries
    (:func:`hmac.compare_digest`)."""
    given = dict(metadata or ()).get(AUTHORIZATION, "")
    if isinstance(given, str):
        given = given.encode(errors="replace")
    return hmac.compare_digest(given, f"Bearer {token}".encode())


class BearerTokenInterceptor(grpc.ServerInterceptor):
    """Refuse (UNAUTHENTICATED) calls to ``service``'s methods, but those in ``open_methods``, that lack
    ``authorization: Bearer <token>``. Calls to other services (health) pass. The comparison takes the same
    time whatever the given value (:func:`hmac.compare_digest`)."""

    def __init__(self, token: str, service: str, open_methods: Iterable[str] = ()) -> None:
        self._token = token
        self._prefix = f"/{service}/"
        self._open = frozenset(open_methods)

        def deny(request: object, context: grpc.ServicerContext) -> None:
            context.abort(grpc.StatusCode.UNAUTHENTICATED, REFUSED)

        #: A refusal of each kind of method, by (request streaming, response streaming): gRPC wants the kind of the
        #: method refused.
        self._deny = {(False, False): grpc.unary_unary_rpc_method_handler(deny),
                      (False, True): grpc.unary_stream_rpc_method_handler(deny),
                      (True, False): grpc.stream_unary_rpc_method_handler(deny),
                      (True, True): grpc.stream_stream_rpc_method_handler(deny)}

    def intercept_service(self, continuation, details):  # type: ignore[no-untyped-def]
        if not details.method.startswith(self._prefix) or details.method[len(self._prefix):] in self._open:
            return continuation(details)
        if presented(details.invocation_metadata, self._token):
            return continuation(details)
        handler = continuation(details)  # (only to tell what kind of method it is)
        if handler is None:  # (no such method: gRPC answers UNIMPLEMENTED)
            return None
        return self._deny[(bool(handler.request_streaming), bool(handler.response_streaming))]


class _WithToken:
    """One method of a stub, sending the token with each call, however it is made (called, ``future``,
    ``with_call``): a caller's own ``authorization`` is replaced."""

    def __init__(self, call: Any, metadata: tuple[tuple[str, str], ...]) -> None:
        self._call, self._metadata = call, metadata

    def _kwargs(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        given = [m for m in (kwargs.get("metadata") or ()) if m[0] != AUTHORIZATION]
        return {**kwargs, "metadata": (*given, *self._metadata)}

    def __call__(self, request: Any, **kwargs: Any) -> Any:
        return self._call(request, **self._kwargs(kwargs))

    def future(self, request: Any, **kwargs: Any) -> Any:
        return self._call.future(request, **self._kwargs(kwargs))

    def with_call(self, request: Any, **kwargs: Any) -> Any:
        return self._call.with_call(request, **self._kwargs(kwargs))


class _StubWithToken:
    def __init__(self, stub: Any, token: str) -> None:
        self._stub, self._metadata = stub, bearer(token)

    def __getattr__(self, name: str) -> Any:
        return _WithToken(getattr(self._stub, name), self._metadata)


def with_token(stub: S, token: str | None) -> S:
    """``stub`` (a generated gRPC stub), its calls sending ``token`` (``stub`` itself if there is no token).
    Per call, not as a channel interceptor: a call on a closed intercepted channel crashed the process (grpc 1.85:
    a segmentation fault, where a plain channel raises ValueError; code review), and a backend's channel to an
    agent is closed whenever that agent registers again."""
    return stub if not token else cast(S, _StubWithToken(stub, token))
