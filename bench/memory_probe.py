"""What ``bench/memory.py`` measures in and around its child process: resident memory from /proc, and
``Probe``, which attributes the child's RSS peaks to the phase running and its JAX arrays to what holds
them. Linux only (/proc)."""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

GIB = 2**30
PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_bytes(pid: int | str = "self") -> int:
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * PAGE


def status_kib(field: str, pid: int | str = "self") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def available_gib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 2**20
    return 0.0


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


class Probe:
    """RSS sampled every few ms, attributed to the phase running; live arrays by kind at phase edges."""

    def __init__(self, out: Path, every_s: float = 0.005):
        self.out, self.every_s = out, every_s
        self.stack: list[str] = ["startup"]
        self.peaks: dict[str, int] = {}
        self.records: list[dict[str, Any]] = []
        self.run: Any = None
        self.lock = threading.Lock()
        self.step = 0
        threading.Thread(target=self._sample, daemon=True).start()

    def _sample(self) -> None:
        while True:
            rss = rss_bytes()
            with self.lock:
                for name in self.stack:
                    self.peaks[name] = max(self.peaks.get(name, 0), rss)
            time.sleep(self.every_s)

    def kinds(self) -> dict[str, int]:
        """Bytes of JAX's live arrays by what holds them (each buffer counted once)."""
        import jax
        from flax import nnx

        owners: dict[int, str] = {}

        def claim(kind: str, tree: Any) -> None:
            for leaf in jax.tree.leaves(tree):
                if isinstance(leaf, jax.Array) and not leaf.is_deleted():
                    owners.setdefault(leaf.unsafe_buffer_pointer(), kind)

        if self.run is not None:
            cluster = self.run.cluster
            trainer = cluster.actor_trainer
            claim("actor_params", nnx.state(trainer.model, nnx.Param))
            claim("optimizer_state", nnx.state(trainer.optimizer, nnx.optimizer.OptState))
            with contextlib.suppress(Exception):
                claim("reference_params", nnx.state(cluster.inference_worker.get_model("reference")))
            with contextlib.suppress(Exception):
                claim("rollout_weights", cluster.rollout._sampler._flattened_transformer_state)
            claim("anchor_policy_copy", getattr(cluster, "_anchor_policy_state", None))
        out: dict[str, int] = {}
        seen: set[int] = set()
        for arr in jax.live_arrays():
            if arr.is_deleted():
                continue
            ptr = arr.unsafe_buffer_pointer()
            if ptr in seen:
                continue
            seen.add(ptr)
            kind = owners.get(ptr, "other")
            out[kind] = out.get(kind, 0) + arr.nbytes
        return out

    @contextlib.contextmanager
    def phase(self, name: str) -> Any:
        start_rss, start_live = rss_bytes(), self.kinds()
        with self.lock:
            self.stack.append(name)
            self.peaks[name] = start_rss
        try:
            yield
        finally:
            with self.lock:
                self.stack.remove(name)
                peak = self.peaks.pop(name)
            self.records.append(
                {
                    "step": self.step,
                    "phase": name,
                    "rss_start": start_rss,
                    "rss_peak": max(peak, rss_bytes()),
                    "rss_end": rss_bytes(),
                    "live_start": start_live,
                    "live_end": self.kinds(),
                }
            )
            self.dump()

    def dump(self, **extra: Any) -> None:
        doc = {"records": self.records, "vm_hwm": status_kib("VmHWM") * 1024, **extra}
        self.out.write_text(json.dumps(doc))
