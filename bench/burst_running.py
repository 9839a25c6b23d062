"""``bench/burst.py --running N``: N RLJobs that really are ``Running`` while the burst is created, so the
operator's progress timer (``RLJOB_PROGRESS_INTERVAL_SECONDS``) reads host 0 of each of them every interval.

What it sets up on the shared simulated cluster, all named after one run id and removed afterwards:

* kwok TPU nodes of a pool no test uses (v6e 1x1) that only these RLJobs can land on: every node carries
  the label of a reservation named after the run (``cloud.google.com/reservation-name``) and the RLJobs ask
  for exactly that reservation (``spec.tpu.capacity``), so no other engineer's pod is placed here and these
  pods go nowhere else. Each node has ``PODS_PER_NODE`` chips (a real v6e 1x1 node has one: fewer fake nodes
  mean fewer kwok heartbeats on the shared apiserver); pods are host-network, so each RLJob gets its own
  metrics port and they do not collide on a node.
* The nodes' InternalIP is 127.0.0.1 (as in tests/e2e/test_progress.py), so host 0's pod IP is loopback,
  and this process serves a real trainer exposition (``TrainerMetrics``' registry, rendered once) on every
  RLJob's port, its step moving every ``STEP_SECONDS``: each timer tick does the whole work of a real one
  (list host 0's pod, read /metrics, parse, write status.progress).
* Pods are annotated ``kwok.rljob.dev/run-forever`` so they stay Running.

``LAG_ENTRY`` starts the operator with an extra kopf startup handler that measures its event loop's
responsiveness: a task sleeps 0.1 s in a loop and writes how late it woke, so the bench can take the lag
during the burst (the progress timers and kopf's watch streams share that loop; handler threads do not).
"""

from __future__ import annotations

import asyncio
import math
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import yaml
from aiohttp import web
from prometheus_client import generate_latest

from rljob.api.spec import GROUP, PLURAL, VERSION
from tests.e2e.kube import kubectl, loopback_tpu_node
from tests.procs import free_port

ACCELERATOR, TOPOLOGY, MACHINE = "tpu-v6e-slice", "1x1", "ct6e-standard-1t"
PODS_PER_NODE = 25
STEP_SECONDS = 5.0
MAX_STEPS = 100_000

LAG_ENTRY = """
import asyncio, os, sys, time
import kopf
import rljob_operator.settings as settings
from rljob_operator.main import main
workers = {workers!r}
if workers:
    apply = settings.apply_settings
    def with_workers(s, options):
        apply(s, options)
        s.execution.max_workers = workers
    settings.apply_settings = with_workers
tasks = []
@kopf.on.startup()
async def bench_loop_lag_probe(**_):
    out = open(os.environ["RLJOB_BENCH_LAG_FILE"], "a", buffering=1)
    async def probe():
        while True:
            t = time.monotonic()
            await asyncio.sleep(0.1)
            out.write(f"{{t:.3f}} {{time.monotonic() - t - 0.1:.4f}}\\n")
    tasks.append(asyncio.get_running_loop().create_task(probe()))
sys.exit(main(sys.argv[1:]))
"""


def node(name: str, reservation: str) -> dict[str, Any]:
    """A kwok v6e 1x1 node of reservation ``reservation`` whose address is loopback."""
    labels = {
        "cloud.google.com/reservation-name": reservation,
        "cloud.google.com/reservation-affinity": "specific",
    }
    return loopback_tpu_node(name, ACCELERATOR, TOPOLOGY, MACHINE, PODS_PER_NODE, labels)


def running_rljob(name: str, reservation: str, port: int) -> dict[str, Any]:
    """An RLJob that lands on this run's nodes, stays Running, and serves metrics on ``port``."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "RLJob",
        "metadata": {"name": name},
        "spec": {
            "image": "rljob-trainer:bench",
            "tpu": {
                "accelerator": ACCELERATOR,
                "topology": TOPOLOGY,
                "capacity": {"type": "Reservation", "reservation": reservation},
            },
            "metrics": {"port": port},
            "podAnnotations": {"kwok.rljob.dev/run-forever": "true"},
        },
    }


def exposition(name: str) -> str:
    """What a real trainer's host 0 serves after a few steps (the registry of ``TrainerMetrics``)."""
    from rljob_trainer.telemetry.metrics import TrainerMetrics
    from rljob_trainer.telemetry.progress import StepReport

    tm = TrainerMetrics(rljob=name, max_steps=MAX_STEPS, stall_threshold_seconds=1800.0)
    extra = {"used_slot_tokens": 4096} if "used_slot_tokens" in StepReport.__dataclass_fields__ else {}
    for step in (1, 2, 3):
        tm.on_step_start(step)
        tm(
            StepReport(
                step=step,
                max_steps=MAX_STEPS,
                seconds=STEP_SECONDS,
                phase_seconds={"rollout": 3.0, "reference": 0.5, "train": 1.0, "weight_sync": 0.25},
                rewards=np.linspace(0, 1, 16),
                real_tokens=3000,
                slot_tokens=4096,
                packed=False,
                **extra,
            )
        )
    return generate_latest(tm.registry).decode()


MOVING = re.compile(
    r"^(rljob_trainer_(?:global_step|steps_total|last_step_timestamp_seconds)\{[^}]*\}) \S+$", re.M
)


class FakeTrainers(threading.Thread):
    """Host 0's /metrics of every running RLJob, one port each, served by one asyncio loop in a thread.
    The text is rendered once; per request only the step, step count and last-step time move on."""

    def __init__(self, ports: dict[int, str]) -> None:
        super().__init__(daemon=True)
        self.template = {port: exposition(name) for port, name in ports.items()}
        self.started_at = time.time()
        self.requests = 0
        self.ready = threading.Event()
        self.loop = asyncio.new_event_loop()

    def text(self, port: int) -> str:
        now = time.time()
        steps = 3 + int((now - self.started_at) / STEP_SECONDS)
        last = self.started_at + (steps - 3) * STEP_SECONDS

        def value(m: re.Match[str]) -> str:
            series = m.group(1)
            v = last if series.startswith("rljob_trainer_last_step") else steps
            return f"{series} {float(v)}"

        return MOVING.sub(value, self.template[port])

    async def _serve(self) -> None:
        runners = []
        for port in self.template:

            async def handle(request: web.Request, port: int = port) -> web.Response:
                self.requests += 1
                return web.Response(text=self.text(port), content_type="text/plain")

            app = web.Application()
            app.router.add_get("/metrics", handle)
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", port).start()
            runners.append(runner)
        self.ready.set()
        await asyncio.Event().wait()

    def run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self._serve())


def lag_stats(path: str, start: float, end: float) -> dict[str, float | None]:
    """p50/p99/max (ms) of how late the operator's event loop woke from a 0.1 s sleep in [start, end]."""
    lags = []
    with open(path) as f:
        for line in f:
            t, lag = (float(x) for x in line.split())
            if start <= t <= end:
                lags.append(1000 * lag)
    if not lags:
        return {"lag_p50_ms": None, "lag_p99_ms": None, "lag_max_ms": None}
    lags.sort()
    return {
        "lag_p50_ms": round(lags[len(lags) // 2], 1),
        "lag_p99_ms": round(lags[min(len(lags) - 1, round(0.99 * (len(lags) - 1)))], 1),
        "lag_max_ms": round(lags[-1], 1),
    }


class RunningRLJobs:
    """``count`` Running RLJobs in ``ns`` on this run's own nodes, each with a fake host 0 endpoint.
    ``close`` deletes the RLJobs and the nodes (the namespace is the caller's)."""

    def __init__(self, api: Any, ns: str, count: int, run_id: str) -> None:
        self.api, self.ns = api, ns
        self.reservation = f"rljob-bench-{run_id}"
        self.nodes = [f"gke-rljob-bench-{run_id}-{i}" for i in range(math.ceil(count / PODS_PER_NODE))]
        self.names = [f"run-{i:03d}" for i in range(count)]
        ports: set[int] = set()
        while len(ports) < count:
            ports.add(free_port())
        self.ports = dict(zip(sorted(ports), self.names, strict=True))
        self.trainers = FakeTrainers(self.ports)

    def start(self) -> None:
        """Serve the endpoints, create the nodes and the RLJobs (the operator must be running)."""
        self.trainers.start()
        self.trainers.ready.wait(60)
        docs = [node(n, self.reservation) for n in self.nodes]
        kubectl("create", "-f", "-", input=yaml.safe_dump_all(docs))

        def create(item: tuple[int, str]) -> None:
            port, name = item
            body = running_rljob(name, self.reservation, port)
            self.api.create_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, body)

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(create, self.ports.items()))

    def wait(self, progress: bool, timeout: float) -> float:
        """Wait until every RLJob is Running (and, with ``progress``, shows ``status.progress``): seconds."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            items = self.api.list_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL)["items"]
            done = [
                o
                for o in items
                if (o.get("status") or {}).get("phase") == "Running"
                and (not progress or (o.get("status") or {}).get("progress"))
            ]
            if len(done) >= len(self.names):
                return time.monotonic() - t0
            time.sleep(2)
        raise TimeoutError(f"only {len(done)}/{len(self.names)} RLJobs Running{' with progress' * progress}")

    def close(self, timeout: float = 180) -> None:
        """Delete the RLJobs while the operator still runs (with progress on, kopf puts a finalizer on
        every RLJob because of the timer, and only the operator removes it), wait for them to go, then the
        nodes. RLJobs still there after ``timeout`` lose the finalizer by hand: they are this run's own."""
        kubectl("delete", "rljobs", "--all", "-n", self.ns, "--wait=false", check=False, timeout=timeout)
        deadline = time.monotonic() + timeout
        left = self.names
        while left and time.monotonic() < deadline:
            time.sleep(3)
            left = [o["metadata"]["name"] for o in self.api.list_namespaced_custom_object(
                GROUP, VERSION, self.ns, PLURAL)["items"]]  # fmt: skip
        for name in left:
            patch = '{"metadata":{"finalizers":null}}'
            kubectl("patch", "rljob", name, "-n", self.ns, "--type=merge", "-p", patch, check=False)
        kubectl("delete", "node", *self.nodes, "--wait=false", "--ignore-not-found", check=False)
