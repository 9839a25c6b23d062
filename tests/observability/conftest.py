"""Shared fixtures for the observability tests: where promtool is, and the repository paths.

promtool lookup, in order: ``$PROMTOOL``; ``promtool`` on PATH; the cluster tooling's cache
(``~/.cache/rljob/bin/promtool-<version>/promtool``, filled by ``hack/cluster/build.sh``); else it is
fetched the same way the cluster tooling does it (``apt-get download prometheus`` + ``dpkg -x``, no
system-wide install) into that cache. When none of that works the promtool tests are skipped with the
reason, never silently passed.
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


def _bin_cache() -> Path:
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "rljob" / "bin"


def _cached_promtool() -> Path | None:
    dirs = sorted(_bin_cache().glob("promtool-*"), key=lambda p: p.name)
    for d in reversed([d for d in dirs if not d.name.endswith(".tmp")]):
        if (d / "promtool").is_file() and os.access(d / "promtool", os.X_OK):
            return d / "promtool"
    return None


def _fetch_promtool() -> Path | None:
    """``apt-get download prometheus`` + ``dpkg -x`` into the cache; None when apt cannot get it."""
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
        final = _bin_cache() / f"promtool-{version}"
        tmp = Path(f"{final}.tmp.{os.getpid()}")
        tmp.mkdir(parents=True, exist_ok=True)
        shutil.copy2(f"{work}/root/usr/bin/promtool", tmp / "promtool")
        try:
            tmp.rename(final)
        except OSError:  # someone else (the cluster build, another test run) got there first
            shutil.rmtree(tmp, ignore_errors=True)
    return final / "promtool" if (final / "promtool").is_file() else None


def find_promtool() -> Path | None:
    if os.environ.get("PROMTOOL"):
        return Path(os.environ["PROMTOOL"])
    on_path = shutil.which("promtool")
    if on_path:
        return Path(on_path)
    return _cached_promtool() or _fetch_promtool()


@pytest.fixture(scope="session")
def promtool() -> Path:
    path = find_promtool()
    if path is None:
        pytest.skip("promtool not found: set $PROMTOOL, put it on PATH, or run hack/cluster/build.sh")
    return path
