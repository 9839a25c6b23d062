"""The built-in math reward with the real math-verify: equivalent answers score 1, others 0."""

from __future__ import annotations

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
