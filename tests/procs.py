"""The helper processes tests start (the operator, trainers, Prometheus, fake-gcs-server): a free port for
each, and stopping them."""

from __future__ import annotations

import socket
import subprocess


def free_port() -> int:
    """A loopback port nobody listens on now: tests run side by side on one machine (and several engineers'
    suites on one host), so every server a test starts gets its own."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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
