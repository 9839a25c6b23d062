"""Multi-host start: one JAX process per host, joined with ``jax.distributed.initialize()``.

Three ways a trainer starts, picked from the environment (``initialize`` must run before any JAX
computation, so ``main.train`` calls it first):

* explicit, ``RLJOB_COORDINATOR`` set (``host:port`` of process 0's coordinator) with
  ``RLJOB_NUM_PROCESSES`` and ``RLJOB_PROCESS_ID``: any non-TPU cluster, and the two-process CPU test on
  loopback. CPU collectives across processes use gloo (JAX's default).
* GKE TPU: GKE's TPU webhook injects ``TPU_WORKER_HOSTNAMES``/``TPU_WORKER_ID`` into Indexed Job pods
  (and JobSet multislice adds ``MEGASCALE_*``); ``jax.distributed.initialize()`` with no arguments reads
  them. The operator deliberately sets no ``JAX_COORDINATOR_ADDRESS`` (see rljob_operator/env.py).
* otherwise a single process: nothing to initialize. That includes a single TPU VM (GKE's one-host slice,
  or a TPU VM run by hand) where ``TPU_WORKER_HOSTNAMES`` names one host and no multislice
  (``MEGASCALE_NUM_SLICES`` unset or 1): there is nobody to join, and ``initialize()`` would ask the GCE
  metadata server for the topology (an offline host has none). The process-count check below still runs.

The operator also tells every pod how many processes to expect (``RLJOB_NUM_SLICES`` x
``RLJOB_HOSTS_PER_SLICE``); a different JAX process count (e.g. GKE's injection missing, so each host
would train alone and all would write the same checkpoints) is a config error: exit 2, not a retry.

After it, every process serves its own metrics (label ``process``), all processes take part in
checkpoint saves, and process 0 alone writes checkpoint metadata and logs.

Several processes on the CPU backend (gloo collectives) dispatch synchronously
(``SYNC_CPU_DISPATCH``): XLA:CPU orders executables per dispatching thread, not per device. Tunix's
learner builds each batch (rollout, reference and old-policy passes) in a worker thread and trains in
the main thread; with async dispatch, a collective the main thread dispatches after the hand-off can
start on one process before a collective the worker dispatched earlier whose inputs are still being
computed there, while the other process runs them in dispatch order, and gloo pairs two different
collectives ("Received data size doesn't match expected size", or, equal sizes, silently exchanged
data). tests/trainer/test_cpu_dispatch_order.py shows it with two jitted all-gathers. Synchronous
dispatch finishes each computation in the thread that dispatched it, so the hand-off orders them.
Computations on TPU and GPU are not affected by the flag.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from rljob.api import RLJobError
from rljob_trainer.run import sigterm

ENV_COORDINATOR = "RLJOB_COORDINATOR"
ENV_NUM_PROCESSES = "RLJOB_NUM_PROCESSES"
ENV_PROCESS_ID = "RLJOB_PROCESS_ID"
TPU_ENV = "TPU_WORKER_HOSTNAMES"
MEGASCALE_SLICES = "MEGASCALE_NUM_SLICES"
ENV_NUM_SLICES = "RLJOB_NUM_SLICES"
ENV_HOSTS_PER_SLICE = "RLJOB_HOSTS_PER_SLICE"
SYNC_CPU_DISPATCH = ("jax_cpu_enable_async_dispatch", False)  # several processes: see the module doc


@dataclass(frozen=True)
class Processes:
    index: int
    count: int
    mode: str  # "explicit", "tpu" or "single"


def mode(environ: dict[str, str] | None = None) -> str:
    """Which start applies to this environment (pure: no JAX import)."""
    env = os.environ if environ is None else environ
    if env.get(ENV_COORDINATOR):
        return "explicit"
    hosts = [h for h in env.get(TPU_ENV, "").split(",") if h.strip()]
    if len(hosts) > 1 or (hosts and env.get(MEGASCALE_SLICES, "1").strip() != "1"):
        return "tpu"
    return "single"  # no TPU environment, or one host of one slice: nobody to join


def explicit_args(environ: dict[str, str] | None = None) -> dict[str, object]:
    """``jax.distributed.initialize`` kwargs from the RLJOB_* variables; ValueError naming a bad one."""
    env = os.environ if environ is None else environ
    try:
        count = int(env[ENV_NUM_PROCESSES])
        index = int(env[ENV_PROCESS_ID])
    except (KeyError, ValueError) as exc:
        raise ValueError(
            f"{ENV_COORDINATOR} is set, so {ENV_NUM_PROCESSES} and {ENV_PROCESS_ID} must be integers ({exc})"
        ) from None
    if not 0 <= index < count:
        raise ValueError(f"{ENV_PROCESS_ID}={index} is outside 0..{ENV_NUM_PROCESSES}-1 ({count - 1})")
    return {"coordinator_address": env[ENV_COORDINATOR], "num_processes": count, "process_id": index}


def process_count_errors(count: int, environ: dict[str, str] | None = None) -> list[str]:
    """Why ``count`` JAX processes are wrong for this pod's RLJob (empty: right, or nothing to compare)."""
    env = os.environ if environ is None else environ
    if not (env.get(ENV_NUM_SLICES) and env.get(ENV_HOSTS_PER_SLICE)):
        return []  # not started by the operator (rljob train, tests): nothing to compare with
    slices, hosts = int(env[ENV_NUM_SLICES]), int(env[ENV_HOSTS_PER_SLICE])
    if count == slices * hosts:
        return []
    return [
        f"spec.tpu: JAX sees {count} process(es) but the slice shape needs {slices} slice(s) x {hosts} "
        f"host(s) = {slices * hosts}; the TPU environment (TPU_WORKER_HOSTNAMES, TPU_WORKER_ID, "
        "MEGASCALE_* from GKE's TPU webhook and JobSet) does not match the RLJob's spec.tpu"
    ]


def initialize() -> Processes:
    """Join the other processes (if any); safe to call twice.

    Raises ``RLJobError`` (a config error, exit 2) when the process count does not match the RLJob.
    """
    import jax

    how = mode()
    if how != "single" and not jax.distributed.is_initialized():
        try:
            kwargs = explicit_args() if how == "explicit" else {}
        except ValueError as exc:
            raise RLJobError([str(exc)], "the distributed start") from None
        print(f"distributed start ({how}): waiting for the other processes", flush=True)
        jax.config.update(*SYNC_CPU_DISPATCH)  # read when the CPU client is created: before any computation
        # may wait minutes for the other hosts: keep SIGTERM working meanwhile (rljob_trainer.run.sigterm)
        sigterm.run_interruptible(lambda: jax.distributed.initialize(**kwargs))  # type: ignore[arg-type]
        sigterm.install()  # XLA's preemption notifier replaced our handler
    errors = process_count_errors(jax.process_count())
    if errors:
        raise RLJobError(errors, "the distributed start")
    return Processes(index=jax.process_index(), count=jax.process_count(), mode=how)


def process_index() -> int:
    """This process's index without starting a backend when JAX was never initialized here."""
    if mode() == "explicit":
        return int(os.environ.get(ENV_PROCESS_ID, "0"))
    import jax

    return jax.process_index()


def any_process(flag: bool) -> bool:
    """True on every process when ``flag`` is true on at least one (a tiny all-gather; local when alone).

    Why: SIGTERM reaches hosts at slightly different moments; all of them must stop after the same step,
    or the checkpoint save (a collective) would hang.
    """
    import jax

    if jax.process_count() == 1:
        return flag
    import numpy as np
    from jax.experimental import multihost_utils

    return bool(np.any(multihost_utils.process_allgather(np.array([flag], dtype=np.int32))))
