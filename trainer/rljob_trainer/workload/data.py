"""spec.data -> the prompts Tunix trains on, addressed by step so a resumed run sees exactly what an
uninterrupted one would.

Loaded with ``datasets`` (JSONL/JSON or Parquet files, a directory of them, or a Hub dataset snapshot with
its configs), shuffled once with ``spec.grpo.seed``, capped at ``maxExamples``. Each prompt is framed once
up front: the system prompt, and the tokenizer's chat template when ``chatTemplate`` is true.

The data position is the number of examples consumed: a batch starting at position ``p`` holds examples
``p .. p+B-1`` of the shuffled order, wrapping around at the end (each pass over the data is one epoch in the
same order). Each checkpoint records the position (checkpoint.py), and a resumed run continues from the
recorded position, so it sees no example twice and skips none even if the batch size changed. Tunix gets
``{"prompts": ..., <every other scalar column>: ...}`` as numpy arrays; the reward functions receive the
other columns by name (``tunix/rl/reward_manager.py``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rljob.api.workload import DataSpec

FILE_FORMATS = {".jsonl": "json", ".json": "json", ".parquet": "parquet"}
EMIT_EXAMPLES = 64
"""Rows of the built-in demo dataset (spec.data unset, size tiny)."""


class DataError(ValueError):
    """A dataset that cannot be trained on; the message names the field."""


@dataclass(frozen=True)
class PromptData:
    """The framed, shuffled, capped examples and the batch size: everything ``batch_from`` needs."""

    prompts: list[str]
    columns: dict[str, list[Any]]  # other scalar columns, same order as prompts
    batch_size: int

    def __len__(self) -> int:
        return len(self.prompts)

    def batch_from(self, position: int) -> dict[str, np.ndarray]:
        """The batch after ``position`` examples consumed (np arrays: Tunix repeats each field per generation)."""
        n = len(self.prompts)
        idx = [(position + i) % n for i in range(self.batch_size)]
        batch = {"prompts": np.array([self.prompts[i] for i in idx])}
        for name, values in self.columns.items():
            batch[name] = np.array([values[i] for i in idx])
        return batch

    def batches(self, position: int, num_steps: int) -> Iterator[dict[str, np.ndarray]]:
        """``num_steps`` batches from data position ``position`` (finite, so the learner also stops on data)."""
        for k in range(num_steps):
            yield self.batch_from(position + k * self.batch_size)


def emit_dataset() -> Any:
    """The built-in demo dataset: "emit a:" prompts whose answer is "a" (with reward answerCharFraction).

    Built with a fixed fingerprint: ``Dataset.from_dict`` would hash its state with dill, which fails where
    the installed pyarrow's types do not pickle by name (the TPU host's pyarrow: "Can't pickle <class
    'MonthDayNano'>", docs/tpu.md); the content is a constant, so its fingerprint can be too.
    """
    import datasets
    from datasets.table import InMemoryTable

    table = InMemoryTable.from_pydict(
        {"prompt": ["emit a:"] * EMIT_EXAMPLES, "answer": ["a"] * EMIT_EXAMPLES}
    )
    return datasets.Dataset(table, fingerprint=f"rljob-emit-a-{EMIT_EXAMPLES}")


def read(spec: DataSpec, local: Path) -> Any:
    """The ``datasets.Dataset`` of ``spec.split`` at ``local``. Raises DataError naming the field.

    A folder is read by ``datasets`` as it reads a Hub dataset: its README's configs and splits when it has
    them (a Hub snapshot), else the splits its file names give (``train-*.parquet``, ``test.jsonl``, ...; all
    files are split "train" when no name gives one). A single JSONL/JSON/Parquet file is split "train".
    """
    import datasets

    datasets.disable_progress_bars()
    try:
        if local.is_dir():
            return datasets.load_dataset(str(local), name=spec.config, split=spec.split)
        if _no_rows(local):  # datasets fails on an empty file with an error that does not say so
            raise DataError(f"spec.data.source: the dataset has no examples ({spec.source})")
        if local.suffix not in FILE_FORMATS:
            raise DataError(
                f"spec.data.source: {local}: expected a .jsonl, .json or .parquet file or a folder"
            )
        return datasets.load_dataset(FILE_FORMATS[local.suffix], data_files=[str(local)], split="train")
    except DataError:
        raise
    except ValueError as exc:  # unknown split or config: datasets says which exist
        raise DataError(f"spec.data.split: {spec.split!r} (config {spec.config!r}): {exc}") from None
    except Exception as exc:
        cause = f" ({exc.__cause__})" if exc.__cause__ else ""  # datasets wraps the reader's own error
        raise DataError(
            f"spec.data.source: cannot read {local}: {type(exc).__name__}: {exc}{cause}"
        ) from None


def _no_rows(path: Path) -> bool:
    """An empty file, or a Parquet file whose footer counts no rows."""
    if path.stat().st_size == 0:
        return True
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        try:
            return pq.ParquetFile(path).metadata.num_rows == 0
        except Exception:  # not Parquet after all: datasets reports it
            return False
    return False


def prepare(spec: DataSpec | None, dataset: Any, tokenizer: Any, seed: int, batch_size: int) -> PromptData:
    """Check the fields, shuffle with ``seed``, cap, and frame every prompt."""
    prompt_field = spec.promptField if spec else "prompt"
    answer_field = spec.answerField if spec else "answer"
    for field, name in (("promptField", prompt_field), ("answerField", answer_field)):
        if name not in dataset.column_names:
            raise DataError(
                f"spec.data.{field}: no column {name!r} in the dataset (columns: {', '.join(dataset.column_names)})"
            )
    if len(dataset) == 0:
        raise DataError(
            f"spec.data.source: the dataset has no examples ({spec.source if spec else 'built-in'})"
        )
    dataset = dataset.shuffle(seed=seed)
    if spec and spec.maxExamples:
        dataset = dataset.select(range(min(spec.maxExamples, len(dataset))))
    scalar = [
        name
        for name, feature in dataset.features.items()
        if name != prompt_field and getattr(feature, "dtype", None) not in (None, "list", "dict")
    ]
    system = spec.systemPrompt if spec else None
    chat = spec.chatTemplate if spec else False
    if chat and not getattr(tokenizer, "chat_template", None):
        raise DataError(
            "spec.data.chatTemplate: the tokenizer has no chat template (set chatTemplate: false)"
        )
    prompts = [frame(str(p), system, chat, tokenizer) for p in dataset[prompt_field]]
    return PromptData(prompts, {name: list(dataset[name]) for name in scalar}, batch_size)


def frame(prompt: str, system: str | None, chat: bool, tokenizer: Any) -> str:
    """One prompt as the model sees it: chat-templated messages, or the system prompt and a blank line."""
    if chat:
        messages = [{"role": "system", "content": system}] if system else []
        messages.append({"role": "user", "content": prompt})
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return f"{system}\n\n{prompt}" if system else prompt


def longest_prompt_tokens(data: PromptData, tokenizer: Any) -> int:
    """Tokens of the longest framed prompt, BOS included (the sampler prepends it)."""
    return 1 + max(len(tokenizer.encode(p)) for p in data.prompts)
