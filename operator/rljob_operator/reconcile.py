"""What the handlers do, in terms of the pure renderer/status code and the Kube helpers.

Kept apart from ``handlers.py`` so the kopf decorators stay one-liners and this logic can be read (and
tested with a fake ``Kube``) without kopf's machinery.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import kopf
from kubernetes.client.exceptions import ApiException

from rljob.api import RLJobError, parse_rljob
from rljob.api.spec import KIND
from rljob_operator import names
from rljob_operator.kube import Kube, controller_uid, plain
from rljob_operator.pod_waiting import stuck_container, with_waiting
from rljob_operator.render import RenderOptions, render_objects
from rljob_operator.slices import slice_shape
from rljob_operator.status import (
    REJECTED_CODES,
    Event,
    compute_status,
    create_failed_status,
    invalid_spec_status,
    is_terminal,
)

Post = Callable[[Mapping[str, Any], Event], None]
STATUS_WRITE_ATTEMPTS = 5
log = logging.getLogger(__name__)


def post_event(obj: Mapping[str, Any], event: Event) -> None:
    """Post an Event on the RLJob through kopf's event queue (thread-safe from sync handlers)."""
    kopf.event(dict(obj), type=event.type, reason=event.reason, message=event.message)


def now() -> datetime:
    return datetime.now(UTC)


def sync_status(
    kube: Kube,
    ns: str,
    name: str,
    jobset: dict[str, Any] | None,
    *,
    post: Post = post_event,
    owner_uid: str | None = None,
    deleted: bool = False,
    current: dict[str, Any] | None = None,
) -> None:
    """Recompute the RLJob's status from its JobSet and write it (only if it changed), then post Events.

    Writes with the RLJob's resourceVersion, retrying on conflicts with a fresh read: the create handler
    and the JobSet watcher both call this. ``current`` is an RLJob body the caller already holds (the create
    handler's): the first attempt uses it instead of a GET, which saves one of the create path's calls
    (the apiserver, not the operator, bounds a burst). Events are posted only after the write succeeded, so
    a retried write does not post them twice.
    """
    for _ in range(STATUS_WRITE_ATTEMPTS):
        raw, current = (current, None) if current is not None else (kube.get_rljob(ns, name), None)
        if raw is None or (owner_uid and raw["metadata"].get("uid") != owner_uid):
            return  # gone, or a newer RLJob of the same name: not ours to update
        try:
            job = parse_rljob(raw)
        except RLJobError:
            return  # the create handler reports invalid specs
        update = compute_status(job, jobset, now=now(), jobset_deleted=deleted)
        if not update.changed:
            return
        try:
            kube.patch_rljob_status(ns, name, update.status, raw["metadata"]["resourceVersion"])
        except ApiException as exc:
            if exc.status == 409:
                continue
            raise
        for event in update.events:
            post(raw, event)
        return
    raise kopf.TemporaryError(f"status of {ns}/{name} kept conflicting", delay=1)


def ensure_children(
    kube: Kube, body: Mapping[str, Any], *, post: Post = post_event, options: RenderOptions | None = None
) -> str:
    """On create/resume: create the ConfigMap and JobSet once, or re-read them; never after a terminal state.

    Returns what it did: ``terminal`` (nothing), ``invalid`` (status Failed/InvalidSpec, nothing created),
    ``rejected`` (the apiserver refused a child as invalid: status Failed/CreateRejected; other create
    failures set ``Created`` False with the reason and are retried),
    ``resynced`` (created earlier; status refreshed), ``created`` or ``existed`` (an earlier attempt had
    created both).
    """
    raw = plain(body)
    meta = raw["metadata"]
    ns, name, uid = meta["namespace"], meta["name"], meta["uid"]
    status = raw.get("status") or {}
    if is_terminal(status):
        return (
            "terminal"  # finished: whatever happened to the JobSet since (e.g. its TTL), nothing is recreated
        )
    try:
        job = parse_rljob(raw)
    except RLJobError as exc:
        update = invalid_spec_status(status, exc.errors, now=now(), generation=meta.get("generation"))
        kube.patch_rljob_status(ns, name, update.status, meta["resourceVersion"])
        for event in update.events:
            post(raw, event)
        return "invalid"
    if status.get("jobSetName"):  # created before this operator (re)started: only resync the status
        sync_status(kube, ns, name, kube.get_jobset(ns, status["jobSetName"]), post=post, owner_uid=uid)
        return "resynced"
    config_map, jobset = render_objects(job, options)
    kopf.adopt([config_map, jobset], owner=raw)
    created = []
    for obj in (config_map, jobset):  # the ConfigMap first: the pods mount it
        try:
            child, fresh = kube.create_owned(obj, uid)
        except ApiException as exc:
            return _create_failed(kube, raw, obj["kind"], exc, post)
        if fresh:
            created.append(f"{obj['kind']} {obj['metadata']['name']}")
    jobset = child
    if created:
        shape = slice_shape(job.spec.tpu)
        post(
            raw,
            Event(
                "Normal",
                "Created",
                f"created {' and '.join(created)}: {shape.slices} x {shape.accelerator} {shape.topology} "
                f"({shape.hosts} hosts x {shape.chips_per_host} chips per slice)",
            ),
        )
    sync_status(kube, ns, name, jobset, post=post, owner_uid=uid, current=raw)
    return "created" if created else "existed"


def _api_message(exc: ApiException) -> str:
    """The apiserver's own message (a Status object's ``message``), else the HTTP reason."""
    try:
        return str(json.loads(exc.body or "{}").get("message") or exc.reason)
    except (ValueError, AttributeError):
        return str(exc.reason)


def _create_failed(kube: Kube, raw: dict[str, Any], kind: str, exc: ApiException, post: Post) -> str:
    """Record a failed create in the RLJob's status (not only as an Event); ``rejected`` is final, any
    other failure is raised again for kopf to retry."""
    meta = raw["metadata"]
    code = int(exc.status or 0)
    update = create_failed_status(
        raw.get("status") or {}, kind, code, _api_message(exc), now=now(), generation=meta.get("generation")
    )
    if update.changed:
        kube.patch_rljob_status(meta["namespace"], meta["name"], update.status, meta["resourceVersion"])
        for event in update.events:
            post(raw, event)
    if code in REJECTED_CODES:
        return "rejected"
    raise kopf.TemporaryError(f"creating the {kind} failed ({code}): {_api_message(exc)}", delay=30)


def toggle_suspend(kube: Kube, body: Mapping[str, Any], suspend: bool, *, post: Post = post_event) -> None:
    """``spec.suspend`` changed: suspend or resume the JobSet, never touching anything else of it.

    Without a queue, the JobSet's ``spec.suspend`` follows. With one, Kueue owns that field (it unsuspends
    on admission and would undo a suspend of an admitted JobSet), so the operator never writes it:
    suspending deactivates the Kueue Workload (Kueue evicts it, suspends the JobSet and frees the quota);
    resuming activates it again, or, for a JobSet created while the RLJob was suspended, adds the queue
    label that hands it to Kueue (``jobset.queue_labels``). Either may leave the JobSet as it was (a
    resumed RLJob whose JobSet stays suspended until admitted), so no JobSet event would follow: the status
    is recomputed here (Suspended <-> Queued).
    """
    status = body.get("status") or {}
    if is_terminal(status):
        return
    ns, name = body["metadata"]["namespace"], body["metadata"]["name"]
    queue = (body.get("spec") or {}).get("queueName")
    jobset = kube.get_jobset(ns, names.jobset_name(name))
    if jobset is None:
        log.info("JobSet of %s/%s not there yet; it will be created with suspend=%s", ns, name, suspend)
        return
    if not queue:
        kube.set_jobset_suspend(ns, names.jobset_name(name), suspend)
        return
    if names.QUEUE_LABEL not in (jobset["metadata"].get("labels") or {}):
        if not suspend:  # created while suspended: hand it to Kueue now
            kube.label_jobset(ns, names.jobset_name(name), {names.QUEUE_LABEL: queue})
    elif not kube.set_workload_active(ns, jobset["metadata"]["uid"], not suspend):
        raise kopf.TemporaryError(f"Kueue has no Workload for JobSet {ns}/{name} yet", delay=2)
    sync_status(kube, ns, name, jobset, post=post, owner_uid=body["metadata"].get("uid"))


def on_jobset_event(
    kube: Kube, event_type: str | None, jobset: Mapping[str, Any], *, post: Post = post_event
) -> None:
    """A JobSet changed (or was deleted): mirror it into the RLJob that controls it."""
    js = plain(jobset)
    meta = js["metadata"]
    owner = next(
        (r for r in meta.get("ownerReferences") or [] if r.get("controller") and r.get("kind") == KIND), None
    )
    if owner is None:
        return
    sync_status(
        kube,
        meta["namespace"],
        owner["name"],
        js,
        post=post,
        owner_uid=controller_uid(js),
        deleted=event_type == "DELETED",
    )


def on_pod_event(kube: Kube, pod: Mapping[str, Any]) -> None:
    """A trainer pod changed: if a container of it is stuck (image not pulled, not creatable), say so on
    its RLJob (``ContainersWaiting``, the kubelet's reason). Other pod changes cost no API call."""
    raw = plain(pod)
    waiting = stuck_container(raw)
    if waiting is None:
        return
    ns, name = raw["metadata"]["namespace"], raw["metadata"]["labels"][names.LABEL_NAME]
    for _ in range(STATUS_WRITE_ATTEMPTS):
        job = kube.get_rljob(ns, name)
        if job is None:
            return
        new = with_waiting(job.get("status") or {}, waiting, now=now())
        if new is None:
            return
        try:
            kube.patch_rljob_status(ns, name, new, job["metadata"]["resourceVersion"])
            return
        except ApiException as exc:
            if exc.status != 409:
                raise
    raise kopf.TemporaryError(f"status of {ns}/{name} kept conflicting", delay=1)
