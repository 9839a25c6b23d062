"""A reward that never returns, in real trainer processes (``python -m rljob_trainer``) running real GRPO
steps, where Tunix calls rewards (its learner's data thread): past ``spec.rewards[i].timeoutSeconds`` the
run stops with exit 2 naming the field and the time; a SIGTERM while it waits saves the last finished step
and exits 143 at once, not after the grace period's SIGKILL (issue 43: before, the run hung for ever and
SIGTERM logged "finishing the current step" and nothing followed).

The reward blocks on an event nobody sets, from its N-th call on (call 1 is step 1's), after printing
``REWARD WAITING`` so the test knows the run is inside it. The runs are the GSM8K-format ones of
test_rewards_grpo.py; each test's own timeout is what a hang would hit.
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from rljob_trainer.run import checkpoint

from tests.observability import runs
from tests.trainer.test_rewards_grpo import gsm8k_job

pytestmark = pytest.mark.slow

MIN_GRACE_SECONDS = 30
"""The smallest spec.terminationGracePeriodSeconds: a SIGTERM'd trainer must be gone before it ends."""

BLOCKING = """
import threading

CALLS = []

def score(prompts, completions, **columns):
    CALLS.append(1)
    if len(CALLS) >= {block_from}:
        print("REWARD WAITING", flush=True)
        threading.Event().wait()  # a reward stuck on a lock, a socket, a child process
    return [0.0 for _ in completions]
"""


def start(tmp_path: Path, block_from: int, timeout_s: int, **spec: object) -> subprocess.Popen:
    """The trainer on a GSM8K-format run whose custom reward (spec.rewards[1]) blocks from call ``block_from``."""
    (tmp_path / "team_rewards_blocking.py").write_text(BLOCKING.format(block_from=block_from))
    rewards = [
        {"name": "exactMatch"},
        {"function": "team_rewards_blocking:score", "timeoutSeconds": timeout_s},
    ]
    doc = gsm8k_job(tmp_path, rewards, **spec)
    config = tmp_path / "rljob.yaml"
    config.write_text(yaml.safe_dump(doc))
    path = f"{tmp_path}:{runs.ROOT}:{runs.ROOT / 'trainer'}:{runs.ROOT / 'operator'}"
    return runs.start(config, "--quiet", PYTHONPATH=path)


def sigterm_inside_the_reward(proc: subprocess.Popen, settle: float = 0.0) -> tuple[str, float]:
    """Wait until the run is inside the blocking reward (and ``settle`` seconds more), SIGTERM it; (all
    output, seconds until it ended)."""
    lines: list[str] = []
    try:
        assert runs.wait_for_line(proc, "REWARD WAITING", lines, timeout=600), "".join(lines)
        time.sleep(settle)
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=120)
        return "".join(lines) + rest, time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_a_reward_past_its_deadline_exits_2_naming_the_field_and_the_time(tmp_path: Path) -> None:
    proc = start(tmp_path, block_from=1, timeout_s=3)
    try:
        out, _ = proc.communicate(timeout=600)  # JAX compiles the first rollout before the rewards run
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 2, out[-3000:]
    assert "REWARD WAITING" in out, out[-3000:]
    assert "t stopped: a reward function failed:" in out, out[-3000:]
    assert (
        "  - spec.rewards[1]: team_rewards_blocking:score did not return within 3 s "
        "(spec.rewards[1].timeoutSeconds)"
    ) in out, out[-3000:]
    assert "Traceback" not in out, out[-3000:]


def test_sigterm_inside_a_reward_saves_the_last_finished_step_and_exits_143(tmp_path: Path) -> None:
    """Step 1 finishes (not saved: interval 100); step 2's reward blocks; SIGTERM saves step 1 and exits."""
    ckpt = tmp_path / "ckpt"
    grpo = {"numGenerations": 2, "batchSize": 2, "beta": 0.0, "maxSteps": 3, "seed": 3}
    proc = start(tmp_path, 2, 3600, grpo=grpo, checkpoint={"directory": str(ckpt), "interval": 100})
    out, waited = sigterm_inside_the_reward(proc)
    assert proc.returncode == 143, out[-3000:]
    assert waited < MIN_GRACE_SECONDS, f"took {waited:.1f}s to stop\n{out[-3000:]}"
    assert "SIGTERM during the rollout or rewards of step 2: step 1 is saved; exit 143" in out, out[-3000:]
    assert sorted(p.name for p in ckpt.iterdir() if p.name.isdigit()) == ["1"]
    meta = checkpoint.read_meta(str(ckpt), 1)
    assert (meta["step"], meta["data_position"]["examples"]) == (1, 2)  # resumes at step 2's batch
    assert "Traceback" not in out, out[-3000:]


def test_sigterm_inside_the_first_step_s_reward_exits_143_with_nothing_to_save(tmp_path: Path) -> None:
    """The issue's case: the console still at the first step (compiling), a reward that never returns."""
    ckpt = tmp_path / "ckpt"
    proc = start(tmp_path, 1, 3600, checkpoint={"directory": str(ckpt), "interval": 1})
    out, waited = sigterm_inside_the_reward(proc)
    assert proc.returncode == 143, out[-3000:]
    assert waited < MIN_GRACE_SECONDS, f"took {waited:.1f}s to stop\n{out[-3000:]}"
    assert "SIGTERM before a step finished in this process: nothing to save; exit 143" in out, out[-3000:]
    assert [p.name for p in ckpt.iterdir()] == []  # Orbax made the directory at start; nothing saved in it
    assert "Traceback" not in out, out[-3000:]


def test_sigterm_after_a_step_s_first_update_leaves_within_the_grace_period(tmp_path: Path) -> None:
    """Two updates a step (miniBatchSize 1 of batchSize 2): step 2's second mini-batch reward blocks after
    its first update changed the actor, so step 1's weights are gone and the trainer waits for the step to
    end. It does not wait past the grace period (30 s, less room for a save): exit 143 saying step 2 is
    not saved and the run resumes from step 1, before the kubelet's SIGKILL."""
    ckpt = tmp_path / "ckpt"
    grpo = {"numGenerations": 2, "batchSize": 2, "miniBatchSize": 1, "beta": 0.0, "maxSteps": 3, "seed": 3}
    proc = start(
        tmp_path,
        4,  # calls 1-2: step 1's two mini-batches; 3: step 2's first; 4: its second
        3600,
        grpo=grpo,
        checkpoint={"directory": str(ckpt), "interval": 1},
        terminationGracePeriodSeconds=MIN_GRACE_SECONDS,
    )
    out, waited = sigterm_inside_the_reward(proc, settle=3.0)  # step 2's first update is done by then
    assert proc.returncode == 143, out[-3000:]
    assert 10 <= waited < MIN_GRACE_SECONDS, f"took {waited:.1f}s to stop\n{out[-3000:]}"
    assert "SIGTERM during step 2: it did not finish within " in out, out[-3000:]
    assert (
        "s of the 30 s grace period (spec.terminationGracePeriodSeconds) and is not saved; exit 143: "
        "the run resumes from step 1"
    ) in out, out[-3000:]
    assert sorted(p.name for p in ckpt.iterdir() if p.name.isdigit()) == ["1"]
    assert "Traceback" not in out, out[-3000:]
