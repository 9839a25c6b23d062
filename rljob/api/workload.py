"""What an RLJob trains on: where weights, tokenizer and data live, and how completions are rewarded.

Sources are URIs of three kinds, told apart by their scheme so the trainer knows which client to use:

* a local path (no scheme; relative paths are relative to the trainer's working directory, which is the
  repository root for ``rljob train`` and the image's home for the trainer image, where ``examples/`` lives);
* ``gs://bucket/path`` (Google Cloud Storage);
* ``hf://org/repo[@revision]`` for models and ``hf://datasets/[org/]name[@revision]`` for datasets
  (the Hugging Face Hub).

The expressions below only check the form; whether the thing exists is the trainer's start-up check. They
use no look-arounds, because the apiserver (RE2, through CEL) and the model (Python) must accept the same
expressions.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field

from rljob.api.base import Model
from rljob.api.check import Check, cel_string
from rljob.api.kubetypes import GO_SPACES

_NOT_SPACE = f"[^{GO_SPACES}]"  # explicit: RE2's \S is ASCII-only, Python's and Rust's are Unicode
_BUCKET = r"[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]"
_HUB_NAME = r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}"
_REVISION = r"(@[A-Za-z0-9][A-Za-z0-9._/-]{0,254})?"

URI_FORMS: dict[str, tuple[str, str]] = {
    "local": ("a local path", f"[^:{GO_SPACES}][^:]*"),  # no ':': 'x://' can only be a scheme
    "gs": ("gs://bucket[/path]", f"gs://{_BUCKET}(/{_NOT_SPACE}*)?"),
    "gs-object": ("gs://bucket/path", f"gs://{_BUCKET}/{_NOT_SPACE}+"),
    "hf-model": ("hf://org/repo[@revision]", f"hf://{_HUB_NAME}/{_HUB_NAME}{_REVISION}"),
    "hf-dataset": (
        "hf://datasets/[org/]name[@revision]",
        f"hf://datasets/({_HUB_NAME}/)?{_HUB_NAME}{_REVISION}",
    ),
}
"""Every form of source or destination the trainer opens (rljob_trainer.workload.sources: local files,
Cloud Storage, the Hugging Face Hub): (how the message names it, its expression)."""


def uri(*forms: str, role: str) -> Check:
    """The check of a storage URL field that takes ``forms`` (keys of URI_FORMS): one rule for every such
    field, refusing any other scheme (s3://, https://, ...) with the forms the field takes."""
    pattern = "^(" + "|".join(URI_FORMS[f][1] for f in forms) + ")$"
    names = [URI_FORMS[f][0] for f in forms]
    shown = ", ".join(names[:-1]) + " or " + names[-1]
    compiled = re.compile(pattern)
    return Check(
        message=f"must be {shown}: the {role} the trainer opens (no other scheme)",
        cel=f"self.matches({cel_string(pattern)})",
        check=lambda s: compiled.fullmatch(s) is not None,
    )


FUNCTION_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$"

_URI = Field(min_length=1, max_length=1024)
ModelSource = Annotated[str, _URI, uri("local", "gs", "hf-model", role="model sources")]
"""A model checkpoint or tokenizer."""
DataSource = Annotated[str, _URI, uri("local", "gs-object", "hf-dataset", role="dataset sources")]
"""A dataset: a local JSONL/Parquet file or directory, a gs:// object or prefix, or hf://datasets/<id>."""
StoragePath = Annotated[str, _URI, uri("local", "gs", role="directories")]
"""A directory the trainer writes (checkpoints, compilation cache): Orbax and JAX write local paths and
gs:// here (s3:// and others would only fail at start: Orbax needs s3fs)."""
FieldName = Annotated[str, Field(min_length=1, max_length=128)]

BUILTIN_REWARDS: tuple[str, ...] = (
    "mathAnswer",
    "exactMatch",
    "regex",
    "lengthPenalty",
    "answerCharFraction",
)
"""Built-in reward names (rljob_trainer.workload.rewards implements them)."""
REWARD_TIMEOUT_SECONDS = 600
"""spec.rewards[i].timeoutSeconds' default: one reward call over a step's completions, 10 minutes."""


class DataSpec(Model):
    """The prompts to train on: one dataset split, its prompt and answer columns, and how prompts are framed."""

    source: DataSource
    """Where the dataset is: hf://datasets/<org>/<name>[@revision] (e.g. hf://datasets/openai/gsm8k), a
    gs:// object or prefix, or a local path to a JSONL/Parquet file or a directory of them."""
    config: Annotated[str, Field(min_length=1, max_length=128)] | None = None
    """Dataset configuration (subset) on the Hub, e.g. "main" for GSM8K. Unset: the dataset's default."""
    split: Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.\[\]:%-]+$")] = "train"
    """Split to train on. A folder is read as the Hub reads a dataset: its README's splits, else its file
    names' (train-*.parquet, test.jsonl; all files are "train" when no name gives a split); a file is "train"."""
    promptField: FieldName = "prompt"
    """Column holding the prompt text (GSM8K: question)."""
    answerField: FieldName = "answer"
    """Column holding the reference answer, passed to the rewards (GSM8K: answer)."""
    systemPrompt: Annotated[str, Field(max_length=16384)] | None = None
    """System prompt put before every prompt (as the system message when chatTemplate is true)."""
    chatTemplate: bool = False
    """Format each prompt with the tokenizer's chat template (system + user message, generation prompt)."""
    maxExamples: Annotated[int, Field(ge=1, le=1_000_000_000)] | None = None
    """Use at most this many examples (taken after shuffling with spec.grpo.seed). Unset: all."""


class RewardSpec(Model):
    """One reward function and its weight; the rewards of a completion are summed."""

    name: Literal[BUILTIN_REWARDS] | None = None  # type: ignore[valid-type]
    """A built-in reward: mathAnswer (math-verify equivalence of the answer with the reference; GSM8K's
    "#### N" answers understood), exactMatch (answer text equals the reference, trimmed), regex (1 if the
    completion matches pattern), lengthPenalty (-(characters over maxLength)/maxLength, at most -1),
    answerCharFraction (fraction of the completion's characters equal to the reference; the demo task)."""
    function: Annotated[str, Field(max_length=256, pattern=FUNCTION_PATTERN)] | None = None
    """A custom reward as module:function, importable in the trainer image, called like Tunix's reward
    functions: fn(prompts=[...], completions=[...], **other dataset columns) -> list of floats."""
    weight: Annotated[float, Field(ge=-1000, le=1000)] = 1.0
    """Multiplies this reward before the rewards are summed."""
    pattern: Annotated[str, Field(min_length=1, max_length=1024)] | None = None
    """regex only: a Python regular expression searched in the completion (DOTALL)."""
    maxLength: Annotated[int, Field(ge=1, le=1_048_576)] | None = None
    """lengthPenalty only: completion length in characters above which the penalty starts."""
    timeoutSeconds: Annotated[int, Field(ge=1, le=86400)] = REWARD_TIMEOUT_SECONDS
    """Seconds one call of this reward (a whole step's completions) may take. A call that takes longer
    stops the run with exit 2 naming spec.rewards[i] (a retry would wait the same way) instead of hanging
    it. The default, 10 minutes, is below spec.metrics.stallThresholdSeconds' default, so a hung reward
    ends the run before it reads as a stall. mathAnswer gives up on one answer after about 40 s (scored 0)."""
