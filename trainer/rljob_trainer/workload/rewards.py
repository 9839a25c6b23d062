"""spec.rewards -> Tunix reward functions: the built-ins, custom ``module:function`` ones, and their weights.

Tunix's reward manager calls every function as ``fn(prompts=[...], completions=[...], **columns)`` (the
dataset's other columns of the batch, one value per completion) and sums their results; here each one is
wrapped to multiply by its weight and to find the reference answer under ``spec.data.answerField``.
``build`` imports and checks everything before JAX is imported, so a bad reward exits 2 in a second.

Tunix calls the functions in its data thread; one that raises (or returns no list of one number per
completion) raises ``RewardError`` naming ``spec.rewards[i]``, which the trainer turns into exit 2: the same
input would fail the same way on every retry.

Deadline (``spec.rewards[i].timeoutSeconds``): a thread cannot be killed, so each call runs in a daemon
thread of its own while Tunix's thread waits for it at most that long; a call still running then is
abandoned (``abandoned_calls`` counts them) and ``RewardError`` stops the run, whose trainer then exits
without the interpreter's shutdown (which could wait on the abandoned call's locks). What this cannot end:
a reward holding the GIL inside one C call (a huge integer power), which freezes every thread; mathAnswer
therefore runs math-verify in a worker process (math_worker.py).
"""

from __future__ import annotations

import atexit
import functools
import importlib
import inspect
import math
import re
import threading
import traceback
from collections.abc import Callable, Collection, Sequence
from typing import Any

from rljob.api.workload import RewardSpec
from rljob_trainer.workload.math_worker import MathVerifier

RewardFn = Callable[..., list[float]]
ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
GSM8K_FINAL = re.compile(r"####\s*(.+?)\s*$", re.DOTALL)


def extract_answer(completion: str) -> str:
    """The answer part of a completion: inside <answer>...</answer> when present, else the whole text."""
    found = ANSWER_TAG.findall(completion)
    return (found[-1] if found else completion).strip()


def reference_answer(answer: Any) -> str:
    """A dataset's reference answer as text; GSM8K's "reasoning #### 72" gives "72"."""
    text = str(answer)
    found = GSM8K_FINAL.search(text)
    return (found.group(1) if found else text).strip()


_VERIFIER = MathVerifier()
"""The math-verify worker process behind ``math_answer`` (started at its first call)."""
atexit.register(_VERIFIER.close)


def math_answer(completions: Sequence[str], answers: Sequence[Any], **_: Any) -> list[float]:
    """1.0 when math-verify finds the completion's answer equivalent to the reference, else 0.0.

    Works from any thread (math-verify runs in a worker process: ``math_worker``); an answer math-verify
    cannot parse or compare scores 0, as one that times out does (with a warning); a worker failure raises.
    """
    pairs = [
        (extract_answer(c), f"${reference_answer(a)}$") for c, a in zip(completions, answers, strict=True)
    ]
    return _VERIFIER.score(pairs)


def exact_match(completions: Sequence[str], answers: Sequence[Any], **_: Any) -> list[float]:
    """1.0 when the completion's answer equals the reference answer (both trimmed)."""
    return [
        1.0 if extract_answer(c) == reference_answer(a) else 0.0
        for c, a in zip(completions, answers, strict=True)
    ]


def answer_char_fraction(completions: Sequence[str], answers: Sequence[Any], **_: Any) -> list[float]:
    """Fraction of the completion's characters equal to the reference (one character): the demo task's dense,
    verifiable reward (a random tiny model scores ~0.01 and learns to ~1 within a few dozen steps)."""
    return [c.count(str(a)) / len(c) if c else 0.0 for c, a in zip(completions, answers, strict=True)]


def regex_reward(completions: Sequence[str], pattern: re.Pattern[str], **_: Any) -> list[float]:
    """1.0 when ``pattern`` is found in the completion (a format check)."""
    return [1.0 if pattern.search(c) else 0.0 for c in completions]


def length_penalty(completions: Sequence[str], max_length: int, **_: Any) -> list[float]:
    """-(characters over max_length) / max_length, floored at -1; 0 within the limit."""
    return [-min(1.0, max(0, len(c) - max_length) / max_length) for c in completions]


def _builtin(spec: RewardSpec, index: int) -> tuple[RewardFn, bool]:
    """(function of completions + answers, whether it needs the answer column)."""
    field = f"spec.rewards[{index}]"
    if spec.name == "mathAnswer":
        return math_answer, True
    if spec.name == "exactMatch":
        return exact_match, True
    if spec.name == "answerCharFraction":
        return answer_char_fraction, True
    if spec.name == "regex":
        compiled = compile_pattern(spec, index)
        return (lambda completions, answers, **kw: regex_reward(completions, compiled)), False
    if spec.name == "lengthPenalty":
        limit = spec.maxLength or 1
        return (lambda completions, answers, **kw: length_penalty(completions, limit)), False
    raise ValueError(f"{field}.name: unknown reward {spec.name!r}")


def compile_pattern(spec: RewardSpec, index: int) -> re.Pattern[str]:
    """The regex reward's pattern, compiled as the reward searches it. Raises ValueError naming the field
    (the CRD cannot check it: the apiserver's regular expressions are RE2, the reward's Python's)."""
    try:
        return re.compile(spec.pattern or "", re.DOTALL)
    except re.error as exc:
        raise ValueError(f"spec.rewards[{index}].pattern: not a Python regular expression: {exc}") from None


def pattern_errors(specs: Sequence[RewardSpec]) -> list[str]:
    """``path: message`` for every regex reward whose pattern does not compile (``rljob validate``)."""
    errors = []
    for i, spec in enumerate(specs):
        if spec.name == "regex":
            try:
                compile_pattern(spec, i)
            except ValueError as exc:
                errors.append(str(exc))
    return errors


def _custom(spec: RewardSpec, index: int, columns: Collection[str] | None = None) -> RewardFn:
    """Import ``module:function`` and check it can be called like a Tunix reward function. ``columns``:
    the dataset's columns Tunix will pass by name (None: not loaded yet, so required names go unchecked)."""
    field = f"spec.rewards[{index}].function"
    module_name, _, attr = (spec.function or "").partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # ImportError, or the module's own import-time failure
        raise ValueError(f"{field}: cannot import {module_name}: {type(exc).__name__}: {exc}") from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise ValueError(f"{field}: {module_name} has no function {attr}")
    try:
        signature = inspect.signature(fn)
    except ValueError:  # no signature (a builtin): trust it
        return fn
    # Tunix passes every other column of the batch and its own ``mode`` as keywords: only **kwargs takes
    # them all (a function naming just the columns it reads fails with TypeError at the first step).
    params = list(signature.parameters.values())
    if not any(p.kind is p.VAR_KEYWORD for p in params):
        raise ValueError(
            f"{field}: {spec.function} must accept prompts=, completions= and the dataset's other columns as "
            "keyword arguments (def f(prompts, completions, **kwargs))"
        )
    named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    required = [p.name for p in params if p.kind in named and p.default is p.empty]
    passed = {"prompts", "completions", "mode", *(columns or ())}
    missing = [name for name in required if name not in passed]
    positional_only = [p.name for p in params if p.kind is p.POSITIONAL_ONLY and p.default is p.empty]
    if positional_only or (columns is not None and missing):
        names = ", ".join(positional_only or missing)
        raise ValueError(
            f"{field}: {spec.function} requires {names}, which Tunix does not pass: it calls the function "
            "with prompts=, completions=, mode= and each column of the dataset by name "
            f"(columns: {', '.join(sorted(columns or ())) or 'none'}); give {names} a default, or read it "
            "from **kwargs"
        )
    return fn


class RewardError(Exception):
    """A reward function failed while training: ``field`` is ``spec.rewards[i]``, the message says how."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(f"{field}: {message}")


def find_reward_error(exc: BaseException | None) -> RewardError | None:
    """The RewardError that ``exc`` is or was raised from (Tunix re-raises its thread's exception)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, RewardError):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


def build(
    specs: Sequence[RewardSpec], answer_field: str, columns: Collection[str] | None = None
) -> list[RewardFn]:
    """Tunix reward functions for ``specs``, weighted. Raises ValueError naming the field. ``columns``: the
    dataset's (None before it is loaded: a custom function's required parameters are then unchecked)."""
    fns = []
    for i, spec in enumerate(specs):
        if spec.function:
            fn, label = _custom(spec, i, columns), spec.function
        else:
            fn, label = _builtin(spec, i)[0], spec.name or ""
        fns.append(_weighted(fn, spec, label, answer_field, i))
    return fns


_ABANDONED: list[threading.Thread] = []
"""Threads of reward calls that ran past their deadline (left running: a thread cannot be stopped)."""


def abandoned_calls() -> int:
    """How many abandoned reward calls are still running in this process."""
    return sum(thread.is_alive() for thread in _ABANDONED)


def call_with_deadline(fn: Callable[[], Any], timeout_s: float, field: str, name: str) -> Any:
    """``fn()`` in a daemon thread, waited for at most ``timeout_s``; re-raises its exception. Raises
    RewardError naming ``field`` and the time when it has not returned by then (it is left running)."""
    outcome: list[tuple[bool, Any]] = []

    def target() -> None:
        try:
            outcome.append((True, fn()))
        except BaseException as exc:  # handed to the waiting thread below, whatever it is
            outcome.append((False, exc))

    thread = threading.Thread(target=target, name=f"rljob-{field}", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if not outcome:  # still running: abandon it
        _ABANDONED.append(thread)
        raise RewardError(
            field,
            f"{name} did not return within {timeout_s:g} s ({field}.timeoutSeconds); the run stops "
            "instead of waiting for ever (a retry would wait the same way): find what it waits for, or "
            "raise the timeout",
        )
    ok, value = outcome[0]
    if not ok:
        raise value
    return value


def _weighted(fn: RewardFn, spec: RewardSpec, name: str, answer_field: str, index: int) -> RewardFn:
    field = f"spec.rewards[{index}]"

    def reward(prompts: Sequence[str], completions: Sequence[str], **columns: Any) -> list[float]:
        if spec.function:
            call = functools.partial(fn, prompts=prompts, completions=completions, **columns)
        else:
            call = functools.partial(
                fn, completions=list(completions), answers=list(columns.get(answer_field, []))
            )
        try:
            values = call_with_deadline(call, spec.timeoutSeconds, field, name)
        except RewardError:
            raise
        except Exception as exc:
            raise RewardError(field, f"{name} raised {_describe(exc)}") from exc
        return [spec.weight * v for v in _checked(values, len(completions), field, name)]

    reward.__name__ = re.sub(r"\W", "_", name)  # Tunix logs rewards by function name
    return reward


def _checked(values: Any, count: int, field: str, name: str) -> list[float]:
    """``values`` as one finite float per completion, or RewardError saying what came back instead."""
    try:
        out = [float(v) for v in values]
    except (TypeError, ValueError) as exc:
        raise RewardError(
            field, f"{name} must return one number per completion, got {values!r:.200} ({exc})"
        ) from None
    if len(out) != count:
        raise RewardError(field, f"{name} returned {len(out)} values for {count} completions")
    bad = [v for v in out if not math.isfinite(v)]
    if bad:
        raise RewardError(field, f"{name} returned {bad[0]} (rewards must be finite numbers)")
    return out


def _describe(exc: Exception) -> str:
    """``ValueError: boom (at team_rewards.py:12 in score)``: the error and the innermost frame raising it."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" (at {frames[-1].filename}:{frames[-1].lineno} in {frames[-1].name})" if frames else ""
    return f"{type(exc).__name__}: {exc}{where}"
