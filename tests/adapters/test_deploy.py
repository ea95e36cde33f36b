"""The files under ``deploy/`` agree with the code: the manifests parse, kube-scheduler's extender config
names the verbs the service answers, RBAC grants what the watch and the binder use, the Deployment's and the
systemd unit's arguments are options the CLI accepts, and the job_submit plugin compiles (when ``luac`` is
installed)."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")

DEPLOY = Path(__file__).parents[2] / "deploy"


def load(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((DEPLOY / "k8s" / name).read_text()) if d]


def test_scheduler_config_names_the_services_verbs() -> None:
    from dltsched.engine.app.service.k8s import K8S_PATHS

    (config,) = load("scheduler-config.yaml")
    assert config["kind"] == "KubeSchedulerConfiguration"
    (ext,) = config["extenders"]
    prefix = ext["urlPrefix"].split(":443", 1)[1]
    assert {f"{prefix}/{ext[v]}" for v in ("filterVerb", "prioritizeVerb", "bindVerb")} <= K8S_PATHS
    assert ext["nodeCacheCapable"] is True and ext["enableHTTPS"] is True
    assert set(ext["tlsConfig"]) >= {"certFile", "keyFile", "caFile"}
    assert ext["managedResources"][0]["name"] == "nvidia.com/gpu"


def test_rbac_grants_list_watch_and_bind() -> None:
    docs = {d["kind"]: d for d in load("rbac.yaml")}
    rules = docs["ClusterRole"]["rules"]
    read = next(r for r in rules if "nodes" in r["resources"])
    assert {"nodes", "pods"} <= set(read["resources"]) and {"list", "watch"} <= set(read["verbs"])
    assert any("pods/binding" in r["resources"] and "create" in r["verbs"] for r in rules)
    assert docs["ClusterRoleBinding"]["subjects"][0]["name"] == docs["ServiceAccount"]["metadata"]["name"]


def test_deployment_arguments_are_serve_options() -> None:
    from dltsched.engine.app.service.server import serve

    (deployment,) = load("deployment.yaml")
    (service,) = load("service.yaml")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    args = container["args"]
    assert args[0] == "serve"
    import click

    # unknown options raise
    opts, rest, _ = serve.make_parser(click.Context(serve)).parse_args(list(args[1:]))
    assert rest == [] and opts["k8s_watch"] and opts["tls_client_ca"].endswith("client-ca.crt")
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]


def test_systemd_unit_runs_the_slurm_daemon_with_valid_options() -> None:
    from dltsched.engine.app.adapters.slurm import slurm

    unit = (DEPLOY / "slurm" / "dltsched-slurm.service").read_text()
    line = unit.split("ExecStart=", 1)[1].split("\n")[0:2]
    words = shlex.split(" ".join(part.rstrip("\\") for part in line))
    assert words[0].endswith("/dltsched") and words[1] == "slurm"
    defaults = (DEPLOY / "slurm" / "dltsched-slurm.default").read_text()
    extra = shlex.split(defaults.split('DLTSCHED_ARGS="', 1)[1].split('"', 1)[0])
    ctx = slurm.make_context("slurm", [w for w in words[2:] if w != "$DLTSCHED_ARGS"] + extra)
    assert ctx.params["partition"] == "dltsched" and ctx.params["preempt_grace_s"] == 120


@pytest.mark.skipif(shutil.which("luac5.4") is None and shutil.which("luac") is None,
                    reason="luac is not installed")
def test_job_submit_plugin_compiles() -> None:
    luac = shutil.which("luac5.4") or shutil.which("luac")
    assert luac is not None
    done = subprocess.run([luac, "-p", str(DEPLOY / "slurm" / "job_submit.lua")], capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr
