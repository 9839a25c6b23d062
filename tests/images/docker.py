"""The Docker daemon and the images hack/image.sh builds, for the tests that run them.

hack/test.sh builds the images (hack/image.sh) before pytest and sets RLJOB_REQUIRE_IMAGES=1: there, a
missing daemon or image fails these tests. Elsewhere (a targeted pytest run on a machine without Docker)
they skip, naming the command that makes them run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

# Debian's client (BuildKit built in); /usr/local/bin/docker on the dev machines is a static client without buildx.
DOCKER = "/usr/bin/docker" if Path("/usr/bin/docker").exists() else (shutil.which("docker") or "docker")
OPERATOR_IMAGE = "localhost/rljob-operator:dev"
TRAINER_IMAGE = "localhost/rljob-trainer:dev"
MAXTEXT_IMAGE = "localhost/rljob-trainer-maxtext:dev"


def docker(
    *args: str, timeout: float = 120, check: bool = False, input: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DOCKER_BUILDKIT": "1"}
    return subprocess.run(
        [DOCKER, *args], capture_output=True, text=True, timeout=timeout, check=check, env=env, input=input
    )


def _unavailable(reason: str) -> None:
    if os.environ.get("RLJOB_REQUIRE_IMAGES") == "1":
        pytest.fail(f"{reason} (hack/test.sh ran hack/image.sh, so this should not happen)")
    pytest.skip(f"{reason}: run hack/image.sh (or make images) first")


def require_daemon() -> None:
    try:
        proc = docker("info", "--format", "{{.ServerVersion}}", timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        _unavailable(f"no Docker daemon ({exc})")
        return
    if proc.returncode != 0:
        _unavailable(f"no Docker daemon ({proc.stderr.strip()[:200]})")


def require_image(name: str) -> str:
    """The image's ID."""
    require_daemon()
    proc = docker("image", "inspect", "-f", "{{.Id}}", name)
    if proc.returncode != 0:
        _unavailable(f"image {name} not built")
    return proc.stdout.strip()
