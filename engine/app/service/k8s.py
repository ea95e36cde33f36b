"""How the service serves the Kubernetes extender routes (``/v1/k8s/*``) beside ``/v1/schedule``.

They are answered by their own small application, reached before the service's own middleware, because
kube-scheduler is a different client:

- **Auth.** kube-scheduler's extender ``tlsConfig`` presents a client certificate and sends no bearer token.
  With a client CA (``--tls-client-ca``), ``/v1/k8s/*`` need a client certificate that CA signed (and no
  token); the other routes keep the token. Without one, ``/v1/k8s/*`` are guarded like the rest (the
  token when the server has one).
- **Size.** A NodeList of 5,000 nodes (kubelet reports ~50 images each) is about 62 MiB: these routes take
  bodies up to ``max_body_bytes`` (96 MiB by default) while ``/v1/schedule`` keeps its own limit. Before the
  JSON is parsed, a body with more than ``max_json_values`` values (commas and colons: 2.8 million for
  those 5,000 nodes) is refused, so that no body can turn into gigabytes of Python objects.
- **Errors** are problem details, as everywhere in the service: 400 naming the field, 413 naming the limit.
"""

from __future__ import annotations

import logging
from collections.abc import MutableMapping
from dataclasses import dataclass, field
from typing import Any

from dltsched.engine.app.adapters.k8s import K8sExtender, k8s_router
from dltsched.engine.app.service.guard import (
    ASGIApp,
    BearerAuth,
    Message,
    Metrics,
    Receive,
    Scope,
    Send,
    ServiceMetrics,
    install_error_handlers,
    problem_response,
)

log = logging.getLogger(__name__)

PREFIX = "/v1/k8s/"
K8S_PATHS = frozenset({"/v1/k8s/filter", "/v1/k8s/prioritize", "/v1/k8s/bind", "/v1/k8s/finished"})


class VerifiedPeers:
    """Open TLS connections: (host, port) -> their ``SSLObject``. Filled by the protocol class of
    :func:`recording_peers`; :meth:`subject` reads the client certificate the server verified (under TLS 1.3
    it arrives after the connection is made, so it is read at request time)."""

    def __init__(self) -> None:
        self.peers: dict[tuple[str, int], Any] = {}

    def subject(self, client: Any) -> str | None:
        """The verified client certificate's subject (``CN=...``) of the connection ``client``, else
        ``None``."""
        ssl_object = self.peers.get(tuple(client)) if client else None  # type: ignore[arg-type]
        try:
            cert = ssl_object.getpeercert() if ssl_object is not None else None
        except ValueError:  # handshake not complete
            return None
        if not cert:
            return None
        return ",".join("=".join(x) for rdn in cert.get("subject", ()) for x in rdn) or "verified"


def recording_peers(protocol: type, peers: VerifiedPeers) -> type:
    """``protocol`` (uvicorn's h11 protocol class) that records each TLS connection for
    :class:`VerifiedPeers`."""

    class PeerRecordingProtocol(protocol):  # type: ignore[valid-type,misc]
        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            ssl_object = transport.get_extra_info("ssl_object")
            address = getattr(self, "client", None)
            if ssl_object is not None and address:
                peers.peers[tuple(address)] = ssl_object  # type: ignore[index]

        def connection_lost(self, exc: Exception | None) -> None:
            address = getattr(self, "client", None)
            if address:
                peers.peers.pop(tuple(address), None)  # type: ignore[arg-type]
            super().connection_lost(exc)

    return PeerRecordingProtocol


@dataclass
class K8sServing:
    """The extender the service answers ``/v1/k8s/*`` with, and how those routes are guarded.

    ``client_cert``: require a verified TLS client certificate (the server's ``--tls-client-ca``);
    ``token``: otherwise, the service's bearer token (``None``: open, loopback only)."""

    extender: K8sExtender = field(default_factory=K8sExtender)
    client_cert: bool = False
    token: str | None = None
    max_body_bytes: int = 96 * 1024 * 1024
    max_json_values: int = 6_000_000
    peers: VerifiedPeers = field(default_factory=VerifiedPeers)
    watcher: Any = None


def k8s_app(serving: K8sServing) -> ASGIApp:
    """The FastAPI application of ``/v1/k8s/*``, with the service's error shapes."""
    from fastapi import FastAPI

    app = FastAPI(title="dltsched kube-scheduler extender", docs_url=None, redoc_url=None, openapi_url=None)
    install_error_handlers(app)
    app.include_router(k8s_router(serving.extender))
    app.state.extender = serving.extender
    return app  # type: ignore[return-value]


class K8sRoutes:
    """ASGI middleware (outermost): ``/v1/k8s/*`` go to the extender's application, guarded as
    :class:`K8sServing` says; everything else to the service."""

    def __init__(self, app: ASGIApp, serving: K8sServing, metrics: ServiceMetrics | None = None) -> None:
        self.app = app
        self.serving = serving
        inner = k8s_app(serving)
        self.k8s: ASGIApp = inner
        if not serving.client_cert and serving.token is not None:
            self.k8s = BearerAuth(inner, token=serving.token, open_paths=frozenset(), open_prefixes=())
        # every answer of /v1/k8s/* counted, refusals (401, 413) included
        self.guarded: ASGIApp = self._guarded if metrics is None else \
            Metrics(self._guarded, metrics=metrics, known_paths=K8S_PATHS, known_prefixes=())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not str(scope.get("path", "")).startswith(PREFIX):
            await self.app(scope, receive, send)
            return
        await self.guarded(scope, receive, send)

    async def _guarded(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.serving.client_cert and self.serving.peers.subject(scope.get("client")) is None:
            detail = "a TLS client certificate signed by the server's client CA is required on /v1/k8s/*"
            await problem_response(401, "Unauthorized", detail,
                                   [{"field": "client certificate", "message": detail}]
                                   )(scope, receive, send)
            return
        body = await self._body(scope, receive, send)
        if body is None:
            return
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if sent:
                return {"type": "http.disconnect"}
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.k8s(scope, replay, send)

    async def _body(self, scope: Scope, receive: Receive, send: Send) -> bytes | None:
        """The whole body, or ``None`` after answering 413 (over ``max_body_bytes`` or
        ``max_json_values``)."""
        limit = self.serving.max_body_bytes
        declared = dict(scope.get("headers") or []).get(b"content-length")
        chunks, size = [], 0
        if declared is not None and declared.isdigit() and len(declared) < 19 and int(declared) > limit:
            await self._too_large(scope, receive, send,
                                  f"request body of {int(declared)} bytes; at most {limit} on "
                                  "/v1/k8s/* (max_body_bytes)")
            return None
        while True:
            message: MutableMapping[str, Any] = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                await self._too_large(scope, receive, send, f"request body over {limit} bytes on /v1/k8s/* "
                                      "(max_body_bytes)")
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        values = body.count(b",") + body.count(b":")
        if values > self.serving.max_json_values:
            await self._too_large(scope, receive, send, f"body has {values} JSON values; at most "
                                  f"{self.serving.max_json_values} on /v1/k8s/* (max_json_values)")
            return None
        return body

    @staticmethod
    async def _too_large(scope: Scope, receive: Receive, send: Send, detail: str) -> None:
        await problem_response(413, "Payload Too Large", detail, [{"field": "body", "message": detail}]
                               )(scope, receive, send)
