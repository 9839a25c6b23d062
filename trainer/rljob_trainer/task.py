"""The built-in synthetic task: offline prompts, a verifiable reward and a trivial tokenizer.

Why it exists: the demo and the tests must train something real without a model hub or a dataset
download. "emit X" asks the model to write the character X; the reward is the fraction of the
completion's characters that are X, so it is dense (a random 256-token model already scores ~0.004
and group members differ), verifiable, and a 2-layer random model learns it within ~30-60 GRPO steps.

Everything here is text-level, so the same task also runs with a real model's tokenizer.
Data is addressed by step (``batch_at(step)``): the data position is just the step number, which is
what makes resuming from a checkpoint exact.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

PAD_ID = 0
BOS_ID = 1
EOS_ID = 2
VOCAB_SIZE = 256
"""The tiny model's vocabulary: 0-2 are specials, 32-126 printable ASCII, the rest decode to '?'."""


class CharTokenizer:
    """A byte-level tokenizer with Tunix's duck-typed interface (encode/decode/bos_id/eos_id/pad_id).

    Printable ASCII maps to its code point; ids that are not printable ASCII (other than the specials,
    which decode to nothing) decode to '?', so every generated token is one character and the reward
    counts tokens.
    """

    def encode(self, text: str, **_: object) -> list[int]:
        ids = [ord(c) for c in text]
        bad = [c for c, i in zip(text, ids, strict=True) if not 32 <= i <= 126]
        if bad:
            raise ValueError(f"CharTokenizer encodes printable ASCII only, got {bad!r}")
        return ids

    def decode(self, ids: list[int] | np.ndarray, **_: object) -> str:
        out = []
        for i in np.asarray(ids).reshape(-1).tolist():
            if i in (PAD_ID, BOS_ID, EOS_ID):
                continue
            out.append(chr(i) if 32 <= i <= 126 else "?")
        return "".join(out)

    def bos_id(self) -> int:
        return BOS_ID

    def eos_id(self) -> int:
        return EOS_ID

    def pad_id(self) -> int:
        return PAD_ID


def emit_reward(prompts: list[str], completions: list[str], target: list[str], **_: object) -> list[float]:
    """Fraction of the completion's characters equal to the prompt's target; empty completions score 0."""
    rewards = []
    for completion, t in zip(completions, target, strict=True):
        rewards.append(completion.count(str(t)) / len(completion) if completion else 0.0)
    return rewards


@dataclass(frozen=True)
class EmitTask:
    """Prompts "emit X:" with X drawn from ``targets``, deterministic per (seed, step).

    A single target (the default) is learnable by a tiny random model in a few dozen steps; more
    targets make the model condition on the prompt and need more steps.
    """

    seed: int
    batch_size: int
    targets: str = "a"

    name = "emit"

    def prompt(self, target: str) -> str:
        return f"emit {target}:"

    def max_prompt_tokens(self) -> int:
        """Longest prompt in tokens, BOS included (the sampler prepends BOS; it must fit the prompt window)."""
        return 1 + max(len(self.prompt(t)) for t in self.targets)

    def batch_at(self, step: int) -> dict[str, np.ndarray]:
        """The batch of global step ``step``: the same for the same (seed, step), whatever ran before.

        Prompts are an np.ndarray (Tunix's learner repeats every field with np.repeat).
        """
        rng = np.random.default_rng([self.seed, step])
        picks = rng.integers(0, len(self.targets), size=self.batch_size)
        target = np.array([self.targets[i] for i in picks])
        prompts = np.array([self.prompt(t) for t in target])
        return {"prompts": prompts, "target": target}

    def batches(self, start_step: int, num_steps: int) -> Iterator[dict[str, np.ndarray]]:
        """Batches for steps start_step .. num_steps-1 (finite, so the learner also stops on data)."""
        for step in range(start_step, num_steps):
            yield self.batch_at(step)

    def reward_fns(self) -> list:
        return [emit_reward]
