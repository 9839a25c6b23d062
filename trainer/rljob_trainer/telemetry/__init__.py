"""Telemetry: what the run reports about itself while it trains.

Here: per-step reports and the callback hook (``progress``), the console (``console``), Prometheus metrics
(``metrics``) and their HTTP server (``metrics_server``), goodput (``goodput``) and model FLOPs / MFU
(``flops``).

May import ``models`` (parameter counts for FLOPs) and ``workload``; never the run's lifecycle (``run``) or
``tunix_bridge`` (tests/trainer/test_layers.py). The metric names here are read by the chart's dashboard
and alert rules.
"""
