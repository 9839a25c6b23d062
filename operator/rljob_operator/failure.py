"""Failure handling, split between the Job (what a pod failure means) and the JobSet (what to do then).

Three kinds of failure, three outcomes:

* the trainer exits ``2`` ("bad config, don't retry"): the Job's pod failure policy fails the Job with
  reason ``PodFailurePolicy``, and the JobSet rule ``FailJobSet`` ends the run; retrying cannot help;
* a pod gets the ``DisruptionTarget`` condition (preemption, host maintenance, node drain): the Job fails
  with reason ``PodFailurePolicy`` and a message naming the condition, and the JobSet restarts with
  ``RestartJobSetAndIgnoreMaxRestarts`` (JobSet KEP-262's message-pattern recipe): not the user's fault,
  so it must not use up ``maxRestarts``;
* anything else (e.g. exit 1, an OOM): ``backoffLimit: 0`` fails the Job at once (one dead host stalls the
  whole slice's collectives anyway) with reason ``BackoffLimitExceeded``; no rule matches, so JobSet's
  default ``RestartJobSet`` recreates every slice, counting against ``maxRestarts``.

The DisruptionTarget rule comes first in both lists: a disrupted pod may also exit non-zero.
"""

from __future__ import annotations

from typing import Any

from rljob.api.spec import RLJob
from rljob_operator import names

DISRUPTION_MESSAGE_PATTERN = ".*DisruptionTarget.*"
"""Matches the Job controller's message "Pod <ns>/<pod> has condition DisruptionTarget matching FailJob
rule at index <i>" (pod names are lowercase, so no pod name can match it by accident)."""


def pod_failure_policy() -> dict[str, Any]:
    """The Job's ``podFailurePolicy`` (needs ``restartPolicy: Never`` and works with ``backoffLimit: 0``)."""
    return {
        "rules": [
            {"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
            {
                "action": "FailJob",
                "onExitCodes": {
                    "containerName": names.CONTAINER,
                    "operator": "In",
                    "values": [names.EXIT_BAD_CONFIG],
                },
            },
        ]
    }


def jobset_failure_policy(job: RLJob) -> dict[str, Any]:
    """The JobSet's ``failurePolicy``; rule names are set because the v0.12 CRD requires them."""
    return {
        "maxRestarts": job.spec.maxRestarts,
        "rules": [
            {
                "name": "disruption",
                "action": "RestartJobSetAndIgnoreMaxRestarts",
                "onJobFailureReasons": ["PodFailurePolicy"],
                "onJobFailureMessagePatterns": [DISRUPTION_MESSAGE_PATTERN],
            },
            {
                "name": "badConfig",
                "action": "FailJobSet",
                "onJobFailureReasons": ["PodFailurePolicy"],
            },
        ],
    }
