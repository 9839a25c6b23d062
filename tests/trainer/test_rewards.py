"""Rewards: the built-in math reward with the real math-verify (equivalent answers score 1, others 0); every
built-in, the weights and a custom ``module:function`` reward called through Tunix's own reward manager;
the math reward and failing rewards called from a worker thread, as Tunix's learner calls them (a whole GRPO
run with every built-in: test_rewards_grpo.py)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from rljob_trainer.workload import rewards
from rljob_trainer.workload.math_worker import MathVerifier, MathVerifyError
from rljob_trainer.workload.rewards import RewardError

from rljob.api.workload import RewardSpec

GSM8K_REFERENCE = "Natalia sold 48/2 = 24 clips in May.\nShe sold 48+24 = 72 clips.\n#### 72"


@pytest.mark.parametrize(
    ("completion", "answer", "expected"),
    [
        ("<answer>72</answer>", GSM8K_REFERENCE, 1.0),
        ("She sold 72 clips. <answer>72.0</answer>", GSM8K_REFERENCE, 1.0),
        ("<answer>$\\frac{1}{2}$</answer>", "0.5", 1.0),
        ("<answer>$\\sqrt{4}$</answer>", "2", 1.0),
        ("<answer>71</answer>", GSM8K_REFERENCE, 0.0),
        ("<answer>1/3</answer>", "0.5", 0.0),
        ("I do not know", GSM8K_REFERENCE, 0.0),
        ("", "3", 0.0),
    ],
)
def test_math_answer(completion: str, answer: str, expected: float) -> None:
    assert rewards.math_answer([completion], [answer]) == [expected]


def test_weighted_math_reward_reads_the_answer_field() -> None:
    """As Tunix calls it: keyword columns of the batch; the answer column is spec.data.answerField."""
    (fn,) = rewards.build([RewardSpec(name="mathAnswer", weight=2.0)], "solution")
    got = fn(
        prompts=["p", "p"], completions=["<answer>72</answer>", "<answer>7</answer>"], solution=["72", "72"]
    )
    assert got == [2.0, 0.0]


COMPLETIONS = ["<answer>72</answer>", "so <answer>7</answer> is it", "aaaa"]
COLUMNS = {"answer": ["#### 72", "#### 72", "a"], "level": [1, 2, 3]}


def tunix_rewards(specs: list[RewardSpec]) -> list[float]:
    """The rewards of COMPLETIONS as Tunix's own reward manager computes them (what the GRPO learner calls
    with the batch's prompts, completions, ``mode`` and the dataset's other columns)."""
    from tunix.rl.grpo.grpo_learner import GRPOConfig
    from tunix.rl.reward_manager import SequenceRewardManager

    manager = SequenceRewardManager(rewards.build(specs, "answer"), GRPOConfig())
    info = manager(prompts=["p0", "p1", "p2"], completions=COMPLETIONS, mode="train", **COLUMNS)
    return [float(r) for r in info["rewards"]]


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (RewardSpec(name="mathAnswer"), [1.0, 0.0, 0.0]),
        (RewardSpec(name="exactMatch", weight=0.5), [0.5, 0.0, 0.0]),
        (RewardSpec(name="regex", pattern=r"<answer>\d+</answer>$", weight=2.0), [2.0, 0.0, 0.0]),
        (RewardSpec(name="lengthPenalty", maxLength=10), [-0.9, -1.0, 0.0]),
        (RewardSpec(name="answerCharFraction"), [0.0, 0.0, 1.0]),
    ],
    ids=lambda v: getattr(v, "name", None) or "",
)
def test_builtin_rewards_through_tunix(spec: RewardSpec, expected: list[float]) -> None:
    assert tunix_rewards([spec]) == pytest.approx(expected)


def test_rewards_are_weighted_and_summed() -> None:
    specs = [RewardSpec(name="mathAnswer", weight=2.0), RewardSpec(name="lengthPenalty", maxLength=10)]
    assert tunix_rewards(specs) == pytest.approx([2.0 - 0.9, -1.0, 0.0])


CUSTOM = """
SEEN = []

def score(prompts, completions, **columns):
    SEEN.append((list(prompts), list(completions), columns))
    return [float(level) for level in columns["level"]]

def named_columns_only(prompts, completions, answer):
    return [0.0 for _ in completions]

def answer_required(prompts, completions, answer, **kwargs):
    return [0.0 for _ in completions]
"""


def test_custom_reward_gets_prompts_completions_and_the_other_columns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "team_rewards.py").write_text(CUSTOM)
    monkeypatch.syspath_prepend(str(tmp_path))
    import team_rewards  # the module the trainer imports, found on sys.path as in the image

    got = tunix_rewards([RewardSpec(function="team_rewards:score", weight=3.0)])
    assert got == [3.0, 6.0, 9.0]
    ((prompts, completions, columns),) = team_rewards.SEEN
    assert (prompts, completions) == (["p0", "p1", "p2"], COMPLETIONS)
    assert columns.pop("mode") == "train"  # Tunix's own keyword
    assert {k: list(v) for k, v in columns.items()} == COLUMNS


def test_custom_reward_without_kwargs_is_refused_naming_the_field(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tunix always passes ``mode`` and every column: a function without **kwargs would fail at step 1."""
    (tmp_path / "team_rewards_strict.py").write_text(CUSTOM)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(
        ValueError, match=r"^spec\.rewards\[1\]\.function: team_rewards_strict:named_columns_only"
    ):
        rewards.build(
            [RewardSpec(name="mathAnswer"), RewardSpec(function="team_rewards_strict:named_columns_only")],
            "answer",
        )


# --- Where Tunix calls them: its data thread (RLLearner.executor), not the main thread -----------------------


def in_a_thread(fn: Callable[[], object]) -> object:
    """``fn()`` called from a worker thread, as Tunix's learner calls rewards; its exception re-raised."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(fn).result()


def test_math_answer_off_the_main_thread() -> None:
    """math-verify's timeouts use signal.alarm, which raises ValueError outside the main thread: the reward
    must still score (issue 25's reproduction), and score like in the main thread."""
    completions = ["<answer>62</answer>", "<answer>61</answer>", "<answer>$\\frac{124}{2}$</answer>"]
    got = in_a_thread(lambda: rewards.math_answer(completions, ["#### 62"] * 3))
    assert got == [1.0, 0.0, 1.0]


def test_pathological_answer_times_out_off_the_main_thread() -> None:
    """A tower of powers sympy cannot compare in time scores 0 within math-verify's own timeout (1 s here,
    well under the 16 s after which the trainer would give up on the worker), is counted, and the worker
    answers the next one."""
    verifier = MathVerifier(timeout_s=1)
    try:
        verifier.score([("$1$", "$1$")])  # started: start-up is not what this test times
        started = time.monotonic()
        got = in_a_thread(lambda: verifier.score([("$9^{9^{9^{9}}}$", "$7$"), ("$7$", "$7$")]))
        assert got == [0.0, 1.0]
        assert verifier.timeouts == 1
        assert time.monotonic() - started < 8
    finally:
        verifier.close()


def test_worker_that_does_not_answer_is_replaced() -> None:
    """A computation no signal interrupts: the trainer stops waiting at hard_limit_s, scores 0, kills the
    worker and starts another for the next answer."""
    verifier = MathVerifier(timeout_s=30, hard_limit_s=1)
    try:
        verifier.score([("$1$", "$1$")])  # started (start-up is not counted in hard_limit_s)
        started = time.monotonic()
        assert in_a_thread(lambda: verifier.score([("$9^{9^{9^{9}}}$", "$7$")])) == [0.0]
        assert time.monotonic() - started < 10
        assert verifier.timeouts == 1
        assert verifier.score([("3", "$3$")]) == [1.0]
    finally:
        verifier.close()


def test_worker_failure_raises_instead_of_scoring_0() -> None:
    """An environment problem is not a wrong answer: a worker that dies mid-answer raises."""
    verifier = MathVerifier(timeout_s=30)
    try:
        verifier.score([("$1$", "$1$")])
        proc = verifier._proc
        assert proc is not None
        threading.Timer(0.5, proc.kill).start()
        with pytest.raises(MathVerifyError, match="worker ended"):
            verifier.score([("$9^{9^{9^{9}}}$", "$7$")])
    finally:
        verifier.close()


RAISING = """
def broken(prompts, completions, **columns):
    return [len(c) / columns["missing_column"] for c in completions]

def short(prompts, completions, **columns):
    return [0.0]

def nothing(prompts, completions, **columns):
    return None

def nan(prompts, completions, **columns):
    return [float("nan") for _ in completions]
"""


@pytest.mark.parametrize(
    ("function", "message"),
    [
        (
            "broken",
            r"team_rewards_raising:broken raised KeyError: 'missing_column' \(at .*team_rewards_raising\.py:3 in .*\)",
        ),
        ("short", r"team_rewards_raising:short returned 1 values for 3 completions"),
        ("nothing", r"team_rewards_raising:nothing must return one number per completion, got None"),
        ("nan", r"team_rewards_raising:nan returned nan \(rewards must be finite numbers\)"),
    ],
)
def test_failing_reward_raises_reward_error_naming_the_field(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, function: str, message: str
) -> None:
    """Through Tunix's reward manager in a worker thread: the error names spec.rewards[i] and says why, so
    the trainer can exit 2 (a bug fails the same way on every retry) instead of 1."""
    (tmp_path / "team_rewards_raising.py").write_text(RAISING)
    monkeypatch.syspath_prepend(str(tmp_path))
    specs = [RewardSpec(name="exactMatch"), RewardSpec(function=f"team_rewards_raising:{function}")]
    with pytest.raises(RewardError, match=rf"^spec\.rewards\[1\]: {message}") as caught:
        in_a_thread(lambda: tunix_rewards(specs))
    assert caught.value.field == "spec.rewards[1]"


def test_a_required_parameter_is_checked_against_the_dataset_s_columns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A function with **kwargs and a required ``answer``: fine where the dataset has that column (Tunix
    passes it by name); where it has not, the message names the parameter and the columns, not **kwargs."""
    (tmp_path / "team_rewards_answer.py").write_text(CUSTOM)
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = [RewardSpec(function="team_rewards_answer:answer_required")]
    assert len(rewards.build(spec, "answer", columns=["answer", "level"])) == 1
    assert len(rewards.build(spec, "answer")) == 1  # before the data is loaded: not checked yet
    with pytest.raises(ValueError) as err:
        rewards.build(spec, "solution", columns=["solution"])
    message = str(err.value)
    assert message.startswith(
        "spec.rewards[0].function: team_rewards_answer:answer_required requires answer,"
    )
    assert "(columns: solution)" in message and "**kwargs))" not in message


HANGING = """
import threading

RELEASE = threading.Event()

def wait(prompts, completions, **columns):
    RELEASE.wait()  # never set by the run: a reward stuck on a lock, a socket, a child process
    return [0.0 for _ in completions]
"""


def test_a_reward_past_its_deadline_is_abandoned_naming_the_field_and_the_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through Tunix's reward manager in a worker thread: a call that does not return within
    spec.rewards[i].timeoutSeconds raises RewardError naming the field and the time, and is left running
    (a thread cannot be killed) and counted, so the trainer exits without waiting for it."""
    (tmp_path / "team_rewards_hanging.py").write_text(HANGING)
    monkeypatch.syspath_prepend(str(tmp_path))
    import team_rewards_hanging

    specs = [
        RewardSpec(name="exactMatch"),
        RewardSpec(function="team_rewards_hanging:wait", timeoutSeconds=1),
    ]
    before = rewards.abandoned_calls()
    with pytest.raises(RewardError) as caught:
        in_a_thread(lambda: tunix_rewards(specs))
    assert str(caught.value).startswith(
        "spec.rewards[1]: team_rewards_hanging:wait did not return within 1 s (spec.rewards[1].timeoutSeconds)"
    )
    assert rewards.abandoned_calls() == before + 1
    team_rewards_hanging.RELEASE.set()  # let the abandoned thread end, as the process exit would
    for thread in rewards._ABANDONED:
        thread.join()
    assert rewards.abandoned_calls() == 0
    assert RewardSpec(name="exactMatch").timeoutSeconds == 600
