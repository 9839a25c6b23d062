"""The user's whole path on the simulated cluster, with containers that really run: the rehearsal.

`helm install` the chart with the locally built operator image (hack/image.sh), whose pod runs on the real
node (hack/cluster/node.sh: kubelet + containerd); `kubectl apply` the tiny example as an RLJob with the
local trainer image, JAX on CPU through spec.env and checkpoints to gs:// on fake-gcs-server; the operator
renders the JobSet, the trainer pod trains in its container on the real node, a real Prometheus scrapes it
through the chart's PodMonitor relabelling (tests/e2e/podmonitor_scrape.py: the pods' discovery labels
written to a file_sd file, as Debian's Prometheus has no kubernetes_sd_configs), `kubectl get rlj` shows
STEP, REWARD and ETA moving, and the RLJob ends Succeeded. The failure half: the pod deleted mid-run resumes from its
SIGTERM checkpoint in the JobSet's restarted pod (Restarts 1, no step skipped), the trainer process
frozen whole with SIGSTOP (its /metrics stops answering, the target goes down; the stall alert fires on
the last-step timestamp it served last, and resolves after SIGCONT),
an image the node does not have (ContainersWaiting with the kubelet's reason), a config the trainer
refuses (exit 2: Failed, no restart).

The log (pytest -s, or the captured output of a failure) shows the container and image IDs, the steps,
the progress columns, the scrape and the phases.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests import procs
from tests.e2e import rehearsal
from tests.e2e.kube import condition, fresh_namespace, get, kubectl, list_items, wait_for
from tests.e2e.podmonitor_scrape import discovered_targets, scrape_configs
from tests.e2e.test_chart import CHART, helm, helm_cleanup
from tests.observability.conftest import RULES, find_binary
from tests.observability.prom import Prometheus
from tests.trainer.gcs import gcs  # noqa: F401  (fixture)

pytestmark = pytest.mark.cluster

EXAMPLE = rehearsal.REPO / "examples" / "tiny-cpu.yaml"
BUCKET = "rehearsal"


def say(*parts: Any) -> None:
    print(f"[rehearsal {time.strftime('%H:%M:%S')}]", *parts, flush=True)


@pytest.fixture(scope="module")
def stage(cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The images on the node, a namespace, and the chart installed there with the local operator image,
    its pod on the real node. Yields namespace, release and the rendered PodMonitor."""
    ids = rehearsal.import_images(rehearsal.OPERATOR_IMAGE, rehearsal.TRAINER_IMAGE)
    for image, image_id in ids.items():
        say("image on the node:", image, image_id)
    work = tmp_path_factory.mktemp("rehearsal")
    with fresh_namespace("rehearsal") as ns:
        release = f"rljob-{uuid.uuid4().hex[:6]}"
        values = {
            "image": dict(zip(("repository", "tag"), rehearsal.OPERATOR_IMAGE.rsplit(":", 1), strict=True)),
            "operator": {"watchNamespaces": [ns], "progressIntervalSeconds": 2},
            "nodeSelector": {"kubernetes.io/hostname": rehearsal.NODE_NAME},
            "tolerations": rehearsal.NODE_TOLERATIONS,
            "metrics": {"podMonitor": {"interval": "1s"}},
        }
        (work / "values.yaml").write_text(yaml.safe_dump(values))
        args = [str(CHART), "--namespace", ns, "-f", str(work / "values.yaml")]
        pod_monitor = next(
            d
            for d in yaml.safe_load_all(
                helm(
                    "template",
                    release,
                    *args,
                    "--api-versions",
                    "monitoring.coreos.com/v1",
                    "--kube-version",
                    "1.36.3",
                )
            )
            if d and d["kind"] == "PodMonitor"
        )
        try:
            t0 = time.monotonic()
            helm("install", release, *args, "--wait", "--timeout", "240s")
            pod = list_items("pods", ns, f"app.kubernetes.io/instance={release}")[0]
            cs = pod["status"]["containerStatuses"][0]
            say(f"helm install: operator pod {pod['metadata']['name']} Ready in {time.monotonic() - t0:.0f}s")
            say("operator container", cs["containerID"], "image", cs["image"], "imageID", cs["imageID"])
            assert pod["spec"]["nodeName"] == rehearsal.NODE_NAME, pod["spec"].get("nodeName")
            assert cs["imageID"].endswith(ids[rehearsal.OPERATOR_IMAGE].split(":")[-1]), (cs, ids)
            yield {"ns": ns, "release": release, "pod_monitor": pod_monitor, "work": work, "ids": ids}
        finally:
            if pod := next(iter(list_items("pods", ns, f"app.kubernetes.io/instance={release}")), None):
                log = kubectl("logs", "-n", ns, pod["metadata"]["name"], "--tail=40", check=False)
                say("operator log (tail):\n" + log)
            # RLJobs first, while the operator runs to remove its finalizer: else the namespace hangs.
            kubectl("delete", "rljobs", "--all", "-n", ns, "--wait=true", "--timeout=120s", check=False)
            helm_cleanup(release, ns)


def rljob(name: str, *, image: str = rehearsal.TRAINER_IMAGE, **spec: Any) -> dict[str, Any]:
    """The tiny example (examples/tiny-cpu.yaml) for the real node: the local image, its shape, JAX on CPU."""
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["metadata"] = {"name": name}
    doc["spec"].update(image=image, tpu=dict(rehearsal.TPU), env=[{"name": "JAX_PLATFORMS", "value": "cpu"}])
    doc["spec"].update(spec)
    return doc


def apply(doc: dict[str, Any], ns: str) -> None:
    kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump(doc))


def phase(name: str, ns: str) -> str:
    return ((get("rljob", name, ns) or {}).get("status") or {}).get("phase", "")


def trainer_pods(name: str, ns: str) -> list[dict[str, Any]]:
    return list_items("pods", ns, f"rljob.dev/name={name}")


def running_trainer(name: str, ns: str, attempt: str) -> dict[str, Any] | None:
    for p in trainer_pods(name, ns):
        labels = p["metadata"]["labels"]
        statuses = p["status"].get("containerStatuses") or [{}]
        if labels.get("jobset.sigs.k8s.io/restart-attempt") == attempt and "running" in statuses[0].get(
            "state", {}
        ):
            return p
    return None


class Discovery:
    """Pod discovery for the rehearsal's Prometheus: the namespace's pods, as Kubernetes discovery would
    label them, written to a file_sd file every second (tests/e2e/podmonitor_scrape.py says why)."""

    def __init__(self, ns: str, path: Path) -> None:
        self.ns, self.path = ns, path
        self._write()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _write(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(discovered_targets(list_items("pods", self.ns))))
        tmp.rename(self.path)

    def _run(self) -> None:
        while not self._stop.wait(1):
            try:
                self._write()
            except Exception as exc:  # the apiserver briefly unavailable: keep the last targets
                say("discovery:", exc)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def test_missing_image_shows_the_kubelets_reason(stage: dict[str, Any]) -> None:
    ns, name = stage["ns"], "no-image"
    apply(rljob(name, image="localhost/rljob-not-built:dev"), ns)
    try:

        def waiting() -> dict[str, Any] | None:
            c = condition(get("rljob", name, ns), "ContainersWaiting")
            return c if c and c["status"] == "True" else None

        cond = wait_for(waiting, timeout=120, message="ContainersWaiting on the RLJob")
        say(f"missing image: phase {phase(name, ns)}, ContainersWaiting {cond['reason']}: {cond['message']}")
        assert cond["reason"] in ("ErrImagePull", "ImagePullBackOff"), cond
        assert "localhost/rljob-not-built:dev" in cond["message"], cond
        assert phase(name, ns) == "Pending"
    finally:
        kubectl("delete", "rljob", name, "-n", ns, "--wait=true", "--timeout=60s", check=False)
        wait_for(
            lambda: not trainer_pods(name, ns), timeout=90, message="the pod gone (frees the node's chips)"
        )


def test_config_the_trainer_refuses_fails_without_restart(stage: dict[str, Any]) -> None:
    ns, name = stage["ns"], "refused"
    doc = rljob(name)
    doc["spec"]["data"] = {**doc["spec"]["data"], "source": "examples/tiny/no-such-file.jsonl"}
    apply(doc, ns)
    try:
        wait_for(lambda: phase(name, ns) == "Failed", timeout=240, message="Failed")
        obj = get("rljob", name, ns) or {}
        failed = condition(obj, "Failed") or {}
        pod = trainer_pods(name, ns)[0]
        term = pod["status"]["containerStatuses"][0]["state"]["terminated"]
        say(
            f"refused config: exit {term['exitCode']}, Failed {failed.get('reason')}: {failed.get('message')}"
        )
        say("its log (kubectl logs):", kubectl("logs", "-n", ns, pod["metadata"]["name"]).strip()[-300:])
        assert term["exitCode"] == 2, term
        assert obj["status"]["restarts"] == 0 and len(trainer_pods(name, ns)) == 1
    finally:
        kubectl("delete", "rljob", name, "-n", ns, "--wait=true", "--timeout=60s", check=False)
        wait_for(lambda: not trainer_pods(name, ns), timeout=90, message="the pod gone")


def test_train_scrape_resume_stall_succeed(
    stage: dict[str, Any],
    gcs: Any,  # noqa: F811
    tmp_path: Path,
) -> None:
    ns, name = stage["ns"], "tiny"
    prometheus = find_binary("prometheus")
    assert prometheus is not None, "prometheus not found (hack/cluster/build.sh caches it)"
    gcs.client().create_bucket(BUCKET)
    port = procs.free_port()
    doc = rljob(name, metrics={"port": port, "stallThresholdSeconds": 30})
    doc["spec"]["env"].append({"name": "STORAGE_EMULATOR_HOST", "value": gcs.url})
    doc["spec"]["checkpoint"] = {"directory": f"gs://{BUCKET}/{name}", "interval": 5}
    doc["spec"]["grpo"]["maxSteps"] = 60
    targets = tmp_path / "targets.json"
    discovery = Discovery(ns, targets)
    prom = Prometheus(
        prometheus,
        tmp_path,
        procs.free_port(),
        targets=[],
        rule_files=[RULES],
        scrape_configs=scrape_configs(stage["pod_monitor"], targets),
    )
    t0 = time.monotonic()
    try:
        apply(doc, ns)
        pod = wait_for(lambda: running_trainer(name, ns, "0"), timeout=180, message="trainer pod Running")
        cs = pod["status"]["containerStatuses"][0]
        say(
            f"trainer pod {pod['metadata']['name']} on {pod['spec']['nodeName']} ({time.monotonic() - t0:.0f}s)"
        )
        say("trainer container", cs["containerID"], "image", cs["image"], "imageID", cs["imageID"])
        assert pod["spec"]["nodeName"] == rehearsal.NODE_NAME
        assert cs["imageID"].endswith(stage["ids"][rehearsal.TRAINER_IMAGE].split(":")[-1]), cs

        # STEP, REWARD and ETA moving in `kubectl get rlj`, from the trainer's metrics via the operator.
        rows: list[dict[str, str]] = []

        def moving() -> bool:
            row = rehearsal.rlj_row(name, ns)
            shown = {k: row.get(k, "") for k in ("PHASE", "STEP", "REWARD", "ETA")}
            if not rows or shown != rows[-1]:
                rows.append(shown)
                say("kubectl get rlj:", row)
            steps = {r["STEP"] for r in rows if r["REWARD"] and r["ETA"]}
            return len(steps) >= 2

        wait_for(moving, timeout=300, interval=1, message="STEP, REWARD, ETA moving in kubectl get rlj")

        # The scrape: the series carry the PodMonitor's relabelled target labels.
        sel = f'rljob_trainer_global_step{{namespace="{ns}",rljob="{name}"}}'
        series = prom.wait_for(lambda: prom.query(sel), timeout=60, what="the trainer scraped")
        say("scraped:", series)
        labels = series[0]["metric"]
        assert labels["node"] == rehearsal.NODE_NAME and labels["restart_attempt"] == "0", labels
        assert labels["jobset"] == name and labels["pod"] == pod["metadata"]["name"], labels

        # Delete the pod mid-run after a checkpoint: SIGTERM -> checkpoint -> the JobSet restarts it.
        # The old pod's log is followed through its stop: the step its SIGTERM save wrote is in the
        # trainer's own words (steps take ~0.1 s, so the last scrape before the exit may be a step behind).
        wait_for(lambda: float(prom.query(sel)[0]["value"][1]) >= 6, timeout=300, message="step 6")
        old_log = tmp_path / "attempt0.log"
        with old_log.open("w") as out:
            follow = subprocess.Popen(
                ["kubectl", "logs", "-f", "-n", ns, pod["metadata"]["name"]],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        try:
            wait_for(lambda: old_log.stat().st_size > 0, timeout=30, message="attempt 0's log followed")
            kubectl("delete", "pod", "-n", ns, pod["metadata"]["name"], "--wait=false")
            say("deleted", pod["metadata"]["name"])
            new = wait_for(
                lambda: running_trainer(name, ns, "1"), timeout=240, message="restarted pod Running"
            )
            say("restarted pod", new["metadata"]["name"])
            with contextlib.suppress(subprocess.TimeoutExpired):  # the stream ends with the container
                follow.wait(timeout=60)
        finally:
            follow.kill()
        # Either path of a SIGTERM (checkpoint.Checkpointer): mid-update, the step finishes and is saved;
        # during a step's rollout or rewards (before its first update), the last finished step is saved at once.
        stops = re.findall(
            r"SIGTERM: stopping after step (\d+) \(checkpoint saved\)"
            r"|SIGTERM during the rollout or rewards of step \d+: step (\d+) is saved",
            old_log.read_text(),
        )
        assert len(stops) == 1, "attempt 0 should stop once on SIGTERM:\n" + old_log.read_text()[-2000:]
        saved = float(stops[0][0] or stops[0][1])
        old_last = prom.wait_for(
            lambda: prom.query(f'max_over_time({sel[:-1]},restart_attempt="0"}}[10m])'),
            60,
            "attempt 0's steps",
        )
        scraped = float(old_last[0]["value"][1])
        assert scraped <= saved, f"attempt 0 was scraped at step {scraped:.0f} but saved step {saved:.0f}"
        resumed_sel = f'rljob_trainer_resumed_step{{namespace="{ns}",rljob="{name}",restart_attempt="1"}} > 0'
        new_first = prom.wait_for(lambda: prom.query(resumed_sel), 240, "attempt 1 resumed from a checkpoint")
        resumed = float(new_first[0]["value"][1])
        say(
            f"attempt 0 scraped at step {scraped:.0f}, stopped after step {saved:.0f}; attempt 1 resumed from {resumed:.0f}"
        )
        assert resumed == saved, "a step was skipped or repeated across the restart"
        wait_for(lambda: (get("rljob", name, ns) or {}).get("status", {}).get("restarts") == 1, timeout=60)

        # The stall: the trainer process frozen whole (SIGSTOP: its /metrics thread too, so the scrape
        # times out, `up` is 0 and its series go stale), then continued. While its pod's target is down,
        # the stall rule reads the last-step timestamp the trainer served last.
        cid = new["status"]["containerStatuses"][0]["containerID"]
        pid = rehearsal.trainer_pid(cid)
        stepped = f'rljob_trainer_steps_total{{namespace="{ns}",rljob="{name}",restart_attempt="1"}} > 0'
        prom.wait_for(lambda: prom.query(stepped), 300, "a step of the restarted trainer")
        target_down = f'up{{pod="{new["metadata"]["name"]}"}} == 0'
        os.kill(pid, signal.SIGSTOP)
        try:
            say(f"trainer pid {pid}: SIGSTOP")
            say("target down:", prom.wait_for(lambda: prom.query(target_down), 30, "the trainer target down"))
            alert = prom.wait_for(
                lambda: prom.firing("RLJobTrainingStalled"), 120, "RLJobTrainingStalled firing"
            )
            say("firing:", alert)
            assert not prom.query(sel), "the stopped trainer's series should be stale"
        finally:
            os.kill(pid, signal.SIGCONT)
        say(f"trainer pid {pid}: SIGCONT")
        prom.wait_for(lambda: not prom.alerts("RLJobTrainingStalled"), 120, "RLJobTrainingStalled resolved")
        say("RLJobTrainingStalled resolved")

        wait_for(lambda: phase(name, ns) == "Succeeded", timeout=600, interval=2, message="Succeeded")
        say("kubectl get rlj:", rehearsal.rlj_row(name, ns))
        logs = kubectl("logs", "-n", ns, new["metadata"]["name"])
        say("trainer log (kubectl logs, tail):\n" + "\n".join(logs.splitlines()[-8:]))
        assert logs.strip()
        say(f"Succeeded after {time.monotonic() - t0:.0f}s")
    finally:
        discovery.stop()
        prom.close()
        say("prometheus log tail:", prom.log.read_text()[-1000:])
