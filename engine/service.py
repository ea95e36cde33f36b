"""HTTP service: ``POST /v1/schedule`` turns a cluster state and queue into a plan (``dltsched serve``).

OpenAPI docs are at ``/docs`` (schema at ``/openapi.json``). Bad input is answered with RFC 9457 problem
details (``application/problem+json``: ``type``, ``title``, ``status``, ``detail``, ``errors: [{field,
message}]``): 400 malformed JSON, 413 body/jobs/GPUs over the limits, 422 invalid fields. Each request
builds its own solver objects and solves in a worker thread, so concurrent requests share no mutable
state; a capacity limiter bounds how many solve at once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any

import anyio
import click
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from dltsched.engine.api import SolveConfig, load_predictors, solve_round
from dltsched.engine.errors import DltschedError, ValidationError
from dltsched.engine.service_models import (
    Problem,
    ScheduleRequest,
    ScheduleResponse,
    to_config,
    to_response,
    to_state,
)

log = logging.getLogger(__name__)

PROBLEM_JSON = "application/problem+json"
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class ServiceConfig:
    """Limits and defaults of the service. ``solve`` fills what a request leaves out; a request's
    time limit is capped at ``max_time_limit_s``; at most ``max_concurrent_solves`` solve at once."""

    solve: SolveConfig = field(default_factory=lambda: SolveConfig(backend="auto", time_limit_s=1.0))
    max_jobs: int = 5000
    max_gpus: int = 8192
    max_body_bytes: int = 5 * 1024 * 1024
    max_time_limit_s: float = 30.0
    max_concurrent_solves: int = 8

    def __post_init__(self) -> None:
        for name in ("max_jobs", "max_gpus", "max_body_bytes", "max_concurrent_solves"):
            if getattr(self, name) < 1:
                raise ValidationError(name, f"{getattr(self, name)!r} not understood; must be >= 1")


def problem_response(status: int, title: str, detail: str, errors: list[dict[str, str]] | None = None) -> JSONResponse:
    body = Problem(type=f"https://dltsched.dev/problems/{status}", title=title, status=status, detail=detail,
                   errors=errors or [])
    return JSONResponse(body.model_dump(), status_code=status, media_type=PROBLEM_JSON)


def field_path(loc: tuple[Any, ...] | list[Any]) -> str:
    """``("body", "jobs", 3, "model")`` -> ``jobs[3].model``."""
    out = ""
    for part in loc:
        if part == "body" and not out:
            continue
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "body"


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
            if not declared.isdigit():
                await problem_response(400, "Bad Request", "Content-Length is not a number")(scope, receive, send)
                return
            if int(declared) > self.max_bytes:
                await self._too_large(scope, receive, send)
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

    async def _too_large(self, scope: Scope, receive: Receive, send: Send) -> None:
        errors = [{"field": "body", "message": self._detail()}]
        await problem_response(413, "Payload Too Large", self._detail(), errors)(scope, receive, send)


def check_limits(req: ScheduleRequest, config: ServiceConfig) -> None:
    """Raise HTTP 413 when the request has more jobs or GPUs than the service accepts."""
    num_gpus = sum(n.num_gpus for n in req.cluster.nodes)
    if len(req.jobs) > config.max_jobs:
        raise LimitExceeded("jobs", f"{len(req.jobs)} jobs; at most {config.max_jobs} per request")
    if num_gpus > config.max_gpus:
        raise LimitExceeded("cluster.nodes", f"{num_gpus} GPUs; at most {config.max_gpus} per request")


class LimitExceeded(Exception):
    """A request over the service's size limits (answered with 413)."""

    def __init__(self, field_name: str, message: str) -> None:
        self.field_name = field_name
        self.message = message
        super().__init__(message)


def solve_request(req: ScheduleRequest, config: ServiceConfig) -> ScheduleResponse:
    """Validate, solve and answer one request (runs in a worker thread; no shared mutable state)."""
    start = time.perf_counter()
    state = to_state(req)
    solve_config = to_config(req.config, config.solve, config.max_time_limit_s)
    plan = solve_round(state, solve_config)
    return to_response(plan, state, time.perf_counter() - start)


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        bad_json = [e for e in exc.errors() if e.get("type") == "json_invalid"]
        if bad_json:
            where = bad_json[0].get("loc", ("body", "?"))[-1]
            detail = f"the body is not valid JSON ({bad_json[0].get('ctx', {}).get('error', 'decode error')} at {where})"
            return problem_response(400, "Malformed JSON", detail, [{"field": "body", "message": detail}])
        errors = [{"field": field_path(e.get("loc", ())), "message": str(e.get("msg", ""))} for e in exc.errors()]
        return problem_response(422, "Invalid request", f"{len(errors)} invalid field(s)", errors)

    @app.exception_handler(HTTPException)
    async def http_error(_: Request, exc: HTTPException) -> JSONResponse:
        title = {400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 413: "Payload Too Large"}
        errors = [{"field": "body", "message": str(exc.detail)}] if exc.status_code in (400, 413) else []
        return problem_response(exc.status_code, title.get(exc.status_code, "HTTP error"), str(exc.detail), errors)

    @app.exception_handler(LimitExceeded)
    async def too_many(_: Request, exc: LimitExceeded) -> JSONResponse:
        return problem_response(413, "Payload Too Large", exc.message, [{"field": exc.field_name,
                                                                         "message": exc.message}])

    @app.exception_handler(DltschedError)
    async def domain_error(_: Request, exc: DltschedError) -> JSONResponse:
        path = exc.path if isinstance(exc, ValidationError) else "body"
        message = exc.problem if isinstance(exc, ValidationError) else str(exc)
        return problem_response(422, "Invalid request", str(exc), [{"field": path, "message": message}])

    @app.exception_handler(Exception)
    async def internal(_: Request, exc: Exception) -> JSONResponse:
        log.exception("internal error while scheduling")
        return problem_response(500, "Internal Server Error", f"{type(exc).__name__}; see the server log")


def create_app(config: ServiceConfig | None = None) -> FastAPI:
    """The FastAPI application (``uvicorn.run(create_app(), ...)``; tests use it in-process too)."""
    cfg = config or ServiceConfig()
    app = FastAPI(title="dltsched", version="1", description=__doc__)
    limiter = anyio.CapacityLimiter(cfg.max_concurrent_solves)
    _install_error_handlers(app)
    problems: dict[int | str, dict[str, Any]] = {
        code: {"model": Problem, "description": text, "content": {PROBLEM_JSON: {}}}
        for code, text in ((400, "Malformed JSON"), (413, "Body, jobs or GPUs over the limits"),
                           (422, "Invalid fields (errors name each one)"))}

    @app.get("/v1/health")
    async def health() -> dict[str, Any]:
        """Liveness, and the limits this server enforces."""
        return {"status": "ok", "max_jobs": cfg.max_jobs, "max_gpus": cfg.max_gpus,
                "max_body_bytes": cfg.max_body_bytes, "default_backend": cfg.solve.backend,
                "default_time_limit_s": cfg.solve.time_limit_s}

    @app.post("/v1/schedule", response_model=ScheduleResponse, responses=problems)
    async def schedule(req: ScheduleRequest) -> ScheduleResponse:
        """Place jobs for one round: GPUs, co-location groups and freeze levels, with solve status and timing."""
        check_limits(req, cfg)
        return await anyio.to_thread.run_sync(solve_request, req, cfg, limiter=limiter)

    app.add_middleware(BodyLimit, max_bytes=cfg.max_body_bytes)
    load_predictors(cfg.solve.predictors)  # load once at start-up, not on the first request
    return app


@click.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to listen on.")
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True)
@click.option("--backend", default="auto", show_default=True,
              help="Default backend: auto | cpsat | milp | greedy[:policy].")
@click.option("--time-limit", "time_limit_s", type=click.FloatRange(min=0, min_open=True), default=1.0,
              show_default=True, help="Default solver time limit per request, in seconds.")
@click.option("--max-jobs", type=click.IntRange(min=1), default=5000, show_default=True)
@click.option("--max-gpus", type=click.IntRange(min=1), default=8192, show_default=True)
@click.option("--predictors", "predictor_set", default="default", show_default=True)
@click.pass_context
def serve(ctx: click.Context, host: str, port: int, backend: str, time_limit_s: float, max_jobs: int,
          max_gpus: int, predictor_set: str) -> None:
    """Serve POST /v1/schedule over HTTP (OpenAPI docs at /docs)."""
    import uvicorn

    solve = SolveConfig(backend=backend, time_limit_s=time_limit_s, predictors=predictor_set)
    app = create_app(ServiceConfig(solve=solve, max_jobs=max_jobs, max_gpus=max_gpus))
    quiet = bool((ctx.obj or {}).get("quiet"))
    uvicorn.run(app, host=host, port=port, log_level="error" if quiet else "info")
