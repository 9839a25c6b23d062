"""The Helm chart, offline: `helm lint --strict` and `helm template` with and without prometheus-operator's
CRDs. What the cluster does with it (PodSecurity admission, RBAC for real) is tests/e2e/test_chart.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from rljob_operator.render import render_jobset

from rljob.api import load_rljobs
from rljob.api.crd import CRD_FILENAME, crd_yaml
from tests.chart.helm import CHART, KUBE_VERSION, REPO, by_kind, helm, one, template

RULES_FILE = CHART / "files" / "rljob-alerts.rules.yaml"
DASHBOARD_FILE = CHART / "files" / "rljob-dashboard.json"
MONITORING_KINDS = {"ServiceMonitor", "PodMonitor", "PrometheusRule"}
# Verbs that let a subject read or change anything beyond what the operator does.
WILDCARD = "*"


def kinds(objs: list[dict[str, Any]]) -> set[str]:
    return {o["kind"] for o in objs}


def deployment_container(objs: list[dict[str, Any]]) -> dict[str, Any]:
    containers = one(objs, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e for e in container.get("env", [])}


def rules_of(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [rule for role in by_kind(objs, "ClusterRole") + by_kind(objs, "Role") for rule in role["rules"]]


def allows(objs: list[dict[str, Any]], group: str, resource: str, verb: str) -> bool:
    return any(
        group in r.get("apiGroups", [])
        and resource in r.get("resources", [])
        and (verb in r.get("verbs", []) or WILDCARD in r.get("verbs", []))
        for r in rules_of(objs)
    )


def chart_copy(tmp_path: Path, without: tuple[str, ...] = ()) -> Path:
    """A copy of the chart, minus the files named in `without` (relative to the chart)."""
    dest = tmp_path / "rljob"
    shutil.copytree(CHART, dest)
    for rel in without:
        (dest / rel).unlink(missing_ok=True)
    return dest


def notes(tmp_path: Path, *sets: str, monitoring: bool = False, without: tuple[str, ...] = ()) -> str:
    """NOTES.txt as `helm install` would print it. `helm template` never renders NOTES.txt, so a copy
    of the chart wraps it in a named template and renders that into a ConfigMap."""
    chart = chart_copy(tmp_path, without)
    text = (chart / "templates" / "NOTES.txt").read_text()
    (chart / "templates" / "_notes_under_test.tpl").write_text(
        '{{- define "test.notes" -}}\n' + text + "{{- end -}}\n"
    )
    (chart / "templates" / "notes-under-test.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes-under-test\n"
        'data:\n  notes: {{ include "test.notes" . | quote }}\n'
    )
    objs = template(*sets, monitoring=monitoring, chart=chart)
    return next(o for o in objs if o["metadata"]["name"] == "notes-under-test")["data"]["notes"]


# --- lint and the objects rendered ----------------------------------------------------------------


@pytest.mark.parametrize(
    "sets",
    [
        [],
        ["operator.watchNamespaces={team-a,team-b}"],
        ["trainer.securityContext.privileged=true", "metrics.serviceMonitor.labels.release=kps"],
    ],
    ids=["defaults", "namespaced", "privileged-trainer"],
)
def test_helm_lint_strict(sets: list[str]) -> None:
    args = ["lint", "--strict", "--kube-version", KUBE_VERSION, str(CHART)]
    for s in sets:
        args += ["--set", s]
    out = helm(*args)
    assert "0 chart(s) failed" in out.stdout, out.stdout


def test_without_monitoring_crds_no_monitoring_objects() -> None:
    objs = template()
    assert not kinds(objs) & MONITORING_KINDS
    assert {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Service", "Deployment"} <= kinds(objs)
    assert one(objs, "ClusterKopfPeering")["metadata"]["name"] == "rljob"
    # nothing rendered needs a CRD the chart does not ship or Kubernetes does not serve
    assert {o["apiVersion"].split("/")[0] for o in objs} <= {
        "v1",
        "apps",
        "rbac.authorization.k8s.io",
        "kopf.dev",
    }


def test_with_monitoring_crds_all_monitoring_objects() -> None:
    objs = template(monitoring=True)
    assert kinds(objs) & MONITORING_KINDS == {"ServiceMonitor", "PodMonitor", "PrometheusRule"}


def test_monitoring_objects_switched_by_values() -> None:
    objs = template(
        "metrics.serviceMonitor.enabled=false",
        "metrics.podMonitor.enabled=false",
        "metrics.prometheusRule.enabled=false",
        "dashboard.enabled=false",
        "metrics.service.enabled=false",
        monitoring=True,
    )
    assert not kinds(objs) & MONITORING_KINDS
    assert not by_kind(objs, "Service")
    assert not by_kind(objs, "ConfigMap")


def test_every_namespaced_object_is_in_the_release_namespace() -> None:
    objs = template(monitoring=True, namespace="ops")
    cluster_scoped = {"ClusterRole", "ClusterRoleBinding", "ClusterKopfPeering"}
    for o in objs:
        if o["kind"] in cluster_scoped:
            assert "namespace" not in o["metadata"], o["kind"]
        else:
            assert o["metadata"]["namespace"] == "ops", (o["kind"], o["metadata"]["name"])


# --- the operator Deployment ------------------------------------------------------------------------


def test_deployment_is_restricted_compliant() -> None:
    objs = template()
    pod = one(objs, "Deployment")["spec"]["template"]["spec"]
    c = deployment_container(objs)
    psc, sc = pod["securityContext"], c["securityContext"]
    assert psc["runAsNonRoot"] is True and psc["runAsUser"] != 0
    assert psc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert not sc.get("privileged")
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        assert not pod.get(field)
    # read-only root: /tmp is a writable emptyDir, and HOME points there
    volumes = {v["name"]: v for v in pod["volumes"]}
    tmp = next(m for m in c["volumeMounts"] if m["mountPath"] == "/tmp")
    assert "emptyDir" in volumes[tmp["name"]]
    assert not any("hostPath" in v for v in pod["volumes"])
    assert env_of(c)["HOME"]["value"] == "/tmp"


def test_deployment_liveness_metrics_and_args() -> None:
    objs = template()
    c = deployment_container(objs)
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert f"--liveness=http://0.0.0.0:{ports['health']}/healthz" in c["args"]
    assert f"--metrics-port={ports['metrics']}" in c["args"]
    assert "--all-namespaces" in c["args"]
    assert "--peering=rljob" in c["args"]  # the ClusterKopfPeering the chart creates
    assert env_of(c)["POD_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert c["resources"]["requests"] and c["resources"]["limits"]["memory"]
    assert c["image"] == "us-docker.pkg.dev/rljob/rljob/operator:0.1.0"  # tag defaults to appVersion
    dep = one(objs, "Deployment")
    assert dep["spec"]["replicas"] == 1 and dep["spec"]["strategy"]["type"] == "Recreate"
    assert (
        dep["spec"]["template"]["spec"]["serviceAccountName"]
        == one(objs, "ServiceAccount")["metadata"]["name"]
    )


def test_metrics_service_selects_the_operator_pod() -> None:
    objs = template()
    svc = one(objs, "Service")
    pod_labels = one(objs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= pod_labels.items()
    assert svc["spec"]["ports"][0]["targetPort"] == "metrics"


def test_trainer_security_context_is_passed_to_the_operator() -> None:
    assert "RLJOB_TRAINER_SECURITY_CONTEXT" not in env_of(deployment_container(template()))
    objs = template("trainer.securityContext.privileged=true", "trainer.securityContext.runAsUser=0")
    value = env_of(deployment_container(objs))["RLJOB_TRAINER_SECURITY_CONTEXT"]["value"]
    assert json.loads(value) == {"privileged": True, "runAsUser": 0}


def test_progress_interval_is_a_value() -> None:
    """operator.progressIntervalSeconds reaches the operator's RLJOB_PROGRESS_INTERVAL_SECONDS."""
    env = env_of(deployment_container(template()))
    assert env["RLJOB_PROGRESS_INTERVAL_SECONDS"]["value"] == "30"  # the operator's own default
    for value in ("0", "15"):  # --set gives integers; a values file may give 2.5
        objs = template(f"operator.progressIntervalSeconds={value}")
        assert env_of(deployment_container(objs))["RLJOB_PROGRESS_INTERVAL_SECONDS"]["value"] == value


# --- RBAC ---------------------------------------------------------------------------------------------


def test_rbac_has_nothing_on_secrets_and_pods_only_listed_and_watched() -> None:
    for sets in ([], ["operator.watchNamespaces={team-a}"]):
        for rule in rules_of(template(*sets)):
            assert WILDCARD not in rule.get("apiGroups", []), rule
            assert WILDCARD not in rule.get("resources", []), rule
            assert WILDCARD not in rule.get("verbs", []), rule
            assert "secrets" not in rule.get("resources", []), rule
            # the Job controller creates the pods; the operator only lists them (trainer host 0's IP) and
            # watches them (ContainersWaiting)
            assert not {"pods/exec", "pods/log", "pods/attach"} & set(rule.get("resources", [])), rule
            if "pods" in rule.get("resources", []):
                assert rule["resources"] == ["pods"] and rule["verbs"] == ["list", "watch"], rule
            assert not {"escalate", "bind", "impersonate", "delete", "deletecollection"} & set(
                rule["verbs"]
            ), rule


def test_rbac_grants_what_the_operator_and_kopf_call() -> None:
    objs = template()
    needed = [
        ("rljob.dev", "rljobs", v) for v in ("get", "list", "watch", "patch")
    ] + [
        ("rljob.dev", "rljobs/status", "patch"),
        ("jobset.x-k8s.io", "jobsets", "create"),
        ("jobset.x-k8s.io", "jobsets", "get"),
        ("jobset.x-k8s.io", "jobsets", "watch"),
        ("jobset.x-k8s.io", "jobsets", "patch"),
        ("kueue.x-k8s.io", "workloads", "list"),
        ("kueue.x-k8s.io", "workloads", "patch"),
        ("", "configmaps", "create"),
        ("", "configmaps", "get"),
        ("", "events", "create"),
        ("", "pods", "list"),
        ("", "pods", "watch"),
        ("kopf.dev", "clusterkopfpeerings", "patch"),
        ("kopf.dev", "clusterkopfpeerings", "watch"),
        ("apiextensions.k8s.io", "customresourcedefinitions", "watch"),
    ]  # fmt: skip
    missing = [n for n in needed if not allows(objs, *n)]
    assert not missing
    # read-only where the operator only reads; ConfigMaps are never updated or listed
    assert not allows(objs, "", "configmaps", "update")
    assert not allows(objs, "apiextensions.k8s.io", "customresourcedefinitions", "patch")
    assert not allows(objs, "rljob.dev", "rljobs", "create")


def test_rbac_cluster_wide_by_default_per_namespace_when_restricted() -> None:
    objs = template()
    sa = one(objs, "ServiceAccount")["metadata"]
    bindings = by_kind(objs, "ClusterRoleBinding")
    assert {b["roleRef"]["name"] for b in bindings} == {"rljob", "rljob-cluster"}
    for b in bindings:
        assert b["subjects"] == [{"kind": "ServiceAccount", "name": sa["name"], "namespace": sa["namespace"]}]
    assert not by_kind(objs, "RoleBinding")

    objs = template("operator.watchNamespaces={team-a,team-b}")
    assert {b["roleRef"]["name"] for b in by_kind(objs, "ClusterRoleBinding")} == {"rljob-cluster"}
    role_bindings = by_kind(objs, "RoleBinding")
    assert {b["metadata"]["namespace"] for b in role_bindings} == {"team-a", "team-b"}
    assert {b["roleRef"]["name"] for b in role_bindings} == {"rljob"}
    assert {p["metadata"]["namespace"] for p in by_kind(objs, "KopfPeering")} == {"team-a", "team-b"}
    assert not by_kind(objs, "ClusterKopfPeering")
    args = deployment_container(objs)["args"]
    assert "--namespace=team-a" in args and "--namespace=team-b" in args and "--all-namespaces" not in args


# --- monitoring objects -------------------------------------------------------------------------------


def test_pod_monitor_selects_trainer_pods_and_relabels_jobset_labels() -> None:
    pm = one(template(monitoring=True), "PodMonitor")
    assert pm["spec"]["selector"] == {"matchLabels": {"rljob.dev/role": "trainer"}}
    assert pm["spec"]["namespaceSelector"] == {"any": True}
    (endpoint,) = pm["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] == "metrics"
    targets = {r["sourceLabels"][0]: r["targetLabel"] for r in endpoint["relabelings"]}
    assert targets["__meta_kubernetes_pod_label_jobset_sigs_k8s_io_jobset_name"] == "jobset"
    assert targets["__meta_kubernetes_pod_label_jobset_sigs_k8s_io_job_global_index"] == "job_global_index"
    assert targets["__meta_kubernetes_pod_label_jobset_sigs_k8s_io_restart_attempt"] == "restart_attempt"
    # the trainer exports these itself; relabelling them too would add exported_* duplicates
    assert not {"rljob", "process"} & set(targets.values())

    pm = one(template("metrics.podMonitor.namespaces={ml}", monitoring=True), "PodMonitor")
    assert pm["spec"]["namespaceSelector"] == {"matchNames": ["ml"]}


def test_pod_monitor_matches_the_pods_the_operator_renders() -> None:
    pm = one(template(monitoring=True), "PodMonitor")
    job = load_rljobs(REPO / "examples" / "rljob-v5e.yaml")[0]
    pod = render_jobset(job)["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    assert pm["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    port_names = {p["name"] for c in pod["spec"]["containers"] for p in c.get("ports", [])}
    assert pm["spec"]["podMetricsEndpoints"][0]["port"] in port_names


def test_service_monitor_selects_the_metrics_service() -> None:
    objs = template("metrics.serviceMonitor.labels.release=kps", monitoring=True, namespace="ops")
    sm, svc = one(objs, "ServiceMonitor"), one(objs, "Service")
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert sm["spec"]["namespaceSelector"] == {"matchNames": ["ops"]}
    assert sm["spec"]["endpoints"][0]["port"] == svc["spec"]["ports"][0]["name"]
    assert sm["metadata"]["labels"]["release"] == "kps"


def test_prometheus_rule_is_the_rules_file_unchanged() -> None:
    rule = one(template("metrics.prometheusRule.labels.release=kps", monitoring=True), "PrometheusRule")
    assert rule["spec"] == yaml.safe_load(RULES_FILE.read_text())
    assert rule["spec"]["groups"], "the rules file has no groups"
    assert rule["metadata"]["labels"]["release"] == "kps"


def test_dashboard_config_map_is_the_dashboard_file() -> None:
    cm = one(template(), "ConfigMap")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(cm["data"]["rljob-dashboard.json"]) == json.loads(DASHBOARD_FILE.read_text())
    cm = one(template("dashboard.namespace=grafana", "dashboard.labels.team=ml"), "ConfigMap")
    assert cm["metadata"]["namespace"] == "grafana" and cm["metadata"]["labels"]["team"] == "ml"


def test_missing_rules_and_dashboard_files_are_skipped_not_fatal(tmp_path: Path) -> None:
    chart = chart_copy(tmp_path, without=("files/rljob-alerts.rules.yaml", "files/rljob-dashboard.json"))
    objs = template(monitoring=True, chart=chart)
    assert "PrometheusRule" not in kinds(objs) and "ConfigMap" not in kinds(objs)
    assert {"ServiceMonitor", "PodMonitor"} <= kinds(objs)


# --- NOTES.txt ----------------------------------------------------------------------------------------


def test_notes_say_what_to_run_next(tmp_path: Path) -> None:
    text = notes(tmp_path, monitoring=True)
    assert "kubectl apply -f examples/rljob-v5e.yaml" in text
    assert "kubectl get rlj" in text
    assert "kubectl apply --server-side -f crds/" in text
    assert "SKIPPED" not in text


def test_notes_explain_skipped_monitoring(tmp_path: Path) -> None:
    text = notes(tmp_path / "a", monitoring=False)
    assert "SKIPPED the ServiceMonitor, PodMonitor and PrometheusRule" in text
    assert "monitoring.coreos.com/v1" in text
    text = notes(tmp_path / "b", monitoring=True, without=("files/rljob-alerts.rules.yaml",))
    assert "SKIPPED the PrometheusRule" in text


# --- values.schema.json -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ("replicaCount=2", "replicaCount"),
        ("no.such.key=1", "additional properties"),
        ("operator.watchNamespaces={team-*}", "watchNamespaces"),
        ("metrics.serviceMonitor.interval=often", "interval"),
        ("operator.metricsPort=80", "metricsPort"),
        ("operator.progressIntervalSeconds=-1", "progressIntervalSeconds"),
    ],
)
def test_schema_rejects_bad_values(bad: str, message: str) -> None:
    proc = helm("template", "rljob", str(CHART), "--kube-version", KUBE_VERSION, "--set", bad, check=False)
    assert proc.returncode != 0
    assert message in proc.stderr, proc.stderr


# --- CRDs -----------------------------------------------------------------------------------------------


def test_chart_crd_is_the_generated_crd() -> None:
    chart_crd = (CHART / "crds" / CRD_FILENAME).read_text()
    assert chart_crd == (REPO / "crds" / CRD_FILENAME).read_text(), (
        "run `rljob crd -o crds -o charts/rljob/crds`"
    )
    assert chart_crd == crd_yaml()


def test_chart_ships_kopf_peering_crds() -> None:
    names = {
        doc["metadata"]["name"]
        for path in (CHART / "crds").glob("*.yaml")
        for doc in yaml.safe_load_all(path.read_text())
        if doc and doc["kind"] == "CustomResourceDefinition"
    }
    assert names == {"rljobs.rljob.dev", "clusterkopfpeerings.kopf.dev", "kopfpeerings.kopf.dev"}
