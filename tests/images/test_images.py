"""The images hack/image.sh builds, run as a pod would run them: the image's own ENTRYPOINT (tini as PID 1),
its own user (uid 10001), the examples baked into it, nothing from the checkout but a scratch work folder.

The trainer image is the TPU build (jax[tpu] with libtpu) run on this machine's CPU: once without
``JAX_PLATFORMS`` (trains, exits 0, and libtpu's error page does not appear: rljob_trainer.run.platforms), once
with ``JAX_PLATFORMS=cpu`` as the rehearsal's RLJob sets it, resuming from the first run's checkpoint and
stopped with ``docker stop`` mid-run (SIGTERM -> checkpoint -> exit 143).
"""

from __future__ import annotations

import re
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest

from tests.images.docker import (
    DOCKER,
    MAXTEXT_IMAGE,
    OPERATOR_IMAGE,
    TRAINER_IMAGE,
    docker,
    require_image,
)

pytestmark = [pytest.mark.images, pytest.mark.slow]

TRAIN = ["--config", "examples/tiny-cpu.yaml", "--workdir", "/work", "--metrics-port", "0"]
LIBTPU_NOISE = ("Source Location Trace", "TPU_WORKER_HOSTNAMES", "could not determine TPU accelerator type")


def checkpoint_steps(workdir: Path) -> list[int]:
    folder = workdir / "checkpoints"
    return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit()) if folder.exists() else []


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A folder the image's uid 10001 can write to, mounted at /work."""
    work = tmp_path / "work"
    work.mkdir()
    work.chmod(0o777)
    return work


def test_operator_image_starts() -> None:
    image_id = require_image(OPERATOR_IMAGE)
    print(f"{OPERATOR_IMAGE} {image_id}")
    proc = docker("run", "--rm", OPERATOR_IMAGE, "--help", timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: rljob operator"), proc.stdout
    user = docker("image", "inspect", "-f", "{{.Config.User}} {{json .Config.Entrypoint}}", OPERATOR_IMAGE)
    assert user.stdout.strip() == '10001:10001 ["tini","--","python","-m","rljob_operator"]'
    jax = docker("run", "--rm", "--entrypoint", "python", OPERATOR_IMAGE, "-c", "import jax", timeout=60)
    assert jax.returncode != 0 and "No module named 'jax'" in jax.stderr  # the operator image has no JAX


def test_maxtext_image_starts() -> None:
    image_id = require_image(MAXTEXT_IMAGE)
    print(f"{MAXTEXT_IMAGE} {image_id}")
    proc = docker("run", "--rm", MAXTEXT_IMAGE, "--help", timeout=180)
    assert proc.returncode == 0, proc.stderr
    version = docker("run", "--rm", "--entrypoint", "python", MAXTEXT_IMAGE, "-c",
                     "import sys, maxtext; print(sys.version_info[:2])", timeout=180)  # fmt: skip
    assert version.stdout.strip() == "(3, 12)", version.stderr[-2000:]


@pytest.mark.timeout(1800)
def test_trainer_image_trains_then_stops_with_a_checkpoint(workdir: Path) -> None:
    image_id = require_image(TRAINER_IMAGE)
    print(f"{TRAINER_IMAGE} {image_id}")
    mount = ["-v", f"{workdir}:/work"]

    # 1. No JAX_PLATFORMS: the TPU image on a CPU machine trains quietly and exits 0.
    first = docker("run", "--rm", *mount, TRAINER_IMAGE, *TRAIN, "--max-steps", "2", timeout=900)
    print(first.stdout[-3000:], first.stderr[-3000:])
    assert first.returncode == 0, first.stderr[-4000:]
    assert re.search(r"step +2/2 +reward", first.stdout), first.stdout
    assert "no TPU chip attached: running on CPU" in first.stdout
    for noise in LIBTPU_NOISE:
        assert noise not in first.stdout + first.stderr
    assert checkpoint_steps(workdir) == [2]

    # 2. JAX_PLATFORMS=cpu (as the rehearsal's spec.env sets it): resumes at step 3; `docker stop` sends SIGTERM
    #    to tini (PID 1), which forwards it to Python: the step finishes, is saved, and the exit code is 143.
    name = f"rljob-image-test-{uuid.uuid4().hex[:8]}"
    cmd = [DOCKER, "run", "--name", name, "-e", "JAX_PLATFORMS=cpu", *mount, TRAINER_IMAGE, *TRAIN]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    stepped = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if re.match(r"step +\d+/\d+ +reward", line):
                stepped.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert stepped.wait(900), "no step within 15 min:\n" + "".join(lines[-50:])
        pid1 = docker("exec", name, "sh", "-c", "cat /proc/1/comm; grep ^Uid: /proc/1/status; id -u")
        comm, uid_line, exec_uid = pid1.stdout.split("\n")[:3]
        assert comm == "tini" and uid_line.split()[1] == "10001" and exec_uid == "10001", pid1.stdout
        started = time.monotonic()
        stop = docker("stop", "-t", "300", name, timeout=360)
        assert stop.returncode == 0, stop.stderr
        print(f"docker stop took {time.monotonic() - started:.1f} s")
        proc.wait(timeout=60)
        reader.join(timeout=10)
        output = "".join(lines)
        print(output[-3000:])
        exit_code = docker("inspect", "-f", "{{.State.ExitCode}}", name).stdout.strip()
        assert exit_code == "143", output[-4000:]
        first_step = re.search(r"step +(\d+)/\d+ +reward", output)
        assert first_step and first_step.group(1) == "3", output[-4000:]  # resumed after the saved step 2
        assert "SIGTERM" in output
        assert max(checkpoint_steps(workdir)) >= 3, checkpoint_steps(workdir)
    finally:
        proc.kill()
        docker("rm", "-f", name)
