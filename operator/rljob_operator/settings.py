"""Operator options (from the command line) and the kopf settings they turn into.

Everything kopf is told lives here and is applied in one ``@kopf.on.startup`` handler, so ``rljob
operator``, ``python -m rljob_operator`` and ``kopf run -m rljob_operator.handlers`` behave the same.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import kopf

from rljob.api.spec import GROUP
from rljob_operator.pod import RenderOptions

ACTIVE_PRIORITY = 100
STANDBY_PRIORITY = 50
"""A standby replica has a lower peering priority: it pauses while an active peer is alive and takes over
when that peer's lease expires. (Equal priorities would make kopf pause both.)"""


@dataclass(frozen=True)
class OperatorOptions:
    namespaces: tuple[str, ...] = ()
    all_namespaces: bool = False
    liveness: str | None = None
    metrics_port: int | None = None
    metrics_addr: str = "0.0.0.0"
    peering: str = "rljob"
    standby: bool = False
    standalone: bool = False
    render: RenderOptions = field(default_factory=RenderOptions)

    @property
    def priority(self) -> int:
        return STANDBY_PRIORITY if self.standby else ACTIVE_PRIORITY


def apply_settings(settings: kopf.OperatorSettings, options: OperatorOptions) -> None:
    """Tune kopf for rljob."""
    # kopf's bookkeeping under the project's own domain, not kopf.zalando.org
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=GROUP, key="last-handled-configuration"
    )
    settings.persistence.finalizer = f"{GROUP}/finalizer"
    # Events: the handlers post what users must see; kopf adds its own warnings and errors only
    settings.posting.enabled = True
    settings.posting.level = logging.WARNING
    settings.posting.reporting_component = "rljob-operator"
    # peering: a hot standby waits at a lower priority; without the KopfPeering CRDs it runs alone
    settings.peering.name = options.peering
    settings.peering.priority = options.priority
    settings.peering.standalone = options.standalone
    settings.peering.mandatory = False
    settings.peering.clusterwide = options.all_namespaces
    # watches: let the server end idle watches before the client gives up, reconnect quickly
    settings.watching.server_timeout = 270
    settings.watching.client_timeout = 300
    settings.watching.connect_timeout = 30
    settings.watching.reconnect_backoff = 1.0
    # retries of failed handlers (kopf.TemporaryError sets its own delay)
    settings.execution.default_backoff = 10
