"""Stopping the helper processes tests start (the operator, Prometheus, fake-gcs-server)."""

from __future__ import annotations

import subprocess


def stop(proc: subprocess.Popen | None, timeout: float) -> None:
    """SIGTERM, so the process cleans up (kopf lets go of its peering, cProfile writes its file), then
    SIGKILL if it has not exited within ``timeout`` seconds: a hung child must not outlive the test run."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
