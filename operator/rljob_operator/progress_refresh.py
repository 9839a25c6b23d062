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
from rljob_operator.kube import Kube, plain

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


def write(
    kube: Kube,
    ns: str,
    name: str,
    reading: progress.Reading,
    uid: str | None,
    current: dict[str, Any] | None = None,
) -> bool:
    """Write progress and the Stalled condition into the RLJob's status if it is still Running and they
    changed (or the last write is older than ``progress.HEARTBEAT_SECONDS``).

    ``current`` is the RLJob body the timer was called with: the first attempt writes with its
    resourceVersion instead of a fresh GET (a conflict, i.e. a change since, re-reads), one API call less
    per read, the same as the create path."""
    for _ in range(WRITE_ATTEMPTS):
        raw, current = (current, None) if current is not None else (kube.get_rljob(ns, name), None)
        if raw is None or (uid and raw["metadata"].get("uid") != uid):
            return False
        status = raw.get("status") or {}
        if status.get("phase") != "Running":
            return False  # finished or restarting since the timer fired: the JobSet watcher owns it now
        now = datetime.now(UTC)
        new = progress.with_progress(status, reading, now=now, generation=raw["metadata"].get("generation"))
        if not progress.needs_write(status, new, now):
            return False  # nothing new since the last write, and that one is recent
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
    if not text:
        return f"no trainer metrics at {host}:{port}"
    return await asyncio.to_thread(parse_and_write, kube, plain(body), text, f"{host}:{port}")


def parse_and_write(kube: Kube, raw: dict[str, Any], text: str, where: str) -> str:
    """Parse host 0's exposition and write it: in a worker thread, so the event loop (the timers, kopf's
    watch streams) never waits for the parse."""
    reading = progress.parse(text)
    if reading is None:
        return f"no trainer metrics at {where}"
    meta = raw["metadata"]
    written = write(kube, meta["namespace"], meta["name"], reading, meta.get("uid"), current=raw)
    return f"step {reading.step}/{reading.max_steps}" + ("" if written else " (not written)")
