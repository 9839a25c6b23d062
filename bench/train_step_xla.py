"""XLA's buffer assignment of the WHOLE train step as the trainer jits it (compile only, no memory used).

``bench/memory.py``'s ``xla_train_step`` compiles only the packed loss and its gradient. The step the
trainer runs is more: Tunix's ``PeftTrainer._train_step`` (``nnx.value_and_grad`` of the packed loss,
``optax.global_norm``, ``optimizer.update``) jitted by ``memory.donate_model_in_train_step`` with the
model and the optimizer donated. This script builds a Tunix RL ``Trainer`` exactly as ``RLCluster`` does
(its optimizer: ``tunix_bridge.optimizer``, wrapped by ``PeftTrainer`` in ``optax.MultiSteps`` only when
``gradient_accumulation_steps`` is set: ``--accumulation``), abstractly (``nnx.eval_shape``: bf16
parameters as the trainer loads a checkpoint, nothing allocated), installs the packed loss as
``PackedGRPOLearner`` does, lowers
the trainer's own jitted step at the memory job's shapes (Qwen3-0.6B, 1 x 4 sequences of 192 + 64 in
rows of 1,024) and prints ``memory_analysis()`` plus the optimizer state by kind.

    JAX_PLATFORMS=cpu PYTHONPATH=.:operator:trainer:cli .venv/bin/python bench/train_step_xla.py \
        --layers 0,2,28 [--accumulation none|1] [--dump /tmp/xla-step]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "trainer"), str(ROOT)]

GIB = 2**30


def abstract_trainer(layers: int, accumulation: int | None) -> tuple[Any, Any, Any]:
    """(trainer, abstract model, abstract optimizer): a Tunix RL ``Trainer`` built as RLCluster builds
    the actor's, inside ``nnx.eval_shape`` so that no parameter or optimizer state is allocated."""
    import dataclasses

    import jax
    import jax.numpy as jnp
    from flax import nnx
    from rljob_trainer import memory, tunix_bridge
    from rljob_trainer.models import families as models
    from tunix.models.qwen3 import model as q3
    from tunix.rl import trainer as rl_trainer
    from tunix.sft import peft_trainer

    from rljob.api.spec import ModelSpec

    config = dataclasses.replace(
        models.model_config(ModelSpec(family="qwen3", size="0.6b")), num_layers=layers
    )
    tx = tunix_bridge.optimizer(SimpleNamespace(grpo=SimpleNamespace(learningRate=1e-6)))
    holder: list[Any] = []

    def build() -> tuple[Any, Any]:
        model = q3.Qwen3(config, rngs=nnx.Rngs(0))
        state = nnx.state(model)
        nnx.update(model, jax.tree.map(lambda x: x.astype(jnp.bfloat16), state))  # as the loader: bf16
        cfg = peft_trainer.TrainingConfig(eval_every_n_steps=10**9, gradient_accumulation_steps=accumulation)
        trainer = rl_trainer.Trainer(
            model=model, optimizer=tx, training_config=cfg, custom_checkpoint_metadata_fn=dict
        )
        holder.append(trainer)
        return trainer.model, trainer.optimizer

    model, opt = nnx.eval_shape(build)
    trainer = holder[0]
    memory.donate_model_in_train_step(trainer)
    return trainer, model, opt


def packed_inputs(a: argparse.Namespace) -> tuple[Any, Any]:
    """(packed train example, GRPO config) at the memory job's shapes, and the packed loss installed."""
    from rljob_trainer.packing.example import pack_train_example
    from rljob_trainer.packing.learner import pick_attention_block
    from rljob_trainer.packing.testing import PAD_ID, grpo_config, random_train_example

    n, completion = a.batch * a.generations, a.total - a.prompt
    ex = random_train_example(
        [a.prompt] * n, [completion] * n, max_prompt=a.prompt, max_completion=completion, seed=0
    )
    packed, _ = pack_train_example(ex, a.row, pad_id=PAD_ID, attention_block=pick_attention_block(a.row))
    algo = grpo_config()
    algo.beta = a.beta
    return packed, algo


def tree_gib(tree: Any) -> float:
    import jax

    return round(sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(tree)) / GIB, 3)


def analyse(a: argparse.Namespace, layers: int) -> dict[str, Any]:
    from flax import nnx
    from rljob_trainer.packing.learner import pick_attention_block
    from rljob_trainer.packing.loss import make_packed_grpo_loss_fn

    accumulation = None if a.accumulation == "none" else int(a.accumulation)
    trainer, model, opt = abstract_trainer(layers, accumulation)
    packed, algo = packed_inputs(a)
    block = pick_attention_block(a.row)
    trainer.with_loss_fn(
        make_packed_grpo_loss_fn(attention="blocked", block=block, vocab_chunk=256), has_aux=True
    )
    trainer.with_gen_model_input_fn(lambda x: {"train_example": x, "algo_config": algo})
    step, _ = trainer.jit_train_and_eval_step(cache_nnx_graph=False)
    compiled = step.func.lower(model, opt, packed).compile()
    m = compiled.memory_analysis()
    opt_state = nnx.state(opt, nnx.optimizer.OptState)
    return {
        "layers": layers,
        "accumulation": a.accumulation,
        "optimizer": type(trainer.optimizer.tx).__name__ if hasattr(trainer.optimizer, "tx") else "?",
        "params_gib": tree_gib(nnx.state(model, nnx.Param)),
        "opt_state_gib": tree_gib(opt_state),
        "opt_state_by_dtype_gib": _by_dtype(opt_state),
        "temp_gib": round(m.temp_size_in_bytes / GIB, 3),
        "argument_gib": round(m.argument_size_in_bytes / GIB, 3),
        "output_gib": round(m.output_size_in_bytes / GIB, 3),
        "alias_gib": round(m.alias_size_in_bytes / GIB, 3),
        "generated_code_gib": round(m.generated_code_size_in_bytes / GIB, 3),
        # what the step adds to the live set while it runs: temp + outputs not written into donated inputs
        "peak_extra_gib": round(
            (m.temp_size_in_bytes + m.output_size_in_bytes - m.alias_size_in_bytes) / GIB, 3
        ),
    }


def _by_dtype(tree: Any) -> dict[str, float]:
    import jax

    out: dict[str, float] = {}
    for x in jax.tree.leaves(tree):
        out[str(x.dtype)] = out.get(str(x.dtype), 0.0) + x.size * x.dtype.itemsize / GIB
    return {k: round(v, 3) for k, v in out.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", default="0,2,28")
    ap.add_argument(
        "--accumulation",
        default="none",
        help="gradient_accumulation_steps: 'none' (the trainer when micro = mini batch: no MultiSteps) or an"
        " int (1: what the trainer passed before issue 25, MultiSteps with its float32 accumulator)",
    )
    ap.add_argument("--prompt", type=int, default=192)
    ap.add_argument("--total", type=int, default=256)
    ap.add_argument("--row", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--generations", type=int, default=4)
    ap.add_argument("--beta", type=float, default=0.04)
    ap.add_argument("--dump", help="XLA dump directory (HLO text and buffer assignment)")
    a = ap.parse_args()
    if a.dump:
        os.environ["XLA_FLAGS"] = (
            f"{os.environ.get('XLA_FLAGS', '')} --xla_dump_to={a.dump} --xla_dump_hlo_as_text"
        )
    for n in a.layers.split(","):
        print(json.dumps(analyse(a, int(n))), flush=True)


if __name__ == "__main__":
    main()
