"""Refresh a Running RLJob's ``status.progress`` from trainer host 0's ``/metrics`` (the timer's work).

Asynchronous on purpose: a host that does not answer (a pod still starting, a firewall) costs a timeout on
the event loop, not one of kopf's handler threads, so a hundred Running RLJobs cannot slow the create and
status handlers. The two Kubernetes calls (list host 0's pod, write the status) are short and run in a
worker thread. The status is written with the RLJob's resourceVersion, like every other status write of
the operator, so it never undoes a phase transition written in between (a conflict re-reads and retries).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import aiohttp
from kubernetes.client.exceptions import ApiException

from rljob_operator import progress
from rljob_operator.kube import Kube

FETCH_TIMEOUT_SECONDS = 3.0
WRITE_ATTEMPTS = 3


async def fetch_metrics(url: str, timeout: float = FETCH_TIMEOUT_SECONDS) -> str | None:
    """The text at ``url``, or None when it does not answer in time or answers with an error."""
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session,
            session.get(url) as resp,
        ):
            return await resp.text() if resp.status == 200 else None
    except (aiohttp.ClientError, TimeoutError, OSError):
        return None


def write(kube: Kube, ns: str, name: str, reading: progress.Reading, uid: str | None) -> bool:
    """Write progress and the Stalled condition into the RLJob's status if it is still Running."""
    for _ in range(WRITE_ATTEMPTS):
        raw = kube.get_rljob(ns, name)
        if raw is None or (uid and raw["metadata"].get("uid") != uid):
            return False
        status = raw.get("status") or {}
        if status.get("phase") != "Running":
            return False  # finished or restarting since the timer fired: the JobSet watcher owns it now
        new = progress.with_progress(
            status, reading, now=datetime.now(UTC), generation=raw["metadata"].get("generation")
        )
        try:
            kube.patch_rljob_status(ns, name, new, raw["metadata"]["resourceVersion"])
            return True
        except ApiException as exc:
            if exc.status != 409:
                raise
    return False


async def refresh(kube: Kube, body: Mapping[str, Any]) -> str:
    """Read host 0 and write what it says; returns what happened (for the debug log)."""
    meta = body["metadata"]
    ns, name = meta["namespace"], meta["name"]
    addr = await asyncio.to_thread(kube.host0_address, ns, name)
    if addr is None:
        return "no running host 0 pod"
    port = int(((body.get("spec") or {}).get("metrics") or {}).get("port", 9464))
    host = f"[{addr}]" if ":" in addr else addr
    text = await fetch_metrics(f"http://{host}:{port}/metrics")
    reading = progress.parse(text) if text else None
    if reading is None:
        return f"no trainer metrics at {host}:{port}"
    written = await asyncio.to_thread(write, kube, ns, name, reading, meta.get("uid"))
    return f"step {reading.step}/{reading.max_steps}" + ("" if written else " (not written)")
