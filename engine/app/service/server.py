"""HTTP service: ``POST /v1/schedule`` turns a cluster state and queue into a plan (``dltsched serve``).

OpenAPI docs at ``/docs`` (Swagger UI 5, which reads OpenAPI 3.1, served from the ``swagger-ui-py`` package's
static files: works offline),
schema at ``/openapi.json``, Prometheus metrics at ``/metrics``, liveness and limits at ``/v1/health``.

Bad input is answered with RFC 9457 problem details (``application/problem+json``: ``type``, ``title``,
``status``, ``detail``, ``errors: [{field, message}]``): 400 malformed JSON, 401 missing or wrong bearer
token (when the server has one), 408 request not received within the read timeout, 413 body, jobs, nodes
or GPUs over the limits, 422 invalid fields (types are strict: ``"64"`` or ``true`` is not a number; every
magnitude has bounds, named in the message), 429 queue full and 503 queue wait too long (both with
``Retry-After``).

A request's ``time_limit_s`` (capped by the server's) bounds the whole solve, round and model building
included, from when a solver slot takes the request (the wait before is bounded by ``max_queue_wait_s``): each
solve runs in a forked worker process that is killed at the deadline (see ``service_worker``), and the answer
is then the fallback policy's plan, with ``fallback`` and ``partial`` true. A solver stopped by its limit with
a plan it could not prove optimal answers that plan (the best so far), ``partial`` true. At most
``max_concurrent_solves`` requests solve at once; up to ``max_queue`` more wait, at most ``max_queue_wait_s``.
"""

from __future__ import annotations

import importlib.util
import logging
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import anyio
import click
from fastapi import Body, FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, Response
from fastapi.staticfiles import StaticFiles
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from dltsched.engine.app.api import load_predictors
from dltsched.engine.app.cli.main import BackendName
from dltsched.engine.app.service.guard import (
    PROBLEM_JSON,
    BearerAuth,
    BodyLimit,
    LimitExceeded,
    Metrics,
    Overloaded,
    ServiceMetrics,
    StrictJsonBody,
    check_bind,
    guarded_protocol,
    install_error_handlers,
)
from dltsched.engine.app.service.k8s import K8sRoutes, K8sServing, recording_peers
from dltsched.engine.app.service.models import (
    REQUEST_EXAMPLES,
    Problem,
    ScheduleRequest,
    ScheduleResponse,
    to_config,
    to_measurements,
    to_response,
    to_state,
)
from dltsched.engine.app.service.worker import context, solve_in_worker
from dltsched.engine.domain.errors import ValidationError
from dltsched.formulations.pipeline import ConfiguredSolver

log = logging.getLogger(__name__)

DOCS_ASSETS = "/docs-assets"
OPEN_PATHS = frozenset({"/v1/health", "/docs", "/openapi.json"})


@dataclass(frozen=True, slots=True)
class ServiceConfig:
    """Limits and defaults of the service. ``solve`` fills what a request leaves out; a request's time
    limit is capped at ``max_time_limit_s``. ``token``: when set, every path but health and docs needs
    ``Authorization: Bearer <token>``. ``read_timeout_s``: a request's headers and body must arrive within
    it; ``keep_alive_s``: an idle kept-alive connection is closed after it; ``max_connections``: uvicorn
    answers 503 beyond it. ``max_worker_memory_mib``: address-space limit of one solver process."""

    solve: ConfiguredSolver = field(
        default_factory=lambda: ConfiguredSolver.of(backend="auto", time_limit_s=1.0))
    max_jobs: int = 5000
    max_nodes: int = 1024
    max_gpus: int = 8192
    max_body_bytes: int = 5 * 1024 * 1024
    max_time_limit_s: float = 30.0
    max_concurrent_solves: int = field(default_factory=lambda: max(1, os.cpu_count() or 1))
    max_queue: int = 64
    max_queue_wait_s: float = 60.0
    token: str | None = None
    read_timeout_s: float = 10.0
    keep_alive_s: float = 5.0
    max_connections: int = 1024
    max_worker_memory_mib: int | None = 4096

    def __post_init__(self) -> None:
        for name in ("max_jobs", "max_nodes", "max_gpus", "max_body_bytes", "max_concurrent_solves",
                     "max_connections"):
            if not getattr(self, name) >= 1:
                raise ValidationError(name, f"{getattr(self, name)!r} not understood; must be >= 1")
        if not self.max_queue >= 0:
            raise ValidationError("max_queue", f"{self.max_queue!r} not understood; must be >= 0")
        for name in ("max_time_limit_s", "max_queue_wait_s", "read_timeout_s", "keep_alive_s"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ValidationError(name, f"{value!r} not understood; must be a finite number > 0")
        if self.token is not None and not self.token.strip():
            raise ValidationError("token", "empty; give a non-empty token or none")


def check_limits(req: ScheduleRequest, config: ServiceConfig) -> None:
    """Raise :class:`LimitExceeded` (413) when the request has more jobs, nodes or GPUs than accepted."""
    num_gpus = sum(n.num_gpus for n in req.cluster.nodes)
    if len(req.jobs) > config.max_jobs:
        raise LimitExceeded("jobs", f"{len(req.jobs)} jobs; at most {config.max_jobs} per request")
    if len(req.cluster.nodes) > config.max_nodes:
        raise LimitExceeded("cluster.nodes", f"{len(req.cluster.nodes)} nodes; at most {config.max_nodes} "
                                             "per request")
    if num_gpus > config.max_gpus:
        raise LimitExceeded("cluster.nodes", f"{num_gpus} GPUs; at most {config.max_gpus} per request")


def solve_request(req: ScheduleRequest, config: ServiceConfig,
                  started: float | None = None) -> ScheduleResponse:
    """Validate, solve by the request's deadline and answer one request (blocks: run it in a worker thread).

    ``started`` (``time.monotonic()``) is when the deadline's clock began; default now."""
    start = time.monotonic() if started is None else started
    state = to_state(req)
    solve_config = to_config(req.config, config.solve, config.max_time_limit_s)
    measurements = to_measurements(req)
    outcome = solve_in_worker(state, solve_config, start + solve_config.time_limit_s,
                              memory_mib=config.max_worker_memory_mib, measurements=measurements)
    return to_response(outcome.plan, state, time.monotonic() - start, partial=outcome.partial,
                       time_limit_s=solve_config.time_limit_s, fallback_reason=outcome.reason or None)


class Admission:
    """The bounded queue in front of the solver slots: at most ``max_concurrent_solves`` solve, at most
    ``max_queue`` wait (429 beyond), none longer than ``max_queue_wait_s`` (503)."""

    def __init__(self, config: ServiceConfig, metrics: ServiceMetrics) -> None:
        self.config = config
        self.metrics = metrics
        self.slots = anyio.CapacityLimiter(config.max_concurrent_solves)
        self.threads = anyio.CapacityLimiter(config.max_concurrent_solves)
        self.waiting = 0

    def retry_after_s(self) -> int:
        """Seconds until a slot is likely free: the queue ahead, solved ``max_concurrent_solves`` at a
        time."""
        rounds = 1 + self.waiting / self.config.max_concurrent_solves
        return max(1, min(300, math.ceil(rounds * self.config.solve.time_limit_s)))

    async def run(self, req: ScheduleRequest) -> ScheduleResponse:
        """The answer to ``req``, solved once a solver slot is free; raises :class:`Overloaded` (429) when
        the queue is full, (503) when no slot frees within ``max_queue_wait_s``."""
        if self.waiting >= self.config.max_queue and self.slots.available_tokens == 0:
            self.metrics.rejected.labels("queue_full").inc()
            raise Overloaded(429, f"{self.waiting} requests already waiting (queue limit "
                                  f"{self.config.max_queue}); retry later", self.retry_after_s())
        self.waiting += 1
        self.metrics.queue_depth.set(self.waiting)
        try:
            with anyio.fail_after(self.config.max_queue_wait_s):
                await self.slots.acquire()
        except TimeoutError:
            self.metrics.rejected.labels("queue_wait").inc()
            raise Overloaded(503, f"no solver slot free within {self.config.max_queue_wait_s:g} s; "
                                  "retry later", self.retry_after_s()) from None
        finally:
            self.waiting -= 1
            self.metrics.queue_depth.set(self.waiting)
        self.metrics.solving.inc()
        try:
            return await anyio.to_thread.run_sync(solve_request, req, self.config, time.monotonic(),
                                                  limiter=self.threads)
        finally:
            self.metrics.solving.dec()
            self.slots.release()


def record(metrics: ServiceMetrics, response: ScheduleResponse) -> None:
    """Count one answered plan: status, fallback reason, partial, gap."""
    metrics.plans.labels(response.status, response.backend).inc()
    if response.fallback:
        metrics.fallbacks.labels(response.fallback_reason or "solver_failed").inc()
    if response.partial:
        metrics.partial.inc()
    if response.gap is not None:
        metrics.gap.observe(response.gap)


def swagger_ui_static() -> Path:
    """The folder of Swagger UI 5's static files (``swagger-ui-bundle.js``, ``swagger-ui.css``) in the
    ``swagger-ui-py`` package, found without importing it. FastAPI's schema is OpenAPI 3.1, which Swagger UI
    reads from version 5 on; earlier bundles show "Unable to render this definition"."""
    spec = importlib.util.find_spec("swagger_ui")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("the HTTP service's /docs page needs swagger-ui-py: pip install "
                          "'dltsched[service]'")
    return Path(next(iter(spec.submodule_search_locations))) / "static"


def create_app(config: ServiceConfig | None = None, k8s: K8sServing | None = None) -> FastAPI:
    """The FastAPI application (served by :func:`make_server`; tests use it in-process too). ``k8s``: the
    kube-scheduler extender behind ``/v1/k8s/*`` and how it is guarded (default: an extender with no
    binder, guarded by the service's token)."""
    cfg = config or ServiceConfig()
    app = FastAPI(title="dltsched", version="1", description=__doc__, docs_url=None, redoc_url=None)
    metrics = ServiceMetrics()
    admission = Admission(cfg, metrics)
    app.state.metrics = metrics
    app.state.admission = admission
    install_error_handlers(app)
    problems: dict[int | str, dict[str, Any]] = {
        code: {"model": Problem, "description": text, "content": {PROBLEM_JSON: {}}}
        for code, text in ((400, "Malformed JSON"),
                           (401, "Missing or wrong bearer token (when the server has one)"),
                           (408, "Request not received within the read timeout"),
                           (413, "Body, jobs, nodes or GPUs over the limits"),
                           (422, "Invalid fields (errors name each one, with the allowed range)"),
                           (429, "Queue full; see Retry-After"),
                           (503, "No solver slot in time; see Retry-After"))}

    @app.get("/v1/health")
    async def health() -> dict[str, Any]:
        """Liveness, and the limits this server enforces."""
        return {"status": "ok", "max_jobs": cfg.max_jobs, "max_nodes": cfg.max_nodes,
                "max_gpus": cfg.max_gpus,
                "max_body_bytes": cfg.max_body_bytes, "default_backend": cfg.solve.backend,
                "default_time_limit_s": cfg.solve.time_limit_s, "max_time_limit_s": cfg.max_time_limit_s,
                "max_concurrent_solves": cfg.max_concurrent_solves, "max_queue": cfg.max_queue,
                "auth": cfg.token is not None}

    @app.post("/v1/schedule", response_model=ScheduleResponse, responses=problems)
    async def schedule(req: Annotated[ScheduleRequest,
                                      Body(openapi_examples=REQUEST_EXAMPLES)]) -> ScheduleResponse:
        """Place jobs for one round: GPUs, co-location groups and freeze levels, with solve status and
        timing."""
        check_limits(req, cfg)
        response = await admission.run(req)
        record(metrics, response)
        return response

    @app.get("/metrics", include_in_schema=True)
    async def prometheus() -> Response:
        """Prometheus metrics: requests by path and status, latency, plans, fallbacks, gaps, queue depth."""
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        return get_swagger_ui_html(openapi_url="/openapi.json", title="dltsched API",
                                   swagger_js_url=f"{DOCS_ASSETS}/swagger-ui-bundle.js",
                                   swagger_css_url=f"{DOCS_ASSETS}/swagger-ui.css",
                                   swagger_favicon_url=f"{DOCS_ASSETS}/favicon-32x32.png",
                                   # no call to a remote validator
                                   swagger_ui_parameters={"validatorUrl": None})

    app.mount(DOCS_ASSETS, StaticFiles(directory=swagger_ui_static()), name="docs-assets")
    app.add_middleware(StrictJsonBody)  # inside BodyLimit: it buffers only bodies within the size limit
    app.add_middleware(BodyLimit, max_bytes=cfg.max_body_bytes)
    if cfg.token is not None:
        app.add_middleware(BearerAuth, token=cfg.token, open_paths=OPEN_PATHS, open_prefixes=(DOCS_ASSETS,))
    app.add_middleware(Metrics, metrics=metrics, known_paths=OPEN_PATHS | {"/v1/schedule", "/metrics"},
                       known_prefixes=(DOCS_ASSETS,))
    serving = k8s if k8s is not None else K8sServing(token=cfg.token)
    app.state.k8s = serving  # kube-scheduler extender: /v1/k8s/filter, prioritize, bind, finished
    app.add_middleware(K8sRoutes, serving=serving, metrics=metrics)
    load_predictors(cfg.solve.predictors)  # load once at start-up, not on the first request
    context(cfg.solve.predictors)  # start the solver workers' fork server now, not on the first request
    return app


@dataclass(frozen=True, slots=True)
class TlsFiles:
    """HTTPS: the server's certificate and key; with ``client_ca``, clients may present a certificate that CA
    signed (kube-scheduler's extender ``tlsConfig``), and ``/v1/k8s/*`` require one."""

    cert_file: str
    key_file: str
    client_ca: str | None = None


def make_server(config: ServiceConfig, host: str = "127.0.0.1", port: int = 8000, *,
                log_level: str = "info", k8s: K8sServing | None = None, tls: TlsFiles | None = None) -> Any:
    """A ``uvicorn.Server`` for :func:`create_app` with the read timeout, keep-alive and connection limits,
    served over HTTPS with ``tls``."""
    import ssl

    import uvicorn

    serving = k8s if k8s is not None else K8sServing(token=config.token)
    if tls is not None and tls.client_ca:
        serving.client_cert = True
    app = create_app(config, serving)
    protocol = recording_peers(guarded_protocol(config.read_timeout_s, app.state.metrics.read_timeouts.inc),
                               serving.peers)
    secure: dict[str, Any] = {}
    if tls is not None:
        secure = {"ssl_certfile": tls.cert_file, "ssl_keyfile": tls.key_file}
        if tls.client_ca:
            secure |= {"ssl_ca_certs": tls.client_ca, "ssl_cert_reqs": ssl.CERT_OPTIONAL}
    return uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level=log_level, http=protocol,
                                         timeout_keep_alive=max(1, math.ceil(config.keep_alive_s)),
                                         limit_concurrency=config.max_connections,
                                         timeout_graceful_shutdown=5, **secure))


@click.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Interface to listen on; beyond loopback needs --token or --insecure.")
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True)
@click.option("--backend", type=BackendName(), default="auto", show_default=True,
              help="Default backend: auto | cpsat | milp | greedy | greedy:<policy>.")
@click.option("--time-limit", "time_limit_s", type=click.FloatRange(min=0, min_open=True, max=3600),
              default=1.0,
              show_default=True, help="Default time limit of a request (building and solving), in seconds.")
@click.option("--max-jobs", type=click.IntRange(min=1), default=5000, show_default=True)
@click.option("--max-gpus", type=click.IntRange(min=1), default=8192, show_default=True)
@click.option("--predictors", "predictor_set", default="default", show_default=True)
@click.option("--calibration", type=click.Path(dir_okay=False), default=None,
              help="A calibration bundle (dltsched calibrate): the GPU types it covers are priced by it "
                   "(CAL.json:mps: co-location under MPS).")
@click.option("--token", envvar="DLTSCHED_TOKEN", default=None, show_envvar=True,
              help="Require 'Authorization: Bearer TOKEN' on /v1/schedule and /metrics.")
@click.option("--insecure", is_flag=True, help="Allow listening beyond loopback without a token.")
@click.option("--max-concurrent", type=click.IntRange(min=1), default=None,
              help="Requests solved at once (default: the number of CPUs).")
@click.option("--max-queue", type=click.IntRange(min=0), default=64, show_default=True,
              help="Requests waiting for a solver; more get 429 with Retry-After.")
@click.option("--read-timeout", "read_timeout_s", type=click.FloatRange(min=0, min_open=True, max=3600),
              default=10.0,
              show_default=True, help="Seconds a request's headers and body may take to arrive.")
@click.option("--tls-cert", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Serve HTTPS with this certificate (PEM); needs --tls-key.")
@click.option("--tls-key", type=click.Path(exists=True, dir_okay=False), default=None,
              help="The certificate's key (PEM).")
@click.option("--tls-client-ca", type=click.Path(exists=True, dir_okay=False), default=None,
              help="CA of client certificates: /v1/k8s/* then need one (kube-scheduler's extender tlsConfig) "
                   "instead of the token.")
@click.option("--k8s", "k8s_watch", is_flag=True,
              help="Kubernetes extender: watch nodes and pods through the API server and bind through it.")
@click.option("--kubeconfig", default=None, help="With --k8s outside a cluster: the kubeconfig (default "
                                                 "~/.kube/config).")
@click.option("--k8s-context", default=None, help="With --k8s: the kubeconfig context.")
@click.option("--k8s-api-server", default=None,
              help="With --k8s: this API server URL, without credentials (kubectl proxy, tests).")
@click.option("--k8s-scheduler-name", default=None,
              help="Pending pods with this schedulerName compete in the plans (default: every dltsched pod).")
@click.option("--k8s-gpu-type", default=None,
              help="GPU type of GPU nodes without an nvidia.com/gpu.product or dltsched.io/gpu-type label.")
@click.option("--k8s-max-body-mib", type=click.IntRange(1, 1024), default=96, show_default=True,
              help="Body limit of /v1/k8s/* (a 5,000-node NodeList is about 62 MiB).")
@click.option("--k8s-max-nodes", type=click.IntRange(min=1), default=10_000, show_default=True,
              help="Nodes per request and nodes remembered.")
@click.option("--k8s-max-pods", type=click.IntRange(min=1), default=10_000, show_default=True,
              help="Pods remembered (least recently seen pending pods are forgotten first).")
@click.pass_context
def serve(ctx: click.Context, host: str, port: int, backend: str, time_limit_s: float, max_jobs: int,
          max_gpus: int, predictor_set: str, calibration: str | None, token: str | None, insecure: bool,
          max_concurrent: int | None, max_queue: int, read_timeout_s: float, tls_cert: str | None,
          tls_key: str | None, tls_client_ca: str | None, k8s_watch: bool, kubeconfig: str | None,
          k8s_context: str | None, k8s_api_server: str | None, k8s_scheduler_name: str | None,
          k8s_gpu_type: str | None, k8s_max_body_mib: int, k8s_max_nodes: int, k8s_max_pods: int) -> None:
    """Serve POST /v1/schedule over HTTP (OpenAPI docs at /docs, Prometheus metrics at /metrics), and the
    kube-scheduler extender at /v1/k8s/* (with --k8s, fed by the API server)."""
    from dltsched.engine.app.registry import check_predictors, with_calibration
    from dltsched.engine.app.vocabulary import parse_backend

    check_bind(host, token, insecure)
    if (tls_cert is None) != (tls_key is None):
        raise ValidationError("--tls-cert", "give --tls-cert and --tls-key together")
    if tls_client_ca and not tls_cert:
        raise ValidationError("--tls-client-ca", "client certificates need HTTPS; give --tls-cert and "
                                                 "--tls-key")
    predictor_set = check_predictors(with_calibration(predictor_set, calibration))
    solve = ConfiguredSolver.of(backend=backend, time_limit_s=time_limit_s, predictors=predictor_set)
    extra = {"max_concurrent_solves": max_concurrent} if max_concurrent else {}
    config = ServiceConfig(solve=solve, max_jobs=max_jobs, max_gpus=max_gpus, token=token,
                           max_queue=max_queue,
                           read_timeout_s=read_timeout_s, max_time_limit_s=max(30.0, time_limit_s), **extra)
    quiet = bool((ctx.obj or {}).get("quiet"))
    from dltsched.engine.app.adapters.k8s import ExtenderLimits, ExtenderSettings, K8sExtender

    settings = ExtenderSettings(default_gpu_type=k8s_gpu_type, predictors=predictor_set,
                                backend="cpsat" if parse_backend(backend).auto else backend,
                                time_limit_s=min(time_limit_s, 5.0),
                                limits=ExtenderLimits(max_nodes=k8s_max_nodes, max_pods=k8s_max_pods))
    extender = K8sExtender(settings)
    serving = K8sServing(extender, client_cert=bool(tls_client_ca), token=token,
                         max_body_bytes=k8s_max_body_mib * 1024 * 1024)
    if k8s_watch:
        from dltsched.engine.app.adapters.k8s_watch import KubeWatcher, api_client, client_binder

        client = api_client(kubeconfig, k8s_context, k8s_api_server)
        extender.binder = client_binder(client)
        serving.watcher = KubeWatcher(extender, client, scheduler_name=k8s_scheduler_name).start()
        if not serving.watcher.wait_synced(30.0):
            log.warning("k8s: nodes and pods not listed within 30 s; the watch keeps trying")
    tls = TlsFiles(tls_cert, tls_key, tls_client_ca) if tls_cert and tls_key else None
    make_server(config, host, port, log_level="error" if quiet else "info", k8s=serving, tls=tls).run()
