"""A Kubernetes API server double: the list / watch / bind HTTP that ``dltsched serve --k8s`` uses, enough for
the official client to talk to it (a real API server cannot be installed here).

- ``GET /api/v1/nodes`` and ``GET /api/v1/pods`` list (``NodeList``/``PodList`` with
  ``metadata.resourceVersion``; ``fieldSelector`` ``status.phase!=X`` honoured); with ``watch=true`` they
  stream ``{"type", "object"}`` lines (chunked) of every change after ``resourceVersion`` until
  ``timeoutSeconds``; an object that stops matching the field selector is sent as ``DELETED``, as the real
  server does. A version older than the oldest kept event answers an ``ERROR`` event with code 410 (Gone).
- ``POST /api/v1/namespaces/{ns}/pods/{name}/binding`` sets the pod's ``spec.nodeName`` (409 when already
  bound, 404 when unknown) and answers a ``Status``.
"""

from __future__ import annotations

import copy
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse


class ApiServerDouble:
    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.version = 100
        self.objects: dict[str, dict[str, dict[str, Any]]] = {"nodes": {}, "pods": {}}
        self.events: list[tuple[int, str, str, dict[str, Any]]] = []  # (version, kind, type, object)
        self.bindings: list[tuple[str, str, str]] = []  # (namespace, name, node)
        self.oldest = self.version
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> ApiServerDouble:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        with self.cond:
            self.closing = True
            self.cond.notify_all()
        self.server.shutdown()
        self.server.server_close()

    closing = False

    # --- changing the cluster (as kubelets, users and controllers would)
    def _change(self, kind: str, event: str, obj: dict[str, Any]) -> None:
        with self.cond:
            self.version += 1
            obj["metadata"]["resourceVersion"] = str(self.version)
            key = obj["metadata"]["uid"] if kind == "pods" else obj["metadata"]["name"]
            if event == "DELETED":
                self.objects[kind].pop(key, None)
            else:
                self.objects[kind][key] = obj
            self.events.append((self.version, kind, event, copy.deepcopy(obj)))
            self.cond.notify_all()

    def add_node(self, node: dict[str, Any]) -> None:
        node["metadata"].setdefault("uid", "node-" + node["metadata"]["name"])
        self._change("nodes", "ADDED", node)

    def add_pod(self, pod: dict[str, Any]) -> None:
        pod.setdefault("status", {"phase": "Pending"})
        self._change("pods", "ADDED", pod)

    def pod(self, uid: str) -> dict[str, Any]:
        with self.cond:
            return copy.deepcopy(self.objects["pods"][uid])

    def set_phase(self, uid: str, phase: str) -> None:
        pod = self.pod(uid)
        pod["status"]["phase"] = phase
        self._change("pods", "MODIFIED", pod)

    def delete(self, kind: str, key: str) -> None:
        with self.cond:
            obj = copy.deepcopy(self.objects[kind][key])
        self._change(kind, "DELETED", obj)

    def forget_history(self) -> None:
        """Drop the event log: watches from an older version get 410 Gone (as after etcd compaction)."""
        with self.cond:
            self.events.clear()
            self.oldest = self.version

    def bind(self, namespace: str, name: str, node: str) -> int:
        with self.cond:
            pod = next((p for p in self.objects["pods"].values() if p["metadata"]["name"] == name
                        and p["metadata"].get("namespace", "default") == namespace), None)
            if pod is None:
                return 404
            if pod["spec"].get("nodeName"):
                return 409
            pod = copy.deepcopy(pod)
            pod["spec"]["nodeName"] = node
            self.bindings.append((namespace, name, node))
        self._change("pods", "MODIFIED", pod)
        return 201


def _matches(obj: dict[str, Any], selector: str) -> bool:
    for term in filter(None, selector.split(",")):
        m = re.fullmatch(r"status\.phase(!=|==|=)(\w+)", term.strip())
        if m is None:
            continue
        phase = (obj.get("status") or {}).get("phase")
        if (m.group(1) == "!=") == (phase == m.group(2)):
            return False
    return True


def _handler(api: ApiServerDouble) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *_: Any) -> None:
            pass

        def _json(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            url = urlparse(self.path)
            query = {k: v[-1] for k, v in parse_qs(url.query).items()}
            kind = {"/api/v1/nodes": "nodes", "/api/v1/pods": "pods"}.get(url.path)
            if kind is None:
                self._json(404, {"kind": "Status", "status": "Failure", "code": 404, "reason": "NotFound"})
                return
            selector = query.get("fieldSelector", "")
            if query.get("watch") in ("true", "1"):
                self._watch(kind, int(query.get("resourceVersion") or api.version), selector,
                            float(query.get("timeoutSeconds") or 5))
                return
            with api.cond:
                items = [copy.deepcopy(o) for o in api.objects[kind].values() if _matches(o, selector)]
                version = api.version
            self._json(200, {"kind": "NodeList" if kind == "nodes" else "PodList", "apiVersion": "v1",
                             "metadata": {"resourceVersion": str(version)}, "items": items})

        def _watch(self, kind: str, since: int, selector: str, timeout_s: float) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()

            def send(event: dict[str, Any]) -> None:
                data = (json.dumps(event) + "\n").encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()

            import time

            deadline = time.monotonic() + timeout_s
            try:
                with api.cond:
                    if since < api.oldest:
                        send({"type": "ERROR", "object": {"kind": "Status", "status": "Failure", "code": 410,
                                                          "reason": "Expired",
                                                          "message": "too old resource version"}})
                        since = 1 << 60
                while not api.closing and time.monotonic() < deadline and since < (1 << 60):
                    with api.cond:
                        fresh = [e for e in api.events if e[0] > since and e[1] == kind]
                        if not fresh:
                            api.cond.wait(min(0.2, max(0.0, deadline - time.monotonic())))
                            continue
                    for version, _, event, obj in fresh:
                        since = version
                        if event == "MODIFIED" and not _matches(obj, selector):
                            event = "DELETED"
                        elif not _matches(obj, selector):
                            continue
                        send({"type": event, "object": obj})
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                pass
            self.close_connection = True

        def do_POST(self) -> None:  # noqa: N802
            m = re.fullmatch(r"/api/v1/namespaces/([^/]+)/pods/([^/]+)/binding", urlparse(self.path).path)
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            if m is None or body.get("kind", "Binding") != "Binding":
                self._json(404, {"kind": "Status", "status": "Failure", "code": 404, "reason": "NotFound"})
                return
            node = ((body.get("target") or {}).get("name")) or ""
            status = api.bind(m.group(1), m.group(2), node)
            ok = status == 201
            self._json(status,
                       {"kind": "Status", "apiVersion": "v1", "status": "Success" if ok else "Failure",
                                "code": status, **({} if ok else {"reason": "Conflict" if status == 409 else
                                                                  "NotFound"})})

    return Handler
