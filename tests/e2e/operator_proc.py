"""Start, stop, SIGKILL and inspect ``python -m rljob_operator`` subprocesses against the simulated cluster.

The reliability tests (``tests/e2e/test_reliability_*.py``) and ``bench/burst.py`` need what the operator's
own e2e fixture does not offer: several operators at once (peering), ``kill -9`` instead of a clean stop,
the peak RSS of the process, and one metric's value. Each operator watches the namespaces it is given (no
globs by default), so a test's operator never touches another suite's objects.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from tests.e2e.kube import kubectl, wait_for

REPO = Path(__file__).resolve().parents[2]
CRD = REPO / "crds" / "rljob.dev_rljobs.yaml"
PEERING_CRDS = REPO / "charts" / "rljob" / "crds" / "kopf.dev_peerings.yaml"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def install_crd() -> None:
    """Install (or update) the RLJob CRD from ``crds/`` and wait until it is served."""
    kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD))
    kubectl("wait", "--for=condition=Established", "crd/rljobs.rljob.dev", "--timeout=60s")


def install_peering_crds() -> None:
    """kopf's KopfPeering/ClusterKopfPeering CRDs (the chart's copy): without them kopf runs standalone."""
    kubectl("apply", "--server-side", "--force-conflicts", "-f", str(PEERING_CRDS))
    for crd in ("kopfpeerings.kopf.dev", "clusterkopfpeerings.kopf.dev"):
        kubectl("wait", "--for=condition=Established", f"crd/{crd}", "--timeout=60s")


class OperatorProcess:
    """One operator subprocess. ``kill()`` is ``kill -9``; ``stop()`` is a graceful SIGTERM.

    ``identity`` becomes kopf's peering id (``POD_ID``), so a test can tell two peers apart in the
    KopfPeering object. ``profile`` runs the operator under cProfile, written at a graceful stop.
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
    ) -> None:
        self.log_dir = log_dir
        self.namespaces = tuple(namespaces)
        self.standalone = standalone
        self.standby = standby
        self.peering = peering
        self.identity = identity
        self.verbose = verbose
        self.profile = profile
        self.proc: subprocess.Popen[bytes] | None = None
        self.logs: list[Path] = []  # one per start, oldest first
        self.metrics_port = free_port()
        self.liveness_port = free_port()

    # --- lifecycle -------------------------------------------------------------------------------------

    def command(self) -> list[str]:
        args = [sys.executable]
        if self.profile:
            args += ["-m", "cProfile", "-o", str(self.profile)]
        args += ["-m", "rljob_operator"]
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
        if self.running:
            assert self.proc is not None
            self.proc.terminate()
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()

    def kill(self) -> None:
        """``kill -9``: no cleanup of any kind, as when a node dies or the OOM killer strikes."""
        if self.running:
            assert self.proc is not None
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def restart(self) -> None:
        self.stop()
        self.start()

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
