"""Every built-in reward through a real GRPO run, where Tunix calls it (its learner's data thread), and a
reward that raises stopping a real trainer process with exit 2 naming the field.

The run: the tiny random Qwen3 with the repository's character-level tokenizer, GSM8K-format rows
(``question``, ``answer`` ending in ``#### N``), 2 steps of 2 prompts x 2 generations. A probe reward records
what Tunix passed and from which thread; the test recomputes each completion's reward from that record,
mathAnswer with math-verify called directly in the main thread, and compares with what the run summed.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from math_verify import parse, verify
from rljob_trainer.run import main as trainer_main
from rljob_trainer.workload import rewards

from rljob.api import parse_rljob
from tests import procs
from tests.trainer.manifests import tiny_rljob
from tests.trainer.test_config_exits import ROOT

pytestmark = pytest.mark.slow

TOKENIZER = ROOT / "examples" / "tiny" / "tokenizer.json"
ROWS = [
    {"question": "3+4=?", "answer": "3+4 = <<3+4=7>>7\n#### 7"},
    {"question": "9-8=?", "answer": "9-8 = <<9-8=1>>1\n#### 1"},
    {"question": "2*3=?", "answer": "2*3 = <<2*3=6>>6\n#### 6"},
    {"question": "8/2=?", "answer": "8/2 = <<8/2=4>>4\n#### 4"},
]
BUILTINS = [  # distinct weights: one built-in scoring wrong cannot be hidden by another
    {"name": "mathAnswer", "weight": 1.0},
    {"name": "exactMatch", "weight": 2.0},
    {"name": "answerCharFraction", "weight": 4.0},
    {"name": "regex", "pattern": r"\d", "weight": 8.0},
    {"name": "lengthPenalty", "maxLength": 8, "weight": 16.0},
]
PROBE = """
import threading

CALLS = []

def record(prompts, completions, **columns):
    CALLS.append((threading.current_thread() is threading.main_thread(), list(completions), list(columns["answer"])))
    return [0.0 for _ in completions]
"""


def gsm8k_job(tmp_path: Path, rewards_spec: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    data = tmp_path / "gsm8k.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    return tiny_rljob(
        **{
            "model.tokenizerPath": str(TOKENIZER),
            "data": {"source": str(data), "promptField": "question", "answerField": "answer"},
            "rewards": rewards_spec,
            "maxTargetLength": 48,
            "rollout": {"engine": "vanilla", "temperature": 1.0},
            "grpo": {"numGenerations": 2, "batchSize": 2, "beta": 0.0, "maxSteps": 2, "seed": 3},
            "metrics": {"port": procs.free_port()},
            **spec,
        }
    )


def expected_reward(completion: str, answer: str) -> float:
    """The weighted sum of BUILTINS for one completion, recomputed here in the main thread."""
    reference = rewards.reference_answer(answer)
    guess = rewards.extract_answer(completion)
    gold, parsed = parse(f"${reference}$"), parse(guess)  # main thread: math-verify's own timeouts work
    math = 1.0 if gold and parsed and verify(gold, parsed) else 0.0
    exact = 1.0 if guess == reference else 0.0
    chars = completion.count(answer) / len(completion) if completion else 0.0
    digit = 1.0 if re.search(r"\d", completion) else 0.0
    penalty = -min(1.0, max(0, len(completion) - 8) / 8)
    return 1 * math + 2 * exact + 4 * chars + 8 * digit + 16 * penalty


def test_every_builtin_reward_in_a_grpo_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "reward_probe.py").write_text(PROBE)
    monkeypatch.syspath_prepend(str(tmp_path))
    import reward_probe

    reward_probe.CALLS.clear()
    job = parse_rljob(gsm8k_job(tmp_path, [*BUILTINS, {"function": "reward_probe:record"}]))
    run = trainer_main.train(job)

    reports = run.recorder.reports
    assert [r.step for r in reports] == [1, 2]
    assert len(reward_probe.CALLS) == 2  # once per step, with the whole group of completions
    for report, (in_main_thread, completions, answers) in zip(reports, reward_probe.CALLS, strict=True):
        assert not in_main_thread  # where Tunix calls rewards: the premise of this test
        assert len(completions) == 2 * 2
        assert all(a.endswith(("#### 7", "#### 1", "#### 6", "#### 4")) for a in answers)
        want = [expected_reward(c, a) for c, a in zip(completions, answers, strict=True)]
        assert report.rewards.tolist() == pytest.approx(want, abs=1e-6), (completions, answers)


RAISING = """
def score(prompts, completions, **columns):
    return [float(c.count(columns["answer"][0])) / 0 for c in completions]
"""


def test_raising_reward_exits_2_naming_the_field(tmp_path: Path) -> None:
    """A bug in a reward fails the same way on every retry: exit 2, the field and the error, no traceback."""
    (tmp_path / "team_rewards_zero.py").write_text(RAISING)
    doc = gsm8k_job(tmp_path, [{"name": "mathAnswer"}, {"function": "team_rewards_zero:score"}])
    (tmp_path / "rljob.yaml").write_text(yaml.safe_dump(doc))
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": f"{tmp_path}:{ROOT}:{ROOT / 'trainer'}"}
    proc = subprocess.run(
        [sys.executable, "-m", "rljob_trainer", "--config", str(tmp_path / "rljob.yaml"), "--quiet"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,  # JAX compiles the first step's rollout before the rewards run
        cwd=ROOT,
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "t stopped: a reward function failed:" in proc.stderr, proc.stderr[-3000:]
    assert re.search(
        r"  - spec\.rewards\[1\]: team_rewards_zero:score raised ZeroDivisionError: float division by zero "
        r"\(at .*team_rewards_zero\.py:3 in .*\)",
        proc.stderr,
    ), proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
