"""Multi-host start: environment -> ``jax.distributed.initialize`` arguments, and a real two-process CPU
run on loopback (gloo collectives) in which both processes train, checkpoint together and serve metrics.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from rljob_trainer.run import distributed

from tests.observability import runs
from tests.observability.runs import value
from tests.procs import free_port


def test_mode_from_environment() -> None:
    assert distributed.mode({}) == "single"
    assert distributed.mode({"TPU_WORKER_HOSTNAMES": "h0,h1", "TPU_WORKER_ID": "1"}) == "tpu"
    # One TPU VM: nobody to join (initialize() would ask the GCE metadata server); one host per slice
    # of a multislice job still joins the other slices.
    assert distributed.mode({"TPU_WORKER_HOSTNAMES": "localhost", "TPU_WORKER_ID": "0"}) == "single"
    assert distributed.mode({"TPU_WORKER_HOSTNAMES": "h0", "MEGASCALE_NUM_SLICES": "1"}) == "single"
    assert distributed.mode({"TPU_WORKER_HOSTNAMES": "h0", "MEGASCALE_NUM_SLICES": "2"}) == "tpu"
    env = {"RLJOB_COORDINATOR": "10.0.0.1:1234", "RLJOB_NUM_PROCESSES": "4", "RLJOB_PROCESS_ID": "3"}
    assert distributed.mode(env) == "explicit"
    assert distributed.explicit_args(env) == {
        "coordinator_address": "10.0.0.1:1234",
        "num_processes": 4,
        "process_id": 3,
    }


@pytest.mark.parametrize(
    "bad",
    [
        {"RLJOB_NUM_PROCESSES": "2"},
        {"RLJOB_NUM_PROCESSES": "x", "RLJOB_PROCESS_ID": "0"},
        {"RLJOB_NUM_PROCESSES": "2", "RLJOB_PROCESS_ID": "2"},
    ],
)
def test_bad_explicit_environment_names_the_variable(bad: dict[str, str]) -> None:
    with pytest.raises(ValueError, match="RLJOB_"):
        distributed.explicit_args({"RLJOB_COORDINATOR": "127.0.0.1:1", **bad})


def test_single_process_any_process_is_the_local_flag() -> None:
    assert distributed.any_process(True) is True
    assert distributed.any_process(False) is False


@pytest.mark.slow
def test_two_processes_on_loopback_train_and_both_export_metrics(tmp_path: Path) -> None:
    steps = 1
    ports = [free_port(), free_port()]
    config = runs.write(
        tmp_path / "rljob.yaml",
        runs.manifest("two-hosts", steps, ckpt_dir=tmp_path / "ckpt", interval=1, port=ports[0]),
    )
    coordinator = f"127.0.0.1:{free_port()}"
    procs = [
        runs.start(
            config,
            "--metrics-port",
            str(ports[i]),
            RLJOB_COORDINATOR=coordinator,
            RLJOB_NUM_PROCESSES="2",
            RLJOB_PROCESS_ID=str(i),
            RLJOB_METRICS_LINGER_SECONDS="10",
        )
        for i in range(2)
    ]
    outputs: list[str] = []
    try:
        for proc in procs:
            lines: list[str] = []
            assert runs.wait_for_line(proc, "done:", lines, timeout=400), "".join(lines)
            outputs.append("".join(lines))
        time.sleep(0.5)
        scraped = [runs.scrape(port) for port in ports]
    finally:
        for proc in procs:
            proc.communicate(timeout=120)
    assert [p.returncode for p in procs] == [0, 0], outputs

    for index, samples in enumerate(scraped):
        assert samples is not None, f"process {index} served no metrics"
        labels = {"rljob": "two-hosts", "process": str(index)}
        assert value(samples, "rljob_trainer_steps_total", **labels) == steps
        assert value(samples, "rljob_trainer_step_duration_seconds_count", **labels) == steps
        assert value(samples, "rljob_trainer_global_step", **labels) == steps
        assert value(samples, "rljob_trainer_checkpoint_last_step", **labels) == steps

    # A checkpoint per step (interval 1), written by both processes together; only process 0 logs it.
    assert sorted(int(p.name) for p in (tmp_path / "ckpt").iterdir() if p.name.isdigit()) == list(
        range(1, steps + 1)
    )
    assert f"checkpoint: saved step {steps}" in outputs[0]
    assert "checkpoint: saved" not in outputs[1]


def test_one_tpu_host_starts_alone_and_still_checks_the_slice_shape(monkeypatch: pytest.MonkeyPatch) -> None:
    from rljob.api import RLJobError

    monkeypatch.setenv("TPU_WORKER_HOSTNAMES", "localhost")
    monkeypatch.setenv("TPU_WORKER_ID", "0")
    monkeypatch.setenv("RLJOB_NUM_SLICES", "1")
    monkeypatch.setenv("RLJOB_HOSTS_PER_SLICE", "1")
    assert distributed.initialize() == distributed.Processes(index=0, count=1, mode="single")
    monkeypatch.setenv("RLJOB_HOSTS_PER_SLICE", "2")  # the RLJob wants 2 hosts; this pod's TPU env names 1
    with pytest.raises(RLJobError, match=r"spec\.tpu: JAX sees 1 process"):
        distributed.initialize()
