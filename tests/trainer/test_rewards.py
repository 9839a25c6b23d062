"""Rewards: the built-in math reward with the real math-verify (equivalent answers score 1, others 0); every
built-in, the weights and a custom ``module:function`` reward called through Tunix's own reward manager."""

from __future__ import annotations

from pathlib import Path

import pytest
from rljob_trainer import rewards

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
