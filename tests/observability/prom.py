"""A real Prometheus server for tests: started on loopback with the shipped rules file, queried over its
HTTP API.

Why a real server besides ``promtool test rules``: promtool evaluates the rules over hand-written series;
the server scrapes a real trainer's ``/metrics`` and evaluates the same file as a deployment would, so a
label the trainer does not export, a template that does not expand or a join that never matches shows up.
Scrape and rule evaluation every second keep the tests short; the rules file is loaded unchanged.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import yaml

from tests import procs

T = TypeVar("T")


class Prometheus:
    """One ``prometheus`` process on 127.0.0.1:``port`` scraping ``targets`` (host:port) every second.

    ``labels`` are added to every target (e.g. ``namespace``, which a PodMonitor would add in a cluster).
    ``scrape_configs``, when given, replace that static job (e.g. pod discovery against the simulated
    apiserver: tests/e2e/test_two_releases.py, tests/e2e/rehearsal.py).
    """

    def __init__(
        self,
        binary: Path,
        workdir: Path,
        port: int,
        targets: list[str],
        rule_files: list[Path],
        labels: dict[str, str] | None = None,
        scrape_configs: list[dict[str, Any]] | None = None,
    ) -> None:
        self.url = f"http://127.0.0.1:{port}"
        static = {
            "job_name": "rljob-trainer",
            "static_configs": [{"targets": targets, "labels": labels or {}}],
        }
        config = {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(p) for p in rule_files],
            "scrape_configs": scrape_configs or [static],
        }
        (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.log = workdir / "prometheus.log"
        self._log = self.log.open("w")
        self.proc = subprocess.Popen(
            [
                str(binary),
                f"--config.file={workdir / 'prometheus.yml'}",
                f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            cwd=workdir,
        )
        self.wait_for(lambda: self._ready(), timeout=60, what="prometheus ready")

    def _ready(self) -> bool:
        if self.proc.poll() is not None:
            raise RuntimeError(f"prometheus exited {self.proc.returncode}: {self.log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def api(self, path: str, **params: str) -> Any:
        url = f"{self.url}/api/v1/{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        with urllib.request.urlopen(url, timeout=5) as r:
            body = json.load(r)
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """Instant vector result: [{"metric": {...}, "value": [ts, "v"]}, ...]."""
        return self.api("query", query=expr)["result"]

    def alerts(self, name: str) -> list[dict[str, Any]]:
        """Active alerts (pending or firing) named ``name``, from the server's own alert state."""
        return [a for a in self.api("alerts")["alerts"] if a["labels"]["alertname"] == name]

    def firing(self, name: str) -> list[dict[str, Any]]:
        return [a for a in self.alerts(name) if a["state"] == "firing"]

    @staticmethod
    def wait_for(check: Callable[[], T], timeout: float, what: str, every: float = 0.5) -> T:
        """Poll ``check`` until it returns something truthy; bounded by ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            result = check()
            if result:
                return result
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
            time.sleep(every)

    def close(self) -> None:
        procs.stop(self.proc, timeout=20)
        self._log.close()
