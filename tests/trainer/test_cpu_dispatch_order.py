"""Two processes on loopback (gloo): collectives dispatched by a worker thread and then by the main thread
run in the same order on both processes once ``distributed.initialize`` has joined them.

Why: Tunix's learner builds each batch (rollout, reference and old-policy passes) in a worker thread and
trains in the main thread. XLA:CPU orders executables per dispatching thread; with async dispatch, process
0 ran the main thread's first collective (the train step's ``device_put`` check, an all-gather) before
the reference pass's last forward, whose inputs were still being computed there, while process 1 ran them
in dispatch order: gloo "Received data size doesn't match expected size" in
test_distributed.py's two-process run with the unpacked learner. ``distributed.initialize`` makes CPU
dispatch synchronous with several processes (``SYNC_CPU_DISPATCH``).

The script below is that hand-off, minimal: the worker thread dispatches an all-gather whose input is
still being computed on process 0 only (slow local matmuls), puts it in a queue, and the main thread then
dispatches an all-gather of host data (inputs ready at once). Without the flag both processes abort with
the gloo error; with it both print the gathered values.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from tests.observability import runs
from tests.procs import free_port

SCRIPT = textwrap.dedent(
    """
    import json, queue, threading
    import jax, jax.numpy as jnp, numpy as np
    from jax.sharding import NamedSharding, PartitionSpec as P
    from rljob_trainer.run import distributed

    procs = distributed.initialize()  # the trainer's start: RLJOB_COORDINATOR, _NUM_PROCESSES, _PROCESS_ID
    mesh = jax.sharding.Mesh(np.array(jax.devices()), ("x",))
    gathered = NamedSharding(mesh, P())
    device = jax.local_devices()[0]
    results = []
    for round_ in range(2):
        n = 1200 if procs.index == 0 else 8  # process 0 is still computing when the main thread dispatches
        a = jax.device_put(np.full((n, n), 1.0 + round_, np.float32), device)
        for _ in range(4):
            a = jnp.tanh(a @ a / n)  # local: no collective
        handoff = queue.Queue()

        def worker():
            local = jnp.sum(a).reshape(1) * 0 + procs.index + round_  # pending on process 0
            g = jax.make_array_from_single_device_arrays((2,), NamedSharding(mesh, P("x")), [local])
            handoff.put(jax.jit(lambda x: x * 2, out_shardings=gathered)(g))  # all-gather

        thread = threading.Thread(target=worker)
        thread.start()
        first = handoff.get()
        host = np.full((4,), 10 * (round_ + 1) + procs.index, np.int32)
        h = jax.make_array_from_process_local_data(NamedSharding(mesh, P("x")), host)
        second = jax.jit(lambda x: x + 1, out_shardings=gathered)(h)  # all-gather, inputs ready at once
        thread.join()
        results.append([np.asarray(first.addressable_data(0)).tolist(),
                        np.asarray(second.addressable_data(0)).tolist()])
    print("RESULT " + json.dumps(results), flush=True)
    """
)


@pytest.mark.slow
def test_collectives_dispatched_across_the_learners_thread_handoff_stay_in_order() -> None:
    coordinator = f"127.0.0.1:{free_port()}"
    env = runs.env()  # the persistent cache off, as tests/conftest.py leaves it
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", SCRIPT],
            env={
                **env,
                "RLJOB_COORDINATOR": coordinator,
                "RLJOB_NUM_PROCESSES": "2",
                "RLJOB_PROCESS_ID": str(i),
            },
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=runs.ROOT,
        )
        for i in range(2)
    ]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], "\n\n".join(o[-3000:] for o in outs)
    want = [[[0.0, 2.0], [11, 11, 11, 11, 12, 12, 12, 12]], [[2.0, 4.0], [21, 21, 21, 21, 22, 22, 22, 22]]]
    for out in outs:
        line = next(x for x in out.splitlines() if x.startswith("RESULT "))
        assert json.loads(line.removeprefix("RESULT ")) == want, out[-3000:]
