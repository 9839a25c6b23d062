"""Everything a trainer checks and fetches before JAX is imported: sources, tokenizer, data, rewards.

``prepare(job)`` turns an RLJob into a ``Workload`` (local checkpoint directory, tokenizer, framed
prompts, reward functions) or fails the way the JobSet's failure policy needs: ``RLJobError`` (exit 2,
every line names a field) for anything no retry can fix, ``sources.SourceUnavailable`` (exit 1) when a
download failed. ``check(job, fetch_remote=False)`` runs the same checks without touching the network
(remote sources are checked for form only): ``tests/trainer/test_examples_start.py`` runs it on every
example as the operator would mount it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rljob.api import RLJobError
from rljob.api.spec import RLJob
from rljob.api.workload import RewardSpec
from rljob_trainer.models import checkpoint_files
from rljob_trainer.models import families as models
from rljob_trainer.workload import data, rewards, sources

DEMO_REWARDS = (RewardSpec(name="answerCharFraction"),)
"""The reward of the built-in demo dataset (spec.data unset)."""


@dataclass
class Workload:
    """What ``main.train`` needs besides the spec."""

    checkpoint_dir: Path | None
    tokenizer: Any
    data: data.PromptData
    reward_fns: list


def _form_errors(job: RLJob) -> list[str]:
    """Problems visible without fetching anything: spec.data needed, local sources present, rewards import."""
    spec = job.spec
    errors = []
    if spec.data is None and not models.is_tiny(spec.model):
        errors.append(
            f"spec.data: required for size {spec.model.size} (only size tiny has a built-in demo dataset)"
        )
    for field, uri in (
        ("spec.model.tokenizerPath", spec.model.tokenizerPath),
        ("spec.data.source", spec.data.source if spec.data else None),
    ):
        if uri and sources.kind(uri) == "local":
            errors += sources.check_local(uri, field)
    answer = spec.data.answerField if spec.data else "answer"
    try:
        rewards.build(spec.rewards or DEMO_REWARDS, answer)
    except ValueError as exc:
        errors.append(str(exc))
    return errors


def check(job: RLJob, fetch_remote: bool = False) -> list[str]:
    """Every start-up problem as ``path: message`` lines. Without ``fetch_remote``, only local sources are
    read (and fully loaded: tokenizer, dataset, prompt lengths); remote ones are checked for form."""
    errors = _form_errors(job)
    if errors:
        return errors
    remote = [u for u in _sources(job) if sources.kind(u) != "local"]
    if remote and not fetch_remote:
        return []
    try:
        prepare(job)
    except RLJobError as exc:
        return exc.errors
    return []


def _sources(job: RLJob) -> list[str]:
    m, d = job.spec.model, job.spec.data
    return [u for u in (m.checkpointPath, m.tokenizerPath, d.source if d else None) if u]


def prepare(job: RLJob) -> Workload:
    """Fetch the sources and build tokenizer, prompts and rewards. Raises RLJobError / SourceUnavailable."""
    spec = job.spec
    errors = _form_errors(job)
    if errors:
        raise RLJobError(errors)
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")  # no "PyTorch was not found" banner
    checkpoint_dir = None
    if spec.model.checkpointPath and spec.model.backend == "tunix":  # MaxText reads its own (Orbax)
        checkpoint_dir = sources.fetch(
            spec.model.checkpointPath, "spec.model.checkpointPath", sources.MODEL_FILES
        )
        errors = models.check_checkpoint_dir(
            checkpoint_dir, spec.model, tokenizer_elsewhere=spec.model.tokenizerPath is not None
        )
        if errors:
            raise RLJobError(errors)
    tokenizer_dir = None
    if spec.model.tokenizerPath:
        tokenizer_dir = sources.fetch(
            spec.model.tokenizerPath, "spec.model.tokenizerPath", sources.MODEL_FILES
        )
        folder = tokenizer_dir.parent if tokenizer_dir.is_file() else tokenizer_dir
        missing = checkpoint_files.tokenizer_error(folder, "spec.model.tokenizerPath")
        if missing:
            raise RLJobError([missing])
    tokenizer_field = "spec.model.tokenizerPath" if spec.model.tokenizerPath else "spec.model.checkpointPath"
    tokenizer_where = tokenizer_dir or checkpoint_dir
    limit = models.vocab_size(spec.model, checkpoint_dir)

    def check_vocab(vocab: int | None) -> None:
        if limit is not None and vocab is not None and vocab > limit:
            raise RLJobError(
                [
                    f"{tokenizer_field}: the tokenizer in {tokenizer_where} has {vocab} tokens, more than the "
                    f"model's vocabulary ({limit}{' in ' + str(checkpoint_dir / 'config.json') if checkpoint_dir else ''})"
                ]
            )

    if tokenizer_where is not None:  # tokenizer.json read as JSON: refused before transformers loads it
        check_vocab(checkpoint_files.tokenizer_json_tokens(tokenizer_where))
    try:
        tokenizer = models.build_tokenizer(tokenizer_dir or checkpoint_dir)
    except Exception as exc:
        raise RLJobError(
            [f"{tokenizer_field}: cannot load a tokenizer: {type(exc).__name__}: {exc}"]
        ) from None
    check_vocab(models.tokenizer_vocab_size(tokenizer))  # added tokens of tokenizer_config.json too
    try:
        if spec.data is None:
            dataset = data.emit_dataset()
        else:
            local = sources.fetch(spec.data.source, "spec.data.source")
            dataset = data.read(spec.data, local)
        prompts = data.prepare(spec.data, dataset, tokenizer, spec.grpo.seed, spec.grpo.batchSize)
    except data.DataError as exc:
        raise RLJobError([str(exc)]) from None
    longest = data.longest_prompt_tokens(prompts, tokenizer)
    if longest > spec.maxPrefillPredictLength:
        raise RLJobError(
            [
                f"spec.maxPrefillPredictLength: {spec.maxPrefillPredictLength} cannot hold the longest prompt "
                f"({longest} tokens with BOS, system prompt and chat template); raise it or use "
                "spec.data.maxExamples/shorter prompts"
            ]
        )
    answer = spec.data.answerField if spec.data else "answer"
    try:
        fns = rewards.build(spec.rewards or DEMO_REWARDS, answer, columns=list(prompts.columns))
    except ValueError as exc:
        raise RLJobError([str(exc)]) from None
    return Workload(checkpoint_dir, tokenizer, prompts, fns)
