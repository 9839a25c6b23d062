"""Two releases of the chart in one cluster, one per team namespace (docs/install.md "Several installs in
one cluster"), scrape each trainer process once: a real Prometheus, configured from the PodMonitors the two
releases created in the apiserver, holds exactly one series per trainer metric and label set per process.

What is real: the chart (``helm install`` twice), the PodMonitors as the apiserver stores them, the trainer
pods (the operator's rendered pod template: labels, host network, the ``metrics`` port) as the apiserver
lists them, the trainer's metrics registry and HTTP server (``rljob_trainer.telemetry.metrics``/``metrics_server``),
and the Prometheus server, which relabels and scrapes. What stands in:

- the Prometheus Operator, which turns PodMonitors into scrape configs, and the pod discovery (Debian's
  prometheus has no Kubernetes discovery): ``podmonitor_scrape.py``;
- the monitoring.coreos.com CRDs, installed here with an open schema when the cluster has none (the
  chart renders its monitoring objects only when the API is served). Their schema is checked elsewhere
  (tests/chart); this test is about which pods each release scrapes.
- the hosts: kwok runs no containers, so each trainer pod is bound to its own kwok TPU node whose
  InternalIP is a distinct loopback address (127.x.y.z); the host-network pod gets that IP, and the
  trainer's metrics server listens there, so the discovered address ``podIP:port`` is really served.

The old behaviour (a PodMonitor selecting any namespace whatever the release watches) scrapes every pod
twice, and the per-process counts below read 2.
"""

from __future__ import annotations

import json
import random
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from rljob_operator.render import render_jobset
from rljob_trainer.telemetry.metrics import TrainerMetrics
from rljob_trainer.telemetry.metrics_server import MetricsServer
from rljob_trainer.telemetry.progress import StepReport

from rljob.api import parse_rljob
from tests import procs
from tests.e2e.kube import fresh_namespace, kubectl, kubectl_json, list_items, loopback_tpu_node, wait_for
from tests.e2e.podmonitor_scrape import discovered_targets, scrape_configs
from tests.observability.conftest import find_binary
from tests.observability.prom import Prometheus

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "rljob"
EXAMPLE = REPO / "examples" / "rljob-v5e.yaml"  # 2 hosts: processes 0 and 1
JOB = "grpo"  # the same RLJob name in both team namespaces: only `namespace` tells them apart
TEAMS = ("a", "b")
MONITORING_KINDS = (("PodMonitor", "podmonitors"), ("ServiceMonitor", "servicemonitors"))
MONITORING_KINDS += (("PrometheusRule", "prometheusrules"),)


def _open_crd(kind: str, plural: str) -> dict[str, Any]:
    """A monitoring.coreos.com/v1 CRD that accepts any spec (stand-in, see the module docstring)."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.monitoring.coreos.com"},
        "spec": {
            "group": "monitoring.coreos.com",
            "scope": "Namespaced",
            "names": {"kind": kind, "plural": plural, "singular": kind.lower(), "listKind": f"{kind}List"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                    },
                }
            ],
        },
    }


@pytest.fixture
def monitoring_crds(cluster: Any) -> Iterator[None]:
    """The Prometheus Operator's CRDs the chart uses, created if absent and deleted afterwards if created
    here (another test's or a real install's stay)."""
    created = []
    for kind, plural in MONITORING_KINDS:
        name = f"{plural}.monitoring.coreos.com"
        if kubectl("get", "crd", name, "--ignore-not-found", "-o", "name").strip():
            continue
        kubectl("create", "-f", "-", input=yaml.safe_dump(_open_crd(kind, plural)))
        created.append(name)
    try:
        for name in created:
            kubectl("wait", "--for=condition=Established", f"crd/{name}", "--timeout=60s")
        yield
    finally:
        for name in created:
            kubectl("delete", "crd", name, "--wait=false", "--ignore-not-found", check=False)


def helm(*args: str) -> str:
    proc = subprocess.run(["helm", *args], capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, f"helm {' '.join(args)} -> exit {proc.returncode}:\n{proc.stderr}"
    return proc.stdout


def install(stack: ExitStack, team: str, system_ns: str, team_ns: str) -> str:
    """One release as docs/install.md shows it: the operator watches (and so scrapes) its team namespace;
    rules and dashboard in the first release only. A 1 s scrape interval keeps the test short."""
    release = f"rljob-{team}-{uuid.uuid4().hex[:6]}"
    args = ["install", release, str(CHART), "-n", system_ns]
    args += ["--set", f"operator.watchNamespaces={{{team_ns}}}", "--set", "metrics.podMonitor.interval=1s"]
    if team != TEAMS[0]:
        args += [
            "--set",
            "metrics.prometheusRule.enabled=false",
            "--set",
            "metrics.managedPrometheus.rules=false",
        ]
        args += ["--set", "dashboard.enabled=false"]
    helm(*args)
    stack.callback(
        subprocess.run,
        ["helm", "uninstall", release, "-n", system_ns, "--wait"],
        capture_output=True,
        check=False,
    )
    return release


def trainer_pod_template(port: int) -> dict[str, Any]:
    """The pod template the operator renders for the example RLJob (named JOB, metrics on ``port``)."""
    manifest = yaml.safe_load(EXAMPLE.read_text())
    manifest["metadata"]["name"] = JOB
    manifest["spec"].setdefault("metrics", {})["port"] = port
    jobset = render_jobset(parse_rljob(manifest))
    return jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]


def report(step: int) -> StepReport:
    """One finished global step, so every per-step series exists."""
    return StepReport(
        step=step,
        max_steps=10,
        seconds=2.0,
        phase_seconds={"rollout": 1.0, "reference": 0.25, "train": 0.5, "weight_sync": 0.25},
        rewards=np.array([0.0, 0.5, 1.0]),
        real_tokens=75,
        slot_tokens=100,
        used_slot_tokens=100,
        packed=False,
    )


def start_host(stack: ExitStack, team_ns: str, process: int, ip: str, port: int) -> str:
    """A kwok TPU node with InternalIP ``ip``, the trainer pod of ``process`` bound to it, and that
    process's real metrics registry served on ``ip:port``. Returns the pod's name."""
    template = trainer_pod_template(port)
    selector = template["spec"]["nodeSelector"]
    node_name = f"gke-rljob-tworel-{uuid.uuid4().hex[:6]}"
    node = loopback_tpu_node(
        node_name,
        selector["cloud.google.com/gke-tpu-accelerator"],
        selector["cloud.google.com/gke-tpu-topology"],
        selector["node.kubernetes.io/instance-type"],
        chips=4,
    )
    node["status"]["addresses"][0]["address"] = ip
    # nothing else is scheduled here (the pod below is bound by nodeName)
    node["spec"]["taints"].append({"key": "rljob.dev/test-two-releases", "effect": "NoSchedule"})
    kubectl("create", "-f", "-", input=yaml.safe_dump(node))
    stack.callback(kubectl, "delete", "node", node_name, "--wait=false", "--ignore-not-found", check=False)

    metrics = TrainerMetrics(rljob=JOB, process=process)
    metrics(report(1))
    server = MetricsServer(metrics, port, addr=ip)
    stack.callback(server.close)

    pod_name = f"{JOB}-slice-0-{process}"
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name,
            "labels": template["metadata"]["labels"],
            "annotations": {"kwok.rljob.dev/run-forever": "true"},
        },
        "spec": {**template["spec"], "nodeName": node_name},
    }
    kubectl("create", "-n", team_ns, "-f", "-", input=yaml.safe_dump(pod))
    # deleted (by kwok) while its node still exists: a pod bound to a deleted node stays Terminating and
    # holds its namespace
    stack.callback(kubectl, "delete", "pod", pod_name, "-n", team_ns, "--timeout=60s", check=False)
    return pod_name


def settled_targets(
    prom: Prometheus, expected_pods: set[tuple[str, str]], timeout: float = 60
) -> list[dict[str, Any]]:
    """The active targets once every expected pod has been scraped, all of them up, and the set of targets
    unchanged for 3 s (each scrape job reads the discovery file on its own). Targets of other pods (another
    test's, selected by a PodMonitor that reaches beyond its namespaces) are returned too, up or not."""
    last: list[Any] = []
    stable_since, deadline = time.monotonic(), time.monotonic() + timeout
    while True:
        targets = prom.api("targets", state="active")["activeTargets"]
        key = sorted(
            (t["labels"].get("job"), t["labels"].get("namespace"), t["labels"].get("pod")) for t in targets
        )
        ours = [t for t in targets if (t["labels"].get("namespace"), t["labels"].get("pod")) in expected_pods]
        scraped = {(t["labels"]["namespace"], t["labels"]["pod"]) for t in ours if t["health"] == "up"}
        if key != last or scraped != expected_pods or any(t["health"] != "up" for t in ours):
            last, stable_since = key, time.monotonic()
        elif time.monotonic() - stable_since >= 3:
            return targets
        if time.monotonic() > deadline:
            raise TimeoutError(f"targets not settled after {timeout:.0f}s: {key}")
        time.sleep(0.5)


def test_two_releases_scrape_each_trainer_process_once(
    cluster: Any, monitoring_crds: None, tmp_path: Path
) -> None:
    prometheus_bin = find_binary("prometheus")
    if prometheus_bin is None:
        pytest.skip("prometheus not found: set $PROMETHEUS, put it on PATH, or run hack/cluster/build.sh")
    started = time.monotonic()
    with ExitStack() as stack:
        system = {t: stack.enter_context(fresh_namespace(f"tworel-{t}-system")) for t in TEAMS}
        team = {t: stack.enter_context(fresh_namespace(f"tworel-{t}-team")) for t in TEAMS}
        releases = [install(stack, t, system[t], team[t]) for t in TEAMS]

        # two trainer processes per team namespace, each on its own loopback address
        port, net = procs.free_port(), f"127.{random.randint(16, 250)}.{random.randint(0, 250)}"
        hosts = {(t, p): f"{net}.{10 + 2 * i + p}" for i, t in enumerate(TEAMS) for p in range(2)}
        pods = {(team[t], start_host(stack, team[t], p, ip, port)): ip for (t, p), ip in hosts.items()}

        def running() -> bool:
            got = {
                (ns, p["metadata"]["name"]): p["status"].get("podIP")
                for ns in team.values()
                for p in list_items("pods", ns)
                if p["status"].get("phase") == "Running"
            }
            return got == pods

        wait_for(running, timeout=60, message="trainer pods Running on their loopback nodes")

        # what a Prometheus Operator selecting these releases' PodMonitors would scrape
        monitors = [
            m
            for release in releases
            for m in kubectl_json("get", "podmonitors", "-A", "-l", f"app.kubernetes.io/instance={release}")[
                "items"
            ]
        ]
        assert len(monitors) == len(TEAMS), [m["metadata"]["name"] for m in monitors]
        targets_file = tmp_path / "pods.json"
        targets_file.write_text(json.dumps(discovered_targets(kubectl_json("get", "pods", "-A")["items"])))
        configs = [c for m in monitors for c in scrape_configs(m, targets_file)]
        (tmp_path / "scrape_configs.yaml").write_text(yaml.safe_dump(configs))
        work = tmp_path / "prometheus"
        work.mkdir()
        prom = Prometheus(prometheus_bin, work, procs.free_port(), [], [], scrape_configs=configs)
        stack.callback(prom.close)

        targets = settled_targets(prom, set(pods))
        per_pod = {}
        for t in targets:
            key = (t["labels"]["namespace"], t["labels"]["pod"])
            per_pod[key] = per_pod.get(key, 0) + 1
        assert per_pod == dict.fromkeys(pods, 1), f"scrapes per trainer pod: {per_pod}"

        # one series per process of the counter the issue names ...
        steps = prom.query("count by (namespace, rljob, process) (rljob_trainer_steps_total)")
        got = {
            (s["metric"]["namespace"], s["metric"]["rljob"], s["metric"]["process"]): s["value"][1]
            for s in steps
        }
        assert got == {(team[t], JOB, str(p)): "1" for (t, p) in hosts}, got

        # ... and of every trainer metric: as many series per process as the process's registry exposes
        reference = TrainerMetrics(rljob=JOB, process=0)
        reference(report(1))
        names = reference.names()
        exposed = [
            s.name for family in reference.registry.collect() for s in family.samples if s.name in names
        ]
        alternation = "|".join(sorted(set(exposed)))
        counts = prom.query(f'count by (namespace, process) ({{__name__=~"{alternation}"}})')
        got = {(s["metric"]["namespace"], s["metric"]["process"]): int(s["value"][1]) for s in counts}
        assert got == {(team[t], str(p)): len(exposed) for (t, p) in hosts}, got
        # no two series that differ only in target labels (aggregations drop __name__: keep it as `metric`)
        series = f'label_replace({{__name__=~"{alternation}"}}, "metric", "$1", "__name__", "(.+)")'
        duplicates = prom.query(f"count without (job, endpoint, instance, container, pod) ({series}) > 1")
        assert duplicates == [], duplicates[:5]
    elapsed = time.monotonic() - started
    print(f"two releases, 4 trainer processes, {len(exposed)} series each: {elapsed:.0f}s")
