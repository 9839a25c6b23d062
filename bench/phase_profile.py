"""Where a phase's device time goes: a JAX profiler trace of one phase, summed by XLA operation.

``bench/tpu.py --profile train@2`` traces step 2's train phase (``rollout@2:5``: the first 5 s of its
rollout) with ``jax.profiler`` and writes, beside the figures, the device's busy time and the operations
that hold it: for every device thread of the trace (on a TPU: "XLA Ops", "XLA Modules", ...), the total and
the top operations by summed duration, with their count and the HLO category where the trace names one.
Parsed from the Perfetto JSON the profiler writes (``create_perfetto_trace``), so nothing beyond JAX is
needed on the offline chip host.
"""

from __future__ import annotations

import collections
import gzip
import json
import threading
from pathlib import Path
from typing import Any

import jax


class PhaseProfile:
    """Traces the ``step``-th run of ``phase`` (at most ``seconds`` of it, if given) into ``out``."""

    def __init__(self, spec: str, out: Path) -> None:
        phase, _, rest = spec.partition("@")
        step, _, seconds = rest.partition(":")
        self.phase, self.step = phase, int(step or 1)
        self.seconds = float(seconds) if seconds else None
        self.out, self.seen, self.active = out, 0, False
        self._timer: threading.Timer | None = None

    def begin(self, name: str) -> None:
        if name != self.phase:
            return
        self.seen += 1
        if self.seen == self.step:
            jax.profiler.start_trace(str(self.out), create_perfetto_trace=True)
            self.active = True
            if self.seconds:
                self._timer = threading.Timer(self.seconds, self.end)
                self._timer.start()

    def end(self, name: str | None = None) -> None:
        if self.active and name in (None, self.phase):
            self.active = False
            if self._timer:
                self._timer.cancel()
            jax.profiler.stop_trace()


def summarize(trace_dir: Path, top: int = 25) -> dict[str, Any]:
    """Device threads of the newest Perfetto trace under ``trace_dir``: busy seconds, span, top ops."""
    traces = sorted(trace_dir.glob("plugins/profile/*/perfetto_trace.json.gz"))
    if not traces:
        return {"error": f"no perfetto trace under {trace_dir}"}
    with gzip.open(traces[-1]) as f:
        events = json.load(f)["traceEvents"]
    procs = {
        e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "process_name"
    }
    threads = {
        (e["pid"], e["tid"]): e["args"]["name"]
        for e in events
        if e.get("ph") == "M" and e["name"] == "thread_name"
    }
    device = {pid for pid, name in procs.items() if "/device:" in name}
    by_thread: dict[tuple, list[dict]] = collections.defaultdict(list)
    for e in events:
        if e.get("ph") == "X" and e.get("pid") in device:
            by_thread[(e["pid"], e.get("tid"))].append(e)
    out: dict[str, Any] = {"trace": str(traces[-1]), "threads": {}}
    for key, evs in by_thread.items():
        name = f"{procs[key[0]]} / {threads.get(key, key[1])}"
        ops: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0])
        cats: dict[str, float] = collections.defaultdict(float)
        for e in evs:
            ops[e["name"]][0] += e.get("dur", 0.0)
            ops[e["name"]][1] += 1
            cat = (e.get("args") or {}).get("hlo_category") or (e.get("args") or {}).get("category")
            if cat:
                cats[str(cat)] += e.get("dur", 0.0)
        start = min(e["ts"] for e in evs)
        stop = max(e["ts"] + e.get("dur", 0.0) for e in evs)
        busy = sum(v[0] for v in ops.values())
        out["threads"][name] = {
            "events": len(evs),
            "busy_s": round(busy / 1e6, 4),
            "span_s": round((stop - start) / 1e6, 4),
            "top": [
                {"op": op, "s": round(d / 1e6, 4), "share": round(d / busy, 4) if busy else None, "count": n}
                for op, (d, n) in sorted(ops.items(), key=lambda kv: -kv[1][0])[:top]
            ],
            "categories": {k: round(v / 1e6, 4) for k, v in sorted(cats.items(), key=lambda kv: -kv[1])},
        }
    return out
