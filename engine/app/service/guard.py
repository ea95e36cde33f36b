"""What stands between the network and the HTTP service's handlers.

- :func:`guarded_protocol`: uvicorn's h11 protocol with a *request read timeout*. uvicorn closes idle
  keep-alive connections (``timeout_keep_alive``) but waits for ever on a client that sends its headers
  or body a byte at a time (slow loris); here a request whose headers and body have not all arrived
  ``read_timeout_s`` after its first byte (or after the connection opened) is answered 408 and closed.
- :func:`check_bind`: refuse to listen beyond loopback without a token, unless told ``insecure``.
- :class:`BearerAuth`, :class:`BodyLimit`, :class:`Metrics`: ASGI middleware for the optional bearer
  token (401), the body size limit (413) and the Prometheus counters of every request.
- :func:`install_error_handlers`: the problem-details answers (400, 413, 422, 429/503, 500) that the
  scheduling service and the kube-scheduler extender share.
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import logging
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import h11
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect
from starlette.responses import JSONResponse
from uvicorn.protocols.http.h11_impl import H11Protocol

from dltsched.engine.domain.errors import DltschedError, ValidationError

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

PROBLEM_JSON = "application/problem+json"
#: the service's log, for the scheduling service and the kube-scheduler extender alike
log = logging.getLogger("dltsched.engine.app.service.server")
_TIMEOUT_RESPONSE = (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/problem+json\r\n"
                     b"connection: close\r\ncontent-length: %d\r\n\r\n%s")


def problem_response(status: int, title: str, detail: str, errors: list[dict[str, str]] | None = None,
                     headers: dict[str, str] | None = None) -> JSONResponse:
    """An RFC 9457 problem-details response (``type``, ``title``, ``status``, ``detail``, ``errors``)."""
    body = {"type": f"https://dltsched.dev/problems/{status}", "title": title, "status": status,
            "detail": detail, "errors": errors or []}
    return JSONResponse(body, status_code=status, media_type=PROBLEM_JSON, headers=headers)


def guarded_protocol(read_timeout_s: float,
                     on_timeout: Callable[[], None] | None = None) -> type[H11Protocol]:
    """uvicorn's h11 protocol class, closing requests not fully read within ``read_timeout_s`` (and calling
    ``on_timeout`` for each, e.g. to count them)."""
    if not read_timeout_s > 0:
        raise ValidationError("read_timeout_s", f"{read_timeout_s!r} not understood; must be > 0")
    detail = (b'{"type":"https://dltsched.dev/problems/408","title":"Request Timeout","status":408,'
              b'"detail":"request not received within %g s","errors":[]}' % read_timeout_s)
    response = _TIMEOUT_RESPONSE % (len(detail), detail)

    class ReadTimeoutH11Protocol(H11Protocol):
        _read_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            if self._read_timer is None and self.conn.their_state is h11.IDLE:
                self._arm()  # the first byte of the next request on a kept-alive connection
            super().data_received(data)
            if self.conn.their_state not in (h11.IDLE, h11.SEND_BODY):
                self._disarm()  # the whole request is in (or the connection is done)

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._disarm()
            self._read_timer = self.loop.call_later(read_timeout_s, self._read_timed_out)

        def _disarm(self) -> None:
            if self._read_timer is not None:
                self._read_timer.cancel()
                self._read_timer = None

        def _read_timed_out(self) -> None:
            self._read_timer = None
            if self.transport.is_closing() or self.conn.their_state not in (h11.IDLE, h11.SEND_BODY):
                return
            if self.conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):  # nothing of a response sent yet
                self.transport.write(response)
            self.transport.close()
            if on_timeout is not None:
                on_timeout()

    return ReadTimeoutH11Protocol


def is_loopback(host: str) -> bool:
    """``True`` for ``localhost`` and loopback addresses (127.0.0.0/8, ::1)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, token: str | None, insecure: bool) -> None:
    """Raise when the service would listen beyond loopback with no token and no ``insecure``."""
    if not is_loopback(host) and not token and not insecure:
        raise ValidationError("--host", f"'{host}' listens beyond loopback without authentication; give "
                              "--token (or DLTSCHED_TOKEN), or --insecure to serve it open")


class BearerAuth:
    """ASGI middleware: 401 unless ``Authorization: Bearer <token>`` (constant-time compare). Paths in
    ``open_paths`` (health, docs, schema) and under ``open_prefixes`` (docs assets) stay open."""

    def __init__(self, app: ASGIApp, token: str, open_paths: frozenset[str],
                 open_prefixes: tuple[str, ...]) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()
        self.open_paths = open_paths
        self.open_prefixes = open_prefixes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or path in self.open_paths or path.startswith(self.open_prefixes):
            await self.app(scope, receive, send)
            return
        given = b""
        for name, value in scope.get("headers") or []:
            if name == b"authorization":
                given = value
        if not hmac.compare_digest(given, self.expected):
            detail = "missing or wrong bearer token; send 'Authorization: Bearer <token>'"
            await problem_response(401, "Unauthorized", detail,
                                   [{"field": "Authorization", "message": detail}],
                                   {"WWW-Authenticate": 'Bearer realm="dltsched"'})(scope, receive, send)
            return
        await self.app(scope, receive, send)


class BodyLimit:
    """ASGI middleware: 413 for bodies over ``max_bytes`` (by Content-Length, and while streaming)."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None:
            if not declared.isdigit() or len(declared) > 18:
                await problem_response(400, "Bad Request", "Content-Length is not a number",
                                       [{"field": "Content-Length", "message": "not a number"}])(
                    scope, receive, send)
                return
            if int(declared) > self.max_bytes:
                errors = [{"field": "body", "message": self._detail()}]
                await problem_response(413, "Payload Too Large", self._detail(), errors)(scope, receive, send)
                return
        received = 0

        async def limited() -> Message:
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > self.max_bytes:
                raise HTTPException(413, self._detail())
            return message

        await self.app(scope, limited, send)

    def _detail(self) -> str:
        return f"request body over {self.max_bytes} bytes; split the cluster or send fewer jobs"


class StrictJsonBody:
    """ASGI middleware for JSON bodies of ``paths``: a number that is not finite or too long to read (a
    5,000-digit integer) or a key given twice is a 422 naming its field (``jobs[0].num_gpus``), not the
    generic parse error; every other body, valid or malformed, goes on to the app unchanged. Put it inside
    :class:`BodyLimit`, which bounds what is buffered here."""

    def __init__(self, app: ASGIApp, paths: tuple[str, ...] = ("/v1/schedule",)) -> None:
        self.app = app
        self.paths = frozenset(paths)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST" or scope.get("path") not in self.paths:
            await self.app(scope, receive, send)
            return
        messages: list[Message] = []
        try:
            while True:
                message = await receive()
                messages.append(message)
                if message["type"] != "http.request" or not message.get("more_body", False):
                    break
        # BodyLimit's 413 while streaming: answered here, outside the app's handlers
        except HTTPException as exc:
            detail = str(exc.detail)
            await problem_response(exc.status_code,
                                   "Payload Too Large" if exc.status_code == 413 else "Bad Request",
                                   detail, [{"field": "body", "message": detail}])(scope, receive, send)
            return
        problem = _field_problem(b"".join(m.get("body", b"") for m in messages))
        if problem is not None:
            field, message_text = problem
            await problem_response(422, "Invalid request", f"{field}: {message_text}",
                                   [{"field": field, "message": message_text}])(scope, receive, send)
            return

        async def replay() -> Message:
            return messages.pop(0) if messages else await receive()

        await self.app(scope, replay, send)


def _field_problem(body: bytes) -> tuple[str, str] | None:
    """(field, problem) of the first non-finite or unreadably long number, or key given twice, in a JSON body;
    ``None`` when there is none, or when the body is not JSON at all (the app answers that)."""
    from dltsched.instances.validation import parse_strict_json

    try:
        text = body.decode("utf-8-sig")
    except UnicodeDecodeError:
        return None
    try:
        parse_strict_json(text, "body")
    except ValidationError as err:
        return None if err.path == "body" else (err.path, err.problem.removesuffix(" (in body)"))
    return None


class ServiceMetrics:
    """The Prometheus metrics of one app (its own registry, so several apps in one process stay apart)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("dltsched_http_requests",
                                "HTTP requests answered, by path, method and status",
                                ["path", "method", "status"], registry=r)
        self.latency = Histogram("dltsched_http_request_duration_seconds",
                                 "Time to answer a request, by path", ["path"], registry=r,
                                 buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60))
        self.plans = Counter("dltsched_schedule_plans", "Plans answered, by status and backend",
                             ["status", "backend"], registry=r)
        self.fallbacks = Counter("dltsched_schedule_fallbacks",
                                 "Plans answered by the fallback policy, by reason (deadline, solver_failed, "
                                 "checker, worker_died)", ["reason"], registry=r)
        self.partial = Counter("dltsched_schedule_partial",
                               "Plans cut short by the request's time limit (best so far or fallback)",
                               registry=r)
        self.gap = Histogram("dltsched_schedule_gap", "Relative optimality gap of exact-solver plans",
                             registry=r, buckets=(0.0, 0.001, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0))
        self.queue_depth = Gauge("dltsched_queue_depth",
                                 "Schedule requests waiting for a solver slot", registry=r)
        self.solving = Gauge("dltsched_solves_in_progress", "Schedule requests being solved now", registry=r)
        self.rejected = Counter("dltsched_schedule_rejected", "Schedule requests refused, by reason",
                                ["reason"], registry=r)
        self.read_timeouts = Counter("dltsched_http_read_timeouts", "Connections closed because a request "
                                     "did not arrive within the read timeout (slow clients)", registry=r)


class Metrics:
    """ASGI middleware: count every HTTP request by path, method and status, and time it. Paths outside
    ``known_paths`` are counted as ``other`` (so hostile URLs cannot blow up the label set)."""

    def __init__(self, app: ASGIApp, metrics: ServiceMetrics, known_paths: frozenset[str],
                 known_prefixes: tuple[str, ...]) -> None:
        self.app = app
        self.metrics = metrics
        self.known_paths = known_paths
        self.known_prefixes = known_prefixes

    def _label(self, path: str) -> str:
        if path in self.known_paths:
            return path
        return next((p for p in self.known_prefixes if path.startswith(p)), "other")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 0

        async def observed(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        method = scope.get("method", "")
        method = method if method in ("GET", "POST", "HEAD", "PUT", "DELETE", "OPTIONS", "PATCH") else "other"
        try:
            await self.app(scope, receive, observed)
        finally:
            path = self._label(scope.get("path", ""))
            self.metrics.requests.labels(path, method, str(status or "none")).inc()
            self.metrics.latency.labels(path).observe(time.perf_counter() - start)


class LimitExceeded(Exception):
    """A request over the service's size limits (413)."""

    def __init__(self, field_name: str, message: str) -> None:
        self.field_name = field_name
        self.message = message
        super().__init__(message)


class Overloaded(Exception):
    """The queue is full (429) or the wait for a solver slot ran out (503); ``retry_after_s`` is a hint."""

    def __init__(self, status: int, message: str, retry_after_s: int) -> None:
        self.status = status
        self.message = message
        self.retry_after_s = retry_after_s
        super().__init__(message)



def install_error_handlers(app: FastAPI) -> None:
    """The service's answers to what goes wrong, as RFC 9457 problem details: 400 malformed JSON, 413 over a
    limit, 422 invalid fields or domain errors, 429/503 overloaded, 500 (logged) for a bug of ours. The
    scheduling service and the kube-scheduler extender install the same handlers."""

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        bad_json = [e for e in exc.errors() if e.get("type") == "json_invalid"]
        if bad_json:
            where = bad_json[0].get("loc", ("body", "?"))[-1]
            detail = (f"the body is not valid JSON ("
                      f"{bad_json[0].get('ctx', {}).get('error', 'decode error')} at {where})")
            return problem_response(400, "Malformed JSON", detail, [{"field": "body", "message": detail}])
        errors = [{"field": field_path(e.get("loc", ())), "message": _message(e)} for e in exc.errors()]
        return problem_response(422, "Invalid request", f"{len(errors)} invalid field(s): "
                                + "; ".join(f"{e['field']}: {e['message']}" for e in errors[:3]), errors)

    @app.exception_handler(HTTPException)
    async def http_error(_: Request, exc: HTTPException) -> JSONResponse:
        title = {400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 413: "Payload Too Large"}
        errors = [{"field": "body", "message": str(exc.detail)}] if exc.status_code in (400, 413) else []
        return problem_response(exc.status_code, title.get(exc.status_code, "HTTP error"), str(exc.detail),
                                errors, dict(exc.headers or {}))

    @app.exception_handler(LimitExceeded)
    async def too_many(_: Request, exc: LimitExceeded) -> JSONResponse:
        return problem_response(413, "Payload Too Large", exc.message, [{"field": exc.field_name,
                                                                         "message": exc.message}])

    @app.exception_handler(Overloaded)
    async def overloaded(_: Request, exc: Overloaded) -> JSONResponse:
        title = "Too Many Requests" if exc.status == 429 else "Service Unavailable"
        return problem_response(exc.status, title, exc.message,
                                headers={"Retry-After": str(exc.retry_after_s)})

    @app.exception_handler(DltschedError)
    async def domain_error(_: Request, exc: DltschedError) -> JSONResponse:
        path = exc.path if isinstance(exc, ValidationError) else "body"
        message = exc.problem if isinstance(exc, ValidationError) else str(exc)
        return problem_response(422, "Invalid request", str(exc), [{"field": path, "message": message}])

    @app.exception_handler(ClientDisconnect)
    async def gone(_: Request, exc: ClientDisconnect) -> JSONResponse:
        return problem_response(400, "Bad Request",
                                "the client closed the connection before sending the body")

    @app.exception_handler(Exception)
    async def internal(_: Request, exc: Exception) -> JSONResponse:  # a bug of ours: logged, never silent
        log.exception("internal error while scheduling")
        return problem_response(500, "Internal Server Error", f"{type(exc).__name__}; see the server log")


def _message(error: Any) -> str:
    """pydantic's message, with the allowed range spelled out for bound errors."""
    msg = str(error.get("msg", ""))
    if error.get("type", "").endswith("_type") and "input" in error:
        msg += f" (got {type(error['input']).__name__}; types are strict: no strings or booleans for numbers)"
    return msg


def field_path(loc: tuple[Any, ...] | list[Any]) -> str:
    """``("body", "jobs", 3, "model")`` -> ``jobs[3].model``."""
    out = ""
    for part in loc:
        if part == "body" and not out:
            continue
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "body"
