"""``rljob operator`` / ``python -m rljob_operator``: parse options, then run kopf with our handlers.

Credentials: in-cluster when running in a pod, else ``$KUBECONFIG`` (or ~/.kube/config); kopf logs in the
same way (its kubernetes-client login) and the handlers' API client is loaded in the startup handler.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys

import kopf

from rljob_operator import jobset_crd, preflight
from rljob_operator.pod import RenderOptions
from rljob_operator.settings import OperatorOptions

TRAINER_SECURITY_CONTEXT_ENV = "RLJOB_TRAINER_SECURITY_CONTEXT"


def _json_object(text: str) -> dict:
    """argparse type: a JSON object (the chart passes the trainer securityContext this way)."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("must be a JSON object")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="rljob operator", description="Run the RLJob operator (kopf).")
    scope = p.add_mutually_exclusive_group()
    scope.add_argument(
        "-n",
        "--namespace",
        action="append",
        default=[],
        metavar="NS",
        help="watch this namespace (repeatable; kopf globs like 'team-*' work)",
    )
    scope.add_argument(
        "-A",
        "--all-namespaces",
        action="store_true",
        help="watch every namespace (the default when no --namespace is given)",
    )
    p.add_argument(
        "--liveness",
        metavar="URL",
        default=None,
        help="serve kopf's liveness probe, e.g. http://0.0.0.0:8081/healthz",
    )
    p.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        metavar="PORT",
        help="serve the operator's Prometheus metrics on this port",
    )
    p.add_argument("--metrics-addr", default="0.0.0.0", metavar="ADDR", help="bind address for metrics")
    p.add_argument("--peering", default="rljob", metavar="NAME", help="kopf peering name (default rljob)")
    p.add_argument(
        "--trainer-security-context",
        type=_json_object,
        default=os.environ.get(TRAINER_SECURITY_CONTEXT_ENV) or "{}",
        metavar="JSON",
        help=f"securityContext for every trainer container (default: ${TRAINER_SECURITY_CONTEXT_ENV})",
    )
    mode = p.add_mutually_exclusive_group()
    mode.add_argument(
        "--standby",
        action="store_true",
        help="hot standby: lower peering priority, takes over when the active peer is gone",
    )
    mode.add_argument("--standalone", action="store_true", help="no peering at all (a single replica)")
    p.add_argument(
        "--connect-timeout",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="give up (exit 1) when no Kubernetes API answers within this time (default 60)",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    return p


def options_from(args: argparse.Namespace) -> OperatorOptions:
    return OperatorOptions(
        namespaces=tuple(args.namespace),
        all_namespaces=args.all_namespaces or not args.namespace,
        liveness=args.liveness,
        metrics_port=args.metrics_port,
        metrics_addr=args.metrics_addr,
        peering=args.peering,
        standby=args.standby,
        standalone=args.standalone,
        render=RenderOptions(trainer_security_context=args.trainer_security_context),
    )


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    options = options_from(args)
    problem = preflight.cluster_problem(args.connect_timeout) or jobset_crd.jobset_problem()
    if problem:
        print(f"rljob operator: {problem}", file=sys.stderr)
        return 1
    kopf.configure(verbose=args.verbose, debug=args.verbose)
    import rljob_operator.handlers  # noqa: F401  (registers the handlers with kopf's default registry)

    logging.getLogger(__name__).info(
        "watching %s", "all namespaces" if options.all_namespaces else ", ".join(options.namespaces)
    )
    with contextlib.suppress(KeyboardInterrupt):
        kopf.run(
            clusterwide=options.all_namespaces,
            namespaces=options.namespaces,
            liveness_endpoint=options.liveness,
            standalone=options.standalone or None,
            peering_name=options.peering,
            priority=options.priority,
            memo=kopf.Memo(options=options),
        )
    return 0
