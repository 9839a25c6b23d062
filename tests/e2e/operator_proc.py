"""Start, stop, SIGKILL and inspect ``python -m rljob_operator`` subprocesses against the simulated cluster.

The reliability tests (``tests/e2e/test_reliability_*.py``) and ``bench/burst.py`` need what the operator's
own e2e fixture does not offer: several operators at once (peering), ``kill -9`` instead of a clean stop,
the peak RSS of the process, and one metric's value. Each operator watches the namespaces it is given (no
globs by default), so a test's operator never touches another suite's objects. ``children_problems`` and
``status_problems`` state what "the operator got it right" means, for every test that breaks something.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rljob_operator.names import LABEL_NAME
from rljob_operator.status import compute_status

from rljob.api import parse_rljob
from tests import procs
from tests.e2e.kube import kubectl, kubectl_json, wait_for

REPO = Path(__file__).resolve().parents[2]
CRD = REPO / "crds" / "rljob.dev_rljobs.yaml"
PEERING_CRDS = REPO / "charts" / "rljob" / "crds" / "kopf.dev_peerings.yaml"


def install_crd() -> None:
    """Install (or update) the RLJob CRD from ``crds/`` and wait until it is served."""
    kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD))
    kubectl("wait", "--for=condition=Established", "crd/rljobs.rljob.dev", "--timeout=60s")


def install_peering_crds() -> None:
    """kopf's KopfPeering/ClusterKopfPeering CRDs (the chart's copy): without them kopf runs standalone."""
    kubectl("apply", "--server-side", "--force-conflicts", "-f", str(PEERING_CRDS))
    for crd in ("kopfpeerings.kopf.dev", "clusterkopfpeerings.kopf.dev"):
        kubectl("wait", "--for=condition=Established", f"crd/{crd}", "--timeout=60s")


def delete_rljobs(ns: str, wait_s: float = 30) -> None:
    """Delete a test's RLJobs and wait until they are gone, before its namespace goes and before its
    operator stops.

    On the simulated cluster a namespace deletion sometimes leaves the RLJobs (and so their JobSets and
    bound pods) in place for many minutes while the namespace says "all content removed"; the pods then
    hold node pools the next test needs. Deleting the RLJobs first lets the garbage collector cascade at
    once. A Running RLJob carries kopf's finalizer (docs/operator.md): deleted with no operator left to
    remove it, it stays Terminating for good and its pods keep their nodes (a local run of the apiserver
    test, 2026-12-05: both v6e pools held after it). So call this while the operator still runs; what is
    still there after ``wait_s`` (the operator was killed) loses the finalizer the way docs/install.md
    tells users to.
    """
    kubectl("delete", "rljobs", "--all", "-n", ns, "--wait=false", "--ignore-not-found", check=False)

    def left() -> list[str]:
        return [o["metadata"]["name"] for o in kubectl_json("get", "rljobs", "-n", ns)["items"]]

    try:
        wait_for(lambda: not left(), timeout=wait_s, interval=1, message=f"RLJobs of {ns} gone")
    except TimeoutError:
        for name in left():
            kubectl("patch", "rljob", name, "-n", ns, "--type=merge", "-p", '{"metadata":{"finalizers":null}}',
                    check=False)  # fmt: skip


class OperatorProcess:
    """One operator subprocess. ``kill()`` is ``kill -9``; ``stop()`` is a graceful SIGTERM.

    ``identity`` becomes kopf's peering id (``POD_ID``), so a test can tell two peers apart in the
    KopfPeering object. ``profile`` runs the operator under cProfile, written at a graceful stop (the main
    thread only: kopf runs sync handlers in a thread pool, which cProfile does not see).
    """

    def __init__(
        self,
        log_dir: Path,
        namespaces: Sequence[str],
        *,
        standalone: bool = True,
        standby: bool = False,
        peering: str = "rljob",
        identity: str | None = None,
        verbose: bool = True,
        profile: Path | None = None,
        entry: Sequence[str] = ("-m", "rljob_operator"),
    ) -> None:
        self.log_dir = log_dir
        self.namespaces = tuple(namespaces)
        self.standalone = standalone
        self.standby = standby
        self.peering = peering
        self.identity = identity
        self.verbose = verbose
        self.profile = profile
        self.entry = tuple(entry)  # how python starts the operator: a module, or `-c CODE` for experiments
        self.proc: subprocess.Popen[bytes] | None = None
        self.logs: list[Path] = []  # one per start, oldest first
        self.metrics_port = procs.free_port()
        self.liveness_port = procs.free_port()

    # --- lifecycle -------------------------------------------------------------------------------------

    def command(self) -> list[str]:
        args = [sys.executable]
        if self.profile:
            args += ["-m", "cProfile", "-o", str(self.profile)]
        args += self.entry
        for ns in self.namespaces:
            args += ["--namespace", ns]
        args += [
            "--liveness", f"http://127.0.0.1:{self.liveness_port}/healthz",
            "--metrics-port", str(self.metrics_port), "--metrics-addr", "127.0.0.1",
            "--peering", self.peering,
        ]  # fmt: skip
        if self.standalone:
            args.append("--standalone")
        if self.standby:
            args.append("--standby")
        if self.verbose:
            args.append("--verbose")
        return args

    def start(self, wait: bool = True) -> None:
        """Start the process; with ``wait``, return once its liveness endpoint answers."""
        assert not self.running, "already running"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log = self.log_dir / f"operator-{self.identity or 'op'}-{time.time_ns()}.log"
        self.logs.append(log)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), str(REPO / "operator")]))
        if self.identity:
            env["POD_ID"] = self.identity
        with log.open("wb") as out:
            self.proc = subprocess.Popen(self.command(), env=env, stdout=out, stderr=subprocess.STDOUT)
        if wait:
            wait_for(self._alive, timeout=90, message=f"operator {self.identity or ''} liveness endpoint")

    def _alive(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"operator exited with {self.proc.returncode}:\n{self.tail()}")
        with urllib.request.urlopen(f"http://127.0.0.1:{self.liveness_port}/healthz", timeout=2) as r:
            return r.status == 200

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def stop(self, timeout: float = 30) -> None:
        """SIGTERM (kopf stops gracefully; cProfile writes its file), SIGKILL if it hangs."""
        procs.stop(self.proc, timeout)

    def kill(self) -> None:
        """``kill -9``: no cleanup of any kind, as when a node dies or the OOM killer strikes."""
        if self.running:
            assert self.proc is not None
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def restart(self) -> None:
        self.stop()
        self.start()

    def __enter__(self) -> OperatorProcess:
        """``with OperatorProcess(...) as op``: started and answering its liveness probe; stopped on exit."""
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # --- inspection ------------------------------------------------------------------------------------

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as r:
            return r.read().decode()

    def metric(self, name: str, **labels: str) -> float:
        """Sum of the samples of ``name`` whose labels include ``labels`` (0 when there are none)."""
        total = 0.0
        for line in self.metrics().splitlines():
            m = re.fullmatch(r"([a-zA-Z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)", line)
            if not m or m.group(1) != name:
                continue
            have = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
            if all(have.get(k) == v for k, v in labels.items()):
                total += float(m.group(3))
        return total

    def peak_rss_bytes(self) -> int:
        """Peak resident set size of the live process (VmHWM: the kernel's high-water mark)."""
        status = Path(f"/proc/{self.pid}/status").read_text()
        kib = re.search(r"^VmHWM:\s+(\d+) kB", status, re.M)
        assert kib, status
        return int(kib.group(1)) * 1024

    def rss_bytes(self) -> int:
        status = Path(f"/proc/{self.pid}/status").read_text()
        kib = re.search(r"^VmRSS:\s+(\d+) kB", status, re.M)
        assert kib, status
        return int(kib.group(1)) * 1024

    def log_text(self) -> str:
        """Every log of this operator (all its starts), in order."""
        return "\n".join(p.read_text(errors="replace") for p in self.logs if p.exists())

    def tail(self, lines: int = 80) -> str:
        if not self.logs or not self.logs[-1].exists():
            return ""
        return "\n".join(self.logs[-1].read_text(errors="replace").splitlines()[-lines:])


# --- checks on what the operator produced ---------------------------------------------------------------


def _by_uid(items: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["uid"]: o for o in items}


def _controller_uid(obj: dict[str, Any]) -> str | None:
    for ref in obj["metadata"].get("ownerReferences") or []:
        if ref.get("controller"):
            return ref.get("uid")
    return None


def children_problems(ns: str, expected: set[str] | None = None) -> list[str]:
    """What is wrong with the RLJobs' children in ``ns``: every RLJob must control exactly one JobSet and
    one ConfigMap (no duplicates), and every JobSet or ConfigMap of ours must be controlled by an RLJob that
    exists (no orphans). With ``expected``, the RLJobs must be exactly those names. [] means all good."""
    rljobs = kubectl_json("get", "rljobs", "-n", ns)["items"]
    jobsets = kubectl_json("get", "jobsets", "-n", ns)["items"]
    config_maps = kubectl_json("get", "configmaps", "-n", ns, "-l", LABEL_NAME)["items"]
    problems: list[str] = []
    names = {r["metadata"]["name"] for r in rljobs}
    if expected is not None and names != expected:
        problems.append(f"RLJobs: missing {sorted(expected - names)}, unexpected {sorted(names - expected)}")
    owners = _by_uid(rljobs)
    for kind, children in (("JobSet", jobsets), ("ConfigMap", config_maps)):
        per_owner: dict[str, list[str]] = {uid: [] for uid in owners}
        for child in children:
            uid = _controller_uid(child)
            if uid not in owners:
                problems.append(f"orphan {kind} {child['metadata']['name']} (controller {uid})")
            else:
                per_owner[uid].append(child["metadata"]["name"])
        for uid, kids in per_owner.items():
            if len(kids) != 1:
                problems.append(
                    f"RLJob {owners[uid]['metadata']['name']} controls {len(kids)} {kind}s: {kids}"
                )
    return problems


def status_problems(ns: str) -> list[str]:
    """RLJobs whose status is not what the operator's own pure ``compute_status`` says it should be for
    their JobSet as it is now (phase, jobSetName, restarts, observedGeneration, condition states). []: all
    statuses are right."""
    rljobs = kubectl_json("get", "rljobs", "-n", ns)["items"]
    jobsets = {j["metadata"]["name"]: j for j in kubectl_json("get", "jobsets", "-n", ns)["items"]}
    now = datetime.now(UTC)
    problems: list[str] = []
    for raw in rljobs:
        name = raw["metadata"]["name"]
        have = raw.get("status") or {}
        if not have.get("phase"):
            problems.append(f"{name}: no status yet")
            continue
        want = compute_status(parse_rljob(raw), jobsets.get(name), now=now).status
        if _summary(have) != _summary(want):
            problems.append(f"{name}: status {_summary(have)}, expected {_summary(want)}")
    return problems


def _summary(status: dict[str, Any]) -> dict[str, Any]:
    return {
        "phase": status.get("phase"),
        "jobSetName": status.get("jobSetName"),
        "restarts": status.get("restarts", 0),
        "observedGeneration": status.get("observedGeneration"),
        "conditions": {c["type"]: c["status"] for c in status.get("conditions") or []},
    }
