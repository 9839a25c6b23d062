"""Every trainer path on the chip: each family x packing on/off, the head whole and at completion columns
in chunks, beta 0 and > 0, one and two GRPO iterations (``tests.trainer.sharded_run`` in one child: the
chip opens once), and the example run as a pod runs it (``python -m rljob_trainer``) on a single TPU VM
that names itself in ``TPU_WORKER_HOSTNAMES`` (no distributed start: exit 0, not a metadata-server hang).
"""

from __future__ import annotations

import json

from tests.tpu import chip

# family:packing:head:beta:iterations[:budget] (tests/trainer/sharded_run.py). On the chip, packed
# qwen3/qwen2 run Tunix's splash kernel with the whole head; llama3 and gemma3 packed run the project's own
# forwards. The unpacked learner's input has one shape, and with a token budget of one row so have
# splash's chunks: the train step compiles beside the first rollout (``packing.prewarm``).
CASES = [
    "qwen3:0:chunked:0.04:2",
    "qwen3:256:whole:0.0:1",
    "qwen2:0:whole:0.04:1",
    "qwen2:256:whole:0.04:2",
    "llama3:0:chunked:0.0:2",
    "llama3:256:chunked:0.04:1",
    "gemma3:0:whole:0.04:2",
    "gemma3:256:whole:0.0:1",
    "qwen3:256:whole:0.0:1:256",
]


def test_every_family_and_packing_trains_on_the_chip(record) -> None:
    res = chip.run(["python", "-m", "tests.trainer.sharded_run", *CASES], timeout=1500, RLJOB_NO_SOCKETS="1")
    results = [json.loads(line) for line in res["stdout"].splitlines() if line.startswith("{")]
    record(
        "trainer_paths",
        {
            "rc": res["rc"],
            "seconds": res["seconds"],
            "results": results,
            "stderr_tail": res["stderr_tail"][-1500:] if res["rc"] else "",
        },
    )
    assert res["rc"] == 0, res["stderr_tail"]
    assert [r["case"] for r in results] == CASES
    for r in results:
        assert r["steps"] == [1, 2], r
        assert r["devices"] == 1
        # one input shape known at start (the unpacked learner's; splash chunks of a budget): the step
        # compiled once, by the thread beside the first rollout (``packing.prewarm``)
        if r["case"].count(":") == 5 or r["learner"] == "InstrumentedUnpackedGRPOLearner":
            assert r["train_step_compiled_by"] == ["rljob-prewarm"], r


def test_the_example_runs_as_a_pod_on_one_tpu_vm(record) -> None:
    res = chip.run(
        ["python", "-m", "rljob_trainer", "--config", "examples/tiny-cpu.yaml", "--metrics-port", "9464"],
        timeout=900,
        TPU_WORKER_HOSTNAMES="localhost",
        TPU_WORKER_ID="0",
        RLJOB_NO_SOCKETS="1",
    )
    steps = chip.steps(res["stdout"])
    record(
        "tiny_example",
        {
            "rc": res["rc"],
            "seconds": res["seconds"],
            "steps": steps,
            "versions": chip.versions(),
            "stderr_tail": res["stderr_tail"][-1500:] if res["rc"] else "",
        },
    )
    assert res["rc"] == 0, res["stdout"][-2000:] + res["stderr_tail"]
    assert "distributed start" not in res["stdout"]
    assert len(steps) == 25 and sum(s["reward"] for s in steps[-5:]) / 5 > 0.5
