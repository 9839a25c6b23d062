"""A real GCS-compatible server for the ``gs://`` tests: fake-gcs-server on loopback.

The binary is built from Go modules and cached by ``hack/cluster/build.sh`` like the cluster's tools
(``~/.cache/rljob/bin/fake-gcs-server-<version>/``); if it is not there yet the fixture builds just it
(``build.sh --fake-gcs-server``). ``STORAGE_EMULATOR_HOST`` points google-cloud-storage (the trainer's
client, and this module's uploads) at it; it keeps objects in memory and is stopped after the test.
"""

from __future__ import annotations

import os
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests import procs

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "hack" / "cluster" / "build.sh"


def version() -> str:
    for line in (ROOT / "hack" / "cluster" / "versions.env").read_text().splitlines():
        if line.startswith("FAKE_GCS_SERVER_VERSION="):
            return line.split("=", 1)[1].strip()
    raise AssertionError("FAKE_GCS_SERVER_VERSION missing from hack/cluster/versions.env")


def binary() -> Path:
    """The cached fake-gcs-server, built (once, cached by version) if missing."""
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "rljob" / "bin"
    path = cache / f"fake-gcs-server-{version()}" / "fake-gcs-server"
    if not path.exists():
        subprocess.run([str(BUILD), "--fake-gcs-server"], check=True)
    return path


@dataclass
class GcsServer:
    """A running fake-gcs-server; ``url`` is what STORAGE_EMULATOR_HOST is set to."""

    url: str
    proc: subprocess.Popen

    def client(self):  # type: ignore[no-untyped-def]
        from rljob_trainer.workload import sources

        return sources.storage_client()

    def upload_dir(self, local: Path, bucket: str, prefix: str) -> str:
        """Every file under ``local`` to ``gs://bucket/prefix/...`` (creating the bucket); returns the URI."""
        client = self.client()
        b = client.bucket(bucket)
        if not b.exists():
            b = client.create_bucket(bucket)
        for path in sorted(p for p in local.rglob("*") if p.is_file()):
            b.blob(f"{prefix}/{path.relative_to(local)}").upload_from_filename(str(path))
        return f"gs://{bucket}/{prefix}"

    def upload_file(self, local: Path, bucket: str, name: str) -> str:
        client = self.client()
        b = client.bucket(bucket)
        if not b.exists():
            b = client.create_bucket(bucket)
        b.blob(name).upload_from_filename(str(local))
        return f"gs://{bucket}/{name}"

    def stop(self) -> None:
        procs.stop(self.proc, timeout=10)


@pytest.fixture
def gcs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[GcsServer]:
    """fake-gcs-server on a free loopback port (http, in-memory), with the GCS client pointed at it and the
    trainer's bucket cache in ``tmp_path``; stopped after the test."""
    port = procs.free_port()
    url = f"http://127.0.0.1:{port}"
    log = (tmp_path / "fake-gcs-server.log").open("wb")
    proc = subprocess.Popen(
        [
            str(binary()),
            "-scheme=http",
            "-host=127.0.0.1",
            f"-port={port}",
            "-backend=memory",
            f"-external-url={url}",
            "-log-level=warn",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    server = GcsServer(url, proc)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{url}/storage/v1/b", timeout=2):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(
                        f"fake-gcs-server did not start: {(tmp_path / 'fake-gcs-server.log').read_text()}"
                    ) from None
                time.sleep(0.1)
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", url)
        monkeypatch.setenv("RLJOB_CACHE_DIR", str(tmp_path / "rljob-cache"))
        yield server
    finally:
        server.stop()
        log.close()
