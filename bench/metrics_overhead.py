"""Metrics overhead: wall time of a real training step with all trainer metrics on vs off (goal: < 1%).

    JAX_PLATFORMS=cpu .venv/bin/python bench/metrics_overhead.py --out bench/results/metrics_overhead.json

One real trainer run (``main.train`` on ``examples/tiny-cpu.yaml``: the random tiny Qwen3, packed rows of
256, 8 prompts x 4 generations per step, on CPU), so both arms share one process, one compiled program and
the same machine load. Steps alternate in blocks between the arms (order on, off, off, on, ...):

* **on**: ``TrainerMetrics`` receives every step (histograms, counters, FLOPs, MFU, goodput by kind) and
  its ``/metrics`` server is scraped every ``--scrape-interval`` seconds (default 15 s, a short Prometheus
  interval; ``--scrape-interval 1`` overstates the scrape's share on purpose);
* **off**: the same step with the metrics callback skipped and no scrape.

A step's wall time is measured from one step's start to the next step's start, so it includes the
callbacks that run when the step finishes (that is where the metrics work happens). Steps during which XLA
compiled (first steps, a new packed-row bucket) are dropped from both arms. The direct cost of the metrics
callback (time inside it per step) and of rendering one scrape are reported too: on a busy 2-core machine
they are the precise figures, the A/B difference carries the machine's noise (its spread is reported).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "trainer"), str(ROOT)]


class Switch:
    """A step callback between the recorder and TrainerMetrics: forwards to it in the "on" arm only, and
    times every step (start to next start), the time inside the metrics callback and compiles."""

    def __init__(self, block: int, warmup: int) -> None:
        self.block, self.warmup = block, warmup
        self.metrics: Any = None
        self.on = True
        self.starts: list[tuple[int, float, bool, float]] = []  # (step, t, on, compile seconds so far)
        self.callback_seconds: list[float] = []
        self.compile_total = 0.0

    def on_compile(self, event: str, duration_secs: float, **_: Any) -> None:
        if event == "/jax/core/compile/backend_compile_duration":
            self.compile_total += duration_secs

    def on_step_start(self, step: int) -> None:
        # Blocks after the warm-up in the order on, off, off, on, on, off, off, on, ... (ABBA: a slow drift of
        # the machine's load hits both arms alike); warm-up steps run "on".
        block = (step - self.warmup - 1) // self.block
        self.on = step <= self.warmup or block % 4 in (0, 3)
        self.starts.append((step, time.perf_counter(), self.on, self.compile_total))
        if self.on and self.metrics is not None:
            self.metrics.on_step_start(step)

    def __call__(self, report: Any) -> None:
        if self.on and self.metrics is not None:
            t = time.perf_counter()
            self.metrics(report)
            self.callback_seconds.append(time.perf_counter() - t)

    def intervals(self) -> dict[str, list[float]]:
        """Steady step wall times per arm (start to next start, no compile in between)."""
        out: dict[str, list[float]] = {"on": [], "off": []}
        for (step, t, on, c), (_, t_next, _, c_next) in zip(self.starts, self.starts[1:], strict=False):
            if step > self.warmup and c_next == c:
                out["on" if on else "off"].append(t_next - t)
        return out


def scraper(port: int, switch: Switch, interval: float, stop: threading.Event, counts: list[int]) -> None:
    """Scrape /metrics while the "on" arm runs, as Prometheus would (only more often)."""
    while not stop.wait(interval):
        if switch.on and switch.metrics is not None:  # the server is up once the metrics exist
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
                resp.read()
            counts[0] += 1


def scrape_render_seconds(metrics: Any, n: int = 200) -> float:
    """Median seconds to render the registry once (the work of one scrape, in the trainer process)."""
    from prometheus_client import generate_latest

    times = []
    for _ in range(n):
        t = time.perf_counter()
        generate_latest(metrics.registry)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def summary(xs: list[float]) -> dict[str, float]:
    return {
        "n": len(xs),
        "median_s": statistics.median(xs),
        "mean_s": statistics.fmean(xs),
        "stdev_s": statistics.stdev(xs) if len(xs) > 1 else 0.0,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--blocks", type=int, default=8, help="blocks per arm (a multiple of 2 keeps ABBA whole)")
    ap.add_argument("--block", type=int, default=5, help="steps per block")
    ap.add_argument("--warmup", type=int, default=6, help="first steps (compiles) not measured")
    ap.add_argument("--scrape-interval", type=float, default=15.0, help="seconds (Prometheus: 15-60)")
    ap.add_argument("--config", default=str(ROOT / "examples" / "tiny-cpu.yaml"))
    ap.add_argument("--out", default=None, help="write the result as JSON here")
    args = ap.parse_args()

    os.chdir(ROOT)  # the example's relative paths (tokenizer, data)
    os.environ.setdefault("TQDM_DISABLE", "1")
    import jax.monitoring
    from rljob_trainer.run import main as trainer_main
    from rljob_trainer.telemetry import metrics_server

    from rljob.api import load_rljob, parse_rljob

    steps = args.warmup + 2 * args.blocks * args.block
    doc = load_rljob(args.config).model_dump(mode="json", exclude_none=True)
    doc["spec"]["grpo"]["maxSteps"] = steps
    doc["spec"]["metrics"]["port"] = trainer_main.free_port()
    doc["spec"].pop("checkpoint", None)
    job = parse_rljob(doc, args.config)
    port = job.spec.metrics.port

    switch = Switch(args.block, args.warmup)
    jax.monitoring.register_event_duration_secs_listener(switch.on_compile)
    real_start = metrics_server.start

    def start(job: Any, index: int, recorder: Any, addr: str | None = None) -> Any:
        """The real start (server, compile listener, callback), then the Switch in the callback's place."""
        metrics = real_start(job, index, recorder, addr="127.0.0.1")
        recorder.callbacks[recorder.callbacks.index(metrics)] = switch
        switch.metrics = metrics
        return metrics

    metrics_server.start = start
    stop, scrapes = threading.Event(), [0]
    thread = threading.Thread(
        target=scraper, args=(port, switch, args.scrape_interval, stop, scrapes), daemon=True
    )
    load_before = Path("/proc/loadavg").read_text().split()[:3]
    thread.start()
    t0 = time.perf_counter()
    trainer_main.train(job, callbacks=[])
    wall = time.perf_counter() - t0
    stop.set()
    load_after = Path("/proc/loadavg").read_text().split()[:3]

    arms = switch.intervals()
    on, off = summary(arms["on"]), summary(arms["off"])
    callback = statistics.median(switch.callback_seconds)
    render = scrape_render_seconds(switch.metrics)
    result = {
        "what": "wall seconds per steady training step, all trainer metrics on vs off (bench/metrics_overhead.py)",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.node()} {platform.machine()} {os.cpu_count()} cores, JAX on CPU",
        "load_avg_1_5_15_before": load_before,
        "load_avg_1_5_15_after": load_after,
        "workload": f"{args.config}: tiny qwen3, packed rows 256, 8 prompts x 4 generations, "
        f"{steps} steps ({args.warmup} warm-up), blocks of {args.block} in the order on/off/off/on",
        "scrape_interval_s": args.scrape_interval,
        "scrapes": scrapes[0],
        "arms": {"on": on, "off": off},
        "overhead_median": on["median_s"] / off["median_s"] - 1,
        "overhead_mean": on["mean_s"] / off["mean_s"] - 1,
        # the A/B difference of means and its standard error (sqrt(s_on^2/n_on + s_off^2/n_off)): on a busy
        # machine the difference is only meaningful where it exceeds ~2 standard errors
        "difference_mean_s": on["mean_s"] - off["mean_s"],
        "difference_stderr_s": (on["stdev_s"] ** 2 / on["n"] + off["stdev_s"] ** 2 / off["n"]) ** 0.5,
        "metrics_callback_median_s": callback,
        "metrics_callback_share_of_step": callback / off["median_s"],
        "scrape_render_median_s": render,
        "scrape_share_at_interval": render / args.scrape_interval,
        "run_wall_s": wall,
    }
    print(json.dumps(result, indent=2))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
