"""Hostile HTTP corpus against the service: bad bodies, bad headers, bad HTTP. Never a 5xx, never a hang.

Each case is sent over a raw socket to a server started as ``dltsched serve`` starts it (read timeout,
keep-alive and connection limits included) on 127.0.0.1, and must be answered with a status below 500
(or, for bytes that are not HTTP at all, closed) within the socket timeout. Self-contained: no fixture
from another conftest.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from dltsched.engine.app.service.server import ServiceConfig, make_server
from dltsched.formulations.pipeline import ConfiguredSolver

pytestmark = pytest.mark.timeout(120)

READ_TIMEOUT_S = 2.0
#: no answer within this many seconds is a hang (the server's own limits are all below it)
HANG_S = 30.0

NODE = {"id": "n0", "gpu_type": "v100", "num_gpus": 4}
JOB = {"id": "j0", "model": "resnet18", "batch_size": 32, "remaining_iterations": 100}


def _body(**top: object) -> dict:
    return {"cluster": {"nodes": [NODE]}, "jobs": [JOB]} | top


def _with_job(**fields: object) -> dict:
    return _body(jobs=[JOB | fields])


def _with_node(**fields: object) -> dict:
    return _body(cluster={"nodes": [NODE | fields]})


def _with_config(**fields: object) -> dict:
    return _body(config=fields)


DEEP = 100_000

#: (name, expected status, body bytes) sent as application/json to POST /v1/schedule; 200 only where the
#: body is valid (a job too wide for the cluster is a valid request: it stays queued)
BODIES: list[tuple[str, int, bytes]] = [
    ("empty", 422, b""),
    ("null", 422, b"null"),
    ("string", 422, b'"schedule please"'),
    ("array", 422, b"[1, 2, 3]"),
    ("empty_object", 422, b"{}"),
    ("truncated", 400, b'{"cluster": {"nodes": [{"id": "n0"'),
    ("deep_array", 400, b"[" * DEEP + b"]" * DEEP),
    ("deep_object_in_field", 400, b'{"cluster": ' + b'{"a": ' * 20_000 + b"1" + b"}" * 20_001),
    ("nan", 422, json.dumps(_body(time_s=float("nan"))).encode()),
    ("infinity", 422, json.dumps(_with_job(remaining_iterations=float("inf"))).encode()),
    ("overflowing_float", 422,
     json.dumps(_body()).replace('"remaining_iterations": 100', '"remaining_iterations": 1e400')
     .encode()),
    ("huge_int_literal", 422,
     json.dumps(_body()).replace('"num_gpus": 4', '"num_gpus": ' + "9" * 5000).encode()),
    ("batch_size_string", 422, json.dumps(_with_job(batch_size="64")).encode()),
    ("batch_size_bool", 422, json.dumps(_with_job(batch_size=True)).encode()),
    ("num_gpus_float", 422, json.dumps(_with_node(num_gpus=2.0)).encode()),
    ("num_gpus_huge", 422, json.dumps(_with_node(num_gpus=10**12)).encode()),
    ("job_gpus_huge", 422, json.dumps(_with_job(num_gpus=10**12)).encode()),
    ("negative_time", 422, json.dumps(_body(time_s=-5)).encode()),
    ("no_nodes", 422, json.dumps(_body(cluster={"nodes": []})).encode()),
    ("unknown_field", 422, json.dumps(_body(jobz=[])).encode()),
    ("control_char_id", 422, json.dumps(_with_job(id="j\x00\x1b[31m")).encode()),
    ("long_id", 422, json.dumps(_with_job(id="j" * 100_000)).encode()),
    ("duplicate_job_ids", 422, json.dumps(_body(jobs=[JOB, JOB])).encode()),
    ("gpu_out_of_range", 422, json.dumps(_with_job(current_gpus=[99])).encode()),
    ("gpu_negative", 422, json.dumps(_with_job(current_gpus=[-1])).encode()),
    ("gpu_twice", 422, json.dumps(_with_job(num_gpus=2, current_gpus=[1, 1])).encode()),
    ("down_gpu_out_of_range", 422,
     json.dumps(_body(cluster={"nodes": [NODE], "down_gpus": [-3, 10**9]})).encode()),
    ("runs_on_down_gpu", 422, json.dumps(_body(cluster={"nodes": [NODE], "down_gpus": [0]},
                                          jobs=[JOB | {"current_gpus": [0]}])).encode()),
    ("remaining_over_total", 422,
     json.dumps(_with_job(remaining_iterations=50, total_iterations=10)).encode()),
    ("unknown_model", 422, json.dumps(_with_job(model="no-such-net")).encode()),
    ("unknown_gpu_type", 422, json.dumps(_with_node(gpu_type="v9999")).encode()),
    ("job_wider_than_cluster", 200, json.dumps(_with_job(num_gpus=64)).encode()),
    ("gpu_types_garbage", 422, json.dumps(_with_job(gpu_types=["", "x" * 500])).encode()),
    ("backend_unknown", 422, json.dumps(_with_config(backend="zz")).encode()),
    ("backend_unknown_policy", 422, json.dumps(_with_config(backend="greedy:nosuch")).encode()),
    ("objective_unknown", 422, json.dumps(_with_config(objective="bogus")).encode()),
    ("freeze_levels_huge", 422, json.dumps(_with_config(freeze_levels=10**9)).encode()),
    ("freeze_levels_long_list", 422, json.dumps(_with_config(freeze_levels=list(range(10_000)))).encode()),
    ("time_limit_zero", 422, json.dumps(_with_config(time_limit_s=0)).encode()),
    ("time_limit_negative", 422, json.dumps(_with_config(time_limit_s=-1)).encode()),
    ("time_limit_string", 422, json.dumps(_with_config(time_limit_s="1")).encode()),
    ("max_jobs_per_gpu_99", 422, json.dumps(_with_config(max_jobs_per_gpu=99)).encode()),
    ("weight_zero", 422, json.dumps(_with_job(weight=0)).encode()),
    ("accuracy_budget_over_one", 422, json.dumps(_with_job(accuracy_budget=1.5)).encode()),
    ("freeze_level_huge", 422, json.dumps(_with_job(current_gpus=[0], current_freeze_level=10**6)).encode()),
    ("invalid_utf8", 400, b'{"cluster": {"nodes": [{"id": "\xff\xfe", "gpu_type": "v100", "num_gpus": 1}]}}'),
    ("utf8_bom", 200, b"\xef\xbb\xbf" + json.dumps(_body()).encode()),
    ("duplicate_keys", 422,
     b'{"cluster": {"nodes": []}, "cluster": {"nodes": [{"id": "a", "gpu_type": "v100", '
                       b'"num_gpus": 1}]}}'),
    ("too_many_jobs", 413, json.dumps(_body(jobs=[JOB | {"id": f"j{i}"} for i in range(5001)])).encode()),
    ("too_many_nodes", 413, json.dumps(_body(cluster={"nodes": [NODE | {"id": f"n{i}", "num_gpus": 1}
                                                           for i in range(1100)]})).encode()),
    ("over_body_limit", 413, b'{"jobs": [' + b'{"id": "x"},' * 150_000 + b'{"id": "y"}]}'),
]

#: (name, raw request bytes); the server must answer < 500 or close the connection
RAW: list[tuple[str, bytes]] = [
    ("content_length_not_a_number",
     b"POST /v1/schedule HTTP/1.1\r\nHost: t\r\nContent-Length: abc\r\n\r\n{}"),
    ("content_length_negative", b"POST /v1/schedule HTTP/1.1\r\nHost: t\r\nContent-Length: -1\r\n\r\n{}"),
    ("content_length_huge",
     b"POST /v1/schedule HTTP/1.1\r\nHost: t\r\nContent-Length: 99999999999999999999999\r\n"
                            b"Content-Type: application/json\r\n\r\n{}"),
    ("content_length_twice",
     b"POST /v1/schedule HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\nContent-Length: 7\r\n"
                             b"\r\n{}"),
    ("content_length_short", b"POST /v1/schedule HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                             # the rest never comes: the read timeout answers
                             b"Content-Length: 1000\r\n\r\n{}"),
    ("bad_chunk", b"POST /v1/schedule HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n"
                  b"Content-Type: application/json\r\n\r\nzz\r\n{}\r\n0\r\n\r\n"),
    ("chunked_and_length", b"POST /v1/schedule HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n"
                           b"Content-Length: 5\r\n\r\n2\r\n{}\r\n0\r\n\r\n"),
    ("text_plain_body",
     b"POST /v1/schedule HTTP/1.1\r\nHost: t\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n"
                        b"\r\n{}"),
    ("header_without_colon", b"POST /v1/schedule HTTP/1.1\r\nHost: t\r\nthis is not a header\r\n\r\n"),
    ("header_too_large", b"GET /v1/health HTTP/1.1\r\nHost: t\r\nX-Big: " + b"a" * 70_000 + b"\r\n\r\n"),
    ("many_headers", b"GET /v1/health HTTP/1.1\r\nHost: t\r\n" + b"X-H: 1\r\n" * 5_000 + b"\r\n"),
    ("garbage_request_line", b"GARBAGE\r\n\r\n"),
    ("binary_garbage", bytes(range(256)) * 4),
    ("http2_preface", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"),
    ("http_0_9", b"GET /v1/health\r\n\r\n"),
    ("http_version_9", b"GET /v1/health HTTP/9.9\r\nHost: t\r\n\r\n"),
    ("put_schedule", b"PUT /v1/schedule HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n"),
    ("get_schedule", b"GET /v1/schedule HTTP/1.1\r\nHost: t\r\n\r\n"),
    ("path_traversal", b"GET /docs-assets/../../../../etc/passwd HTTP/1.1\r\nHost: t\r\n\r\n"),
    ("encoded_traversal", b"GET /docs-assets/%2e%2e/%2e%2e/etc/passwd HTTP/1.1\r\nHost: t\r\n\r\n"),
    ("long_path", b"GET /" + b"a" * 60_000 + b" HTTP/1.1\r\nHost: t\r\n\r\n"),
    ("non_ascii_path", b"GET /v1/\xff\xfe HTTP/1.1\r\nHost: t\r\n\r\n"),
    ("no_host", b"GET /v1/health HTTP/1.1\r\n\r\n"),
    ("expect_continue_no_body", b"POST /v1/schedule HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\n"
                                b"Content-Type: application/json\r\nContent-Length: 50\r\n\r\n"),
    ("websocket_upgrade",
     b"GET /v1/health HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
     b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"),
    ("authorization_garbage", b"GET /metrics HTTP/1.1\r\nHost: t\r\nAuthorization: \xff\xfe Bearer\r\n\r\n"),
    ("null_in_header", b"GET /v1/health HTTP/1.1\r\nHost: t\r\nX-A: a\x00b\r\n\r\n"),
    ("pipelined_bad_second", b"GET /v1/health HTTP/1.1\r\nHost: t\r\n\r\nBROKEN\r\n\r\n"),
]


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, int]]:
    """The service as ``dltsched serve`` runs it, on a free 127.0.0.1 port, in a background thread."""
    config = ServiceConfig(solve=ConfiguredSolver.of(backend="auto", time_limit_s=2.0),
                           read_timeout_s=READ_TIMEOUT_S, keep_alive_s=1.0, max_body_bytes=1024 * 1024)
    srv = make_server(config, "127.0.0.1", 0, log_level="critical")
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    thread = threading.Thread(target=srv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not srv.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert srv.started, "the service did not start within 30 s"
    yield "127.0.0.1", sock.getsockname()[1]
    srv.should_exit = True
    thread.join(timeout=15)
    sock.close()


def exchange(address: tuple[str, int], request: bytes) -> tuple[int | None, bytes]:
    """Send ``request``, read until the server closes; the first response's status (None: none) and bytes."""
    with socket.create_connection(address, timeout=5) as sock:
        try:
            sock.sendall(request)
        except OSError:  # the server may cut an oversized request off mid-send
            pass
        sock.settimeout(1.0)
        data = b""
        start = time.monotonic()
        while True:
            assert time.monotonic() - start < HANG_S, f"no close within {HANG_S} s; got {data[:200]!r}"
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                continue
            except ConnectionResetError:
                break
            if not chunk:
                break
            data += chunk
    while data.startswith(b"HTTP/1.1 1"):  # skip interim answers (100 Continue)
        data = data.split(b"\r\n\r\n", 1)[1]
    if not data.startswith(b"HTTP/1.1 "):
        return None, data
    return int(data[9:12]), data


def post(body: bytes) -> bytes:
    return (b"POST /v1/schedule HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
            b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(body)) + body


@pytest.mark.parametrize(("name", "expected", "body"), BODIES, ids=[n for n, _, _ in BODIES])
def test_hostile_body_gets_a_4xx_problem(server, name, expected, body):
    status, data = exchange(server, post(body))
    assert status is not None, f"{name}: no HTTP answer: {data[:200]!r}"
    assert status == expected, f"{name}: {data[:500]!r}"
    if status >= 400:
        head, payload = data.split(b"\r\n\r\n", 1)
        assert b"application/problem+json" in head, name
        problem = json.loads(payload)
        assert problem["status"] == status and problem["detail"] and problem["errors"], name
    else:  # accepted: a plan, e.g. a job too wide for the cluster stays queued
        assert b'"status"' in data and b'"queued"' in data, name


@pytest.mark.parametrize(("name", "request_bytes"), RAW, ids=[n for n, _ in RAW])
def test_hostile_http_is_answered_below_500_or_closed(server, name, request_bytes):
    status, data = exchange(server, request_bytes)
    if status is None:
        assert data == b"", f"{name}: not HTTP: {data[:200]!r}"  # closed without an answer: acceptable
    else:
        assert status < 500, f"{name}: {data[:500]!r}"
        assert b"Traceback" not in data


def test_corpus_size():
    """The issue asks for at least 30 hostile HTTP cases here."""
    assert len(BODIES) + len(RAW) >= 30


def test_server_still_answers_after_the_corpus(server):
    status, data = exchange(server, post(json.dumps(_body(config={"backend": "greedy"})).encode()))
    assert status == 200, data[:500]
    answer = json.loads(data.split(b"\r\n\r\n", 1)[1])
    assert answer["assignments"][0]["job_id"] == "j0" and answer["queued"] == []
