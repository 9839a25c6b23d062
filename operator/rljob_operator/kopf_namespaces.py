"""A fix for a race in kopf's namespace discovery: a namespace created as the operator starts is never
watched.

For ``--namespace`` (names or globs such as ``team-*``), kopf lists the namespaces once, then starts a
watch-stream on namespaces, which lists them again before it streams. kopf drops the events of that
second listing (``process_discovered_namespace_event`` returns on ``type is None``), taking them as
known from the first. A namespace created between the two listings is in neither place: kopf never
watches RLJobs there until the operator restarts. The same holds for a namespace created while the
namespace watch was down and re-listed (410 Gone). A CI run met it on 2026-12-05: the operator's
liveness probe answered before the namespace watch-stream had listed, the test then created its
namespace, and the operator never watched it (docs/reliability.md).

The fix treats a listed namespace the way kopf treats its first listing (``revise_namespaces``: add the
matching ones). kopf 1.45.2 (pinned) has the bug, and the older kopf sources read skip the same events.
The wrapper is installed once, at import of ``rljob_operator.handlers``; if kopf's internals move, that
import fails at start-up rather than the race coming back unnoticed.
"""

from __future__ import annotations

from typing import Any

from kopf._core.reactor import observation

_kopf_process = observation.process_discovered_namespace_event


async def process_discovered_namespace_event(
    *, raw_event: Any, namespaces: Any, insights: Any, **kwargs: Any
) -> None:
    """kopf's processor, plus the listing events it skips."""
    if raw_event["type"] is not None:
        await _kopf_process(raw_event=raw_event, namespaces=namespaces, insights=insights, **kwargs)
        return
    async with insights.revised:
        before = set(insights.namespaces)
        observation.revise_namespaces(
            raw_bodies=[raw_event["object"]], insights=insights, namespaces=namespaces
        )
        if insights.namespaces != before:  # wake kopf's orchestrator only when a watcher is due
            insights.revised.notify_all()


def install() -> None:
    """Put the wrapper where kopf's namespace observer looks it up (by module global, at watch start)."""
    observation.process_discovered_namespace_event = process_discovered_namespace_event
