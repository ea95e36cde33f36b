"""HTTPS with client certificates, the way kube-scheduler's extender ``tlsConfig`` (certFile, keyFile, caFile)
calls: ``/v1/k8s/*`` need a certificate the client CA signed and no token; ``/v1/schedule`` keeps the
token."""

from __future__ import annotations

import shutil
import ssl
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("uvicorn")

from dltsched.engine.app.service.server import ServiceConfig, TlsFiles, make_server  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is not installed")


def tls(pki: Path, name: str | None) -> ssl.SSLContext:
    """A client context trusting the server's CA, presenting ``name``'s certificate (kube-scheduler's
    tlsConfig)."""
    ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    if name is not None:
        ctx.load_cert_chain(str(pki / f"{name}.crt"), str(pki / f"{name}.key"))
    return ctx


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("pki")
    (d / "san.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    for ca in ("ca", "other-ca"):
        _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN={ca}",
                 "-keyout", f"{ca}.key", "-out", f"{ca}.crt", cwd=d)
    for name, ca, ext in (("server", "ca", ["-extfile", "san.ext"]), ("kube-scheduler", "ca", []),
                          ("stranger", "other-ca", [])):
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}", "-keyout", f"{name}.key",
                 "-out", f"{name}.csr", cwd=d)
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key",
                 "-CAcreateserial", "-days", "2", "-out", f"{name}.crt", *ext, cwd=d)
    return d


@pytest.fixture(scope="module")
def server(pki: Path) -> Any:
    config = ServiceConfig(token="s3cret", max_worker_memory_mib=None)
    srv = make_server(config, "127.0.0.1", 0, log_level="error",
                      tls=TlsFiles(str(pki / "server.crt"), str(pki / "server.key"), str(pki / "ca.crt")))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not (srv.started and srv.servers):
        assert time.monotonic() < deadline, "server did not start"
        time.sleep(0.05)
    port = srv.servers[0].sockets[0].getsockname()[1]
    yield f"https://127.0.0.1:{port}"
    srv.should_exit = True
    thread.join(10)


FILTER = {"Pod": {"metadata": {"name": "web", "uid": "w1"}, "spec": {"containers": [{"name": "c"}]}},
          "Nodes": {"items": [{"metadata": {"name": "n1"}, "status": {"allocatable": {"cpu": "4"}}}]}}


def test_k8s_routes_take_a_client_certificate_instead_of_the_token(server: str, pki: Path) -> None:
    with httpx.Client(verify=tls(pki, "kube-scheduler")) as scheduler:
        answer = scheduler.post(f"{server}/v1/k8s/filter", json=FILTER)
        assert answer.status_code == 200 and answer.json()["Nodes"]["items"][0]["metadata"]["name"] == "n1"
        assert scheduler.post(f"{server}/v1/schedule", json={}).status_code == 401  # the token stays there
    with httpx.Client(verify=tls(pki, None)) as anonymous:
        denied = anonymous.post(f"{server}/v1/k8s/filter", json=FILTER)
        assert denied.status_code == 401 and "client certificate" in denied.json()["detail"]
        token = {"Authorization": "Bearer s3cret"}
        assert anonymous.post(f"{server}/v1/k8s/filter", json=FILTER, headers=token).status_code == 401
        assert anonymous.get(f"{server}/v1/health").status_code == 200
        assert anonymous.get(f"{server}/metrics", headers=token).status_code == 200


def test_a_certificate_of_another_ca_is_refused(server: str, pki: Path) -> None:
    with httpx.Client(verify=tls(pki, "stranger")) as stranger, pytest.raises(httpx.HTTPError):
        stranger.post(f"{server}/v1/k8s/filter", json=FILTER)
