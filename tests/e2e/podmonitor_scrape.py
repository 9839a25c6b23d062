"""A stand-in for the Prometheus Operator: PodMonitor objects (as read back from the apiserver) in,
Prometheus ``scrape_configs`` out.

Why a stand-in: the simulated cluster runs no Prometheus Operator (kwok runs no containers), but the
question "how many times is each trainer scraped" is decided by what the operator generates from the
PodMonitors: one job per ``podMetricsEndpoints`` entry, pod discovery in the namespaces of
``namespaceSelector``, a ``keep`` per ``selector.matchLabels`` entry and on the port name, the target
labels ``namespace``/``pod``/``container``/``job``/``endpoint``, then the user's ``relabelings``. This
module writes that down for the fields the chart uses (and refuses the ones it does not, rather than
ignore them), following prometheus-operator's generated configuration (``generatePodMonitorConfig`` in
``pkg/prometheus/promcfg.go`` and its golden files).

Discovery: the operator would use ``kubernetes_sd_configs`` (role ``pod``, ``namespaces.names`` from the
``namespaceSelector``), but Debian's prometheus package, the one the cluster tooling caches, is built
without Kubernetes discovery. So ``discovered_targets`` lists the pods the way that role does (one target
per container port at ``podIP:port``, with the same ``__meta_kubernetes_*`` labels; pods without an IP
left out) into a ``file_sd_configs`` file, and the ``namespaceSelector`` becomes a ``keep`` on
``__meta_kubernetes_namespace``, the first relabel rule (same effect: only those namespaces' pods stay).
Every rule after discovery runs in the real Prometheus.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

# PodMonitor relabeling keys (camelCase in the CRD) -> Prometheus relabel_config keys.
_RELABEL_KEYS = {
    "sourceLabels": "source_labels",
    "separator": "separator",
    "targetLabel": "target_label",
    "regex": "regex",
    "modulus": "modulus",
    "replacement": "replacement",
    "action": "action",
}
_SUPPORTED_ENDPOINT_KEYS = {"port", "path", "interval", "relabelings"}


def _label_name(key: str) -> str:
    """A Kubernetes label key as Prometheus' discovery meta label suffix (non [a-zA-Z0-9_] -> ``_``)."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", key)


def _namespaces(monitor: dict[str, Any]) -> list[str] | None:
    """The namespaces to discover pods in; None for all (``any: true``). Neither ``any`` nor
    ``matchNames`` means the PodMonitor's own namespace, as in prometheus-operator."""
    selector = monitor["spec"].get("namespaceSelector") or {}
    if selector.get("any"):
        return None
    return list(selector.get("matchNames") or [monitor["metadata"]["namespace"]])


def _relabel(rule: dict[str, Any]) -> dict[str, Any]:
    unknown = set(rule) - set(_RELABEL_KEYS)
    assert not unknown, f"relabeling keys this stand-in does not translate: {unknown}"
    out = {_RELABEL_KEYS[k]: v for k, v in rule.items()}
    if "action" in out:
        out["action"] = out["action"].lower()
    return out


def discovered_targets(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``pods`` (Pod objects from the apiserver) as file_sd target groups with the labels Prometheus'
    Kubernetes discovery (role ``pod``) gives them: one group per container port."""
    groups = []
    for pod in pods:
        meta, status = pod["metadata"], pod.get("status") or {}
        ip = status.get("podIP")
        if not ip:
            continue
        common = {
            "__meta_kubernetes_namespace": meta["namespace"],
            "__meta_kubernetes_pod_name": meta["name"],
            "__meta_kubernetes_pod_ip": ip,
            "__meta_kubernetes_pod_node_name": pod["spec"].get("nodeName", ""),
            "__meta_kubernetes_pod_phase": status.get("phase", ""),
        }
        for key, value in (meta.get("labels") or {}).items():
            common[f"__meta_kubernetes_pod_label_{_label_name(key)}"] = value
            common[f"__meta_kubernetes_pod_labelpresent_{_label_name(key)}"] = "true"
        for container in pod["spec"]["containers"]:
            for port in container.get("ports") or []:
                labels = {
                    **common,
                    "__meta_kubernetes_pod_container_name": container["name"],
                    "__meta_kubernetes_pod_container_port_name": port.get("name", ""),
                    "__meta_kubernetes_pod_container_port_number": str(port["containerPort"]),
                    "__meta_kubernetes_pod_container_port_protocol": port.get("protocol", "TCP"),
                }
                groups.append({"targets": [f"{ip}:{port['containerPort']}"], "labels": labels})
    return groups


def scrape_configs(monitor: dict[str, Any], targets_file: Path) -> list[dict[str, Any]]:
    """One scrape config per ``podMetricsEndpoints`` entry of ``monitor``, over the pods listed in
    ``targets_file`` (``discovered_targets``)."""
    meta, spec = monitor["metadata"], monitor["spec"]
    selector = spec.get("selector") or {}
    assert not selector.get("matchExpressions"), "matchExpressions: not translated by this stand-in"
    sd: dict[str, Any] = {"files": [str(targets_file)], "refresh_interval": "1s"}
    namespaces = _namespaces(monitor)
    in_namespaces = (
        []
        if namespaces is None
        else [
            {
                "source_labels": ["__meta_kubernetes_namespace"],
                "regex": "|".join(re.escape(n) for n in namespaces),
                "action": "keep",
            }
        ]
    )

    configs = []
    for i, endpoint in enumerate(spec["podMetricsEndpoints"]):
        unknown = set(endpoint) - _SUPPORTED_ENDPOINT_KEYS
        assert not unknown, f"podMetricsEndpoints keys this stand-in does not translate: {unknown}"
        relabel: list[dict[str, Any]] = [
            *in_namespaces,
            # pods that have finished are not scraped
            {
                "source_labels": ["__meta_kubernetes_pod_phase"],
                "regex": "(Failed|Succeeded)",
                "action": "drop",
            },
        ]
        for key, value in (selector.get("matchLabels") or {}).items():
            name = _label_name(key)
            relabel.append(
                {
                    "source_labels": [
                        f"__meta_kubernetes_pod_label_{name}",
                        f"__meta_kubernetes_pod_labelpresent_{name}",
                    ],
                    "regex": f"({re.escape(value)});true",
                    "action": "keep",
                }
            )
        relabel += [
            {
                "source_labels": ["__meta_kubernetes_pod_container_port_name"],
                "regex": endpoint["port"],
                "action": "keep",
            },
            {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
            {"source_labels": ["__meta_kubernetes_pod_container_name"], "target_label": "container"},
            {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
            {"target_label": "job", "replacement": f"{meta['namespace']}/{meta['name']}"},
            {"target_label": "endpoint", "replacement": endpoint["port"]},
            *(_relabel(r) for r in endpoint.get("relabelings") or []),
        ]
        config: dict[str, Any] = {
            "job_name": f"podMonitor/{meta['namespace']}/{meta['name']}/{i}",
            "honor_labels": False,
            "metrics_path": endpoint.get("path", "/metrics"),
            "file_sd_configs": [sd],
            "relabel_configs": relabel,
        }
        if "interval" in endpoint:
            config["scrape_interval"] = endpoint["interval"]
            config["scrape_timeout"] = endpoint["interval"]
        configs.append(config)
    return configs
