"""RLJob spec -> Tunix configs, the learner choice, the synthetic task and the per-step report math."""

from __future__ import annotations

import io
import sys
import types
from typing import Any

import numpy as np
import pytest
from rljob_trainer.models import families as models
from rljob_trainer.run.main import parse_args, preflight
from rljob_trainer.telemetry import progress
from rljob_trainer.workload import task

from rljob.api import parse_rljob
from rljob.api.spec import RLJobSpec
from tests.trainer.manifests import tiny_rljob


def spec(**sections: dict[str, Any]) -> RLJobSpec:
    return parse_rljob(tiny_rljob(**sections)).spec


@pytest.fixture(scope="module")
def bridge() -> types.ModuleType:
    from rljob_trainer import tunix_bridge

    return tunix_bridge


def test_lengths_and_updates(bridge: types.ModuleType) -> None:
    s = spec(
        grpo={"batchSize": 8, "miniBatchSize": 4, "microBatchSize": 2, "numIterations": 3, "maxSteps": 5}
    )
    n = bridge.lengths(s)
    assert (n.prompt, n.completion, n.total) == (16, 48, 64)
    assert bridge.updates_per_step(s) == 2 * 3
    tc = bridge.training_config(s)
    assert tc.max_steps == 5 * 6  # Tunix counts optimizer updates, the RLJob counts global steps
    assert (tc.mini_batch_size, tc.train_micro_batch_size, tc.gradient_accumulation_steps) == (4, 2, 2)
    assert tc.max_seq_token_per_tpu is None  # never Tunix's own pack_sequences


def test_defaults_are_one_update_per_step(bridge: types.ModuleType) -> None:
    s = spec(grpo={"batchSize": 8})
    tc = bridge.training_config(s)
    assert bridge.updates_per_step(s) == 1
    assert (tc.mini_batch_size, tc.train_micro_batch_size, tc.max_steps) == (8, None, 100)  # no MultiSteps


def test_grpo_config(bridge: types.ModuleType) -> None:
    g = bridge.grpo_config(spec(grpo={"numGenerations": 6, "beta": 0.0, "epsilon": 0.3, "numIterations": 2}))
    assert (g.num_generations, g.beta, g.epsilon, g.num_iterations) == (6, 0.0, 0.3, 2)


def test_mesh_is_plain_and_covers_all_devices(bridge: types.ModuleType) -> None:
    import jax

    mesh = bridge.make_mesh()
    assert mesh.axis_names == ("fsdp", "tp")
    assert mesh.devices.size == len(jax.devices())


def test_unpacked_spec_uses_the_unpacked_learner_where_it_has_a_head_path(bridge: types.ModuleType) -> None:
    """Packing off: qwen3/qwen2/llama3 on Tunix take the unpacked learner (head at completion columns);
    gemma3 keeps Tunix's GRPOLearner. Neither counts tokens as packed."""
    from rljob_trainer.packing.unpacked import UnpackedGRPOLearner
    from tunix.rl.grpo import grpo_learner

    for family in ("qwen3", "qwen2", "llama3"):
        s = spec(model={"family": family, "size": "tiny"})
        assert bridge.learner_class(s) == (UnpackedGRPOLearner, {}), family
    gemma = spec(model={"family": "gemma3", "size": "tiny"})
    assert bridge.learner_class(gemma) == (grpo_learner.GRPOLearner, {})
    assert not bridge.is_packed(UnpackedGRPOLearner) and not bridge.is_packed(grpo_learner.GRPOLearner)
    from rljob_trainer.packing import PackedGRPOLearner

    assert bridge.is_packed(PackedGRPOLearner)


def test_packed_spec_uses_the_packing_learner(
    bridge: types.ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = types.ModuleType("rljob_trainer.packing")
    fake.PackedGRPOLearner = type("PackedGRPOLearner", (), {})  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "rljob_trainer.packing", fake)
    monkeypatch.setattr("rljob_trainer.packing", fake, raising=False)
    cls, extra = bridge.learner_class(spec(packing={"maxSeqTokenPerTpu": 256}))
    assert cls is fake.PackedGRPOLearner
    assert extra == {"row_tokens": 256, "row_multiple": 1}
    # On a TPU backend qwen3/qwen2 use Tunix's splash attention (segment ids); llama3 has no splash path.
    _, extra = bridge.learner_class(spec(packing={"maxSeqTokenPerTpu": 256}), 4, backend="tpu")
    assert extra == {"row_tokens": 256, "row_multiple": 4, "attention": "splash"}
    llama = spec(packing={"maxSeqTokenPerTpu": 256}, model={"family": "llama3", "size": "tiny"})
    assert "attention" not in bridge.learner_class(llama, backend="tpu")[1]


def test_packed_spec_without_packing_learner_trains_unpacked(
    bridge: types.ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tunix.rl.grpo import grpo_learner

    empty = types.ModuleType("rljob_trainer.packing")
    monkeypatch.setitem(sys.modules, "rljob_trainer.packing", empty)
    monkeypatch.setattr("rljob_trainer.packing", empty, raising=False)
    assert bridge.learner_class(spec(packing={"maxSeqTokenPerTpu": 256}))[0] is grpo_learner.GRPOLearner


def test_tiny_models_build_for_every_supported_family(bridge: types.ModuleType) -> None:
    for family in ("qwen3", "qwen2", "llama3"):
        s = spec(model={"family": family, "size": "tiny"})
        cfg = models.model_config(s.model)
        assert cfg.num_layers == 2 and cfg.embed_dim == 64


@pytest.mark.parametrize(
    ("family", "size"), [(f, s) for f, fam in models.FAMILIES.items() for s in fam.sizes]
)
def test_every_named_size_is_a_tunix_config(bridge: types.ModuleType, family: str, size: str) -> None:
    s = spec(model={"family": family, "size": size, "checkpointPath": "gs://my-bucket/weights"})
    assert models.check_model_spec(s.model) == []
    assert models.model_config(s.model).num_layers > 2


def test_rollout_seed_is_a_pure_function_of_seed_step_call(bridge: types.ModuleType) -> None:
    learner = bridge.Instrumented()
    learner.base_seed = 42
    seeds = {learner.rollout_seed(step, call) for step in range(1, 50) for call in range(3)}
    assert len(seeds) == 49 * 3
    assert learner.rollout_seed(7, 0) == learner.rollout_seed(7, 0)


def test_tokenizer() -> None:
    tok = task.CharTokenizer()
    ids = tok.encode("emit a:")
    assert tok.decode([task.BOS_ID, *ids, task.EOS_ID, task.PAD_ID]) == "emit a:"
    assert tok.decode([200]) == "?"


def test_preflight_is_clean_for_the_example() -> None:
    from rljob.api import load_rljob

    job = load_rljob("examples/tiny-cpu.yaml")
    assert preflight(job) == []


def test_cli_overrides_parse() -> None:
    a = parse_args(["--config", "x.yaml", "--max-steps", "3", "--metrics-port", "9999", "--workdir", "/w"])
    assert (a.config, a.max_steps, a.metrics_port, a.workdir) == ("x.yaml", 3, 9999, "/w")


def test_step_report_math_and_console_line() -> None:
    seen: list[progress.StepReport] = []
    rec = progress.StepRecorder(max_steps=2, packed=True, callbacks=[seen.append])
    rec.begin(1)
    with rec.phase("rollout"):
        pass
    rec.add_rewards(np.array([0.0, 1.0]))
    rec.add_rewards(np.array([0.5, 0.5]))
    rec.add_tokens(real=90, slots=100, used_slots=95)
    report = rec.finish()
    assert report is not None and seen == [report]
    assert report.reward_mean == 0.5 and report.padding_tokens == 10 and report.utilization == 0.9
    assert abs(report.row_utilization - 90 / 95) < 1e-12
    assert rec.finish() is None  # nothing running
    out = io.StringIO()
    progress.ConsoleProgress(stream=out)(report)
    line = out.getvalue()
    assert "step    1/2" in line and "reward 0.500" in line
    assert "packing util  94.7% (compute  90.0%)" in line


def test_multislice_mesh_puts_data_parallelism_across_slices(bridge: types.ModuleType) -> None:
    """Each ``dp`` row holds exactly one slice's devices, so fsdp/tp collectives never cross slices."""

    class Dev(types.SimpleNamespace):
        pass

    # two slices x two hosts x two devices, listed out of order (as jax.devices() may)
    devices = [Dev(id=i, process_index=i // 2, slice_index=i // 4) for i in range(8)]
    ordered = bridge.slice_major(list(reversed(devices)))
    rows = [ordered[i : i + 4] for i in (0, 4)]
    assert [{d.slice_index for d in row} for row in rows] == [{0}, {1}]
    assert bridge.data_axes(bridge.make_mesh()) == ("fsdp",)


def test_training_config_shards_the_batch_over_the_data_axes(bridge: types.ModuleType) -> None:
    assert bridge.training_config(spec(), ("dp", "fsdp")).data_sharding_axis == ("dp", "fsdp")
    assert bridge.training_config(spec()).data_sharding_axis == ("fsdp",)
