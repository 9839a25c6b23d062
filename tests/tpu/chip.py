"""Helpers of the TPU tier: run a Python module or command on the chip in a subprocess, parse the
trainer's per-step lines, and the environment every chip run gets."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
STEP_LINE = re.compile(
    r"^step\s+(?P<step>\d+)/\d+\s+reward (?P<reward>[-\d.]+)\s+(?P<seconds>[\d.]+)s/step.*"
    r"\((?P<phases>[a-z_]+=[\d.]+s(?: [a-z_]+=[\d.]+s)*)\)"
)


def env(**extra: str) -> dict[str, str]:
    """The chip's environment for a child: the project on the path, no other platform forced."""
    out = {**os.environ, **extra}
    out.pop("JAX_PLATFORMS", None)
    out["PYTHONPATH"] = f"{ROOT}:{out.get('PYTHONPATH', '')}"
    out["PYTHONUNBUFFERED"] = "1"
    return out


def run(args: list[str], timeout: float, **extra: str) -> dict[str, Any]:
    """Run ``args`` (``python`` is this interpreter) from the project root; exit code, seconds, output."""
    if args[0] == "python":
        args = [sys.executable, *args[1:]]
    start = time.monotonic()
    proc = subprocess.run(
        args, cwd=ROOT, env=env(**extra), capture_output=True, text=True, timeout=timeout, check=False
    )
    return {
        "rc": proc.returncode,
        "seconds": round(time.monotonic() - start, 1),
        "stdout": proc.stdout,
        "stderr_tail": proc.stderr[-3000:],
    }


def steps(stdout: str) -> list[dict[str, Any]]:
    """The trainer's per-step lines: step, reward, seconds and each phase's seconds."""
    out = []
    for line in stdout.splitlines():
        m = STEP_LINE.match(line.strip())
        if m:
            phases = {k: float(v.rstrip("s")) for k, v in (p.split("=") for p in m["phases"].split())}
            out.append(
                {
                    "step": int(m["step"]),
                    "reward": float(m["reward"]),
                    "seconds": float(m["seconds"]),
                    **phases,
                }
            )
    return out


def versions() -> dict[str, str]:
    """JAX, jaxlib and libtpu versions, without opening the chip."""
    from importlib import metadata

    out = {}
    for name in ("jax", "jaxlib", "libtpu", "libtpu-nightly", "google-tunix", "flax"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            out[name] = metadata.version(name)
    return out
