"""Hypothesis strategies for RLJob manifests that sit near every boundary of the API, valid or not."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from rljob.api import tpu
from rljob.api.tpu import RESERVED_TPU_PORTS

_NEAR_MISSES = {"3x3", "2x2x3", "1x1x1", "4x4x6", "8x4x4", "04x4x4", "16x16x48", "24x24x24", "4x4", "0x4x4"}
_topologies = sorted({t for g in tpu.GENERATIONS for t in tpu.topologies(g.accelerator)[:40]} | _NEAR_MISSES)


def _optional(key: str, strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    return st.one_of(st.just({}), strategy.map(lambda v: {key: v}))


def _merge(*parts: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for part in parts:
        out.update(part)
    return out


@st.composite
def rljob_manifests(draw: st.DrawFn) -> dict[str, Any]:
    """A manifest with values drawn around each rule's boundary (most valid, many not)."""
    target = draw(st.integers(2, 4096))
    prompt = draw(st.one_of(st.integers(1, target + 1), st.just(target - 1)))
    aligned = st.integers(target // 128, target // 128 + 2).map(lambda k: 128 * k)  # multiples of 128 +-1
    packing = draw(
        st.one_of(
            st.just(0),
            st.integers(max(0, target - 2), target + 2),
            st.integers(0, 8192),
            aligned,
            aligned.map(lambda n: n + 1),
        )
    )
    batch = draw(st.integers(1, 64))
    tpu_spec = _merge(
        {
            "accelerator": draw(st.sampled_from(tpu.ACCELERATORS)),
            "topology": draw(st.sampled_from(_topologies)),
        },
        draw(_optional("chipsPerHost", st.sampled_from([1, 4, 8]))),
        draw(_optional("slices", st.integers(1, 4))),
    )
    engine = draw(st.sampled_from(["vanilla", "vllm"]))
    rollout = _merge({"engine": engine}, draw(_optional("vllmBlockSize", st.sampled_from([8, 16, 64, 1024]))))
    grpo = _merge(
        {"batchSize": batch},
        draw(_optional("miniBatchSize", st.integers(1, 64))),
        draw(_optional("microBatchSize", st.integers(1, 64))),
        draw(_optional("numGenerations", st.integers(2, 16))),
    )
    reward = st.fixed_dictionaries(
        {},
        optional={
            "name": st.sampled_from(
                ["mathAnswer", "exactMatch", "regex", "lengthPenalty", "answerCharFraction"]
            ),
            "function": st.just("my.rewards:score"),
            "pattern": st.just("<answer>"),
            "maxLength": st.integers(1, 512),
        },
    )
    workload = _merge(
        draw(_optional("data", st.just({"source": "hf://datasets/openai/gsm8k", "config": "main"}))),
        draw(_optional("rewards", st.lists(reward, max_size=3))),
    )
    port = draw(st.one_of(st.sampled_from(RESERVED_TPU_PORTS), st.integers(1024, 65535)))
    name = draw(st.one_of(st.from_regex(r"[a-z][a-z0-9-]{0,45}[a-z0-9]", fullmatch=True), st.just("a" * 40)))
    return {
        "apiVersion": "rljob.dev/v1alpha1",
        "kind": "RLJob",
        "metadata": {"name": name},
        "spec": {
            "image": "trainer:1",
            "tpu": tpu_spec,
            "maxPrefillPredictLength": prompt,
            "maxTargetLength": target,
            "packing": {"maxSeqTokenPerTpu": packing},
            "rollout": rollout,
            "grpo": grpo,
            "metrics": {"port": port},
            "suspend": draw(st.booleans()),
            **workload,
        },
    }
