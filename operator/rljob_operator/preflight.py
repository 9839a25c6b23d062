"""Before kopf starts: credentials and a reachable apiserver, or a clear message and exit 1.

Why: kopf retries its login and its watches forever, so ``rljob operator`` with no kubeconfig (or an
apiserver that is down) used to sit silent. Here the operator waits a bounded time (``--connect-timeout``)
and then says what is missing. In a pod, exit 1 lets the kubelet restart it once the apiserver is back.
"""

from __future__ import annotations

import time

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from rljob_operator.kube import load_config

HINT = "in a pod the service account is used; elsewhere set $KUBECONFIG or write ~/.kube/config"


def cluster_problem(timeout_s: float, poll_s: float = 2.0) -> str | None:
    """None once the apiserver answers ``/version``; otherwise why not, after at most ``timeout_s``."""
    try:
        load_config()
    except (config.ConfigException, OSError, ValueError, TypeError) as exc:
        return f"no Kubernetes credentials ({exc}); {HINT}"
    host = client.Configuration.get_default_copy().host
    deadline = time.monotonic() + timeout_s
    api = client.VersionApi(client.ApiClient(_no_retries()))
    while True:
        try:
            api.get_code(_request_timeout=min(5.0, max(0.5, timeout_s)))
            return None
        except ApiException as exc:
            if exc.status and exc.status < 500:  # it answered: reachable (RBAC is kopf's to report)
                return None
            reason = f"HTTP {exc.status} {exc.reason}"
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            reason = str(getattr(exc, "reason", None) or exc)
        if time.monotonic() + poll_s > deadline:
            return f"cannot reach the Kubernetes API at {host} within {timeout_s:g}s: {reason}; {HINT}"
        time.sleep(poll_s)


def _no_retries() -> client.Configuration:
    """The default configuration without urllib3's own retries (this loop retries, with a deadline)."""
    configuration = client.Configuration.get_default_copy()
    configuration.retries = False
    return configuration
