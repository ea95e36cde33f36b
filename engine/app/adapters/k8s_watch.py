"""What ``dltsched serve --k8s`` adds to the extender: it watches nodes and pods through the Kubernetes API
server with the official ``kubernetes`` client (in-cluster service account, or a kubeconfig), and binds
through it.

- Nodes: listed, then watched (``ADDED``/``MODIFIED`` update a node, ``DELETED`` forgets it); the list is
  authoritative, so a restarted extender knows every node before kube-scheduler's first call (the extender
  can be configured ``nodeCacheCapable: true``: kube-scheduler then sends node names only).
- Pods that hold GPUs: a pod bound to a node (by dltsched or anyone) holds its GPUs there; a pod that
  succeeds, fails or is deleted frees them (no one needs to report it). Pending dltsched pods handled by
  this scheduler compete in the plans.
- Lists are paged (``limit``), watches resume from the last ``resourceVersion``; an expired version (410)
  or a broken stream lists again, after a back-off. A node or pod whose fields cannot be read is logged
  and skipped; it never stops the watch.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from dltsched.engine.app.adapters.k8s import (
    K8sExtender,
    PodRecord,
    node_info,
    pod_gpus,
    pod_job_spec,
)
from dltsched.engine.domain.errors import DltschedError, ValidationError

log = logging.getLogger(__name__)

ENDED_PHASES = frozenset({"Succeeded", "Failed"})
_PAGE = 500


def api_client(kubeconfig: str | None = None, context: str | None = None, host: str | None = None) -> Any:
    """A ``kubernetes.client.ApiClient``: for ``host`` (no credentials: tests, ``kubectl proxy``), else the
    pod's service account when in a cluster, else ``kubeconfig`` (default ``~/.kube/config``)."""
    try:
        from kubernetes import client, config
    except ImportError:
        raise DltschedError("--k8s needs the kubernetes client: pip install 'dltsched[service]'") from None
    cfg = client.Configuration()
    if host is not None:
        cfg.host = host
        return client.ApiClient(cfg)
    try:
        config.load_incluster_config(client_configuration=cfg)
    except config.ConfigException:
        try:
            config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=cfg)
        except (config.ConfigException, OSError, TypeError) as err:
            raise DltschedError("--k8s: no in-cluster credentials and no usable kubeconfig "
                                f"({err}); run it in "
                                "the cluster or give --kubeconfig") from None
    return client.ApiClient(cfg)


def client_binder(client: Any) -> Callable[[str, str, str, str], None]:
    """A binder that creates the pod's ``v1.Binding`` through the API server (``pods/binding``)."""
    from kubernetes import client as k8s

    core = k8s.CoreV1Api(client)

    def bind(name: str, namespace: str, uid: str, node: str) -> None:
        body = k8s.V1Binding(metadata=k8s.V1ObjectMeta(name=name, namespace=namespace, uid=uid),
                             target=k8s.V1ObjectReference(api_version="v1", kind="Node", name=node))
        # the answer is read raw: the client's Binding model rejects the API server's Status reply
        core.create_namespaced_pod_binding(name, namespace, body, _preload_content=False)

    return bind


class KubeWatcher:
    """Keeps a :class:`K8sExtender` in step with the API server (one thread for nodes, one for pods)."""

    def __init__(self, extender: K8sExtender, client: Any, *, scheduler_name: str | None = None,
                 watch_timeout_s: int = 300, backoff_s: float = 1.0) -> None:
        from kubernetes import client as k8s

        self.extender, self.client = extender, client
        self.core = k8s.CoreV1Api(client)
        self.scheduler_name = scheduler_name
        self.watch_timeout_s, self.backoff_s = watch_timeout_s, backoff_s
        self.stopping = threading.Event()
        self.synced = {"nodes": threading.Event(), "pods": threading.Event()}
        self.threads: list[threading.Thread] = []
        self.errors = 0

    def start(self) -> KubeWatcher:
        """Start one daemon thread watching nodes and one watching pods.

        Returns
        -------
        KubeWatcher
            This watcher, started.
        """
        for kind in ("nodes", "pods"):
            thread = threading.Thread(target=self._run, args=(kind,), name=f"dltsched-watch-{kind}",
                                      daemon=True)
            thread.start()
            self.threads.append(thread)
        return self

    def wait_synced(self, timeout_s: float = 30.0) -> bool:
        """Whether nodes and pods have both been listed once within ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        return all(e.wait(max(0.0, deadline - time.monotonic())) for e in self.synced.values())

    def stop(self) -> None:
        """Ask the watch threads to stop after their current request."""
        self.stopping.set()

    # --- one resource: list, then watch from its version; list again on 410 or any failure
    def _run(self, kind: str) -> None:
        from kubernetes.client.exceptions import ApiException

        backoff = self.backoff_s
        while not self.stopping.is_set():
            try:
                version = self._list(kind)
                self.synced[kind].set()
                backoff = self.backoff_s
                while not self.stopping.is_set():
                    version = self._watch(kind, version)
            except ApiException as err:
                if err.status != 410:
                    self.errors += 1
                    log.warning("k8s %s watch: API server answered %s %s; listing again in %.0f s", kind,
                                err.status, err.reason, backoff)
                    self.stopping.wait(backoff)
                    backoff = min(60.0, backoff * 2)
            except Exception as err:  # noqa: BLE001 - a watch outlives a broken stream or a bad object
                self.errors += 1
                log.warning("k8s %s watch: %s: %s; listing again in %.0f s", kind, type(err).__name__, err,
                            backoff)
                self.stopping.wait(backoff)
                backoff = min(60.0, backoff * 2)

    def _call(self, kind: str, **kw: Any) -> Any:
        if kind == "nodes":
            return self.core.list_node(**kw)
        return self.core.list_pod_for_all_namespaces(
            field_selector="status.phase!=Succeeded,status.phase!=Failed", **kw)

    def _list(self, kind: str) -> str:
        seen: set[str] = set()
        token, version = None, ""
        while True:
            answer = self._call(kind, limit=_PAGE, _preload_content=False,
                                **({"_continue": token} if token else {}))
            page = json.loads(answer.data)
            for item in page.get("items") or []:
                item.setdefault("kind", "Node" if kind == "nodes" else "Pod")
                key = self._apply("ADDED", kind, item)
                if key:
                    seen.add(key)
            meta = page.get("metadata") or {}
            version, token = str(meta.get("resourceVersion") or ""), meta.get("continue")
            if not token:
                break
        with self.extender.lock:
            if kind == "nodes":
                for name in set(self.extender.nodes) - seen:
                    self.extender.forget_node(name)
            else:
                for uid in [u for u, p in self.extender.pods.items() if p.node is not None and u not in seen]:
                    self.extender.finish(uid)  # ended while nobody watched
        log.info("k8s %s listed: %d", kind, len(seen))
        return version

    def _watch(self, kind: str, version: str) -> str:
        from kubernetes import watch

        stream = watch.Watch()
        fn = self.core.list_node if kind == "nodes" else self.core.list_pod_for_all_namespaces
        extra = {} if kind == "nodes" else {"field_selector": "status.phase!=Succeeded,status.phase!=Failed"}
        events: Iterator[dict[str, Any]] = stream.stream(fn, resource_version=version,
                                                         timeout_seconds=self.watch_timeout_s,
                                                         allow_watch_bookmarks=True, **extra)
        for event in events:
            if self.stopping.is_set():
                stream.stop()
                break
            raw = event.get("raw_object") or {}
            kind_of_event = str(event.get("type") or "")
            if kind_of_event == "ERROR":
                from kubernetes.client.exceptions import ApiException

                raise ApiException(status=int(raw.get("code") or 500),
                                   reason=str(raw.get("reason") or "watch error"))
            meta: dict[str, Any] = raw.get("metadata") if isinstance(raw.get("metadata"),
                                                                     dict) else {}  # type: ignore[assignment]
            version = str(meta.get("resourceVersion") or version)
            if kind_of_event != "BOOKMARK":
                self._apply(kind_of_event, kind, raw)
        return version

    # --- one object
    def _apply(self, event: str, kind: str, obj: dict[str, Any]) -> str | None:
        """Feed one node or pod to the extender; its key (node name or pod uid), ``None`` when skipped."""
        meta: dict[str, Any] = obj.get("metadata") if isinstance(obj.get("metadata"),
                                                                 dict) else {}  # type: ignore[assignment]
        try:
            if kind == "nodes":
                name = str(meta.get("name") or "")
                if event == "DELETED":
                    self.extender.forget_node(name)
                    return None
                info = node_info(obj, f"node {name}", self.extender.limits,
                                 self.extender.settings.default_gpu_type)
                if info.problem:
                    log.warning("%s", info.problem)
                self.extender.observe_node(info)
                return info.name
            uid = str(meta.get("uid") or "")
            status: dict[str, Any] = obj.get("status") if isinstance(obj.get("status"),
                                                                     dict) else {}  # type: ignore[assignment]
            spec: dict[str, Any] = obj.get("spec") if isinstance(obj.get("spec"),
                                                                 dict) else {}  # type: ignore[assignment]
            if event == "DELETED" or status.get("phase") in ENDED_PHASES:
                self.extender.finish(uid)
                return None
            gpus = pod_gpus(obj, self.extender.limits)
            if not gpus or not uid:
                return None
            node = spec.get("nodeName") or None
            mine = self.scheduler_name is None or spec.get("schedulerName") == self.scheduler_name
            job = pod_job_spec(obj) if node is None and mine else None
            if node is None and job is None:
                return None  # someone else's pending pod: it holds nothing yet
            record = PodRecord(uid, str(meta.get("name") or ""), str(meta.get("namespace") or "default"),
                               gpus, job, node=node, bound_at=time.time() if node else None,
                               pending=node is None)
            with self.extender.lock:
                known = self.extender.pods.get(uid)
                if known is not None and known.node is not None and node is None:
                    return uid
                if known is not None and job is None:
                    record.spec = known.spec
                self.extender.remember_pod(record)
            return uid
        except ValidationError as err:
            log.warning("k8s %s %s skipped: %s", kind, meta.get("name"), err)
            return None
