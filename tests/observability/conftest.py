"""Shared fixtures for the observability tests: where promtool and the prometheus server are, and the
repository paths.

Lookup, in order (``prometheus`` the same way): ``$PROMTOOL``; ``promtool`` on PATH; the cluster tooling's
cache (``~/.cache/rljob/bin/promtool-<version>/promtool``, filled by ``hack/cluster/build.sh``); else it is
fetched the same way the cluster tooling does it (``apt-get download prometheus`` + ``dpkg -x``, no
system-wide install) into that cache. When none of that works the tests are skipped with the reason,
never silently passed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "charts" / "rljob" / "files" / "rljob-alerts.rules.yaml"
DASHBOARD = ROOT / "charts" / "rljob" / "files" / "rljob-dashboard.json"
ALERT_TESTS = Path(__file__).resolve().parent / "alerts_test.yaml"
ALERT_RESTART_TESTS = Path(__file__).resolve().parent / "alerts_restart_test.yaml"
"""A restart, a rescheduled pod, duplicate scrapes and GKE Managed Prometheus (no staleness markers)."""
ALERT_DOWN_TESTS = Path(__file__).resolve().parent / "alerts_down_test.yaml"
"""A trainer that stops answering scrapes (frozen whole, a hung host) while its RLJob is Running."""
ALERT_TEST_FILES = (ALERT_TESTS, ALERT_RESTART_TESTS, ALERT_DOWN_TESTS)


def _bin_cache() -> Path:
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "rljob" / "bin"


def _cached(binary: str) -> Path | None:
    """The newest ``<cache>/<binary>-<version>/<binary>`` (as hack/cluster/build.sh leaves them)."""
    dirs = sorted(_bin_cache().glob(f"{binary}-*"), key=lambda p: p.name)
    for d in reversed([d for d in dirs if ".tmp" not in d.name]):
        if (d / binary).is_file() and os.access(d / binary, os.X_OK):
            return d / binary
    return None


def _fetch(binary: str) -> Path | None:
    """``apt-get download prometheus`` + ``dpkg -x`` into the cache (promtool and the prometheus server
    both come from that package); None when apt cannot get it."""
    if not (shutil.which("apt-get") and shutil.which("dpkg-deb")):
        return None
    with tempfile.TemporaryDirectory() as work:
        for attempt in range(2):
            r = subprocess.run(
                ["apt-get", "download", "prometheus"], cwd=work, capture_output=True, timeout=300
            )
            if r.returncode == 0:
                break
            if attempt == 0:  # fresh machine: empty apt lists
                subprocess.run(["apt-get", "update", "-qq"], capture_output=True, timeout=300)
        debs = list(Path(work).glob("prometheus_*.deb"))
        if not debs:
            return None
        version = subprocess.run(
            ["dpkg-deb", "-f", str(debs[0]), "Version"], capture_output=True, text=True, check=True
        ).stdout.strip()
        subprocess.run(["dpkg-deb", "-x", str(debs[0]), f"{work}/root"], check=True, timeout=300)
        final = _bin_cache() / f"{binary}-{version}"
        tmp = Path(f"{final}.tmp.{os.getpid()}")
        tmp.mkdir(parents=True, exist_ok=True)
        shutil.copy2(f"{work}/root/usr/bin/{binary}", tmp / binary)
        try:
            tmp.rename(final)
        except OSError:  # someone else (the cluster build, another test run) got there first
            shutil.rmtree(tmp, ignore_errors=True)
    return final / binary if (final / binary).is_file() else None


def find_binary(binary: str) -> Path | None:
    """``$PROMTOOL``/``$PROMETHEUS``, else PATH, else the cache, else fetched into the cache."""
    env = os.environ.get(binary.upper())
    if env:
        return Path(env)
    on_path = shutil.which(binary)
    if on_path:
        return Path(on_path)
    return _cached(binary) or _fetch(binary)


def find_promtool() -> Path | None:
    return find_binary("promtool")


@pytest.fixture(scope="session")
def promtool() -> Path:
    path = find_promtool()
    if path is None:
        pytest.skip("promtool not found: set $PROMTOOL, put it on PATH, or run hack/cluster/build.sh")
    return path


@pytest.fixture(scope="session")
def prometheus_bin() -> Path:
    """The Prometheus server binary (same lookup as promtool; ``$PROMETHEUS`` overrides)."""
    path = find_binary("prometheus")
    if path is None:
        pytest.skip("prometheus not found: set $PROMETHEUS, put it on PATH, or run hack/cluster/build.sh")
    return path
