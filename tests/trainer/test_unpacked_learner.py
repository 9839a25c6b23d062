"""The unpacked learner (packing off): Tunix's layout and loop, the vocabulary head at completion columns
only in every actor-side pass, and the same numbers as Tunix's own ``GRPOLearner``.

The passes are called the way Tunix's learner calls them: the cluster's ``get_ref_per_token_logps`` /
``get_old_per_token_logps`` (micro-batch slices included) and the actor trainer's loss fn with the
keyword inputs of ``with_gen_model_input_fn``; a whole GRPO step compares the optimizer updates.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from rljob_trainer.packing import loss as loss_module
from rljob_trainer.packing.testing import (
    EOS_ID,
    PAD_ID,
    grpo_config,
    length_reward,
    random_train_example,
    tiny_cluster,
    tiny_model,
)
from rljob_trainer.packing.unpacked import UnpackedGRPOLearner
from tunix.rl.grpo.grpo_learner import GRPOLearner

MAX_P, MAX_C = 8, 24
PROMPTS = [8, 3, 5, 1]
COMPLETIONS = [24, 9, 2, 17]
# family, model overrides, a pad run inside one completion. Not for qwen2: Tunix's own qwen2 attention
# also masks by the non-pad "segment ids" compute_per_token_logps passes, so a pad column's query meets no
# key and attends uniformly over the whole row, future included; the token after the pad run is predicted
# from that state (qwen3/llama3 and this learner attend the real past). The trainer never samples such a
# pad (the pad id is one of the rollout's EOS ids: tunix_bridge.rollout_config).
FAMILIES = [
    ("qwen3", {}, True),
    ("qwen2", {"use_tied_embedding": False}, False),
    ("llama3", {"weight_tying": False}, True),
]


def example(pads_inside: bool = True):
    """Tunix's unpacked mini-batch, optionally with a pad run inside one completion (as a sampler that
    stops only on EOS can emit)."""
    ex = random_train_example(PROMPTS, COMPLETIONS, max_prompt=MAX_P, max_completion=MAX_C, seed=4)
    if not pads_inside:
        return ex
    c = np.asarray(ex.completion_ids).copy()
    c[0, [3, 4]] = PAD_ID
    return ex.replace(completion_ids=jnp.asarray(c), completion_mask=jnp.asarray(c != PAD_ID))


def learners(family, overrides, vocab_chunk=None):
    """Tunix's passes (a plain GRPOLearner built first) and the unpacked learner's, on one cluster."""
    cluster = tiny_cluster(family, max_prompt=MAX_P, max_completion=MAX_C, beta=0.04, **overrides)
    cfg = grpo_config(num_iterations=2)
    GRPOLearner(rl_cluster=cluster, algo_config=cfg, reward_fns=[length_reward])
    tunix = (cluster.get_ref_per_token_logps, cluster.get_old_per_token_logps, cluster.actor_trainer.loss_fn)
    learner = UnpackedGRPOLearner(
        rl_cluster=cluster, algo_config=cfg, reward_fns=[length_reward], vocab_chunk=vocab_chunk
    )
    ours = (cluster.get_ref_per_token_logps, cluster.get_old_per_token_logps, cluster.actor_trainer.loss_fn)
    return cluster, learner, tunix, ours


def differences(cluster, cfg, tunix, ours, ex):
    """Largest |ours - Tunix| of the reference and old log-probs (real completion tokens), the loss,
    the aux values and every gradient; plus the largest Tunix gradient (to see it is not zero)."""
    mask = np.asarray(ex.completion_mask)
    out = {}
    for name, call in (
        ("ref", lambda f: f(ex.prompt_ids, ex.completion_ids, PAD_ID, EOS_ID, micro_batch_size=2)),
        ("old", lambda f: f(ex.prompt_ids, ex.completion_ids, micro_batch_size=3)),
    ):
        fn_t, fn_o = (tunix[0], ours[0]) if name == "ref" else (tunix[1], ours[1])
        want, got = np.asarray(call(fn_t)), np.asarray(call(fn_o))
        assert got.shape == want.shape == mask.shape
        assert np.abs(want[mask]).min() > 0
        out[name] = float(np.abs(np.where(mask, got - want, 0.0)).max())

    def loss_and_grads(loss_fn):
        fn = lambda m: loss_fn(m, train_example=ex, algo_config=cfg)  # noqa: E731 - as Tunix's trainer
        (loss, aux), grads = nnx.value_and_grad(fn, has_aux=True)(cluster.actor_trainer.model)
        return float(loss), aux, jax.tree.leaves(nnx.state(grads, nnx.Param))

    (wl, wa, wg), (gl, ga, gg) = loss_and_grads(tunix[2]), loss_and_grads(ours[2])
    out["loss"] = abs(gl - wl)
    out["aux"] = max(abs(float(ga[k]) - float(wa[k])) for k in ("kl", "pg_loss", "entropy", "ppo_kl"))
    out["grad"] = max(float(np.abs(np.asarray(g) - np.asarray(w)).max()) for g, w in zip(gg, wg, strict=True))
    out["grad_scale"] = max(float(np.abs(np.asarray(w)).max()) for w in wg)
    return out


# The head whole (0) and in chunks of 37 tokens on qwen3 (tied), one of each on the untied qwen2 and llama3.
PASS_CASES = [(*FAMILIES[0], 0), (*FAMILIES[0], 37), (*FAMILIES[1], 37), (*FAMILIES[2], 0)]


@pytest.mark.parametrize(("family", "overrides", "pads_inside", "vocab_chunk"), PASS_CASES)
def test_passes_equal_tunix_grpo_learner(family, overrides, pads_inside, vocab_chunk):
    """Reference (temperature 0.9), old policy (1.0, as Tunix's vanilla rollout) and train loss with
    gradients: the unpacked learner's == plain GRPOLearner's within 1e-5, whole and chunked head."""
    cluster, learner, tunix, ours = learners(family, overrides, vocab_chunk)
    assert learner.vocab_chunk == vocab_chunk
    assert all(o is not t for o, t in zip(ours, tunix, strict=True))  # every pass is the learner's own
    diff = differences(cluster, learner.algo_config, tunix, ours, example(pads_inside))
    assert diff["grad_scale"] > 1e-4, diff  # gradients are not trivially zero
    for key in ("ref", "old", "loss", "aux", "grad"):
        assert diff[key] < 1e-5, (key, diff)


def test_a_shifted_gather_is_caught(monkeypatch):
    """The head reading hidden states one column off (column t - 2 predicting token t) breaks every pass."""
    real = loss_module.packed_hidden

    def shifted(*args, **kwargs):
        return jnp.roll(real(*args, **kwargs), 1, axis=1)

    monkeypatch.setattr(loss_module, "packed_hidden", shifted)
    jax.clear_caches()  # the jitted log-prob pass must trace the patched forward, not reuse a compile
    try:
        cluster, learner, tunix, ours = learners("qwen3", {}, vocab_chunk=0)
        diff = differences(cluster, learner.algo_config, tunix, ours, example())
    finally:
        jax.clear_caches()
    for key in ("ref", "old", "loss", "grad"):
        assert diff[key] > 1e-3, (key, diff)


def run_step(learner_cls):
    """One global step: 4 prompts x 2 generations, mini-batch 2, micro-batch 1, 2 GRPO iterations
    (4 optimizer updates), beta 0.04: reference, old-policy and train passes all run."""
    cluster = tiny_cluster("qwen3", max_prompt=8, max_completion=24, mini_batch=2, micro_batch=1, beta=0.04)
    cfg = grpo_config(num_iterations=2)
    learner_cls(rl_cluster=cluster, algo_config=cfg, reward_fns=[length_reward]).train(
        [{"prompts": np.array(["ab", "cde", "f", "ghij"])}]
    )
    trainer = cluster.actor_trainer
    params = [np.asarray(p) for p in jax.tree.leaves(nnx.state(trainer.model, nnx.Param))]
    return trainer.train_steps, params


def test_step_makes_the_same_updates_as_tunix():
    steps_t, params_t = run_step(GRPOLearner)
    steps_u, params_u = run_step(UnpackedGRPOLearner)
    assert steps_u == steps_t == 4
    initial = [np.asarray(p) for p in jax.tree.leaves(nnx.state(tiny_model("qwen3", seed=0), nnx.Param))]
    assert max(np.abs(p - q).max() for p, q in zip(params_t, initial, strict=True)) > 1e-6  # it trained
    for p, q in zip(params_u, params_t, strict=True):
        assert np.abs(p - q).max() < 1e-5


def test_refuses_what_it_cannot_serve():
    gemma = tiny_cluster("gemma3", max_prompt=MAX_P, max_completion=MAX_C)
    with pytest.raises(ValueError, match="head at completion columns"):
        UnpackedGRPOLearner(rl_cluster=gemma, algo_config=grpo_config(), reward_fns=[length_reward])
    cluster = tiny_cluster("qwen3", max_prompt=MAX_P, max_completion=MAX_C)
    cluster.cluster_config.training_config.max_seq_token_per_tpu = 64
    with pytest.raises(ValueError, match="max_seq_token_per_tpu"):
        UnpackedGRPOLearner(rl_cluster=cluster, algo_config=grpo_config(), reward_fns=[length_reward])
