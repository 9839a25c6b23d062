"""Model FLOPs per token from the model config, and MFU against the chip's peak. Pure Python (no JAX).

Accounting: PaLM's (Chowdhery et al. 2022, appendix B), the one MaxText and most MFU figures use. One token
costs ``2 N`` FLOPs forward for the weight matmuls (a multiply and an add per weight) plus ``4 L H Q T``
for attention (``Q K^T`` and ``A V``: two matmuls of ``H Q`` wide vectors against ``T`` context positions,
in each of ``L`` layers); a training pass (forward, backward for activations, backward for weights) is
three forwards: ``6 N + 12 L H Q T``.

* ``N`` counts the weights that take part in a matmul per token: the q/k/v/o projections (grouped-query
  k/v are ``num_kv_heads`` wide), the gated MLP's three matrices (SwiGLU/GeGLU: gate, up, down), and the
  LM head (``d x vocab``, tied or not). The input embedding is a lookup, not a matmul, and norms are
  negligible: both are left out. Mixture-of-experts layers count the experts a token is routed to plus the
  router (``active`` parameters), whatever the implementation computes.
* ``T`` is ``spec.maxTargetLength``, the longest prompt + completion, and the attention term is not
  halved for causal masking (PaLM's convention): for short completions it overstates the attention part.
  Gemma 3's sliding-window layers are counted as full attention.
* MFU counts the useful (real, non-padding) tokens only: padding and recomputation (remat) are not model
  FLOPs, which is what makes MFU comparable across packing and remat settings.

Per global step the trainer counts each pass that ran over the step's real tokens: the rollout
(generation, forward only: prefill of the prompt and one decode per completion token, ``2 N + 4 L H Q T``
each), the reference and old-policy log-prob passes (forward only), and the actor update (a training pass,
``numIterations`` times). MFU = those FLOPs / (step seconds x chips x peak bf16 FLOP/s per chip). A
rollout is decode-bound, so a step's MFU is well below its actor-update phase's; the metrics keep the
FLOPs per phase so both can be shown.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from rljob.api import tpu

FORWARD_PASSES = ("rollout", "reference", "old_logps")
"""progress.PHASES that run the model forward once over the step's tokens."""
TRAIN_PASS = "train"
"""The phase that runs ``numIterations`` training passes (3 forwards each) over the step's tokens."""


@dataclass(frozen=True)
class ModelShape:
    """The transformer dimensions the FLOPs depend on (Tunix ModelConfig names)."""

    num_layers: int
    embed_dim: int
    hidden_dim: int  # MLP (or each expert's) intermediate width
    num_heads: int
    head_dim: int
    num_kv_heads: int
    vocab_size: int
    num_experts: int = 0  # 0: dense MLP
    num_experts_per_tok: int = 0


def shape_of(config: Any) -> ModelShape:
    """The shape of a Tunix ModelConfig (qwen2/qwen3/llama3 ``vocab_size``, gemma3 ``num_embed``)."""
    vocab = getattr(config, "vocab_size", None) or config.num_embed
    return ModelShape(
        num_layers=config.num_layers,
        embed_dim=config.embed_dim,
        hidden_dim=config.hidden_dim,
        num_heads=config.num_heads,
        head_dim=config.head_dim,
        num_kv_heads=config.num_kv_heads,
        vocab_size=vocab,
        num_experts=getattr(config, "num_experts", None) or 0,
        num_experts_per_tok=getattr(config, "num_experts_per_tok", None) or 0,
    )


def matmul_params(s: ModelShape) -> int:
    """``N``: weights used in a matmul per token (active experts only; no input embedding, no norms)."""
    d, q, kv = s.embed_dim, s.num_heads * s.head_dim, s.num_kv_heads * s.head_dim
    attention = d * q + 2 * d * kv + q * d
    mlp = 3 * d * s.hidden_dim
    if s.num_experts:
        mlp = s.num_experts_per_tok * mlp + d * s.num_experts  # routed experts + the router
    return s.num_layers * (attention + mlp) + d * s.vocab_size


def forward_flops_per_token(s: ModelShape, seq_len: int) -> int:
    """``2 N + 4 L H Q T``: one forward pass, per token, with ``T = seq_len``."""
    return 2 * matmul_params(s) + 4 * s.num_layers * s.num_heads * s.head_dim * seq_len


def train_flops_per_token(s: ModelShape, seq_len: int) -> int:
    """``6 N + 12 L H Q T``: forward and backward (three forwards), per token."""
    return 3 * forward_flops_per_token(s, seq_len)


@dataclass(frozen=True)
class StepFlops:
    """What the metrics need to turn a step's tokens into model FLOPs and MFU."""

    forward_per_token: int
    train_per_token: int
    iterations: int  # spec.grpo.numIterations: training passes over the same tokens per step
    chips: int  # accelerator devices the job computes on (all hosts, all slices)
    peak_per_chip: float | None  # bf16 FLOP/s of one chip; None off TPU: no MFU is exported

    def phase_flops(self, phase: str, tokens: int) -> int:
        """Model FLOPs of one phase that ran over ``tokens`` real tokens (0 for phases without model
        passes, e.g. weight_sync)."""
        if phase == TRAIN_PASS:
            return self.iterations * self.train_per_token * tokens
        if phase in FORWARD_PASSES:
            return self.forward_per_token * tokens
        return 0

    def by_phase(self, phases: Iterable[str], tokens: int) -> dict[str, int]:
        """Model FLOPs of each of ``phases`` that ran model passes over ``tokens`` real tokens."""
        flops = {phase: self.phase_flops(phase, tokens) for phase in phases}
        return {phase: f for phase, f in flops.items() if f}

    def tokens_per_chip(self, tokens: int, seconds: float) -> float | None:
        """Real tokens per second per chip of a step; None for a step of no time or no chips."""
        return tokens / seconds / self.chips if seconds > 0 and self.chips > 0 else None

    def mfu(self, flops: float, seconds: float) -> float | None:
        """Model FLOPs utilization: ``flops / (seconds x chips x peak)``; None without a peak."""
        if self.peak_per_chip is None or seconds <= 0 or self.chips <= 0:
            return None
        return flops / (seconds * self.chips * self.peak_per_chip)


def peak_flops(accelerator: str, backend: str) -> float | None:
    """Peak bf16 FLOP/s of one chip of ``accelerator`` (spec.tpu.accelerator), only when the backend
    really is a TPU: a CPU run of a TPU RLJob must not report an MFU against a TPU's peak."""
    if backend != "tpu" or accelerator not in tpu.BY_ACCELERATOR:
        return None
    return tpu.BY_ACCELERATOR[accelerator].peak_bf16_flops


def step_flops(config: Any, seq_len: int, iterations: int, chips: int, peak: float | None) -> StepFlops:
    """StepFlops of a Tunix ModelConfig at row length ``seq_len``."""
    shape = shape_of(config)
    return StepFlops(
        forward_per_token=forward_flops_per_token(shape, seq_len),
        train_per_token=train_flops_per_token(shape, seq_len),
        iterations=iterations,
        chips=chips,
        peak_per_chip=peak,
    )
