"""Short real GRPO runs on CPU: tiny qwen3, vanilla rollout, the built-in "emit a" task.

Each run is a few dozen steps (~20-50 s on 2 busy cores, most of it JIT compilation).
"""

from __future__ import annotations

import copy
import os
from typing import Any

import jax
import numpy as np
import pytest
from flax import nnx
from rljob_trainer import tunix_bridge
from rljob_trainer.packing.unpacked import UnpackedGRPOLearner
from rljob_trainer.run import main as trainer_main
from tunix.rl.grpo.grpo_learner import GRPOLearner

from rljob.api import parse_rljob
from rljob.api.spec import RLJob
from tests import procs
from tests.trainer.manifests import tiny_rljob

pytestmark = pytest.mark.slow

BASE = tiny_rljob(
    maxTargetLength=48,
    rollout={"engine": "vanilla", "temperature": 1.0},
    grpo={"numGenerations": 4, "batchSize": 8, "beta": 0.04, "learningRate": 0.01, "maxSteps": 20, "seed": 7},
)


def job(packing: int = 0, **grpo: Any) -> RLJob:
    doc = copy.deepcopy(BASE)
    doc["spec"]["grpo"].update(grpo)
    doc["spec"]["packing"] = {"maxSeqTokenPerTpu": packing}
    # the chip's host has no sockets (RLJOB_NO_SOCKETS: the trainer serves no metrics), so no port to find
    port = 9464 if os.environ.get("RLJOB_NO_SOCKETS") else procs.free_port()
    doc["spec"]["metrics"] = {"port": port}
    return parse_rljob(doc)


def test_reward_rises_on_the_synthetic_task() -> None:
    run = trainer_main.train(job())
    assert isinstance(run.learner, UnpackedGRPOLearner)  # packing off: the head at completion columns
    reports = run.recorder.reports
    rewards = [r.reward_mean for r in reports]
    assert [r.step for r in reports] == list(range(1, 21))
    first, last = np.mean(rewards[:5]), np.mean(rewards[-5:])
    assert first < 0.1, rewards
    assert last > 0.5 and last > first + 0.4, rewards
    r = reports[-1]
    assert r.rewards.shape == (8 * 4,)
    assert {"rollout", "reference", "train"} <= set(r.phase_seconds)
    assert 0 < r.real_tokens <= r.slot_tokens == 8 * 4 * 48
    assert 0 < r.utilization <= 1
    seeds = [s for rep in reports for s in rep.rollout_seeds]
    assert len(seeds) == len(set(seeds)) == 20  # a fresh sampler seed per generate call


def _final_params(run: tunix_bridge.TunixRun) -> dict[str, np.ndarray]:
    state = nnx.state(run.cluster.actor_trainer.model, nnx.Param)
    flat = jax.tree_util.tree_flatten_with_path(state)[0]
    return {jax.tree_util.keystr(path): np.asarray(leaf) for path, leaf in flat}


def test_packed_and_unpacked_runs_agree() -> None:
    """Packing changes speed, not results: same seed -> same samples, same rewards, ~same weights."""
    small = {"maxSteps": 3, "batchSize": 2, "beta": 0.0}  # few shapes: each new one compiles (~10-30 s)
    unpacked = trainer_main.train(job(**small))
    packed = trainer_main.train(job(packing=128, **small))
    assert packed.recorder.packed and not unpacked.recorder.packed
    for u, p in zip(unpacked.recorder.reports, packed.recorder.reports, strict=True):
        assert u.rollout_seeds == p.rollout_seeds
        np.testing.assert_allclose(p.rewards, u.rewards, atol=1e-6)
        assert p.real_tokens == u.real_tokens
    pu, pp = _final_params(unpacked), _final_params(packed)
    assert pu.keys() == pp.keys()
    for name in pu:
        np.testing.assert_allclose(pp[name], pu[name], atol=1e-4, err_msg=name)


def test_unpacked_learner_trains_as_tunix_grpo_learner(monkeypatch: pytest.MonkeyPatch) -> None:
    """Packing off, through the trainer entry: the unpacked learner (head at completion columns in the
    reference, old-policy and train passes) is taken, and its run equals one through Tunix's own
    GRPOLearner: same samples and rewards, same token counts (not packed), ~same weights."""
    small = {"maxSteps": 3, "batchSize": 2, "beta": 0.04, "numIterations": 2}  # all three passes run
    ours = trainer_main.train(job(**small))
    monkeypatch.setattr(tunix_bridge, "unpacked_learner", lambda spec: (GRPOLearner, {}))
    tunix = trainer_main.train(job(**small))
    assert isinstance(ours.learner, UnpackedGRPOLearner) and not isinstance(
        tunix.learner, UnpackedGRPOLearner
    )
    assert not ours.recorder.packed and not tunix.recorder.packed
    assert [r.step for r in ours.recorder.reports] == [1, 2, 3]
    for u, t in zip(ours.recorder.reports, tunix.recorder.reports, strict=True):
        assert u.rollout_seeds == t.rollout_seeds
        np.testing.assert_allclose(u.rewards, t.rewards, atol=1e-6)
        assert (u.real_tokens, u.slot_tokens) == (t.real_tokens, t.slot_tokens)
        assert u.slot_tokens == 2 * 4 * 48  # Tunix's [B, P + Tc] slots: the prompt columns still run
        assert {"reference", "old_logps", "train"} <= set(u.phase_seconds)
    po, pt = _final_params(ours), _final_params(tunix)
    assert po.keys() == pt.keys()
    for name in po:  # Adam at lr 0.01 turns gradient rounding on near-zero-gradient elements into steps
        # of ~1e-4 (seen: 1.3e-4 on one element of 2,048 on another CPU); a column-shifted head: 3.9e-3
        np.testing.assert_allclose(po[name], pt[name], atol=5e-4, err_msg=name)


def test_a_token_budget_reaches_both_learners_and_trains_the_same() -> None:
    """``spec.grpo.maxTokensPerTpu`` through the trainer entry: the packed learner cuts its micro-batches
    into chunks of 2 rows of 128, the unpacked one into chunks of 5 sequences of 48 slots (8 sequences a
    micro-batch: 2 chunks each), and both runs agree as unchunked packed and unpacked runs do (that each
    equals its unchunked run to 1e-5 is tests/trainer/test_packing_budget.py)."""
    small = {"maxSteps": 3, "batchSize": 2, "beta": 0.04, "maxTokensPerTpu": 256}
    unpacked = trainer_main.train(job(**small))
    packed = trainer_main.train(job(packing=128, **small))
    assert (packed.learner.chunk_rows, unpacked.learner.per_chunk) == (2, 5)
    for u, p in zip(unpacked.recorder.reports, packed.recorder.reports, strict=True):
        np.testing.assert_allclose(p.rewards, u.rewards, atol=1e-6)
    pu, pp = _final_params(unpacked), _final_params(packed)
    for name in pu:  # Adam on near-zero gradients (see above): seen 1.7e-4 on 4 of 16,384 elements
        np.testing.assert_allclose(pp[name], pu[name], atol=5e-4, err_msg=name)


def test_a_chunked_rollout_draws_a_fresh_seed_per_sampler_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the KV cache does not fit (``memory.rollout_prompts``), Tunix samples a step in several
    sampler calls of one config; each call gets its own seed (one shared seed would give every slice
    the same random stream), a pure function of (seed, step, call) as before."""
    from rljob_trainer import memory

    sized: list[dict] = []
    monkeypatch.setattr(memory, "rollout_prompts", lambda *a, **kw: sized.append(kw) or 1)  # 1 prompt a call
    run = trainer_main.train(job(maxSteps=2, batchSize=2, beta=0.0))
    assert sized == [{"kv_layout": True}]  # one device: the caches in decode.KV_LAYOUT, sized as such
    seeds = [rep.rollout_seeds for rep in run.recorder.reports]
    assert [len(s) for s in seeds] == [2, 2]
    assert len({s for step in seeds for s in step}) == 4
    assert seeds[1] == (run.learner.rollout_seed(2, 0), run.learner.rollout_seed(2, 1))
