"""Restart kube-apiserver while RLJobs run: the operator reconnects and statuses converge.

Every watch the operator holds breaks and every request in flight fails while the apiserver is down. After
it is back, the operator must notice changes again without being restarted itself: a suspend toggled
after the restart reaches the JobSet and the status, a new RLJob gets its JobSet, and every status is what
``compute_status`` says for its JobSet.

hack/cluster/ has no "restart one component" script, so ``restart_apiserver`` does it from what up.sh
leaves behind: the pid file and the running process's command line, executable, working directory and
environment (/proc), under the cluster lock that up.sh and down.sh take, writing the new pid back so that
down.sh stops the new process.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.kube import get, kubectl, kubectl_json, wait_for
from tests.e2e.operator_proc import (
    OperatorProcess,
    children_problems,
    delete_rljobs,
    install_crd,
    status_problems,
)

pytestmark = pytest.mark.cluster


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (if the process happened to be our child) counts as gone
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split(") ", 1)[1][:1] != "Z"


def restart_apiserver(cluster_dir: Path, down_s: float = 3) -> float:
    """Stop kube-apiserver (SIGTERM, SIGKILL after 30 s), keep it down ``down_s`` seconds, start it again
    exactly as up.sh did. Returns the seconds until /readyz answered again."""
    pid_file = cluster_dir / "pids" / "kube-apiserver.pid"
    with open(f"{cluster_dir}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        pid = int(pid_file.read_text())
        proc = Path(f"/proc/{pid}")
        argv = (proc / "cmdline").read_bytes().rstrip(b"\0").split(b"\0")
        assert b"kube-apiserver" in argv[0], argv[0]
        exe, cwd = os.readlink(proc / "exe"), os.readlink(proc / "cwd")
        env = dict(kv.split(b"=", 1) for kv in (proc / "environ").read_bytes().split(b"\0") if b"=" in kv)
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
        time.sleep(down_s)
        started = time.monotonic()
        with (cluster_dir / "logs" / "kube-apiserver.log").open("ab") as log:
            new = subprocess.Popen(
                [exe, *argv[1:]], cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        pid_file.write_text(f"{new.pid}\n")
    wait_for(lambda: kubectl("get", "--raw", "/readyz", check=False, timeout=10).strip() == "ok",
             timeout=120, interval=1, message="kube-apiserver /readyz after the restart")  # fmt: skip
    return time.monotonic() - started


def rljob(name: str, accelerator: str, topology: str) -> dict[str, Any]:
    return {
        "apiVersion": "rljob.dev/v1alpha1",
        "kind": "RLJob",
        "metadata": {"name": name},
        "spec": {
            "image": "rljob-trainer:apiserver",
            "tpu": {"accelerator": accelerator, "topology": topology},
            "podAnnotations": {"kwok.rljob.dev/run-forever": "true"},
        },
    }


def apply(ns: str, *objs: dict[str, Any]) -> None:
    kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump_all(list(objs)))


def phase(ns: str, name: str) -> str | None:
    return ((get("rljob", name, ns) or {}).get("status") or {}).get("phase")


@pytest.fixture
def operator(cluster: Any, namespace: str) -> Iterator[OperatorProcess]:
    install_crd()
    op = OperatorProcess(cluster.logs, [namespace], identity="apiserver")
    op.start()
    try:
        yield op
    finally:
        try:
            print("---- operator log ----\n" + op.tail(120))
            print(kubectl("get", "rljobs,jobsets,jobs,pods", "-n", namespace, "-o", "wide", check=False))
            for kind in ("rljobs", "jobsets"):  # what the operator mirrored, and what it mirrored it from
                for obj in kubectl_json("get", kind, "-n", namespace)["items"]:
                    print(kind, obj["metadata"]["name"], json.dumps(obj.get("status"), sort_keys=True))
            print("---- every bound pod in the cluster ----")
            print(kubectl("get", "pods", "-A", "-o", "wide", "--field-selector=spec.nodeName!=", check=False))
        finally:
            delete_rljobs(namespace)  # while the operator runs: it drops its finalizers
            op.stop()


def test_reliability_operator_survives_an_apiserver_restart(
    cluster: Any, namespace: str, operator: OperatorProcess
) -> None:
    # two RLJobs on two node pools, so both run at once (the v5e pool is left to the operator's own e2e tests)
    apply(namespace, rljob("on-v5p", "tpu-v5p-slice", "2x2x2"), rljob("on-v6e", "tpu-v6e-slice", "4x4"))
    for name in ("on-v5p", "on-v6e"):
        wait_for(lambda n=name: phase(namespace, n) == "Running", timeout=120, message=f"{name} Running")

    took = restart_apiserver(cluster.dir)
    print(f"kube-apiserver ready {took:.1f}s after the restart")

    # changes after the restart: the operator must see them through its re-established watches
    kubectl("patch", "rljob", "on-v5p", "-n", namespace, "--type=merge", "-p", '{"spec":{"suspend":true}}')
    apply(namespace, rljob("after-restart", "tpu-v6e-slice", "4x4"))  # the second v6e pool is free
    wait_for(lambda: (get("jobset", "on-v5p", namespace) or {}).get("spec", {}).get("suspend") is True,
             timeout=90, interval=1, message="suspend reached the JobSet")  # fmt: skip
    wait_for(lambda: phase(namespace, "on-v5p") == "Suspended", timeout=60, message="on-v5p Suspended")
    wait_for(lambda: get("jobset", "after-restart", namespace), timeout=90,
             message="the RLJob created after the restart gets its JobSet")  # fmt: skip
    # Running needs the scheduler, the Job controller and kwok to have relisted as well, and JobSet's
    # exclusive placement creates follower pods only once the leader is bound: the Job controller retries
    # them with a doubling back-off (1, 2, 4 ... 64 s), so a leader bound late runs its slice much later.
    wait_for(lambda: phase(namespace, "after-restart") == "Running", timeout=300,
             message="the RLJob created after the restart runs")  # fmt: skip
    # On a loaded machine the restart can outlast the node monitor's grace period: the node lifecycle
    # controller then marks on-v6e's pods NotReady, its JobSet says 0 ready and the RLJob rightly mirrors
    # Pending until kwok re-reports them Ready (hack/cluster/stages/pod-ready-again.yaml; before that stage
    # they stayed NotReady for ever: CI, 2026-12-05 and 2026-12-06). What must hold: on-v6e runs again and
    # every status is its JobSet's, with no duplicate or orphan child.
    expected = {"on-v5p", "on-v6e", "after-restart"}

    problems: list[str] = []  # the last check's findings, reported if it never converges

    def converged() -> bool:
        on_v6e = phase(namespace, "on-v6e")
        problems[:] = [] if on_v6e == "Running" else [f"on-v6e is {on_v6e}"]
        problems.extend(children_problems(namespace, expected) + status_problems(namespace))
        return not problems

    try:
        wait_for(
            converged, timeout=120, interval=1, message="on-v6e Running, children and statuses converged"
        )
    except TimeoutError as exc:
        raise AssertionError(f"{exc}; still wrong: {problems}") from exc
    assert operator.running, operator.tail()
